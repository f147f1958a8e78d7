/* nn.c - cpu kernels of the nn group: norms, softmax, fused attention,
 * rotary embedding (semantics in ops.h and ops_nn.c).
 *
 * Rows are spread over the backend's thread pool; the inner loops are
 * "primitives" (struct prims) with a portable version and an AVX2+FMA
 * version, picked per call from cpu_level() (so tests can force the
 * portable path with cpu_set_level). At the AVX-512 level attention has its
 * own drivers (attn_rows_z for decode-like calls, attn_tiles_z with
 * register-tiled products; see "AVX-512 attention" below).
 * Strided rows are first gathered into the contiguous output row and the
 * primitive then works in place there.
 *
 * Attention (portable and AVX2) is flash-style: for a block of up to QB
 * query rows of one head, keys are visited in blocks of KB; scores of one
 * block are kept in a per-thread [QB, KB] tile, the running max m, normaliser l and output
 * accumulator O[QB, D] are rescaled as each block arrives (online softmax),
 * so no [Tq, Tk] matrix exists. Work items are (batch, head, query block).
 * Invariants:
 *  1. A row whose running max is still -inf has l = 0 and O = 0; its score
 *     row is zeroed before the P.V product so it contributes nothing.
 *  2. Per-thread scratch is indexed by the pool's thread index; kernels are
 *     not run from inside another pool job (ops are called by model code on
 *     the arena's single thread). */
#include <math.h>
#include <string.h>

#include "../backend.h"
#include "../cpu_features.h"
#include "../quant.h"
#include "../threadpool.h"
#include "attn_amx.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define NN_X86 1
#endif

/* ---- primitives --------------------------------------------------------- */

struct prims {
    float (*sum)(const float *x, int64_t n);
    float (*sumsq_dev)(const float *x, int64_t n, float mean); /* sum (x-mean)^2 */
    /* y = (x - mean) * rstd [* g] [+ b]; g, b may be NULL; y may be x */
    void (*norm)(float *y, const float *x, int64_t n, float mean, float rstd,
                 const float *g, const float *b);
    void (*affine)(float *y, const float *x, int64_t n, float mul, float add);
    /* y = x * s; returns max(y); *nan set when some y is NaN */
    float (*scale_max)(float *y, const float *x, int64_t n, float s, int *nan);
    float (*max)(const float *x, int64_t n);
    float (*exp_sum)(float *y, int64_t n, float m); /* y = exp(y - m), sum */
    void (*scal)(float *y, int64_t n, float s);
    /* S[r*lds + j] = scale * dot(q[r], k_j), k_j = k0 + j*ks bytes */
    void (*qk)(const float *const *q, int nq, const char *k0, int64_t ks, int nk,
               int64_t D, float scale, float *S, int lds);
    /* O[r*ldo + d] += sum_j P[r*ldp + j] * v_j[d] */
    void (*pv)(float *O, int64_t ldo, const float *P, int ldp, int nq, const char *v0,
               int64_t vs, int nk, int64_t D);
};

static float g_sum(const float *x, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    return s;
}
static float g_sumsq_dev(const float *x, int64_t n, float mean)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += (x[i] - mean) * (x[i] - mean);
    return s;
}
static void g_norm(float *y, const float *x, int64_t n, float mean, float rstd,
                   const float *g, const float *b)
{
    for (int64_t i = 0; i < n; i++) {
        float v = (x[i] - mean) * rstd;
        if (g) v *= g[i];
        if (b) v += b[i];
        y[i] = v;
    }
}
static void g_affine(float *y, const float *x, int64_t n, float mul, float add)
{
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * mul + add;
}
static float g_scale_max(float *y, const float *x, int64_t n, float s, int *nan)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        y[i] = x[i] * s;
        if (isnan(y[i])) *nan = 1;
        if (y[i] > m) m = y[i];
    }
    return m;
}
static float g_max(const float *x, int64_t n)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}
static float g_exp_sum(float *y, int64_t n, float m)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) {
        y[i] = expf(y[i] - m);
        s += y[i];
    }
    return s;
}
static void g_scal(float *y, int64_t n, float s)
{
    for (int64_t i = 0; i < n; i++) y[i] *= s;
}
static void g_qk(const float *const *q, int nq, const char *k0, int64_t ks, int nk,
                 int64_t D, float scale, float *S, int lds)
{
    for (int r = 0; r < nq; r++)
        for (int j = 0; j < nk; j++) {
            const float *kj = (const float *)(k0 + j * ks);
            float s = 0;
            for (int64_t d = 0; d < D; d++) s += q[r][d] * kj[d];
            S[r * lds + j] = s * scale;
        }
}
static void g_pv(float *O, int64_t ldo, const float *P, int ldp, int nq, const char *v0,
                 int64_t vs, int nk, int64_t D)
{
    for (int r = 0; r < nq; r++)
        for (int j = 0; j < nk; j++) {
            float p = P[r * ldp + j];
            if (p == 0) continue;
            const float *vj = (const float *)(v0 + j * vs);
            for (int64_t d = 0; d < D; d++) O[r * ldo + d] += p * vj[d];
        }
}

static const struct prims prims_generic = {
    g_sum, g_sumsq_dev, g_norm, g_affine, g_scale_max, g_max, g_exp_sum, g_scal, g_qk, g_pv,
};

#ifdef NN_X86
#define AVX2 __attribute__((target("avx2,fma")))

AVX2 static inline float hsum8(__m256 v)
{
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}
AVX2 static inline float hmax8(__m256 v)
{
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}
/* [sum a, sum b, sum c, sum d] */
AVX2 static inline __m128 hsum8x4(__m256 a, __m256 b, __m256 c, __m256 d)
{
    __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}
/* lanes < n (n in 0..8) set */
AVX2 static inline __m256i tail_mask(int64_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* exp(x): x = n ln2 + r, |r| <= ln2/2, exp(r) by its degree-7 Taylor
 * polynomial (truncation < 1e-8 relative), 2^n built in the exponent
 * field. Inputs below -87.33 (where exp leaves the normal range), -inf
 * included, give 0; inputs are clamped at 88 above. */
AVX2 static inline __m256 exp8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.33f), hi = _mm256_set1_ps(88.0f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* ln2 split in two so n*ln2_hi is exact */
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    e = _mm256_slli_epi32(e, 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

AVX2 static float a_sum(const float *x, int64_t n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_loadu_ps(x + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_loadu_ps(x + i + 24));
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
    if (i < n) s1 = _mm256_add_ps(s1, _mm256_maskload_ps(x + i, tail_mask(n - i)));
    return hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}
AVX2 static float a_sumsq_dev(const float *x, int64_t n, float mean)
{
    __m256 mu = _mm256_set1_ps(mean), s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), mu);
        __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), mu);
        __m256 d2 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 16), mu);
        __m256 d3 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 24), mu);
        s0 = _mm256_fmadd_ps(d0, d0, s0);
        s1 = _mm256_fmadd_ps(d1, d1, s1);
        s2 = _mm256_fmadd_ps(d2, d2, s2);
        s3 = _mm256_fmadd_ps(d3, d3, s3);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), mu);
        s0 = _mm256_fmadd_ps(d, d, s0);
    }
    if (i < n) {
        __m256i m = tail_mask(n - i);
        __m256 d = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), mu),
                                 _mm256_castsi256_ps(m));
        s1 = _mm256_fmadd_ps(d, d, s1);
    }
    return hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}
AVX2 static void a_norm(float *y, const float *x, int64_t n, float mean, float rstd,
                        const float *g, const float *b)
{
    __m256 mu = _mm256_set1_ps(mean), rs = _mm256_set1_ps(rstd);
    int64_t i = 0;
    for (; i < n; i += 8) {
        __m256i m = tail_mask(n - i < 8 ? n - i : 8);
        __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), mu), rs);
        if (g) v = _mm256_mul_ps(v, _mm256_maskload_ps(g + i, m));
        if (b) v = _mm256_add_ps(v, _mm256_maskload_ps(b + i, m));
        _mm256_maskstore_ps(y + i, m, v);
    }
}
AVX2 static void a_affine(float *y, const float *x, int64_t n, float mul, float add)
{
    __m256 ml = _mm256_set1_ps(mul), ad = _mm256_set1_ps(add);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), ml), ad));
    for (; i < n; i++) y[i] = x[i] * mul + add;
}
AVX2 static float a_scale_max(float *y, const float *x, int64_t n, float s, int *nan)
{
    __m256 sc = _mm256_set1_ps(s), mx = _mm256_set1_ps(-INFINITY), bad = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), sc);
        _mm256_storeu_ps(y + i, v);
        mx = _mm256_max_ps(mx, v);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    float m = hmax8(mx);
    for (; i < n; i++) {
        y[i] = x[i] * s;
        if (isnan(y[i])) *nan = 1;
        if (y[i] > m) m = y[i];
    }
    if (_mm256_movemask_ps(bad)) *nan = 1;
    return m;
}
AVX2 static float a_max(const float *x, int64_t n)
{
    __m256 mx = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(x + i));
    float m = hmax8(mx);
    for (; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}
AVX2 static float a_exp_sum(float *y, int64_t n, float m)
{
    __m256 mm = _mm256_set1_ps(m), s = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(y + i), mm));
        _mm256_storeu_ps(y + i, e);
        s = _mm256_add_ps(s, e);
    }
    if (i < n) {
        __m256i k = tail_mask(n - i);
        __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(y + i, k), mm)),
                                 _mm256_castsi256_ps(k));
        _mm256_maskstore_ps(y + i, k, e);
        s = _mm256_add_ps(s, e);
    }
    return hsum8(s);
}
AVX2 static void a_scal(float *y, int64_t n, float s)
{
    __m256 sc = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), sc));
    for (; i < n; i++) y[i] *= s;
}

#define KROW(j) ((const float *)(k0 + (j) * ks))

/* Dot products of one or two query rows with four keys: the k loads are
 * shared by both rows; the D % 8 tail is one masked step (zeros add 0). */
