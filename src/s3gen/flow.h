/* flow.h - S3Gen token-to-mel flow (chatterbox models/s3gen/flow.py
 * CausalMaskedDiffWithXvec.inference): speaker projection, prompt + speech
 * tokens through the encoder, cond from the prompt mel, the CFM decoder,
 * prompt frames cut from the result. spec/s3gen.md §2-§3.
 * Thread safety: a loaded flow is read-only; any thread, concurrently,
 * each call with its own arena and RNG stream. */
#ifndef CBX_S3GEN_FLOW_H
#define CBX_S3GEN_FLOW_H

#include <stdint.h>

#include "core/ops.h"
#include "core/rng.h"
#include "core/weights.h"
#include "io/weights.h"
#include "s3gen/cfm.h"

struct s3gen_encoder;

#define S3GEN_SPEECH_VOCAB 6561 /* flow.vocab_size */
#define S3GEN_XVEC_DIM 192      /* spk_embed_dim */

/* The reference dict of S3Gen.inference (voice.md §7), host memory. */
struct s3gen_ref {
    const int32_t *prompt_token;  /* [n_prompt_token] */
    int64_t n_prompt_token;
    const float *prompt_feat;     /* [n_prompt_feat, 80] log-mel frames */
    int64_t n_prompt_feat;
    const float *embedding;       /* [192] CAMPPlus x-vector */
};

struct s3gen_flow {
    const struct tensor *spk_embed_affine_w, *spk_embed_affine_b; /* [80, 192], [80] */
    struct s3gen_encoder *encoder;                                /* owned */
    struct s3gen_cfm cfm;                                         /* flow.decoder */
    struct weight_set *ws; /* the affine layer, placed on the load's backend */
};

/* Load flow.* from the MODEL_S3GEN component; wtype as s3gen_cfm_load
 * (the decoder's linear and conv weights); every weight placed on be,
 * which must outlive the flow. On failure *f is zeroed and err names the
 * tensor. */
cbx_status s3gen_flow_load(struct s3gen_flow *f, const struct weights *w, const struct backend *be,
                           enum dtype wtype, char *err);
void s3gen_flow_free(struct s3gen_flow *f); /* no-op on a zeroed flow */

/* spk_embed_affine_layer(F.normalize(embedding)) -> spks [1, 80]. */
struct tensor *s3gen_flow_spks(struct arena *a, const struct s3gen_flow *f, const float *embedding);

/* CausalMaskedDiffWithXvec.inference (finalize=True): tokens[n] (ids below
 * 6561) after ref's prompt tokens; noised_mels [1, 80, 2n] for meanflow
 * (drawn by the caller, S3Gen.flow_inference) or NULL; z_stream supplies
 * the CFM noise. Returns the generated mel [1, 80, 2(Np + n) - Tp]
 * (arena-owned) or NULL (arena_status(a)); *mu (optional) receives the
 * encoder output [1, 80, 2(Np + n)]. */
struct tensor *s3gen_flow_inference(struct arena *a, const struct s3gen_flow *f,
                                    const int32_t *tokens, int64_t n,
                                    const struct s3gen_ref *ref,
                                    const struct tensor *noised_mels,
                                    struct rng_stream *z_stream,
                                    const struct s3gen_cfm_params *p, struct tensor **mu);

#endif
