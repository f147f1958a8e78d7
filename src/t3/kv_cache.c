/* kv_cache.c - T3 key/value cache of B rows and the shared cached
 * attention step (see kv_cache.h for the invariants). */
#include "kv_cache.h"

#include <math.h>
#include <string.h>

#include "core/backend.h"

enum dtype kv_cache_type(enum dtype w)
{
    const struct dtype_traits *t = dtype_traits(w);
    return t && t->quantized ? TYPE_Q8_0 : TYPE_F32;
}

cbx_status kv_cache_init(struct kv_cache *kv, int n_layer, int n_head, int head_dim,
                         enum dtype type, int n_rows, struct arena *cache, int capacity)
{
    memset(kv, 0, sizeof *kv);
    kv->n_layer = n_layer;
    kv->n_rows = n_rows;
    kv->n_head = n_head;
    kv->head_dim = head_dim;
    kv->capacity = capacity;
    kv->type = type;
    if (n_rows < 1 || capacity < 1)
        return arena_fail(cache, CBX_ERR_INVALID_ARG, "kv cache: %d rows of %d positions", n_rows, capacity);
    kv->k = arena_alloc_host(cache, sizeof *kv->k * (size_t)n_layer);
    kv->v = arena_alloc_host(cache, sizeof *kv->v * (size_t)n_layer);
    if (!kv->k || !kv->v) return arena_status(cache);
    const int64_t ne[4] = {n_rows, n_head, capacity, head_dim};
    for (int i = 0; i < n_layer; i++) {
        kv->k[i] = arena_tensor(cache, type, 4, ne);
        kv->v[i] = arena_tensor(cache, type, 4, ne);
    }
    return arena_status(cache);
}

void kv_cache_group(struct kv_cache *kv, struct kv_cache *const *members, int n, struct arena *s0,
                    struct arena *s1)
{
    memset(kv, 0, sizeof *kv);
    kv->group = members;
    kv->n_group = n;
    for (int i = 0; i < n; i++) kv->n_rows += members[i]->n_rows;
    kv->scratch[0] = s0;
    kv->scratch[1] = s1;
}

static struct tensor *attend(struct arena *a, struct kv_cache *kv, int il, const struct tensor *q,
                             const struct tensor *k, const struct tensor *v, bool kv_only, bool fixed,
                             const struct rope_params *rope);

/* A group's attention: each member over its own rows (invariant 4), the
 * outputs stacked in member order: op_attention_group, or member by
 * member where one exports probabilities (kv_cache.exp). */
static struct tensor *group_attend(struct arena *a, struct kv_cache *kv, int il, const struct tensor *q,
                                   const struct tensor *k, const struct tensor *v)
{
    const int n = kv->n_group;
    bool exp = false;
    for (int i = 0; i < n; i++) exp = exp || kv->group[i]->exp;
    if (!exp) {
        int *rows = arena_alloc_host(a, sizeof(int) * 2 * (size_t)n), *n_past = rows ? rows + n : NULL;
        struct tensor **kc = arena_alloc_host(a, sizeof *kc * 2 * (size_t)n), **vc = kc ? kc + n : NULL;
        if (!rows || !kc) return NULL;
        for (int i = 0; i < n; i++) {
            const struct kv_cache *m = kv->group[i];
            rows[i] = m->n_rows;
            n_past[i] = m->n_past;
            kc[i] = m->k[il];
            vc[i] = m->v[il];
        }
        const struct attn_group g = {n, rows, n_past, kc, vc, 1.0f / sqrtf((float)q->ne[3])};
        return op_merge_heads(a, op_attention_group(a, q, k, v, &g));
    }
    struct tensor *o = NULL;
    int64_t r0 = 0;
    for (int i = 0; i < n; i++) {
        struct kv_cache *g = kv->group[i];
        const int64_t nr = g->n_rows;
        struct tensor *oi = attend(a, g, il, op_slice(a, q, 0, r0, nr), op_slice(a, k, 0, r0, nr),
                                   op_slice(a, v, 0, r0, nr), false, false, NULL);
        o = o ? op_concat(a, o, oi, 0) : oi;
        if (!o) return NULL;
        r0 += nr;
    }
    return o;
}

