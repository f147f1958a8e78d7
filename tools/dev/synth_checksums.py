#!/usr/bin/env python3
"""synth_checksums.py - reference checksums of every synthetic tensor.

Dev tool (not part of the product). Regenerates every tensor of every
manifest in data/manifests/ and of every variant's conds.pt with the
REFERENCE generator, oracle/synthspec.py (+ the recipe buffers from
data/buffers/), and writes tests/data/synth/checksums.json, which
tests/io/test_synth.c compares the C generator against.

    python3 tools/dev/synth_checksums.py [--oracle /work/shared/oracle]
                                         [--seed 0] [-o tests/data/synth/checksums.json]

Needs numpy only (pip install --user numpy).

Checksum "mixsum64" of a tensor's little-endian bytes (chosen because it is
a sum, so the C test can compute it in parallel over chunks, and it is
vectorisable in numpy; FNV-1a over 12 GB of bytes is not):
    pad the bytes with zeros to a multiple of 8; w_j = j-th little-endian u64
    h = nbytes + sum_j mix(w_j XOR (j * 0xD1B54A32D192ED03))   (mod 2^64)
    checksum = mix(h)
where mix is the splitmix64 finaliser of spec/synthetic-weights.md §3.
"""
import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MASK64 = (1 << 64) - 1
WORD_MUL = 0xD1B54A32D192ED03
CHUNK = 1 << 22  # words per checksum chunk

# conds.pt tensors (spec §6); P = 375 for turbo/nano, 150 otherwise.
CONDS_PLEN = {"turbo": 375, "nano": 375, "english": 150, "mtl-v2": 150, "mtl-v3": 150}


def conds_spec(plen):
    tp = 250
    return [
        dict(name="conds.t3.speaker_emb", shape=[1, 256], dtype="float32", scale=0.1, offset=0.0),
        dict(name="conds.t3.cond_prompt_speech_tokens", shape=[1, plen], dtype="int64", int_range=[0, 6561]),
        dict(name="conds.gen.prompt_token", shape=[1, tp], dtype="int64", int_range=[0, 6561]),
        dict(name="conds.gen.prompt_feat", shape=[1, 2 * tp, 80], dtype="float32", scale=3.0, offset=-6.0),
        dict(name="conds.gen.embedding", shape=[1, 192], dtype="float32", scale=1.0, offset=0.0),
    ]


def mix(z):
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def mix_int(z):
    return int(mix(np.array([z & MASK64], dtype=np.uint64))[0])


class Summer:
    """Streams byte chunks (each a multiple of 8 bytes except the last)."""

    def __init__(self):
        self.h = 0
        self.nbytes = 0
        self.word = 0

    def add(self, b: bytes):
        assert self.nbytes % 8 == 0, "only the last chunk may be unaligned"
        self.nbytes += len(b)
        if len(b) % 8:
            b = b + b"\0" * (8 - len(b) % 8)
        w = np.frombuffer(b, dtype="<u8")
        with np.errstate(over="ignore"):
            j = np.arange(self.word, self.word + len(w), dtype=np.uint64) * np.uint64(WORD_MUL)
        self.h = (self.h + int(mix(w ^ j).sum(dtype=np.uint64))) & MASK64
        self.word += len(w)

    def digest(self):
        return mix_int(self.h + self.nbytes)


def tensor_checksum(entry, seed, synthspec):
    shape = entry["shape"]
    n = int(np.prod(shape)) if shape else 1
    s = Summer()
    if "recipe" in entry:
        npy = entry["recipe"]["npy"]  # "data/buffers/..." relative to the data root's parent
        a = np.load(os.path.join(ROOT, npy)).astype(np.float32)
        assert list(a.shape) == list(shape), (entry["name"], a.shape, shape)
        s.add(a.astype("<f4").tobytes())
    elif entry.get("zeros"):
        item = 8 if entry["dtype"] == "int64" else 4
        s.add(b"\0" * (n * item))
    elif "int_range" in entry:
        lo, hi = entry["int_range"]
        v = synthspec.synth_int(entry["name"], n, lo, hi, seed).astype("<i8")
        s.add(v.tobytes())
    else:
        assert entry["dtype"] == "float32", entry
        v = synthspec.synth_float(entry["name"], n, entry["scale"], entry["offset"], seed)
        b = v.astype("<f4").tobytes()
        step = 8 * CHUNK
        for a in range(0, len(b), step):
            s.add(b[a:a + step])
    return "%016x" % s.digest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--oracle", default="/work/shared/oracle")
    ap.add_argument("--seed", type=int, default=0, help="global seed")
    ap.add_argument("-o", "--output", default=os.path.join(ROOT, "tests", "data", "synth", "checksums.json"))
    ap.add_argument("--only", default="", help="comma list of manifest files (debugging)")
    args = ap.parse_args()
    sys.path.insert(0, args.oracle)
    import synthspec  # noqa: E402

    # Self-check of the checksum against the spec's test vector values.
    assert synthspec.tensor_key("speech_head.weight") == 0x9147E3129ED14EDC

    mdir = os.path.join(ROOT, "data", "manifests")
    only = set(x for x in args.only.split(",") if x)
    out = {
        "algorithm": "mixsum64 (see tools/dev/synth_checksums.py)",
        "global_seed": args.seed,
        "files": {},
        "conds": {},
    }
    for fn in sorted(os.listdir(mdir)):
        if not fn.endswith(".json"):
            continue
        man = json.load(open(os.path.join(mdir, fn)))
        if only and man["file"] not in only:
            continue
        seed = (args.seed ^ int(man.get("seed", 0))) & MASK64
        sums = []
        for e in man["tensors"]:
            sums.append(tensor_checksum(e, seed, synthspec))
        out["files"][man["file"]] = {"seed": seed, "num_tensors": len(sums), "checksums": sums}
        print("%s: %d tensors" % (man["file"], len(sums)), flush=True)
    for variant, plen in CONDS_PLEN.items():
        out["conds"][variant] = {e["name"]: tensor_checksum(e, args.seed & MASK64, synthspec)
                                 for e in conds_spec(plen)}
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", args.output)


if __name__ == "__main__":
    main()
