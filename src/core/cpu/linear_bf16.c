/* linear_bf16.c - op_linear with BF16 products (see linear_bf16.h), for
 * the cpu op_linear when the arena asks for BF16 products (S3Gen's
 * estimator linears: M ~ 1000 frames), on AMX-BF16 or, without AMX, on
 * AVX512-BF16 (bf16_dp_avx512.h).
 *
 * y[M, N] = bf16(x) @ bf16(w)^T + b, FP32 sums over the whole K: on AMX
 * one TDPBF16PS chain per 16 x 16 output tile (no per-block epilogue as on
 * the AMX-INT8 quantised GEMM); without AMX the same sums of the same
 * operand layouts by bf16dp_8x32, 8 rows x 32 columns at a time.
 *  1. x (any view) is rounded to BF16 once per call (RNE, vcvtne2ps2bf16)
 *     into xb, Mp rows of Kp (M and K rounded up to 32, zeros past M and
 *     K) Kp + XPAD apart: the A tiles are 16 rows of it, 64 bytes (32 K)
 *     each.
 *  2. The weights are never kept in BF16: the pool splits the output
 *     columns in panels of NP rows of w (and the rows of x in chunks when
 *     there are few panels); a thread dequantises its panel into its own
 *     scratch in the B-tile layout
 *        wp[s][c][p][j][2]   s: K step of 32, c: 16 columns, p: K pair,
 *                            j: column, 2: K = 32 s + 2 p + {0, 1}
 *     (bf16 of the F32 value, of d * q for q4_0 / q8_0: dequantise_row's
 *     value), zeros past N and K, so the tile (s, c) is 1 KiB, 16 rows of
 *     64 bytes; then multiplies every 32-row block of its x rows with it
 *     (the dequantisation is amortised over M / 32 blocks).
 *     Plain rows: 16 rows' 32 values of a K step are rounded to 32 BF16
 *     (16 dwords, pair p) each and the 16 x 16 dwords transposed.
 *     Packed q4_0 / q8_0 (linear_kernels.h): a group is 16 columns and
 *     its dword vectors already hold one dword per row, so the pairs come
 *     out column-interleaved without a transpose.
 *  3. Per 32 rows x 32 columns (AMX): tiles A0, A1 (rows), B0, B1 (columns),
 *     four C accumulators, K in steps of 32, in chunks of KC steps over
 *     the panel's column pairs (the sums parked in a per-thread buffer
 *     between chunks, exactly: FP32 tile stores and loads), so a chunk of
 *     A is reused from L1 (+5-20% at K >= 768, about -5% at K = 256:
 *     CPU time, one thread, q4_0, noisy machine); the C tiles then go to
 *     y through that buffer with the bias added (row and column tails
 *     masked). Row or column blocks of 16 or fewer use 1 x 2 / 2 x 1 /
 *     1 x 1 tiles. Without AMX each K chunk of a 32 x 32 block is four
 *     (two for 16 rows or fewer) bf16dp_8x32 calls, the sums parked in the
 *     same buffer.
 * Error: each product carries both operands' bf16 rounding (<= 2^-9 each,
 * relative); the FP32 sums differ from sgemm's only in order (and between
 * the two engines only in order). See core_linear_bf16.
 * Invariants:
 *  1. On AMX every pool job loads the (static, see amx_tilecfg.h) tile
 *     configuration itself and releases the tiles before returning.
 *  2. Padded rows of x, columns of w and K past the end are exact zeros
 *     in both operands, so padded products add nothing. */
#include "linear_bf16.h"

#include <string.h>

#include "../cpu_features.h"
#include "bf16_dp_avx512.h"
#include "cpu_weight.h"
#include "linear_kernels.h"

/* bench_kernels linear_bf16, q4_0 [1024, 256], 2 threads, against the
 * AMX-INT8 quantised GEMM: 0.5x at 16 rows, 0.8x at 32, 1.0x at 48, 1.05x
 * at 64, 1.2x at 128 (the panel dequantised for few row tiles) */
int linear_bf16_min_rows = 64;
/* bench_kernels linear_bf16, q4_0, 2 threads, AMD EPYC (Zen 4, no AMX):
 * the quantised GEMM's VNNI int8 products ran 500-590 GFLOP/s at the
 * estimator's and T3 prefill's shapes, this GEMM on VDPBF16PS 380-410
 * (0.67-0.79x), so without AMX q4_0 / q8_0 weights are left to it */
