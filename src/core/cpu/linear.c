/* linear.c - cpu kernels of the linear group: op_linear, op_matmul (see
 * ops.h).
 *
 * op_linear, y[M, N] = x[M, K] @ w[N, K]^T + b, has two paths:
 *  - rows <= LINEAR_DOT_MAX_ROWS (decode: one row): per weight row dot
 *    products, threaded over weight rows. Quantised weights multiply x
 *    quantised once to Q8_0/Q8_1 (as ggml); F16/BF16 rows are widened in
 *    registers. Every weight byte is read once, whatever the row count,
 *    and kernels come from linear_dot_kernel(type, cpu_level()); at the
 *    AVX-512 level q4_0/q8_0 use the "dotx" kernels on an x prepared once
 *    per call (contiguous quants, float scales, d * sum(q)), about twice
 *    the speed of the block-at-a-time kernels, four weight rows per call
 *    (x loads and the final reductions shared: 1.06-1.16x on one core,
 *    bench_kernels dotx), the remainder of a task's rows one at a time.
 *  - more rows: OpenBLAS sgemm. F32 weights are used in place; other
 *    types are dequantised tile by tile (rows of W) into arena scratch,
 *    the pool's threads splitting each tile, then one sgemm per tile with
 *    the BLAS threads (the pool is idle meanwhile, so the two never
 *    compete for cores). The bias is written first and sgemm adds to it.
 * op_matmul runs one sgemm per batch element, passing strided views
 * through lda/ldb (transposed when the inner stride is the other dim's)
 * and copying only views with neither dimension contiguous. */
#include <cblas.h>
#include <stdatomic.h>
#include <string.h>

#include "../backend.h"
#include "../threadpool.h"
#include "linear_kernels.h"

/* Up to this many rows the dot path wins (bench_kernels linear_rows: it
 * reads W once, and at 16 rows of [4096, 1024] q4_0/f16 it still beats
 * dequantise + sgemm, whose small-M sgemm runs far below peak). */
int linear_dot_max_rows = 16;
/* Bytes of F32 weights per dequantised tile: large enough for sgemm to
 * run at full speed, small enough to stay in L2/L3. */
#define LINEAR_TILE_BYTES (4u << 20)

vec_dot_fn linear_dot_kernel(enum dtype t, enum cpu_level l)
{
    vec_dot_fn f = NULL;
    if (l >= CPU_AVX512) f = linear_dot_avx512(t);
    if (!f && l >= CPU_AVX2) f = linear_dot_avx2(t);
    if (!f) f = quant_vec_dot_generic(t);
    return f;
}

/* BLAS threads follow the pool size; set only when it changes since the
 * call is global to the process. */
static atomic_int blas_threads;

static void set_blas_threads(const struct backend *be)
{
    int n = tp_n_threads(be->tp);
    if (atomic_exchange(&blas_threads, n) != n) openblas_set_num_threads(n);
}

/* Address of row r of the leading dims of t (all dims but the last). */
static const char *row_ptr(const struct tensor *t, int64_t r)
{
    const char *p = t->data;
    for (int d = t->ndim - 2; d >= 0; d--) {
        p += (r % t->ne[d]) * t->nb[d];
        r /= t->ne[d];
    }
    return p;
}

/* Whether the rows of t (contiguous inside) sit at one fixed stride; *ld
 * gets it in floats. */
static bool uniform_rows(const struct tensor *t, int64_t *ld)
{
    int64_t k = t->ndim ? t->ne[t->ndim - 1] : 1;
    if (t->ndim && k > 1 && t->nb[t->ndim - 1] != 4) return false;
    int64_t s = -1, expect = 0;
    for (int d = t->ndim - 2; d >= 0; d--) {
        if (t->ne[d] == 1) continue;
        if (s < 0) {
            s = t->nb[d];
            expect = s * t->ne[d];
        } else {
            if (t->nb[d] != expect) return false;
            expect *= t->ne[d];
        }
    }
    if (s < 0) s = 4 * k;
    if (s % 4 || s / 4 < k) return false;
    *ld = s / 4;
    return true;
}

/* x as an [M, K] float matrix with leading dimension *ld: in place when
 * its rows are uniform, else copied to arena scratch. */
