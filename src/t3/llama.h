/* llama.h - a Llama decoder layer of the English/multilingual T3
 * (transformers LlamaDecoderLayer, Llama_520M of chatterbox
 * llama_configs.py): RMSNorm, q/k/v/o without bias, RoPE (NeoX halves,
 * llama3 frequency scaling), SwiGLU MLP. Sizes come from the weights; the
 * RoPE constants from the variant (t3.c). spec/t3.md §3.1.
 * Thread safety: weights are read-only; a cache belongs to one caller. */
#ifndef CBX_T3_LLAMA_H
#define CBX_T3_LLAMA_H

#include <stdbool.h>

#include "core/ops.h"

struct kv_cache;
struct t3_backbone;

struct llama_layer {
    /* names under tfmr.layers.{i}. */
    const struct tensor *input_layernorm_w;                 /* [D] */
    const struct tensor *q_proj_w, *k_proj_w, *v_proj_w;    /* [H*Dh, D], [Hk*Dh, D] */
    const struct tensor *o_proj_w;                          /* [D, H*Dh] */
    const struct tensor *post_attention_layernorm_w;        /* [D] */
    const struct tensor *gate_proj_w, *up_proj_w;           /* [I, D] */
    const struct tensor *down_proj_w;                       /* [D, I] */
};

/* Llama_520M's RoPE: theta 500000, llama3 scaling (factor 8, low 1,
 * high 4, original 8192) over the whole head (t3.md §3.1). */
struct rope_params llama_rope_520m(int head_dim);

/* LlamaDecoderLayer il on hs[B, T, D] at positions pos (I32 [T], absolute:
 * the cache length onwards; on a group of caches, T = 1, I32 [B]: each
 * row's own). kv_only: stop after writing the keys and values (returns
 * non-NULL). */
struct tensor *llama_layer_forward(struct arena *a, const struct t3_backbone *bb, struct kv_cache *kv,
                                   int il, const struct tensor *hs, const struct tensor *pos,
                                   bool kv_only);

#endif
