/* linear_avx512.c - AVX-512 (F/BW/VL) + VNNI row dot products (see
 * linear_kernels.h).
 *
 * Quantised blocks use vpdpbusd on 256-bit registers: one instruction
 * does the u8 x i8 products and the 4-way i32 sums that take maddubs +
 * madd on AVX2 (signed weights: |w| . sign(x, w), as there). A block is 32
 * quants, so 256 bits is its natural width; two blocks per 512-bit
 * register would need a per-half scale vector that costs what it saves.
 * Float rows (F32/F16/BF16) use 512-bit registers, 64 elements a step. */
#include "linear_x86.h"

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

/* Software prefetch distance in bytes: with two cores the hardware
 * streamers alone leave the kernels waiting on DRAM between bursts. */
#define LIN_PREFETCH 2048

TGT static inline __m256 vdot_ss(__m256i w, __m256i x)
{
    __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w),
                                    _mm256_sign_epi8(x, w));
    return _mm256_cvtepi32_ps(p);
}

TGT static inline __m256 vdot_us(__m256i w, __m256i x)
{
    return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x));
}

#include "linear_qdot.inc"

/* Float rows: 64 elements per step in four 16-lane accumulators, then a
 * masked load for the last partial vector (no scalar tail). */
#define FLOAT_DOT(name, LOAD16, MLOAD16, ESZ)                                   \
    TGT static float name(const void *vw, const void *vx, int64_t n)           \
    {                                                                          \
        const uint8_t *wb = vw;                                                \
        const float *x = vx;                                                   \
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;            \
        int64_t i = 0;                                                         \
        for (; i + 64 <= n; i += 64) {                                         \
            for (int l = 0; l < (ESZ); l++) /* 64 elements = ESZ lines */      \
                _mm_prefetch((const char *)wb + (ESZ) * i + LIN_PREFETCH + 64 * l, _MM_HINT_T0); \
            a0 = _mm512_fmadd_ps(LOAD16(i), _mm512_loadu_ps(x + i), a0);       \
            a1 = _mm512_fmadd_ps(LOAD16(i + 16), _mm512_loadu_ps(x + i + 16), a1); \
            a2 = _mm512_fmadd_ps(LOAD16(i + 32), _mm512_loadu_ps(x + i + 32), a2); \
            a3 = _mm512_fmadd_ps(LOAD16(i + 48), _mm512_loadu_ps(x + i + 48), a3); \
        }                                                                      \
        for (; i + 16 <= n; i += 16)                                           \
            a0 = _mm512_fmadd_ps(LOAD16(i), _mm512_loadu_ps(x + i), a0);       \
        if (i < n) {                                                           \
            __mmask16 m = (__mmask16)((1u << (n - i)) - 1);                    \
            a1 = _mm512_fmadd_ps(MLOAD16(m, i), _mm512_maskz_loadu_ps(m, x + i), a1); \
        }                                                                      \
        return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))); \
    }

#define LOAD_F32(i) _mm512_loadu_ps((const float *)wb + (i))
#define MLOAD_F32(m, i) _mm512_maskz_loadu_ps(m, (const float *)wb + (i))
#define LOAD_F16(i) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wb + 2 * (i))))
#define MLOAD_F16(m, i) _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, wb + 2 * (i)))
#define BF16_WIDEN(v) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16))
#define LOAD_BF16(i) BF16_WIDEN(_mm256_loadu_si256((const __m256i *)(wb + 2 * (i))))
#define MLOAD_BF16(m, i) BF16_WIDEN(_mm256_maskz_loadu_epi16(m, wb + 2 * (i)))

FLOAT_DOT(dot_f32, LOAD_F32, MLOAD_F32, 4)
FLOAT_DOT(dot_f16, LOAD_F16, MLOAD_F16, 2)
FLOAT_DOT(dot_bf16, LOAD_BF16, MLOAD_BF16, 2)