static const float *x_matrix(struct arena *a, const struct tensor *x, int64_t *ld)
{
    if (uniform_rows(x, ld)) return x->data;
    int64_t m = tensor_nrows(x), k = x->ne[x->ndim - 1];
    float *c = arena_alloc_host(a, (size_t)(m * k) * sizeof *c);
    if (!c) return NULL;
    int64_t inner = x->nb[x->ndim - 1];
    for (int64_t r = 0; r < m; r++) {
        const char *p = row_ptr(x, r);
        for (int64_t i = 0; i < k; i++) memcpy(c + r * k + i, p + i * inner, 4);
    }
    *ld = k;
    return c;
}

/* ---- dot path ---------------------------------------------------------- */

void linear_xq_prepare(struct linear_xq *xq, int8_t *qs, float *d, float *ds, int64_t n)
{
    const struct block_q8_0 *b = xq->q;
    for (int64_t i = 0; i < n / QK; i++) {
        int sum = 0;
        for (int j = 0; j < QK; j++) sum += b[i].qs[j];
        memcpy(qs + i * QK, b[i].qs, QK);
        d[i] = fp16_to_f32(b[i].d);
        ds[i] = d[i] * (float)sum;
    }
    xq->qs = qs;
    xq->d = d;
    xq->ds = ds;
}

struct dot_job {
    vec_dot_fn dot;
    linear_dotx_fn dotx;    /* when set, used with xp[] instead of dot */
    linear_dotx4_fn dotx4;  /* with dotx: four weight rows per call */
    const struct linear_xq *xp;
    const char *w;          /* weight rows */
    int64_t w_stride;       /* bytes between weight rows */
    const char *xq;         /* activation rows, xq_stride bytes apart */
    size_t xq_stride;
    int64_t m, k, n;
    const float *bias;
    int64_t bias_stride;    /* bytes */
    float *y;               /* [m, n] */
};

static void dot_rows(void *ctx, int64_t n0, int64_t n1, int ith)
{
    (void)ith;
    const struct dot_job *j = ctx;
    if (j->dotx4) /* groups of four weight rows, then one at a time */
        for (; n0 + 4 <= n1; n0 += 4) {
            const char *w = j->w + n0 * j->w_stride;
            for (int64_t r = 0; r < j->m; r++) {
                float d[4];
                j->dotx4(w, (size_t)j->w_stride, j->xp + r, j->k, d);
                for (int q = 0; q < 4; q++) {
                    float b = 0.0f;
                    if (j->bias)
                        b = *(const float *)((const char *)j->bias + (n0 + q) * j->bias_stride);
                    j->y[r * j->n + n0 + q] = d[q] + b;
                }
            }
        }
    for (int64_t n = n0; n < n1; n++) {
        const char *w = j->w + n * j->w_stride;
        float bias = j->bias ? *(const float *)((const char *)j->bias + n * j->bias_stride) : 0.0f;
        for (int64_t r = 0; r < j->m; r++)
            j->y[r * j->n + n] = (j->dotx ? j->dotx(w, j->xp + r, j->k)
                                          : j->dot(w, j->xq + (size_t)r * j->xq_stride, j->k)) + bias;
    }
}

