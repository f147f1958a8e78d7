/* elementwise.c - cpu kernels of the elementwise group (see ops.h): copy and
 * type conversion, fill, broadcast binary ops, activations, Snake,
 * reductions, cumsum and row gathers.
 *
 * Every operand is seen through a 4-d iterator whose dimensions are
 * collapsed wherever all operands are laid out contiguously across them,
 * so the common cases (contiguous tensors, a bias row broadcast over rows,
 * a per-channel column) end in one simple loop over a contiguous run that
 * the compiler vectorises. Strided runs (permuted views) are gathered into
 * a small stack buffer, computed contiguously and scattered back. Work is
 * split over the backend's thread pool in (row, chunk) units once a tensor
 * is larger than about 32K elements.
 *
 * Numerics: +, -, *, / and the float-only activations are the same IEEE
 * operations as the ref backend (bit-identical, -ffp-contract=off);
 * transcendental activations use AVX2 / AVX-512 vector functions of their
 * own (elementwise_avx2.c, elementwise_avx512.c) or, at the generic level and for softplus/log,
 * libm's float functions: both within a few ulp of the ref backend's
 * double evaluation. cumsum accumulates sequentially in double and stores
 * float32, as torch.cumsum does on CPU (acc_type<float> is double there). */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "../backend.h"
#include "../cpu_features.h"
#include "../elem.h"
#include "../quant.h"
#include "../scalar.h"
#include "../threadpool.h"
#include "elementwise_kernels.h"

#define MAXOP 3
#define BLK 256              /* gather/scatter buffer, elements */
#define CHUNK 16384          /* longest inner run of one work unit */
#define PAR_MIN 32768        /* elements per unit of parallel work, at least */

/* ---- iteration ---------------------------------------------------------- */

/* Operands share the shape of the first one (t[0]); later operands may
 * have size-1 (or missing leading) dims, which broadcast with stride 0. */
struct iter {
    int nop;
    int64_t ne[4];
    int64_t nb[MAXOP][4];
    char *base[MAXOP];
    int64_t chunk, nchunk, nunits;
};

static void iter_init(struct iter *it, int nop, const struct tensor *const *t)
{
    int64_t ne[4], nb[MAXOP][4], tne[4];
    elem_shape4(t[0], ne, nb[0]);
    for (int k = 1; k < nop; k++) {
        elem_shape4(t[k], tne, nb[k]);
        for (int d = 0; d < 4; d++)
            if (tne[d] == 1) nb[k][d] = 0;
    }
    /* collapse, innermost first; size-1 dims vanish */
    int64_t cne[4], cnb[MAXOP][4];
    int nd = 0;
    for (int d = 3; d >= 0; d--) {
        if (ne[d] == 1) continue;
        bool merge = nd > 0;
        for (int k = 0; merge && k < nop; k++)
            if (nb[k][d] != cnb[k][nd - 1] * cne[nd - 1]) merge = false;
        if (merge) {
            cne[nd - 1] *= ne[d];
        } else {
            cne[nd] = ne[d];
            for (int k = 0; k < nop; k++) cnb[k][nd] = nb[k][d];
            nd++;
        }
    }
    it->nop = nop;
    for (int d = 0; d < 4; d++) {
        it->ne[d] = 1;
        for (int k = 0; k < nop; k++) it->nb[k][d] = 0;
    }
    for (int j = 0; j < nd; j++) {
        it->ne[3 - j] = cne[j];
        for (int k = 0; k < nop; k++) it->nb[k][3 - j] = cnb[k][j];
    }
    for (int k = 0; k < nop; k++) it->base[k] = (char *)t[k]->data;
    int64_t n = it->ne[3];
    it->chunk = n > CHUNK ? CHUNK : (n > 0 ? n : 1);
    it->nchunk = (n + it->chunk - 1) / it->chunk;
    it->nunits = it->ne[0] * it->ne[1] * it->ne[2] * it->nchunk;
    if (tensor_nelements(t[0]) == 0) it->nunits = 0;
}

/* Pointers and length of work unit u. */
static int64_t iter_unit(const struct iter *it, int64_t u, char *p[MAXOP])
{
    int64_t r = u / it->nchunk, c = u % it->nchunk;
    int64_t i2 = r % it->ne[2];
    r /= it->ne[2];
    int64_t i1 = r % it->ne[1], i0 = r / it->ne[1];
    for (int k = 0; k < it->nop; k++)
        p[k] = it->base[k] + i0 * it->nb[k][0] + i1 * it->nb[k][1] + i2 * it->nb[k][2] +
               c * it->chunk * it->nb[k][3];
    int64_t left = it->ne[3] - c * it->chunk;
    return left < it->chunk ? left : it->chunk;
}

