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
     * side by side, rotate as H + Hk heads with the cache's attention (in
     * one op with it where the step allows). */
    const struct linear_norm n1 = {LINEAR_NORM_RMS, l->input_layernorm_w, NULL, bb->eps};
    const struct tensor *wqkv[3] = {l->q_proj_w, l->k_proj_w, l->v_proj_w};
    struct tensor *qkv = op_linear_cat(a, hs, &n1, 3, wqkv, NULL, NULL);
    struct tensor *qk = op_split_heads(a, op_slice(a, qkv, 2, 0, (H + Hk) * Dh), H + Hk);
    struct tensor *v = op_split_heads(a, op_slice(a, qkv, 2, (H + Hk) * Dh, Hk * Dh), Hk);
    struct tensor *o = kv_cache_attend_rope(a, kv, il, qk, v, pos, &bb->rope, kv_only);
    if (kv_only || !o) return o;
    struct tensor *x = op_linear_ex(a, o, l->o_proj_w, NULL, -1, hs); /* hs + o_proj(o) */
    /* LlamaMLP on post_attention_layernorm(x): down(silu(gate(h)) * up(h)),
     * gate and up one product, their elementwise product in down's */
    const struct linear_norm n2 = {LINEAR_NORM_RMS, l->post_attention_layernorm_w, NULL, bb->eps};
    const struct tensor *wgu[2] = {l->gate_proj_w, l->up_proj_w};
    const int act[2] = {UN_SILU, -1};
    struct tensor *gu = op_linear_cat(a, x, &n2, 2, wgu, NULL, act);
    return op_linear_gated(a, op_slice(a, gu, 2, 0, I), op_slice(a, gu, 2, I, I), l->down_proj_w, NULL, -1, x);
}
