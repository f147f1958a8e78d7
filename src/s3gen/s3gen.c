/* s3gen.c - S3Gen synthesis path. Ports chatterbox 5de7a54
 * models/s3gen/s3gen.py: S3Token2Wav.__init__ (trim_fade),
 * S3Token2Wav.flow_inference (meanflow noise), S3Token2Mel.forward (the
 * ref dict cast) and S3Token2Wav.inference; spec/s3gen.md §1, hift.md §9,
 * rng.md §3. */
#include "s3gen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "s3gen/hift.h"
#include "voice/conds.h"

void s3gen_free(struct s3gen *s)
{
    if (!s) return;
    s3gen_flow_free(&s->flow);
    hift_free(s->mel2wav);
    memset(s, 0, sizeof *s);
}

/* trim_fade: zeros(960); [480:] = (cos(linspace(pi, 0, 480)) + 1) / 2,
 * in float32 as torch (linspace counts from the start for the first half
 * and from the end for the second). */
static void make_trim_fade(float *fade)
{
    const int n_trim = S3GEN_TRIM_FADE / 2;
    const float start = (float)M_PI, end = 0.0f, step = (end - start) / (float)(n_trim - 1);
    for (int i = 0; i < n_trim; i++) {
        float lin = i < n_trim / 2 ? start + step * (float)i : end - step * (float)(n_trim - 1 - i);
        fade[i] = 0.0f;
        fade[n_trim + i] = (cosf(lin) + 1.0f) / 2.0f;
    }
}

cbx_status s3gen_load(struct s3gen *s, const struct weights *w, const struct backend *be, enum dtype wtype,
                      char *err)
{
    memset(s, 0, sizeof *s);
    cbx_status rc = s3gen_flow_load(&s->flow, w, be, wtype, err);
    if (rc == CBX_OK) rc = hift_load(&s->mel2wav, w, be, err);
    if (rc != CBX_OK) {
        s3gen_free(s);
        return rc;
    }
    s->meanflow = s->flow.cfm.meanflow;
    s->wtype = wtype;
    make_trim_fade(s->trim_fade);
    return CBX_OK;
}

struct s3gen_params s3gen_default_params(void)
{
    struct s3gen_params p = {0, 0, false, NULL, NULL, false, NULL};
    return p;
}

bool s3gen_default_bf16(enum dtype wtype)
{
    const struct dtype_traits *t = dtype_traits(wtype);
    return t && t->quantized;
}

struct tensor *s3gen_flow_mel(struct arena *a, const struct s3gen *s, const int32_t *tokens,
                              int64_t n, const struct s3gen_ref *ref,
                              const struct s3gen_params *p)
{
    struct s3gen_cfm_params cp = {p->n_cfm_steps, p->cfg_separate, p->cb, p->user};
    struct rng_stream zs;
    rng_stream_init(&zs, "s3gen.cfm.z", p->seed);
    struct tensor *noised = NULL;
    if (s->meanflow && n > 0) { /* noise = torch.randn(1, 80, 2 * n) */
        struct rng_stream ns;
        rng_stream_init(&ns, "s3gen.flow.noised_mels", p->seed);
        const int64_t ne[3] = {1, S3GEN_MEL_CHANNELS, 2 * n};
        noised = op_randn(a, 3, ne, &ns);
        if (!noised) return NULL;
    }
    return s3gen_flow_inference(a, &s->flow, tokens, n, ref, noised, &zs, &cp, NULL);
}

struct tensor *s3gen_inference(struct arena *a, const struct s3gen *s, const int32_t *tokens,
                               int64_t n, const struct s3gen_ref *ref,
                               const struct s3gen_params *p, struct tensor **mel_out)
{
    if (mel_out) *mel_out = NULL;
    struct tensor *mel = s3gen_flow_mel(a, s, tokens, n, ref, p);
    arena_release_idle(a); /* the flow's intermediates, for HiFT's */
    /* output_wavs, _ = hift_inference(mel, cache_source = empty) */
    struct tensor *wav = hift_inference(a, s->mel2wav, mel, p->seed, NULL, NULL); /* [1, L] */
    if (!wav) return NULL;
    /* output_wavs[:, :len(trim_fade)] *= trim_fade */
    int64_t k = wav->ne[1] < S3GEN_TRIM_FADE ? wav->ne[1] : S3GEN_TRIM_FADE;
    const int64_t fne[1] = {k};
    struct tensor *head = op_slice(a, wav, 1, 0, k);
    struct tensor *faded = op_mul(a, head, op_from_host(a, TYPE_F32, 1, fne, s->trim_fade));
    if (!faded || op_copy_into(a, head, faded) != CBX_OK) return NULL;
    if (mel_out) *mel_out = mel;
    wav->name = "mel2wav";
    return wav;
}

cbx_status s3gen_vocode(const struct s3gen *s, const struct backend *be, const int32_t *tokens,
                        int64_t n, const struct conds *voice, const struct s3gen_params *p,
                        float **pcm, int64_t *n_pcm, char *err)
{
    *pcm = NULL;
    *n_pcm = 0;
    if (n < 1) return err_setf(err, CBX_ERR_INVALID_ARG, "s3gen: no speech tokens to vocode");
    if (!voice->embedding || voice->n_embedding != S3GEN_XVEC_DIM)
        return err_setf(err, CBX_ERR_INVALID_ARG, "s3gen: the voice has %lld x-vector values, want %d "
                        "(embedding)", (long long)voice->n_embedding, S3GEN_XVEC_DIM);
    if ((voice->n_prompt_token > 0) != (voice->n_prompt_feat > 0))
        return err_setf(err, CBX_ERR_INVALID_ARG, "s3gen: the voice has %lld prompt tokens but %lld "
                        "prompt mel frames", (long long)voice->n_prompt_token,
                        (long long)voice->n_prompt_feat);
    struct s3gen_ref ref = {voice->prompt_token, voice->n_prompt_token, voice->prompt_feat,
                            voice->n_prompt_feat, voice->embedding};
    struct arena *a = p->ws ? p->ws : arena_create(be, 0);
    if (!a) return err_setf(err, CBX_ERR_NOMEM, "s3gen: out of memory");
    if (arena_backend(a) != be) return err_setf(err, CBX_ERR_INVALID_ARG, "s3gen: workspace of another backend");
    arena_reset(a);
    arena_set_bf16(a, p->bf16);
    cbx_status rc = CBX_OK;
    struct tensor *wav = s3gen_inference(a, s, tokens, n, &ref, p, NULL);
    if (!wav) {
        rc = arena_status(a) != CBX_OK ? arena_status(a) : CBX_ERR_INTERNAL;
        err_setf(err, rc, "s3gen: %s", arena_errmsg(a));
        goto cleanup;
    }
    float *out = malloc(tensor_nbytes(wav));
    if (!out) {
        rc = err_setf(err, CBX_ERR_NOMEM, "s3gen: out of memory for %lld samples",
                      (long long)tensor_nelements(wav));
        goto cleanup;
    }
    if ((rc = tensor_to_host(wav, out)) != CBX_OK) {
        free(out);
        err_setf(err, rc, "s3gen: reading the waveform back failed");
        goto cleanup;
    }
    *pcm = out;
    *n_pcm = tensor_nelements(wav);
cleanup:
    if (p->ws) arena_release(a);
    else arena_free(a);
    return rc;
}