static int64_t grain_for(int64_t elems_per_unit)
{
    if (elems_per_unit < 1) elems_per_unit = 1;
    int64_t g = PAR_MIN / elems_per_unit;
    return g < 1 ? 1 : g;
}

static void run_iter(struct arena *a, const struct iter *it, tp_fn fn, void *ctx)
{
    tp_parallel_for(arena_backend(a)->tp, it->nunits, grain_for(it->chunk), fn, ctx);
}

static void gather(float *dst, const char *src, int64_t stride, int64_t n)
{
    for (int64_t i = 0; i < n; i++) memcpy(dst + i, src + i * stride, 4);
}

static void scatter(char *dst, int64_t stride, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) memcpy(dst + i * stride, src + i, 4);
}

/* ---- element conversion ------------------------------------------------- */

#if HAVE_X86
/* The AVX2 level includes f16c (cpu_features.h). */
static bool have_f16c(void)
{
    return HAVE_X86 && cpu_level() >= CPU_AVX2;
}
#endif

/* Contiguous float16/bfloat16 <-> float32 runs (u16 pointers may be
 * unaligned views, so element access goes through memcpy). */
static void f16_row_to_f32(float *dst, const char *src, int64_t n)
{
#if HAVE_X86
    if (have_f16c()) {
        elementwise_f16_to_f32_f16c(dst, (const uint16_t *)src, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        dst[i] = fp16_to_f32(h);
    }
}

static void f32_row_to_f16(char *dst, const float *src, int64_t n)
{
#if HAVE_X86
    if (have_f16c()) {
        elementwise_f32_to_f16_f16c((uint16_t *)dst, src, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = f32_to_fp16(src[i]);
        memcpy(dst + 2 * i, &h, 2);
    }
}

static void bf16_row_to_f32(float *dst, const char *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        uint32_t b = (uint32_t)h << 16;
        memcpy(dst + i, &b, 4);
    }
}

/* Run of n elements of type tx (stride xs) into type to (stride os). */
static void convert_run(enum dtype to, char *o, int64_t os, enum dtype tx, const char *x,
                        int64_t xs, int64_t n)
{
    if (to == TYPE_F32 && os == 4) {
        if (tx == TYPE_F16 && xs == 2) { f16_row_to_f32((float *)o, x, n); return; }
        if (tx == TYPE_BF16 && xs == 2) { bf16_row_to_f32((float *)o, x, n); return; }
    }
    if (tx == TYPE_F32 && xs == 4) {
        if (to == TYPE_F16 && os == 2) { f32_row_to_f16(o, (const float *)x, n); return; }
        if (to == TYPE_BF16 && os == 2) {
            for (int64_t i = 0; i < n; i++) {
                float f;
                memcpy(&f, x + 4 * i, 4);
                uint16_t h = f32_to_bf16(f);
                memcpy(o + 2 * i, &h, 2);
            }
            return;
        }
    }
    if (elem_is_int(tx) && elem_is_int(to)) {
        for (int64_t i = 0; i < n; i++) elem_store_i(to, o + i * os, elem_load_i(tx, x + i * xs));
        return;
    }
    for (int64_t i = 0; i < n; i++) elem_store_f(to, o + i * os, elem_load_f(tx, x + i * xs));
}

/* ---- cpy ---------------------------------------------------------------- */

struct cpy_ctx {
    struct iter it;
    enum dtype to, tx;
    size_t esz;
    /* block rows */
    const struct tensor *out, *x;
    int64_t ne[4], xb[4], ob[4];
    float *rowbuf; /* one row per thread */
    bool q8z;      /* F32 rows (unit stride) into Q8_0 by elementwise_q8_0_row_avx512 */
};

static void cpy_units(void *p, int64_t u0, int64_t u1, int ith)
{
    (void)ith;
    const struct cpy_ctx *c = p;
    const int64_t os = c->it.nb[0][3], xs = c->it.nb[1][3];
    char *ptr[MAXOP];
    for (int64_t u = u0; u < u1; u++) {
        int64_t n = iter_unit(&c->it, u, ptr);
        char *o = ptr[0];
        const char *x = ptr[1];
        if (c->to != c->tx) {
            convert_run(c->to, o, os, c->tx, x, xs, n);
        } else if (os == (int64_t)c->esz && xs == (int64_t)c->esz) {
            memcpy(o, x, (size_t)n * c->esz);
        } else {
            switch (c->esz) {
            case 1: for (int64_t i = 0; i < n; i++) o[i * os] = x[i * xs]; break;
            case 2: for (int64_t i = 0; i < n; i++) memcpy(o + i * os, x + i * xs, 2); break;
            case 4: for (int64_t i = 0; i < n; i++) memcpy(o + i * os, x + i * xs, 4); break;
            case 8: for (int64_t i = 0; i < n; i++) memcpy(o + i * os, x + i * xs, 8); break;
            default:
                for (int64_t i = 0; i < n; i++) memcpy(o + i * os, x + i * xs, c->esz);
            }
        }
    }
}

/* Rows where either side is a block type: rows are contiguous, element
 * strides meaningless. */
static void cpy_rows(void *p, int64_t r0, int64_t r1, int ith)
{
    const struct cpy_ctx *c = p;
    const struct dtype_traits *tx = dtype_traits(c->tx), *to = dtype_traits(c->to);
    const int64_t n = c->ne[3];
    float *row = c->rowbuf + (size_t)ith * (size_t)n;
    for (int64_t r = r0; r < r1; r++) {
        int64_t i2 = r % c->ne[2], i1 = (r / c->ne[2]) % c->ne[1], i0 = r / (c->ne[2] * c->ne[1]);
        const char *xr = (const char *)c->x->data + i0 * c->xb[0] + i1 * c->xb[1] + i2 * c->xb[2];
        char *or = (char *)c->out->data + i0 * c->ob[0] + i1 * c->ob[1] + i2 * c->ob[2];
        if (c->tx == c->to) {
            memcpy(or, xr, dtype_row_size(c->tx, n));
            continue;
        }
#if HAVE_X86
        if (c->q8z) {
            elementwise_q8_0_row_avx512((const float *)xr, (struct block_q8_0 *)or, n);
            continue;
        }
#endif
        if (tx->quantized) dequantize_row(c->tx, xr, row, n);
        else convert_run(TYPE_F32, (char *)row, 4, c->tx, xr, c->xb[3], n);
        if (to->quantized) quantize_row(c->to, row, or, n);
        else convert_run(c->to, or, c->ob[3], TYPE_F32, (const char *)row, 4, n);
    }
}

static void cpu_cpy(struct arena *a, struct tensor *out, const struct tensor *x)
{
    const struct dtype_traits *tx = dtype_traits(x->type), *to = dtype_traits(out->type);
    if (!tx || !to || !tensor_same_shape(x, out)) {
        arena_fail(a, CBX_ERR_INTERNAL, "cpy: bad operands (%s -> %s)", dtype_name(x->type),
                   dtype_name(out->type));
        return;
    }
    struct cpy_ctx c = {.to = out->type, .tx = x->type, .esz = tx->size, .out = out, .x = x};
    if (!tx->quantized && !to->quantized) {
        const struct tensor *t[2] = {out, x};
        iter_init(&c.it, 2, t);
        run_iter(a, &c.it, cpy_units, &c);
        return;
    }
    int64_t one[4];
    elem_shape4(x, c.ne, c.xb);
    elem_shape4(out, one, c.ob);
    const int64_t n = c.ne[3];
    if ((tx->quantized && n % tx->blck) || (to->quantized && n % to->blck)) {
        arena_fail(a, CBX_ERR_INTERNAL, "cpy: rows of %lld are not whole blocks (%s -> %s)",
                   (long long)n, tx->name, to->name);
        return;
    }
#if HAVE_X86
    c.q8z = c.to == TYPE_Q8_0 && c.tx == TYPE_F32 && c.xb[3] == (int64_t)sizeof(float) &&
            cpu_level() >= CPU_AVX512;
#endif
    struct threadpool *tp = arena_backend(a)->tp;
    c.rowbuf = arena_alloc_host(a, (size_t)tp_n_threads(tp) * (size_t)(n > 0 ? n : 1) * 4);
    if (!c.rowbuf) return;
    int64_t rows = c.ne[0] * c.ne[1] * c.ne[2];
    if (n == 0) return;
    tp_parallel_for(tp, rows, grain_for(n), cpy_rows, &c);
}

/* ---- fill --------------------------------------------------------------- */

struct fill_ctx {
    struct iter it;
    enum dtype type;
    float v;
};

static void fill_units(void *p, int64_t u0, int64_t u1, int ith)
{
    (void)ith;
    const struct fill_ctx *c = p;
    const int64_t os = c->it.nb[0][3];
    char *ptr[MAXOP];
    for (int64_t u = u0; u < u1; u++) {
        int64_t n = iter_unit(&c->it, u, ptr);
        if (c->type == TYPE_F32 && os == 4) {
            float *o = (float *)ptr[0];
            for (int64_t i = 0; i < n; i++) o[i] = c->v;
        } else {
            for (int64_t i = 0; i < n; i++) elem_store_f(c->type, ptr[0] + i * os, c->v);
        }
    }
}

static void cpu_fill(struct arena *a, struct tensor *out, float v)
{
    if (dtype_traits(out->type)->quantized) {
        arena_fail(a, CBX_ERR_UNSUPPORTED, "fill: block type %s", dtype_name(out->type));
        return;
    }
    struct fill_ctx c = {.type = out->type, .v = v};
    const struct tensor *t[1] = {out};
    iter_init(&c.it, 1, t);
    run_iter(a, &c.it, fill_units, &c);
}

/* ---- randn: the generator's gaussians, in chunks over the pool (each
 * value depends only on its draw index, so the split changes no bit) ---- */

enum { RANDN_CHUNK = 4096 };

struct randn_ctx {
    float *o;
    int64_t n;
    uint64_t key, c;
};

static void randn_units(void *p, int64_t u0, int64_t u1, int ith)
{
    (void)ith;
    const struct randn_ctx *c = p;
    const int64_t i1 = u1 * RANDN_CHUNK < c->n ? u1 * RANDN_CHUNK : c->n;
    for (int64_t i = u0 * RANDN_CHUNK; i < i1; i++)
        c->o[i] = scalar_rng_gaussian(c->key, c->c + 2 * (uint64_t)i);
}

static void cpu_randn(struct arena *a, struct tensor *out, uint64_t key, uint64_t c)
{
    struct randn_ctx x = {(float *)out->data, tensor_nelements(out), key, c};
    tp_parallel_for(arena_backend(a)->tp, (x.n + RANDN_CHUNK - 1) / RANDN_CHUNK, 1, randn_units, &x);
}

/* ---- binary ------------------------------------------------------------- */

struct bin_ctx {
    struct iter it;
    enum binop op;
};

static void bin_vv(enum binop op, float *restrict o, const float *restrict x,
                   const float *restrict y, int64_t n)
{
    switch (op) {
    case BIN_ADD: for (int64_t i = 0; i < n; i++) o[i] = x[i] + y[i]; break;
    case BIN_SUB: for (int64_t i = 0; i < n; i++) o[i] = x[i] - y[i]; break;
    case BIN_MUL: for (int64_t i = 0; i < n; i++) o[i] = x[i] * y[i]; break;
    case BIN_DIV: for (int64_t i = 0; i < n; i++) o[i] = x[i] / y[i]; break;
    }
}

static void bin_vs(enum binop op, float *restrict o, const float *restrict x, float y, int64_t n)
{
    switch (op) {
    case BIN_ADD: for (int64_t i = 0; i < n; i++) o[i] = x[i] + y; break;
    case BIN_SUB: for (int64_t i = 0; i < n; i++) o[i] = x[i] - y; break;
    case BIN_MUL: for (int64_t i = 0; i < n; i++) o[i] = x[i] * y; break;
    case BIN_DIV: for (int64_t i = 0; i < n; i++) o[i] = x[i] / y; break;
    }
}

static void bin_units(void *p, int64_t u0, int64_t u1, int ith)
{
    (void)ith;
    const struct bin_ctx *c = p;
    const int64_t os = c->it.nb[0][3], xs = c->it.nb[1][3], ys = c->it.nb[2][3];
    char *ptr[MAXOP];
    float tx[BLK], ty[BLK], to[BLK];
    for (int64_t u = u0; u < u1; u++) {
        int64_t n = iter_unit(&c->it, u, ptr);
        if (os == 4 && xs == 4 && ys == 4) {
            bin_vv(c->op, (float *)ptr[0], (const float *)ptr[1], (const float *)ptr[2], n);
        } else if (os == 4 && xs == 4 && ys == 0) {
            bin_vs(c->op, (float *)ptr[0], (const float *)ptr[1], *(const float *)ptr[2], n);
        } else {
            for (int64_t j = 0; j < n; j += BLK) {
                int64_t m = n - j < BLK ? n - j : BLK;
                gather(tx, ptr[1] + j * xs, xs, m);
                if (ys == 0) {
                    bin_vs(c->op, to, tx, *(const float *)ptr[2], m);
                } else {
                    gather(ty, ptr[2] + j * ys, ys, m);
                    bin_vv(c->op, to, tx, ty, m);
                }
                scatter(ptr[0] + j * os, os, to, m);
            }
        }
    }
}

static void cpu_binary(struct arena *a, struct tensor *out, const struct tensor *x,
                       const struct tensor *y, enum binop op)
{
    struct bin_ctx c = {.op = op};
    const struct tensor *t[3] = {out, x, y};
    iter_init(&c.it, 3, t);
    run_iter(a, &c.it, bin_units, &c);
}

/* ---- unary -------------------------------------------------------------- */

/* torch's formulas (aten/src/ATen/native/cpu/Activation.cpp,
 * UnaryOpsKernel.cpp) in float with libm's float functions. */
static void un_vec(enum unop op, float p0, float p1, float *restrict o,
                   const float *restrict x, int64_t n)
{
    switch (op) {
    case UN_GELU:
        for (int64_t i = 0; i < n; i++)
            o[i] = 0.5f * x[i] * (1.0f + erff(x[i] * (float)M_SQRT1_2));
        break;
    case UN_GELU_TANH: {
        const float k = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
        for (int64_t i = 0; i < n; i++) {
            float v = x[i], inner = k * (v + kappa * v * v * v);
            o[i] = 0.5f * v * (1.0f + tanhf(inner));
        }
        break;
    }
    case UN_SILU:
        for (int64_t i = 0; i < n; i++) o[i] = x[i] / (1.0f + expf(-x[i]));
        break;
    case UN_MISH:
        for (int64_t i = 0; i < n; i++) o[i] = x[i] * tanhf(log1pf(expf(x[i])));
        break;
    case UN_ELU:
        for (int64_t i = 0; i < n; i++) o[i] = x[i] > 0 ? x[i] : p0 * expm1f(x[i]);
        break;
    case UN_LEAKY_RELU:
        for (int64_t i = 0; i < n; i++) o[i] = x[i] > 0 ? x[i] : x[i] * p0;
        break;
    case UN_RELU:
        for (int64_t i = 0; i < n; i++) o[i] = x[i] > 0 ? x[i] : 0.0f;
        break;
    case UN_TANH:
        for (int64_t i = 0; i < n; i++) o[i] = tanhf(x[i]);
        break;
    case UN_SIGMOID:
        for (int64_t i = 0; i < n; i++) o[i] = 1.0f / (1.0f + expf(-x[i]));
        break;
    case UN_SOFTPLUS:
        for (int64_t i = 0; i < n; i++) o[i] = x[i] > 20.0f ? x[i] : log1pf(expf(x[i]));
        break;
    case UN_EXP: for (int64_t i = 0; i < n; i++) o[i] = expf(x[i]); break;
    case UN_LOG: for (int64_t i = 0; i < n; i++) o[i] = logf(x[i]); break;
    case UN_SIN: for (int64_t i = 0; i < n; i++) o[i] = sinf(x[i]); break;
    case UN_COS: for (int64_t i = 0; i < n; i++) o[i] = cosf(x[i]); break;
    case UN_ABS: for (int64_t i = 0; i < n; i++) o[i] = fabsf(x[i]); break;
    case UN_SQRT: for (int64_t i = 0; i < n; i++) o[i] = sqrtf(x[i]); break;
    case UN_SQR: for (int64_t i = 0; i < n; i++) o[i] = x[i] * x[i]; break;
    case UN_NEG: for (int64_t i = 0; i < n; i++) o[i] = -x[i]; break;
    case UN_SCALE: for (int64_t i = 0; i < n; i++) o[i] = p0 * x[i] + p1; break;
    case UN_CLAMP:
        for (int64_t i = 0; i < n; i++) o[i] = x[i] < p0 ? p0 : (x[i] > p1 ? p1 : x[i]);
        break;
    }
}

static bool use_avx2(void)
{
    return HAVE_X86 && cpu_level() >= CPU_AVX2;
}

/* a unary op and the kernel that runs it, picked once per call */
struct un_fn {
    enum unop op;
    float p0, p1;
    bool avx2;   /* vector path */
    bool avx512; /* 16-lane path (GELU, SiLU, sigmoid, Mish) */
};

struct un_ctx {
    struct iter it;
    struct un_fn f;
};

static void un_run(const struct un_fn *c, float *o, const float *x, int64_t n)
{
#if HAVE_X86
    if (c->avx512) {
        elementwise_unary_avx512(c->op, o, x, n);
        return;
    }
    if (c->avx2) {
        elementwise_unary_avx2(c->op, c->p0, c->p1, o, x, n);
        return;
    }
#endif
    un_vec(c->op, c->p0, c->p1, o, x, n);
}

static void un_units(void *p, int64_t u0, int64_t u1, int ith)
{
    (void)ith;
    const struct un_ctx *c = p;
    const int64_t os = c->it.nb[0][3], xs = c->it.nb[1][3];
    char *ptr[MAXOP];
    float tx[BLK], to[BLK];
    for (int64_t u = u0; u < u1; u++) {
        int64_t n = iter_unit(&c->it, u, ptr);
        if (os == 4 && xs == 4) {
            un_run(&c->f, (float *)ptr[0], (const float *)ptr[1], n);
            continue;
        }
        for (int64_t j = 0; j < n; j += BLK) {
            int64_t m = n - j < BLK ? n - j : BLK;
            gather(tx, ptr[1] + j * xs, xs, m);
            un_run(&c->f, to, tx, m);
            scatter(ptr[0] + j * os, os, to, m);
        }
    }
}

static void un_pick(struct un_fn *c)
{
#if HAVE_X86
    c->avx2 = use_avx2() && un_has_avx2(c->op);
    c->avx512 = cpu_level() >= CPU_AVX512 && un_has_avx512(c->op);
#else
    (void)c;
#endif
}

bool cpu_unary_fusable(enum unop op)
{
    /* the vector forms compute each lane alone (masked tails the same);
     * the AVX2 sin/cos falls back to libm per 8 lanes, and the scalar
     * loop wants distinct in and out */
    struct un_fn c = {.op = op};
    un_pick(&c);
    return (c.avx2 || c.avx512) && op != UN_SIN && op != UN_COS;
}

void cpu_unary_run(enum unop op, float *o, const float *x, int64_t n)
{
    struct un_fn c = {.op = op};
    un_pick(&c);
    un_run(&c, o, x, n);
}

static void cpu_unary(struct arena *a, struct tensor *out, const struct tensor *x,
                      enum unop op, float p0, float p1)
{
    struct un_ctx c = {.f = {.op = op, .p0 = p0, .p1 = p1}};
    un_pick(&c.f);
    const struct tensor *t[2] = {out, x};
    iter_init(&c.it, 2, t);
    run_iter(a, &c.it, un_units, &c);
}

/* ---- snake -------------------------------------------------------------- */

/* Rows are (b, c) pairs of x[B, C, T]; the channel picks alpha. */
struct snake_ctx {
    const struct tensor *out, *x, *alpha;
    int64_t ne[4], xb[4], ob[4];
    int64_t chunk, nchunk;
    bool avx2;
};

static void snake_run(float *restrict o, const float *restrict x, float al, float inv, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float s = sinf(x[i] * al);
        o[i] = x[i] + inv * (s * s);
    }
}

