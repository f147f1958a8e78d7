/* parity_turbo_ve.c - VoiceEncoder (voice_encoder.c) vs upstream fixtures:
 * VoiceEncoder.embeds_from_wavs([ref16], 16000) on the synthetic Turbo
 * weights. Each stage is fed the fixture's own input:
 *   1. librosa.effects.trim interval of ref_voice_16k.wav (exact);
 *   2. melspectrogram of the fixture-trimmed wav vs ve_mel;
 *   3. partial embeddings and the utterance embedding from ve_mel;
 *   4. the whole chain from the wav (ve_embed), with its run time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/backend.h"
#include "io/audio.h"
#include "io/model_dir.h"
#include "io/npy.h"
#include "testutil.h"
#include "voice/voice_encoder.h"

#define VARIANT "turbo"

static struct npy load(const char *name) { return test_fixture(VARIANT, name); }

int main(void)
{
    char err[ERR_MAX] = "";
    struct voice_encoder *ve = NULL;
    struct backend *cpu = test_compute_backend(2);
    struct audio wav = {0};
    float *mel = NULL, *pe = NULL;
    CHECK(cpu != NULL, "cpu backend");
    struct model_dir *md = test_open_model_dir(VARIANT);
    if (!md || !cpu) return test_summary();
    struct weights w = weights_from_model_dir(md, MODEL_VE);
    cbx_status rc = ve_load(&ve, &w, test_backend(), err);
    CHECK(rc == CBX_OK, "ve_load: %s", err);
    if (!test_read_audio("ref_voice_16k.wav", 16000, &wav) || !ve) goto done;

    struct npy want_trim = load("ve_trim_interval"), want_mel = load("ve_mel"),
               want_pe = load("ve_partial_embeds"), want_emb = load("ve_embedding");

    /* 1. trim interval */
    int64_t s, e;
    ve_trim(wav.pcm, wav.n, &s, &e);
    const int32_t *ti = want_trim.data;
    bool same = s == ti[0] && e == ti[1];
    printf("%-48s got [%lld, %lld) want [%d, %d) %s\n", "ve trim interval", (long long)s,
           (long long)e, ti[0], ti[1], same ? "PASS" : "FAIL");
    CHECK(same, "trim interval differs");

    /* 2. mel of the fixture-trimmed wav */
    int64_t frames = 0;
    rc = ve_melspec(cpu, wav.pcm + ti[0], ti[1] - ti[0], &mel, &frames, err);
    CHECK(rc == CBX_OK && frames == want_mel.ne[0], "ve_melspec: %lld frames, want %lld (%s)",
          (long long)frames, (long long)want_mel.ne[0], err);
    if (rc == CBX_OK && frames == want_mel.ne[0])
        check_close("ve_mel", mel, want_mel.data, (size_t)(frames * VE_N_MELS), 0, 1e-5);

    /* 3. partials + LSTM + projection from the fixture mel */
    float emb[VE_EMBED];
    int64_t np = 0;
    rc = ve_embed_mel(ve, cpu, want_mel.data, want_mel.ne[0], emb, &pe, &np, err);
    CHECK(rc == CBX_OK && np == want_pe.ne[0], "ve_embed_mel: %lld partials, want %lld (%s)",
          (long long)np, (long long)want_pe.ne[0], err);
    if (rc == CBX_OK && np == want_pe.ne[0]) {
        check_cosine_rows("ve_partial_embeds (from fixture mel)", pe, want_pe.data, np, VE_EMBED,
                     0.99999);
        check_close("ve_partial_embeds (from fixture mel)", pe, want_pe.data,
                    (size_t)(np * VE_EMBED), 0, 1e-4);
        check_cosine_rows("ve_embedding (from fixture mel)", emb, want_emb.data, 1, VE_EMBED, 0.99999);
    }

    /* 4. the whole chain from the wav */
    float emb2[VE_EMBED];
    rc = ve_embed(ve, cpu, wav.pcm, wav.n, emb2, err); /* warm-up */
    double t0 = test_now();
    if (rc == CBX_OK) rc = ve_embed(ve, cpu, wav.pcm, wav.n, emb2, err);
    double t1 = test_now();
    CHECK(rc == CBX_OK, "ve_embed: %s", err);
    if (rc == CBX_OK) {
        check_cosine_rows("ve_embedding (ve_embed from wav)", emb2, want_emb.data, 1, VE_EMBED, 0.99999);
        printf("ve_embed: %.1f ms for %.2f s of audio (2 threads)\n", 1e3 * (t1 - t0),
               (double)wav.n / wav.sample_rate);
    }
    /* the ref backend runs the same model code (on host weights) */
    if (test_backend()->host) {
        rc = ve_embed_mel(ve, backend_ref(), want_mel.data, want_mel.ne[0], emb2, NULL, NULL, err);
        CHECK(rc == CBX_OK, "ve_embed_mel (ref backend): %s", err);
        if (rc == CBX_OK)
            check_cosine_rows("ve_embedding (ref backend)", emb2, want_emb.data, 1, VE_EMBED, 0.99999);
    } else {
        printf("ref-backend run: not with weights on %s\n", test_backend()->name);
    }
    /* too little audio is an error, not a crash */
    rc = ve_embed(ve, cpu, wav.pcm + ti[0] + 1000, 150, emb2, err);
    CHECK(rc == CBX_ERR_INVALID_ARG, "150 samples refused: %s", err);

    io_npy_free(&want_trim);
    io_npy_free(&want_mel);
    io_npy_free(&want_pe);
    io_npy_free(&want_emb);
done:
    free(mel);
    free(pe);
    io_audio_free(&wav);
    ve_free(ve);
    model_dir_close(md);
    backend_free(cpu);
    return test_summary();
}