struct tensor *kv_cache_attend(struct arena *a, struct kv_cache *kv, int il,
                               const struct tensor *q, const struct tensor *k,
                               const struct tensor *v, bool kv_only)
{
    return attend(a, kv, il, q, k, v, kv_only, kv_cache_fixed(kv), NULL);
}

/* the entry of x that layer il exports (the last one naming it), or -1 */
static int export_of(const struct kv_export *x, int il)
{
    int at = -1;
    for (int e = 0; x && e < x->n; e++)
        if (x->layer[e] == il) at = e;
    return at;
}

/* Whether layer il's attention is one op_attention_append (invariant 5's
 * step on a cache of its own, no probabilities exported) */
static bool one_op(const struct kv_cache *kv, int il, bool kv_only)
{
    return !kv->group && kv_cache_fixed(kv) && !kv_only && export_of(kv->exp, il) < 0;
}

/* RoPE of x [B, H, T, Dh] at positions pos; on a group (invariant 4: T =
 * 1) pos holds each row's position, and x is seen as [1, H, B, Dh] so
 * that one rotation takes each row at its own position (the same
 * arithmetic per element), then seen back as [B, H, 1, Dh]. */
static struct tensor *rope(struct arena *a, const struct tensor *x, const struct tensor *pos,
                           const struct kv_cache *kv, const struct rope_params *p)
{
    if (!kv->group || !x) return op_rope(a, x, pos, p);
    const int swap[4] = {2, 1, 0, 3};
    return op_permute(a, op_rope(a, op_permute(a, x, swap), pos, p), swap);
}

struct tensor *kv_cache_attend_rope(struct arena *a, struct kv_cache *kv, int il, const struct tensor *qk,
                                    const struct tensor *v, const struct tensor *pos, const struct rope_params *p,
                                    bool kv_only)
{
    if (!qk || !v) return NULL;
    const int64_t Hk = v->ne[1], H = qk->ne[1] - Hk;
    if (H < 1) {
        arena_fail(a, CBX_ERR_INTERNAL, "kv cache: %lld rotary heads for %lld kv heads", (long long)qk->ne[1],
                   (long long)Hk);
        return NULL;
    }
    const bool fused = one_op(kv, il, kv_only); /* rotated inside the step's one op */
    const struct tensor *r = fused ? qk : rope(a, qk, pos, kv, p);
    return attend(a, kv, il, op_slice(a, r, 1, 0, H), op_slice(a, r, 1, H, Hk), v, kv_only, kv_cache_fixed(kv),
                  fused ? p : NULL);
}

/* fixed: invariant 5's step (the caller's at and len); rope: q and k are
 * not rotated yet (one_op's step only) */
