/* linear.c - cpu kernels of the linear group: op_linear, op_linear_ex,
 * op_linear_cat, op_matmul (see ops.h).
 *
 * op_linear, y[M, N] = x[M, K] @ w[N, K]^T + b, has three paths, and a
 * fourth when the arena asks for BF16 products (arena_bf16), AMX-BF16 or
 * AVX512-BF16 is ready and x has linear_bf16_min_rows rows or more:
 * bf16(x) @ bf16(w)^T with FP32 sums on AMX tiles or VDPBF16PS for
 * F32/F16/BF16/Q8_0/Q4_0 weights, packed too (linear_bf16.h,
 * linear_bf16.c). Otherwise:
 *  - quantised GEMM, q4_0/q8_0 weights at the AVX-512 level from
 *    linear_qgemm_min_rows rows up: x quantised to Q8_0 (the dot path's
 *    quantisation, bit for bit) and packed 16 rows to a group, weight rows
 *    unpacked once per tile and multiplied with every group (VNNI: 8
 *    weight rows x 16 x rows per vpdpbusd pass; AMX-INT8 where the CPU and
 *    OS have it: 16 x 16 per TDPBUSD, same results bit for bit). See
 *    "quantised GEMM path" below and linear_kernels.h.
 *  - rows <= LINEAR_DOT_MAX_ROWS otherwise (decode: one row): per weight
 *    row dot products, threaded over weight rows. Quantised weights
 *    multiply x quantised once to Q8_0/Q8_1 (as ggml); F16/BF16 rows are
 *    widened in registers. Every weight byte is read once, whatever the
 *    row count, and kernels come from linear_dot_kernel(type, cpu_level()); at the
 *    AVX-512 level q4_0/q8_0 use the "dotx" kernels on an x prepared once
 *    per call (contiguous quants, float scales, d * sum(q)), about twice
 *    the speed of the block-at-a-time kernels, four weight rows per call
 *    (x loads and the final reductions shared: 1.06-1.16x on one core,
 *    bench_kernels dotx), the remainder of a task's rows one at a time.
 *  - q4_0/q8_0 weights packed at load (linear_pack: 16 rows interleaved,
 *    see linear_kernels.h; tagged CPU_WEIGHT_GEMV16 in tensor.extra, cpu_weight.h) take the
 *    packed GEMV (16 rows per call, aligned contiguous loads, vector
 *    scales: 1.2x the dotx decode on 2 cores, bench_t3) below
 *    linear_qgemm_min_rows rows, else the quantised GEMM with tiles
 *    unpacked from the packed groups, at any level.
 *  - more rows: OpenBLAS sgemm. F32 weights are used in place; other
 *    types are dequantised tile by tile (rows of W) into scratch,
 *    the pool's threads splitting each tile, then one sgemm per tile with
 *    the BLAS threads (the pool is idle meanwhile, so the two never
 *    compete for cores). The bias is written first and sgemm adds to it.
 * Scratch of all three comes from a per-thread buffer kept between calls
 * (see "scratch"), not from the arena.
 * op_matmul runs one sgemm per batch element, passing strided views
 * through lda/ldb (transposed when the inner stride is the other dim's)
 * and copying only views with neither dimension contiguous. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "../threadpool.h"
#include "blas.h"
#include "linear_bf16.h"
#include "cpu_weight.h"
#include "elementwise_kernels.h"
#include "linear_kernels.h"

/* Up to this many rows the dot path wins (bench_kernels linear_rows: it
 * reads W once, and at 16 rows of [4096, 1024] q4_0/f16 it still beats
 * dequantise + sgemm, whose small-M sgemm runs far below peak). */
int linear_dot_max_rows = 16;
int linear_qgemm_min_rows = 5;
int linear_qgemm_use_amx = 1;
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

