/* gpt2.c - GPT-2 backbone (transformers GPT2Model, GPT2Block, GPT2Attention,
 * GPT2MLP), eval mode, in call order. See spec/t3.md §3.2. */
#include "gpt2.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"

enum dtype gpt2_kv_type(enum dtype w)
{
    const struct dtype_traits *t = dtype_traits(w);
    return t && t->quantized ? TYPE_Q8_0 : TYPE_F32;
}

cbx_status gpt2_kv_init(struct gpt2_kv *kv, const struct gpt2 *g, struct arena *cache,
                        int capacity)
{
    kv->capacity = capacity;
    kv->n_past = 0;
    kv->scratch[0] = kv->scratch[1] = NULL;
    kv->k = arena_alloc_host(cache, sizeof *kv->k * (size_t)g->n_layer);
    kv->v = arena_alloc_host(cache, sizeof *kv->v * (size_t)g->n_layer);
    if (!kv->k || !kv->v) return arena_status(cache);
    const int64_t ne[4] = {1, g->n_head, capacity, g->d_model / g->n_head};
    for (int i = 0; i < g->n_layer; i++) {
        kv->k[i] = arena_tensor(cache, g->kv_type, 4, ne);
        kv->v[i] = arena_tensor(cache, g->kv_type, 4, ne);
    }
    return arena_status(cache);
}

/* GPT2Attention: c_attn -> split q, k, v -> heads -> cache -> causal SDPA
 * (scale 1/sqrt(Dh)) -> merge heads -> c_proj. h[1, T, D]. */
static struct tensor *attn(struct arena *a, const struct gpt2 *g, const struct gpt2_layer *l,
                           struct gpt2_kv *kv, int il, const struct tensor *h, bool kv_only)
{
    int64_t T = h->ne[1], D = g->d_model, H = g->n_head;
    int n_past = kv->n_past;
    struct tensor *qkv = op_linear(a, h, l->c_attn_w, l->c_attn_b);       /* [1, T, 3D] */
    const int to_heads[4] = {0, 2, 1, 3};                                  /* [1,T,H,Dh] -> [1,H,T,Dh] */
    struct tensor *q = op_permute(a, op_split_dim(a, op_slice(a, qkv, 2, 0, D), 2, H), to_heads);
    struct tensor *k = op_permute(a, op_split_dim(a, op_slice(a, qkv, 2, D, D), 2, H), to_heads);
    struct tensor *v = op_permute(a, op_split_dim(a, op_slice(a, qkv, 2, 2 * D, D), 2, H), to_heads);
    op_copy_into(a, op_slice(a, kv->k[il], 2, n_past, T), k);
    op_copy_into(a, op_slice(a, kv->v[il], 2, n_past, T), v);
    if (kv_only) return arena_status(a) == CBX_OK ? kv->v[il] : NULL;
    struct attn_params ap = {1.0f / sqrtf((float)(D / H)), true};
    struct tensor *o = op_attention(a, q, op_slice(a, kv->k[il], 2, 0, n_past + T),
                                    op_slice(a, kv->v[il], 2, 0, n_past + T), NULL, &ap);
    const int64_t merged[3] = {1, T, D};                                   /* [1,H,T,Dh] -> [1,T,D] */
    o = op_reshape(a, op_cont(a, op_permute(a, o, to_heads)), 3, merged);
    return op_linear(a, o, l->c_proj_w, l->c_proj_b);
}

/* A failure recorded in scratch arena s moves to the caller's arena a. */
static bool scratch_ok(struct arena *a, struct arena *s)
{
    if (s == a || arena_status(s) == CBX_OK) return arena_status(a) == CBX_OK;
    arena_fail(a, arena_status(s), "%s", arena_errmsg(s));
    return false;
}

