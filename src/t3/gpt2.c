/* gpt2.c - GPT-2 block (transformers GPT2Block, GPT2Attention, GPT2MLP),
 * eval mode, in call order. See spec/t3.md §3.2. */
#include "gpt2.h"

#include "t3/backbone.h"

struct tensor *gpt2_block(struct arena *a, const struct t3_backbone *bb, struct kv_cache *kv, int il,
                          const struct tensor *hs, bool kv_only)
{
    const struct gpt2_layer *l = &bb->gpt2[il];
    const int64_t D = bb->d_model, H = bb->n_head;
    struct tensor *h = op_layer_norm(a, hs, l->ln_1_w, l->ln_1_b, bb->eps);
    /* GPT2Attention: c_attn -> split q, k, v -> heads -> cache -> SDPA -> c_proj */
    struct tensor *qkv = op_linear(a, h, l->c_attn_w, l->c_attn_b); /* [B, T, 3D] */
    struct tensor *o = kv_cache_attend(a, kv, il, op_split_heads(a, op_slice(a, qkv, 2, 0, D), H),
                                       op_split_heads(a, op_slice(a, qkv, 2, D, D), H),
                                       op_split_heads(a, op_slice(a, qkv, 2, 2 * D, D), H), kv_only);
    if (kv_only || !o) return o;
    /* x = hs + c_proj(o); h = ln_2(x), in one pass */
    struct tensor *x = NULL;
    h = op_add_layer_norm(a, hs, op_linear(a, o, l->c_proj_w, l->c_proj_b), l->ln_2_w, l->ln_2_b, bb->eps, &x);
    h = op_linear_ex(a, h, l->c_fc_w, l->c_fc_b, UN_GELU_TANH, NULL); /* gelu_new */
    return op_linear_ex(a, h, l->mlp_proj_w, l->mlp_proj_b, -1, x);     /* x + c_proj(h) */
}
