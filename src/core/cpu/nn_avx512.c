/* nn_avx512.c - AVX-512 kernels of the nn group (see nn_kernels.h): the
 * attention drivers cpu_attention hands over at the AVX-512 level, and
 * Q8_0 rows to F32. Functions carry their own target attribute; the file
 * is compiled for the baseline ISA (and to nothing off x86). */
#include <math.h>
#include <string.h>

#include "../quant.h"
#include "nn_kernels.h"

#ifdef NN_X86
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx2,fma")))

/* exp as nn_avx2.c's exp8, with 2^n applied by scalef (p * 2^n, exact) */
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

/* dequantize_row of a Q8_0 row at the AVX-512 level: the same products
 * q * d, so the same floats */
AVX512 void nn_q8_row_f32_avx512(const char *src, float *dst, int64_t n)
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

/* AVX-512 attention (16 lanes, mask registers for the tails; the row
 * primitives stay AVX2: they are memory-bound).
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
 *    with the online softmax of nn.c's header between them (invariant 1
 *    holds: a row whose max is still -inf gets P = 0 and keeps O = 0).
 * K and V are F32, F16 (converted on load) or Q8_0 (an 8-bit KV cache:
 * the rows driver reads the blocks as stored, see dot16_q8 / pv_row_q8;
 * the tiles and AMX drivers, and the AVX2 / portable path, get them
 * dequantised to F32 once per call). */
enum { ZR = 6, ZQB = 48, ZKB = 64, ZRB = 256 }; /* ROWS_MAX_TQ: nn_kernels.h */

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
    const struct tensor *v = x->v, *bias = x->bias;
    const int64_t D = x->D, Tq = x->Tq, Tk = x->Tk, ldo = (D + 63) & ~(int64_t)63;
    float *S = x->scratch + ith * x->per_thread; /* [ZQB, ZKB] */
    float *O = S + ZQB * ZKB;                    /* [ZQB, ldo] */
    float m[ZQB], l[ZQB], corr[ZQB];
    const float *qr[ZQB];
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const pv_tile_fn *pvt = x->kv16 ? pv_tiles16 : pv_tiles;
    for (int64_t it = it0; it < it1; it++) {
        int64_t b, h, hk, i0;
        const int nq = attn_item_begin(x, it, &b, &h, &hk, &i0, qr, m, l);
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

void nn_attention_avx512(struct arena *a, struct attn_ctx *c)
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
