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
 * transcendental activations use AVX2 vector functions of their own (see
 * "AVX2 activations") or, at the generic level and for softplus/log,
 * libm's float functions: both within a few ulp of the ref backend's
 * double evaluation. cumsum accumulates sequentially in double and stores
 * float32, as torch.cumsum does on CPU (acc_type<float> is double there). */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

#include "../backend.h"
#include "../cpu_features.h"
#include "../elem.h"
#include "../quant.h"
#include "../threadpool.h"

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
__attribute__((target("avx,f16c"))) static void f16_to_f32_f16c(float *dst, const uint16_t *src,
                                                                 int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = fp16_to_f32(src[i]);
}

__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(uint16_t *dst, const float *src,
                                                                 int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = f32_to_fp16(src[i]);
}
#endif

/* The AVX2 level includes f16c (cpu_features.h). */
static bool have_f16c(void)
{
    return HAVE_X86 && cpu_level() >= CPU_AVX2;
}

/* Contiguous float16/bfloat16 <-> float32 runs (u16 pointers may be
 * unaligned views, so element access goes through memcpy). */
static void f16_row_to_f32(float *dst, const char *src, int64_t n)
{
#if HAVE_X86
    if (have_f16c()) {
        f16_to_f32_f16c(dst, (const uint16_t *)src, n);
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
        f32_to_f16_f16c((uint16_t *)dst, src, n);
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
    bool q8z;      /* F32 rows (unit stride) into Q8_0 by q8_0_row_z */
};

#if HAVE_X86
/* quantize_row_q8_0_ref at the AVX-512 level, byte for byte: per block
 * amax = max |x|, d = amax / 127, id = 1 / d (0 when d is 0), d stored by
 * f32_to_fp16, q = roundf(x * id) (the same products; roundf's half away
 * from zero as truncation plus one step away from zero where the dropped
 * part is >= 0.5, exact since |x * id| <= 127). A block holding a NaN or
 * an infinity goes to quantize_row_q8_0_ref itself. */
__attribute__((target("avx512f,avx2,fma"))) static void q8_0_row_z(const float *x, struct block_q8_0 *y, int64_t n)
{
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f), inf = _mm512_set1_ps(INFINITY);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        __m512 v[2] = {_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16)};
        __m512 a0 = _mm512_abs_ps(v[0]), a1 = _mm512_abs_ps(v[1]);
        /* NaN (unordered) or infinite lanes */
        if (_mm512_cmp_ps_mask(a0, inf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(a1, inf, _CMP_NLT_UQ)) {
            quantize_row_q8_0_ref(x, &y[i], QK);
            continue;
        }
        const float d = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1)) / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        const __m512 vid = _mm512_set1_ps(id);
        for (int h = 0; h < 2; h++) {
            __m512 t = _mm512_mul_ps(v[h], vid);
            __m512 r = _mm512_roundscale_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(t, r)), half, _CMP_GE_OQ);
            __m512 step = _mm512_castsi512_ps(
                _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(t), sign), _mm512_castps_si512(one)));
            r = _mm512_mask_add_ps(r, up, r, step);
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * h), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r)));
        }
    }
}
#endif

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
            q8_0_row_z((const float *)xr, (struct block_q8_0 *)or, n);
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

/* ---- AVX2 activations --------------------------------------------------- */

/* Vector exp, expm1, tanh, erf and sin/cos for the activations that
 * dominate the vocoder (Snake's sin), the flow decoder (Mish, GELU, SiLU)
 * and GPT-2's gelu_new (tanh). Cody-Waite range reduction, then Taylor polynomials
 * taken far enough that truncation is below 0.1 ulp on the reduced
 * interval; evaluated with explicit FMA. Measured against double libm in
 * tests/core/test_elementwise.c: within 2-4 ulp. Tails go through the same
 * vector code with masked loads, so an element's value never depends on
 * where it sits in the tensor. */
#if HAVE_X86
#define AVX2_FN __attribute__((target("avx2,fma")))

AVX2_FN static inline __m256 v_set(float f) { return _mm256_set1_ps(f); }