static void snake_any(bool avx2, float *o, const float *x, float al, float inv, int64_t n)
{
#if HAVE_X86
    if (avx2 && cpu_level() >= CPU_AVX512) {
        elementwise_snake_avx512(o, x, al, inv, n);
        return;
    }
    if (avx2) {
        elementwise_snake_avx2(o, x, al, inv, n);
        return;
    }
#endif
    (void)avx2;
    snake_run(o, x, al, inv, n);
}

static void snake_units(void *p, int64_t u0, int64_t u1, int ith)
{
    (void)ith;
    const struct snake_ctx *c = p;
    float tx[BLK], to[BLK];
    for (int64_t u = u0; u < u1; u++) {
        int64_t r = u / c->nchunk, k = u % c->nchunk;
        int64_t ch = r % c->ne[2], b = r / c->ne[2];
        int64_t t0 = k * c->chunk, n = c->ne[3] - t0 < c->chunk ? c->ne[3] - t0 : c->chunk;
        float al = *(const float *)((const char *)c->alpha->data + ch * c->alpha->nb[0]);
        /* torch: 1.0 / (alpha + 1e-9) in float */
        float inv = 1.0f / (al + 1e-9f);
        const char *xr = (const char *)c->x->data + b * c->xb[1] + ch * c->xb[2] + t0 * c->xb[3];
        char *or = (char *)c->out->data + b * c->ob[1] + ch * c->ob[2] + t0 * c->ob[3];
        if (c->xb[3] == 4 && c->ob[3] == 4) {
            snake_any(c->avx2, (float *)or, (const float *)xr, al, inv, n);
            continue;
        }
        for (int64_t j = 0; j < n; j += BLK) {
            int64_t m = n - j < BLK ? n - j : BLK;
            gather(tx, xr + j * c->xb[3], c->xb[3], m);
            snake_any(c->avx2, to, tx, al, inv, m);
            scatter(or + j * c->ob[3], c->ob[3], to, m);
        }
    }
}

