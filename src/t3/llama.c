/* llama.c - Llama decoder layer (transformers 5.2.0 LlamaDecoderLayer,
 * LlamaAttention, LlamaMLP, LlamaRMSNorm), eval mode, in call order.
 * See spec/t3.md §3.1. */
#include "llama.h"

#include "t3/backbone.h"

struct rope_params llama_rope_520m(int head_dim)
{
    struct rope_params p = {500000.0f, head_dim, 8.0f, 1.0f, 4.0f, 8192};
    return p;
}

/* RoPE of x [B, H, T, Dh] at positions pos; on a group of caches
 * (kv_cache.h invariant 4: T = 1) pos holds each row's position (its
 * member's length before this forward), and x is seen as [1, H, B, Dh]
 * so that one rotation takes each row at its own position (the same
 * arithmetic per element), then seen back as [B, H, 1, Dh]. */
static struct tensor *rope(struct arena *a, struct tensor *x, const struct tensor *pos, const struct kv_cache *kv,
                           const struct rope_params *p)
{
    if (!kv->group || !x) return op_rope(a, x, pos, p);
    const int swap[4] = {2, 1, 0, 3};
    return op_permute(a, op_rope(a, op_permute(a, x, swap), pos, p), swap);
}

struct tensor *llama_layer_forward(struct arena *a, const struct t3_backbone *bb, struct kv_cache *kv,
                                   int il, const struct tensor *hs, const struct tensor *pos,
                                   bool kv_only)
{
    const struct llama_layer *l = &bb->llama[il];
    const int64_t H = bb->n_head, Hk = bb->n_kv_head;
    const int64_t Dh = bb->head_dim, I = l->gate_proj_w->ne[0];
    /* LlamaAttention on input_layernorm(hs): projections -> heads -> RoPE
     * on q, k -> cache -> SDPA -> o_proj. q, k and v are column blocks of
     * one product [B, T, (H + 2 Hk) Dh] of the normalised input; q and k,
     * side by side, rotate as H + Hk heads. */
    const struct linear_norm n1 = {LINEAR_NORM_RMS, l->input_layernorm_w, NULL, bb->eps};
    const struct tensor *wqkv[3] = {l->q_proj_w, l->k_proj_w, l->v_proj_w};
    struct tensor *qkv = op_linear_cat(a, hs, &n1, 3, wqkv, NULL, NULL);
    struct tensor *qk = rope(a, op_split_heads(a, op_slice(a, qkv, 2, 0, (H + Hk) * Dh), H + Hk), pos, kv,
                             &bb->rope);
    struct tensor *q = op_slice(a, qk, 1, 0, H), *k = op_slice(a, qk, 1, H, Hk);
    struct tensor *v = op_split_heads(a, op_slice(a, qkv, 2, (H + Hk) * Dh, Hk * Dh), Hk);
    struct tensor *o = kv_cache_attend(a, kv, il, q, k, v, kv_only);
    if (kv_only || !o) return o;
    struct tensor *x = op_linear_ex(a, o, l->o_proj_w, NULL, -1, hs); /* hs + o_proj(o) */
    /* LlamaMLP on post_attention_layernorm(x): down(silu(gate(h)) * up(h)),
     * gate and up one product */
    const struct linear_norm n2 = {LINEAR_NORM_RMS, l->post_attention_layernorm_w, NULL, bb->eps};
    const struct tensor *wgu[2] = {l->gate_proj_w, l->up_proj_w};
    const int act[2] = {UN_SILU, -1};
    struct tensor *gu = op_linear_cat(a, x, &n2, 2, wgu, NULL, act);
    struct tensor *m = op_mul(a, op_slice(a, gu, 2, 0, I), op_slice(a, gu, 2, I, I));
    return op_linear_ex(a, m, l->down_proj_w, NULL, -1, x);
}