/* 2^k for integer k in [-126, 127] (128 gives inf) */
AVX2_FN static inline __m256 v_pow2i(__m256i k)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

AVX2_FN static inline __m256 v_nan_from(__m256 y, __m256 x)
{
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* exp, erf, GELU, SiLU, sigmoid and Mish at 8 lanes (act_simd.inc) */
#define AF AVX2_FN
#define VF __m256
#define VI __m256i
#define VM __m256
#define A_(name) v_##name
#define VSET v_set
#define VZERO _mm256_setzero_ps()
#define VADD _mm256_add_ps
#define VSUB _mm256_sub_ps
#define VMUL _mm256_mul_ps
#define VDIV _mm256_div_ps
#define VMIN _mm256_min_ps
#define VMAX _mm256_max_ps
#define VFMA _mm256_fmadd_ps
#define VFNMA _mm256_fnmadd_ps
#define VRINT(x) _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VCVT _mm256_cvtps_epi32
#define VISUB _mm256_sub_epi32
#define VISRA1(a) _mm256_srai_epi32(a, 1)
#define VPOW2I v_pow2i
#define VNANFROM v_nan_from
#define VABS(x) _mm256_andnot_ps(v_set(-0.0f), x)
#define VCOPYSIGN(r, x) _mm256_or_ps(r, _mm256_and_ps(x, v_set(-0.0f)))
#define VLT(a, b) _mm256_cmp_ps(a, b, _CMP_LT_OQ)
#define VGT(a, b) _mm256_cmp_ps(a, b, _CMP_GT_OQ)
#define VSEL(m, a, b) _mm256_blendv_ps(a, b, m)
#include "act_simd.inc"
#include "act_simd_undef.inc"

/* e^x - 1 without cancellation near 0; x clamped to [-30, 20] (callers
 * only need that range: the result is -1 below, and tanh saturates). */
AVX2_FN static inline __m256 v_expm1(__m256 x)
{
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, v_set(-30.0f)), v_set(20.0f)), n;
    __m256 r = v_reduce_ln2(xc, &n);
    __m256 p = _mm256_fmadd_ps(_mm256_mul_ps(r, r), v_expm1_tail(r), r); /* e^r - 1 */
    __m256 s = v_pow2i(_mm256_cvtps_epi32(n));
    /* 2^n (p + 1) - 1 = 2^n p + (2^n - 1); exact p when n = 0 */
    __m256 y = _mm256_fmadd_ps(s, p, _mm256_sub_ps(s, v_set(1.0f)));
    return v_nan_from(y, x);
}

/* tanh(|x|) = expm1(2|x|) / (expm1(2|x|) + 2); 1 in float beyond 9.1 */
AVX2_FN static inline __m256 v_tanh(__m256 x)
{
    const __m256 sign = v_set(-0.0f);
    __m256 a = _mm256_min_ps(_mm256_andnot_ps(sign, x), v_set(9.1f));
    __m256 e = v_expm1(_mm256_add_ps(a, a));
    __m256 t = _mm256_div_ps(e, _mm256_add_ps(e, v_set(2.0f)));
    return v_nan_from(_mm256_or_ps(t, _mm256_and_ps(x, sign)), x);
}

/* sin(x) (quadrant offset 0) or cos(x) (offset 1) for |x| <= 8192:
 * k = round(x 2/pi), r = x - k pi/2 in three parts (Cephes' split). */