AVX2 static void a_qk(const float *const *q, int nq, const char *k0, int64_t ks, int nk,
                      int64_t D, float scale, float *S, int lds)
{
    const int64_t D8 = D & ~(int64_t)7;
    const __m256i tm = tail_mask(D - D8);
    const __m128 sc4 = _mm_set1_ps(scale);
    int r = 0;
    for (; r + 2 <= nq; r += 2) {
        const float *q0 = q[r], *q1 = q[r + 1];
        float *s0 = S + r * lds, *s1 = s0 + lds;
        int j = 0;
        for (; j + 4 <= nk; j += 4) {
            const float *ka = KROW(j), *kb = KROW(j + 1), *kc = KROW(j + 2), *kd = KROW(j + 3);
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            for (int64_t d = 0; d <= D8; d += 8) {
                __m256 x0, x1, va, vb, vc, vd;
                if (d < D8) {
                    x0 = _mm256_loadu_ps(q0 + d); x1 = _mm256_loadu_ps(q1 + d);
                    va = _mm256_loadu_ps(ka + d); vb = _mm256_loadu_ps(kb + d);
                    vc = _mm256_loadu_ps(kc + d); vd = _mm256_loadu_ps(kd + d);
                } else {
                    if (d == D) break;
                    x0 = _mm256_maskload_ps(q0 + d, tm); x1 = _mm256_maskload_ps(q1 + d, tm);
                    va = _mm256_maskload_ps(ka + d, tm); vb = _mm256_maskload_ps(kb + d, tm);
                    vc = _mm256_maskload_ps(kc + d, tm); vd = _mm256_maskload_ps(kd + d, tm);
                }
                a0 = _mm256_fmadd_ps(x0, va, a0); a1 = _mm256_fmadd_ps(x0, vb, a1);
                a2 = _mm256_fmadd_ps(x0, vc, a2); a3 = _mm256_fmadd_ps(x0, vd, a3);
                b0 = _mm256_fmadd_ps(x1, va, b0); b1 = _mm256_fmadd_ps(x1, vb, b1);
                b2 = _mm256_fmadd_ps(x1, vc, b2); b3 = _mm256_fmadd_ps(x1, vd, b3);
            }
            _mm_storeu_ps(s0 + j, _mm_mul_ps(hsum8x4(a0, a1, a2, a3), sc4));
            _mm_storeu_ps(s1 + j, _mm_mul_ps(hsum8x4(b0, b1, b2, b3), sc4));
        }
        for (; j < nk; j++) {
            const float *kj = (const float *)(k0 + j * ks);
            __m256 a0 = _mm256_setzero_ps(), b0 = a0;
            int64_t d = 0;
            for (; d < D8; d += 8) {
                __m256 kv = _mm256_loadu_ps(kj + d);
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), kv, a0);
                b0 = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + d), kv, b0);
            }
            if (d < D) {
                __m256 kv = _mm256_maskload_ps(kj + d, tm);
                a0 = _mm256_fmadd_ps(_mm256_maskload_ps(q0 + d, tm), kv, a0);
                b0 = _mm256_fmadd_ps(_mm256_maskload_ps(q1 + d, tm), kv, b0);
            }
            s0[j] = hsum8(a0) * scale;
            s1[j] = hsum8(b0) * scale;
        }
    }
    if (r < nq) {
        const float *q0 = q[r];
        float *s0 = S + r * lds;
        int j = 0;
        for (; j + 4 <= nk; j += 4) {
            const float *ka = KROW(j), *kb = KROW(j + 1), *kc = KROW(j + 2), *kd = KROW(j + 3);
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            int64_t d = 0;
            for (; d < D8; d += 8) {
                __m256 x0 = _mm256_loadu_ps(q0 + d);
                a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(ka + d), a0);
                a1 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(kb + d), a1);
                a2 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(kc + d), a2);
                a3 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(kd + d), a3);
            }
            if (d < D) {
                __m256 x0 = _mm256_maskload_ps(q0 + d, tm);
                a0 = _mm256_fmadd_ps(x0, _mm256_maskload_ps(ka + d, tm), a0);
                a1 = _mm256_fmadd_ps(x0, _mm256_maskload_ps(kb + d, tm), a1);
                a2 = _mm256_fmadd_ps(x0, _mm256_maskload_ps(kc + d, tm), a2);
                a3 = _mm256_fmadd_ps(x0, _mm256_maskload_ps(kd + d, tm), a3);
            }
            _mm_storeu_ps(s0 + j, _mm_mul_ps(hsum8x4(a0, a1, a2, a3), sc4));
        }
        for (; j < nk; j++) {
            const float *kj = (const float *)(k0 + j * ks);
            __m256 a0 = _mm256_setzero_ps();
            int64_t d = 0;
            for (; d < D8; d += 8)
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), _mm256_loadu_ps(kj + d), a0);
            if (d < D)
                a0 = _mm256_fmadd_ps(_mm256_maskload_ps(q0 + d, tm),
                                     _mm256_maskload_ps(kj + d, tm), a0);
            s0[j] = hsum8(a0) * scale;
        }
    }
}

/* O rows += P rows @ V: two rows share each v load; 32 output columns
 * (four registers per row) stay in registers across the key loop. */
AVX2 static void a_pv(float *O, int64_t ldo, const float *P, int ldp, int nq, const char *v0,
                      int64_t vs, int nk, int64_t D)
{
    int r = 0;
    for (; r + 2 <= nq; r += 2) {
        float *o0 = O + r * ldo, *o1 = o0 + ldo;
        const float *p0 = P + r * ldp, *p1 = p0 + ldp;
        int64_t d = 0;
        for (; d + 32 <= D; d += 32) {
            __m256 a0 = _mm256_loadu_ps(o0 + d), a1 = _mm256_loadu_ps(o0 + d + 8);
            __m256 a2 = _mm256_loadu_ps(o0 + d + 16), a3 = _mm256_loadu_ps(o0 + d + 24);
            __m256 b0 = _mm256_loadu_ps(o1 + d), b1 = _mm256_loadu_ps(o1 + d + 8);
            __m256 b2 = _mm256_loadu_ps(o1 + d + 16), b3 = _mm256_loadu_ps(o1 + d + 24);
            for (int j = 0; j < nk; j++) {
                const float *vj = (const float *)(v0 + j * vs) + d;
                __m256 x0 = _mm256_broadcast_ss(p0 + j), x1 = _mm256_broadcast_ss(p1 + j);
                __m256 w0 = _mm256_loadu_ps(vj), w1 = _mm256_loadu_ps(vj + 8);
                __m256 w2 = _mm256_loadu_ps(vj + 16), w3 = _mm256_loadu_ps(vj + 24);
                a0 = _mm256_fmadd_ps(x0, w0, a0); a1 = _mm256_fmadd_ps(x0, w1, a1);
                a2 = _mm256_fmadd_ps(x0, w2, a2); a3 = _mm256_fmadd_ps(x0, w3, a3);
                b0 = _mm256_fmadd_ps(x1, w0, b0); b1 = _mm256_fmadd_ps(x1, w1, b1);
                b2 = _mm256_fmadd_ps(x1, w2, b2); b3 = _mm256_fmadd_ps(x1, w3, b3);
            }
            _mm256_storeu_ps(o0 + d, a0); _mm256_storeu_ps(o0 + d + 8, a1);
            _mm256_storeu_ps(o0 + d + 16, a2); _mm256_storeu_ps(o0 + d + 24, a3);
            _mm256_storeu_ps(o1 + d, b0); _mm256_storeu_ps(o1 + d + 8, b1);
            _mm256_storeu_ps(o1 + d + 16, b2); _mm256_storeu_ps(o1 + d + 24, b3);
        }
        for (; d < D; d += 8) {
            __m256i m = tail_mask(D - d < 8 ? D - d : 8);
            __m256 a0 = _mm256_maskload_ps(o0 + d, m), b0 = _mm256_maskload_ps(o1 + d, m);
            for (int j = 0; j < nk; j++) {
                __m256 w = _mm256_maskload_ps((const float *)(v0 + j * vs) + d, m);
                a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + j), w, a0);
                b0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p1 + j), w, b0);
            }
            _mm256_maskstore_ps(o0 + d, m, a0);
            _mm256_maskstore_ps(o1 + d, m, b0);
        }
    }
    if (r < nq) {
        float *o0 = O + r * ldo;
        const float *p0 = P + r * ldp;
        int64_t d = 0;
        for (; d + 32 <= D; d += 32) {
            __m256 a0 = _mm256_loadu_ps(o0 + d), a1 = _mm256_loadu_ps(o0 + d + 8);
            __m256 a2 = _mm256_loadu_ps(o0 + d + 16), a3 = _mm256_loadu_ps(o0 + d + 24);
            for (int j = 0; j < nk; j++) {
                const float *vj = (const float *)(v0 + j * vs) + d;
                __m256 x0 = _mm256_broadcast_ss(p0 + j);
                a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(vj), a0);
                a1 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(vj + 8), a1);
                a2 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(vj + 16), a2);
                a3 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(vj + 24), a3);
            }
            _mm256_storeu_ps(o0 + d, a0); _mm256_storeu_ps(o0 + d + 8, a1);
            _mm256_storeu_ps(o0 + d + 16, a2); _mm256_storeu_ps(o0 + d + 24, a3);
        }
        for (; d < D; d += 8) {
            __m256i m = tail_mask(D - d < 8 ? D - d : 8);
            __m256 a0 = _mm256_maskload_ps(o0 + d, m);
            for (int j = 0; j < nk; j++)
                a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + j),
                                     _mm256_maskload_ps((const float *)(v0 + j * vs) + d, m), a0);
            _mm256_maskstore_ps(o0 + d, m, a0);
        }
    }
}

static const struct prims prims_avx2 = {
    a_sum, a_sumsq_dev, a_norm, a_affine, a_scale_max, a_max, a_exp_sum, a_scal, a_qk, a_pv,
};

/* AVX-512 attention (16 lanes, mask registers for the tails) has its own
 * drivers below (attn_rows_z, attn_tiles_z); the row primitives stay AVX2
 * (they are memory-bound). */
#define AVX512 __attribute__((target("avx512f,avx2,fma")))

/* exp as exp8, with 2^n applied by scalef (p * 2^n, exact) */
AVX512 static inline __m512 exp16(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.33f), hi = _mm512_set1_ps(88.0f);
    __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps((__mmask16)~under, _mm512_scalef_ps(p, n));
}
AVX512 static inline __mmask16 mask16(int64_t n) /* lanes < n, n in 0..16 */
{
    return (__mmask16)((1u << n) - 1);
}

