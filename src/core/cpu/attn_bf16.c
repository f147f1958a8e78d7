/* attn_bf16.c - attention with BF16 products on AMX-BF16 tiles or, without
 * AMX, AVX512-BF16 (bf16_dp_avx512.h) (see attn_bf16.h).
 *
 * For the S3Gen estimator's and encoder's long bidirectional attention
 * (8 heads x 64, T ~ 1000) when the arena's BF16 hint is set. Two passes:
 *  1. pack, one item per (b, kv head, 32 keys): K and V rounded to BF16 in
 *     the AMX B-operand layout (VNNI pairs), keys past Tk zero:
 *     K tile (c, e), 16 keys c*16.. by 32 dims e*32..: row dd (a dim pair)
 *       holds for each key n the pair k[n][e*32 + 2dd], k[n][e*32 + 2dd + 1];
 *     V tile (c, e), 32 keys c*32.. by 16 dims e*16..: row kk (a key pair)
 *       holds for each dim n the pair v[c*32 + 2kk][n], v[c*32 + 2kk + 1][n].
 *     Every tile is 16 rows of 64 bytes, stored contiguously (1 KiB).
 *  2. one item per (b, head, block of QB = 32 query rows), per thread:
 *     Q * scale rounded to BF16 (rows past Tq zero) as A tiles;
 *     S[32, keys] = Q.K^T, 16 keys per step into two C tiles (one per 16
 *     rows), stored to an F32 score block covering every key (without
 *     bias or causal mask, each stored chunk is read back at once, still in
 *     L1, for the row maxima);
 *     softmax per row in F32: bias added, keys a row may not see masked,
 *     max m (unless known), p = exp(s - m) (as 2^x, x = (s - m) * log2 e, a degree-5
 *     polynomial: relative error ~1e-7), l = sum p, p rounded to BF16 into
 *     the row-major P block (the A operand of P.V), zero past the last
 *     visible key up to the 32-key step;
 *     O[32, D] = P.V, two rows x two 16-dim columns of C tiles per pass,
 *     32 keys per step; y = O / l.
 *     Without AMX the two products are bf16dp_8x32 calls over the same
 *     layouts: S 8 rows x 32 keys (all D) at a time, O 8 rows x 32 dims
 *     (all keys); the softmax and the rest as above.
 * The whole score row of a block is kept (no online rescaling), so O stays
 * in tiles until the end: S is 32 x Tk F32 (128 KiB at Tk = 1000) and P
 * half that, in L2 with the packed K and V of the head.
 * Invariants:
 *  1. A query row that sees no key (causal with Tq > Tk, or a bias row of
 *     -inf) has l = 0, a zero P row and a zero output (ops_nn.c, 2).
 *  2. P is zero at every key a row may not see and past Tk, and the packed
 *     K and V are zero past Tk, so padded products add exact zeros.
 *  3. On AMX every pool job loads the tile configuration itself and
 *     releases the tiles before returning (the pool's threads run other
 *     AMX kernels). */
#include "attn_bf16.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../arena.h"
#include "../cpu_features.h"
#include "../threadpool.h"
#include "amx_tilecfg.h"
#include "bf16_dp_avx512.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,amx-tile,amx-bf16")))

enum { QB = 32, MIN_TQ = 16 };

/* all eight tiles 16 rows x 64 bytes (A: 16 x 32 BF16, B: 16 pairs x 16,
 * C: 16 x 16 F32); static, see amx_tilecfg.h */
static const struct amx_tilecfg cfg __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

struct actx {
    const char *q, *k, *v, *bias;
    int64_t qnb[3], knb[3], vnb[3], bnb[4];
    float *out;
    int64_t B, Hq, Hk, Tq, Tk, D, group, nqb;
    int64_t kpad;      /* Tk rounded up to 32 */
    int64_t lds, ldp;  /* row strides of S (floats) and P (BF16) */
    float scale;
    bool causal;
    uint16_t *kp, *vp; /* packed K and V, kpad * D each per (b, kv head) */
    char *scratch;
    size_t per_thread; /* bytes */
    bool amx;          /* tile products, else bf16dp_8x32 */
};

