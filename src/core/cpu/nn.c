/* nn.c - cpu kernels of the nn group: norms, softmax, fused attention,
 * rotary embedding (semantics in ops.h and ops_nn.c).
 *
 * Rows are spread over the backend's thread pool; the inner loops are
 * "primitives" (struct prims) with a portable version, an AVX2+FMA version
 * and AVX-512 versions of the attention loops, picked per call from
 * cpu_level() (so tests can force the portable path with cpu_set_level).
 * Strided rows are first gathered into the contiguous output row and the
 * primitive then works in place there.
 *
 * Attention is flash-style: for a block of up to QB query rows of one head,
 * keys are visited in blocks of KB; scores of one block are kept in a
 * per-thread [QB, KB] tile, the running max m, normaliser l and output
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
#include "../threadpool.h"

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

/* AVX-512 versions of the attention inner loops (16 lanes, mask registers
 * for the tails); the row primitives stay AVX2 (they are memory-bound). */
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

AVX512 static float z_max(const float *x, int64_t n)
{
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += 16)
        mx = _mm512_mask_max_ps(mx, mask16(n - i < 16 ? n - i : 16), mx,
                                _mm512_maskz_loadu_ps(mask16(n - i < 16 ? n - i : 16), x + i));
    return _mm512_reduce_max_ps(mx);
}
AVX512 static float z_exp_sum(float *y, int64_t n, float m)
{
    __m512 mm = _mm512_set1_ps(m), s = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = mask16(n - i < 16 ? n - i : 16);
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, y + i), mm));
        e = _mm512_maskz_mov_ps(k, e);
        _mm512_mask_storeu_ps(y + i, k, e);
        s = _mm512_add_ps(s, e);
    }
    return _mm512_reduce_add_ps(s);
}
/* [sum a, sum b, sum c, sum d] of 16-lane vectors */
AVX512 static inline __m128 hsum16x4(__m512 a, __m512 b, __m512 c, __m512 d)
{
#define HALF(v) _mm256_add_ps(_mm512_castps512_ps256(v), \
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))
    __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(HALF(a), HALF(b)), _mm256_hadd_ps(HALF(c), HALF(d)));
#undef HALF
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

/* as a_qk: rows in pairs against four keys, D in steps of 16 with a masked
 * last step */
AVX512 static void z_qk(const float *const *q, int nq, const char *k0, int64_t ks, int nk,
                        int64_t D, float scale, float *S, int lds)
{
    const __m128 sc4 = _mm_set1_ps(scale);
    int r = 0;
    for (; r < nq; r += 2) {
        int two = r + 1 < nq;
        const float *q0 = q[r], *q1 = q[two ? r + 1 : r];
        float *s0 = S + r * lds, *s1 = s0 + lds;
        int j = 0;
        for (; j + 4 <= nk; j += 4) {
            const float *ka = KROW(j), *kb = KROW(j + 1), *kc = KROW(j + 2), *kd = KROW(j + 3);
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            __m512 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            for (int64_t d = 0; d < D; d += 16) {
                __mmask16 m = mask16(D - d < 16 ? D - d : 16);
                __m512 x0 = _mm512_maskz_loadu_ps(m, q0 + d), x1 = _mm512_maskz_loadu_ps(m, q1 + d);
                __m512 va = _mm512_maskz_loadu_ps(m, ka + d), vb = _mm512_maskz_loadu_ps(m, kb + d);
                __m512 vc = _mm512_maskz_loadu_ps(m, kc + d), vd = _mm512_maskz_loadu_ps(m, kd + d);
                a0 = _mm512_fmadd_ps(x0, va, a0); a1 = _mm512_fmadd_ps(x0, vb, a1);
                a2 = _mm512_fmadd_ps(x0, vc, a2); a3 = _mm512_fmadd_ps(x0, vd, a3);
                b0 = _mm512_fmadd_ps(x1, va, b0); b1 = _mm512_fmadd_ps(x1, vb, b1);
                b2 = _mm512_fmadd_ps(x1, vc, b2); b3 = _mm512_fmadd_ps(x1, vd, b3);
            }
            _mm_storeu_ps(s0 + j, _mm_mul_ps(hsum16x4(a0, a1, a2, a3), sc4));
            if (two) _mm_storeu_ps(s1 + j, _mm_mul_ps(hsum16x4(b0, b1, b2, b3), sc4));
        }
        for (; j < nk; j++) {
            const float *kj = (const float *)(k0 + j * ks);
            __m512 a0 = _mm512_setzero_ps(), b0 = a0;
            for (int64_t d = 0; d < D; d += 16) {
                __mmask16 m = mask16(D - d < 16 ? D - d : 16);
                __m512 kv = _mm512_maskz_loadu_ps(m, kj + d);
                a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q0 + d), kv, a0);
                b0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q1 + d), kv, b0);
            }
            s0[j] = _mm512_reduce_add_ps(a0) * scale;
            if (two) s1[j] = _mm512_reduce_add_ps(b0) * scale;
        }
    }
}

/* as a_pv: two rows share each v load; 64 output columns (four registers
 * per row) stay in registers across the key loop */
