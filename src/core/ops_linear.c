/* ops_linear.c - linear algebra ops (see ops.h): operand checks, result
 * allocation, dispatch to the backend's linear / matmul kernel. */
#include "backend.h"

static bool linear_weight_type(enum dtype t)
{
    switch (t) {
    case TYPE_F32: case TYPE_F16: case TYPE_BF16: case TYPE_Q8_0:
    case TYPE_Q4_0: case TYPE_Q4_1: case TYPE_Q5_0: case TYPE_Q5_1:
        return true;
    default:
        return false;
    }
}

/* op_linear's checks: false with the arena failed */
static bool linear_ok(struct arena *a, const char *op, const struct tensor *x, const struct tensor *w,
                      const struct tensor *b)
{
    char s1[64], s2[64], s3[64];
    const int64_t k = x->ndim ? x->ne[x->ndim - 1] : 0;
    /* weight rows must be contiguous inside (blocks or elements packed) */
    bool w_ok = w->ndim == 2 && linear_weight_type(w->type) && w->ne[1] == k &&
                (dtype_traits(w->type)->quantized || w->ne[1] <= 1 ||
                 w->nb[1] == (int64_t)dtype_traits(w->type)->size);
    if (x->type != TYPE_F32 || x->ndim < 1 || !w_ok ||
        (b && (b->type != TYPE_F32 || b->ndim != 1 || b->ne[0] != w->ne[0]))) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: x %s %s, w %s %s%s%s%s%s", op,
                   dtype_name(x->type), tensor_shape_str(x, s1, sizeof s1),
                   dtype_name(w->type), tensor_shape_str(w, s2, sizeof s2),
                   b ? ", b " : "", b ? dtype_name(b->type) : "", b ? " " : "",
                   b ? tensor_shape_str(b, s3, sizeof s3) : "");
        return false;
    }
    return true;
}

/* the result of x[..., K] @ w[N, K]^T: [..., N] (F32), after the checks */
static struct tensor *linear_out(struct arena *a, const char *op, const struct tensor *x, const struct tensor *w,
                                 const struct tensor *b)
{
    if (!linear_ok(a, op, x, w, b)) return NULL;
    int64_t ne[TENSOR_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) ne[d] = x->ne[d];
    ne[x->ndim - 1] = w->ne[0];
    return arena_tensor(a, TYPE_F32, x->ndim, ne);
}

struct tensor *op_linear(struct arena *a, const struct tensor *x,
                         const struct tensor *w, const struct tensor *b)
{
    if (!x || !w) return NULL;
    KERNEL(a, linear);
    struct tensor *out = linear_out(a, "op_linear", x, w, b);
    if (!out) return NULL;
    be_->k.linear(a, out, x, w, b);
    return arena_status(a) == CBX_OK ? out : NULL;
}

/* linear_out for a product with an epilogue (act, residual r), checked */
static struct tensor *epilogue_out(struct arena *a, const char *op, const struct tensor *x, const struct tensor *w,
                                   const struct tensor *b, int act, const struct tensor *r)
{
    struct tensor *out = linear_out(a, op, x, w, b);
    if (!out) return NULL;
    char s1[64], s2[64];
    if (r && (r->type != TYPE_F32 || !tensor_same_shape(r, out))) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: residual %s %s for a result %s", op, dtype_name(r->type),
                   tensor_shape_str(r, s1, sizeof s1), tensor_shape_str(out, s2, sizeof s2));
        return NULL;
    }
    if (act < -1 || act > UN_CLAMP) {
        arena_fail(a, CBX_ERR_INTERNAL, "%s: activation %d", op, act);
        return NULL;
    }
    return out;
}

struct tensor *op_linear_ex(struct arena *a, const struct tensor *x, const struct tensor *w,
                            const struct tensor *b, int act, const struct tensor *r)
{
    if (!x || !w) return NULL;
    const struct backend *be = arena_backend(a);
    if (!be->k.linear_ex) {
        struct tensor *y = op_linear(a, x, w, b);
        if (act >= 0) y = op_unary(a, y, (enum unop)act, 0, 0);
        return r ? op_add(a, r, y) : y;
    }
    struct tensor *out = epilogue_out(a, "op_linear_ex", x, w, b, act, r);
    if (!out) return NULL;
    be->k.linear_ex(a, out, x, w, b, act, r);
    return arena_status(a) == CBX_OK ? out : NULL;
}

struct tensor *op_linear_gated(struct arena *a, const struct tensor *x, const struct tensor *gate,
                               const struct tensor *w, const struct tensor *b, int act, const struct tensor *r)
{
    if (!x || !gate || !w) return NULL;
    const struct backend *be = arena_backend(a);
    char s1[64], s2[64];
    if (x->type != TYPE_F32 || gate->type != TYPE_F32 || !tensor_same_shape(x, gate)) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_linear_gated: input %s %s, gate %s %s", dtype_name(x->type),
                   tensor_shape_str(x, s1, sizeof s1), dtype_name(gate->type), tensor_shape_str(gate, s2, sizeof s2));
        return NULL;
    }
    if (be->k.linear_gated && be->k.linear_ex) {
        struct tensor *out = epilogue_out(a, "op_linear_gated", x, w, b, act, r);
        if (!out) return NULL;
        if (be->k.linear_gated(a, out, x, gate, w, b, act, r)) return arena_status(a) == CBX_OK ? out : NULL;
        if (arena_status(a) != CBX_OK) return NULL;
    }
    return op_linear_ex(a, op_mul(a, x, gate), w, b, act, r);
}