bool linear_bf16_quant_dp = false;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "amx_tilecfg.h"
#include "avx512_tr16.h"

#define TGT                                                                                        \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,"   \
                          "amx-bf16")))

enum {
    NP = 64,       /* weight rows (output columns) per panel */
    NCB = NP / 16, /* 16-column blocks per panel */
    MB = 32,       /* x rows per block */
    /* BF16 past kp in each xb row: with K a multiple of 256, rows 2^n
     * bytes apart would fall into a few L1 sets (the 32 rows of a block
     * into 2 sets at K = 1024; no difference measurable on the loaded
     * 2-core test machine either way) */
    XPAD = 32,
    KC = 8,        /* K steps per chunk */
    /* floats per C buffer (32 x 32 of a column pair) and 64 bytes, so the
     * pairs' buffers are not 4 KiB apart (store/load aliasing) */
    CBS = 32 * 32 + 16,
};

/* AMX tiles or VDPBF16PS (cpu_amx_bf16_ready), asked at each call: the
 * level may be lowered or AMX forbidden since */
bool linear_bf16_available(void) { return cpu_avx512_bf16_ready() && cpu_features()->f16c; }

bool linear_bf16_supported(const struct tensor *w)
{
    if (!w || w->ndim != 2 || !linear_bf16_available()) return false;
    const int64_t k = w->ne[1];
    switch (w->type) {
    case TYPE_F32: case TYPE_F16: case TYPE_BF16:
        if (k > 1 && w->nb[1] != (int64_t)dtype_traits(w->type)->size) return false;
        break;
    case TYPE_Q4_0: case TYPE_Q8_0:
        if (k % QK || (!linear_bf16_quant_dp && !cpu_amx_bf16_ready())) return false;
        if (cpu_weight_is(w, CPU_WEIGHT_GEMV16)) return k % 64 == 0 && w->nb[0] == (int64_t)dtype_row_size(w->type, k);
        break;
    default: return false;
    }
    return w->ne[0] <= 1 || w->nb[0] >= (int64_t)dtype_row_size(w->type, k);
}

static int64_t round32(int64_t v) { return (v + 31) & ~(int64_t)31; }
static size_t round64(size_t v) { return (v + 63) & ~(size_t)63; }

/* per thread: the panel, the C buffers of its column pairs */
static size_t thread_bytes(int64_t kp) { return round64((size_t)(NP * kp) * 2) + NCB / 2 * CBS * 4; }

size_t linear_bf16_scratch_bytes(int64_t m, int64_t k, int nt)
{
    int64_t kp = round32(k), mp = round32(m);
    return round64((size_t)(mp * (kp + XPAD)) * 2) + round64((size_t)nt * sizeof(int64_t)) +
           (size_t)nt * thread_bytes(kp);
}

/* tiles 0-3: C (16 x 16 F32), 4-5: A (16 rows x 32 BF16), 6-7: B (16 K
 * pairs x 16 columns); all 16 rows x 64 bytes. Static, see amx_tilecfg.h. */
static const struct amx_tilecfg cfg __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

struct bjob {
    const struct tensor *x;       /* rows: all dims but the last */
    int64_t m, k, n, kp, ks;      /* ks = kp / 32 K steps */
    int64_t ldb;                  /* xb row stride: kp + XPAD */
    const struct tensor *w;
    const char *wd;               /* w->data */
    int64_t ws;                   /* bytes between rows */
    int64_t pk_rows;              /* packed: rows in full groups, else 0 */
    const char *bias;
    int64_t bias_stride;
    float *y;
    const struct linear_epi *epi; /* NULL: none */
    uint16_t *xb;                 /* [mp][ldb], K past kp unused */
    int64_t *last;                /* per thread: panel in its scratch, -1 none */
    char *tmp;                    /* per thread: thread_bytes(kp) */
    size_t tmp_bytes;
    int64_t mch, mblocks_per_ch;  /* items: panel * mch + chunk */
    bool amx;                     /* tile products, else bf16dp_8x32 */
};

/* 32 floats -> 32 BF16 (RNE) in order: dword p = elements 2p, 2p + 1 */
TGT static inline __m512i bf16x32(__m512 lo, __m512 hi)
{
    __m512bh h = _mm512_cvtne2ps_pbh(hi, lo);
    __m512i r;
    memcpy(&r, &h, sizeof r);
    return r;
}

