/* linear.c - ref kernels of the linear group (see ops.h): naive loops in
 * double precision over any strides, single thread. Weights are widened
 * with dequantize_row (itself checked against hand-computed blocks in
 * tests/core/test_quant.c) and x is used exactly as given, so the cpu
 * backend's Q8 quantisation of x shows up as a bounded difference. */
#include "ref.h"
#include "../quant.h"

static void ref_linear(struct arena *a, struct tensor *out, const struct tensor *x,
                       const struct tensor *w, const struct tensor *b)
{
    const int64_t k = x->ne[x->ndim - 1], n = w->ne[0], m = tensor_nrows(x);
    float *wrow = arena_alloc_host(a, (size_t)(k > 0 ? k : 1) * sizeof *wrow);
    if (!wrow) return;
    float *y = out->data;
    for (int64_t o = 0; o < n; o++) {
        dequantize_row(w->type, (const char *)w->data + o * w->nb[0], wrow, k);
        for (int64_t r = 0; r < m; r++) {
            int64_t idx[TENSOR_MAX_DIMS] = {0}, q = r;
            for (int d = x->ndim - 2; d >= 0; d--) {
                idx[d] = q % x->ne[d];
                q /= x->ne[d];
            }
            double s = 0;
            for (int64_t i = 0; i < k; i++) {
                idx[x->ndim - 1] = i;
                s += (double)wrow[i] * ref_ld(x, idx);
            }
            if (b) s += *(const float *)((const char *)b->data + o * b->nb[0]);
            y[r * n + o] = (float)s;
        }
    }
}

static void ref_matmul(struct arena *a, struct tensor *out, const struct tensor *x,
                       const struct tensor *y)
{
    (void)a;
    const int nd = out->ndim;
    const int64_t k = x->ne[x->ndim - 1];
    int64_t total = tensor_nelements(out);
    float *o = out->data;
    for (int64_t e = 0; e < total; e++) {
        int64_t oi[TENSOR_MAX_DIMS], q = e;
        for (int d = nd - 1; d >= 0; d--) {
            oi[d] = q % out->ne[d];
            q /= out->ne[d];
        }
        /* broadcast batch index: dims aligned on the right, size 1 -> 0 */
        int64_t xi[TENSOR_MAX_DIMS] = {0}, yi[TENSOR_MAX_DIMS] = {0};
        for (int d = 0; d < nd - 2; d++) {
            int dx = d - (nd - x->ndim), dy = d - (nd - y->ndim);
            if (dx >= 0) xi[dx] = x->ne[dx] == 1 ? 0 : oi[d];
            if (dy >= 0) yi[dy] = y->ne[dy] == 1 ? 0 : oi[d];
        }
        xi[x->ndim - 2] = oi[nd - 2];
        yi[y->ndim - 1] = oi[nd - 1];
        double s = 0;
        for (int64_t i = 0; i < k; i++) {
            xi[x->ndim - 1] = i;
            yi[y->ndim - 2] = i;
            s += (double)ref_ld(x, xi) * ref_ld(y, yi);
        }
        o[e] = (float)s;
    }
}

void ref_register_linear(struct kernels *k)
{
    k->linear = ref_linear;
    k->matmul = ref_matmul;
}
