/* conv_avx2.c - AVX2 kernels of the conv group (see conv_kernels.h):
 * axpy for the depthwise conv, and the LSTM step's four-row dot products
 * and cell update (vector exp for sigmoid and tanh). Functions carry
 * their own target attribute; the file is compiled for the baseline ISA
 * (and to nothing off x86). */
#include "conv_kernels.h"

#ifdef CONV_X86
#include <immintrin.h>

__attribute__((target("avx2"))) void conv_axpy_avx2(float *restrict o, const float *restrict s,
                                                   float w, int64_t step, int64_t n)
{
    AXPY_BODY
}

__attribute__((target("avx2,fma"))) static float hsum256(__m256 s)
{
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}
/* h is loaded once per 8 lanes for all four rows. */
__attribute__((target("avx2,fma"))) void conv_dot4_avx2(const float *w, int64_t stride,
                                                       const float *h, int64_t n, float *r)
{
    const float *w0 = w, *w1 = w + stride, *w2 = w + 2 * stride, *w3 = w + 3 * stride;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 hv = _mm256_loadu_ps(h + i);
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + i), hv, s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + i), hv, s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + i), hv, s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + i), hv, s3);
    }
    r[0] = hsum256(s0);
    r[1] = hsum256(s1);
    r[2] = hsum256(s2);
    r[3] = hsum256(s3);
    for (; i < n; i++) {
        r[0] += w0[i] * h[i];
        r[1] += w1[i] * h[i];
        r[2] += w2[i] * h[i];
        r[3] += w3[i] * h[i];
    }
}

/* exp of 8 lanes (Cephes expf: n = round(x log2 e), r = x - n ln 2 in two
 * parts, degree-6 polynomial, times 2^n); x clamped to +-88.37, so the
 * result is finite and sigmoid/tanh below saturate cleanly. */
__attribute__((target("avx2,fma"))) static __m256 exp8(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-88.3762626647949f)),
                      _mm256_set1_ps(88.3762626647949f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* sigmoid(x) = 1 / (1 + e^-x); tanh(x) = 2 sigmoid(2x) - 1 */
__attribute__((target("avx2,fma"))) static __m256 sigmoid8(__m256 x)
{
    __m256 one = _mm256_set1_ps(1.0f);
    return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}
__attribute__((target("avx2,fma"))) static __m256 tanh8(__m256 x)
{
    __m256 two = _mm256_set1_ps(2.0f);
    return _mm256_fmsub_ps(two, sigmoid8(_mm256_mul_ps(two, x)), _mm256_set1_ps(1.0f));
}

__attribute__((target("avx2,fma"))) void conv_gates_avx2(const float *pre, float *c, float *h, int n)
{
    __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n),
                                   _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 ig = sigmoid8(_mm256_loadu_ps(pre)), fg = sigmoid8(_mm256_loadu_ps(pre + 8));
    __m256 gg = tanh8(_mm256_loadu_ps(pre + 16)), og = sigmoid8(_mm256_loadu_ps(pre + 24));
    __m256 cv = _mm256_fmadd_ps(fg, _mm256_maskload_ps(c, m), _mm256_mul_ps(ig, gg));
    _mm256_maskstore_ps(c, m, cv);
    _mm256_maskstore_ps(h, m, _mm256_mul_ps(og, tanh8(cv)));
}
#endif
