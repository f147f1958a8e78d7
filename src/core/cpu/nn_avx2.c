/* nn_avx2.c - AVX2+FMA row primitives of the nn group (struct prims in
 * nn_kernels.h): sums, norms, softmax pieces and the flash-attention QK /
 * PV blocks of nn.c's attn_items. Functions carry their own target
 * attribute; the file is compiled for the baseline ISA (and to nothing
 * off x86). */
#include <math.h>

#include "nn_kernels.h"

#ifdef NN_X86
#include <immintrin.h>

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

const struct prims nn_prims_avx2 = {
    a_sum, a_sumsq_dev, a_norm, a_affine, a_scale_max, a_max, a_exp_sum, a_scal, a_qk, a_pv,
};
#endif
