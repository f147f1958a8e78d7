/* elementwise.c - ref kernels of the elementwise group (see ops.h): copy and
 * type conversion, fill, broadcast binary ops, activations, Snake,
 * reductions, cumsum and row gathers.
 *
 * Plain loops over a 4-d view of every operand (shape padded with leading
 * ones, strides in bytes), one element at a time, single thread. The
 * activations are evaluated in double with libm and rounded once, which
 * makes this the more exact side in the cpu-vs-ref tests; the pure float
 * arithmetic (scale, clamp, binary ops) is done in float exactly as
 * torch does, so those kernels must agree bit for bit. */
#include <math.h>
#include <string.h>

#include "../backend.h"
#include "../elem.h"
#include "../quant.h"
#include "../scalar.h"

static void ref_cpy(struct arena *a, struct tensor *out, const struct tensor *x)
{
    const struct dtype_traits *tx = dtype_traits(x->type), *to = dtype_traits(out->type);
    if (!tx || !to || tensor_nelements(x) != tensor_nelements(out) || x->ndim != out->ndim) {
        arena_fail(a, CBX_ERR_INTERNAL, "cpy: bad operands (%s -> %s)", dtype_name(x->type),
                   dtype_name(out->type));
        return;
    }
    int64_t ne[4], xb[4], oe[4], ob[4];
    elem_shape4(x, ne, xb);
    elem_shape4(out, oe, ob);
    const int64_t n = ne[3];
    if (tx->quantized || to->quantized) {
        /* whole rows: block rows are contiguous by definition */
        if ((tx->quantized && n % tx->blck) || (to->quantized && n % to->blck)) {
            arena_fail(a, CBX_ERR_INTERNAL, "cpy: rows of %lld are not whole blocks (%s -> %s)",
                       (long long)n, tx->name, to->name);
            return;
        }
        float *row = arena_alloc_host(a, (size_t)(n > 0 ? n : 1) * sizeof *row);
        if (!row) return;
        for (int64_t i0 = 0; i0 < ne[0]; i0++)
            for (int64_t i1 = 0; i1 < ne[1]; i1++)
                for (int64_t i2 = 0; i2 < ne[2]; i2++) {
                    const char *xr = (const char *)x->data + i0 * xb[0] + i1 * xb[1] + i2 * xb[2];
                    char *or = (char *)out->data + i0 * ob[0] + i1 * ob[1] + i2 * ob[2];
                    if (x->type == out->type) {
                        memcpy(or, xr, dtype_row_size(x->type, n));
                        continue;
                    }
                    if (tx->quantized) dequantize_row(x->type, xr, row, n);
                    else
                        for (int64_t i = 0; i < n; i++) row[i] = (float)elem_load_f(x->type, xr + i * xb[3]);
                    if (to->quantized) quantize_row(out->type, row, or, n);
                    else
                        for (int64_t i = 0; i < n; i++) elem_store_f(out->type, or + i * ob[3], row[i]);
                }
        return;
    }
    for (int64_t i0 = 0; i0 < ne[0]; i0++)
        for (int64_t i1 = 0; i1 < ne[1]; i1++)
            for (int64_t i2 = 0; i2 < ne[2]; i2++)
                for (int64_t i3 = 0; i3 < n; i3++) {
                    const char *xp = (const char *)x->data + i0 * xb[0] + i1 * xb[1] +
                                     i2 * xb[2] + i3 * xb[3];
                    char *op = (char *)out->data + i0 * ob[0] + i1 * ob[1] + i2 * ob[2] +
                               i3 * ob[3];
                    if (x->type == out->type) memcpy(op, xp, tx->size);
                    else if (elem_is_int(x->type) && elem_is_int(out->type)) elem_store_i(out->type, op, elem_load_i(x->type, xp));
                    else elem_store_f(out->type, op, elem_load_f(x->type, xp));
                }
}

static void ref_randn(struct arena *a, struct tensor *out, uint64_t key, uint64_t c)
{
    (void)a;
    float *o = (float *)out->data;
    const int64_t n = tensor_nelements(out);
    for (int64_t i = 0; i < n; i++) o[i] = scalar_rng_gaussian(key, c + 2 * (uint64_t)i);
}

static void ref_fill(struct arena *a, struct tensor *out, float v)
{
    (void)a;
    int64_t ne[4], nb[4];
    elem_shape4(out, ne, nb);
    for (int64_t i0 = 0; i0 < ne[0]; i0++)
        for (int64_t i1 = 0; i1 < ne[1]; i1++)
            for (int64_t i2 = 0; i2 < ne[2]; i2++)
                for (int64_t i3 = 0; i3 < ne[3]; i3++)
                    elem_store_f(out->type, (char *)out->data + i0 * nb[0] + i1 * nb[1] + i2 * nb[2] +
                                           i3 * nb[3], v);
}

static float *at(const struct tensor *t, const int64_t nb[4], int64_t i0, int64_t i1,
                 int64_t i2, int64_t i3)
{
    return (float *)((char *)t->data + i0 * nb[0] + i1 * nb[1] + i2 * nb[2] + i3 * nb[3]);
}