AVX2_FN static inline __m256 v_sincos(__m256 x, int offset)
{
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, v_set(0.636619772367581343f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, v_set(1.5703125f), x);
    r = _mm256_fnmadd_ps(k, v_set(4.837512969970703125e-4f), r);
    r = _mm256_fnmadd_ps(k, v_set(7.54978995489188216e-8f), r);
    __m256 z = _mm256_mul_ps(r, r);
    __m256 ps = v_set(1.0f / 362880);
    ps = _mm256_fmadd_ps(ps, z, v_set(-1.0f / 5040));
    ps = _mm256_fmadd_ps(ps, z, v_set(1.0f / 120));
    ps = _mm256_fmadd_ps(ps, z, v_set(-1.0f / 6));
    __m256 s = _mm256_fmadd_ps(_mm256_mul_ps(r, z), ps, r);
    __m256 pc = v_set(-1.0f / 3628800);
    pc = _mm256_fmadd_ps(pc, z, v_set(1.0f / 40320));
    pc = _mm256_fmadd_ps(pc, z, v_set(-1.0f / 720));
    pc = _mm256_fmadd_ps(pc, z, v_set(1.0f / 24));
    pc = _mm256_fmadd_ps(pc, z, v_set(-0.5f));
    __m256 c = _mm256_fmadd_ps(pc, z, v_set(1.0f));
    __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(offset));
    __m256 odd = _mm256_castsi256_ps(_mm256_cmpeq_epi32(
        _mm256_and_si256(q, _mm256_set1_epi32(1)), _mm256_set1_epi32(1)));
    __m256 y = _mm256_blendv_ps(s, c, odd);
    __m256 neg = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(q, _mm256_set1_epi32(2)), 30));
    return _mm256_xor_ps(y, neg);
}

AVX2_FN static inline bool v_sincos_ok(__m256 x)
{
    __m256 a = _mm256_andnot_ps(v_set(-0.0f), x);
    /* false for |x| > 8192 and for NaN (both go to libm) */
    return _mm256_movemask_ps(_mm256_cmp_ps(a, v_set(8192.0f), _CMP_LE_OQ)) == 0xff;
}

AVX2_FN static inline __m256i v_tail_mask(int64_t m)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)m), idx);
}

/* the ops with a vector form; the rest stay on libm */
static bool un_has_avx2(enum unop op)
{
    return op != UN_SOFTPLUS && op != UN_LOG;
}

AVX2_FN static inline __m256 un8(enum unop op, __m256 v, __m256 p0, __m256 p1)
{
    const __m256 one = v_set(1.0f), zero = _mm256_setzero_ps();
    switch (op) {
    case UN_GELU: return v_gelu(v);
    case UN_GELU_TANH: {
        /* same float order as the scalar: k * (v + ((kappa v) v) v) */
        __m256 c = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(v_set(0.044715f), v), v), v);
        __m256 in = _mm256_mul_ps(v_set((float)(M_SQRT2 * M_2_SQRTPI * 0.5)), _mm256_add_ps(v, c));
        return _mm256_mul_ps(_mm256_mul_ps(v_set(0.5f), v), _mm256_add_ps(one, v_tanh(in)));
    }
    case UN_SILU: return v_silu(v);
    case UN_SIGMOID: return v_sigmoid(v);
    case UN_MISH: return v_mish(v);
    case UN_ELU:
        /* min(0, v) keeps a NaN v (minps returns its second operand) */
        return _mm256_blendv_ps(_mm256_mul_ps(p0, v_expm1(_mm256_min_ps(zero, v))), v,
                                _mm256_cmp_ps(v, zero, _CMP_GT_OQ));
    case UN_LEAKY_RELU:
        return _mm256_blendv_ps(_mm256_mul_ps(v, p0), v, _mm256_cmp_ps(v, zero, _CMP_GT_OQ));
    case UN_RELU: return _mm256_and_ps(v, _mm256_cmp_ps(v, zero, _CMP_GT_OQ));
    case UN_TANH: return v_tanh(v);
    case UN_EXP: return v_exp(v);
    case UN_ABS: return _mm256_andnot_ps(v_set(-0.0f), v);
    case UN_SQRT: return _mm256_sqrt_ps(v);
    case UN_SQR: return _mm256_mul_ps(v, v);
    case UN_NEG: return _mm256_xor_ps(v, v_set(-0.0f));
    case UN_SCALE: return _mm256_add_ps(_mm256_mul_ps(p0, v), p1); /* no FMA: as scalar */
    case UN_CLAMP: {
        __m256 t = _mm256_blendv_ps(v, p1, _mm256_cmp_ps(v, p1, _CMP_GT_OQ));
        return _mm256_blendv_ps(t, p0, _mm256_cmp_ps(v, p0, _CMP_LT_OQ));
    }
    default: return v; /* UN_SIN / UN_COS handled by the caller */
    }
}