static void cpu_snake(struct arena *a, struct tensor *out, const struct tensor *x,
                      const struct tensor *alpha)
{
    struct snake_ctx c = {.out = out, .x = x, .alpha = alpha, .avx2 = use_avx2()};
    int64_t one[4];
    elem_shape4(x, c.ne, c.xb);
    elem_shape4(out, one, c.ob);
    if (tensor_nelements(x) == 0) return;
    c.chunk = c.ne[3] > CHUNK ? CHUNK : c.ne[3];
    c.nchunk = (c.ne[3] + c.chunk - 1) / c.chunk;
    int64_t units = c.ne[1] * c.ne[2] * c.nchunk;
    /* sinf costs ~10x an add: parallel from fewer elements */
    tp_parallel_for(arena_backend(a)->tp, units, grain_for(c.chunk * 8), snake_units, &c);
}

/* ---- reduce, cumsum ----------------------------------------------------- */

struct row_ctx {
    const struct tensor *out, *x;
    int64_t ne[4], xb[4], ob[4];
    enum redop op;
};

static const char *row_ptr(const struct row_ctx *c, int64_t r, int64_t *obase)
{
    int64_t i2 = r % c->ne[2], i1 = (r / c->ne[2]) % c->ne[1], i0 = r / (c->ne[2] * c->ne[1]);
    *obase = i0 * c->ob[0] + i1 * c->ob[1] + i2 * c->ob[2];
    return (const char *)c->x->data + i0 * c->xb[0] + i1 * c->xb[1] + i2 * c->xb[2];
}