vec_dot_fn linear_dot_avx512(enum dtype t)
{
    LINEAR_DOT_BY_TYPE(t)
}

/* ---- dotx kernels (prepared x, see linear_kernels.h) ------------------ */

/* Eight fp16 scales of consecutive blocks of `bsize` bytes starting at p
 * (the first field of each block) -> 8 floats, via one two-register word
 * permute instead of eight scalar loads. Reads 128 bytes from p. */
TGT static inline __m256 scales8_q4_0(const uint8_t *p)
{
    /* q4_0 blocks are 18 bytes = 9 words: d of block j is word 9 j */
    const __m512i idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0, 0, 0, 0, 0, 63, 54, 45, 36, 27, 18, 9, 0);
    __m512i lo = _mm512_loadu_si512(p), hi = _mm512_loadu_si512(p + 64);
    __m512i d = _mm512_permutex2var_epi16(lo, idx, hi);
    return _mm256_cvtph_ps(_mm512_castsi512_si128(d));
}

/* q8_0 blocks are 34 bytes = 17 words: four scales (words 0, 17, 34, 51)
 * lie in the 128 bytes at p; two such permutes give eight. */
TGT static inline __m256 scales8_q8_0(const uint8_t *p)
{
    const __m512i idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 51, 34, 17, 0);
    __m512i a = _mm512_permutex2var_epi16(_mm512_loadu_si512(p), idx, _mm512_loadu_si512(p + 64));
    __m512i b = _mm512_permutex2var_epi16(_mm512_loadu_si512(p + 136), idx,
                                          _mm512_loadu_si512(p + 200));
    __m128i d = _mm_unpacklo_epi64(_mm512_castsi512_si128(a), _mm512_castsi512_si128(b));
    return _mm256_cvtph_ps(d);
}

/* r[0..3] = the sums of the four accumulators a0..a3 (16 lanes each), by
 * a transposing reduction: 3 adds per pair level instead of four
 * separate horizontal sums. */
TGT static inline __m128 hsum4x16(__m512 a0, __m512 a1, __m512 a2, __m512 a3)
{
    __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
    __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
    /* per 128-bit lane: [a0, a1, a0, a1] and [a2, a3, a2, a3] partials */
    __m512 s = _mm512_add_ps(_mm512_shuffle_ps(s01, s23, 0x44), _mm512_shuffle_ps(s01, s23, 0xee));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* q4_0: two blocks fill a 512-bit register in element order: each block's
 * 16 bytes broadcast to two 128-bit lanes, the upper lane shifted right
 * by 4, masked to nibbles -> [lo_b, hi_b, lo_b+1, hi_b+1]; vpdpbusd takes
 * the unsigned nibbles q = w + 8. */
#define QX_BLOCK struct block_q4_0
#define QX_CONSTS                                                                             \
    const __m512i shift = _mm512_set_epi64(4 * 0x0001000100010001ll, 4 * 0x0001000100010001ll, \
                                           0, 0, 4 * 0x0001000100010001ll,                    \
                                           4 * 0x0001000100010001ll, 0, 0);                   \
    const __m512i m4 = _mm512_set1_epi8(0x0f)
#define QX_PAIR(wb, b)                                                                     \
    _mm512_and_si512(_mm512_srlv_epi16(_mm512_mask_broadcast_i32x4(                        \
                         _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(wb)[b].qs)), \
                         0xff00, _mm_loadu_si128((const __m128i *)(wb)[(b) + 1].qs)),       \
                         shift), m4)
#define QX_SCALES8 scales8_q4_0
#define QX_PREFETCH 3 /* 144 bytes per step */
#define QX_OFFSET 8
#define QX_TAIL dot_q4_0
#define QX_DOTX dotx_q4_0
#define QX_DOTX4 dotx4_q4_0
#include "linear_dotx.inc"

/* q8_0: two blocks per register; the signed weights become unsigned by
 * flipping the top bit (w + 128). */