/* 16 floats a (even K) and b (odd K) of 16 columns -> dword j = the
 * pair (bf16 a[j], bf16 b[j]) */
TGT static inline __m512i bf16_pairs(__m512 a, __m512 b)
{
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, bf16x32(a, b));
}

/* ---- x to BF16 ---------------------------------------------------------- */

TGT static void conv_x(void *ctx, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct bjob *j = ctx;
    const struct tensor *x = j->x;
    const int64_t inner = x->nb[x->ndim - 1];
    for (int64_t r = r0; r < r1; r++) {
        uint16_t *o = j->xb + r * j->ldb;
        if (r >= j->m) {
            memset(o, 0, (size_t)j->kp * 2);
            continue;
        }
        const char *p = x->data; /* row r of the leading dims */
        for (int64_t d = x->ndim - 2, i = r; d >= 0; d--) {
            p += (i % x->ne[d]) * x->nb[d];
            i /= x->ne[d];
        }
        for (int64_t c = 0; c < j->kp; c += 32) {
            int64_t left = j->k - c;
            __mmask16 m0 = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
            __mmask16 m1 = left >= 32 ? 0xffff : left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
            const float *s = (const float *)(p + c * inner);
            float t[32];
            if (inner != 4 && j->k > 1) { /* strided elements: gathered here */
                for (int e = 0; e < 32 && e < left; e++) memcpy(t + e, p + (c + e) * inner, 4);
                s = t;
            }
            __m512 lo = _mm512_maskz_loadu_ps(m0, s), hi = _mm512_maskz_loadu_ps(m1, s + 16);
            _mm512_store_si512(o + c, bf16x32(lo, hi));
        }
    }
}

/* ---- weight panel ------------------------------------------------------- */

/* K step s (32 values from 32 s) of one plain weight row -> 32 BF16 */
TGT static inline __m512i row_step(enum dtype t, const char *row, int64_t s, int64_t k)
{
    int64_t c = 32 * s, left = k - c;
    __mmask16 m0 = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
    __mmask16 m1 = left >= 32 ? 0xffff : left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
    __m512 lo, hi;
    switch (t) {
    case TYPE_F32:
        lo = _mm512_maskz_loadu_ps(m0, (const float *)row + c);
        hi = _mm512_maskz_loadu_ps(m1, (const float *)row + c + 16);
        break;
    case TYPE_F16:
        lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, (const uint16_t *)row + c));
        hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, (const uint16_t *)row + c + 16));
        break;
    case TYPE_BF16: { /* already BF16: the 32 values as they are */
        __mmask32 m = (__mmask32)m0 | (__mmask32)m1 << 16;
        return _mm512_maskz_loadu_epi16(m, (const uint16_t *)row + c);
    }
    case TYPE_Q8_0: {
        const struct block_q8_0 *b = (const struct block_q8_0 *)row + s;
        __m512 d = _mm512_set1_ps(_cvtsh_ss(b->d));
        __m128i q0 = _mm_loadu_si128((const __m128i *)b->qs);
        __m128i q1 = _mm_loadu_si128((const __m128i *)b->qs + 1);
        lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), d);
        hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), d);
        break;
    }
    default: { /* TYPE_Q4_0: low nibbles elements 0..15, high 16..31, q - 8 */
        const struct block_q4_0 *b = (const struct block_q4_0 *)row + s;
        __m512 d = _mm512_set1_ps(_cvtsh_ss(b->d));
        __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)b->qs));
        const __m512i f = _mm512_set1_epi32(15), e = _mm512_set1_epi32(8);
        __m512i ql = _mm512_sub_epi32(_mm512_and_si512(q, f), e);
        __m512i qh = _mm512_sub_epi32(_mm512_srli_epi32(q, 4), e);
        lo = _mm512_mul_ps(_mm512_cvtepi32_ps(ql), d);
        hi = _mm512_mul_ps(_mm512_cvtepi32_ps(qh), d);
        break;
    }
    }
    return bf16x32(lo, hi);
}

/* Columns n0..n0+15 (rows of w; those >= n zero) at K step s, plain
 * rows -> the 1 KiB B tile at o. */