#endif

/* The primitives of the SIMD level in use now (cpu_features.h). */
static const struct prims *prims_now(void)
{
#ifdef NN_X86
    enum cpu_level l = cpu_level();
    if (l >= CPU_AVX2) return &prims_avx2;
#endif
    return &prims_generic;
}

/* ---- helpers ------------------------------------------------------------ */

static struct threadpool *pool(struct arena *a) { return arena_backend(a)->tp; }
static int n_threads(struct arena *a) { return tp_n_threads(pool(a)); }

/* Byte offset of row r (all dims but the innermost, row-major) of t. */
static int64_t row_off(const struct tensor *t, int64_t r)
{
    int64_t off = 0;
    for (int d = t->ndim - 2; d >= 0; d--) {
        off += (r % t->ne[d]) * t->nb[d];
        r /= t->ne[d];
    }
    return off;
}

/* Row r of x as contiguous floats: in place when its innermost stride is
 * 4 bytes, else gathered into y (the output row). */
static const float *src_row(const struct tensor *x, int64_t r, float *y)
{
    const char *p = (const char *)x->data + row_off(x, r);
    int64_t n = x->ne[x->ndim - 1], s = x->nb[x->ndim - 1];
    if (s == (int64_t)sizeof(float)) return (const float *)p;
    for (int64_t i = 0; i < n; i++) y[i] = *(const float *)(p + i * s);
    return y;
}

/* A per-channel parameter as contiguous F32 (converted into arena scratch
 * unless it already is); NULL stays NULL. */
static const float *param_f32(struct arena *a, const struct tensor *v)
{
    if (!v) return NULL;
    if (v->type == TYPE_F32 && v->nb[0] == (int64_t)sizeof(float)) return v->data;
    float *f = arena_alloc_host(a, (size_t)v->ne[0] * sizeof *f + 1);
    if (!f) return NULL;
    for (int64_t i = 0; i < v->ne[0]; i++) {
        const char *p = (const char *)v->data + i * v->nb[0];
        switch (v->type) {
        case TYPE_F16: f[i] = fp16_to_f32(*(const uint16_t *)p); break;
        case TYPE_BF16: f[i] = bf16_to_f32(*(const uint16_t *)p); break;
        default: f[i] = *(const float *)p; break;
        }
    }
    return f;
}

/* rows per chunk so that a chunk holds about 16K elements */
static int64_t row_grain(int64_t n) { return n >= 16384 ? 1 : 16384 / (n > 0 ? n : 1); }

/* ---- norms, affine, softmax ---------------------------------------------- */

struct rows_ctx {
    const struct prims *P;
    const struct tensor *x;
    struct tensor *out;
    const float *g, *b;
    float eps, scale;
    int dim, n_groups;
};

/* y = LayerNorm(x) of one row of n (g, b may be NULL) */
static void layer_norm_row(const struct prims *P, float *y, const float *x, int64_t n, float eps,
                           const float *g, const float *b)
{
    float mean = P->sum(x, n) / (float)n;
    float var = P->sumsq_dev(x, n, mean) / (float)n;
    P->norm(y, x, n, mean, 1.0f / sqrtf(var + eps), g, b);
}

static void layer_norm_rows(void *c, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct rows_ctx *k = c;
    int64_t n = k->x->ne[k->x->ndim - 1];
    for (int64_t r = r0; r < r1; r++) {
        float *y = (float *)k->out->data + r * n;
        layer_norm_row(k->P, y, src_row(k->x, r, y), n, k->eps, k->g, k->b);
    }
}

static void cpu_layer_norm(struct arena *a, struct tensor *out, const struct tensor *x,
                           const struct tensor *g, const struct tensor *b, float eps)
{
    struct rows_ctx c = {.P = prims_now(), .x = x, .out = out, .g = param_f32(a, g),
                         .b = param_f32(a, b), .eps = eps};
    if (arena_status(a) != CBX_OK) return;
    tp_parallel_for(pool(a), tensor_nrows(x), row_grain(x->ne[x->ndim - 1]), layer_norm_rows, &c);
}

/* op_add_layer_norm: per row, s = x + r (float adds, as op_add) written
 * to sum, then layer_norm_rows' arithmetic on s while it is in cache. */
struct add_ln_ctx {
    const struct prims *P;
    const struct tensor *x, *r;
    struct tensor *sum, *out;
    const float *g, *b;
    float eps;
};

static void add_layer_norm_rows(void *c, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct add_ln_ctx *k = c;
    int64_t n = k->x->ne[k->x->ndim - 1];
    for (int64_t r = r0; r < r1; r++) {
        float *s = (float *)k->sum->data + r * n, *y = (float *)k->out->data + r * n;
        const float *x = src_row(k->x, r, s);
        const float *q = src_row(k->r, r, y);
        for (int64_t i = 0; i < n; i++) s[i] = x[i] + q[i];
        layer_norm_row(k->P, y, s, n, k->eps, k->g, k->b);
    }
}

static void cpu_add_layer_norm(struct arena *a, struct tensor *sum, struct tensor *out,
                               const struct tensor *x, const struct tensor *r,
                               const struct tensor *g, const struct tensor *b, float eps)
{
    struct add_ln_ctx c = {.P = prims_now(), .x = x, .r = r, .sum = sum, .out = out,
                           .g = param_f32(a, g), .b = param_f32(a, b), .eps = eps};
    if (arena_status(a) != CBX_OK) return;
    tp_parallel_for(pool(a), tensor_nrows(x), row_grain(x->ne[x->ndim - 1]), add_layer_norm_rows, &c);
}

/* HF LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then weight * that. */
static void rms_norm_rows(void *c, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct rows_ctx *k = c;
    const struct prims *P = k->P;
    int64_t n = k->x->ne[k->x->ndim - 1];
    for (int64_t r = r0; r < r1; r++) {
        float *y = (float *)k->out->data + r * n;
        const float *x = src_row(k->x, r, y);
        float var = P->sumsq_dev(x, n, 0.0f) / (float)n;
        P->norm(y, x, n, 0.0f, 1.0f / sqrtf(var + k->eps), k->g, NULL);
    }
}

static void cpu_rms_norm(struct arena *a, struct tensor *out, const struct tensor *x,
                         const struct tensor *g, float eps)
{
    struct rows_ctx c = {.P = prims_now(), .x = x, .out = out, .g = param_f32(a, g), .eps = eps};
    if (arena_status(a) != CBX_OK) return;
    tp_parallel_for(pool(a), tensor_nrows(x), row_grain(x->ne[x->ndim - 1]), rms_norm_rows, &c);
}

/* One (batch, group) per index; x viewed as rows of T (one per channel). */
static void group_norm_items(void *c, int64_t i0, int64_t i1, int ith)
{
    (void)ith;
    const struct rows_ctx *k = c;
    const struct prims *P = k->P;
    int64_t C = k->x->ne[k->x->ndim - 2], T = k->x->ne[k->x->ndim - 1];
    int64_t cg = C / k->n_groups;
    for (int64_t it = i0; it < i1; it++) {
        int64_t r0 = it * cg; /* first row (= b*C + channel) of the group */
        double sum = 0, ss = 0;
        for (int64_t c2 = 0; c2 < cg; c2++) {
            float *y = (float *)k->out->data + (r0 + c2) * T;
            sum += P->sum(src_row(k->x, r0 + c2, y), T);
        }
        float mean = (float)(sum / (double)(cg * T));
        for (int64_t c2 = 0; c2 < cg; c2++) {
            float *y = (float *)k->out->data + (r0 + c2) * T;
            ss += P->sumsq_dev(src_row(k->x, r0 + c2, y), T, mean);
        }
        float rstd = 1.0f / sqrtf((float)(ss / (double)(cg * T)) + k->eps);
        for (int64_t c2 = 0; c2 < cg; c2++) {
            int64_t ch = (r0 + c2) % C;
            float *y = (float *)k->out->data + (r0 + c2) * T;
            float mul = rstd * (k->g ? k->g[ch] : 1.0f);
            float add = (k->b ? k->b[ch] : 0.0f) - mean * mul;
            P->affine(y, src_row(k->x, r0 + c2, y), T, mul, add);
        }
    }
}

static void cpu_group_norm(struct arena *a, struct tensor *out, const struct tensor *x,
                           int n_groups, const struct tensor *g, const struct tensor *b,
                           float eps)
{
    struct rows_ctx c = {.P = prims_now(), .x = x, .out = out, .g = param_f32(a, g),
                         .b = param_f32(a, b), .eps = eps, .n_groups = n_groups};
    if (arena_status(a) != CBX_OK) return;
    int64_t items = tensor_nrows(x) / x->ne[x->ndim - 2] * n_groups;
    tp_parallel_for(pool(a), items, 1, group_norm_items, &c);
}

static void channel_affine_rows(void *c, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct rows_ctx *k = c;
    const struct prims *P = k->P;
    const struct tensor *x = k->x;
    int last = x->ndim - 1;
    int64_t n = x->ne[last];
    for (int64_t r = r0; r < r1; r++) {
        float *y = (float *)k->out->data + r * n;
        const float *xr = src_row(x, r, y);
        if (k->dim == last) {
            for (int64_t i = 0; i < n; i++) y[i] = xr[i] * k->g[i] + k->b[i];
        } else {
            int64_t ch = r;
            for (int d = last - 1; d > k->dim; d--) ch /= x->ne[d];
            ch %= x->ne[k->dim];
            P->affine(y, xr, n, k->g[ch], k->b[ch]);
        }
    }
}

static void cpu_channel_affine(struct arena *a, struct tensor *out, const struct tensor *x,
                               int dim, const struct tensor *scale,
                               const struct tensor *shift)
{
    struct rows_ctx c = {.P = prims_now(), .x = x, .out = out, .g = param_f32(a, scale),
                         .b = param_f32(a, shift), .dim = dim};
    if (arena_status(a) != CBX_OK) return;
    tp_parallel_for(pool(a), tensor_nrows(x), row_grain(x->ne[x->ndim - 1]),
                    channel_affine_rows, &c);
}

