/* ops_elementwise.c - broadcast binary ops, activations, Snake, reductions,
 * cumsum and row gathers (see ops.h). Checks operands, allocates the
 * contiguous F32 result and runs the backend's kernel. */
#include <string.h>

#include "backend.h"

static bool want_f32(struct arena *a, const struct tensor *x, const char *op, const char *what)
{
    if (x->type == TYPE_F32) return true;
    arena_fail(a, CBX_ERR_INTERNAL, "%s: %s is %s, want f32", op, what, dtype_name(x->type));
    return false;
}

static const char *binop_name(enum binop op)
{
    switch (op) {
    case BIN_ADD: return "add";
    case BIN_SUB: return "sub";
    case BIN_MUL: return "mul";
    case BIN_DIV: return "div";
    }
    return "?";
}

/* y broadcasts to x's shape */
static bool broadcasts(const struct tensor *y, const struct tensor *x)
{
    if (y->ndim > x->ndim) return false;
    for (int d = 0; d < y->ndim; d++) {
        int64_t ny = y->ne[y->ndim - 1 - d], nx = x->ne[x->ndim - 1 - d];
        if (ny != 1 && ny != nx) return false;
    }
    return true;
}

struct tensor *op_binary(struct arena *a, const struct tensor *x, const struct tensor *y,
                         enum binop op)
{
    if (!x || !y) return NULL;
    KERNEL(a, binary);
    if (!want_f32(a, x, "op_binary", "x") || !want_f32(a, y, "op_binary", "y")) return NULL;
    if ((unsigned)op > BIN_DIV) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_binary: bad op %d", (int)op);
        return NULL;
    }
    /* numpy broadcasting of y onto x's shape, dims aligned on the right;
     * the commutative ops also accept it the other way round */
    bool ok = broadcasts(y, x);
    if (!ok && (op == BIN_ADD || op == BIN_MUL) && broadcasts(x, y)) {
        const struct tensor *t = x;
        x = y;
        y = t;
        ok = true;
    }
    if (!ok) {
        char s1[64], s2[64];
        arena_fail(a, CBX_ERR_INTERNAL, "op_binary(%s): y %s does not broadcast to x %s",
                   binop_name(op), tensor_shape_str(y, s1, sizeof s1),
                   tensor_shape_str(x, s2, sizeof s2));
        return NULL;
    }
    struct tensor *out = arena_tensor(a, TYPE_F32, x->ndim, x->ne);
    if (!out) return NULL;
    if (tensor_nelements(out) > 0) be_->k.binary(a, out, x, y, op);
    return arena_status(a) == CBX_OK ? out : NULL;
}

struct tensor *op_add(struct arena *a, const struct tensor *x, const struct tensor *y)
{
    return op_binary(a, x, y, BIN_ADD);
}

struct tensor *op_mul(struct arena *a, const struct tensor *x, const struct tensor *y)
{
    return op_binary(a, x, y, BIN_MUL);
}

struct tensor *op_unary(struct arena *a, const struct tensor *x, enum unop op, float p0, float p1)
{
    if (!x) return NULL;
    KERNEL(a, unary);
    if (!want_f32(a, x, "op_unary", "x")) return NULL;
    if ((unsigned)op > UN_CLAMP) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_unary: bad op %d", (int)op);
        return NULL;
    }
    struct tensor *out = arena_tensor(a, TYPE_F32, x->ndim, x->ne);
    if (!out) return NULL;
    if (tensor_nelements(out) > 0) be_->k.unary(a, out, x, op, p0, p1);
    return arena_status(a) == CBX_OK ? out : NULL;
}

struct tensor *op_scale(struct arena *a, const struct tensor *x, float s)
{
    return op_unary(a, x, UN_SCALE, s, 0.0f);
}

