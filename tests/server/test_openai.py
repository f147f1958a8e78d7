#!/usr/bin/env python3
"""test_openai.py - `chatterbox serve` driven by the official `openai` package.

ctest server_openai runs it with the virtual environment's python
(build/venv, made by scripts/test.sh): a missing package is a failure, not
a skip. Arguments: CHATTERBOX_BINARY MODEL_DIR WORK_DIR REF_CLIP.

Checks, on the synthetic Turbo model (tokens capped so each request is a
second or two of audio):
  - audio.speech.create for wav, pcm, flac, mp3 and opus; wav/flac/pcm
    decoded and compared sample for sample with `chatterbox say` for the
    same seed (wav with `say -o x.wav`, flac with `say -o x.flac`, pcm with `say -o -`); mp3 and
    opus decoded with libsndfile, duration within a frame of the wav's;
  - with_streaming_response and stream_format "audio": several chunks,
    equal to `say --stream`; stream_format "sse": delta events whose
    base64 audio concatenates to the same bytes, then a done event;
  - speed 2.0 halves the duration (WSOLA), within 2 %;
  - concurrent requests with fixed seeds equal their solo results;
  - voices: upload a clip (multipart), list it, speak with it, delete it;
  - the API key: a client with the wrong key gets AuthenticationError.
"""
import base64
import ctypes
import ctypes.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import http.client

import openai

BIN, MODEL, WORK, CLIP = sys.argv[1:5]
TEXT = "Hello there, this is a test."
N_TOK = 14  # speech tokens: about half a second of audio each request
KEY = "sk-test-key"
failures = 0
checks = 0


def check(ok, what):
    global failures, checks
    checks += 1
    if not ok:
        failures += 1
    print(("ok   " if ok else "FAIL ") + what, flush=True)


# ---- libsndfile through ctypes: decode any format to int16 ---------------
_sf = ctypes.CDLL(ctypes.util.find_library("sndfile") or "libsndfile.so.1")


class SF_INFO(ctypes.Structure):
    _fields_ = [("frames", ctypes.c_int64), ("samplerate", ctypes.c_int), ("channels", ctypes.c_int),
                ("format", ctypes.c_int), ("sections", ctypes.c_int), ("seekable", ctypes.c_int)]


_sf.sf_open.restype = ctypes.c_void_p
_sf.sf_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(SF_INFO)]
_sf.sf_read_short.restype = ctypes.c_int64
_sf.sf_read_short.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_short), ctypes.c_int64]
_sf.sf_close.argtypes = [ctypes.c_void_p]


def decode(data, name):
    """int16 samples and the rate of an audio file's bytes (libsndfile)."""
    path = os.path.join(WORK, name)
    with open(path, "wb") as f:
        f.write(data)
    info = SF_INFO()
    h = _sf.sf_open(path.encode(), 0x10, ctypes.byref(info))
    if not h:
        return None, 0
    out = []
    buf = (ctypes.c_short * 4096)()
    while True:
        k = _sf.sf_read_short(h, buf, 4096)
        if k <= 0:
            break
        out.extend(buf[:k])
    _sf.sf_close(h)
    return out, info.samplerate


def s16(data):
    return list(memoryview(data).cast("h"))


