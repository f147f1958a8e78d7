/* parity_mtl_v2_voice.c - the voice-cloning pipeline with the multilingual
 * (mtl-v2) model, mtl_tts.py prepare_conditionals: like English, the T3
 * prompt is tokenised from the first 6 s of the 16 kHz reference with
 * max_len 150, there is no loudness step and no 5 s minimum, and
 * emotion_adv = exaggeration * ones(1, 1, 1).
 *   1. `voice create --ref16 --no-loudness-norm` against the mtl-v2
 *      fixtures (speaker_emb, 150 T3 prompt tokens, prompt_token,
 *      prompt_feat, CAMPPlus embedding), through the mtl-v2 model dir;
 *   2. the default path (soxr + torchaudio resampling): no loudness
 *      normalisation recorded (mtl has none), --exaggeration 0.7 stored as
 *      emotion_adv, T3 prompt of 150 tokens, S3Gen prompt of 250 tokens
 *      and 500 frames (10 s), finite values;
 *   3. a 3 s clip is accepted (75 T3 tokens), a 0.5 s one refused. */
#define VARIANT "mtl-v2"
#define VOICE_1S_FLOOR
#include "voice_parity.inc"

static bool all_finite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

int main(void)
{
    setup("parity_mtl_v2_voice");
    char args[9000], err[ERR_MAX] = "";
    struct conds c;
    struct conds_meta m;

    /* 1. ref16[:6 s] -> 150 tokens */
    fixture_path(150);

    /* 2. default path */
    snprintf(args, sizeof args, "create '%s' --model '%s' -o '%s' --exaggeration 0.7 --quiet", ref24, MODEL,
             tpath("def.voice"));
    int rc = run(args);
    CHECK(rc == 0, "voice create (default path): exit %d: %s", rc, err_text);
    cbx_status st = rc == 0 ? conds_read_voice(tpath("def.voice"), &c, &m, err) : CBX_ERR_IO;
    CHECK(st == CBX_OK, "read def.voice: %s", st == CBX_OK ? "ok" : err);
    if (st == CBX_OK) {
        printf("default path: variant %s, emotion_adv %g, T3 prompt %lld, prompt tokens %lld, frames %lld, "
               "loudness_norm %d, lufs %g\n",
               m.variant, c.emotion_adv, (long long)c.n_cond_prompt, (long long)c.n_prompt_token,
               (long long)c.n_prompt_feat, m.loudness_norm, m.loudness_lufs);
        CHECK(!strcmp(m.variant, "mtl-v2") && c.emotion_adv == 0.7f && c.n_cond_prompt == 150 &&
                  c.n_prompt_token == 250 && c.n_prompt_feat == 500 && !m.loudness_norm && isnan(m.loudness_lufs) &&
                  m.gain_db == 0,
              "mtl-v2 default path: variant, emotion_adv 0.7, 150/250 tokens, 500 frames, no loudness step");
        CHECK(all_finite(c.speaker_emb, 256) && all_finite(c.embedding, 192) && all_finite(c.prompt_feat, c.n_prompt_feat * 80),
              "default path: finite tensors");
        /* the resamplers (soxr vs the fixture's rendition) move the
         * embeddings only a little: measured cosines printed */
        struct npy ve = load("ve_embedding"), xv = load("campplus_embedding");
        check_cosine_rows("default path speaker_emb vs ve_embedding", c.speaker_emb, ve.data, 1, 256, 0.999);
        check_cosine_rows("default path embedding vs campplus_embedding", c.embedding, xv.data, 1, 192, 0.999);
        io_npy_free(&ve), io_npy_free(&xv);
        conds_free(&c);
    }

    /* 3. short clips */
    check_short_clips();
    return test_summary();
}
