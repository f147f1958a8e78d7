/* perceiver.c - Perceiver resampler (chatterbox modules/perceiver.py),
 * eval mode: no dropout, no mask, no relative position bias. */
#include "perceiver.h"

#include <math.h>

cbx_status perceiver_load(struct perceiver *p, const struct weights *w, const char *prefix, int64_t D,
                          char *err)
{
    cbx_status rc = CBX_OK;
    const int64_t d1[1] = {D}, dd[2] = {D, D}, q3[3] = {1, -1, D};
#define GET(field, name, nd, shape) p->field = weights_getf(w, &rc, err, nd, shape, "%s" name, prefix)
    GET(pre_attention_query, "pre_attention_query", 3, q3);
    GET(norm_w, "attn.norm.weight", 1, d1);
    GET(norm_b, "attn.norm.bias", 1, d1);
    GET(to_q_w, "attn.to_q.weight", 2, dd);
    GET(to_q_b, "attn.to_q.bias", 1, d1);
    GET(to_k_w, "attn.to_k.weight", 2, dd);
    GET(to_k_b, "attn.to_k.bias", 1, d1);
    GET(to_v_w, "attn.to_v.weight", 2, dd);
    GET(to_v_b, "attn.to_v.bias", 1, d1);
    GET(proj_out_w, "attn.proj_out.weight", 2, dd);
    GET(proj_out_b, "attn.proj_out.bias", 1, d1);
#undef GET
    /* Perceiver() builds AttentionBlock2(channels, num_heads=4) */
    p->n_head = 4;
    if (rc == CBX_OK && D % p->n_head)
        rc = err_setf(err, CBX_ERR_FORMAT, "perceiver: width %lld is not a multiple of %d heads", (long long)D,
                      p->n_head);
    return rc;
}

void perceiver_place(struct perceiver *p, struct weight_set *s, cbx_status *rc, char *err)
{
#define P(field, role) p->field = weight_place(s, p->field, (role), WEIGHT_AS_STORED, 0, rc, err)
    P(pre_attention_query, WEIGHT_PLAIN);
    P(norm_w, WEIGHT_NORM);
    P(norm_b, WEIGHT_NORM);
    P(to_q_w, WEIGHT_LINEAR);
    P(to_q_b, WEIGHT_PLAIN);
    P(to_k_w, WEIGHT_LINEAR);
    P(to_k_b, WEIGHT_PLAIN);
    P(to_v_w, WEIGHT_LINEAR);
    P(to_v_b, WEIGHT_PLAIN);
    P(proj_out_w, WEIGHT_LINEAR);
    P(proj_out_b, WEIGHT_PLAIN);
#undef P
}

/* AttentionBlock2(x1, x2): the same LayerNorm on both inputs; q from x1,
 * k and v from x2; softmax(q kᵀ / sqrt(Dh)) v; x1 + proj_out(heads merged). */
static struct tensor *block(struct arena *a, const struct perceiver *p, const struct tensor *x1,
                            const struct tensor *x2)
{
    if (!x1 || !x2) return NULL;
    const int64_t D = x1->ne[2], H = p->n_head;
    struct tensor *n1 = op_layer_norm(a, x1, p->norm_w, p->norm_b, 1e-5f);
    struct tensor *n2 = x1 == x2 ? n1 : op_layer_norm(a, x2, p->norm_w, p->norm_b, 1e-5f);
    struct tensor *q = op_split_heads(a, op_linear(a, n1, p->to_q_w, p->to_q_b), H);
    struct tensor *k = op_split_heads(a, op_linear(a, n2, p->to_k_w, p->to_k_b), H);
    struct tensor *v = op_split_heads(a, op_linear(a, n2, p->to_v_w, p->to_v_b), H);
    struct attn_params ap = {.scale = 1.0f / sqrtf((float)(D / H)), .causal = false};
    struct tensor *o = op_attention(a, q, k, v, NULL, &ap);
    return op_add(a, x1, op_linear(a, op_merge_heads(a, o), p->proj_out_w, p->proj_out_b));
}

struct tensor *perceiver_forward(struct arena *a, const struct perceiver *p, const struct tensor *h)
{
    if (!h) return NULL;
    /* query broadcast over the batch */
    const struct tensor *q0 = p->pre_attention_query;
    if (h->ne[0] != 1) {
        const int64_t ne[3] = {h->ne[0], q0->ne[1], q0->ne[2]};
        q0 = op_add(a, op_fill(a, 3, ne, 0.0f), q0);
    }
    struct tensor *y = block(a, p, q0, h); /* cross-attention to the prompt */
    return block(a, p, y, y);               /* then self-attention */
}