TGT static void tile_plain(const struct bjob *j, int64_t n0, int64_t s, uint16_t *o)
{
    __m512i r[16];
    for (int i = 0; i < 16; i++)
        r[i] = n0 + i < j->n ? row_step(j->w->type, j->wd + (n0 + i) * j->ws, s, j->k)
                             : _mm512_setzero_si512();
    avx512_tr16(r);
    for (int p = 0; p < 16; p++) _mm512_store_si512(o + 32 * p, r[p]);
}

/* The packed group of columns n0..n0+15 at K step s (block s) -> the B
 * tile at o. Layout: linear_kernels.h, "packed weights". */
TGT static void tile_packed(const struct bjob *j, int64_t n0, int64_t s, uint16_t *o)
{
    const bool q4 = j->w->type == TYPE_Q4_0;
    const size_t pair = q4 ? LINEAR_PK_PAIR_Q4_0 : LINEAR_PK_PAIR_Q8_0;
    const uint8_t *rec = (const uint8_t *)j->wd + n0 * j->ws + (size_t)(s / 2) * pair;
    const int h = (int)(s % 2);
    __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + 32 * h)));
    const uint8_t *v = rec + 64 + (size_t)(q4 ? 256 : 512) * h;
    if (q4) {
        /* vector t, byte e of row j: low nibble element 4t + e, high 16 + 4t + e */
        const __m512i f = _mm512_set1_epi32(15), e8 = _mm512_set1_epi32(8);
        for (int t = 0; t < 4; t++) {
            __m512i x = _mm512_load_si512(v + 64 * t);
            __m512 lo[4], hi[4];
            for (int e = 0; e < 4; e++) {
                __m512i b = _mm512_srli_epi32(x, 8 * e);
                __m512i ql = _mm512_sub_epi32(_mm512_and_si512(b, f), e8);
                __m512i qh = _mm512_sub_epi32(_mm512_and_si512(_mm512_srli_epi32(b, 4), f), e8);
                lo[e] = _mm512_mul_ps(_mm512_cvtepi32_ps(ql), d);
                hi[e] = _mm512_mul_ps(_mm512_cvtepi32_ps(qh), d);
            }
            _mm512_store_si512(o + 32 * (2 * t), bf16_pairs(lo[0], lo[1]));
            _mm512_store_si512(o + 32 * (2 * t + 1), bf16_pairs(lo[2], lo[3]));
            _mm512_store_si512(o + 32 * (8 + 2 * t), bf16_pairs(hi[0], hi[1]));
            _mm512_store_si512(o + 32 * (8 + 2 * t + 1), bf16_pairs(hi[2], hi[3]));
        }
    } else {
        /* vector t, byte e of row j: element 4t + e as q + 128 */
        const __m512i flip = _mm512_set1_epi32((int)0x80808080u);
        for (int t = 0; t < 8; t++) {
            __m512i x = _mm512_xor_si512(_mm512_load_si512(v + 64 * t), flip);
            __m512 f[4];
            for (int e = 0; e < 4; e++) /* signed byte e: shift it to the top, back arithmetically */
                f[e] = _mm512_mul_ps(
                    _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(x, 24 - 8 * e), 24)), d);
            _mm512_store_si512(o + 32 * (2 * t), bf16_pairs(f[0], f[1]));
            _mm512_store_si512(o + 32 * (2 * t + 1), bf16_pairs(f[2], f[3]));
        }
    }
}

/* Panel p (columns p * NP..) -> wp[s][c] tiles, c < ncb (even) */
TGT static void make_panel(const struct bjob *j, int64_t p, int ncb, uint16_t *wp)
{
    for (int c = 0; c < ncb; c++) {
        int64_t n0 = p * NP + 16 * c;
        bool packed = n0 + 16 <= j->pk_rows;
        for (int64_t s = 0; s < j->ks; s++) {
            uint16_t *o = wp + (s * NCB + c) * 512;
            if (packed) tile_packed(j, n0, s, o);
            else tile_plain(j, n0, s, o);
        }
    }
}

/* ---- tiles -------------------------------------------------------------- */

