/* parity_english_vc.c - voice conversion (pipeline/vc.h) vs upstream
 * ChatterboxVC.generate (vc.py) on the synthetic english checkpoint.
 *
 * Fixtures: tests/data/english/vc_*.npy, written by tools/dev/vc_oracle.py
 * (upstream from_local() on shared/oracle/synth.py's checkpoint, shared
 * RNG seed 42 per generate() call, Perth replaced by identity; see
 * tests/data/english/README.md). Scenario:
 *   source   ref_voice_16k.wav[:2 s] (16 kHz: no resampling)
 *   builtin  target = conds.pt "gen" (250 prompt tokens, 500 frames)
 *   clip     target = ref_voice_24k.wav[:3 s] through set_target_voice
 *   source24 ref_voice_24k.wav[:2 s], tokens only (librosa soxr_hq -> 16 kHz)
 * Checks and tolerances:
 *   - source tokens: exactly equal (the brief's bar; measured equal)
 *   - clip target: prompt tokens exactly equal, prompt mel rel 2e-5 and
 *     x-vector rel 1e-5 (the bounds of parity_english_voice)
 *   - output waveforms: rel 1e-2, as parity_turbo_s3gen_wav (the HiFT sine
 *     source integrates f0 over the utterance, fixtures/README.md)
 *   - the 24 kHz source's tokens: at least 98% equal (a resampler port;
 *     the bar of the voice parity tests' tokens on another stack)
 * The clip-target conversion runs through the public API (cbx_model_load
 * of the english directory, cbx_voice_load, cbx_convert_voice).
 * Two tests: parity_english_vc (tokens, clip target, refusals; one S3Gen
 * run of 10 CFG steps over 250 frames, ~25 s on 2 cores) and, with
 * --builtin, parity_english_vc_builtin (the built-in target: 600 frames,
 * ~60 s on 2 cores; labelled slow). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chatterbox.h"
#include "core/backend.h"
#include "io/audio.h"
#include "io/npy.h"
#include "pipeline/vc.h"
#include "testutil.h"

#define VARIANT "english"
#define WAV_TOL 1e-2

static struct npy load(const char *name) { return test_fixture(VARIANT, name); }

/* Equal token lists; prints the count of differences. min_frac < 1 allows
 * that share of positions to differ. */
static void check_tokens(const char *what, const int32_t *got, int64_t n, const struct npy *want, double min_frac)
{
    const int32_t *w = want->data;
    const int64_t nw = test_numel(want);
    int64_t same = 0;
    for (int64_t i = 0; i < n && i < nw; i++) same += got[i] == w[i];
    const double frac = nw ? (double)same / (double)nw : 0;
    const bool ok = n == nw && frac >= min_frac;
    printf("%-48s n=%lld want=%lld equal=%lld (%.1f%%, need %.0f%%) %s\n", what, (long long)n, (long long)nw,
           (long long)same, 100 * frac, 100 * min_frac, ok ? "PASS" : "FAIL");
    CHECK(ok, "%s: %lld of %lld tokens equal", what, (long long)same, (long long)nw);
}

/* The first n samples of tests/data/<name> (int16 / 32768). */
static bool read_cut(const char *name, int rate, int64_t n, struct audio *a)
{
    if (!test_read_audio(name, rate, a)) return false;
    CHECK(a->n >= n, "%s: %lld samples, want at least %lld", name, (long long)a->n, (long long)n);
    if (a->n < n) return false;
    a->n = n;
    return true;
}

/* A 16-bit mono wav of x (values k / 32768, written back exactly). */
static bool write_wav16(const char *path, const float *x, int64_t n, int rate)
{
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    uint8_t h[44];
    const uint32_t data = (uint32_t)(2 * n), br = (uint32_t)(2 * rate);
    const uint32_t v[] = {36 + data, 16, 0x00010001u, (uint32_t)rate, br, 0x00100002u, data};
    memcpy(h, "RIFF", 4);
    memcpy(h + 8, "WAVEfmt ", 8);
    memcpy(h + 36, "data", 4);
    const int at[] = {4, 16, 20, 24, 28, 32, 40};
    for (int k = 0; k < 7; k++)
        for (int b = 0; b < 4; b++) h[at[k] + b] = (uint8_t)(v[k] >> (8 * b));
    bool ok = fwrite(h, 1, 44, f) == 44;
    for (int64_t i = 0; ok && i < n; i++) {
        const int16_t s = (int16_t)lrintf(x[i] * 32768.0f);
        const uint8_t b[2] = {(uint8_t)(s & 0xff), (uint8_t)((uint16_t)s >> 8)};
        ok = fwrite(b, 1, 2, f) == 2;
    }
    return fclose(f) == 0 && ok;
}

