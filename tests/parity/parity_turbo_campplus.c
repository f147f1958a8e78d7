/* parity_turbo_campplus.c - CAMPPlus x-vector (campplus.c) vs upstream
 * fixtures on the synthetic Turbo S3Gen weights (speaker_encoder.*):
 *   1. Kaldi fbank of ref_voice_16k.wav (the ref16[:10 s] of embed_ref)
 *      vs campplus_fbank (before mean subtraction);
 *   2. the network alone, fed the fixture fbank, vs campplus_embedding;
 *   3. the whole chain from the wav (campplus_embed), with its run time,
 *      and the same model code on the ref backend (cpu vs ref, 150 frames).
 * On the synthetic weights the embedding is nearly constant: a wrong
 * segment length in the CAM pooling or a wrong pre-emphasis still gives a
 * cosine of 0.999995, so the cosine alone cannot fail; the max-abs check
 * (rel 1e-4; such bugs give 1e-3) is the one that does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/backend.h"
#include "io/audio.h"
#include "io/model_dir.h"
#include "io/npy.h"
#include "testutil.h"
#include "voice/campplus.h"

#define VARIANT "turbo"

static struct npy load(const char *name) { return test_fixture(VARIANT, name); }

/* an x-vector against the fixture: cosine, and max abs (the check that
 * can fail on these weights, see above) */
static void check_embedding(const char *what, const float *got, const float *want)
{
    check_cosine_rows(what, got, want, 1, CAMPPLUS_EMBED, 0.99999);
    check_close(what, got, want, CAMPPLUS_EMBED, 0, 1e-4);
}

int main(void)
{
    char err[ERR_MAX] = "";
    struct campplus *cp = NULL;
    struct backend *cpu = test_compute_backend(2);
    struct audio wav = {0};
    float *fb = NULL;
    CHECK(cpu != NULL, "cpu backend");
    struct model_dir *md = test_open_model_dir(VARIANT);
    if (!md || !cpu) return test_summary();
    struct weights w = weights_from_model_dir(md, MODEL_S3GEN);
    cbx_status rc = campplus_load(&cp, &w, test_backend(), err);
    CHECK(rc == CBX_OK, "campplus_load: %s", err);
    if (!test_read_audio("ref_voice_16k.wav", 16000, &wav) || !cp) goto done;
    struct npy want_fb = load("campplus_fbank"), want_emb = load("campplus_embedding");
    int64_t n = wav.n < 160000 ? wav.n : 160000; /* ref16[:10 s] */

    /* 1. Kaldi fbank */
    int64_t frames = 0;
    rc = kaldi_fbank(wav.pcm, n, CAMPPLUS_FEAT_DIM, &fb, &frames, err);
    CHECK(rc == CBX_OK && frames == want_fb.ne[0], "kaldi_fbank: %lld frames, want %lld (%s)",
          (long long)frames, (long long)want_fb.ne[0], err);
    if (rc == CBX_OK && frames == want_fb.ne[0])
        check_close("campplus_fbank", fb, want_fb.data, (size_t)(frames * CAMPPLUS_FEAT_DIM), 0,
                    1e-4);

    /* 2. the network on the fixture fbank */
    float emb[CAMPPLUS_EMBED];
    rc = campplus_embed_fbank(cp, cpu, want_fb.data, want_fb.ne[0], emb, err);
    CHECK(rc == CBX_OK, "campplus_embed_fbank: %s", err);
    if (rc == CBX_OK) check_embedding("campplus_embedding (from fixture fbank)", emb, want_emb.data);

    /* 3. the whole chain from the wav */
    double t0 = test_now();
    rc = campplus_embed(cp, cpu, wav.pcm, n, emb, err);
    double t1 = test_now();
    CHECK(rc == CBX_OK, "campplus_embed: %s", err);
    if (rc == CBX_OK) {
        check_embedding("campplus_embedding (campplus_embed from wav)", emb, want_emb.data);
        t0 = test_now();
        rc = campplus_embed(cp, cpu, wav.pcm, n, emb, err);
        t1 = test_now();
        printf("campplus_embed: %.1f ms for %.2f s of audio (2 threads, second run)\n",
               1e3 * (t1 - t0), (double)n / wav.sample_rate);
    }
    /* the ref backend runs the same model code (on the first 150 frames:
     * its naive loops are slow), against the cpu backend */
    float emb_ref[CAMPPLUS_EMBED];
    if (!test_backend()->host) {
        printf("ref-backend comparison: not with weights on %s\n", test_backend()->name);
    } else {
        rc = campplus_embed_fbank(cp, backend_ref(), want_fb.data, 150, emb_ref, err);
        CHECK(rc == CBX_OK, "campplus_embed_fbank (ref backend): %s", err);
        if (rc == CBX_OK) rc = campplus_embed_fbank(cp, cpu, want_fb.data, 150, emb, err);
        CHECK(rc == CBX_OK, "campplus_embed_fbank (150 frames): %s", err);
        if (rc == CBX_OK)
            check_close("campplus_embedding, 150 frames: cpu vs ref backend", emb, emb_ref,
                        CAMPPLUS_EMBED, 0, 1e-5);
    }
    /* too little audio is an error, not a crash */
    rc = campplus_embed(cp, cpu, wav.pcm, 399, emb, err);
    CHECK(rc == CBX_ERR_INVALID_ARG, "399 samples refused: %s", err);

    io_npy_free(&want_fb);
    io_npy_free(&want_emb);
done:
    free(fb);
    io_audio_free(&wav);
    campplus_free(cp);
    model_dir_close(md);
    backend_free(cpu);
    return test_summary();
}