static void softmax_rows(void *c, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct rows_ctx *k = c;
    const struct prims *P = k->P;
    int64_t n = k->x->ne[k->x->ndim - 1];
    for (int64_t r = r0; r < r1; r++) {
        float *y = (float *)k->out->data + r * n;
        int nan = 0;
        float m = P->scale_max(y, src_row(k->x, r, y), n, k->scale, &nan);
        if (nan || !isfinite(m)) { /* torch gives NaN (ops_nn.c, convention 2) */
            for (int64_t i = 0; i < n; i++) y[i] = NAN;
            continue;
        }
        P->scal(y, n, 1.0f / P->exp_sum(y, n, m));
    }
}

static void cpu_softmax(struct arena *a, struct tensor *out, const struct tensor *x, float scale)
{
    struct rows_ctx c = {.P = prims_now(), .x = x, .out = out, .scale = scale};
    tp_parallel_for(pool(a), tensor_nrows(x), row_grain(x->ne[x->ndim - 1]), softmax_rows, &c);
}

/* ---- attention ------------------------------------------------------------ */

enum { QB_MAX = 32, KB = 64 };

struct attn_ctx {
    const struct prims *P;
    const struct tensor *q, *k, *v, *bias;
    struct tensor *out;
    const struct attn_params *p;
    int64_t B, Hq, Tq, Tk, D, group, qb, nqb;
    float *scratch;
    int64_t per_thread; /* floats of scratch per thread */
    float *kt;          /* AVX-512 tiles: K packed transposed (attn_pack_kt) */
    int64_t nkb;        /* blocks of ZKB keys per kv head */
    bool kv16;          /* AVX-512 drivers: k and v are F16 (an F16 KV cache) */
    bool kvq8;          /* AVX-512 rows driver: k and v are Q8_0 (a Q8_0 KV cache) */
};

static void attn_items(void *c, int64_t it0, int64_t it1, int ith)
{
    const struct attn_ctx *x = c;
    const struct prims *P = x->P;
    const struct tensor *q = x->q, *k = x->k, *v = x->v, *bias = x->bias;
    const int64_t D = x->D, Tq = x->Tq, Tk = x->Tk;
    float *S = x->scratch + ith * x->per_thread; /* [QB_MAX, KB] */
    float *O = S + QB_MAX * KB;                  /* [QB_MAX, D] */
    float m[QB_MAX], l[QB_MAX];
    const float *qr[QB_MAX];
    for (int64_t it = it0; it < it1; it++) {
        int64_t qbi = it % x->nqb, bh = it / x->nqb, h = bh % x->Hq, b = bh / x->Hq;
        int64_t hk = h / x->group, i0 = qbi * x->qb;
        int nq = (int)(Tq - i0 < x->qb ? Tq - i0 : x->qb);
        for (int r = 0; r < nq; r++) {
            qr[r] = (const float *)((const char *)q->data + b * q->nb[0] + h * q->nb[1] +
                                    (i0 + r) * q->nb[2]);
            m[r] = -INFINITY;
            l[r] = 0;
        }
        memset(O, 0, (size_t)nq * (size_t)D * sizeof *O);
        /* query i sits at absolute position Tk - Tq + i */
        int64_t shift = Tk - Tq, kend = Tk;
        if (x->p->causal && shift + i0 + nq < kend) kend = shift + i0 + nq;
        const char *kb = (const char *)k->data + b * k->nb[0] + hk * k->nb[1];
        const char *vb = (const char *)v->data + b * v->nb[0] + hk * v->nb[1];
        for (int64_t j0 = 0; j0 < kend; j0 += KB) {
            int nk = (int)(kend - j0 < KB ? kend - j0 : KB);
            P->qk(qr, nq, kb + j0 * k->nb[2], k->nb[2], nk, D, x->p->scale, S, KB);
            for (int r = 0; r < nq; r++) {
                float *s = S + r * KB;
                if (bias) {
                    const char *br = (const char *)bias->data + b * bias->nb[0] +
                                     h * bias->nb[1] + (i0 + r) * bias->nb[2] + j0 * bias->nb[3];
                    int64_t bs = bias->nb[3];
                    if (bs == (int64_t)sizeof(float)) {
                        const float *bf = (const float *)br;
                        for (int j = 0; j < nk; j++) s[j] += bf[j];
                    } else {
                        for (int j = 0; j < nk; j++) s[j] += *(const float *)(br + j * bs);
                    }
                }
                if (x->p->causal) /* keys after shift + i0 + r are masked */
                    for (int64_t j = shift + i0 + r + 1 - j0; j < nk; j++)
                        if (j >= 0) s[j] = -INFINITY;
                float mnew = P->max(s, nk);
                if (m[r] > mnew) mnew = m[r];
                if (mnew == -INFINITY) { /* invariant 1 */
                    memset(s, 0, (size_t)nk * sizeof *s);
                    continue;
                }
                float corr = expf(m[r] - mnew); /* 0 when m was -inf */
                float sum = P->exp_sum(s, nk, mnew);
                l[r] = l[r] * corr + sum;
                if (corr != 1.0f) P->scal(O + r * D, D, corr);
                m[r] = mnew;
            }
            P->pv(O, D, S, KB, nq, vb + j0 * v->nb[2], v->nb[2], nk, D);
        }
        for (int r = 0; r < nq; r++) {
            float *y = (float *)x->out->data + ((b * x->Hq + h) * Tq + i0 + r) * D;
            if (l[r] > 0) {
                float inv = 1.0f / l[r];
                for (int64_t d = 0; d < D; d++) y[d] = O[r * D + d] * inv;
            } else { /* sees no key: zeros (ops_nn.c, convention 2) */
                memset(y, 0, (size_t)D * sizeof *y);
            }
        }
    }
}

#ifdef NN_X86
/* dequantize_row of a Q8_0 row at the AVX-512 level: the same products
 * q * d, so the same floats */
__attribute__((target("avx512f,avx2,fma"))) static void q8_row_f32_z(const char *src, float *dst, int64_t n)
{
    const struct block_q8_0 *b = (const struct block_q8_0 *)src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK) {
        __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16((short)b[i].d));
        __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b[i].qs)));
        __m512 q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b[i].qs + 16))));
        _mm512_storeu_ps(dst, _mm512_mul_ps(q0, d));
        _mm512_storeu_ps(dst + 16, _mm512_mul_ps(q1, d));
    }
}
#endif

struct q8_deq_ctx { const struct tensor *t; float *dst; bool z; };

static void q8_deq_rows(void *p, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct q8_deq_ctx *c = p;
    const struct tensor *t = c->t;
    const int64_t n = t->ne[3];
    for (int64_t r = r0; r < r1; r++) {
        int64_t i2 = r % t->ne[2], i1 = (r / t->ne[2]) % t->ne[1], i0 = r / (t->ne[2] * t->ne[1]);
        const char *src = (const char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2];
#ifdef NN_X86
        if (c->z) {
            q8_row_f32_z(src, c->dst + r * n, n);
            continue;
        }
#endif
        dequantize_row(TYPE_Q8_0, src, c->dst + r * n, n);
    }
}

/* A Q8_0 t (rows contiguous by definition) dequantised to a contiguous F32
 * copy (dequantize_row's floats), rows spread over the pool. */
static const struct tensor *q8_rows_f32(struct arena *a, const struct tensor *t)
{
    struct tensor c = tensor_make(TYPE_F32, 4, t->ne, NULL, t->be);
    c.data = arena_alloc(a, tensor_nbytes(&c) + 1);
    if (!c.data) return NULL;
    struct q8_deq_ctx x = {t, c.data, false};
#ifdef NN_X86
    x.z = cpu_level() >= CPU_AVX512;
#endif
    int64_t rows = t->ne[0] * t->ne[1] * t->ne[2];
    if (rows > 0 && t->ne[3] > 0) tp_parallel_for(pool(a), rows, 1 + 4096 / t->ne[3], q8_deq_rows, &x);
    return arena_desc(a, &c);
}

/* A copy of t with unit innermost stride (t itself when it has one), of
 * t's type (F32 or F16), or converted to F32 when f32 is set. Q8_0 rows are
 * returned as they are, or dequantised when f32 is set. */
static const struct tensor *unit_rows(struct arena *a, const struct tensor *t, bool f32)
{
    if (t->type == TYPE_Q8_0) return f32 ? q8_rows_f32(a, t) : t;
    const bool h = t->type == TYPE_F16;
    const int64_t es = h ? 2 : 4;
    if (t->nb[3] == es && (!h || !f32)) return t;
    struct tensor c = tensor_make(h && !f32 ? TYPE_F16 : TYPE_F32, 4, t->ne, NULL, t->be);
    c.data = arena_alloc(a, tensor_nbytes(&c));
    if (!c.data) return NULL;
    float *d = c.data;
    uint16_t *d16 = c.data;
    for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
                for (int64_t i3 = 0; i3 < t->ne[3]; i3++) {
                    const char *e = (const char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] +
                                    i2 * t->nb[2] + i3 * t->nb[3];
                    if (!h) *d++ = *(const float *)e;
                    else if (f32) *d++ = fp16_to_f32(*(const uint16_t *)e);
                    else *d16++ = *(const uint16_t *)e;
                }
    return arena_desc(a, &c);
}

#ifdef NN_X86
/* ---- AVX-512 attention ---------------------------------------------------
 * Two drivers, by the number of query rows per head:
 *  - rows (Tq <= ROWS_MAX_TQ: the T3 decode step, CFG pairs): one item per
 *    query row, keys in segments of ZRB. A segment's scores go to a scratch
 *    row, 16 keys per step (16 dot products, then one transposing reduction
 *    to a vector of 16 scores, no horizontal sum per key); then their exp
 *    against the running max; then P.V into the output row (online softmax
 *    across segments, as the tiles). K and V are each read once, in order.
 *  - tiles (longer queries): K is first packed transposed per kv head, in
 *    blocks of ZKB keys ([D][ZKB] floats a block, zero padded), so both
 *    products are register tiles like a GEMM micro-kernel: S[6 rows, 64
 *    keys] = Q.Kt and O[6 rows, 64 columns] += P.V, 24 accumulators each,
 *    with the online softmax of the file header between them (invariant 1
 *    holds: a row whose max is still -inf gets P = 0 and keeps O = 0).
 * K and V are F32, F16 (converted on load) or Q8_0 (an 8-bit KV cache:
 * the rows driver reads the blocks as stored, see dot16_q8 / pv_row_q8;
 * the tiles and AMX drivers, and the AVX2 / portable path, get them
 * dequantised to F32 once per call). */
