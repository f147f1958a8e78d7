#!/usr/bin/env python3
"""soak.py - bounded soak of `chatterbox serve` on loopback (ctest
server_soak runs it for 20 s with 4 clients, also under the sanitizers;
longer runs by hand). Usage:

    tests/server/soak.py CHATTERBOX_BINARY MODEL [CLIENTS=8] [SECONDS=60] [RSS_GROWTH_MIB=192]

Starts the server (--max-streams 2, --queue 4), then CLIENTS threads send,
for SECONDS, a random mix of: whole requests, streamed requests read to the
end, streamed requests cut off after the first bytes (cancellation), SSE,
malformed JSON, unknown voices, oversized bodies, bad methods. Every answer
must be a well-formed HTTP response with an expected status (200, 400,
404, 405, 413, 429). At the end: the server's RSS growth between the first
and the second half of the run (end against the first half's highest),
which must stay under RSS_GROWTH_MIB (ctest: 192; 640 under the
sanitizers, whose quarantine holds freed memory a while),
then SIGTERM and its exit status (0; under ASan, a leak or error report
makes it non-zero). Exit 0 when all held.
"""
import http.client
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time

BIN, MODEL = sys.argv[1:3]
CLIENTS = int(sys.argv[3]) if len(sys.argv) > 3 else 8
SECONDS = float(sys.argv[4]) if len(sys.argv) > 4 else 60
RSS_GROWTH_MIB = float(sys.argv[5]) if len(sys.argv) > 5 else 192

# Under ASan the server's quarantine of freed memory is held to 64 MiB
# (default 256): what it holds shows as RSS growth between the halves and
# made the bound a matter of luck (+447 to +647 MiB measured with the
# default, +422 with 64 MiB). Leaks are still reported at exit (LSan) and
# use after free within the last 64 MiB freed.
env = dict(os.environ)
if "ASAN_OPTIONS" in env and "quarantine_size_mb" not in env["ASAN_OPTIONS"]:
    env["ASAN_OPTIONS"] = ":".join(o for o in (env["ASAN_OPTIONS"], "quarantine_size_mb=64") if o)
srv = subprocess.Popen([BIN, "serve", "--model", MODEL, "--port", "0", "--max-streams", "2", "--queue", "4",
                        "--max-body", "65536", "--quiet"], stderr=subprocess.PIPE, text=True, env=env)
port = None
log = []
for line in srv.stderr:
    log.append(line)
    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
    if m:
        port = int(m.group(1))
        break
if not port:
    sys.exit("server did not start:\n" + "".join(log))
threading.Thread(target=lambda: log.extend(srv.stderr), daemon=True).start()


def rss():
    with open(f"/proc/{srv.pid}/status") as f:
        for l in f:
            if l.startswith("VmRSS:"):
                return int(l.split()[1])
    return 0


counts = {}
bad = []
lock = threading.Lock()


def note(kind, status):
    with lock:
        counts[(kind, status)] = counts.get((kind, status), 0) + 1


def body(**kw):
    d = {"input": "Soak test sentence.", "max_tokens": 16, "seed": random.randint(0, 99)}
    d.update(kw)
    return json.dumps(d)


def client(seed):
    rnd = random.Random(seed)
    end = time.time() + SECONDS
    while time.time() < end:
        kind = rnd.choice(["whole", "stream", "cut", "sse", "badjson", "voice", "big", "method"])
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            if kind == "whole":
                c.request("POST", "/v1/audio/speech", body(response_format=rnd.choice(["wav", "mp3", "opus", "flac"])))
            elif kind in ("stream", "cut"):
                c.request("POST", "/v1/audio/speech", body(stream_format="audio", response_format="pcm",
                                                           max_tokens=60 if kind == "cut" else 16))
            elif kind == "sse":
                c.request("POST", "/v1/audio/speech", body(stream_format="sse", response_format="pcm"))
            elif kind == "badjson":
                c.request("POST", "/v1/audio/speech", '{"input": "x", ' + "x" * rnd.randint(0, 50))
            elif kind == "voice":
                c.request("POST", "/v1/audio/speech", body(voice="nobody" + str(rnd.randint(0, 9))))
            elif kind == "big":
                c.request("POST", "/v1/audio/speech", "{" + " " * 70000 + "}")
            else:
                c.request("PUT", "/v1/audio/speech", "")
            r = c.getresponse()
            if kind == "cut" and r.status == 200:
                r.read(100)
                c.sock.shutdown(socket.SHUT_RDWR)
                c.close()
                note(kind, 200)
                continue
            data = r.read()
            ok = {"whole": (200, 429), "stream": (200, 429), "sse": (200, 429), "cut": (429,),
                  "badjson": (400,), "voice": (400,), "big": (413,), "method": (405,)}[kind]
            if r.status not in ok or (r.status == 200 and not data) or \
                    (r.status != 200 and b'"error"' not in data):
                bad.append(f"{kind}: {r.status} {data[:120]!r}")
            note(kind, r.status)
            c.close()
        except (ConnectionError, http.client.HTTPException, OSError) as e:
            if kind != "big":  # the server may close an oversized upload early
                bad.append(f"{kind}: {type(e).__name__} {e}")
            note(kind, "closed")
        if rnd.random() < 0.2:
            time.sleep(rnd.random())


ths = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
for t in ths:
    t.start()
# the first half's highest RSS (sampled): working memory reaches its
# plateau there; the second half must not climb past it (a leak would)
rss_mid, t_half = 0, time.time() + SECONDS / 2
while time.time() < t_half:
    rss_mid = max(rss_mid, rss())
    time.sleep(0.25)
for t in ths:
    t.join()
rss_end = rss()
if rss_end - rss_mid > RSS_GROWTH_MIB * 1024:
    bad.append(f"RSS grew by {(rss_end - rss_mid) / 1024:.1f} MiB in the second half (bound {RSS_GROWTH_MIB:g} MiB)")
srv.terminate()
rc = srv.wait(timeout=120)
time.sleep(0.3)
print("requests:", ", ".join(f"{k}/{s}={n}" for (k, s), n in sorted(counts.items(), key=str)))
print(f"RSS {rss_mid / 1024:.1f} MiB at most in the first half, {rss_end / 1024:.1f} MiB at the end "
      f"({(rss_end - rss_mid) / 1024:+.1f} MiB, bound +{RSS_GROWTH_MIB:g} MiB)")
print(f"exit status {rc}")
for b in bad[:20]:
    print("BAD", b)
report = "".join(l for l in log if not l.startswith("serve: "))
if rc or "Sanitizer" in report or "runtime error" in report:
    print(report[:20000])
    rc = rc or 1
sys.exit(1 if bad or rc else 0)