#define QX_BLOCK struct block_q8_0
#define QX_CONSTS const __m512i flip = _mm512_set1_epi8((char)0x80)
#define QX_PAIR(wb, b)                                                                      \
    _mm512_xor_si512(_mm512_inserti64x4(                                                    \
                         _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(wb)[b].qs)), \
                         _mm256_loadu_si256((const __m256i *)(wb)[(b) + 1].qs), 1), flip)
#define QX_SCALES8 scales8_q8_0
#define QX_PREFETCH 5 /* 272 bytes per step */
#define QX_OFFSET 128
#define QX_TAIL dot_q8_0
#define QX_DOTX dotx_q8_0
#define QX_DOTX4 dotx4_q8_0
#include "linear_dotx.inc"

linear_dotx4_fn linear_dotx4_avx512(enum dtype t)
{
    switch (t) {
    case TYPE_Q4_0: return dotx4_q4_0;
    case TYPE_Q8_0: return dotx4_q8_0;
    default: return NULL;
    }
}

linear_dotx_fn linear_dotx_avx512(enum dtype t)
{
    switch (t) {
    case TYPE_Q4_0: return dotx_q4_0;
    case TYPE_Q8_0: return dotx_q8_0;
    default: return NULL;
    }
}

/* ---- quantised GEMM tiles (see linear_kernels.h) ---------------------- */

/* nw weight rows -> wq[b][j][32] unsigned quants in element order (q4_0:
 * the nibbles 0..15; q8_0: q + 128 by flipping the top bit) and wd[b][j]
 * the fp16 scales as floats. */
TGT static void qg_unpack_q4_0(const void *w, size_t stride, int nw, int64_t nb, int32_t *wq,
                               float *wd)
{
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int j = 0; j < nw; j++) {
        const struct block_q4_0 *r = (const void *)((const char *)w + (size_t)j * stride);
        for (int64_t b = 0; b < nb; b++) {
            __m128i v = _mm_loadu_si128((const __m128i *)r[b].qs);
            int32_t *o = wq + (b * nw + j) * 8;
            _mm_storeu_si128((__m128i *)o, _mm_and_si128(v, m4));
            _mm_storeu_si128((__m128i *)(o + 4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
            wd[b * nw + j] = h2f(r[b].d);
        }
    }
}

TGT static void qg_unpack_q8_0(const void *w, size_t stride, int nw, int64_t nb, int32_t *wq,
                               float *wd)
{
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int j = 0; j < nw; j++) {
        const struct block_q8_0 *r = (const void *)((const char *)w + (size_t)j * stride);
        for (int64_t b = 0; b < nb; b++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)r[b].qs);
            _mm256_storeu_si256((__m256i *)(wq + (b * nw + j) * 8), _mm256_xor_si256(v, flip));
            wd[b * nw + j] = h2f(r[b].d);
        }
    }
}

/* nw weight rows (unpacked) x one packed group of 16 x rows over nb
 * blocks: y[l * ldy + j] = x row l . weight row j + bias[j] for the first
 * `lanes` rows. Per block and weight row: the integer accumulator starts
 * at the x record's -off * sum(q_x), eight vpdpbusd add the u8 weight
 * dwords (broadcast) times the 16 rows' s8 x dwords, so it holds
 * sum((q_w - off) q_x) exactly; then one convert and one fma with
 * d_x * d_w. */