/* 16 floats -> 16 BF16 (round to nearest even) as 16-bit lanes */
TGT static inline __m256i bf16x16(__m512 x)
{
    __m256bh h = _mm512_cvtneps_pbh(x);
    __m256i r;
    memcpy(&r, &h, sizeof r);
    return r;
}

/* pack K and V of one (b, hk, 32-key chunk) */
TGT static void pack_kv(void *c, int64_t it0, int64_t it1, int ith)
{
    (void)ith;
    const struct actx *x = c;
    const int64_t D = x->D, nc = x->kpad / 32, nd = D / 32, nd16 = D / 16;
    for (int64_t it = it0; it < it1; it++) {
        int64_t ch = it % nc, bhk = it / nc, hk = bhk % x->Hk, b = bhk / x->Hk;
        const char *kb = x->k + b * x->knb[0] + hk * x->knb[1];
        const char *vb = x->v + b * x->vnb[0] + hk * x->vnb[1];
        uint16_t *kp = x->kp + bhk * x->kpad * D, *vp = x->vp + bhk * x->kpad * D;
        /* K: rows of 16 keys as BF16 dword pairs, transposed per tile */
        for (int half = 0; half < 2; half++) {
            int64_t c16 = ch * 2 + half;
            uint32_t rows[16][32] __attribute__((aligned(64))); /* [key][dim pair], D <= 64 */
            for (int n = 0; n < 16; n++) {
                int64_t j = c16 * 16 + n;
                if (j < x->Tk) {
                    const float *kr = (const float *)(kb + j * x->knb[2]);
                    for (int64_t d = 0; d < D; d += 32) {
                        __m512i lo = _mm512_cvtepu16_epi32(bf16x16(_mm512_loadu_ps(kr + d)));
                        __m512i hi = _mm512_cvtepu16_epi32(bf16x16(_mm512_loadu_ps(kr + d + 16)));
                        /* dim pairs (d + 2i, d + 2i + 1): even dims low, odd high */
                        const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12,
                                                            10, 8, 6, 4, 2, 0);
                        const __m512i od = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13,
                                                            11, 9, 7, 5, 3, 1);
                        __m512i e = _mm512_permutex2var_epi32(lo, ev, hi);
                        __m512i o = _mm512_permutex2var_epi32(lo, od, hi);
                        _mm512_store_si512(&rows[n][d / 2],
                                           _mm512_or_si512(e, _mm512_slli_epi32(o, 16)));
                    }
                } else {
                    memset(rows[n], 0, sizeof rows[n]);
                }
            }
            for (int64_t e = 0; e < nd; e++) {
                uint32_t *t = (uint32_t *)(kp + (c16 * nd + e) * 512);
                for (int dd = 0; dd < 16; dd++)
                    for (int n = 0; n < 16; n++) t[dd * 16 + n] = rows[n][e * 16 + dd];
            }
        }
        /* V: key pairs interleaved per dim */
        for (int kk = 0; kk < 16; kk++) {
            int64_t j = ch * 32 + 2 * kk;
            const float *v0 = j < x->Tk ? (const float *)(vb + j * x->vnb[2]) : NULL;
            const float *v1 = j + 1 < x->Tk ? (const float *)(vb + (j + 1) * x->vnb[2]) : NULL;
            for (int64_t e = 0; e < nd16; e++) {
                __m512i a = v0 ? _mm512_cvtepu16_epi32(bf16x16(_mm512_loadu_ps(v0 + e * 16)))
                               : _mm512_setzero_si512();
                __m512i bb = v1 ? _mm512_cvtepu16_epi32(bf16x16(_mm512_loadu_ps(v1 + e * 16)))
                                : _mm512_setzero_si512();
                _mm512_store_si512(vp + (ch * nd16 + e) * 512 + kk * 32,
                                   _mm512_or_si512(a, _mm512_slli_epi32(bb, 16)));
            }
        }
    }
}

/* 2^x for x <= 0 (x >= -126 after the clamp): x = n + f, |f| <= 1/2,
 * 2^f by a degree-5 polynomial (relative error 8e-8), times 2^n exactly */
TGT static inline __m512 exp2_16(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-126.0f));
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(1.326697515e-03f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.675464576e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550742646e-02f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402212166e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931469491e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.000000071e+00f));
    return _mm512_scalef_ps(p, n);
}