/* kv_only: the last layer stops after writing its keys and values. */
static struct tensor *forward(struct arena *a, const struct gpt2 *g, struct gpt2_kv *kv,
                              const struct tensor *x, bool kv_only)
{
    if (!x) return NULL;
    int64_t T = x->ne[1];
    if (kv->n_past + T > kv->capacity || kv->n_past + T > g->n_ctx) {
        arena_fail(a, CBX_ERR_INVALID_ARG,
                   "gpt2: sequence of %lld positions exceeds the context (%d cached, %d max)",
                   (long long)(kv->n_past + T), kv->capacity, g->n_ctx);
        return NULL;
    }
    /* layer il runs in scratch arena il % 2 (reset first), reading hs from
     * the other one; without scratch arenas everything goes to a */
    const bool ping = kv->scratch[0] && kv->scratch[1];
    struct arena *s = ping ? kv->scratch[1] : a;
    if (ping) arena_reset(s);
    /* hidden = inputs_embeds + wpe(position_ids), positions continue the cache */
    struct tensor *hs = op_add(s, x, op_slice(s, g->wpe, 0, kv->n_past, T));
    if (!scratch_ok(a, s)) return NULL;
    for (int il = 0; il < g->n_layer; il++) {
        const struct gpt2_layer *l = &g->h[il];
        if (ping) arena_reset(s = kv->scratch[il & 1]);
        /* GPT2Block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)) */
        struct tensor *h = op_layer_norm(s, hs, l->ln_1_w, l->ln_1_b, g->eps);
        if (kv_only && il == g->n_layer - 1) {
            attn(s, g, l, kv, il, h, true);
            if (!scratch_ok(a, s)) return NULL;
            kv->n_past += (int)T;
            return hs;
        }
        hs = op_add(s, hs, attn(s, g, l, kv, il, h, false));
        h = op_layer_norm(s, hs, l->ln_2_w, l->ln_2_b, g->eps);
        h = op_unary(s, op_linear(s, h, l->c_fc_w, l->c_fc_b), UN_GELU_TANH, 0, 0); /* gelu_new */
        hs = op_add(s, hs, op_linear(s, h, l->mlp_proj_w, l->mlp_proj_b));
        if (!scratch_ok(a, s)) return NULL;
    }
    hs = op_layer_norm(a, hs, g->ln_f_w, g->ln_f_b, g->eps);
    if (hs) kv->n_past += (int)T;
    return hs;
}

struct tensor *gpt2_forward(struct arena *a, const struct gpt2 *g, struct gpt2_kv *kv,
                            const struct tensor *x)
{
    return forward(a, g, kv, x, false);
}

cbx_status gpt2_prefill_kv(struct arena *a, const struct gpt2 *g, struct gpt2_kv *kv,
                           const struct tensor *x)
{
    if (!forward(a, g, kv, x, true) && arena_status(a) == CBX_OK)
        return arena_fail(a, CBX_ERR_INTERNAL, "gpt2: no input");
    return arena_status(a);
}

/* bytes of one head's n cached positions */
static size_t head_run(const struct gpt2 *g, int n)
{
    return (size_t)n * dtype_row_size(g->kv_type, g->d_model / g->n_head);
}

size_t gpt2_kv_bytes(const struct gpt2 *g, int n)
{
    return 2 * (size_t)g->n_layer * (size_t)g->n_head * head_run(g, n);
}

/* The cache tensors are [1, H, capacity, Dh] of g->kv_type, so head h's
 * first n positions are one contiguous run at data + h * nb[1]. */
static bool cache_ok(struct arena *a, const struct gpt2 *g, const struct gpt2_kv *kv)
{
    for (int il = 0; il < g->n_layer; il++)
        for (int s = 0; s < 2; s++) {
            const struct tensor *c = s ? kv->v[il] : kv->k[il];
            if (c->type != g->kv_type || c->ndim != 4 || c->ne[1] != g->n_head ||
                c->nb[2] != (int64_t)dtype_row_size(g->kv_type, g->d_model / g->n_head)) {
                arena_fail(a, CBX_ERR_INTERNAL, "gpt2: the cache is not laid out as gpt2_kv_init makes it");
                return false;
            }
        }
    return true;
}

cbx_status gpt2_kv_save(struct arena *a, const struct gpt2 *g, const struct gpt2_kv *kv, int n,
                        void *dst)
{
    if (n < 0 || n > kv->n_past)
        return arena_fail(a, CBX_ERR_INVALID_ARG, "gpt2: saving %d of %d cached positions", n, kv->n_past);
    if (!cache_ok(a, g, kv)) return arena_status(a);
    const size_t run = head_run(g, n);
    char *o = dst;
    for (int il = 0; il < g->n_layer; il++)
        for (int s = 0; s < 2; s++) {
            const struct tensor *c = s ? kv->v[il] : kv->k[il];
            for (int h = 0; h < g->n_head; h++, o += run) {
                const char *src = (const char *)c->data + h * c->nb[1];
                if (!c->be || c->be->host) memcpy(o, src, run);
                else c->be->to_host(c->be, o, src, run);
            }
        }
    return CBX_OK;
}

cbx_status gpt2_kv_restore(struct arena *a, const struct gpt2 *g, struct gpt2_kv *kv, int n,
                           const void *src)
{
    if (n < 0 || n > kv->capacity)
        return arena_fail(a, CBX_ERR_INVALID_ARG, "gpt2: restoring %d positions into a cache of %d", n,
                          kv->capacity);
    if (!cache_ok(a, g, kv)) return arena_status(a);
    const size_t run = head_run(g, n);
    const char *in = src;
    for (int il = 0; il < g->n_layer; il++)
        for (int s = 0; s < 2; s++) {
            struct tensor *c = s ? kv->v[il] : kv->k[il];
            for (int h = 0; h < g->n_head; h++, in += run) {
                char *d = (char *)c->data + h * c->nb[1];
                if (!c->be || c->be->host) memcpy(d, in, run);
                else c->be->from_host(c->be, d, in, run);
            }
        }
    kv->n_past = n;
    return CBX_OK;
}