/* Address of row r of the leading dims of t (all dims but the last). */
static const char *row_ptr(const struct tensor *t, int64_t r)
{
    return (const char *)t->data + tensor_row_offset(t, r);
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

/* ---- scratch ------------------------------------------------------------
 * Kernel scratch is one buffer per calling thread, kept between calls and
 * only grown: arena scratch would be fresh memory at every call of a stage
 * (the arena only resets between stages), and glibc maps and unmaps big
 * blocks, so every call would page-fault its scratch in again. Freed at
 * thread exit by a key destructor. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static _Thread_local struct { char *p; size_t n, used; } scr;

static void scratch_key_init(void) { (void)pthread_key_create(&scratch_key, free); }

#define SCR_ALIGN 64
static size_t scr_round(size_t n) { return (n + SCR_ALIGN - 1) & ~(size_t)(SCR_ALIGN - 1); }

/* Make the calling thread's scratch at least n bytes and start carving it
 * from the beginning; false (arena failed) when out of memory. */
static bool scratch_begin(struct arena *a, size_t n)
{
    scr.used = 0;
    if (scr.n >= n) return true;
    size_t sz = scr_round(n > scr.n + scr.n / 2 ? n : scr.n + scr.n / 2);
    free(scr.p);
    scr.p = aligned_alloc(SCR_ALIGN, sz);
    scr.n = scr.p ? sz : 0;
    pthread_once(&scratch_once, scratch_key_init);
    (void)pthread_setspecific(scratch_key, scr.p);
    if (!scr.p) {
        arena_fail(a, CBX_ERR_NOMEM, "linear: out of memory allocating %zu bytes of scratch", sz);
        return false;
    }
    return true;
}

/* The next n bytes of the scratch (64-byte aligned); the caller sized it
 * with scratch_begin over the scr_round()ed parts. */
static void *scratch_take(size_t n)
{
    void *p = scr.p + scr.used;
    scr.used += scr_round(n);
    return p;
}

/* Bytes x_matrix needs to copy x (0 when its rows are uniform). */
static size_t x_copy_bytes(const struct tensor *x)
{
    int64_t ld;
    if (uniform_rows(x, &ld)) return 0;
    return scr_round((size_t)(tensor_nrows(x) * x->ne[x->ndim - 1]) * sizeof(float));
}

/* x as an [M, K] float matrix with leading dimension *ld: in place when
 * its rows are uniform, else copied to scratch (x_copy_bytes of it). */
static const float *x_matrix(const struct tensor *x, int64_t *ld)
{
    if (uniform_rows(x, ld)) return x->data;
    int64_t m = tensor_nrows(x), k = x->ne[x->ndim - 1];
    float *c = scratch_take((size_t)(m * k) * sizeof *c);
    int64_t inner = x->nb[x->ndim - 1];
    for (int64_t r = 0; r < m; r++) {
        const char *p = row_ptr(x, r);
        for (int64_t i = 0; i < k; i++) memcpy(c + r * k + i, p + i * inner, 4);
    }
    *ld = k;
    return c;
}

/* ---- packed weights (linear_kernels.h) --------------------------------- */

int linear_pack_enable = 1;
static int pk_env = 2; /* CBX_PACK: 0 none, 1 in place only, 2 copies too (default) */
static pthread_once_t pk_env_once = PTHREAD_ONCE_INIT;

static void pk_env_read(void)
{
    const char *e = getenv("CBX_PACK");
    if (e && (!strcmp(e, "0") || !strcmp(e, "1"))) pk_env = e[0] - '0';
}

bool linear_pack_copies(void)
{
    pthread_once(&pk_env_once, pk_env_read);
    return pk_env == 2;
}

bool linear_pack_supported(const struct tensor *w)
{
    pthread_once(&pk_env_once, pk_env_read);
    if (!linear_pack_enable || pk_env == 0 || !w || w->extra || w->ndim != 2) return false;
    if (w->type != TYPE_Q4_0 && w->type != TYPE_Q8_0) return false;
    if (cpu_level() < CPU_AVX512 || !linear_gemv16_avx512(w->type)) return false;
    /* K <= 2^24: the packer gathers at 32-bit byte offsets of 15 rows */
    return w->ne[1] > 0 && w->ne[1] % 64 == 0 && w->ne[1] <= (1 << 24) && w->ne[0] >= LINEAR_PK_ROWS &&
           tensor_is_contiguous(w) && (uintptr_t)w->data % 64 == 0;
}

/* groups [g0, g1) of a pack; in place, each group through a copy in its
 * thread's buffer (tmp + ith * gbytes) */
struct pack_job {
    enum dtype type;
    const char *src;
    uint8_t *dst;
    char *tmp;      /* in place: one group's bytes per thread, else NULL */
    size_t rs, gbytes;
    int64_t nb;
};

static void pack_groups(void *ctx, int64_t g0, int64_t g1, int ith)
{
    const struct pack_job *j = ctx;
    for (int64_t g = g0; g < g1; g++) {
        const char *src = j->src + (size_t)g * j->gbytes;
        if (j->tmp) src = memcpy(j->tmp + (size_t)ith * j->gbytes, src, j->gbytes);
        linear_pk_pack_avx512(j->type, src, j->rs, j->nb, j->dst + (size_t)g * j->gbytes);
    }
}

bool linear_pack(struct threadpool *tp, const struct tensor *w, void *dst, struct tensor *out)
{
    if (!linear_pack_supported(w) || !dst || (uintptr_t)dst % 64) return false;
    const int64_t n = w->ne[0], groups = n / LINEAR_PK_ROWS;
    const size_t rs = dtype_row_size(w->type, w->ne[1]);
    struct pack_job j = {
        .type = w->type, .src = w->data, .dst = dst, .rs = rs, .gbytes = LINEAR_PK_ROWS * rs,
        .nb = w->ne[1] / QK,
    };
    const bool in_place = dst == w->data;
    if (in_place && !(j.tmp = malloc((size_t)(tp ? tp_n_threads(tp) : 1) * j.gbytes))) return false;
    /* chunks of at least 256 KiB: the pool's dispatch is small next to
     * them, and the pages the packing first touches fault on every thread */
    tp_parallel_for(tp, groups, (int64_t)((256u << 10) / j.gbytes) + 1, pack_groups, &j);
    free(j.tmp);
    if (!in_place && n > groups * LINEAR_PK_ROWS) /* the tail rows as they are */
        memcpy((char *)dst + (size_t)groups * j.gbytes, (const char *)w->data + (size_t)groups * j.gbytes,
               (size_t)(n - groups * LINEAR_PK_ROWS) * rs);
    const char *name = w->name;
    *out = tensor_make(w->type, 2, w->ne, dst, w->be);
    out->name = name;
    out->extra = (void *)&cpu_weight_gemv16;
    return true;
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

void linear_epi_apply(const struct linear_epi *e, float *y, int64_t row, int64_t ld, int64_t c0, int64_t n)
{
    if (e->act >= 0) cpu_unary_run((enum unop)e->act, y, y, n);
    if (e->res) {
        const float *r = e->res + row * ld + c0;
        for (int64_t i = 0; i < n; i++) y[i] = r[i] + y[i];
    }
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
    const struct linear_epi *epi; /* NULL: none */
};

static void dot_rows(void *ctx, int64_t n0, int64_t n1, int ith)
{
    (void)ith;
    const struct dot_job *j = ctx;
    const int64_t first = n0;
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
    for (int64_t r = 0; j->epi && r < j->m; r++)
        linear_epi_apply(j->epi, j->y + r * j->n + first, r, j->n, first, n1 - first);
}

/* Packed weights (linear_pack): groups of 16 rows per call, the rows
 * past the last group one at a time with the dotx kernel. Items: the
 * groups, then one for the tail rows. */
struct pk_job {
    linear_gemv16_fn gemv;
    linear_dotx_fn dotx;
    const struct linear_xq *xp;
    const char *w;
    size_t gbytes, rs;      /* bytes per group, per (tail) row */
    int64_t groups, m, k, n;
    const float *bias;
    int64_t bias_stride;    /* bytes */
    float *y;               /* [m, n], rows ld floats apart */
    int64_t ld;
    const struct linear_epi *epi; /* NULL: none */
};

static void pk_rows(void *ctx, int64_t g0, int64_t g1, int ith)
{
    (void)ith;
    const struct pk_job *j = ctx;
    for (int64_t g = g0; g < g1; g++) {
        int64_t r0 = g * LINEAR_PK_ROWS, r1 = g < j->groups ? r0 + LINEAR_PK_ROWS : j->n;
        float bias[LINEAR_PK_ROWS];
        for (int64_t i = r0; i < r1; i++)
            bias[i - r0] = j->bias ? *(const float *)((const char *)j->bias + i * j->bias_stride) : 0.0f;
        for (int64_t r = 0; r < j->m;) {
            if (g < j->groups) {
                enum { PASS = 8 }; /* rows per call */
                const int rows = (int)(j->m - r < PASS ? j->m - r : PASS);
                float o[PASS * LINEAR_PK_ROWS];
                j->gemv((const uint8_t *)j->w + (size_t)g * j->gbytes, j->xp + r, rows, j->k / QK, o);
                for (int q = 0; q < rows; q++, r++) {
                    float *y = j->y + r * j->ld + r0;
                    for (int i = 0; i < LINEAR_PK_ROWS; i++) y[i] = o[q * LINEAR_PK_ROWS + i] + bias[i];
                    if (j->epi) linear_epi_apply(j->epi, y, r, j->ld, r0, LINEAR_PK_ROWS);
                }
            } else {
                float *y = j->y + r * j->ld + r0;
                for (int64_t i = r0; i < r1; i++)
                    y[i - r0] = j->dotx(j->w + (size_t)i * j->rs, j->xp + r, j->k) + bias[i - r0];
                if (j->epi) linear_epi_apply(j->epi, y, r, j->ld, r0, r1 - r0);
                r++;
            }
        }
    }
}

/* x's rows as the dot kernels of weight type wt take them, in the calling
 * thread's scratch (false: the arena failed): j->xq (x itself for F32
 * products, else each row quantised to the vec-dot type, xq_stride bytes
 * apart), and with dotx also j->xp, the rows prepared for it. */
static bool dot_x(struct arena *a, struct dot_job *j, const struct tensor *x, enum dtype wt, linear_dotx_fn dotx)
{
    const int64_t k = x->ne[x->ndim - 1], m = tensor_nrows(x), nb = k / QK;
    int vt = quant_vec_dot_type(wt);
    size_t xq_stride = vt == TYPE_F32 ? 0 : dtype_row_size((enum dtype)vt, k);
    size_t need = x_copy_bytes(x) + scr_round(xq_stride * (size_t)m);
    if (dotx)
        need += scr_round((size_t)m * sizeof(struct linear_xq)) + scr_round((size_t)(m * k)) +
                scr_round((size_t)(2 * m * nb + 1) * sizeof(float));
    if (!scratch_begin(a, need)) return false;
    int64_t ld;
    const float *xm = x_matrix(x, &ld);
    if (vt == TYPE_F32) {
        j->xq = (const char *)xm;
        j->xq_stride = (size_t)ld * 4;
        return true;
    }
    j->xq_stride = xq_stride;
    char *q = scratch_take(j->xq_stride * (size_t)m);
    for (int64_t r = 0; r < m; r++) {
#if HAVE_X86
        if (dotx) { /* the AVX-512 level: the same bytes, vectorised */
            elementwise_q8_0_row_avx512(xm + r * ld, (struct block_q8_0 *)(q + (size_t)r * j->xq_stride), k);
            continue;
        }
#endif
        quantize_row((enum dtype)vt, xm + r * ld, q + (size_t)r * j->xq_stride, k);
    }
    j->xq = q;
    if (dotx) {
        struct linear_xq *xp = scratch_take((size_t)m * sizeof *xp);
        int8_t *qs = scratch_take((size_t)(m * k));
        float *d = scratch_take((size_t)(2 * m * nb + 1) * sizeof *d);
        for (int64_t r = 0; r < m; r++) {
            xp[r].q = q + (size_t)r * j->xq_stride;
            linear_xq_prepare(&xp[r], qs + r * k, d + 2 * r * nb, d + (2 * r + 1) * nb, k);
        }
        j->dotx = dotx;
        j->dotx4 = linear_dotx4_avx512(wt);
        j->xp = xp;
    }
    return true;
}

/* The packed decode GEMV's dotx kernel for w (NULL: not on this path) */
static linear_dotx_fn dot_packed_fn(const struct tensor *w)
{
    return quant_vec_dot_type(w->type) == TYPE_Q8_0 ? linear_dotx_avx512(w->type) : NULL;
}

/* The pk_job of packed w over the rows j->xp, y [m, n] ld floats apart */
static struct pk_job pk_job_of(const struct dot_job *j, const struct tensor *w, const struct tensor *b, float *y,
                               int64_t ld, const struct linear_epi *e)
{
    const int64_t n = w->ne[0], row_bytes = (int64_t)dtype_row_size(w->type, j->k);
    return (struct pk_job){
        .gemv = linear_gemv16_avx512(w->type), .dotx = j->dotx, .xp = j->xp, .w = w->data,
        .gbytes = (size_t)row_bytes * LINEAR_PK_ROWS, .rs = (size_t)row_bytes,
        .groups = n / LINEAR_PK_ROWS, .m = j->m, .k = j->k, .n = n, .bias = b ? b->data : NULL,
        .bias_stride = b ? b->nb[0] : 0, .y = y, .ld = ld, .epi = e,
    };
}

/* pk_rows' items (the groups, then one for the tail rows) and grain */
static int64_t pk_items(const struct pk_job *pj) { return pj->groups + (pj->n % LINEAR_PK_ROWS ? 1 : 0); }
static int64_t pk_grain(const struct pk_job *pj) { return (16384 + (int64_t)pj->gbytes - 1) / (int64_t)pj->gbytes; }

/* packed: w was packed by linear_pack (then q4_0 / q8_0 at AVX-512) */
static void linear_dot(struct arena *a, struct tensor *out, const struct tensor *x,
                       const struct tensor *w, const struct tensor *b, bool packed,
                       const struct linear_epi *e)
{
    const int64_t k = x->ne[x->ndim - 1], n = w->ne[0], m = tensor_nrows(x);
    struct dot_job j = {
        .dot = linear_dot_kernel(w->type, cpu_level()),
        .w = w->data, .w_stride = w->nb[0], .m = m, .k = k, .n = n,
        .bias = b ? b->data : NULL, .bias_stride = b ? b->nb[0] : 0, .y = out->data, .epi = e,
    };
    linear_dotx_fn dotx = packed || cpu_level() >= CPU_AVX512 ? dot_packed_fn(w) : NULL;
    if (!dot_x(a, &j, x, w->type, dotx)) return;
    int64_t row_bytes = (int64_t)dtype_row_size(w->type, k);
    if (packed && dotx) {
        struct pk_job pj = pk_job_of(&j, w, b, j.y, n, e);
        tp_parallel_for(arena_backend(a)->tp, pk_items(&pj), pk_grain(&pj), pk_rows, &pj);
        return;
    }
    /* grain: enough rows that a chunk reads >= 16 KiB of weights */
    int64_t grain = row_bytes > 0 ? (16384 + row_bytes - 1) / row_bytes : 1;
    tp_parallel_for(arena_backend(a)->tp, n, grain, dot_rows, &j);
}

/* ---- quantised GEMM path ------------------------------------------------
 * x is quantised to Q8_0 (the dot path's quantisation, so the products
 * per block are the same integers) and packed in groups of 16 rows (see
 * linear_kernels.h), the groups split over the pool; then the pool splits
 * the weight rows in tiles of g.maxw rows (8 VNNI, 16 AMX): a tile is
 * unpacked once into per-thread scratch and multiplied with every x
 * group. For large M the groups are taken in chunks that stay in L2 (the
 * tile unpacked again per chunk, which costs little next to the
 * multiplies). Against the dot path only the float summation order
 * differs (test_linear: max |diff| / max |y| about 2e-7). */

#define QG_CHUNK_BYTES (512u << 10)

struct qg_job {
    struct linear_qgemm g;
    const struct tensor *x;
    const char *w;
    int64_t w_stride, m, k, nb, n, groups;
    const float *bias;
    int64_t bias_stride;    /* bytes */
    float *y;               /* [m, n] */
    uint8_t *xp;            /* groups * nb * LINEAR_QG_REC */
    linear_pk_unpack_fn pk_unpack; /* packed w: rows below pk_rows, else NULL */
    int64_t pk_rows;
    size_t pk_gbytes;
    char *tmp;              /* per thread: tmp_bytes */
    size_t tmp_bytes;
};

/* Per-thread scratch of the two phases (the larger of the two). */
static size_t qg_tmp_bytes(int64_t k, int64_t nb)
{
    size_t pack = scr_round((size_t)(LINEAR_QG_LANES * k) * sizeof(float));
    size_t tile = scr_round((size_t)(LINEAR_QG_MAXW_ANY * k)) +
                  scr_round((size_t)(LINEAR_QG_MAXW_ANY * nb) * sizeof(float));
    return pack > tile ? pack : tile;
}

static void qg_pack(void *ctx, int64_t g0, int64_t g1, int ith)
{
    const struct qg_job *j = ctx;
    const struct tensor *x = j->x;
    const int64_t k = j->k, inner = x->nb[x->ndim - 1];
    float *tmp = (float *)(j->tmp + (size_t)ith * j->tmp_bytes); /* rows with strided elements */
    for (int64_t g = g0; g < g1; g++) {
        int lanes = (int)(j->m - g * LINEAR_QG_LANES < LINEAR_QG_LANES ? j->m - g * LINEAR_QG_LANES
                                                                       : LINEAR_QG_LANES);
        const float *rows[LINEAR_QG_LANES];
        for (int l = 0; l < lanes; l++) {
            const char *p = row_ptr(x, g * LINEAR_QG_LANES + l);
            rows[l] = (const float *)p;
            if (inner != 4 && k > 1) {
                float *t = tmp + l * k;
                for (int64_t i = 0; i < k; i++) memcpy(t + i, p + i * inner, 4);
                rows[l] = t;
            }
        }
        j->g.pack(rows, lanes, j->nb, j->g.off, j->xp + (size_t)(g * j->nb) * LINEAR_QG_REC);
    }
}

static void qg_tiles(void *ctx, int64_t t0, int64_t t1, int ith)
{
    const struct qg_job *j = ctx;
    const int64_t nb = j->nb, n = j->n;
    const int maxw = j->g.maxw;
    char *t = j->tmp + (size_t)ith * j->tmp_bytes;
    int32_t *wq = (int32_t *)t;
    float *wd = (float *)(t + scr_round((size_t)(LINEAR_QG_MAXW_ANY * j->k)));
    int64_t chunk = (int64_t)(QG_CHUNK_BYTES / ((size_t)nb * LINEAR_QG_REC));
    if (chunk < 1) chunk = 1;
    if (j->g.thread_begin) j->g.thread_begin();
    for (int64_t c0 = 0; c0 < j->groups; c0 += chunk) {
        int64_t c1 = c0 + chunk < j->groups ? c0 + chunk : j->groups;
        for (int64_t ti = t0; ti < t1; ti++) {
            int64_t e = (ti + 1) * maxw < n ? (ti + 1) * maxw : n;
            /* a full tile, or the tail in pieces of at most 8 rows */
            int step = e - ti * maxw == maxw ? maxw : LINEAR_QG_MAXW;
            for (int64_t n0 = ti * maxw; n0 < e; n0 += step) {
                int nw = (int)(e - n0 < step ? e - n0 : step);
                if (n0 < j->pk_rows)
                    j->pk_unpack((const uint8_t *)j->w + (size_t)(n0 / LINEAR_PK_ROWS) * j->pk_gbytes,
                                 (int)(n0 % LINEAR_PK_ROWS), nw, nb, wq, wd);
                else
                    j->g.unpack(j->w + n0 * j->w_stride, (size_t)j->w_stride, nw, nb, wq, wd);
                float bias[LINEAR_QG_MAXW_ANY];
                for (int q = 0; q < nw; q++)
                    bias[q] = j->bias ? *(const float *)((const char *)j->bias + (n0 + q) * j->bias_stride)
                                      : 0.0f;
                for (int64_t g = c0; g < c1; g++) {
                    int64_t r0 = g * LINEAR_QG_LANES;
                    int lanes = (int)(j->m - r0 < LINEAR_QG_LANES ? j->m - r0 : LINEAR_QG_LANES);
                    j->g.tile(wq, wd, nw, j->xp + (size_t)(g * nb) * LINEAR_QG_REC, nb, bias,
                              j->y + r0 * n + n0, n, lanes);
                }
            }
        }
    }
    if (j->g.thread_end) j->g.thread_end();
}

static void linear_qgemm(struct arena *a, struct tensor *out, const struct tensor *x,
                         const struct tensor *w, const struct tensor *b,
                         const struct linear_qgemm *g, bool packed)
{
    struct threadpool *tp = arena_backend(a)->tp;
    const int64_t k = x->ne[x->ndim - 1], m = tensor_nrows(x), nb = k / QK;
    struct qg_job j = {
        .g = *g, .x = x, .w = w->data, .w_stride = w->nb[0], .m = m, .k = k, .nb = nb,
        .n = w->ne[0], .groups = (m + LINEAR_QG_LANES - 1) / LINEAR_QG_LANES,
        .bias = b ? b->data : NULL, .bias_stride = b ? b->nb[0] : 0, .y = out->data,
        .tmp_bytes = qg_tmp_bytes(k, nb),
    };
    if (packed) { /* tiles are 8 or 16 rows from multiples of 8: inside a group or the tail */
        j.pk_unpack = linear_pk_unpack_avx512(w->type);
        j.pk_rows = j.n / LINEAR_PK_ROWS * LINEAR_PK_ROWS;
        j.pk_gbytes = (size_t)w->nb[0] * LINEAR_PK_ROWS;
    }
    int nt = tp_n_threads(tp);
    size_t xp_bytes = scr_round((size_t)(j.groups * nb) * LINEAR_QG_REC);
    if (!scratch_begin(a, xp_bytes + j.tmp_bytes * (size_t)nt)) return;
    j.xp = scratch_take(xp_bytes);
    j.tmp = scratch_take(j.tmp_bytes * (size_t)nt);
    tp_parallel_for(tp, j.groups, 1, qg_pack, &j);
    tp_parallel_for(tp, (j.n + g->maxw - 1) / g->maxw, 1, qg_tiles, &j);
}

/* The quantised GEMM kernels for w at the level in use, when op_linear
 * takes that path for m rows. */
static bool qgemm_for(enum dtype t, int64_t m, enum cpu_level l, struct linear_qgemm *g)
{
    if (m < linear_qgemm_min_rows || l < CPU_AVX512) return false;
    if (linear_qgemm_use_amx && linear_qgemm_amx(t, g)) return true;
    return linear_qgemm_avx512(t, g);
}

bool linear_x_quantised(enum dtype t, int64_t m, enum cpu_level l)
{
    struct linear_qgemm g;
    return m <= linear_dot_max_rows || qgemm_for(t, m, l, &g);
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
    int64_t tile = (int64_t)(LINEAR_TILE_BYTES / ((size_t)k * 4));
    if (tile < 16) tile = 16;
    if (tile > n) tile = n;
    size_t wt_bytes = w->type == TYPE_F32 ? 0 : scr_round((size_t)(tile * k) * sizeof(float));
    if (!scratch_begin(a, x_copy_bytes(x) + wt_bytes)) return;
    int64_t ldx;
    const float *xm = x_matrix(x, &ldx);
    for (int64_t r = 0; r < m; r++) {
        if (!b) {
            memset(y + r * n, 0, (size_t)n * sizeof *y);
            continue;
        }
        for (int64_t i = 0; i < n; i++)
            y[r * n + i] = *(const float *)((const char *)b->data + i * b->nb[0]);
    }
    if (k == 0) return;
    if (w->type == TYPE_F32) {
        cpu_sgemm(be->tp, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f,
                    xm, (int)ldx, w->data, (int)(w->nb[0] / 4), 1.0f, y, (int)n);
        return;
    }
    float *wt = scratch_take((size_t)(tile * k) * sizeof *wt);
    for (int64_t n0 = 0; n0 < n; n0 += tile) {
        int64_t tn = n - n0 < tile ? n - n0 : tile;
        struct deq_job j = {w->type, cpu_level() >= CPU_AVX2 ? linear_dequant_avx2(w->type) : NULL,
                            (const char *)w->data + n0 * w->nb[0], w->nb[0], k, wt};
        tp_parallel_for(be->tp, tn, 8, deq_rows, &j);
        cpu_sgemm(be->tp, CblasNoTrans, CblasTrans, (int)m, (int)tn, (int)k, 1.0f,
                    xm, (int)ldx, wt, (int)k, 1.0f, y + n0, (int)n);
    }
}

/* ---- BF16 products (linear_bf16.h) -------------------------------------- */

static void linear_bf16(struct arena *a, struct tensor *out, const struct tensor *x,
                        const struct tensor *w, const struct tensor *b, const struct linear_epi *e)
{
    struct threadpool *tp = arena_backend(a)->tp;
    size_t need = linear_bf16_scratch_bytes(tensor_nrows(x), x->ne[x->ndim - 1], tp_n_threads(tp));
    if (!scratch_begin(a, need)) return;
    linear_bf16_gemm(tp, x, w, b ? b->data : NULL, b ? b->nb[0] : 0, out->data, scratch_take(need), e);
}

/* The path op_linear takes for a shape */
enum lpath { LP_NONE, LP_DOT, LP_DOT_PACKED, LP_BF16, LP_QGEMM, LP_QGEMM_PACKED, LP_GEMM };

static enum lpath linear_path(struct arena *a, const struct tensor *x, const struct tensor *w,
                              struct linear_qgemm *g)
{
    const int64_t m = tensor_nrows(x);
    const bool packed = cpu_weight_is(w, CPU_WEIGHT_GEMV16);
    if (m == 0 || w->ne[0] == 0) return LP_NONE;
    /* row-exact (arena_set_row_exact): the dot path, whose rows are
     * independent (each weight row's dot with each x row; the split over
     * threads follows the weight rows alone), as one or two rows take it */
    if (arena_row_exact(a)) return packed ? LP_DOT_PACKED : LP_DOT;
    if (arena_bf16(a) && m >= linear_bf16_min_rows && x->ne[x->ndim - 1] > 0 && linear_bf16_supported(w))
        return LP_BF16;
    /* packed weights take the packed paths whatever the level now (they
     * were packed at AVX-512, which the CPU has) */
    if (packed)
        return m >= linear_qgemm_min_rows &&
                       ((linear_qgemm_use_amx && linear_qgemm_amx(w->type, g)) || linear_qgemm_avx512(w->type, g))
                   ? LP_QGEMM_PACKED
                   : LP_DOT_PACKED;
    if (x->ne[x->ndim - 1] > 0 && qgemm_for(w->type, m, cpu_level(), g)) return LP_QGEMM;
    return m <= linear_dot_max_rows ? LP_DOT : LP_GEMM;
}

/* The product on path p; the epilogue e (NULL: none) only on the paths
 * that store through one (the dot paths and BF16). */
static void linear_run(struct arena *a, enum lpath p, struct tensor *out, const struct tensor *x,
                       const struct tensor *w, const struct tensor *b, const struct linear_qgemm *g,
                       const struct linear_epi *e)
{
    switch (p) {
    case LP_NONE: break;
    case LP_DOT: linear_dot(a, out, x, w, b, false, e); break;
    case LP_DOT_PACKED: linear_dot(a, out, x, w, b, true, e); break;
    case LP_BF16: linear_bf16(a, out, x, w, b, e); break;
    case LP_QGEMM: linear_qgemm(a, out, x, w, b, g, false); break;
    case LP_QGEMM_PACKED: linear_qgemm(a, out, x, w, b, g, true); break;
    case LP_GEMM: linear_gemm(a, out, x, w, b); break;
    }
}

static void cpu_linear(struct arena *a, struct tensor *out, const struct tensor *x,
                       const struct tensor *w, const struct tensor *b)
{
    struct linear_qgemm g;
    linear_run(a, linear_path(a, x, w, &g), out, x, w, b, &g, NULL);
}

/* op_linear_ex: the activation and the residual in the product's store
 * where its path has one (the same values op_unary and op_add give): the
 * dot paths and the BF16 GEMM (English CFM step, 2-core AMX VM: 4-5%
 * faster with S3Gen's GELU in the store than after it, once the GELU was
 * the table erf of act_simd.inc; with the former erf, 4% slower);
 * otherwise the product, the unary and the binary kernel one after the
 * other through scratch, as the op's own fallback does */
static void cpu_linear_ex(struct arena *a, struct tensor *out, const struct tensor *x, const struct tensor *w,
                          const struct tensor *b, int act, const struct tensor *r)
{
    struct linear_qgemm g;
    const enum lpath p = linear_path(a, x, w, &g);
    if (p == LP_NONE) return;
    const bool store_epi = p == LP_DOT || p == LP_DOT_PACKED || p == LP_BF16;
    if ((act < 0 && !r) ||
        (store_epi && (act < 0 || cpu_unary_fusable((enum unop)act)) && (!r || tensor_is_contiguous(r)))) {
        const struct linear_epi e = {act, r ? (const float *)r->data : NULL};
        linear_run(a, p, out, x, w, b, &g, act >= 0 || r ? &e : NULL);
        return;
    }
    const struct kernels *k = &arena_backend(a)->k;
    struct tensor y = *out, u = *out;
    if (!(y.data = arena_alloc(a, tensor_nbytes(out)))) return;
    linear_run(a, p, &y, x, w, b, &g, NULL);
    struct tensor *cur = &y;
    if (act >= 0 && arena_status(a) == CBX_OK) {
        if (r && !(u.data = arena_alloc(a, tensor_nbytes(out)))) return;
        if (!r) u.data = out->data;
        k->unary(a, &u, cur, (enum unop)act, 0.0f, 0.0f);
        cur = &u;
    }
    if (r && arena_status(a) == CBX_OK) k->binary(a, out, r, cur, BIN_ADD);
}

/* op_linear_cat. The input h (x, or the norm kernel's output for it)
 * goes to every product. Where each weight takes the packed decode GEMV
 * (linear_path LP_DOT_PACKED; activations the store can apply), h is
 * quantised once and one dispatch runs every weight's groups, each
 * storing into its columns of out. Otherwise each product runs as
 * op_linear_ex does, into scratch, then its columns are copied into out.
 * Either way the floats are those of the norm op, op_linear_ex per weight
 * and op_concat. */
struct cat_job {
    struct pk_job pj[OP_LINEAR_CAT_MAX];
    struct linear_epi epi[OP_LINEAR_CAT_MAX];
    int64_t first[OP_LINEAR_CAT_MAX + 1]; /* weight i's items start at first[i] */
    int n;
};

static void cat_items(void *ctx, int64_t i0, int64_t i1, int ith)
{
    const struct cat_job *c = ctx;
    for (int i = 0; i < c->n; i++) {
        const int64_t lo = i0 > c->first[i] ? i0 : c->first[i], hi = i1 < c->first[i + 1] ? i1 : c->first[i + 1];
        if (lo < hi) pk_rows((void *)&c->pj[i], lo - c->first[i], hi - c->first[i], ith);
    }
}

static bool cat_packed(struct arena *a, const struct tensor *h, int n, const struct tensor *const *w,
                       const int *act)
{
    for (int i = 0; i < n; i++) {
        struct linear_qgemm g;
        if (linear_path(a, h, w[i], &g) != LP_DOT_PACKED || !dot_packed_fn(w[i]) ||
            (act[i] >= 0 && !cpu_unary_fusable((enum unop)act[i])))
            return false;
    }
    return true;
}

static void cpu_linear_cat(struct arena *a, struct tensor *out, const struct tensor *x,
                           const struct linear_norm *norm, int n, const struct tensor *const *w,
                           const struct tensor *const *b, const int *act)
{
    const struct kernels *k = &arena_backend(a)->k;
    const struct tensor *h = x;
    if (norm) {
        struct tensor *t = arena_tensor(a, TYPE_F32, x->ndim, x->ne);
        if (!t) return;
        if (norm->kind == LINEAR_NORM_LAYER) k->layer_norm(a, t, x, norm->g, norm->b, norm->eps);
        else k->rms_norm(a, t, x, norm->g, norm->eps);
        if (arena_status(a) != CBX_OK) return;
        h = t;
    }
    const int64_t m = tensor_nrows(h), ld = out->ne[out->ndim - 1];
    if (m == 0) return;
    if (cat_packed(a, h, n, w, act)) {
        struct cat_job c = {.n = n};
        struct dot_job j = {.m = m, .k = h->ne[h->ndim - 1]};
        if (!dot_x(a, &j, h, w[0]->type, dot_packed_fn(w[0]))) return;
        float *y = out->data;
        int64_t grain = 1;
        for (int i = 0; i < n; i++) {
            c.epi[i] = (struct linear_epi){act[i], NULL};
            c.pj[i] = pk_job_of(&j, w[i], b[i], y, ld, act[i] >= 0 ? &c.epi[i] : NULL);
            c.first[i + 1] = c.first[i] + pk_items(&c.pj[i]);
            grain = pk_grain(&c.pj[i]);
            y += w[i]->ne[0];
        }
        tp_parallel_for(arena_backend(a)->tp, c.first[n], grain, cat_items, &c);
        return;
    }
    int64_t c0 = 0;
    for (int i = 0; i < n && arena_status(a) == CBX_OK; i++) {
        int64_t ne[TENSOR_MAX_DIMS];
        memcpy(ne, out->ne, sizeof ne);
        ne[out->ndim - 1] = w[i]->ne[0];
        struct tensor *y = arena_tensor(a, TYPE_F32, out->ndim, ne);
        if (!y) return;
        cpu_linear_ex(a, y, h, w[i], b[i], act[i], NULL);
        struct tensor cols = *out; /* out's columns [c0, c0 + Ni) */
        cols.ne[out->ndim - 1] = w[i]->ne[0];
        cols.data = (float *)out->data + c0;
        if (arena_status(a) == CBX_OK) k->cpy(a, &cols, y);
        c0 += w[i]->ne[0];
    }
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
        cpu_sgemm(arena_backend(a)->tp, tx, ty, (int)m, (int)n, (int)k, 1.0f, (const float *)xp,
                    (int)ldx, (const float *)yp, (int)ldy, 0.0f, op, (int)n);
    }
}

void cpu_register_linear(struct kernels *k)
{
    k->linear = cpu_linear;
    k->linear_ex = cpu_linear_ex;
    k->linear_cat = cpu_linear_cat;
    k->matmul = cpu_matmul;
}