/* Eight float lanes over blocks of 1024, blocks summed in double: as
 * exact as torch's cascade sum at vector speed. */
static double sum_contig(const float *x, int64_t n)
{
    double total = 0;
    for (int64_t j = 0; j < n; j += 1024) {
        int64_t m = n - j < 1024 ? n - j : 1024;
        float acc[8] = {0};
        int64_t i = 0;
        for (; i + 8 <= m; i += 8)
            for (int k = 0; k < 8; k++) acc[k] += x[j + i + k];
        float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for (; i < m; i++) s += x[j + i];
        total += s;
    }
    return total;
}

static void reduce_rows(void *p, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct row_ctx *c = p;
    const int64_t n = c->ne[3], xs = c->xb[3];
    for (int64_t r = r0; r < r1; r++) {
        int64_t ob;
        const char *xr = row_ptr(c, r, &ob);
        float res;
        if (c->op == RED_MAX) {
            float m = -INFINITY;
            bool nan = false;
            for (int64_t i = 0; i < n; i++) {
                float v;
                memcpy(&v, xr + i * xs, 4);
                if (v != v) nan = true;
                m = v > m ? v : m;
            }
            res = nan ? NAN : m;
        } else {
            double s = 0;
            if (xs == 4) {
                s = sum_contig((const float *)xr, n);
            } else {
                for (int64_t i = 0; i < n; i++) {
                    float v;
                    memcpy(&v, xr + i * xs, 4);
                    s += v;
                }
            }
            res = c->op == RED_SUM ? (float)s : (float)(s / (double)n);
        }
        memcpy((char *)c->out->data + ob, &res, 4);
    }
}