static struct tensor *attend(struct arena *a, struct kv_cache *kv, int il, const struct tensor *q,
                             const struct tensor *k, const struct tensor *v, bool kv_only, bool fixed,
                             const struct rope_params *rope)
{
    if (!q || !k || !v) return NULL;
    if (kv->group) {
        if (kv_only || q->ne[0] != kv->n_rows || q->ne[2] != 1) {
            arena_fail(a, CBX_ERR_INTERNAL, "kv cache: a group attends one new position of its %d rows",
                       kv->n_rows);
            return NULL;
        }
        return group_attend(a, kv, il, q, k, v);
    }
    const int64_t T = q->ne[2], Dh = q->ne[3];
    const int n_past = kv->n_past;
    if (fixed && (T != 1 || kv_only)) {
        arena_fail(a, CBX_ERR_INTERNAL, "kv cache: a fixed-shape step writes one position, not %lld", (long long)T);
        return NULL;
    }
    const float scale = 1.0f / sqrtf((float)Dh);
    const int e = export_of(kv->exp, il);
    if (one_op(kv, il, kv_only)) /* the write and the attention in one op */
        return op_merge_heads(
            a, op_attention_append(a, q, k, v, kv->k[il], kv->v[il], kv->at, kv->len, scale, rope));
    if (rope) {
        arena_fail(a, CBX_ERR_INTERNAL, "kv cache: unrotated keys outside a one-op step");
        return NULL;
    }
    if (fixed) {
        op_copy_into_at(a, kv->k[il], k, 2, kv->at);
        op_copy_into_at(a, kv->v[il], v, 2, kv->at);
    } else {
        op_copy_into(a, op_slice(a, kv->k[il], 2, n_past, T), k);
        op_copy_into(a, op_slice(a, kv->v[il], 2, n_past, T), v);
    }
    if (kv_only) return arena_status(a) == CBX_OK ? kv->v[il] : NULL;
    struct attn_params ap = {.scale = scale, .causal = true};
    struct attn_probs pr;
    if (e >= 0) {
        const struct kv_export *x = kv->exp;
        if (x->n_q < 1 || x->n_q > T || x->ld < kv->capacity) {
            arena_fail(a, CBX_ERR_INTERNAL, "kv cache: exporting %d query rows (stride %lld) of a %lld-row forward",
                       x->n_q, (long long)x->ld, (long long)T);
            return NULL;
        }
        pr = (struct attn_probs){x->row, x->head[e], T - x->n_q, x->n_q, x->dst[e], x->ld};
        ap.probs = &pr;
    }
    struct tensor *o;
    if (fixed) {
        ap.kv_len = kv->len;
        o = op_attention(a, q, kv->k[il], kv->v[il], NULL, &ap);
    } else {
        o = op_attention(a, q, op_slice(a, kv->k[il], 2, 0, n_past + T), op_slice(a, kv->v[il], 2, 0, n_past + T),
                         NULL, &ap);
    }
    return op_merge_heads(a, o);
}

/* bytes of one head's n cached positions */
static size_t head_run(enum dtype type, int head_dim, int n)
{
    return (size_t)n * dtype_row_size(type, head_dim);
}

size_t kv_cache_bytes(int n_layer, int n_head, int head_dim, enum dtype type, int n)
{
    return 2 * (size_t)n_layer * (size_t)n_head * head_run(type, head_dim, n);
}

/* The cache tensors are [B, H, capacity, Dh] of kv->type, so row b's head
 * h's first n positions are one contiguous run at data + b * nb[0] +
 * h * nb[1]. */
static bool cache_ok(struct arena *a, const struct kv_cache *kv)
{
    for (int il = 0; il < kv->n_layer; il++)
        for (int s = 0; s < 2; s++) {
            const struct tensor *c = s ? kv->v[il] : kv->k[il];
            if (c->type != kv->type || c->ndim != 4 || c->ne[0] != kv->n_rows || c->ne[1] != kv->n_head ||
                c->nb[2] != (int64_t)dtype_row_size(kv->type, kv->head_dim)) {
                arena_fail(a, CBX_ERR_INTERNAL, "kv cache: not laid out as kv_cache_init makes it");
                return false;
            }
        }
    return true;
}

cbx_status kv_cache_row(struct arena *a, const struct kv_cache *kv, int row, struct kv_cache *out)
{
    memset(out, 0, sizeof *out);
    if (kv->group || row < 0 || row >= kv->n_rows)
        return arena_fail(a, CBX_ERR_INTERNAL, "kv cache: no row %d of %d to view", row, kv->n_rows);
    *out = *kv;
    out->n_rows = 1;
    out->exp = NULL;
    out->at = out->len = NULL;
    out->k = arena_alloc_host(a, sizeof *out->k * (size_t)kv->n_layer);
    out->v = arena_alloc_host(a, sizeof *out->v * (size_t)kv->n_layer);
    if (!out->k || !out->v) return arena_status(a);
    for (int il = 0; il < kv->n_layer; il++) {
        out->k[il] = op_slice(a, kv->k[il], 0, row, 1);
        out->v[il] = op_slice(a, kv->v[il], 0, row, 1);
    }
    return arena_status(a);
}