TGT static inline __attribute__((always_inline)) void
qg_tile_body(const int32_t *wq, const float *wd, const int nw, const uint8_t *xp, int64_t nb,
             const float *bias, float *y, int64_t ldy, int lanes)
{
    __m512 acc[LINEAR_QG_MAXW];
    for (int j = 0; j < nw; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *xr = xp + b * LINEAR_QG_REC;
        const int32_t *wb = wq + b * nw * 8;
        __m512i x[8];
        for (int g = 0; g < 8; g++) x[g] = _mm512_loadu_si512(xr + 64 * g);
        __m512 dx = _mm512_loadu_ps((const float *)(xr + 512));
        __m512i c = _mm512_loadu_si512(xr + 576);
        for (int j = 0; j < nw; j++) {
            __m512i s0 = _mm512_dpbusd_epi32(c, _mm512_set1_epi32(wb[8 * j]), x[0]);
            __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi32(wb[8 * j + 1]), x[1]);
            for (int g = 2; g < 8; g += 2) {
                s0 = _mm512_dpbusd_epi32(s0, _mm512_set1_epi32(wb[8 * j + g]), x[g]);
                s1 = _mm512_dpbusd_epi32(s1, _mm512_set1_epi32(wb[8 * j + g + 1]), x[g + 1]);
            }
            __m512 sc = _mm512_mul_ps(dx, _mm512_set1_ps(wd[b * nw + j]));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), sc, acc[j]);
        }
    }
    qg_store(acc, nw, bias, y, ldy, lanes);
}

#define QG_TILE(NW)                                                                          \
    TGT static void qg_tile##NW(const int32_t *wq, const float *wd, const uint8_t *xp,       \
                                int64_t nb, const float *bias, float *y, int64_t ldy,       \
                                int lanes)                                                   \
    {                                                                                        \
        qg_tile_body(wq, wd, NW, xp, nb, bias, y, ldy, lanes);                               \
    }
QG_TILE(1)
QG_TILE(2)
QG_TILE(3)
QG_TILE(4)
QG_TILE(5)
QG_TILE(6)
QG_TILE(7)
QG_TILE(8)
#undef QG_TILE

static void qg_tile(const int32_t *wq, const float *wd, int nw, const uint8_t *xp, int64_t nb,
                    const float *bias, float *y, int64_t ldy, int lanes)
{
    static void (*const tiles[LINEAR_QG_MAXW + 1])(const int32_t *, const float *, const uint8_t *,
                                                   int64_t, const float *, float *, int64_t,
                                                   int) = {
        NULL, qg_tile1, qg_tile2, qg_tile3, qg_tile4, qg_tile5, qg_tile6, qg_tile7, qg_tile8};
    tiles[nw](wq, wd, xp, nb, bias, y, ldy, lanes);
}

/* roundf (halves away from zero) of 16 floats, as int32: truncate, then
 * step away from zero where the dropped fraction is >= 0.5 (v - trunc(v)
 * is exact). */
TGT static inline __m512i round_away(__m512 v)
{
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f),
                                      _CMP_GE_OQ);
    __m512 step = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(_mm512_set1_ps(1.0f)),
                                                      _mm512_and_si512(_mm512_castps_si512(v), sign)));
    return _mm512_cvttps_epi32(_mm512_mask_add_ps(t, up, t, step));
}

/* [reduce(v[0]), ..., reduce(v[15])] by a transposing tree: 15 ops OP and
 * 30 shuffles for 16 vectors instead of 16 separate reductions. OP must
 * be associative and commutative (max, integer add): exact. */
#define TREE16(OP, v, out)                                                                  \
    do {                                                                                    \
        __m512 t_[8], u_[4], w_[2];                                                         \
        for (int i_ = 0; i_ < 8; i_++) /* rows 2i, 2i+1 interleaved */                      \
            t_[i_] = OP(_mm512_unpacklo_ps(v[2 * i_], v[2 * i_ + 1]),                      \
                        _mm512_unpackhi_ps(v[2 * i_], v[2 * i_ + 1]));                     \
        for (int i_ = 0; i_ < 4; i_++) /* per 128-bit lane: rows 4i..4i+3 */                \
            u_[i_] = OP(_mm512_shuffle_ps(t_[2 * i_], t_[2 * i_ + 1], 0x44),               \
                        _mm512_shuffle_ps(t_[2 * i_], t_[2 * i_ + 1], 0xee));              \
        for (int i_ = 0; i_ < 2; i_++) /* lanes 0,1: rows 8i..8i+3; 2,3: 8i+4.. */          \
            w_[i_] = OP(_mm512_shuffle_f32x4(u_[2 * i_], u_[2 * i_ + 1], 0x44),            \
                        _mm512_shuffle_f32x4(u_[2 * i_], u_[2 * i_ + 1], 0xee));           \
        out = OP(_mm512_shuffle_f32x4(w_[0], w_[1], 0x88),                                 \
                 _mm512_shuffle_f32x4(w_[0], w_[1], 0xdd));                                \
    } while (0)

