/* backbone.c - the T3 transformer's layer loop for GPT-2 and Llama
 * (transformers GPT2Model / LlamaModel forward with inputs_embeds and a
 * cache): positions, per-layer scratch arenas, the final norm. */
#include "backbone.h"

#include <stdlib.h>

#include "core/backend.h"

cbx_status t3_backbone_kv_init(const struct t3_backbone *bb, struct kv_cache *kv, int n_rows,
                               struct arena *cache, int capacity)
{
    return kv_cache_init(kv, bb->n_layer, bb->n_kv_head, bb->head_dim, bb->kv_type, n_rows, cache, capacity);
}

size_t t3_backbone_kv_bytes(const struct t3_backbone *bb, int n)
{
    return kv_cache_bytes(bb->n_layer, bb->n_kv_head, bb->head_dim, bb->kv_type, n);
}

/* A failure recorded in scratch arena s moves to the caller's arena a. */
static bool scratch_ok(struct arena *a, struct arena *s)
{
    if (s == a || arena_status(s) == CBX_OK) return arena_status(a) == CBX_OK;
    arena_fail(a, arena_status(s), "%s", arena_errmsg(s));
    return false;
}

/* kv_only: the last layer stops after writing its keys and values. */
static struct tensor *forward(struct arena *a, const struct t3_backbone *bb, struct kv_cache *kv,
                              const struct tensor *x, bool kv_only)
{
    if (!x) return NULL;
    const int64_t T = x->ne[1];
    if (x->ndim != 3 || x->ne[0] != kv->n_rows || x->ne[2] != bb->d_model) {
        char s[64];
        arena_fail(a, CBX_ERR_INTERNAL, "t3 backbone: input %s for %d rows of width %d",
                   tensor_shape_str(x, s, sizeof s), kv->n_rows, bb->d_model);
        return NULL;
    }
    if (kv->group) return NULL; /* forward_group */
    if (kv->n_past + T > kv->capacity || kv->n_past + T > bb->n_ctx) {
        arena_fail(a, CBX_ERR_INVALID_ARG,
                   "t3: sequence of %lld positions exceeds the context (%d cached, %d max)",
                   (long long)(kv->n_past + T), kv->capacity, bb->n_ctx);
        return NULL;
    }
    /* Llama: RoPE positions continue the cache (a fixed-shape step's
     * position is kv->at, kv_cache.h invariant 5) */
    const bool fixed = kv_cache_fixed(kv);
    if (fixed && (T != 1 || kv_only)) {
        arena_fail(a, CBX_ERR_INTERNAL, "t3 backbone: a fixed-shape step of %lld positions", (long long)T);
        return NULL;
    }
    const struct tensor *pos = fixed ? kv->at : NULL;
    if (bb->arch == T3_ARCH_LLAMA && !fixed) {
        const int64_t ne[1] = {T};
        int32_t *p = arena_alloc_host(a, sizeof(int32_t) * (size_t)T);
        if (!p) return NULL;
        for (int64_t t = 0; t < T; t++) p[t] = (int32_t)(kv->n_past + t);
        if (!(pos = op_from_host(a, TYPE_I32, 1, ne, p))) return NULL;
    }
    /* layer il runs in scratch arena il % 2 (reset first), reading hs from
     * the other one; without scratch arenas everything goes to a */
    const bool ping = kv->scratch[0] && kv->scratch[1];
    struct arena *s = ping ? kv->scratch[1] : a;
    if (ping) arena_reset(s);
    /* GPT-2: hidden = inputs_embeds + wpe(position_ids) */
    const struct tensor *hs = x;
    if (bb->arch == T3_ARCH_GPT2)
        hs = op_add(s, x, fixed ? op_get_rows(s, bb->wpe, kv->at) : op_slice(s, bb->wpe, 0, kv->n_past, T));
    if (!scratch_ok(a, s)) return NULL;
    for (int il = 0; il < bb->n_layer; il++) {
        if (ping) arena_reset(s = kv->scratch[il & 1]);
        const bool last_kv = kv_only && il == bb->n_layer - 1;
        hs = bb->arch == T3_ARCH_GPT2 ? gpt2_block(s, bb, kv, il, hs, last_kv)
                                      : llama_layer_forward(s, bb, kv, il, hs, pos, last_kv);
        if (!scratch_ok(a, s)) return NULL;
        if (last_kv) {
            kv->n_past += (int)T;
            return (struct tensor *)hs;
        }
    }
    struct tensor *out = bb->arch == T3_ARCH_GPT2 ? op_layer_norm(a, hs, bb->norm_w, bb->norm_b, bb->eps)
                                                  : op_rms_norm(a, hs, bb->norm_w, bb->eps);
    if (out) kv->n_past += (int)T;
    return out;
}

/* A group of caches (kv_cache.h invariant 4): one new position for every
 * member, each at its own length; the layers as forward's. */
