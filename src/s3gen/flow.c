/* flow.c - S3Gen token-to-mel flow. Ports chatterbox 5de7a54
 * models/s3gen/flow.py CausalMaskedDiffWithXvec.inference in call order
 * (batch 1, finalize=True); spec/s3gen.md §2-§3. The encoder is
 * s3gen/encoder.c, the decoder s3gen/cfm.c. */
#include "flow.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "s3gen/encoder.h"

void s3gen_flow_free(struct s3gen_flow *f)
{
    if (!f) return;
    s3gen_encoder_free(f->encoder);
    s3gen_cfm_free(&f->cfm);
    weight_set_free(f->ws);
    memset(f, 0, sizeof *f);
}

cbx_status s3gen_flow_load(struct s3gen_flow *f, const struct weights *w, const struct backend *be,
                           enum dtype wtype, char *err)
{
    memset(f, 0, sizeof *f);
    cbx_status rc = CBX_OK;
    if (!(f->ws = weight_set_create(be))) return err_setf(err, CBX_ERR_NOMEM, "s3gen flow: out of memory");
    const int64_t aff[2] = {S3GEN_MEL_CHANNELS, S3GEN_XVEC_DIM}, affb[1] = {S3GEN_MEL_CHANNELS};
    f->spk_embed_affine_w = weight_place(f->ws, weights_get(w, "flow.spk_embed_affine_layer.weight", 2, aff, &rc, err),
                                         WEIGHT_LINEAR, WEIGHT_AS_STORED, 0, &rc, err);
    f->spk_embed_affine_b = weight_place(f->ws, weights_get(w, "flow.spk_embed_affine_layer.bias", 1, affb, &rc, err),
                                         WEIGHT_PLAIN, WEIGHT_AS_STORED, 0, &rc, err);
    if (rc == CBX_OK) rc = s3gen_encoder_load(&f->encoder, w, be, err);
    if (rc == CBX_OK) rc = s3gen_cfm_load(&f->cfm, w, be, wtype, err);
    if (rc != CBX_OK) s3gen_flow_free(f);
    return rc;
}

struct tensor *s3gen_flow_spks(struct arena *a, const struct s3gen_flow *f, const float *embedding)
{
    /* embedding = F.normalize(embedding, dim=1): x / max(||x||_2, 1e-12) */
    const int64_t ne[2] = {1, S3GEN_XVEC_DIM};
    struct tensor *e = op_from_host(a, TYPE_F32, 2, ne, embedding);
    struct tensor *norm = op_unary(a, op_reduce(a, op_unary(a, e, UN_SQR, 0, 0), RED_SUM), UN_SQRT, 0, 0);
    norm = op_unary(a, norm, UN_CLAMP, 1e-12f, INFINITY);
    e = op_binary(a, e, norm, BIN_DIV);
    /* spk_embed_affine_layer: Linear(192 -> 80) */
    return op_linear(a, e, f->spk_embed_affine_w, f->spk_embed_affine_b);
}

struct tensor *s3gen_flow_inference(struct arena *a, const struct s3gen_flow *f,
                                    const int32_t *tokens, int64_t n,
                                    const struct s3gen_ref *ref,
                                    const struct tensor *noised_mels,
                                    struct rng_stream *z_stream,
                                    const struct s3gen_cfm_params *p, struct tensor **mu_out)
{
    if (mu_out) *mu_out = NULL;
    int64_t np = ref->n_prompt_token, tp = ref->n_prompt_feat, all = np + n;
    if (n < 1 || np < 0 || tp < 0 || (tp > 0 && !ref->prompt_feat) || !ref->embedding) {
        arena_fail(a, CBX_ERR_INVALID_ARG, "s3gen flow: %lld speech tokens, %lld prompt tokens, "
                   "%lld prompt frames%s", (long long)n, (long long)np, (long long)tp,
                   ref->embedding ? "" : ", no speaker embedding");
        return NULL;
    }
    /* spks = spk_embed_affine_layer(normalize(embedding)) */
    struct tensor *spks = s3gen_flow_spks(a, f, ref->embedding);

    /* token = [prompt_token | token]; upstream's float32 round trip of the
     * prompt ids is exact below 2^24, and ids >= vocab_size fail */
    int32_t *ids = arena_alloc_host(a, sizeof *ids * (size_t)all);
    if (!ids) return NULL;
    for (int64_t i = 0; i < all; i++) {
        int32_t id = i < np ? ref->prompt_token[i] : tokens[i - np];
        if (id < 0 || id >= S3GEN_SPEECH_VOCAB) {
            arena_fail(a, CBX_ERR_INVALID_ARG, "s3gen flow: %s token %lld is %d, outside 0..%d",
                       i < np ? "prompt" : "speech", (long long)(i < np ? i : i - np), (int)id,
                       S3GEN_SPEECH_VOCAB - 1);
            return NULL;
        }
        ids[i] = id;
    }
    /* h = encoder(input_embedding(token)); mu = encoder_proj(h)^T */
    struct tensor *mu = s3gen_encoder_forward(a, f->encoder, ids, all);  /* [1, 80, Tm] */
    if (!mu) return NULL;
    int64_t tm = mu->ne[2];
    if (tp >= tm) { /* upstream fails on the cond assignment or yields an empty mel */
        arena_fail(a, CBX_ERR_INVALID_ARG, "s3gen flow: %lld prompt mel frames leave nothing of the "
                   "%lld frames of prompt and speech tokens", (long long)tp, (long long)tm);
        return NULL;
    }
    /* conds = zeros (1, 80, Tm); conds[:, :, :Tp] = prompt_feat^T */
    const int64_t rest[3] = {1, S3GEN_MEL_CHANNELS, tm - tp}, pf[3] = {1, tp, S3GEN_MEL_CHANNELS};
    struct tensor *cond = tm > tp ? op_fill(a, 3, rest, 0.0f) : NULL;
    if (tp > 0) {
        struct tensor *prompt = op_transpose(a, op_from_host(a, TYPE_F32, 3, pf, ref->prompt_feat), 1, 2);
        cond = cond ? op_concat(a, prompt, cond, 2) : op_cont(a, prompt);
    }
    /* feat = decoder(mu, mask = ones, spks, cond, n_timesteps, noised_mels) */
    struct tensor *x = s3gen_cfm_forward(a, &f->cfm, mu, spks, cond, noised_mels, z_stream, p);
    if (mu_out) *mu_out = mu;
    /* feat[:, :, mel_len1:] */
    struct tensor *feat = op_cont(a, op_slice(a, x, 2, tp, tm - tp));
    if (feat) feat->name = "flow";
    return feat;
}