cbx_status kv_cache_save_at(struct arena *a, const struct kv_cache *kv, int p0, int n, void *dst)
{
    if (p0 < 0 || n < 0 || p0 + n > kv->n_past)
        return arena_fail(a, CBX_ERR_INVALID_ARG, "kv cache: saving positions [%d, %d) of %d cached", p0, p0 + n,
                          kv->n_past);
    if (!cache_ok(a, kv)) return arena_status(a);
    const size_t run = head_run(kv->type, kv->head_dim, n), skip = head_run(kv->type, kv->head_dim, p0);
    char *o = dst;
    for (int il = 0; il < kv->n_layer; il++)
        for (int s = 0; s < 2; s++) {
            const struct tensor *c = s ? kv->v[il] : kv->k[il];
            for (int h = 0; h < kv->n_head; h++, o += run) {
                const char *src = (const char *)c->data + h * c->nb[1] + skip;
                if (!c->be || c->be->host) memcpy(o, src, run);
                else if (!c->be->to_host(c->be, o, src, run))
                    return arena_fail(a, CBX_ERR_INTERNAL, "kv cache: saving from %s failed", c->be->name);
            }
        }
    return CBX_OK;
}

cbx_status kv_cache_save(struct arena *a, const struct kv_cache *kv, int n, void *dst)
{
    return kv_cache_save_at(a, kv, 0, n, dst);
}

cbx_status kv_cache_restore_at(struct arena *a, struct kv_cache *kv, int p0, int n, const void *src,
                               bool on_backend)
{
    if (p0 < 0 || n < 0 || p0 + n > kv->capacity)
        return arena_fail(a, CBX_ERR_INVALID_ARG, "kv cache: restoring positions [%d, %d) into a cache of %d", p0,
                          p0 + n, kv->capacity);
    if (!cache_ok(a, kv)) return arena_status(a);
    const struct backend *be = kv->k[0]->be;
    /* host memory into a host cache, or device memory into a device one:
     * strided copies on the backend; host memory into a device cache:
     * one transfer per head */
    const bool direct = on_backend || (be && be->host);
    if (!be || (direct && !be->copy_2d))
        return arena_fail(a, CBX_ERR_INTERNAL, "kv cache: backend %s has no copy", be ? be->name : "(none)");
    const size_t run = head_run(kv->type, kv->head_dim, n), skip = head_run(kv->type, kv->head_dim, p0);
    const char *in = src;
    for (int il = 0; il < kv->n_layer; il++)
        for (int s = 0; s < 2; s++, in += run * (size_t)kv->n_head) {
            struct tensor *c = s ? kv->v[il] : kv->k[il];
            for (int b = 0; b < kv->n_rows; b++) {
                char *d = (char *)c->data + b * c->nb[0] + skip;
                bool ok = direct ? be->copy_2d(be, d, (size_t)c->nb[1], in, run, run, (size_t)kv->n_head) : true;
                for (int h = 0; !direct && ok && h < kv->n_head; h++)
                    ok = be->from_host(be, d + h * c->nb[1], in + h * run, run);
                if (!ok) return arena_fail(a, CBX_ERR_INTERNAL, "kv cache: restoring on %s failed", be->name);
            }
        }
    kv->n_past = p0 + n;
    return CBX_OK;
}

cbx_status kv_cache_restore(struct arena *a, struct kv_cache *kv, int n, const void *src, bool on_backend)
{
    return kv_cache_restore_at(a, kv, 0, n, src, on_backend);
}
