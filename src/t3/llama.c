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
    struct tensor *h = op_rms_norm(a, hs, l->input_layernorm_w, bb->eps);
    /* LlamaAttention: projections -> heads -> RoPE on q, k -> cache -> SDPA -> o_proj */
    struct tensor *q = op_rope(a, op_split_heads(a, op_linear(a, h, l->q_proj_w, NULL), H), pos, &bb->rope);
    struct tensor *k = op_rope(a, op_split_heads(a, op_linear(a, h, l->k_proj_w, NULL), Hk), pos, &bb->rope);
    struct tensor *v = op_split_heads(a, op_linear(a, h, l->v_proj_w, NULL), Hk);
    struct tensor *o = kv_cache_attend(a, kv, il, q, k, v, kv_only);
    if (kv_only || !o) return o;
    struct tensor *x = op_add(a, hs, op_linear(a, o, l->o_proj_w, NULL));
    /* LlamaMLP: down(silu(gate(h)) * up(h)) */
    h = op_rms_norm(a, x, l->post_attention_layernorm_w, bb->eps);
    struct tensor *g = op_unary(a, op_linear(a, h, l->gate_proj_w, NULL), UN_SILU, 0, 0);
    return op_add(a, x, op_linear(a, op_mul(a, g, op_linear(a, h, l->up_proj_w, NULL)), l->down_proj_w, NULL));
}