TGT static inline __m512 max_ps(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
TGT static inline __m512 add_epi32_ps(__m512 a, __m512 b)
{
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}

/* Rows rows[0..lanes-1] (nb blocks of contiguous floats each) quantised
 * to Q8_0 with quantize_row_q8_0_ref's arithmetic (d = amax / 127 stored
 * as fp16, q = roundf(x * (1 / d))), written as the group records of
 * linear_kernels.h; lanes..15 are zero rows. The 16 rows' amax, d, 1/d
 * and sum(q) are computed as vectors (one lane per row). */
TGT static void qg_pack_q8(const float *const *rows, int lanes, int64_t nb, int off, uint8_t *dst)
{
    int32_t tq[LINEAR_QG_LANES * 8] __attribute__((aligned(64))); /* [lane][32 bytes] */
    float idv[LINEAR_QG_LANES] __attribute__((aligned(64)));
    /* transpose indices (see the end of the loop): position g * 4 + ll of
     * the first stage takes dword g of lane ll (ll < 2: first source at
     * 8 ll + g; else second at 16 + 8 (ll - 2) + g); position gg * 8 + l8
     * of the second takes [g = gg][lane l8] of the first stage's pair */
    int32_t i1[16], i2[16];
    for (int p = 0; p < 16; p++) {
        int g = p / 4, ll = p % 4, gg = p / 8, l8 = p % 8;
        i1[p] = ll < 2 ? 8 * ll + g : 16 + 8 * (ll - 2) + g;
        i2[p] = l8 < 4 ? gg * 4 + l8 : 16 + gg * 4 + (l8 - 4);
    }
    const __m512i ix1 = _mm512_loadu_si512(i1), ix2 = _mm512_loadu_si512(i2);
    const __m512i four = _mm512_set1_epi32(4), eight = _mm512_set1_epi32(8);
    memset(tq, 0, sizeof tq);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *rec = dst + b * LINEAR_QG_REC;
        __m512 v[LINEAR_QG_LANES];
        for (int l = 0; l < LINEAR_QG_LANES; l++) {
            if (l < lanes) {
                const float *x = rows[l] + b * QK;
                v[l] = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x)),
                                     _mm512_abs_ps(_mm512_loadu_ps(x + 16)));
            } else {
                v[l] = _mm512_setzero_ps();
            }
        }
        __m512 amax;
        TREE16(max_ps, v, amax);
        __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
        __mmask16 nz = _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_OQ);
        _mm512_store_ps(idv, _mm512_maskz_div_ps(nz, _mm512_set1_ps(1.0f), d));
        _mm512_storeu_ps((float *)(rec + 512),
                         _mm512_cvtph_ps(_mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
        for (int l = 0; l < lanes; l++) {
            const float *x = rows[l] + b * QK;
            __m512 vid = _mm512_set1_ps(idv[l]);
            __m512i q0 = round_away(_mm512_mul_ps(_mm512_loadu_ps(x), vid));
            __m512i q1 = round_away(_mm512_mul_ps(_mm512_loadu_ps(x + 16), vid));
            v[l] = _mm512_castsi512_ps(_mm512_add_epi32(q0, q1));
            _mm_store_si128((__m128i *)(tq + 8 * l), _mm512_cvtsepi32_epi8(q0));
            _mm_store_si128((__m128i *)(tq + 8 * l + 4), _mm512_cvtsepi32_epi8(q1));
        }
        for (int l = lanes; l < LINEAR_QG_LANES; l++) v[l] = _mm512_setzero_ps();
        __m512 sums;
        TREE16(add_epi32_ps, v, sums);
        _mm512_storeu_si512(rec + 576, _mm512_mullo_epi32(_mm512_castps_si512(sums),
                                                          _mm512_set1_epi32(-off)));
        /* transpose: dword g of lane l -> rec + 64 g + 4 l */
        __m512i r[8], pl[4], ph[4];
        for (int i = 0; i < 8; i++) r[i] = _mm512_load_si512(tq + 16 * i); /* lanes 2i, 2i+1 */
        for (int j = 0; j < 4; j++) { /* lanes 4j..4j+3: [g][4 lanes], g 0..3 and 4..7 */
            pl[j] = _mm512_permutex2var_epi32(r[2 * j], ix1, r[2 * j + 1]);
            ph[j] = _mm512_permutex2var_epi32(r[2 * j], _mm512_add_epi32(ix1, four), r[2 * j + 1]);
        }
        for (int h = 0; h < 2; h++) {
            const __m512i *pp = h ? ph : pl;
            /* [g: lanes 0..7] for g = 2q, 2q + 1 (q = 0, 1), then lanes 8..15 */
            __m512i q0a = _mm512_permutex2var_epi32(pp[0], ix2, pp[1]);
            __m512i q0b = _mm512_permutex2var_epi32(pp[0], _mm512_add_epi32(ix2, eight), pp[1]);
            __m512i q1a = _mm512_permutex2var_epi32(pp[2], ix2, pp[3]);
            __m512i q1b = _mm512_permutex2var_epi32(pp[2], _mm512_add_epi32(ix2, eight), pp[3]);
            uint8_t *o = rec + 64 * 4 * h;
            _mm512_storeu_si512(o, _mm512_shuffle_i32x4(q0a, q1a, 0x44));
            _mm512_storeu_si512(o + 64, _mm512_shuffle_i32x4(q0a, q1a, 0xee));
            _mm512_storeu_si512(o + 128, _mm512_shuffle_i32x4(q0b, q1b, 0x44));
            _mm512_storeu_si512(o + 192, _mm512_shuffle_i32x4(q0b, q1b, 0xee));
        }
    }
}
#undef TREE16