static void check_wav(const char *what, const float *pcm, int64_t n, const struct npy *want)
{
    CHECK(n == test_numel(want), "%s: %lld samples, want %lld", what, (long long)n, (long long)test_numel(want));
    if (pcm && n == test_numel(want)) check_close(what, pcm, want->data, (size_t)n, 0, WAV_TOL);
}

int main(int argc, char **argv)
{
    const bool builtin = argc > 1 && !strcmp(argv[1], "--builtin");
    char err[ERR_MAX] = "";
    const double t0 = test_now();
    struct vc_model *vm = NULL;
    cbx_status rc = vc_model_load(test_model_dir(VARIANT), -1, test_backend_name(), &vm, err);
    CHECK(rc == CBX_OK, "vc_model_load %s: %s", test_model_dir(VARIANT), err);
    if (rc != CBX_OK) return test_summary();
    struct backend *be = test_compute_backend(0);
    struct npy tok = load("vc_source_tokens"), tok24 = load("vc_source24_tokens"),
               bemb = load("vc_builtin_embedding"), btok = load("vc_builtin_prompt_tokens"),
               bwav = load("vc_builtin_wav"), ctok = load("vc_clip_prompt_tokens"),
               cmel = load("vc_clip_prompt_mel"), cemb = load("vc_clip_embedding"), cwav = load("vc_clip_wav");
    struct audio src = {0}, src24 = {0}, clip = {0};
    if (!read_cut("ref_voice_16k.wav", 16000, 2 * 16000, &src) || !read_cut("ref_voice_24k.wav", 24000, 2 * 24000, &src24) ||
        !read_cut("ref_voice_24k.wav", 24000, 3 * 24000, &clip))
        return test_summary();
    const struct vc_params p = {42, 0, false};

    /* 1. the source's speech tokens (librosa.load at 16 kHz, s3gen.tokenizer) */
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    rc = vc_source_tokens(vm, be, &src, "source", &ids, &n_ids, err);
    CHECK(rc == CBX_OK, "vc_source_tokens: %s", err);
    if (rc == CBX_OK) check_tokens("parity_english_vc source tokens (16 kHz)", ids, n_ids, &tok, 1.0);
    free(ids);
    ids = NULL;
    rc = vc_source_tokens(vm, be, &src24, "source24", &ids, &n_ids, err);
    CHECK(rc == CBX_OK, "vc_source_tokens 24 kHz: %s", err);
    if (rc == CBX_OK) check_tokens("parity_english_vc source tokens (24 kHz, resampled)", ids, n_ids, &tok24, 0.98);
    free(ids);
    ids = NULL;

    float *pcm = NULL;
    int64_t n_pcm = 0;
    double t = 0;
    if (builtin) {
        /* 2. the built-in voice: conds.pt "gen" as upstream's from_local reads it */
        const struct conds *b = vc_model_voice(vm);
        CHECK(b != NULL, "built-in voice: %s", vc_model_no_voice_reason(vm));
        if (b) {
            check_tokens("parity_english_vc built-in prompt_token", b->prompt_token, b->n_prompt_token, &btok, 1.0);
            check_close("parity_english_vc built-in embedding", b->embedding, bemb.data, 192, 0, 0);
        }
        t = test_now();
        rc = vc_convert(vm, be, &src, "source", NULL, &p, &pcm, &n_pcm, &ids, &n_ids, err);
        CHECK(rc == CBX_OK, "vc_convert (built-in voice): %s", err);
        if (rc == CBX_OK) {
            printf("built-in target: %.1f s\n", test_now() - t);
            check_tokens("parity_english_vc vc_convert tokens", ids, n_ids, &tok, 1.0);
            check_wav("parity_english_vc wav, built-in voice (seed 42)", pcm, n_pcm, &bwav);
            float mx = 0;
            for (int64_t i = 0; i < 480 && i < n_pcm; i++) mx = fmaxf(mx, fabsf(pcm[i]));
            CHECK(mx == 0.0f, "trim_fade: first 20 ms peak %g, want 0", mx);
        }
        free(pcm);
        free(ids);
        pcm = NULL;
        ids = NULL;
        goto done;
    }

    /* 3. a clip as the target (set_target_voice: 24 kHz, embed_ref) */
    char clip_path[1200];
    snprintf(clip_path, sizeof clip_path, "%s/clip24_3s.wav", test_tmpdir("parity_english_vc"));
    CHECK(write_wav16(clip_path, clip.pcm, clip.n, 24000), "write %s", clip_path);
    struct conds tg = {0};
    rc = vc_voice_load(vm, be, clip_path, &tg, err);
    CHECK(rc == CBX_OK, "vc_voice_load %s: %s", clip_path, err);
    if (rc == CBX_OK) {
        check_tokens("parity_english_vc clip prompt_token", tg.prompt_token, tg.n_prompt_token, &ctok, 1.0);
        CHECK(tg.n_prompt_feat == cmel.ne[1], "clip prompt_feat %lld frames, want %lld", (long long)tg.n_prompt_feat,
              (long long)cmel.ne[1]);
        if (tg.n_prompt_feat == cmel.ne[1])
            check_close("parity_english_vc clip prompt_feat", tg.prompt_feat, cmel.data, (size_t)(tg.n_prompt_feat * 80),
                        0, 2e-5);
        check_close("parity_english_vc clip embedding", tg.embedding, cemb.data, 192, 0, 1e-5);
    }
    conds_free(&tg);

    /* 4. the same conversion through the public API (cbx_convert_voice):
     * an english model loads for voice conversion only */
    cbx_model *cm = NULL;
    cbx_context *ctx = NULL;
    cbx_voice *cv = NULL;
    rc = cbx_model_load(test_model_dir(VARIANT), NULL, &cm, err, sizeof err);
    CHECK(rc == CBX_OK && !strcmp(cbx_model_variant(cm), "english"), "cbx_model_load english: %s", err);
    if (rc == CBX_OK && (rc = cbx_context_create(cm, &ctx)) == CBX_OK &&
        (rc = cbx_voice_load(cm, clip_path, &cv, err, sizeof err)) == CBX_OK) {
        cbx_audio out = {0};
        cbx_vc_params vp = cbx_vc_default_params();
        vp.seed = 42;
        t = test_now();
        rc = cbx_convert_voice(ctx, cv, src.pcm, (size_t)src.n, src.sample_rate, &vp, &out);
        CHECK(rc == CBX_OK && out.sample_rate == 24000, "cbx_convert_voice (clip target): %s",
              cbx_context_errmsg(ctx));
        if (rc == CBX_OK) {
            printf("clip target (API): %.1f s\n", test_now() - t);
            check_wav("parity_english_vc wav, clip target (seed 42)", out.samples, (int64_t)out.n, &cwav);
        }
        cbx_audio_free(&out);
        /* the same english model handle also speaks (the engine loads
         * English; VC's part came on first use): a few tokens in the clip
         * voice */
        cbx_synth_params sp = cbx_synth_default_params_for(cm);
        sp.max_tokens = 4;
        sp.split_text = 0;
        rc = cbx_synthesize(ctx, cv, "Hello.", &sp, NULL, NULL, &out);
        CHECK(rc == CBX_OK && out.n > 0, "cbx_synthesize on the english model: rc %d '%s'", rc,
              cbx_context_errmsg(ctx));
        cbx_audio_free(&out);
        /* refusals of the API: bad args */
        rc = cbx_convert_voice(ctx, cv, src.pcm, 4000, 16000, NULL, &out);
        CHECK(rc == CBX_ERR_INVALID_ARG && !out.samples && strstr(cbx_context_errmsg(ctx), "at least"),
              "cbx_convert_voice of 0.25 s: rc %d '%s'", rc, cbx_context_errmsg(ctx));
        rc = cbx_convert_voice(ctx, cv, NULL, 0, 16000, NULL, &out);
        CHECK(rc == CBX_ERR_INVALID_ARG, "cbx_convert_voice without samples: rc %d", rc);
    } else {
        CHECK(0, "API setup: %s", err);
    }
    cbx_voice_free(cv);
    cbx_context_free(ctx);
    cbx_model_free(cm);

    /* 5. refusals: too short a source, a target without an S3Gen part */
    struct audio tiny = src;
    tiny.n = 4000; /* 0.25 s */
    rc = vc_convert(vm, be, &tiny, "tiny", NULL, &p, &pcm, &n_pcm, NULL, NULL, err);
    CHECK(rc == CBX_ERR_INVALID_ARG && !pcm && strstr(err, "at least"), "0.25 s source: rc %d, '%s'", rc, err);
    struct conds empty = {0};
    rc = vc_convert(vm, be, &src, "source", &empty, &p, &pcm, &n_pcm, NULL, NULL, err);
    CHECK(rc == CBX_ERR_FORMAT && !pcm && strstr(err, "S3Gen part"), "target without gen: rc %d, '%s'", rc, err);

done:
    printf("total %.1f s\n", test_now() - t0);
    io_audio_free(&src);
    io_audio_free(&src24);
    io_audio_free(&clip);
    io_npy_free(&tok);
    io_npy_free(&tok24);
    io_npy_free(&bemb);
    io_npy_free(&btok);
    io_npy_free(&bwav);
    io_npy_free(&ctok);
    io_npy_free(&cmel);
    io_npy_free(&cemb);
    io_npy_free(&cwav);
    backend_free(be);
    vc_model_free(vm);
    return test_summary();
}