static inline __mmask16 lanes(int64_t n) /* lanes < n, clamped to 0..16 */
{
    return n <= 0 ? 0 : n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1);
}

/* Softmax numerators of score row s (keys [0, lim) visible; bias row br
 * with byte stride bs, or NULL) into BF16 row pr over [0, kp32); returns
 * l = sum p (0 when no key is visible: pr all zero). mxv: the lanes of the
 * row's maximum when known (no bias, all keys < lim visible), else NULL. */
TGT static float softmax_row(float *s, const char *br, int64_t bs, int64_t lim, int64_t kp32,
                             uint16_t *pr, const __m512 *mxv)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx = mxv ? *mxv : ninf;
    for (int64_t j = 0; !mxv && j < lim; j += 16) {
        __mmask16 km = lanes(lim - j);
        __m512 t = _mm512_maskz_loadu_ps(km, s + j);
        if (br) {
            __m512 bv;
            if (bs == (int64_t)sizeof(float)) {
                bv = _mm512_maskz_loadu_ps(km, br + j * bs);
            } else {
                float tmp[16] = {0};
                for (int i = 0; i < 16; i++)
                    if (km >> i & 1) tmp[i] = *(const float *)(br + (j + i) * bs);
                bv = _mm512_loadu_ps(tmp);
            }
            t = _mm512_add_ps(t, bv);
            _mm512_mask_storeu_ps(s + j, km, t);
        }
        mx = _mm512_max_ps(mx, _mm512_mask_blend_ps(km, ninf, t));
    }
    float m = _mm512_reduce_max_ps(mx);
    if (!(m > -INFINITY)) { /* invariant 1 (also NaN: torch gives NaN there, we give 0) */
        memset(pr, 0, (size_t)kp32 * sizeof *pr);
        return 0;
    }
    const __m512 L = _mm512_set1_ps(1.44269504088896341f), mL = _mm512_set1_ps(m * 1.44269504088896341f);
    __m512 sum = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= lim; j += 32) { /* whole steps: no masks */
        __m512 e0 = exp2_16(_mm512_fmsub_ps(_mm512_loadu_ps(s + j), L, mL));
        __m512 e1 = exp2_16(_mm512_fmsub_ps(_mm512_loadu_ps(s + j + 16), L, mL));
        sum = _mm512_add_ps(sum, _mm512_add_ps(e0, e1));
        __m512bh h = _mm512_cvtne2ps_pbh(e1, e0);
        __m512i hi;
        memcpy(&hi, &h, sizeof hi);
        _mm512_storeu_si512(pr + j, hi);
    }
    for (; j < kp32; j += 32) {
        __mmask16 k0 = lanes(lim - j), k1 = lanes(lim - j - 16);
        __m512 e0 = _mm512_maskz_mov_ps(k0, exp2_16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k0, s + j), L, mL)));
        __m512 e1 = _mm512_maskz_mov_ps(k1, exp2_16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k1, s + j + 16), L, mL)));
        sum = _mm512_add_ps(sum, _mm512_add_ps(e0, e1));
        __m512bh h = _mm512_cvtne2ps_pbh(e1, e0);
        __m512i hi;
        memcpy(&hi, &h, sizeof hi);
        _mm512_storeu_si512(pr + j, hi);
    }
    return _mm512_reduce_add_ps(sum);
}

/* mx[r] = max(mx[r], lanes km of the 16 scores at s + r * lds), r < nr */
TGT static inline void chunk_max(__m512 *mx, const float *s, int64_t lds, __m512 ninf, __mmask16 km,
                                 int nr)
{
    for (int r = 0; r < nr; r++)
        mx[r] = _mm512_max_ps(mx[r], _mm512_mask_blend_ps(km, ninf, _mm512_loadu_ps(s + r * lds)));
}

/* S[32][0, 16 nk16) = Q.K^T on tiles: tmm0..3 Q (rows 0-15 / 16-31 x dims
 * 0-31 / 32-63), tmm4, tmm5 K, tmm6, tmm7 S rows 0-15 / 16-31; with
 * fuse, the row maxima of each chunk of visible keys (< kend) into mx */