static struct tensor *forward_group(struct arena *a, const struct t3_backbone *bb, struct kv_cache *kv,
                                    const struct tensor *x)
{
    if (!x) return NULL;
    if (x->ndim != 3 || x->ne[0] != kv->n_rows || x->ne[1] != 1 || x->ne[2] != bb->d_model) {
        char s[64];
        arena_fail(a, CBX_ERR_INTERNAL, "t3 backbone: group input %s for %d rows of width %d",
                   tensor_shape_str(x, s, sizeof s), kv->n_rows, bb->d_model);
        return NULL;
    }
    for (int i = 0; i < kv->n_group; i++) {
        const struct kv_cache *g = kv->group[i];
        if (g->group || g->n_past + 1 > g->capacity || g->n_past + 1 > bb->n_ctx) {
            arena_fail(a, CBX_ERR_INVALID_ARG, "t3: sequence %d of the batch is full (%d cached, %d max)", i,
                       g->n_past, g->capacity);
            return NULL;
        }
    }
    /* each row's position (its member's length), on the backend once for
     * every layer: an upload between layers would wait for the queue */
    int32_t *p = arena_alloc_host(a, sizeof(int32_t) * (size_t)kv->n_rows);
    if (!p) return NULL;
    for (int i = 0, r = 0; i < kv->n_group; i++)
        for (int j = 0; j < kv->group[i]->n_rows; j++) p[r++] = kv->group[i]->n_past;
    const int64_t ne[2] = {kv->n_rows, 1};
    const struct tensor *pos = op_from_host(a, TYPE_I32, 1, ne, p);
    if (!pos) return NULL;
    const bool ping = kv->scratch[0] && kv->scratch[1];
    struct arena *s = ping ? kv->scratch[1] : a;
    if (ping) arena_reset(s);
    const struct tensor *hs = x;
    if (bb->arch == T3_ARCH_GPT2) /* hidden = inputs_embeds + wpe(position_ids): each row its own */
        hs = op_add(s, x, op_get_rows(s, bb->wpe, op_reshape(s, pos, 2, ne)));
    if (!scratch_ok(a, s)) return NULL;
    for (int il = 0; il < bb->n_layer; il++) {
        if (ping) arena_reset(s = kv->scratch[il & 1]);
        hs = bb->arch == T3_ARCH_GPT2 ? gpt2_block(s, bb, kv, il, hs, false)
                                      : llama_layer_forward(s, bb, kv, il, hs, pos, false);
        if (!scratch_ok(a, s)) return NULL;
    }
    struct tensor *out = bb->arch == T3_ARCH_GPT2 ? op_layer_norm(a, hs, bb->norm_w, bb->norm_b, bb->eps)
                                                  : op_rms_norm(a, hs, bb->norm_w, bb->eps);
    if (out)
        for (int i = 0; i < kv->n_group; i++) kv->group[i]->n_past++;
    return out;
}

struct tensor *t3_backbone_forward(struct arena *a, const struct t3_backbone *bb, struct kv_cache *kv,
                                   const struct tensor *x)
{
    if (kv->group) return forward_group(a, bb, kv, x);
    return forward(a, bb, kv, x, false);
}

cbx_status t3_backbone_prefill_kv(struct arena *a, const struct t3_backbone *bb, struct kv_cache *kv,
                                  const struct tensor *x)
{
    if (kv->group) return arena_fail(a, CBX_ERR_INTERNAL, "t3 backbone: a group does not prefill");
    if (!forward(a, bb, kv, x, true) && arena_status(a) == CBX_OK)
        return arena_fail(a, CBX_ERR_INTERNAL, "t3 backbone: no input");
    return arena_status(a);
}

int t3_backbone_linears(struct t3_backbone *bb, const struct tensor ***slots, int max)
{
    int n = 0;
    for (int il = 0; il < bb->n_layer; il++) {
        if (bb->arch == T3_ARCH_GPT2) {
            struct gpt2_layer *l = &bb->gpt2[il];
            const struct tensor **f[4] = {&l->c_attn_w, &l->c_proj_w, &l->c_fc_w, &l->mlp_proj_w};
            for (int j = 0; j < 4; j++, n++)
                if (n < max) slots[n] = f[j];
        } else {
            struct llama_layer *l = &bb->llama[il];
            const struct tensor **f[7] = {&l->q_proj_w, &l->k_proj_w, &l->v_proj_w, &l->o_proj_w,
                                          &l->gate_proj_w, &l->up_proj_w, &l->down_proj_w};
            for (int j = 0; j < 7; j++, n++)
                if (n < max) slots[n] = f[j];
        }
    }
    return n;
}

void t3_backbone_free(struct t3_backbone *bb)
{
    free(bb->gpt2);
    free(bb->llama);
    bb->gpt2 = NULL;
    bb->llama = NULL;
}