bool linear_qgemm_avx512(enum dtype t, struct linear_qgemm *g)
{
    switch (t) {
    case TYPE_Q4_0: g->off = 8; g->unpack = qg_unpack_q4_0; break;
    case TYPE_Q8_0: g->off = 128; g->unpack = qg_unpack_q8_0; break;
    default: return false;
    }
    g->tile = qg_tile;
    g->pack = qg_pack_q8;
    g->maxw = LINEAR_QG_MAXW;
    g->thread_begin = g->thread_end = NULL;
    return true;
}

/* ---- packed weights: 16 rows interleaved (see linear_kernels.h) -------
 * One group of 16 weight rows against one prepared x: per block, the
 * integer sums of all 16 rows come from eight vpdpbusd (each: one 64-byte
 * vector of the 16 rows' dwords t times x dword t broadcast), so the
 * loads are aligned and contiguous and the scales of the 16 rows are one
 * vector (d_w d_x per row, vectorised; the offset correction off d_w d_x
 * sum(q_x) likewise). Same per-block integers as the dotx kernels, so
 * results differ from them only in float summation order. */

#define PK_PREFETCH 3072 /* bytes ahead (bench: 2048..8192 alike, 512 worse) */

/* the group kernel of both types (q4: two nibbles a byte, offset 8; else
 * one signed byte, offset 128) for R activation rows x[0..R-1] sharing
 * each weight load and nibble split; out[r * 16 + i]. A row's float
 * operations are the same, in the same order, whatever R: each row's
 * result is bit for bit what it is alone (arena_set_row_exact). */