/* op_linear_cat's input h: x, or its norm */
static struct tensor *norm_input(struct arena *a, const struct tensor *x, const struct linear_norm *norm)
{
    if (!norm) return (struct tensor *)x;
    return norm->kind == LINEAR_NORM_LAYER ? op_layer_norm(a, x, norm->g, norm->b, norm->eps)
                                           : op_rms_norm(a, x, norm->g, norm->eps);
}

struct tensor *op_linear_cat(struct arena *a, const struct tensor *x, const struct linear_norm *norm, int n,
                             const struct tensor *const *w, const struct tensor *const *b, const int *act)
{
    if (!x || !w) return NULL;
    if (n < 1 || n > OP_LINEAR_CAT_MAX) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_linear_cat: %d weights (1..%d)", n, OP_LINEAR_CAT_MAX);
        return NULL;
    }
    const int64_t K = x->ndim ? x->ne[x->ndim - 1] : 0;
    if (norm) {
        const struct tensor *p[2] = {norm->g, norm->b};
        for (int i = 0; i < 2; i++)
            if (p[i] && ((p[i]->type != TYPE_F32 && p[i]->type != TYPE_F16 && p[i]->type != TYPE_BF16) ||
                         p[i]->ndim != 1 || p[i]->ne[0] != K || (i == 1 && norm->kind != LINEAR_NORM_LAYER))) {
                arena_fail(a, CBX_ERR_INTERNAL, "op_linear_cat: norm %s of %s [%lld] for width %lld",
                           i ? "bias" : "weight", dtype_name(p[i]->type), (long long)p[i]->ne[0], (long long)K);
                return NULL;
            }
        if (norm->kind != LINEAR_NORM_LAYER && norm->kind != LINEAR_NORM_RMS) {
            arena_fail(a, CBX_ERR_INTERNAL, "op_linear_cat: norm kind %d", (int)norm->kind);
            return NULL;
        }
    }
    for (int i = 0; i < n; i++) {
        if (!w[i]) return NULL;
        if (act && (act[i] < -1 || act[i] > UN_CLAMP)) {
            arena_fail(a, CBX_ERR_INTERNAL, "op_linear_cat: activation %d", act[i]);
            return NULL;
        }
    }
    const struct backend *be = arena_backend(a);
    if (!be->k.linear_cat) {
        const struct tensor *h = norm_input(a, x, norm);
        struct tensor *out = NULL;
        for (int i = 0; h && i < n; i++) {
            struct tensor *y = op_linear_ex(a, h, w[i], b ? b[i] : NULL, act ? act[i] : -1, NULL);
            out = i ? op_concat(a, out, y, x->ndim - 1) : y;
        }
        return out;
    }
    int64_t N = 0;
    for (int i = 0; i < n; i++) {
        if (!linear_ok(a, "op_linear_cat", x, w[i], b ? b[i] : NULL)) return NULL;
        if (w[i]->type != w[0]->type) {
            arena_fail(a, CBX_ERR_INTERNAL, "op_linear_cat: weights of %s and %s", dtype_name(w[0]->type),
                       dtype_name(w[i]->type));
            return NULL;
        }
        N += w[i]->ne[0];
    }
    int64_t ne[TENSOR_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) ne[d] = x->ne[d];
    ne[x->ndim - 1] = N;
    struct tensor *out = arena_tensor(a, TYPE_F32, x->ndim, ne);
    if (!out) return NULL;
    const int none[OP_LINEAR_CAT_MAX] = {-1, -1, -1, -1};
    const struct tensor *nob[OP_LINEAR_CAT_MAX] = {NULL, NULL, NULL, NULL};
    be->k.linear_cat(a, out, x, norm, n, w, b ? b : nob, act ? act : none);
    return arena_status(a) == CBX_OK ? out : NULL;
}

struct tensor *op_matmul(struct arena *a, const struct tensor *x, const struct tensor *y)
{
    if (!x || !y) return NULL;
    const struct backend *be = arena_backend(a);
    if (!be->k.matmul) {
        arena_fail(a, CBX_ERR_UNSUPPORTED, "matmul: backend %s has no kernel", be->name);
        return NULL;
    }
    char s1[64], s2[64];
    bool ok = x->type == TYPE_F32 && y->type == TYPE_F32 && x->ndim >= 2 && y->ndim >= 2 &&
              x->ne[x->ndim - 1] == y->ne[y->ndim - 2];
    int nd = x->ndim > y->ndim ? x->ndim : y->ndim;
    int64_t ne[TENSOR_MAX_DIMS];
    for (int d = 0; ok && d < nd - 2; d++) { /* numpy broadcast of batch dims */
        int dx = d - (nd - x->ndim), dy = d - (nd - y->ndim);
        int64_t nx = dx >= 0 ? x->ne[dx] : 1, ny = dy >= 0 ? y->ne[dy] : 1;
        if (nx != ny && nx != 1 && ny != 1) ok = false;
        ne[d] = nx == 1 ? ny : nx;
    }
    if (!ok) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_matmul: x %s %s @ y %s %s", dtype_name(x->type),
                   tensor_shape_str(x, s1, sizeof s1), dtype_name(y->type),
                   tensor_shape_str(y, s2, sizeof s2));
        return NULL;
    }
    ne[nd - 2] = x->ne[x->ndim - 2];
    ne[nd - 1] = y->ne[y->ndim - 1];
    struct tensor *out = arena_tensor(a, TYPE_F32, nd, ne);
    if (!out) return NULL;
    be->k.matmul(a, out, x, y);
    return arena_status(a) == CBX_OK ? out : NULL;
}
