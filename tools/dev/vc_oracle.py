"""vc_oracle.py - reference fixtures for voice conversion (tests/data/english/vc_*.npy).

Runs upstream ChatterboxVC (chatterbox vc.py, resemble-ai/chatterbox at 5de7a54,
NOT part of this repository) through its own from_local() on the synthetic english
checkpoint of shared/spec/synthetic-weights.md (written by shared/oracle/synth.py,
global weight seed 0), with every run-time random draw routed to the shared RNG
(shared/oracle/rng.py, seed 42 per generate() call) and Perth replaced by an
identity stand-in (the recorded wav is the one generate() would watermark).

    python tools/dev/vc_oracle.py --upstream DIR/src/chatterbox --out tests/data/english

Needs a Python environment with torch, torchaudio, librosa 0.11, diffusers 0.29,
conformer 0.3.2, einops, omegaconf, s3tokenizer, safetensors, soundfile, soxr, scipy
(see shared/oracle/README.md). Scenario (each upstream call exactly as a user makes it):
  source   = ref_voice_16k.wav[:2 s] (written as a 16-bit wav, so librosa.load reads
             the same int16 / 32768 samples; 16 kHz: no resampling)
  source24 = ref_voice_24k.wav[:2 s] (librosa.load resamples it with soxr_hq)
  builtin  = vc.generate(source) with the checkpoint's conds.pt "gen" voice
  clip     = vc.generate(source, target_voice_path=ref_voice_24k.wav[:3 s])
             (set_target_voice: librosa.load at 24 kHz, embed_ref with torchaudio's
             24 -> 16 kHz Resample)
"""
import argparse
import os
import subprocess
import sys
import tempfile

ORACLE = os.environ.get("CBX_ORACLE", "/work/shared/oracle")
FIX = os.environ.get("CBX_FIXTURES", "/work/shared/fixtures")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True, help="path of upstream src/chatterbox")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--ckpt", help="an existing synthetic english checkpoint (default: write one)")
    ap.add_argument("--source-seconds", type=float, default=2.0)
    ap.add_argument("--clip-seconds", type=float, default=3.0)
    args = ap.parse_args()

    sys.path.insert(0, ORACLE)
    import env
    env.CHATTERBOX_SRC = os.path.realpath(args.upstream)
    env.setup()
    # env.py's import-only onnx stand-in has no __spec__, which torch._dynamo's
    # trace rules (imported by diffusers) look up
    import importlib.machinery
    if "onnx" in sys.modules and getattr(sys.modules["onnx"], "__spec__", None) is None:
        sys.modules["onnx"].__spec__ = importlib.machinery.ModuleSpec("onnx", None)
    import numpy as np
    import soundfile as sf
    import torch
    import rng as rngmod
    from stages import read_wav

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    tmp = tempfile.mkdtemp(prefix="vc_oracle_")
    ckpt = args.ckpt
    if not ckpt:
        ckpt = os.path.join(tmp, "english")
        subprocess.run([sys.executable, os.path.join(ORACLE, "synth.py"), "english", ckpt], check=True)

    sr16, w16 = read_wav(os.path.join(FIX, "ref_voice_16k.wav"))
    sr24, w24 = read_wav(os.path.join(FIX, "ref_voice_24k.wav"))
    assert (sr16, sr24) == (16000, 24000)
    src16 = os.path.join(tmp, "source16.wav")
    src24 = os.path.join(tmp, "source24.wav")
    clip = os.path.join(tmp, "clip24.wav")
    # int16 samples written back unchanged (x * 32768 is exact)
    sf.write(src16, (w16[: int(args.source_seconds * 16000)] * 32768).astype(np.int16), 16000, subtype="PCM_16")
    sf.write(src24, (w24[: int(args.source_seconds * 24000)] * 32768).astype(np.int16), 24000, subtype="PCM_16")
    sf.write(clip, (w24[: int(args.clip_seconds * 24000)] * 32768).astype(np.int16), 24000, subtype="PCM_16")

    from chatterbox.vc import ChatterboxVC
    vc = ChatterboxVC.from_local(ckpt, "cpu")

    unmarked = []

    def identity_watermark(wav, sample_rate=None, **k):
        unmarked.append(np.array(wav, dtype=np.float32))
        return wav
    vc.watermarker.apply_watermark = identity_watermark

    toks = []
    orig_tok = vc.s3gen.tokenizer.forward

    def tok_rec(*a, **k):
        r = orig_tok(*a, **k)
        toks.append(r[0].clone())
        return r
    vc.s3gen.tokenizer.forward = tok_rec

    os.makedirs(args.out, exist_ok=True)

    def save(name, arr):
        arr = arr.detach().cpu().numpy() if torch.is_tensor(arr) else np.asarray(arr)
        # token ids as int32 (embed_ref's prompt_token arrives as float values)
        if name.endswith("tokens"):
            assert (arr == np.round(arr)).all()
        arr = arr.astype(np.int32) if arr.dtype.kind in "iub" or name.endswith("tokens") else arr.astype(np.float32)
        np.save(os.path.join(args.out, name + ".npy"), np.ascontiguousarray(arr))
        print(f"{name}: {arr.shape} {arr.dtype}")

    builtin = dict(vc.ref_dict)

    def run(target=None):
        toks.clear()
        unmarked.clear()
        rng = rngmod.SharedRNG(seed=args.seed)
        with rngmod.patched(rng):
            out = vc.generate(src16, target_voice_path=target)
        # the source's tokens come last (set_target_voice's embed_ref tokenizes the clip first)
        assert len(toks) == (2 if target else 1) and len(unmarked) == 1
        assert np.array_equal(out.squeeze(0).numpy(), unmarked[0])
        return toks[-1], unmarked[0]

    t, wav = run()
    save("vc_source_tokens", t)
    save("vc_builtin_embedding", builtin["embedding"])
    save("vc_builtin_prompt_tokens", builtin["prompt_token"])
    save("vc_builtin_wav", wav[None])

    t2, wav2 = run(clip)
    assert torch.equal(t, t2)
    rd = vc.ref_dict
    save("vc_clip_prompt_tokens", rd["prompt_token"])
    save("vc_clip_prompt_mel", rd["prompt_feat"])
    save("vc_clip_embedding", rd["embedding"])
    save("vc_clip_wav", wav2[None])

    # tokens of the 24 kHz rendition: librosa.load(sr=16000) resamples (soxr_hq)
    import librosa
    a16, _ = librosa.load(src24, sr=16000)
    t24, _ = vc.s3gen.tokenizer(torch.from_numpy(a16).float()[None])
    save("vc_source24_tokens", t24)


if __name__ == "__main__":
    main()