def raw(method, path, body=None, headers=None):
    """status, headers and body of one request (http.client: no extra deps)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request(method, "/v1" + path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.headers, data


def multipart(fields, files):
    b = "cbxtestboundary7MA4YWxk"
    out = b""
    for k, v in fields.items():
        out += f'--{b}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
    for k, (fn, data, ct) in files.items():
        out += (f'--{b}\r\nContent-Disposition: form-data; name="{k}"; filename="{fn}"\r\n'
                f"Content-Type: {ct}\r\n\r\n").encode() + data + b"\r\n"
    out += f"--{b}--\r\n".encode()
    return out, "multipart/form-data; boundary=" + b


def say(*args, stdout=False):
    cmd = [BIN, "say", TEXT, "--model", MODEL, "--seed", "7", "--max-tokens", str(N_TOK), "-q"] + list(args)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if r.returncode != 0:
        print(r.stderr.decode(), file=sys.stderr)
    return r.stdout if stdout else None


# ---- the server ------------------------------------------------------------
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(os.path.join(WORK, "voices"))
log = []
srv = subprocess.Popen([BIN, "serve", "--model", MODEL, "--port", "0", "--api-key", KEY, "--max-streams", "3",
                        "--voices", os.path.join(WORK, "voices")], stderr=subprocess.PIPE, text=True)
port = None
for line in srv.stderr:
    log.append(line)
    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
    if m:
        port = int(m.group(1))
        break
if port is None:
    print("".join(log), file=sys.stderr)
    sys.exit("server did not start")
threading.Thread(target=lambda: log.extend(srv.stderr), daemon=True).start()
base = f"http://127.0.0.1:{port}/v1"

# the references, made while the server works
refs = {}


def make_refs():
    say("-o", os.path.join(WORK, "say.wav"))
    say("-o", os.path.join(WORK, "say.flac"))
    refs["pcm"] = say("-o", "-", stdout=True)
    say("--stream", "-o", os.path.join(WORK, "say_stream.wav"))


ref_thread = threading.Thread(target=make_refs)
ref_thread.start()

client = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=600)
extra = {"seed": 7, "max_tokens": N_TOK}


def speech(fmt, seed=7, **kw):
    return client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format=fmt,
                                      extra_body={"seed": seed, "max_tokens": N_TOK}, **kw).content


t0 = time.time()
got = {f: speech(f) for f in ("wav", "pcm", "flac", "mp3", "opus")}
print(f"five formats in {time.time() - t0:.1f} s", flush=True)

# streamed: with_streaming_response, stream_format audio
chunks = []
with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="wav",
        extra_body={"seed": 7, "max_tokens": N_TOK, "stream_format": "audio"}) as r:
    check(r.headers.get("transfer-encoding") == "chunked", "stream_format audio is sent chunked")
    for c in r.iter_bytes():
        chunks.append(c)
streamed = b"".join(chunks)

# SSE: parse the events by hand from the raw response
sse_audio = b""
events = []
c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
c.request("POST", "/v1/audio/speech", headers={"Authorization": "Bearer " + KEY, "Content-Type": "application/json"},
          body=json.dumps({"input": TEXT, "voice": "alloy", "response_format": "wav", "stream_format": "sse",
                           **extra}))
r = c.getresponse()
check(r.status == 200 and r.getheader("content-type", "").startswith("text/event-stream"), "sse content type")
for line in r:  # http.client undoes the chunking
    line = line.decode().rstrip("\n")
    if line.startswith("data: "):
        ev = json.loads(line[6:])
        events.append(ev["type"])
        if ev["type"] == "speech.audio.delta":
            sse_audio += base64.b64decode(ev["audio"])
c.close()
check(len(events) >= 2 and events[-1] == "speech.audio.done" and
      all(e == "speech.audio.delta" for e in events[:-1]), f"sse events: {len(events) - 1} deltas then done")
check(sse_audio == streamed, f"sse audio ({len(sse_audio)} B) equals the chunked stream ({len(streamed)} B)")

# speed: WSOLA keeps pitch, halves the duration
fast = speech("pcm", speed=2.0)
ratio = len(fast) / len(got["pcm"])
check(abs(ratio - 0.5) < 0.01, f"speed 2.0: duration ratio {ratio:.4f} (want 0.5 +- 0.01)")

# concurrency: solo results first, then together
solo11 = speech("pcm", seed=11)
together = {}


def one(fmt, s):
    together[(fmt, s)] = speech(fmt, seed=s)


ths = [threading.Thread(target=one, args=a) for a in (("pcm", 7), ("pcm", 11), ("wav", 7))]
for t in ths:
    t.start()
for t in ths:
    t.join()
check(together.get(("pcm", 7)) == got["pcm"] and together.get(("pcm", 11)) == solo11 and
      together.get(("wav", 7)) == got["wav"],
      "3 concurrent requests (pcm seed 7, pcm seed 11, wav seed 7) equal their solo results byte for byte")
check(solo11 != got["pcm"], "different seeds give different audio")

# compare with say
ref_thread.join()
wav, rate = decode(got["wav"], "got.wav")
ref_wav, _ = decode(open(os.path.join(WORK, "say.wav"), "rb").read(), "ref.wav")
check(rate == 24000 and wav is not None and len(wav) > 4800, f"wav: {len(wav or [])} samples at {rate} Hz")
diff = max((abs(a - b) for a, b in zip(wav, ref_wav)), default=-1) if wav and ref_wav else -1
check(wav == ref_wav, f"wav equals `say -o x.wav` (max diff {diff} LSB, {len(wav)} vs {len(ref_wav)} samples)")
flac, _ = decode(got["flac"], "got.flac")
ref_flac, _ = decode(open(os.path.join(WORK, "say.flac"), "rb").read(), "ref.flac")
check(flac == ref_flac and len(flac) == len(wav), "flac decodes to the samples of `say -o x.flac`")
check(s16(got["pcm"]) == s16(refs.get("pcm", b"")), f"pcm equals `say -o -` ({len(got['pcm'])} B)")
for f in ("mp3", "opus"):
    x, r2 = decode(got[f], "got." + f)
    n = len(x or [])
    # encoders pad: allow a frame (1152 samples mp3, 20 ms opus) plus the codec delay
    check(x is not None and r2 == 24000 and abs(n - len(wav)) <= 2400,
          f"{f}: decodable, {n} samples vs {len(wav)} ({len(got[f])} B)")
ref_stream, _ = decode(open(os.path.join(WORK, "say_stream.wav"), "rb").read(), "ref_stream.wav")
st = s16(streamed[44:])
check(streamed[:4] == b"RIFF" and st == ref_stream,
      f"stream_format audio equals `say --stream` ({len(chunks)} chunks, {len(st)} samples)")

# voices: upload, list, speak, delete
h = {"Authorization": "Bearer " + KEY}
h = {"Authorization": "Bearer " + KEY}
clip = open(CLIP, "rb").read()
body, ct = multipart({"name": "tester"}, {"file": ("ref.wav", clip, "audio/wav")})
st_, _, data = raw("POST", "/audio/voices", body, {**h, "Content-Type": ct})
check(st_ == 201, f"voice upload: {st_} {data[:200]}")
check(os.path.exists(os.path.join(WORK, "voices", "tester.voice")), "voice file stored under --voices")
ids = [v["id"] for v in json.loads(raw("GET", "/audio/voices", None, h)[2])["data"]]
check("tester" in ids and "default" in ids and "alloy" in ids, f"voices listed: {len(ids)}")
mine = client.audio.speech.create(model="tts-1", voice="tester", input=TEXT, response_format="pcm",
                                  extra_body=extra).content
check(len(mine) > 0 and mine != got["pcm"], "speech in the uploaded voice differs from the built-in one")
check(raw("POST", "/audio/voices", body, {**h, "Content-Type": ct})[0] == 409, "uploading an existing name: 409")
check(raw("DELETE", "/audio/voices/tester", None, h)[0] == 200, "voice deleted")
check(raw("DELETE", "/audio/voices/tester", None, h)[0] == 404, "deleting it again: 404")

# errors through the client
try:
    openai.OpenAI(base_url=base, api_key="wrong", max_retries=0).audio.speech.create(
        model="tts-1", voice="alloy", input=TEXT)
    check(False, "wrong key refused")
except openai.AuthenticationError as e:
    check(e.status_code == 401, "wrong key: AuthenticationError 401")
try:
    client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="aac")
    check(False, "aac refused")
except openai.BadRequestError as e:
    check("aac" in str(e), "aac: BadRequestError naming aac")
models = [m.id for m in client.models.list()]
check("tts-1" in models and "chatterbox-turbo" in models, f"models: {models}")

srv.terminate()
rc = srv.wait(timeout=120)
time.sleep(0.2)
check(rc == 0, f"SIGTERM: exit status {rc}")
lines = [l for l in log if " /v1/audio/speech " in l]
check(len(lines) >= 12, f"one log line per speech request ({len(lines)})")
print(f"{checks - failures}/{checks} checks passed")
sys.exit(1 if failures else 0)