enum { ZR = 6, ZQB = 48, ZKB = 64, ZRB = 256, ROWS_MAX_TQ = 4 };

/* 16 floats of a K or V row at p (F32, or F16 when h), lanes of m: a
 * prefix mask (masks64). F16 rows convert on load (_mm512_cvtph_ps). */
AVX512 static inline __attribute__((always_inline)) __m512 ldkv(const char *p, __mmask16 m, const bool h)
{
    if (!h) return _mm512_maskz_loadu_ps(m, p);
    if (m == 0xFFFF) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    uint16_t t[16] = {0};
    memcpy(t, p, 2 * (size_t)__builtin_popcount(m));
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)t));
}

/* Key of each of the 16 accumulators of dot16 such that reduce16's lanes
 * come out in key order (the permutation is its own inverse). */
static const int red_perm[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};

/* lane l = sum of the lanes of a[red_perm[l]]: four levels of halving
 * (256-bit halves, 128-bit quarters, pairs, singles), 30 shuffles and 15
 * adds for 16 sums */
AVX512 static inline __attribute__((always_inline)) __m512 reduce16(const __m512 *a)
{
    __m512 c[8], e[4], g[2];
    #pragma GCC unroll 16
    for (int j = 0; j < 8; j++)
        c[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[j], a[j + 8], 0x44),
                             _mm512_shuffle_f32x4(a[j], a[j + 8], 0xEE));
    #pragma GCC unroll 16
    for (int j = 0; j < 4; j++)
        e[j] = _mm512_add_ps(_mm512_shuffle_f32x4(c[j], c[j + 4], 0x88),
                             _mm512_shuffle_f32x4(c[j], c[j + 4], 0xDD));
    #pragma GCC unroll 16
    for (int j = 0; j < 2; j++)
        g[j] = _mm512_add_ps(_mm512_shuffle_ps(e[j], e[j + 2], 0x44),
                             _mm512_shuffle_ps(e[j], e[j + 2], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], 0x88), _mm512_shuffle_ps(g[0], g[1], 0xDD));
}

/* masks of the four 16-lane vectors of columns [dc, dc + 64) of a row of D */
AVX512 static inline void masks64(int64_t D, int64_t dc, __mmask16 m[4])
{
    #pragma GCC unroll 16
    for (int c = 0; c < 4; c++) {
        int64_t n = D - dc - 16 * c;
        m[c] = mask16(n < 0 ? 0 : n > 16 ? 16 : n);
    }
}

/* lane l = dot(q, key l) for keys k0 + l*ks, l < nk; lanes >= nk repeat
 * key 0 (the caller masks them). D in chunks of 64 with q in registers. */
AVX512 static inline __attribute__((always_inline)) __m512
dot16(const float *q, const char *k0, int64_t ks, int nk, int64_t D, const bool h)
{
    const int64_t es = h ? 2 : 4;
    __m512 a[16];
    #pragma GCC unroll 16
    for (int s = 0; s < 16; s++) a[s] = _mm512_setzero_ps();
    for (int64_t dc = 0; dc < D; dc += 64) {
        __mmask16 m[4];
        masks64(D, dc, m);
        __m512 x0 = _mm512_maskz_loadu_ps(m[0], q + dc), x1 = _mm512_maskz_loadu_ps(m[1], q + dc + 16);
        __m512 x2 = _mm512_maskz_loadu_ps(m[2], q + dc + 32), x3 = _mm512_maskz_loadu_ps(m[3], q + dc + 48);
        #pragma GCC unroll 16
        for (int s = 0; s < 16; s++) {
            const char *kr = k0 + (red_perm[s] < nk ? red_perm[s] : 0) * ks + dc * es;
            __m512 t = _mm512_mul_ps(x0, ldkv(kr, m[0], h));
            t = _mm512_fmadd_ps(x1, ldkv(kr + 16 * es, m[1], h), t);
            t = _mm512_fmadd_ps(x2, ldkv(kr + 32 * es, m[2], h), t);
            t = _mm512_fmadd_ps(x3, ldkv(kr + 48 * es, m[3], h), t);
            a[s] = _mm512_add_ps(a[s], t);
        }
    }
    return reduce16(a);
}

/* 16 bias values at br (byte stride bs), lanes of k only */
AVX512 static inline __m512 bias16(const char *br, int64_t bs, __mmask16 k)
{
    if (bs == (int64_t)sizeof(float)) return _mm512_maskz_loadu_ps(k, br);
    float t[16] = {0};
    #pragma GCC unroll 16
    for (int j = 0; j < 16; j++)
        if (k >> j & 1) t[j] = *(const float *)(br + j * bs);
    return _mm512_loadu_ps(t);
}

/* o[0, D) = o * corr + sum_j p[j] v_j, j < n; two sets of accumulators
 * (even and odd keys) so eight FMA chains are in flight */
AVX512 static inline __attribute__((always_inline)) void
pv_row(float *o, float corr, const float *p, const char *v0, int64_t vs, int64_t n, int64_t D,
       const bool h)
{
    const int64_t es = h ? 2 : 4;
    for (int64_t dc = 0; dc < D; dc += 64) {
        __mmask16 m[4];
        masks64(D, dc, m);
        __m512 a[4], b[4], cr = _mm512_set1_ps(corr);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            a[c] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m[c], o + dc + 16 * c), cr);
            b[c] = _mm512_setzero_ps();
        }
        int64_t j = 0;
        for (; j + 2 <= n; j += 2) {
            const char *va = v0 + j * vs + dc * es, *vb = v0 + (j + 1) * vs + dc * es;
            __m512 pa = _mm512_set1_ps(p[j]), pb = _mm512_set1_ps(p[j + 1]);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                a[c] = _mm512_fmadd_ps(pa, ldkv(va + 16 * c * es, m[c], h), a[c]);
                b[c] = _mm512_fmadd_ps(pb, ldkv(vb + 16 * c * es, m[c], h), b[c]);
            }
        }
        if (j < n) {
            const char *va = v0 + j * vs + dc * es;
            __m512 pa = _mm512_set1_ps(p[j]);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                a[c] = _mm512_fmadd_ps(pa, ldkv(va + 16 * c * es, m[c], h), a[c]);
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            _mm512_mask_storeu_ps(o + dc + 16 * c, m[c], _mm512_add_ps(a[c], b[c]));
    }
}

/* ---- Q8_0 keys and values (a Q8_0 KV cache; D a multiple of QK) -------
 * A row is D / QK blocks {F16 d; int8 q[32]}, element x = d * q. A score
 * is sum over blocks of d_b * (q[32b:32b+32] . k8_b) (the int8 codes
 * converted to float, the block dot in float, then its scale); P.V folds
 * the scale into the weight: o += (p_j * d_jb) * v8_jb. */
#define Q8B ((int64_t)sizeof(struct block_q8_0))

/* 16 int8 at p as floats */
AVX512 static inline __m512 i8x16(const int8_t *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

/* lane l = the scale of block bk of key l (row k0 + l*ks), l < nk; lanes
 * >= nk read key 0. One gather of the 4 bytes at each block start (its
 * F16 d and two codes, inside the row), the low halves converted. */
AVX512 static inline __m512 scales16_q8(const char *k0, int64_t ks, int nk, int64_t bk)
{
    __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                     _mm512_set1_epi32((int)ks));
    idx = _mm512_maskz_mov_epi32(mask16(nk), idx);
    __m512i w = _mm512_i32gather_epi32(idx, k0 + bk * Q8B, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w));
}

/* dot16 for Q8_0 keys: per block, the 16 keys' scales, q's 32 floats in
 * registers, each key's block dot scaled into its accumulator */
AVX512 static inline __attribute__((always_inline)) __m512
dot16_q8(const float *q, const char *k0, int64_t ks, int nk, int64_t D)
{
    __m512 a[16];
    float d[16];
    #pragma GCC unroll 16
    for (int s = 0; s < 16; s++) a[s] = _mm512_setzero_ps();
    for (int64_t bk = 0; bk < D / QK; bk++) {
        _mm512_storeu_ps(d, scales16_q8(k0, ks, nk, bk));
        __m512 x0 = _mm512_loadu_ps(q + bk * QK), x1 = _mm512_loadu_ps(q + bk * QK + 16);
        #pragma GCC unroll 16
        for (int s = 0; s < 16; s++) {
            const int8_t *kq = ((const struct block_q8_0 *)(k0 + (red_perm[s] < nk ? red_perm[s] : 0) * ks +
                                                           bk * Q8B))->qs;
            __m512 t = _mm512_mul_ps(x0, i8x16(kq));
            t = _mm512_fmadd_ps(x1, i8x16(kq + 16), t);
            a[s] = _mm512_fmadd_ps(t, _mm512_set1_ps(d[red_perm[s]]), a[s]);
        }
    }
    return reduce16(a);
}

/* columns [0, NB * QK) of o (NB = 1 or 2 blocks, the first at byte bo of
 * each V row): o = o * corr + sum_j pd[b * ZRB + j] v8_j(block b), j < n;
 * keys in pairs so 4 * NB FMA chains are in flight */
