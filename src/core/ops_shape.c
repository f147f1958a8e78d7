/* ops_shape.c - transfers, views, copies and concatenation (see ops.h).
 * Views only rewrite descriptors; copies go through the backend's cpy
 * kernel, which handles any strides. */
#include <string.h>

#include "backend.h"
#include "rng.h"

struct tensor *op_from_host(struct arena *a, enum dtype type, int ndim,
                            const int64_t *ne, const void *host)
{
    struct tensor *t = arena_tensor(a, type, ndim, ne);
    if (!t) return NULL;
    const struct backend *be = arena_backend(a);
    size_t n = tensor_nbytes(t);
    if (n && !be->from_host(be, t->data, host, n)) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: an upload of %zu bytes failed", be->name, n);
        return NULL;
    }
    return t;
}

cbx_status tensor_to_host(const struct tensor *t, void *dst)
{
    if (!tensor_is_contiguous(t))
        return CBX_ERR_INVALID_ARG; /* callers copy views with op_cont first */
    size_t n = tensor_nbytes(t);
    if (n == 0) return CBX_OK;
    if (!t->be || t->be->host) memcpy(dst, t->data, n);
    else if (!t->be->to_host(t->be, dst, t->data, n)) return CBX_ERR_INTERNAL; /* the line is printed */
    return CBX_OK;
}

struct tensor *op_fill(struct arena *a, int ndim, const int64_t *ne, float v)
{
    KERNEL(a, fill);
    struct tensor *t = arena_tensor(a, TYPE_F32, ndim, ne);
    if (t) be_->k.fill(a, t, v);
    return t;
}

struct tensor *op_randn(struct arena *a, int ndim, const int64_t *ne, struct rng_stream *s)
{
    KERNEL(a, randn);
    struct tensor *t = arena_tensor(a, TYPE_F32, ndim, ne);
    if (!t) return NULL;
    const int64_t n = tensor_nelements(t);
    if (n > 0) be_->k.randn(a, t, s->key, s->counter);
    s->counter += 2 * (uint64_t)n;
    return t;
}

static bool bad_dim(struct arena *a, const struct tensor *x, int dim, const char *op)
{
    if (dim < 0 || dim >= x->ndim) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: dim %d out of range for %d dims", op, dim, x->ndim);
        return true;
    }
    return false;
}

struct tensor *op_slice(struct arena *a, const struct tensor *x, int dim,
                        int64_t start, int64_t len)
{
    if (!x) return NULL;
    if (dim < 0) dim += x->ndim;
    if (bad_dim(a, x, dim, "op_slice")) return NULL;
    if (start < 0 || len < 0 || start + len > x->ne[dim]) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_slice: [%lld, %lld) outside dim %d of size %lld",
                   (long long)start, (long long)(start + len), dim, (long long)x->ne[dim]);
        return NULL;
    }
    if (dim == x->ndim - 1 && dtype_traits(x->type)->quantized) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_slice: cannot slice inside %s rows", dtype_name(x->type));
        return NULL;
    }
    struct tensor v = *x;
    v.ne[dim] = len;
    v.data = (char *)x->data + start * x->nb[dim];
    return arena_desc(a, &v);
}

struct tensor *op_reshape(struct arena *a, const struct tensor *x, int ndim, const int64_t *ne)
{
    if (!x) return NULL;
    if (ndim < 0 || ndim > TENSOR_MAX_DIMS) { /* before tensor_make writes ne[ndim - 1] */
        arena_fail(a, CBX_ERR_INTERNAL, "op_reshape: %d dims (at most %d)", ndim, TENSOR_MAX_DIMS);
        return NULL;
    }
    struct tensor v = tensor_make(x->type, ndim, ne, x->data, x->be);
    v.name = x->name;
    if (!tensor_is_contiguous(x) || tensor_nelements(&v) != tensor_nelements(x) ||
        ndim > TENSOR_MAX_DIMS) {
        char s1[64], s2[64];
        arena_fail(a, CBX_ERR_INTERNAL, "op_reshape: %s -> %s (%scontiguous)",
                   tensor_shape_str(x, s1, sizeof s1), tensor_shape_str(&v, s2, sizeof s2),
                   tensor_is_contiguous(x) ? "" : "not ");
        return NULL;
    }
    return arena_desc(a, &v);
}