struct tensor *op_snake(struct arena *a, const struct tensor *x, const struct tensor *alpha)
{
    if (!x || !alpha) return NULL;
    KERNEL(a, snake);
    if (!want_f32(a, x, "op_snake", "x") || !want_f32(a, alpha, "op_snake", "alpha")) return NULL;
    char s1[64], s2[64];
    if (x->ndim != 2 && x->ndim != 3) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_snake: x %s, want [B, C, T] or [C, T]",
                   tensor_shape_str(x, s1, sizeof s1));
        return NULL;
    }
    /* alpha [C], or any contiguous shape of C elements (e.g. [1, C, 1]),
     * passed to the kernel as a 1-d view */
    const int64_t c = x->ne[x->ndim - 2];
    struct tensor al = *alpha;
    if (alpha->ndim != 1) {
        if (!tensor_is_contiguous(alpha)) al.ndim = 0; /* rejected below */
        else al = tensor_make(TYPE_F32, 1, (int64_t[]){tensor_nelements(alpha)}, alpha->data, alpha->be);
    }
    if (al.ndim != 1 || al.ne[0] != c) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_snake: alpha %s for %lld channels of x %s",
                   tensor_shape_str(alpha, s1, sizeof s1), (long long)c,
                   tensor_shape_str(x, s2, sizeof s2));
        return NULL;
    }
    struct tensor *out = arena_tensor(a, TYPE_F32, x->ndim, x->ne);
    if (!out) return NULL;
    if (tensor_nelements(out) > 0) be_->k.snake(a, out, x, &al);
    return arena_status(a) == CBX_OK ? out : NULL;
}

struct tensor *op_reduce(struct arena *a, const struct tensor *x, enum redop op)
{
    if (!x) return NULL;
    KERNEL(a, reduce);
    if (!want_f32(a, x, "op_reduce", "x")) return NULL;
    char s1[64];
    if (x->ndim < 1 || (unsigned)op > RED_MAX || (op == RED_MAX && x->ne[x->ndim - 1] == 0)) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_reduce: op %d over the last dim of x %s", (int)op,
                   tensor_shape_str(x, s1, sizeof s1));
        return NULL;
    }
    int64_t ne[TENSOR_MAX_DIMS];
    memcpy(ne, x->ne, sizeof ne);
    ne[x->ndim - 1] = 1;
    struct tensor *out = arena_tensor(a, TYPE_F32, x->ndim, ne);
    if (!out) return NULL;
    if (tensor_nelements(out) > 0) be_->k.reduce(a, out, x, op);
    return arena_status(a) == CBX_OK ? out : NULL;
}

struct tensor *op_cumsum(struct arena *a, const struct tensor *x)
{
    if (!x) return NULL;
    KERNEL(a, cumsum);
    if (!want_f32(a, x, "op_cumsum", "x")) return NULL;
    if (x->ndim < 1) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_cumsum: scalar x");
        return NULL;
    }
    struct tensor *out = arena_tensor(a, TYPE_F32, x->ndim, x->ne);
    if (!out) return NULL;
    if (tensor_nelements(out) > 0) be_->k.cumsum(a, out, x);
    return arena_status(a) == CBX_OK ? out : NULL;
}

struct tensor *op_get_rows(struct arena *a, const struct tensor *table, const struct tensor *ids)
{
    if (!table || !ids) return NULL;
    KERNEL(a, get_rows);
    char s1[64], s2[64];
    const struct dtype_traits *tt = dtype_traits(table->type);
    bool type_ok = tt && (tt->quantized || table->type == TYPE_F32 || table->type == TYPE_F16 ||
                          table->type == TYPE_BF16);
    if (table->ndim != 2 || !type_ok || (ids->type != TYPE_I32 && ids->type != TYPE_I64) ||
        (ids->ndim != 1 && ids->ndim != 2)) {
        arena_fail(a, CBX_ERR_INTERNAL, "op_get_rows: table %s %s, ids %s %s "
                   "(want table [N, D] f32/f16/bf16/block type, ids [n] or [B, n] i32/i64)",
                   tensor_shape_str(table, s1, sizeof s1), dtype_name(table->type),
                   tensor_shape_str(ids, s2, sizeof s2), dtype_name(ids->type));
        return NULL;
    }
    /* ids are not read here (they may live on a device): callers validate
     * them where they enter (ops.h); the kernel guards the table */
    if (arena_status(a) != CBX_OK) return NULL;
    int64_t ne[3];
    for (int d = 0; d < ids->ndim; d++) ne[d] = ids->ne[d];
    ne[ids->ndim] = table->ne[1];
    struct tensor *out = arena_tensor(a, TYPE_F32, ids->ndim + 1, ne);
    if (!out) return NULL;
    if (tensor_nelements(out) > 0) be_->k.get_rows(a, out, table, ids);
    return arena_status(a) == CBX_OK ? out : NULL;
}