AVX2_FN static void un_vec_avx2(enum unop op, float p0, float p1, float *o, const float *x,
                                int64_t n)
{
    const __m256 vp0 = v_set(p0), vp1 = v_set(p1);
    for (int64_t i = 0; i < n; i += 8) {
        int64_t m = n - i;
        __m256i mask = v_tail_mask(m);
        __m256 v = m >= 8 ? _mm256_loadu_ps(x + i) : _mm256_maskload_ps(x + i, mask);
        __m256 r;
        if (op == UN_SIN || op == UN_COS) {
            if (v_sincos_ok(v)) {
                r = v_sincos(v, op == UN_COS);
            } else {
                float t[8];
                _mm256_storeu_ps(t, v);
                for (int k = 0; k < 8; k++) t[k] = op == UN_COS ? cosf(t[k]) : sinf(t[k]);
                r = _mm256_loadu_ps(t);
            }
        } else {
            r = un8(op, v, vp0, vp1);
        }
        if (m >= 8) _mm256_storeu_ps(o + i, r);
        else _mm256_maskstore_ps(o + i, mask, r);
    }
}

AVX2_FN static void snake_run_avx2(float *o, const float *x, float al, float inv, int64_t n)
{
    const __m256 va = v_set(al), vi = v_set(inv);
    for (int64_t i = 0; i < n; i += 8) {
        int64_t m = n - i;
        __m256i mask = v_tail_mask(m);
        __m256 v = m >= 8 ? _mm256_loadu_ps(x + i) : _mm256_maskload_ps(x + i, mask);
        __m256 ax = _mm256_mul_ps(v, va), s;
        if (v_sincos_ok(ax)) {
            s = v_sincos(ax, 0);
        } else {
            float t[8];
            _mm256_storeu_ps(t, ax);
            for (int k = 0; k < 8; k++) t[k] = sinf(t[k]);
            s = _mm256_loadu_ps(t);
        }
        __m256 r = _mm256_add_ps(v, _mm256_mul_ps(vi, _mm256_mul_ps(s, s)));
        if (m >= 8) _mm256_storeu_ps(o + i, r);
        else _mm256_maskstore_ps(o + i, mask, r);
    }
}
#endif

/* ---- AVX-512 activations ------------------------------------------------ */

/* The flow decoder's GELU (erf), Mish, SiLU and sigmoid on 16 lanes: the
 * same operations in the same order as the AVX2 functions above (IEEE
 * add/mul/div/fma, round-to-nearest conversions), so every lane gives the
 * AVX2 result bit for bit; only the width differs. */
#if HAVE_X86
#define AVX512_FN __attribute__((target("avx512f,avx2,fma")))

AVX512_FN static inline __m512 w_set(float f) { return _mm512_set1_ps(f); }

AVX512_FN static inline __m512 w_pow2i(__m512i k)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k, _mm512_set1_epi32(127)), 23));
}

AVX512_FN static inline __m512 w_nan_from(__m512 y, __m512 x)
{
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

/* exp, erf, GELU, SiLU, sigmoid and Mish at 16 lanes (act_simd.inc) */
#define AF AVX512_FN
#define VF __m512
#define VI __m512i
#define VM __mmask16
#define A_(name) w_##name
#define VSET w_set
#define VZERO _mm512_setzero_ps()
#define VADD _mm512_add_ps
#define VSUB _mm512_sub_ps
#define VMUL _mm512_mul_ps
#define VDIV _mm512_div_ps
#define VMIN _mm512_min_ps
#define VMAX _mm512_max_ps
#define VFMA _mm512_fmadd_ps
#define VFNMA _mm512_fnmadd_ps
#define VRINT(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VCVT _mm512_cvtps_epi32
#define VISUB _mm512_sub_epi32
#define VISRA1(a) _mm512_srai_epi32(a, 1)
#define VPOW2I w_pow2i
#define VNANFROM w_nan_from
#define W_SIGN _mm512_set1_epi32((int)0x80000000u)
#define VABS(x) _mm512_castsi512_ps(_mm512_andnot_si512(W_SIGN, _mm512_castps_si512(x)))
#define VCOPYSIGN(r, x) \
    _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), _mm512_and_si512(_mm512_castps_si512(x), W_SIGN)))