TGT static void qk_amx(const uint16_t *Q, const uint16_t *kp, int64_t D, int64_t nk16, float *S,
                       int64_t lds, bool fuse, __m512 *mx, int64_t kend)
{
    const int64_t nd = D / 32;
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    _tile_loadd(0, Q, D * 2);
    _tile_loadd(2, Q + 16 * D, D * 2);
    if (nd == 2) {
        _tile_loadd(1, Q + 32, D * 2);
        _tile_loadd(3, Q + 16 * D + 32, D * 2);
    }
    for (int64_t c16 = 0; c16 < nk16; c16++) {
        const uint16_t *kt = kp + c16 * nd * 512;
        _tile_zero(6);
        _tile_zero(7);
        _tile_loadd(4, kt, 64);
        _tile_dpbf16ps(6, 0, 4);
        _tile_dpbf16ps(7, 2, 4);
        if (nd == 2) {
            _tile_loadd(5, kt + 512, 64);
            _tile_dpbf16ps(6, 1, 5);
            _tile_dpbf16ps(7, 3, 5);
        }
        _tile_stored(6, S + c16 * 16, lds * 4);
        _tile_stored(7, S + 16 * lds + c16 * 16, lds * 4);
        if (fuse) chunk_max(mx, S + c16 * 16, lds, ninf, lanes(kend - c16 * 16), QB);
    }
}

/* qk_amx without AMX, for the first 8 ng rows: 8 rows x 32 keys (K tiles
 * c16, c16 + 1; the second is there, zero past Tk, as nk16 <= kpad / 16
 * rounded up to even) a bf16dp_8x32 call */
TGT static void qk_dp(const uint16_t *Q, const uint16_t *kp, int64_t D, int64_t nk16, float *S,
                      int64_t lds, bool fuse, __m512 *mx, int64_t kend, int ng)
{
    const int64_t nd = D / 32;
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int64_t c16 = 0; c16 < nk16; c16 += 2) {
        for (int g = 0; g < ng; g++)
            bf16dp_8x32(S + 8 * g * lds + c16 * 16, lds, false, Q + 8 * g * D, D, 32, 0, nd, 1,
                        kp + c16 * nd * 512, 512, nd * 512, 2);
        for (int64_t h = c16; fuse && h < c16 + 2 && h < nk16; h++)
            chunk_max(mx, S + h * 16, lds, ninf, lanes(kend - h * 16), 8 * ng);
    }
}

/* O[32][D] = P.V over nk32 32-key steps on tiles: tmm0..3 O (rows 0-15 /
 * 16-31 x dims e*16 / e*16 + 16), tmm4, tmm5 P rows 0-15 / 16-31, tmm6,
 * tmm7 V */
TGT static void pv_amx(const uint16_t *P, int64_t ldp, const uint16_t *vp, int64_t D, int64_t nk32,
                       float *O)
{
    const int64_t nd16 = D / 16;
    for (int64_t e = 0; e < nd16; e += 2) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t c32 = 0; c32 < nk32; c32++) {
            const uint16_t *vt = vp + (c32 * nd16 + e) * 512;
            _tile_loadd(4, P + c32 * 32, ldp * 2);
            _tile_loadd(5, P + 16 * ldp + c32 * 32, ldp * 2);
            _tile_loadd(6, vt, 64);
            _tile_loadd(7, vt + 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, O + e * 16, D * 4);
        _tile_stored(1, O + e * 16 + 16, D * 4);
        _tile_stored(2, O + 16 * D + e * 16, D * 4);
        _tile_stored(3, O + 16 * D + e * 16 + 16, D * 4);
    }
}

/* pv_amx without AMX, for the first 8 ng rows: 8 rows x 32 dims (V tiles
 * e, e + 1) a bf16dp_8x32 call over every key pair */
TGT static void pv_dp(const uint16_t *P, int64_t ldp, const uint16_t *vp, int64_t D, int64_t nk32,
                      float *O, int ng)
{
    const int64_t nd16 = D / 16;
    for (int64_t e = 0; e < nd16; e += 2)
        for (int g = 0; g < ng; g++)
            bf16dp_8x32(O + 8 * g * D + e * 16, D, false, P + 8 * g * ldp, ldp, 32, 0, nk32, 1,
                        vp + e * 512, nd16 * 512, 512, 2);
}