static void ref_binary(struct arena *a, struct tensor *out, const struct tensor *x,
                       const struct tensor *y, enum binop op)
{
    (void)a;
    int64_t ne[4], xb[4], yne[4], yb[4], one[4], ob[4];
    elem_shape4(x, ne, xb);
    elem_shape4(y, yne, yb);
    elem_shape4(out, one, ob);
    for (int d = 0; d < 4; d++)
        if (yne[d] == 1) yb[d] = 0; /* broadcast */
    for (int64_t i0 = 0; i0 < ne[0]; i0++)
        for (int64_t i1 = 0; i1 < ne[1]; i1++)
            for (int64_t i2 = 0; i2 < ne[2]; i2++)
                for (int64_t i3 = 0; i3 < ne[3]; i3++) {
                    float u = *at(x, xb, i0, i1, i2, i3), v = *at(y, yb, i0, i1, i2, i3), r = 0;
                    switch (op) {
                    case BIN_ADD: r = u + v; break;
                    case BIN_SUB: r = u - v; break;
                    case BIN_MUL: r = u * v; break;
                    case BIN_DIV: r = u / v; break;
                    }
                    *at(out, ob, i0, i1, i2, i3) = r;
                }
}


static void ref_unary(struct arena *a, struct tensor *out, const struct tensor *x,
                      enum unop op, float p0, float p1)
{
    (void)a;
    int64_t ne[4], xb[4], one[4], ob[4];
    elem_shape4(x, ne, xb);
    elem_shape4(out, one, ob);
    for (int64_t i0 = 0; i0 < ne[0]; i0++)
        for (int64_t i1 = 0; i1 < ne[1]; i1++)
            for (int64_t i2 = 0; i2 < ne[2]; i2++)
                for (int64_t i3 = 0; i3 < ne[3]; i3++)
                    *at(out, ob, i0, i1, i2, i3) = scalar_unary((int)op, *at(x, xb, i0, i1, i2, i3), p0, p1);
}

/* HiFT Snake (alpha_logscale=False), in torch's float order:
 * x + (1.0 / (alpha + 1e-9)) * pow(sin(x * alpha), 2). */
static void ref_snake(struct arena *a, struct tensor *out, const struct tensor *x,
                      const struct tensor *alpha)
{
    (void)a;
    int64_t ne[4], xb[4], one[4], ob[4];
    elem_shape4(x, ne, xb);
    elem_shape4(out, one, ob);
    for (int64_t i1 = 0; i1 < ne[1]; i1++)
        for (int64_t i2 = 0; i2 < ne[2]; i2++) {
            float al = *(const float *)((const char *)alpha->data + i2 * alpha->nb[0]);
            float inv = 1.0f / (al + 1e-9f);
            for (int64_t i3 = 0; i3 < ne[3]; i3++) {
                float v = *at(x, xb, 0, i1, i2, i3);
                float s = (float)sin((double)(v * al));
                *at(out, ob, 0, i1, i2, i3) = v + inv * (s * s);
            }
        }
}

/* Along the last dim with a double accumulator: reduction op into
 * out[..., 0] (ref_reduce), or with cum every running sum into out
 * (ref_cumsum: torch.cumsum on CPU accumulates in double). */
static void along_last(struct tensor *out, const struct tensor *x, enum redop op, bool cum)
{
    int64_t ne[4], xb[4], one[4], ob[4];
    elem_shape4(x, ne, xb);
    elem_shape4(out, one, ob);
    for (int64_t i0 = 0; i0 < ne[0]; i0++)
        for (int64_t i1 = 0; i1 < ne[1]; i1++)
            for (int64_t i2 = 0; i2 < ne[2]; i2++) {
                double s = 0;
                float m = -INFINITY;
                for (int64_t i3 = 0; i3 < ne[3]; i3++) {
                    float v = *at(x, xb, i0, i1, i2, i3);
                    s += v;
                    if (cum) *at(out, ob, i0, i1, i2, i3) = (float)s;
                    else if (v > m || v != v) m = v != v || m != m ? NAN : v; /* NaN wins */
                }
                if (!cum)
                    *at(out, ob, i0, i1, i2, 0) =
                        op == RED_MAX ? m : op == RED_SUM ? (float)s : (float)(s / (double)ne[3]);
            }
}

static void ref_reduce(struct arena *a, struct tensor *out, const struct tensor *x,
                       enum redop op)
{
    (void)a;
    along_last(out, x, op, false);
}

static void ref_cumsum(struct arena *a, struct tensor *out, const struct tensor *x)
{
    (void)a;
    along_last(out, x, RED_SUM, true);
}

static void ref_get_rows(struct arena *a, struct tensor *out, const struct tensor *table,
                         const struct tensor *ids)
{
    const struct dtype_traits *tt = dtype_traits(table->type);
    const int64_t nrows = table->ne[0], d = table->ne[1];
    int64_t ne[4], ib[4], one[4], ob[4];
    elem_shape4(ids, ne, ib); /* ids [n] or [B, n] -> dims 2, 3 */
    elem_shape4(out, one, ob); /* [n, D] or [B, n, D] -> dims 1, 2, 3 */
    for (int64_t b = 0; b < ne[2]; b++)
        for (int64_t j = 0; j < ne[3]; j++) {
            int64_t id = elem_load_i(ids->type, (const char *)ids->data + b * ib[2] + j * ib[3]);
            if (id < 0 || id >= nrows) {
                arena_fail(a, CBX_ERR_INVALID_ARG, "get_rows: id %lld outside table of %lld rows",
                           (long long)id, (long long)nrows);
                return;
            }
            const char *src = (const char *)table->data + id * table->nb[0];
            float *dst = at(out, ob, 0, b, j, 0);
            if (tt->quantized) dequantize_row(table->type, src, dst, d);
            else
                for (int64_t i = 0; i < d; i++) dst[i] = (float)elem_load_f(table->type, src + i * table->nb[1]);
        }
}

void ref_register_elementwise(struct kernels *k)
{
    k->cpy = ref_cpy;
    k->fill = ref_fill;
    k->randn = ref_randn;
    k->binary = ref_binary;
    k->unary = ref_unary;
    k->snake = ref_snake;
    k->reduce = ref_reduce;
    k->cumsum = ref_cumsum;
    k->get_rows = ref_get_rows;
}