struct tensor *op_permute(struct arena *a, const struct tensor *x, const int *perm)
{
    if (!x) return NULL;
    if (dtype_traits(x->type)->quantized) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_permute: block type %s", dtype_name(x->type));
        return NULL;
    }
    struct tensor v = *x;
    int seen = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (perm[i] < 0 || perm[i] >= x->ndim || (seen & (1 << perm[i]))) {
            arena_fail(a, CBX_ERR_INTERNAL, "op_permute: bad permutation");
            return NULL;
        }
        seen |= 1 << perm[i];
        v.ne[i] = x->ne[perm[i]];
        v.nb[i] = x->nb[perm[i]];
    }
    return arena_desc(a, &v);
}

struct tensor *op_transpose(struct arena *a, const struct tensor *x, int d0, int d1)
{
    if (!x) return NULL;
    if (d0 < 0) d0 += x->ndim;
    if (d1 < 0) d1 += x->ndim;
    if (bad_dim(a, x, d0, "op_transpose") || bad_dim(a, x, d1, "op_transpose")) return NULL;
    int perm[TENSOR_MAX_DIMS] = {0, 1, 2, 3};
    perm[d0] = d1;
    perm[d1] = d0;
    return op_permute(a, x, perm);
}

struct tensor *op_split_dim(struct arena *a, const struct tensor *x, int dim, int64_t n_outer)
{
    if (!x) return NULL;
    if (dim < 0) dim += x->ndim;
    if (bad_dim(a, x, dim, "op_split_dim")) return NULL;
    if (x->ndim == TENSOR_MAX_DIMS || n_outer <= 0 || x->ne[dim] % n_outer ||
        (dim == x->ndim - 1 && dtype_traits(x->type)->quantized)) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_split_dim: cannot split dim %d of size %lld into %lld",
                   dim, (long long)x->ne[dim], (long long)n_outer);
        return NULL;
    }
    struct tensor v = *x;
    for (int d = x->ndim; d > dim + 1 && d < TENSOR_MAX_DIMS; d--) {
        v.ne[d] = x->ne[d - 1];
        v.nb[d] = x->nb[d - 1];
    }
    v.ndim = x->ndim + 1;
    v.ne[dim] = n_outer;
    v.ne[dim + 1] = x->ne[dim] / n_outer;
    v.nb[dim + 1] = x->nb[dim];
    v.nb[dim] = x->nb[dim] * v.ne[dim + 1];
    return arena_desc(a, &v);
}

struct tensor *op_cast(struct arena *a, const struct tensor *x, enum dtype type)
{
    if (!x) return NULL;
    KERNEL(a, cpy);
    struct tensor *t = arena_tensor(a, type, x->ndim, x->ne);
    if (t) be_->k.cpy(a, t, x);
    return arena_status(a) == CBX_OK ? t : NULL;
}

struct tensor *op_cont(struct arena *a, const struct tensor *x)
{
    if (!x) return NULL;
    return op_cast(a, x, x->type);
}

static const int heads_perm[4] = {0, 2, 1, 3}; /* [B,T,H,Dh] <-> [B,H,T,Dh] */

struct tensor *op_split_heads(struct arena *a, const struct tensor *x, int64_t H)
{
    if (!x) return NULL;
    if (x->ndim != 3) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_split_heads: %d dims, want [B, T, H * Dh]", x->ndim);
        return NULL;
    }
    return op_permute(a, op_split_dim(a, x, 2, H), heads_perm);
}

struct tensor *op_merge_heads(struct arena *a, const struct tensor *o)
{
    if (!o) return NULL;
    if (o->ndim != 4) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_merge_heads: %d dims, want [B, H, T, Dh]", o->ndim);
        return NULL;
    }
    const int64_t merged[3] = {o->ne[0], o->ne[2], o->ne[1] * o->ne[3]};
    return op_reshape(a, op_cont(a, op_permute(a, o, heads_perm)), 3, merged);
}

