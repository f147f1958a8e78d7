/* gpt2.c - GPT-2 block (transformers GPT2Block, GPT2Attention, GPT2MLP),
 * eval mode, in call order. See spec/t3.md §3.2. */
#include "gpt2.h"

#include "t3/backbone.h"

struct tensor *gpt2_block(struct arena *a, const struct t3_backbone *bb, struct kv_cache *kv, int il,
                          const struct tensor *hs, bool kv_only)
{
    const struct gpt2_layer *l = &bb->gpt2[il];
    const int64_t D = bb->d_model, H = bb->n_head;
    /* GPT2Attention on ln_1(hs): c_attn -> split q, k, v -> heads -> cache
     * -> SDPA -> c_proj */
    const struct linear_norm ln1 = {LINEAR_NORM_LAYER, l->ln_1_w, l->ln_1_b, bb->eps};
    struct tensor *qkv = op_linear_cat(a, hs, &ln1, 1, &l->c_attn_w, &l->c_attn_b, NULL); /* [B, T, 3D] */
    struct tensor *o = kv_cache_attend(a, kv, il, op_split_heads(a, op_slice(a, qkv, 2, 0, D), H),
                                       op_split_heads(a, op_slice(a, qkv, 2, D, D), H),
                                       op_split_heads(a, op_slice(a, qkv, 2, 2 * D, D), H), kv_only);
    if (kv_only || !o) return o;
    struct tensor *x = op_linear_ex(a, o, l->c_proj_w, l->c_proj_b, -1, hs); /* hs + c_proj(o) */
    /* GPT2MLP on ln_2(x): x + c_proj(gelu_new(c_fc(h))) */
    const struct linear_norm ln2 = {LINEAR_NORM_LAYER, l->ln_2_w, l->ln_2_b, bb->eps};
    const int gelu = UN_GELU_TANH;
    struct tensor *h = op_linear_cat(a, x, &ln2, 1, &l->c_fc_w, &l->c_fc_b, &gelu);
    return op_linear_ex(a, h, l->mlp_proj_w, l->mlp_proj_b, -1, x);
}