AVX512 static inline __attribute__((always_inline)) void
pv_q8_cols(float *o, __m512 cr, const float *pd, const char *v0, int64_t bo, int64_t vs, int64_t n,
           const int NB)
{
    __m512 a[4], b[4];
    #pragma GCC unroll 4
    for (int c = 0; c < 2 * NB; c++) {
        a[c] = _mm512_mul_ps(_mm512_loadu_ps(o + 16 * c), cr);
        b[c] = _mm512_setzero_ps();
    }
    int64_t j = 0;
    for (; j + 2 <= n; j += 2) {
        #pragma GCC unroll 2
        for (int bl = 0; bl < NB; bl++) {
            const int8_t *qa = ((const struct block_q8_0 *)(v0 + j * vs + bo + bl * Q8B))->qs;
            const int8_t *qb = ((const struct block_q8_0 *)(v0 + (j + 1) * vs + bo + bl * Q8B))->qs;
            __m512 pa = _mm512_set1_ps(pd[bl * ZRB + j]), pb = _mm512_set1_ps(pd[bl * ZRB + j + 1]);
            a[2 * bl] = _mm512_fmadd_ps(pa, i8x16(qa), a[2 * bl]);
            a[2 * bl + 1] = _mm512_fmadd_ps(pa, i8x16(qa + 16), a[2 * bl + 1]);
            b[2 * bl] = _mm512_fmadd_ps(pb, i8x16(qb), b[2 * bl]);
            b[2 * bl + 1] = _mm512_fmadd_ps(pb, i8x16(qb + 16), b[2 * bl + 1]);
        }
    }
    if (j < n) {
        #pragma GCC unroll 2
        for (int bl = 0; bl < NB; bl++) {
            const int8_t *qa = ((const struct block_q8_0 *)(v0 + j * vs + bo + bl * Q8B))->qs;
            __m512 pa = _mm512_set1_ps(pd[bl * ZRB + j]);
            a[2 * bl] = _mm512_fmadd_ps(pa, i8x16(qa), a[2 * bl]);
            a[2 * bl + 1] = _mm512_fmadd_ps(pa, i8x16(qa + 16), a[2 * bl + 1]);
        }
    }
    #pragma GCC unroll 4
    for (int c = 0; c < 2 * NB; c++) _mm512_storeu_ps(o + 16 * c, _mm512_add_ps(a[c], b[c]));
}

/* pv_row for Q8_0 values: pd[b * ZRB + j] = p_j * d_jb (scales folded) */
AVX512 static void pv_row_q8(float *o, float corr, const float *pd, const char *v0, int64_t vs, int64_t n,
                             int64_t D)
{
    const __m512 cr = _mm512_set1_ps(corr);
    const int64_t nb = D / QK;
    int64_t bk = 0;
    for (; bk + 2 <= nb; bk += 2) pv_q8_cols(o + bk * QK, cr, pd + bk * ZRB, v0, bk * Q8B, vs, n, 2);
    if (bk < nb) pv_q8_cols(o + bk * QK, cr, pd + bk * ZRB, v0, bk * Q8B, vs, n, 1);
}

enum { KV_F32, KV_F16, KV_Q8 };

/* one item per query row: it = (b * Hq + h) * Tq + i. Keys in segments of
 * ZRB: the segment's scores (16 per dot16), then its exp against the
 * running max, then its P.V into the output row (rescaled when the max
 * grows), so K and V stream in turn, each read once. kind: KV_F32, KV_F16
 * or KV_Q8 (then scratch also holds pd[D / QK][ZRB], the weights times
 * each value block's scale). */
AVX512 static inline __attribute__((always_inline)) void
attn_rows(void *c, int64_t it0, int64_t it1, int ith, const int kind)
{
    const struct attn_ctx *x = c;
    const struct tensor *q = x->q, *k = x->k, *v = x->v, *bias = x->bias;
    const int64_t D = x->D, Tq = x->Tq, Tk = x->Tk;
    float *s = x->scratch + ith * x->per_thread; /* [ZRB] scores, [D] output, [D / QK][ZRB] pd */
    float *o = s + ZRB, *pd = o + ((D + 15) & ~(int64_t)15);
    const __m512 sc = _mm512_set1_ps(x->p->scale), ninf = _mm512_set1_ps(-INFINITY);
    for (int64_t it = it0; it < it1; it++) {
        int64_t i = it % Tq, bh = it / Tq, h = bh % x->Hq, b = bh / x->Hq, hk = h / x->group;
        const float *qr = (const float *)((const char *)q->data + b * q->nb[0] + h * q->nb[1] +
                                          i * q->nb[2]);
        float *y = (float *)x->out->data + it * D;
        /* query i sits at absolute position Tk - Tq + i */
        int64_t kend = x->p->causal && Tk - Tq + i + 1 < Tk ? Tk - Tq + i + 1 : Tk;
        const char *kb = (const char *)k->data + b * k->nb[0] + hk * k->nb[1];
        const char *vb = (const char *)v->data + b * v->nb[0] + hk * v->nb[1];
        const char *br = bias ? (const char *)bias->data + b * bias->nb[0] + h * bias->nb[1] +
                                    i * bias->nb[2] : NULL;
        float m = -INFINITY, l = 0;
        memset(o, 0, (size_t)D * sizeof *o);
        for (int64_t s0 = 0; s0 < kend; s0 += ZRB) {
            int64_t ns = kend - s0 < ZRB ? kend - s0 : ZRB;
            __m512 mx = ninf;
            for (int64_t j0 = 0; j0 < ns; j0 += 16) {
                int nk = (int)(ns - j0 < 16 ? ns - j0 : 16);
                __mmask16 km = mask16(nk);
                const char *kj = kb + (s0 + j0) * k->nb[2];
                __m512 t = _mm512_mul_ps(kind == KV_Q8 ? dot16_q8(qr, kj, k->nb[2], nk, D)
                                                       : dot16(qr, kj, k->nb[2], nk, D, kind == KV_F16), sc);
                if (br) t = _mm512_add_ps(t, bias16(br + (s0 + j0) * bias->nb[3], bias->nb[3], km));
                t = _mm512_mask_blend_ps(km, ninf, t);
                _mm512_storeu_ps(s + j0, t);
                mx = _mm512_max_ps(mx, t);
            }
            float mnew = _mm512_reduce_max_ps(mx);
            if (m > mnew) mnew = m;
            if (mnew == -INFINITY) continue; /* invariant 1: nothing seen yet */
            float corr = expf(m - mnew);     /* 0 when m was -inf */
            __m512 mm = _mm512_set1_ps(mnew), sum = _mm512_setzero_ps();
            for (int64_t j0 = 0; j0 < ns; j0 += 16) { /* masked lanes are -inf: exp gives 0 */
                __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j0), mm));
                _mm512_storeu_ps(s + j0, e);
                sum = _mm512_add_ps(sum, e);
            }
            l = l * corr + _mm512_reduce_add_ps(sum);
            m = mnew;
            if (kind == KV_Q8) {
                /* lanes past ns hold p = 0 (exp of -inf) */
                for (int64_t bk = 0; bk < D / QK; bk++)
                    for (int64_t j0 = 0; j0 < ns; j0 += 16) {
                        int nk = (int)(ns - j0 < 16 ? ns - j0 : 16);
                        __m512 d = scales16_q8(vb + (s0 + j0) * v->nb[2], v->nb[2], nk, bk);
                        _mm512_storeu_ps(pd + bk * ZRB + j0, _mm512_mul_ps(_mm512_loadu_ps(s + j0), d));
                    }
                pv_row_q8(o, corr, pd, vb + s0 * v->nb[2], v->nb[2], ns, D);
            } else {
                pv_row(o, corr, s, vb + s0 * v->nb[2], v->nb[2], ns, D, kind == KV_F16);
            }
        }
        if (l > 0) {
            float inv = 1.0f / l;
            for (int64_t d = 0; d < D; d++) y[d] = o[d] * inv;
        } else { /* sees no key: zeros (ops_nn.c, convention 2) */
            memset(y, 0, (size_t)D * sizeof *y);
        }
    }
}
AVX512 static void attn_rows_z(void *c, int64_t it0, int64_t it1, int ith)
{
    attn_rows(c, it0, it1, ith, KV_F32);
}
AVX512 static void attn_rows_z16(void *c, int64_t it0, int64_t it1, int ith)
{
    attn_rows(c, it0, it1, ith, KV_F16);
}
AVX512 static void attn_rows_zq8(void *c, int64_t it0, int64_t it1, int ith)
{
    attn_rows(c, it0, it1, ith, KV_Q8);
}

/* K of kv head (b, hk) transposed into blocks of ZKB keys: block kb holds
 * kt[(kb * D + d) * ZKB + jj] = k[b, hk, kb * ZKB + jj, d], zeros past Tk.
 * One item per block. */
static void attn_pack_kt(void *c, int64_t it0, int64_t it1, int ith)
{
    (void)ith;
    const struct attn_ctx *x = c;
    const struct tensor *k = x->k;
    const int64_t D = x->D, Hk = k->ne[1];
    for (int64_t it = it0; it < it1; it++) {
        int64_t kb = it % x->nkb, bhk = it / x->nkb, hk = bhk % Hk, b = bhk / Hk;
        float *dst = x->kt + it * D * ZKB;
        const char *src = (const char *)k->data + b * k->nb[0] + hk * k->nb[1];
        int64_t n = x->Tk - kb * ZKB < ZKB ? x->Tk - kb * ZKB : ZKB;
        for (int64_t jj = 0; jj < n; jj++) {
            const char *row = src + (kb * ZKB + jj) * k->nb[2];
            if (x->kv16)
                for (int64_t d = 0; d < D; d++) dst[d * ZKB + jj] = fp16_to_f32(((const uint16_t *)row)[d]);
            else
                for (int64_t d = 0; d < D; d++) dst[d * ZKB + jj] = ((const float *)row)[d];
        }
        for (int64_t d = 0; d < D; d++)
            for (int64_t jj = n; jj < ZKB; jj++) dst[d * ZKB + jj] = 0;
    }
}