AVX512 static void z_pv(float *O, int64_t ldo, const float *P, int ldp, int nq, const char *v0,
                        int64_t vs, int nk, int64_t D)
{
    for (int r = 0; r < nq; r += 2) {
        int two = r + 1 < nq;
        float *o0 = O + r * ldo, *o1 = two ? o0 + ldo : o0;
        const float *p0 = P + r * ldp, *p1 = two ? p0 + ldp : p0;
        for (int64_t d = 0; d < D; d += 64) {
            __mmask16 m0 = mask16(D - d < 16 ? D - d : 16);
            __mmask16 m1 = mask16(D - d - 16 < 0 ? 0 : D - d - 16 < 16 ? D - d - 16 : 16);
            __mmask16 m2 = mask16(D - d - 32 < 0 ? 0 : D - d - 32 < 16 ? D - d - 32 : 16);
            __mmask16 m3 = mask16(D - d - 48 < 0 ? 0 : D - d - 48 < 16 ? D - d - 48 : 16);
            __m512 a0 = _mm512_maskz_loadu_ps(m0, o0 + d);
            __m512 a1 = _mm512_maskz_loadu_ps(m1, o0 + d + 16);
            __m512 a2 = _mm512_maskz_loadu_ps(m2, o0 + d + 32);
            __m512 a3 = _mm512_maskz_loadu_ps(m3, o0 + d + 48);
            __m512 b0 = _mm512_maskz_loadu_ps(m0, o1 + d);
            __m512 b1 = _mm512_maskz_loadu_ps(m1, o1 + d + 16);
            __m512 b2 = _mm512_maskz_loadu_ps(m2, o1 + d + 32);
            __m512 b3 = _mm512_maskz_loadu_ps(m3, o1 + d + 48);
            for (int j = 0; j < nk; j++) {
                const float *vj = (const float *)(v0 + j * vs) + d;
                __m512 x0 = _mm512_set1_ps(p0[j]), x1 = _mm512_set1_ps(p1[j]);
                __m512 w0 = _mm512_maskz_loadu_ps(m0, vj), w1 = _mm512_maskz_loadu_ps(m1, vj + 16);
                __m512 w2 = _mm512_maskz_loadu_ps(m2, vj + 32);
                __m512 w3 = _mm512_maskz_loadu_ps(m3, vj + 48);
                a0 = _mm512_fmadd_ps(x0, w0, a0); a1 = _mm512_fmadd_ps(x0, w1, a1);
                a2 = _mm512_fmadd_ps(x0, w2, a2); a3 = _mm512_fmadd_ps(x0, w3, a3);
                b0 = _mm512_fmadd_ps(x1, w0, b0); b1 = _mm512_fmadd_ps(x1, w1, b1);
                b2 = _mm512_fmadd_ps(x1, w2, b2); b3 = _mm512_fmadd_ps(x1, w3, b3);
            }
            /* row r+1 first: when there is one row o1 == o0 and a* wins */
            _mm512_mask_storeu_ps(o1 + d, m0, b0); _mm512_mask_storeu_ps(o1 + d + 16, m1, b1);
            _mm512_mask_storeu_ps(o1 + d + 32, m2, b2); _mm512_mask_storeu_ps(o1 + d + 48, m3, b3);
            _mm512_mask_storeu_ps(o0 + d, m0, a0); _mm512_mask_storeu_ps(o0 + d + 16, m1, a1);
            _mm512_mask_storeu_ps(o0 + d + 32, m2, a2); _mm512_mask_storeu_ps(o0 + d + 48, m3, a3);
        }
    }
}

static const struct prims prims_avx512 = {
    a_sum, a_sumsq_dev, a_norm, a_affine, a_scale_max, z_max, z_exp_sum, a_scal, z_qk, z_pv,
};
#endif

/* The primitives of the SIMD level in use now (cpu_features.h). */
static const struct prims *prims_now(void)
{
#ifdef NN_X86
    enum cpu_level l = cpu_level();
    if (l >= CPU_AVX512) return &prims_avx512;
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

static void layer_norm_rows(void *c, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct rows_ctx *k = c;
    const struct prims *P = k->P;
    int64_t n = k->x->ne[k->x->ndim - 1];
    for (int64_t r = r0; r < r1; r++) {
        float *y = (float *)k->out->data + r * n;
        const float *x = src_row(k->x, r, y);
        float mean = P->sum(x, n) / (float)n;
        float var = P->sumsq_dev(x, n, mean) / (float)n;
        P->norm(y, x, n, mean, 1.0f / sqrtf(var + k->eps), k->g, k->b);
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

/* A copy of t with unit innermost stride (t itself when it has one). */
static const struct tensor *unit_rows(struct arena *a, const struct tensor *t)
{
    if (t->nb[3] == (int64_t)sizeof(float)) return t;
    struct tensor c = tensor_make(TYPE_F32, 4, t->ne, NULL, t->be);
    c.data = arena_alloc(a, tensor_nbytes(&c));
    if (!c.data) return NULL;
    float *d = c.data;
    for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
                for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
                    *d++ = *(const float *)((const char *)t->data + i0 * t->nb[0] +
                                            i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3]);
    return arena_desc(a, &c);
}

static void cpu_attention(struct arena *a, struct tensor *out, const struct tensor *q,
                          const struct tensor *k, const struct tensor *v,
                          const struct tensor *bias, const struct attn_params *p)
{
    struct attn_ctx c = {.P = prims_now(), .bias = bias, .out = out, .p = p};
    c.q = unit_rows(a, q);
    c.k = unit_rows(a, k);
    c.v = unit_rows(a, v);
    if (arena_status(a) != CBX_OK) return;
    c.B = q->ne[0]; c.Hq = q->ne[1]; c.Tq = q->ne[2]; c.Tk = k->ne[2]; c.D = q->ne[3];
    c.group = q->ne[1] / k->ne[1];
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
    k->rms_norm = cpu_rms_norm;
    k->group_norm = cpu_group_norm;
    k->channel_affine = cpu_channel_affine;
    k->softmax = cpu_softmax;
    k->attention = cpu_attention;
    k->rope = cpu_rope;
}