static void linear_dot(struct arena *a, struct tensor *out, const struct tensor *x,
                       const struct tensor *w, const struct tensor *b)
{
    const int64_t k = x->ne[x->ndim - 1], n = w->ne[0], m = tensor_nrows(x);
    struct dot_job j = {
        .dot = linear_dot_kernel(w->type, cpu_level()),
        .w = w->data, .w_stride = w->nb[0], .m = m, .k = k, .n = n,
        .bias = b ? b->data : NULL, .bias_stride = b ? b->nb[0] : 0, .y = out->data,
    };
    int vt = quant_vec_dot_type(w->type);
    int64_t ld;
    const float *xm = x_matrix(a, x, &ld);
    if (!xm) return;
    if (vt == TYPE_F32) {
        j.xq = (const char *)xm;
        j.xq_stride = (size_t)ld * 4;
    } else {
        j.xq_stride = dtype_row_size((enum dtype)vt, k);
        char *q = arena_alloc_host(a, j.xq_stride * (size_t)m);
        if (!q) return;
        for (int64_t r = 0; r < m; r++)
            quantize_row((enum dtype)vt, xm + r * ld, q + (size_t)r * j.xq_stride, k);
        j.xq = q;
        linear_dotx_fn dotx = cpu_level() >= CPU_AVX512 ? linear_dotx_avx512(w->type) : NULL;
        if (dotx && vt == TYPE_Q8_0) {
            int64_t nb = k / QK;
            struct linear_xq *xp = arena_alloc_host(a, (size_t)m * sizeof *xp);
            int8_t *qs = arena_alloc_host(a, (size_t)(m * k));
            float *d = arena_alloc_host(a, (size_t)(2 * m * nb + 1) * sizeof *d);
            if (!xp || !qs || !d) return;
            for (int64_t r = 0; r < m; r++) {
                xp[r].q = q + (size_t)r * j.xq_stride;
                linear_xq_prepare(&xp[r], qs + r * k, d + 2 * r * nb, d + (2 * r + 1) * nb, k);
            }
            j.dotx = dotx;
            j.dotx4 = linear_dotx4_avx512(w->type);
            j.xp = xp;
        }
    }
    /* grain: enough rows that a chunk reads >= 16 KiB of weights */
    int64_t row_bytes = (int64_t)dtype_row_size(w->type, k);
    int64_t grain = row_bytes > 0 ? (16384 + row_bytes - 1) / row_bytes : 1;
    tp_parallel_for(arena_backend(a)->tp, n, grain, dot_rows, &j);
}

/* ---- sgemm path ------------------------------------------------------- */

struct deq_job {
    enum dtype type;
    linear_dequant_fn deq;  /* SIMD row dequantiser or NULL */
    const char *w;
    int64_t w_stride, k;
    float *dst;             /* rows of k floats */
};

static void deq_rows(void *ctx, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct deq_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        if (j->deq) j->deq(j->w + r * j->w_stride, j->dst + r * j->k, j->k);
        else dequantize_row(j->type, j->w + r * j->w_stride, j->dst + r * j->k, j->k);
    }
}

static void linear_gemm(struct arena *a, struct tensor *out, const struct tensor *x,
                        const struct tensor *w, const struct tensor *b)
{
    const struct backend *be = arena_backend(a);
    const int64_t k = x->ne[x->ndim - 1], n = w->ne[0], m = tensor_nrows(x);
    float *y = out->data;
    int64_t ldx;
    const float *xm = x_matrix(a, x, &ldx);
    if (!xm) return;
    for (int64_t r = 0; r < m; r++) {
        if (!b) {
            memset(y + r * n, 0, (size_t)n * sizeof *y);
            continue;
        }
        for (int64_t i = 0; i < n; i++)
            y[r * n + i] = *(const float *)((const char *)b->data + i * b->nb[0]);
    }
    if (k == 0) return;
    set_blas_threads(be);
    if (w->type == TYPE_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f,
                    xm, (int)ldx, w->data, (int)(w->nb[0] / 4), 1.0f, y, (int)n);
        return;
    }
    int64_t tile = (int64_t)(LINEAR_TILE_BYTES / ((size_t)k * 4));
    if (tile < 16) tile = 16;
    if (tile > n) tile = n;
    float *wt = arena_alloc_host(a, (size_t)(tile * k) * sizeof *wt);
    if (!wt) return;
    for (int64_t n0 = 0; n0 < n; n0 += tile) {
        int64_t tn = n - n0 < tile ? n - n0 : tile;
        struct deq_job j = {w->type, cpu_level() >= CPU_AVX2 ? linear_dequant_avx2(w->type) : NULL,
                            (const char *)w->data + n0 * w->nb[0], w->nb[0], k, wt};
        tp_parallel_for(be->tp, tn, 8, deq_rows, &j);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)tn, (int)k, 1.0f,
                    xm, (int)ldx, wt, (int)k, 1.0f, y + n0, (int)n);
    }
}

static void cpu_linear(struct arena *a, struct tensor *out, const struct tensor *x,
                       const struct tensor *w, const struct tensor *b)
{
    if (tensor_nrows(x) == 0 || w->ne[0] == 0) return;
    if (tensor_nrows(x) <= linear_dot_max_rows) linear_dot(a, out, x, w, b);
    else linear_gemm(a, out, x, w, b);
}