TGT static void attn_blocks(void *c, int64_t it0, int64_t it1, int ith)
{
    const struct actx *x = c;
    const int64_t D = x->D, Tq = x->Tq, Tk = x->Tk, lds = x->lds, ldp = x->ldp;
    char *w = x->scratch + (size_t)ith * x->per_thread;
    uint16_t *Q = (uint16_t *)w;                   /* [QB][D] */
    float *O = (float *)(Q + QB * D);              /* [QB][D] */
    float *S = O + QB * D;                         /* [QB][lds] */
    uint16_t *P = (uint16_t *)(S + QB * lds);      /* [QB][ldp] */
    float l[QB];
    __m512 mx[QB]; /* per row: lane maxima of the scores, when fused (below) */
    /* without bias or causal mask every key < kend is visible to every row:
     * the row maxima are taken from each score chunk right after its store */
    const bool fuse = !x->bias && !x->causal;
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __asm__ volatile("" ::: "memory");
    if (x->amx) _tile_loadconfig(&cfg);
    for (int64_t it = it0; it < it1; it++) {
        int64_t qbi = it % x->nqb, bh = it / x->nqb, h = bh % x->Hq, b = bh / x->Hq;
        int64_t hk = h / x->group, i0 = qbi * QB;
        int nq = (int)(Tq - i0 < QB ? Tq - i0 : QB);
        int64_t shift = Tk - Tq, kend = Tk;
        if (x->causal && shift + i0 + nq < kend) kend = shift + i0 + nq;
        float *y0 = x->out + ((b * x->Hq + h) * Tq + i0) * D;
        if (kend <= 0) { /* no row sees a key */
            memset(y0, 0, (size_t)nq * (size_t)D * sizeof *y0);
            continue;
        }
        const int64_t nk16 = (kend + 15) / 16, kp32 = (kend + 31) & ~(int64_t)31;
        /* Q * scale in BF16, rows past Tq zero */
        const __m512 sc = _mm512_set1_ps(x->scale);
        for (int r = 0; r < QB; r++) {
            uint16_t *qd = Q + r * D;
            if (r >= nq) {
                memset(qd, 0, (size_t)D * sizeof *qd);
                continue;
            }
            const float *qr = (const float *)(x->q + b * x->qnb[0] + h * x->qnb[1] + (i0 + r) * x->qnb[2]);
            for (int64_t d = 0; d < D; d += 16)
                _mm256_storeu_si256((__m256i *)(qd + d), bf16x16(_mm512_mul_ps(_mm512_loadu_ps(qr + d), sc)));
        }
        const uint16_t *kp = x->kp + (b * x->Hk + hk) * x->kpad * D;
        const uint16_t *vp = x->vp + (b * x->Hk + hk) * x->kpad * D;
        const int ng = (nq + 7) / 8; /* 8-row groups without AMX */
        for (int r = 0; r < QB; r++) mx[r] = ninf;
        if (x->amx) qk_amx(Q, kp, D, nk16, S, lds, fuse, mx, kend);
        else qk_dp(Q, kp, D, nk16, S, lds, fuse, mx, kend, ng);
        /* softmax per row; rows past Tq get zero P */
        for (int r = 0; r < QB; r++) {
            if (r >= nq) {
                memset(P + r * ldp, 0, (size_t)kp32 * sizeof *P);
                continue;
            }
            int64_t lim = kend;
            if (x->causal && shift + i0 + r + 1 < lim) lim = shift + i0 + r + 1;
            const char *br = x->bias ? x->bias + b * x->bnb[0] + h * x->bnb[1] + (i0 + r) * x->bnb[2]
                                     : NULL;
            l[r] = softmax_row(S + r * lds, br, x->bnb[3], lim, kp32, P + r * ldp,
                               fuse ? &mx[r] : NULL);
        }
        if (x->amx) pv_amx(P, ldp, vp, D, kp32 / 32, O);
        else pv_dp(P, ldp, vp, D, kp32 / 32, O, ng);
        for (int r = 0; r < nq; r++) {
            float *y = y0 + r * D;
            if (l[r] > 0) {
                __m512 inv = _mm512_set1_ps(1.0f / l[r]);
                for (int64_t d = 0; d < D; d += 16)
                    _mm512_storeu_ps(y + d, _mm512_mul_ps(_mm512_loadu_ps(O + r * D + d), inv));
            } else { /* invariant 1 */
                memset(y, 0, (size_t)D * sizeof *y);
            }
        }
    }
    if (x->amx) _tile_release();
}