static void cpu_reduce(struct arena *a, struct tensor *out, const struct tensor *x, enum redop op)
{
    struct row_ctx c = {.out = out, .x = x, .op = op};
    int64_t one[4];
    elem_shape4(x, c.ne, c.xb);
    elem_shape4(out, one, c.ob);
    int64_t rows = c.ne[0] * c.ne[1] * c.ne[2];
    tp_parallel_for(arena_backend(a)->tp, rows, grain_for(c.ne[3]), reduce_rows, &c);
}

static void cumsum_rows(void *p, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct row_ctx *c = p;
    const int64_t n = c->ne[3], xs = c->xb[3], os = c->ob[3];
    for (int64_t r = r0; r < r1; r++) {
        int64_t ob;
        const char *xr = row_ptr(c, r, &ob);
        char *or = (char *)c->out->data + ob;
        double s = 0;
        for (int64_t i = 0; i < n; i++) {
            float v;
            memcpy(&v, xr + i * xs, 4);
            s += v;
            float o = (float)s;
            memcpy(or + i * os, &o, 4);
        }
    }
}

static void cpu_cumsum(struct arena *a, struct tensor *out, const struct tensor *x)
{
    struct row_ctx c = {.out = out, .x = x};
    int64_t one[4];
    elem_shape4(x, c.ne, c.xb);
    elem_shape4(out, one, c.ob);
    int64_t rows = c.ne[0] * c.ne[1] * c.ne[2];
    tp_parallel_for(arena_backend(a)->tp, rows, grain_for(c.ne[3]), cumsum_rows, &c);
}

