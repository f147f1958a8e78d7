/* gpt2.h - a GPT-2 block of the Turbo/Nano T3 (transformers GPT2Block used
 * through inputs_embeds): pre-LN, Conv1D attention and MLP with biases,
 * gelu_new. Loading (sizes from the weights, Conv1D layout) is in t3.c;
 * the layer loop, learned positions and ln_f in backbone.c.
 * Thread safety: weights are read-only; a cache belongs to one caller. */
#ifndef CBX_T3_GPT2_H
#define CBX_T3_GPT2_H

#include <stdbool.h>

#include "core/ops.h"

struct kv_cache;
struct t3_backbone;

struct gpt2_layer {
    /* names under tfmr.h.{i}. ; Conv1D weights are stored [in, out]
     * upstream and held here as [out, in] (transposed at load) */
    const struct tensor *ln_1_w, *ln_1_b;
    const struct tensor *c_attn_w, *c_attn_b;  /* [3D, D] */
    const struct tensor *c_proj_w, *c_proj_b;  /* [D, D]  */
    const struct tensor *ln_2_w, *ln_2_b;
    const struct tensor *c_fc_w, *c_fc_b;      /* [4D, D] */
    const struct tensor *mlp_proj_w, *mlp_proj_b; /* [D, 4D] */
};

/* GPT2Block il on hs[B, T, D]: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)).
 * kv_only: stop after writing the keys and values (returns non-NULL). */
struct tensor *gpt2_block(struct arena *a, const struct t3_backbone *bb, struct kv_cache *kv, int il,
                          const struct tensor *hs, bool kv_only);

#endif