/* ---- matmul ------------------------------------------------------------ */

/* One [rows, cols] operand as a BLAS matrix: row-major with *ld (NoTrans)
 * or its transpose (Trans) when the rows are the contiguous dim. */
static bool blas_operand(int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                         CBLAS_TRANSPOSE *tr, int64_t *ld)
{
    if (cols == 1 || cs == 4) {
        if (rows == 1) { *tr = CblasNoTrans; *ld = cols; return true; }
        if (rs % 4 == 0 && rs / 4 >= cols) { *tr = CblasNoTrans; *ld = rs / 4; return true; }
    }
    if (rows == 1 || rs == 4) {
        if (cols == 1) { *tr = CblasTrans; *ld = rows; return true; }
        if (cs % 4 == 0 && cs / 4 >= rows) { *tr = CblasTrans; *ld = cs / 4; return true; }
    }
    return false;
}

static void cpu_matmul(struct arena *a, struct tensor *out, const struct tensor *x,
                       const struct tensor *y)
{
    const int nd = out->ndim;
    const int64_t m = out->ne[nd - 2], n = out->ne[nd - 1], k = x->ne[x->ndim - 1];
    const int64_t xrs = x->nb[x->ndim - 2], xcs = x->nb[x->ndim - 1];
    const int64_t yrs = y->nb[y->ndim - 2], ycs = y->nb[y->ndim - 1];
    if (m == 0 || n == 0) return;
    CBLAS_TRANSPOSE tx, ty;
    int64_t ldx, ldy;
    bool x_ok = blas_operand(m, k, xrs, xcs, &tx, &ldx);
    bool y_ok = blas_operand(k, n, yrs, ycs, &ty, &ldy);
    float *xc = NULL, *yc = NULL; /* packing buffers for unusable views */
    if (!x_ok) {
        xc = arena_alloc_host(a, (size_t)(m * k) * sizeof *xc);
        if (!xc) return;
        tx = CblasNoTrans;
        ldx = k;
    }
    if (!y_ok) {
        yc = arena_alloc_host(a, (size_t)(k * n) * sizeof *yc);
        if (!yc) return;
        ty = CblasNoTrans;
        ldy = n;
    }
    set_blas_threads(arena_backend(a));
    int64_t batch = 1;
    for (int d = 0; d < nd - 2; d++) batch *= out->ne[d];
    for (int64_t bi = 0; bi < batch; bi++) {
        /* broadcast: batch dims of x / y aligned on the right, size 1 -> 0 */
        const char *xp = x->data, *yp = y->data;
        int64_t r = bi;
        for (int d = nd - 3; d >= 0; d--) {
            int64_t idx = r % out->ne[d];
            r /= out->ne[d];
            int dx = d - (nd - x->ndim), dy = d - (nd - y->ndim);
            if (dx >= 0 && x->ne[dx] > 1) xp += idx * x->nb[dx];
            if (dy >= 0 && y->ne[dy] > 1) yp += idx * y->nb[dy];
        }
        if (xc) {
            for (int64_t i = 0; i < m; i++)
                for (int64_t c = 0; c < k; c++) memcpy(xc + i * k + c, xp + i * xrs + c * xcs, 4);
            xp = (const char *)xc;
        }
        if (yc) {
            for (int64_t i = 0; i < k; i++)
                for (int64_t c = 0; c < n; c++) memcpy(yc + i * n + c, yp + i * yrs + c * ycs, 4);
            yp = (const char *)yc;
        }
        float *op = (float *)out->data + bi * m * n;
        if (k == 0) {
            memset(op, 0, (size_t)(m * n) * sizeof *op);
            continue;
        }
        cblas_sgemm(CblasRowMajor, tx, ty, (int)m, (int)n, (int)k, 1.0f, (const float *)xp,
                    (int)ldx, (const float *)yp, (int)ldy, 0.0f, op, (int)n);
    }
}

void cpu_register_linear(struct kernels *k)
{
    k->linear = cpu_linear;
    k->matmul = cpu_matmul;
}