static bool usable(struct arena *a, const struct tensor *q, const struct tensor *k,
                   const struct tensor *v)
{
    if (!arena_bf16(a) || !cpu_avx512_bf16_ready()) return false;
    const int64_t D = q->ne[3];
    return k->type == TYPE_F32 && v->type == TYPE_F32 && q->type == TYPE_F32 &&
           (D == 32 || D == 64) && q->ne[2] >= MIN_TQ && k->ne[2] > 0 &&
           q->nb[3] == (int64_t)sizeof(float) && k->nb[3] == (int64_t)sizeof(float) &&
           v->nb[3] == (int64_t)sizeof(float);
}

bool attn_bf16(struct arena *a, struct tensor *out, const struct tensor *q,
              const struct tensor *k, const struct tensor *v, const struct tensor *bias,
              const struct attn_params *p)
{
    if (!usable(a, q, k, v)) return false;
    struct threadpool *tp = arena_backend(a)->tp;
    const int nt = tp ? tp_n_threads(tp) : 1;
    struct actx c = {
        .q = q->data, .k = k->data, .v = v->data, .bias = bias ? bias->data : NULL,
        .out = out->data, .B = q->ne[0], .Hq = q->ne[1], .Hk = k->ne[1], .Tq = q->ne[2],
        .Tk = k->ne[2], .D = q->ne[3], .scale = p->scale, .causal = p->causal, .amx = cpu_amx_bf16_ready(),
    };
    for (int d = 0; d < 3; d++) {
        c.qnb[d] = q->nb[d];
        c.knb[d] = k->nb[d];
        c.vnb[d] = v->nb[d];
    }
    for (int d = 0; bias && d < 4; d++) c.bnb[d] = bias->nb[d];
    c.group = c.Hq / c.Hk;
    c.nqb = (c.Tq + QB - 1) / QB;
    c.kpad = (c.Tk + 31) & ~(int64_t)31;
    /* row strides off multiples of 4 KiB so 16 tile rows do not share L1 sets */
    c.lds = c.kpad + 16;
    c.ldp = c.kpad + 32;
    size_t npk = (size_t)(c.B * c.Hk * c.kpad * c.D);
    c.kp = arena_alloc_host(a, npk * sizeof *c.kp + 64);
    c.vp = arena_alloc_host(a, npk * sizeof *c.vp + 64);
    c.per_thread = ((size_t)QB * (size_t)c.D * (2 + 4) + (size_t)QB * (size_t)c.lds * 4 +
                    (size_t)QB * (size_t)c.ldp * 2 + 63) & ~(size_t)63;
    c.scratch = arena_alloc_host(a, (size_t)nt * c.per_thread + 64);
    if (!c.kp || !c.vp || !c.scratch) return true; /* the failure is in the arena */
    /* 64-byte alignment for the packed tiles and the per-thread blocks */
    c.kp = (uint16_t *)(((uintptr_t)c.kp + 63) & ~(uintptr_t)63);
    c.vp = (uint16_t *)(((uintptr_t)c.vp + 63) & ~(uintptr_t)63);
    c.scratch = (char *)(((uintptr_t)c.scratch + 63) & ~(uintptr_t)63);
    tp_parallel_for(tp, c.B * c.Hk * (c.kpad / 32), 1, pack_kv, &c);
    tp_parallel_for(tp, c.B * c.Hq * c.nqb, 1, attn_blocks, &c);
    return true;
}

#else

bool attn_bf16(struct arena *a, struct tensor *out, const struct tensor *q,
              const struct tensor *k, const struct tensor *v, const struct tensor *bias,
              const struct attn_params *p)
{
    (void)a, (void)out, (void)q, (void)k, (void)v, (void)bias, (void)p;
    return false;
}

#endif
