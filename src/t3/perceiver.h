/* perceiver.h - the Perceiver resampler of the Llama T3's conditioning
 * encoder (chatterbox modules/perceiver.py: Perceiver, AttentionBlock2,
 * AttentionQKV): 32 learned queries attend to the prompt's speech
 * embeddings, then to themselves, through ONE shared attention block.
 * spec/t3.md §4.
 * Thread safety: weights are read-only; any thread, concurrently. */
#ifndef CBX_T3_PERCEIVER_H
#define CBX_T3_PERCEIVER_H

#include "core/ops.h"
#include "core/weights.h"
#include "io/weights.h"

struct perceiver {
    const struct tensor *pre_attention_query;  /* [1, Q, D] */
    /* attn. : AttentionBlock2 (LayerNorm `norm`, to_q/to_k/to_v/proj_out) */
    const struct tensor *norm_w, *norm_b;
    const struct tensor *to_q_w, *to_q_b, *to_k_w, *to_k_b, *to_v_w, *to_v_b;
    const struct tensor *proj_out_w, *proj_out_b;
    int n_head;                                 /* 4 */
};

/* The tensors under `prefix` ("cond_enc.perceiver.") of width D. */
cbx_status perceiver_load(struct perceiver *p, const struct weights *w, const char *prefix, int64_t D,
                          char *err);

/* Place the tensors perceiver_load found on s (core/weights.h), as stored;
 * chains on *rc like weight_place. */
void perceiver_place(struct perceiver *p, struct weight_set *s, cbx_status *rc, char *err);

/* Perceiver(h): h[B, P, D] -> [B, Q, D]. */
struct tensor *perceiver_forward(struct arena *a, const struct perceiver *p, const struct tensor *h);

#endif