/* C buffer cb[32][32] (rows r < rows, columns < cols) + bias -> y */
TGT static void store_block(const struct bjob *j, const float *cb, int64_t r0, int rows, int64_t n0,
                            int cols)
{
    __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
    if (j->bias) {
        float bb[32] = {0};
        for (int c = 0; c < cols; c++) memcpy(bb + c, j->bias + (n0 + c) * j->bias_stride, 4);
        b0 = _mm512_loadu_ps(bb);
        b1 = _mm512_loadu_ps(bb + 16);
    }
    __mmask16 m0 = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
    __mmask16 m1 = cols >= 32 ? 0xffff : cols > 16 ? (__mmask16)((1u << (cols - 16)) - 1) : 0;
    for (int r = 0; r < rows; r++) {
        float *y = j->y + (r0 + r) * j->n + n0;
        _mm512_mask_storeu_ps(y, m0, _mm512_add_ps(_mm512_load_ps(cb + 32 * r), b0));
        if (m1) _mm512_mask_storeu_ps(y + 16, m1, _mm512_add_ps(_mm512_load_ps(cb + 32 * r + 16), b1));
        if (j->epi) linear_epi_apply(j->epi, y, r0 + r, j->n, n0, cols);
    }
}

/* rows r0.. (rows <= 32) x panel columns 16 c.. (two 16-column blocks,
 * or one when one1) over all K -> cb[32][32] */