TGT static inline __attribute__((always_inline)) void gemv16(const uint8_t *pw, const struct linear_xq *x,
                                                               int64_t nb, float *out, const bool q4, const int R)
{
    const size_t pair = q4 ? LINEAR_PK_PAIR_Q4_0 : LINEAR_PK_PAIR_Q8_0, half = q4 ? 256 : 512;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512 acc0[4], acc1[4], corr[4];
    for (int r = 0; r < R; r++) acc0[r] = acc1[r] = corr[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2, pw += pair) {
        for (size_t l = 0; l < pair / 64; l++) _mm_prefetch((const char *)pw + PK_PREFETCH + 64 * l, _MM_HINT_T0);
        __m512i sc = _mm512_load_si512(pw);
        __m512 d[2] = {_mm512_cvtph_ps(_mm512_castsi512_si256(sc)),
                       _mm512_cvtph_ps(_mm512_extracti64x4_epi64(sc, 1))};
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = pw + 64 + half * h;
            __m512i lo[4], hi[4]; /* q4: low nibbles elements 4t.., high 16 + 4t.. */
            for (int t = 0; t < 4; t++) {
                if (q4) {
                    const __m512i v = _mm512_load_si512(q + 64 * t);
                    lo[t] = _mm512_and_si512(v, m4);
                    hi[t] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                } else {
                    lo[t] = _mm512_load_si512(q + 64 * t);
                    hi[t] = _mm512_load_si512(q + 256 + 64 * t);
                }
            }
            for (int r = 0; r < R; r++) {
                const int32_t *xb = (const int32_t *)x[r].qs + 8 * (b + h);
                __m512i s0 = _mm512_setzero_si512(), s1 = s0;
                for (int t = 0; t < 4; t++) {
                    s0 = _mm512_dpbusd_epi32(s0, lo[t], _mm512_set1_epi32(xb[t]));
                    s1 = _mm512_dpbusd_epi32(s1, hi[t], _mm512_set1_epi32(xb[4 + t]));
                }
                __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
                __m512 s = _mm512_mul_ps(d[h], _mm512_set1_ps(x[r].d[b + h]));
                if (h) acc1[r] = _mm512_fmadd_ps(f, s, acc1[r]);
                else acc0[r] = _mm512_fmadd_ps(f, s, acc0[r]);
                corr[r] = _mm512_fmadd_ps(d[h], _mm512_set1_ps(x[r].ds[b + h]), corr[r]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        _mm512_storeu_ps(out + 16 * r, _mm512_fnmadd_ps(corr[r], _mm512_set1_ps(q4 ? 8.0f : 128.0f),
                                                        _mm512_add_ps(acc0[r], acc1[r])));
}

/* up to four rows a pass: 4, then 2 or 1 for what is left */
#define GEMV16_TYPE(name, q4)                                                              \
    TGT static void name(const uint8_t *pw, const struct linear_xq *x, int rows, int64_t nb, float *out) \
    {                                                                                      \
        for (; rows >= 4; rows -= 4, x += 4, out += 64) gemv16(pw, x, nb, out, q4, 4);     \
        if (rows >= 2) {                                                                   \
            gemv16(pw, x, nb, out, q4, 2);                                                 \
            rows -= 2, x += 2, out += 32;                                                  \
        }                                                                                  \
        if (rows) gemv16(pw, x, nb, out, q4, 1);                                           \
    }
GEMV16_TYPE(gemv16_q4_0, true)
GEMV16_TYPE(gemv16_q8_0, false)
#undef GEMV16_TYPE

linear_gemv16_fn linear_gemv16_avx512(enum dtype t)
{
    switch (t) {
    case TYPE_Q4_0: return gemv16_q4_0;
    case TYPE_Q8_0: return gemv16_q8_0;
    default: return NULL;
    }
}

/* Packed group -> the quantised GEMM's unpacked tile (qg_unpack_*'s
 * output) for nw rows from row r0 of the group. */
TGT static void pk_unpack_q4_0(const uint8_t *pw, int r0, int nw, int64_t nb, int32_t *wq, float *wd)
{
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pr = pw + (b / 2) * LINEAR_PK_PAIR_Q4_0;
        const uint16_t *sc = (const uint16_t *)pr + 16 * (b % 2);
        const int32_t *q = (const int32_t *)(pr + 64 + 256 * (b % 2));
        for (int j = 0; j < nw; j++) {
            int r = r0 + j;
            __m128i v = _mm_set_epi32(q[48 + r], q[32 + r], q[16 + r], q[r]);
            int32_t *o = wq + (b * nw + j) * 8;
            _mm_storeu_si128((__m128i *)o, _mm_and_si128(v, m4));
            _mm_storeu_si128((__m128i *)(o + 4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
            wd[b * nw + j] = h2f(sc[r]);
        }
    }
}

TGT static void pk_unpack_q8_0(const uint8_t *pw, int r0, int nw, int64_t nb, int32_t *wq, float *wd)
{
    const __m256i idx = _mm256_set_epi32(112, 96, 80, 64, 48, 32, 16, 0);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pr = pw + (b / 2) * LINEAR_PK_PAIR_Q8_0;
        const uint16_t *sc = (const uint16_t *)pr + 16 * (b % 2);
        const int32_t *q = (const int32_t *)(pr + 64 + 512 * (b % 2));
        for (int j = 0; j < nw; j++) {
            int r = r0 + j;
            __m256i v = _mm256_i32gather_epi32((const int *)(q + r), idx, 4);
            _mm256_storeu_si256((__m256i *)(wq + (b * nw + j) * 8), v);
            wd[b * nw + j] = h2f(sc[r]);
        }
    }
}

linear_pk_unpack_fn linear_pk_unpack_avx512(enum dtype t)
{
    switch (t) {
    case TYPE_Q4_0: return pk_unpack_q4_0;
    case TYPE_Q8_0: return pk_unpack_q8_0;
    default: return NULL;
    }
}

/* 16 rows (src, rs bytes apart, 15 rs < 2^31) of nb blocks -> one packed
 * group at dst: per block, dword gathers across the 16 rows (the scales
 * as the low halves of dwords at each block's start). */
TGT static void pk_pack(enum dtype t, const char *src, size_t rs, int64_t nb, uint8_t *dst)
{
    const __m512i r16 = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i rows = _mm512_mullo_epi32(r16, _mm512_set1_epi32((int)rs));
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const bool q4 = t == TYPE_Q4_0;
    const size_t bs = q4 ? sizeof(struct block_q4_0) : sizeof(struct block_q8_0);
    const int nv = q4 ? 4 : 8;
    for (int64_t b = 0; b < nb; b += 2) {
        for (int h = 0; h < 2; h++) {
            const char *blk = src + (size_t)(b + h) * bs;
            __m512i d = _mm512_i32gather_epi32(rows, blk, 1);
            _mm256_store_si256((__m256i *)(dst + 32 * h), _mm512_cvtepi32_epi16(d));
            uint8_t *q = dst + 64 + (size_t)(64 * nv * h);
            for (int v = 0; v < nv; v++) {
                __m512i g = _mm512_i32gather_epi32(rows, blk + 2 + 4 * v, 1);
                _mm512_store_si512(q + 64 * v, q4 ? g : _mm512_xor_si512(g, flip));
            }
        }
        dst += q4 ? LINEAR_PK_PAIR_Q4_0 : LINEAR_PK_PAIR_Q8_0;
    }
}

void linear_pk_pack_avx512(enum dtype t, const void *src, size_t rs, int64_t nb, uint8_t *dst)
{
    pk_pack(t, src, rs, nb, dst);
}