#define VLT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)
#define VGT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)
#define VSEL(m, a, b) _mm512_mask_blend_ps(m, a, b)
#include "act_simd.inc"
#include "act_simd_undef.inc"
#undef W_SIGN

static bool un_has_avx512(enum unop op)
{
    return op == UN_GELU || op == UN_SILU || op == UN_SIGMOID || op == UN_MISH;
}

AVX512_FN static inline __m512 un16(enum unop op, __m512 v)
{
    switch (op) {
    case UN_GELU: return w_gelu(v);
    case UN_SILU: return w_silu(v);
    case UN_SIGMOID: return w_sigmoid(v);
    case UN_MISH: return w_mish(v);
    default: return v; /* not reached: un_has_avx512 */
    }
}

/* one op per loop, so the switch is decided outside the vector loop */
#define UN_LOOP512(OP)                                                                   \
    for (int64_t i = 0; i < n; i += 16) {                                                \
        int64_t m = n - i;                                                               \
        __mmask16 k = m >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << m) - 1);          \
        __m512 r = un16(OP, _mm512_maskz_loadu_ps(k, x + i));                            \
        _mm512_mask_storeu_ps(o + i, k, r);                                              \
    }

AVX512_FN static void un_vec_avx512(enum unop op, float *o, const float *x, int64_t n)
{
    switch (op) {
    case UN_GELU: UN_LOOP512(UN_GELU) break;
    case UN_SILU: UN_LOOP512(UN_SILU) break;
    case UN_SIGMOID: UN_LOOP512(UN_SIGMOID) break;
    case UN_MISH: UN_LOOP512(UN_MISH) break;
    default: break;
    }
}
#undef UN_LOOP512
#endif

static bool use_avx2(void)
{
    return HAVE_X86 && cpu_level() >= CPU_AVX2;
}

struct un_ctx {
    struct iter it;
    enum unop op;
    float p0, p1;
    bool avx2;   /* vector path, picked once per call */
    bool avx512; /* 16-lane path (GELU, SiLU, sigmoid, Mish) */
};

static void un_run(const struct un_ctx *c, float *o, const float *x, int64_t n)
{
#if HAVE_X86
    if (c->avx512) {
        un_vec_avx512(c->op, o, x, n);
        return;
    }
    if (c->avx2) {
        un_vec_avx2(c->op, c->p0, c->p1, o, x, n);
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
            un_run(c, (float *)ptr[0], (const float *)ptr[1], n);
            continue;
        }
        for (int64_t j = 0; j < n; j += BLK) {
            int64_t m = n - j < BLK ? n - j : BLK;
            gather(tx, ptr[1] + j * xs, xs, m);
            un_run(c, to, tx, m);
            scatter(ptr[0] + j * os, os, to, m);
        }
    }
}

static void cpu_unary(struct arena *a, struct tensor *out, const struct tensor *x,
                      enum unop op, float p0, float p1)
{
    struct un_ctx c = {.op = op, .p0 = p0, .p1 = p1};
#if HAVE_X86
    c.avx2 = use_avx2() && un_has_avx2(op);
    c.avx512 = HAVE_X86 && cpu_level() >= CPU_AVX512 && un_has_avx512(op);
#endif
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
    if (avx2) {
        snake_run_avx2(o, x, al, inv, n);
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
    k->binary = cpu_binary;
    k->unary = cpu_unary;
    k->snake = cpu_snake;
    k->reduce = cpu_reduce;
    k->cumsum = cpu_cumsum;
    k->get_rows = cpu_get_rows;
}