/* S[r, 0..64) = scale * q[r] . Kt[:, 0..64) for R rows; kt is [D][ZKB] */
AVX512 static inline __attribute__((always_inline)) void
qk_tile(const int R, const float *const *q, const float *kt, int64_t D, float scale, float *S)
{
    __m512 acc[ZR][4];
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 16
        for (int c = 0; c < 4; c++) acc[r][c] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d++) {
        const float *kd = kt + d * ZKB;
        __m512 k0 = _mm512_loadu_ps(kd), k1 = _mm512_loadu_ps(kd + 16);
        __m512 k2 = _mm512_loadu_ps(kd + 32), k3 = _mm512_loadu_ps(kd + 48);
        #pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            __m512 xq = _mm512_set1_ps(q[r][d]);
            acc[r][0] = _mm512_fmadd_ps(xq, k0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(xq, k1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(xq, k2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(xq, k3, acc[r][3]);
        }
    }
    __m512 sc = _mm512_set1_ps(scale);
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 16
        for (int c = 0; c < 4; c++) _mm512_storeu_ps(S + r * ZKB + 16 * c, _mm512_mul_ps(acc[r][c], sc));
}

/* O[r] = O[r] * corr[r] + sum_{j < nk} P[r, j] v_j for R rows; O rows have
 * ldo >= D rounded up to 64 floats (so whole vectors), v rows are masked */
AVX512 static inline __attribute__((always_inline)) void
pv_tile(const int R, float *O, int64_t ldo, const float *corr, const float *P, const char *v0,
        int64_t vs, int nk, int64_t D, const bool h)
{
    const int64_t es = h ? 2 : 4;
    for (int64_t dc = 0; dc < D; dc += 64) {
        __mmask16 m[4];
        masks64(D, dc, m);
        __m512 acc[ZR][4];
        #pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            __m512 cr = _mm512_set1_ps(corr[r]);
            #pragma GCC unroll 16
            for (int c = 0; c < 4; c++)
                acc[r][c] = _mm512_mul_ps(_mm512_loadu_ps(O + r * ldo + dc + 16 * c), cr);
        }
        for (int j = 0; j < nk; j++) {
            const char *vj = v0 + j * vs + dc * es;
            __m512 w0 = ldkv(vj, m[0], h), w1 = ldkv(vj + 16 * es, m[1], h);
            __m512 w2 = ldkv(vj + 32 * es, m[2], h), w3 = ldkv(vj + 48 * es, m[3], h);
            #pragma GCC unroll 16
            for (int r = 0; r < R; r++) {
                __m512 p = _mm512_set1_ps(P[r * ZKB + j]);
                acc[r][0] = _mm512_fmadd_ps(p, w0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(p, w1, acc[r][1]);
                acc[r][2] = _mm512_fmadd_ps(p, w2, acc[r][2]);
                acc[r][3] = _mm512_fmadd_ps(p, w3, acc[r][3]);
            }
        }
        #pragma GCC unroll 16
        for (int r = 0; r < R; r++)
            #pragma GCC unroll 16
            for (int c = 0; c < 4; c++) _mm512_storeu_ps(O + r * ldo + dc + 16 * c, acc[r][c]);
    }
}

/* the micro-kernels for R = 1..ZR rows, each compiled with R a constant */
#define ZTILE(R) \
    AVX512 static void qk_tile##R(const float *const *q, const float *kt, int64_t D, float scale, \
                                  float *S) { qk_tile(R, q, kt, D, scale, S); } \
    AVX512 static void pv_tile##R(float *O, int64_t ldo, const float *corr, const float *P, \
                                  const char *v0, int64_t vs, int nk, int64_t D) \
    { pv_tile(R, O, ldo, corr, P, v0, vs, nk, D, false); } \
    AVX512 static void pv_tile16_##R(float *O, int64_t ldo, const float *corr, const float *P, \
                                     const char *v0, int64_t vs, int nk, int64_t D) \
    { pv_tile(R, O, ldo, corr, P, v0, vs, nk, D, true); }
ZTILE(1) ZTILE(2) ZTILE(3) ZTILE(4) ZTILE(5) ZTILE(6)
#undef ZTILE
typedef void (*qk_tile_fn)(const float *const *, const float *, int64_t, float, float *);
typedef void (*pv_tile_fn)(float *, int64_t, const float *, const float *, const char *, int64_t,
                           int, int64_t);
static const qk_tile_fn qk_tiles[ZR + 1] = {NULL, qk_tile1, qk_tile2, qk_tile3, qk_tile4,
                                            qk_tile5, qk_tile6};
static const pv_tile_fn pv_tiles[ZR + 1] = {NULL, pv_tile1, pv_tile2, pv_tile3, pv_tile4,
                                            pv_tile5, pv_tile6};
static const pv_tile_fn pv_tiles16[ZR + 1] = {NULL, pv_tile16_1, pv_tile16_2, pv_tile16_3,
                                              pv_tile16_4, pv_tile16_5, pv_tile16_6};

/* one item per (b, h, block of qb query rows), as attn_items */
AVX512 static void attn_tiles_z(void *c, int64_t it0, int64_t it1, int ith)
{
    const struct attn_ctx *x = c;
    const struct tensor *q = x->q, *v = x->v, *bias = x->bias;
    const int64_t D = x->D, Tq = x->Tq, Tk = x->Tk, ldo = (D + 63) & ~(int64_t)63;
    float *S = x->scratch + ith * x->per_thread; /* [ZQB, ZKB] */
    float *O = S + ZQB * ZKB;                    /* [ZQB, ldo] */
    float m[ZQB], l[ZQB], corr[ZQB];
    const float *qr[ZQB];
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const pv_tile_fn *pvt = x->kv16 ? pv_tiles16 : pv_tiles;
    for (int64_t it = it0; it < it1; it++) {
        int64_t qbi = it % x->nqb, bh = it / x->nqb, h = bh % x->Hq, b = bh / x->Hq;
        int64_t hk = h / x->group, i0 = qbi * x->qb;
        int nq = (int)(Tq - i0 < x->qb ? Tq - i0 : x->qb);
        for (int r = 0; r < nq; r++) {
            qr[r] = (const float *)((const char *)q->data + b * q->nb[0] + h * q->nb[1] +
                                    (i0 + r) * q->nb[2]);
            m[r] = -INFINITY;
            l[r] = 0;
        }
        memset(O, 0, (size_t)nq * (size_t)ldo * sizeof *O);
        int64_t shift = Tk - Tq, kend = Tk;
        if (x->p->causal && shift + i0 + nq < kend) kend = shift + i0 + nq;
        const float *kt = x->kt + (b * x->k->ne[1] + hk) * x->nkb * D * ZKB;
        const char *vb = (const char *)v->data + b * v->nb[0] + hk * v->nb[1];
        for (int64_t j0 = 0; j0 < kend; j0 += ZKB) {
            int nk = (int)(kend - j0 < ZKB ? kend - j0 : ZKB);
            const float *ktb = kt + (j0 / ZKB) * D * ZKB;
            for (int r = 0; r < nq; r += ZR) {
                int R = nq - r < ZR ? nq - r : ZR;
                qk_tiles[R](qr + r, ktb, D, x->p->scale, S + r * ZKB);
            }
            for (int r = 0; r < nq; r++) {
                float *sr = S + r * ZKB;
                int64_t lim = nk; /* keys [j0, j0 + lim) are visible to row r */
                if (x->p->causal && shift + i0 + r + 1 - j0 < lim) lim = shift + i0 + r + 1 - j0;
                __m512 t[4], mx = ninf;
                #pragma GCC unroll 16
                for (int cc = 0; cc < 4; cc++) {
                    int64_t n = lim - 16 * cc;
                    __mmask16 km = mask16(n < 0 ? 0 : n > 16 ? 16 : n);
                    t[cc] = _mm512_loadu_ps(sr + 16 * cc);
                    if (bias) {
                        const char *brow = (const char *)bias->data + b * bias->nb[0] +
                                           h * bias->nb[1] + (i0 + r) * bias->nb[2];
                        t[cc] = _mm512_add_ps(t[cc], bias16(brow + (j0 + 16 * cc) * bias->nb[3],
                                                            bias->nb[3], km));
                    }
                    t[cc] = _mm512_mask_blend_ps(km, ninf, t[cc]);
                    mx = _mm512_max_ps(mx, t[cc]);
                }
                float mnew = _mm512_reduce_max_ps(mx);
                if (m[r] > mnew) mnew = m[r];
                if (mnew == -INFINITY) { /* invariant 1 */
                    memset(sr, 0, ZKB * sizeof *sr);
                    corr[r] = 1;
                    continue;
                }
                corr[r] = expf(m[r] - mnew); /* 0 when m was -inf */
                __m512 mm = _mm512_set1_ps(mnew), sum = _mm512_setzero_ps();
                #pragma GCC unroll 16
                for (int cc = 0; cc < 4; cc++) {
                    __m512 e = exp16(_mm512_sub_ps(t[cc], mm));
                    _mm512_storeu_ps(sr + 16 * cc, e);
                    sum = _mm512_add_ps(sum, e);
                }
                l[r] = l[r] * corr[r] + _mm512_reduce_add_ps(sum);
                m[r] = mnew;
            }
            for (int r = 0; r < nq; r += ZR) {
                int R = nq - r < ZR ? nq - r : ZR;
                pvt[R](O + r * ldo, ldo, corr + r, S + r * ZKB, vb + j0 * v->nb[2], v->nb[2],
                            nk, D);
            }
        }
        for (int r = 0; r < nq; r++) {
            float *y = (float *)x->out->data + ((b * x->Hq + h) * Tq + i0 + r) * D;
            if (l[r] > 0) {
                float inv = 1.0f / l[r];
                for (int64_t d = 0; d < D; d++) y[d] = O[r * ldo + d] * inv;
            } else { /* sees no key: zeros (ops_nn.c, convention 2) */
                memset(y, 0, (size_t)D * sizeof *y);
            }
        }
    }
}

/* AVX-512 attention of cpu_attention (c has q, k, v with unit rows) */
static void attention_z(struct arena *a, struct attn_ctx *c)
{
    int nt = n_threads(a);
    if (c->Tq <= ROWS_MAX_TQ) {
        c->per_thread = ZRB + ((c->D + 15) & ~(int64_t)15) + (c->kvq8 ? c->D / QK * ZRB : 0);
        c->scratch = arena_alloc_host(a, (size_t)(nt * c->per_thread) * sizeof(float));
        if (!c->scratch) return;
        tp_parallel_for(pool(a), c->B * c->Hq * c->Tq, 1,
                        c->kvq8 ? attn_rows_zq8 : c->kv16 ? attn_rows_z16 : attn_rows_z, c);
        return;
    }
    c->qb = ZQB;
    while (c->qb > 12 && c->B * c->Hq * ((c->Tq + c->qb - 1) / c->qb) < 4 * nt) c->qb /= 2;
    c->nqb = (c->Tq + c->qb - 1) / c->qb;
    c->nkb = (c->Tk + ZKB - 1) / ZKB;
    int64_t nkt = c->B * c->k->ne[1] * c->nkb;
    c->kt = arena_alloc_host(a, (size_t)(nkt * c->D * ZKB + 1) * sizeof(float));
    c->per_thread = ZQB * ZKB + ZQB * ((c->D + 63) & ~(int64_t)63);
    c->scratch = arena_alloc_host(a, (size_t)(nt * c->per_thread) * sizeof(float));
    if (!c->kt || !c->scratch) return;
    tp_parallel_for(pool(a), nkt, 1, attn_pack_kt, c);
    tp_parallel_for(pool(a), c->B * c->Hq * c->nqb, 1, attn_tiles_z, c);
}
#endif