/* ---- get_rows ----------------------------------------------------------- */

struct rows_ctx {
    const struct tensor *out, *table, *ids;
    int64_t ine[4], ib[4], ob[4];
    atomic_int nbad;     /* out-of-range ids seen */
    atomic_llong bad_id; /* one of them */
};

static void get_rows_units(void *p, int64_t u0, int64_t u1, int ith)
{
    (void)ith;
    struct rows_ctx *c = p;
    const struct tensor *tb = c->table;
    const int64_t d = tb->ne[1];
    const bool q = dtype_traits(tb->type)->quantized;
    for (int64_t u = u0; u < u1; u++) {
        int64_t b = u / c->ine[3], j = u % c->ine[3];
        int64_t id = elem_load_i(c->ids->type, (const char *)c->ids->data + b * c->ib[2] + j * c->ib[3]);
        float *dst = (float *)((char *)c->out->data + b * c->ob[1] + j * c->ob[2]);
        if (id < 0 || id >= tb->ne[0]) {
            atomic_fetch_add(&c->nbad, 1);
            atomic_store(&c->bad_id, (long long)id);
            for (int64_t i = 0; i < d; i++) dst[i] = 0;
            continue;
        }
        const char *src = (const char *)tb->data + id * tb->nb[0];
        if (q) dequantize_row(tb->type, src, dst, d);
        else convert_run(TYPE_F32, (char *)dst, 4, tb->type, src, tb->nb[1], d);
    }
}

static void cpu_get_rows(struct arena *a, struct tensor *out, const struct tensor *table,
                         const struct tensor *ids)
{
    struct rows_ctx c = {.out = out, .table = table, .ids = ids};
    int64_t one[4];
    elem_shape4(ids, c.ine, c.ib);
    elem_shape4(out, one, c.ob);
    atomic_init(&c.nbad, 0);
    atomic_init(&c.bad_id, 0);
    int64_t units = c.ine[2] * c.ine[3];
    tp_parallel_for(arena_backend(a)->tp, units, grain_for(table->ne[1]), get_rows_units, &c);
    if (atomic_load(&c.nbad))
        arena_fail(a, CBX_ERR_INVALID_ARG, "get_rows: id %lld outside table of %lld rows",
                   (long long)atomic_load(&c.bad_id), (long long)table->ne[0]);
}

void cpu_register_elementwise(struct kernels *k)
{
    k->cpy = cpu_cpy;
    k->fill = cpu_fill;
    k->randn = cpu_randn;
    k->binary = cpu_binary;
    k->unary = cpu_unary;
    k->snake = cpu_snake;
    k->reduce = cpu_reduce;
    k->cumsum = cpu_cumsum;
    k->get_rows = cpu_get_rows;
}