cbx_status op_copy_into(struct arena *a, struct tensor *dst, const struct tensor *src)
{
    if (!dst || !src) return arena_status(a) != CBX_OK ? arena_status(a) : CBX_ERR_INTERNAL;
    if (!tensor_same_shape(dst, src)) {
        char s1[64], s2[64];
        return arena_fail(a, CBX_ERR_INTERNAL, "op_copy_into: %s into %s",
                          tensor_shape_str(src, s1, sizeof s1), tensor_shape_str(dst, s2, sizeof s2));
    }
    const struct backend *be = arena_backend(a);
    if (!be->k.cpy) return arena_fail(a, CBX_ERR_UNSUPPORTED, "cpy: backend %s has no kernel", be->name);
    be->k.cpy(a, dst, src);
    return arena_status(a);
}

bool op_index_operand(struct arena *a, const char *op, const struct tensor *t, int32_t *v)
{
    if (t->type != TYPE_I32 || tensor_nelements(t) != 1) {
        char s[64];
        arena_fail(a, CBX_ERR_INTERNAL, "%s: index operand %s %s, want one i32", op, dtype_name(t->type),
                   tensor_shape_str(t, s, sizeof s));
        return false;
    }
    if (!arena_backend(a)->host) return true;
    if (t->be && !t->be->host) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: index operand in %s memory, computing on a host backend", op,
                   t->be->name);
        return false;
    }
    *v = *(const int32_t *)t->data;
    return true;
}

cbx_status op_copy_into_at(struct arena *a, struct tensor *dst, const struct tensor *src, int dim,
                           const struct tensor *at)
{
    if (!dst || !src || !at) return arena_status(a) != CBX_OK ? arena_status(a) : CBX_ERR_INTERNAL;
    if (dim < 0) dim += dst->ndim;
    if (bad_dim(a, dst, dim, "op_copy_into_at")) return arena_status(a);
    const int64_t n = src->ndim == dst->ndim ? src->ne[dim] : -1;
    if (n < 0 || n > dst->ne[dim])
        return op_copy_into(a, dst, src); /* reports the shapes */
    int32_t pos = 0;
    if (!op_index_operand(a, "op_copy_into_at", at, &pos)) return arena_status(a);
    const struct backend *be = arena_backend(a);
    if (be->host) { /* the value is at hand: a plain copy into the slice */
        if (pos < 0 || pos > dst->ne[dim] - n)
            return arena_fail(a, CBX_ERR_INTERNAL, "op_copy_into_at: %lld positions at %d of %lld",
                              (long long)n, pos, (long long)dst->ne[dim]);
        return op_copy_into(a, op_slice(a, dst, dim, pos, n), src);
    }
    struct tensor *d0 = op_slice(a, dst, dim, 0, n);
    if (!d0) return arena_status(a);
    if (!tensor_same_shape(d0, src)) return op_copy_into(a, d0, src);
    if (!be->k.cpy_at) return arena_fail(a, CBX_ERR_UNSUPPORTED, "cpy_at: backend %s has no kernel", be->name);
    be->k.cpy_at(a, d0, src, at, dst->nb[dim], dst->ne[dim] - n);
    return arena_status(a);
}

struct tensor *op_concat(struct arena *a, const struct tensor *x, const struct tensor *y, int dim)
{
    if (!x || !y) return NULL;
    if (dim < 0) dim += x->ndim;
    if (bad_dim(a, x, dim, "op_concat")) return NULL;
    bool ok = x->ndim == y->ndim && x->type == y->type;
    for (int d = 0; ok && d < x->ndim; d++)
        if (d != dim && x->ne[d] != y->ne[d]) ok = false;
    if (!ok) {
        char s1[64], s2[64];
        arena_fail(a, CBX_ERR_INTERNAL, "op_concat: %s and %s along dim %d",
                   tensor_shape_str(x, s1, sizeof s1), tensor_shape_str(y, s2, sizeof s2), dim);
        return NULL;
    }
    int64_t ne[TENSOR_MAX_DIMS];
    memcpy(ne, x->ne, sizeof ne);
    ne[dim] = x->ne[dim] + y->ne[dim];
    struct tensor *out = arena_tensor(a, x->type, x->ndim, ne);
    if (!out) return NULL;
    op_copy_into(a, op_slice(a, out, dim, 0, x->ne[dim]), x);
    op_copy_into(a, op_slice(a, out, dim, x->ne[dim], y->ne[dim]), y);
    return arena_status(a) == CBX_OK ? out : NULL;
}