static void attention_out(struct arena *a, struct tensor *out, const struct tensor *q,
                          const struct tensor *k, const struct tensor *v,
                          const struct tensor *bias, const struct attn_params *p)
{
    struct attn_ctx c = {.P = prims_now(), .bias = bias, .out = out, .p = p};
    c.B = q->ne[0]; c.Hq = q->ne[1]; c.Tq = q->ne[2]; c.Tk = k->ne[2]; c.D = q->ne[3];
    c.group = q->ne[1] / k->ne[1];
    c.q = unit_rows(a, q, true);
#ifdef NN_X86
    if (cpu_level() >= CPU_AVX512) { /* F16 k and v (both or neither) are read as stored */
        c.kv16 = k->type == TYPE_F16;
        /* Q8_0 k and v (both or neither): read as stored by the rows
         * driver (the decode step); longer queries (tiles, AMX) get them
         * dequantised to F32 once per call */
        c.kvq8 = k->type == TYPE_Q8_0 && c.Tq <= ROWS_MAX_TQ && 16 * k->nb[2] <= INT32_MAX &&
                 16 * v->nb[2] <= INT32_MAX;
        c.k = unit_rows(a, k, k->type == TYPE_Q8_0 && !c.kvq8);
        c.v = unit_rows(a, v, v->type == TYPE_Q8_0 && !c.kvq8);
        /* long queries with the BF16 hint: AMX-BF16 products (attn_amx.c) */
        if (arena_status(a) == CBX_OK && !attn_amx(a, out, c.q, c.k, c.v, bias, p)) attention_z(a, &c);
        return;
    }
#endif
    /* the AVX2 / scalar primitives take F32 rows: F16 and Q8_0 k, v are
     * converted (the whole of k and v, each call) */
    c.k = unit_rows(a, k, true);
    c.v = unit_rows(a, v, true);
    if (arena_status(a) != CBX_OK) return;
    int nt = n_threads(a);
    /* smaller query blocks when there would be too few items to share */
    c.qb = QB_MAX;
    while (c.qb > 8 && c.B * c.Hq * ((c.Tq + c.qb - 1) / c.qb) < 4 * nt) c.qb /= 2;
    c.nqb = (c.Tq + c.qb - 1) / c.qb;
    c.per_thread = (QB_MAX * KB + QB_MAX * c.D + 15) & ~(int64_t)15;
    c.scratch = arena_alloc_host(a, (size_t)(nt * c.per_thread) * sizeof(float));
    if (!c.scratch) return;
    tp_parallel_for(pool(a), c.B * c.Hq * c.nqb, 1, attn_items, &c);
}

/* The optional probability export (attn_params.probs, ops.h): a pass of
 * its own over the asked rows after the output is done, so the drivers
 * above stay exactly as they are (the output is bit-identical with and
 * without it) and a call without it pays nothing. Scores and softmax in
 * double, as the ref kernel; k in any of its types (F32, F16, Q8_0) and
 * strides. Cost: n * Tk * D multiply-adds (T3's alignment guard: 3 heads,
 * one query row per decode step). */
static void attention_probs(struct arena *a, const struct tensor *q, const struct tensor *k,
                            const struct tensor *bias, const struct attn_params *p)
{
    const struct attn_probs *pr = p->probs;
    const int64_t Tq = q->ne[2], Tk = k->ne[2], D = q->ne[3], b = pr->b, h = pr->h;
    const int64_t hk = h / (q->ne[1] / k->ne[1]);
    double *s = arena_alloc_host(a, (size_t)(Tk > 0 ? Tk : 1) * sizeof *s);
    float *kr = arena_alloc_host(a, (size_t)(D > 0 ? D : 1) * sizeof *kr);
    float *qr = arena_alloc_host(a, (size_t)(D > 0 ? D : 1) * sizeof *qr);
    if (!s || !kr || !qr) return;
    for (int64_t r = 0; r < pr->n; r++) {
        const int64_t i = pr->i0 + r;
        float *dst = pr->dst + r * pr->ld;
        const char *qp = (const char *)q->data + b * q->nb[0] + h * q->nb[1] + i * q->nb[2];
        for (int64_t d = 0; d < D; d++) qr[d] = *(const float *)(qp + d * q->nb[3]);
        const int64_t last = p->causal ? Tk - Tq + i : Tk - 1; /* last visible key */
        double m = -INFINITY;
        for (int64_t j = 0; j < Tk; j++) {
            s[j] = -INFINITY;
            if (j > last) continue;
            const char *kp = (const char *)k->data + b * k->nb[0] + hk * k->nb[1] + j * k->nb[2];
            if (k->type == TYPE_Q8_0) dequantize_row(TYPE_Q8_0, kp, kr, D);
            else if (k->type == TYPE_F16)
                for (int64_t d = 0; d < D; d++) kr[d] = fp16_to_f32(*(const uint16_t *)(kp + d * k->nb[3]));
            else
                for (int64_t d = 0; d < D; d++) kr[d] = *(const float *)(kp + d * k->nb[3]);
            double dot = 0;
            for (int64_t d = 0; d < D; d++) dot += (double)qr[d] * kr[d];
            s[j] = dot * p->scale;
            if (bias)
                s[j] += *(const float *)((const char *)bias->data + b * bias->nb[0] + h * bias->nb[1] +
                                         i * bias->nb[2] + j * bias->nb[3]);
            if (s[j] > m) m = s[j];
        }
        if (m == -INFINITY) { /* sees no key: zeros (ops_nn.c, convention 2) */
            memset(dst, 0, (size_t)Tk * sizeof *dst);
            continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < Tk; j++) sum += (s[j] = exp(s[j] - m));
        for (int64_t j = 0; j < Tk; j++) dst[j] = (float)(s[j] / sum);
    }
}

static void cpu_attention(struct arena *a, struct tensor *out, const struct tensor *q,
                          const struct tensor *k, const struct tensor *v,
                          const struct tensor *bias, const struct attn_params *p)
{
    attention_out(a, out, q, k, v, bias, p);
    if (p->probs && arena_status(a) == CBX_OK) attention_probs(a, q, k, bias, p);
}

/* ---- rotary ------------------------------------------------------------ */

/* HF inv_freq in float32 (1 / base ** (arange(0, dim, 2).float() / dim))
 * with _compute_llama3_parameters when factor != 0, each step in float32
 * as torch evaluates it (python scalars cast to float32). */
static float inv_freq(const struct rope_params *p, int i)
{
    float f = 1.0f / powf(p->theta, (float)(2 * i) / (float)p->n_dims);
    if (p->factor == 0) return f;
    float wavelen = (float)(2 * M_PI) / f;
    if (wavelen > (float)((double)p->original_max_pos / p->low_freq_factor)) return f / p->factor;
    if (wavelen < (float)((double)p->original_max_pos / p->high_freq_factor)) return f;
    float smooth = ((float)p->original_max_pos / wavelen - p->low_freq_factor) /
                   (float)((double)p->high_freq_factor - p->low_freq_factor);
    return (1 - smooth) * f / p->factor + smooth * f;
}

struct rope_ctx {
    const struct tensor *x, *pos;
    struct tensor *out;
    const struct rope_params *p;
    const float *inv;
    float *cs; /* [T][half][2]: cos, sin */
};

static void rope_table(void *c, int64_t t0, int64_t t1, int ith)
{
    (void)ith;
    const struct rope_ctx *k = c;
    int half = k->p->n_dims / 2;
    for (int64_t t = t0; t < t1; t++) {
        float ps = (float)*(const int32_t *)((const char *)k->pos->data + t * k->pos->nb[0]);
        for (int i = 0; i < half; i++) {
            float ang = ps * k->inv[i]; /* float32 product, as HF */
            k->cs[(t * half + i) * 2] = cosf(ang);
            k->cs[(t * half + i) * 2 + 1] = sinf(ang);
        }
    }
}

static void rope_rows(void *c, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct rope_ctx *k = c;
    int64_t T = k->x->ne[2], D = k->x->ne[3];
    int half = k->p->n_dims / 2;
    for (int64_t r = r0; r < r1; r++) {
        float *y = (float *)k->out->data + r * D;
        const float *x = src_row(k->x, r, y);
        const float *cs = k->cs + (r % T) * half * 2;
        for (int i = 0; i < half; i++) {
            float x0 = x[i], x1 = x[i + half], co = cs[2 * i], si = cs[2 * i + 1];
            y[i] = x0 * co + (-x1) * si; /* q * cos + rotate_half(q) * sin */
            y[i + half] = x1 * co + x0 * si;
        }
        if (x != y)
            for (int64_t d = k->p->n_dims; d < D; d++) y[d] = x[d];
    }
}

static void cpu_rope(struct arena *a, struct tensor *out, const struct tensor *x,
                     const struct tensor *pos, const struct rope_params *p)
{
    int half = p->n_dims / 2;
    int64_t T = x->ne[2];
    float *inv = arena_alloc_host(a, (size_t)half * sizeof *inv);
    float *cs = arena_alloc_host(a, (size_t)(T * half * 2 + 1) * sizeof *cs);
    if (!inv || !cs) return;
    for (int i = 0; i < half; i++) inv[i] = inv_freq(p, i);
    struct rope_ctx c = {.x = x, .pos = pos, .out = out, .p = p, .inv = inv, .cs = cs};
    tp_parallel_for(pool(a), T, 1 + 4096 / half, rope_table, &c);
    tp_parallel_for(pool(a), tensor_nrows(x), row_grain(x->ne[3]), rope_rows, &c);
}

void cpu_register_nn(struct kernels *k)
{
    k->layer_norm = cpu_layer_norm;
    k->add_layer_norm = cpu_add_layer_norm;
    k->rms_norm = cpu_rms_norm;
    k->group_norm = cpu_group_norm;
    k->channel_affine = cpu_channel_affine;
    k->softmax = cpu_softmax;
    k->attention = cpu_attention;
    k->rope = cpu_rope;
}