TGT static void block(const struct bjob *j, const uint16_t *wp, int64_t r0, int rows, int c, bool one_col,
                      float *cb, int64_t s0, int64_t ks)
{
    const uint16_t *a = j->xb + r0 * j->ldb;
    const size_t lda = (size_t)j->ldb * 2;
    const uint16_t *b = wp + c * 512;
    const int64_t bstep = NCB * 512;
    if (s0 == 0) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    } else { /* the sums so far, stored by the previous K chunk */
        _tile_loadd(0, cb, 128);
        _tile_loadd(1, cb + 16, 128);
        _tile_loadd(2, cb + 16 * 32, 128);
        _tile_loadd(3, cb + 16 * 32 + 16, 128);
    }
    if (rows > 16 && !one_col) {
        for (int64_t s = s0; s < ks; s++) {
            _tile_loadd(4, a + 32 * s, lda);
            _tile_loadd(6, b + s * bstep, 64);
            _tile_loadd(7, b + s * bstep + 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_loadd(5, a + 16 * j->ldb + 32 * s, lda);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    } else if (rows > 16) {
        for (int64_t s = s0; s < ks; s++) {
            _tile_loadd(4, a + 32 * s, lda);
            _tile_loadd(6, b + s * bstep, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(5, a + 16 * j->ldb + 32 * s, lda);
            _tile_dpbf16ps(2, 5, 6);
        }
    } else if (!one_col) {
        for (int64_t s = s0; s < ks; s++) {
            _tile_loadd(4, a + 32 * s, lda);
            _tile_loadd(6, b + s * bstep, 64);
            _tile_loadd(7, b + s * bstep + 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
        }
    } else {
        for (int64_t s = s0; s < ks; s++) {
            _tile_loadd(4, a + 32 * s, lda);
            _tile_loadd(6, b + s * bstep, 64);
            _tile_dpbf16ps(0, 4, 6);
        }
    }
    _tile_stored(0, cb, 128);
    _tile_stored(1, cb + 16, 128);
    _tile_stored(2, cb + 16 * 32, 128);
    _tile_stored(3, cb + 16 * 32 + 16, 128);
}

/* block without AMX: the same sums into cb, 8 rows at a time (rows of xb
 * past m are zeros up to the 32-row block) */
TGT static void block_dp(const struct bjob *j, const uint16_t *wp, int64_t r0, int rows, int c,
                         bool one_col, float *cb, int64_t s0, int64_t ks)
{
    const int64_t bstep = NCB * 512;
    for (int g = 0; g < rows; g += 8)
        bf16dp_8x32(cb + 32 * g, 32, s0 > 0, j->xb + (r0 + g) * j->ldb + 32 * s0, j->ldb, 32, 0,
                    ks - s0, 1, wp + c * 512 + s0 * bstep, bstep, 512, one_col ? 1 : 2);
}

TGT static void run_items(void *ctx, int64_t i0, int64_t i1, int ith)
{
    const struct bjob *j = ctx;
    char *t = j->tmp + (size_t)ith * j->tmp_bytes;
    uint16_t *wp = (uint16_t *)t;
    float *cb = (float *)(t + round64((size_t)(NP * j->kp) * 2));
    __asm__ volatile("" ::: "memory");
    if (j->amx) _tile_loadconfig(&cfg);
    for (int64_t it = i0; it < i1; it++) {
        int64_t p = it / j->mch, ch = it % j->mch;
        int64_t cols_left = j->n - p * NP;
        int cols = (int)(cols_left < NP ? cols_left : NP);
        int ncb = (cols + 15) / 16;
        if (j->last[ith] != p) {
            make_panel(j, p, ncb + (ncb & 1), wp);
            j->last[ith] = p;
        }
        int64_t m0 = ch * j->mblocks_per_ch * MB, m1 = m0 + j->mblocks_per_ch * MB;
        if (m1 > j->m) m1 = j->m;
        for (int64_t r0 = m0; r0 < m1; r0 += MB) {
            int rows = (int)(m1 - r0 < MB ? m1 - r0 : MB);
            /* K in chunks of KC steps (the chunk of A and of the panel
             * stay in L1 over the column pairs and row blocks), the sums
             * kept in cb between chunks; after the last chunk each pair is
             * stored at once (its AVX-512 stores overlap the next pair's
             * tile products) */
            for (int64_t s0 = 0; s0 < j->ks; s0 += KC) {
                int64_t s1 = s0 + KC < j->ks ? s0 + KC : j->ks;
                for (int c = 0; c < ncb; c += 2) {
                    int bc = cols - 16 * c < 32 ? cols - 16 * c : 32;
                    if (j->amx) block(j, wp, r0, rows, c, bc <= 16, cb + CBS / 2 * c, s0, s1);
                    else block_dp(j, wp, r0, rows, c, bc <= 16, cb + CBS / 2 * c, s0, s1);
                    if (s1 == j->ks) store_block(j, cb + CBS / 2 * c, r0, rows, p * NP + 16 * c, bc);
                }
            }
        }
    }
    if (j->amx) _tile_release();
}

void linear_bf16_gemm(struct threadpool *tp, const struct tensor *x, const struct tensor *w,
                      const char *bias, int64_t bias_stride, float *y, void *scratch,
                      const struct linear_epi *e)
{
    const int nt = tp_n_threads(tp);
    const int64_t n = w->ne[0], k = x->ne[x->ndim - 1], m = tensor_nrows(x), kp = round32(k), mp = round32(m);
    struct bjob j = {
        .x = x, .m = m, .k = k, .n = n, .kp = kp, .ks = kp / 32, .ldb = kp + XPAD, .w = w,
        .wd = w->data, .ws = w->nb[0],
        .pk_rows = cpu_weight_is(w, CPU_WEIGHT_GEMV16) ? n / LINEAR_PK_ROWS * LINEAR_PK_ROWS : 0,
        .bias = bias, .bias_stride = bias_stride, .y = y, .epi = e, .tmp_bytes = thread_bytes(kp),
        .amx = cpu_amx_bf16_ready(),
    };
    char *sp = scratch;
    j.xb = (uint16_t *)sp;
    sp += round64((size_t)(mp * j.ldb) * 2);
    j.last = (int64_t *)sp;
    sp += round64((size_t)nt * sizeof(int64_t));
    j.tmp = sp;
    for (int i = 0; i < nt; i++) j.last[i] = -1;
    /* items: panels, each split into row chunks when there are fewer
     * than 4 panels per thread (each chunk dequantises its panel again) */
    const int64_t np = (n + NP - 1) / NP, mblocks = mp / MB;
    int64_t mch = (4 * nt + np - 1) / np;
    if (mch > mblocks) mch = mblocks;
    if (mch < 1) mch = 1;
    j.mblocks_per_ch = (mblocks + mch - 1) / mch;
    j.mch = (mblocks + j.mblocks_per_ch - 1) / j.mblocks_per_ch;
    tp_parallel_for(tp, mp, 16, conv_x, &j);
    tp_parallel_for(tp, np * j.mch, 1, run_items, &j);
}

#else /* no BF16 kernels on this platform: op_linear never takes the path */

bool linear_bf16_available(void) { return false; }
bool linear_bf16_supported(const struct tensor *w) { (void)w; return false; }
size_t linear_bf16_scratch_bytes(int64_t m, int64_t k, int nt)
{
    (void)m, (void)k, (void)nt;
    return 0;
}
void linear_bf16_gemm(struct threadpool *tp, const struct tensor *x, const struct tensor *w,
                      const char *bias, int64_t bias_stride, float *y, void *scratch,
                      const struct linear_epi *e)
{
    (void)tp, (void)x, (void)w, (void)bias, (void)bias_stride, (void)y, (void)scratch, (void)e;
}

#endif
