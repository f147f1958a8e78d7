/* nn_kernels.h - what the cpu nn group (nn.c) shares with its SIMD
 * files: the row primitives (struct prims; portable set in nn.c, AVX2 set
 * in nn_avx2.c) and the attention call state (struct attn_ctx), which the
 * AVX-512 attention drivers (nn_avx512.c) take over at that level. The
 * SIMD files compile to nothing off x86 (NN_X86 undefined). */
#ifndef CBX_CPU_NN_KERNELS_H
#define CBX_CPU_NN_KERNELS_H

#include <math.h>

#include "../backend.h"
#include "../threadpool.h"

#if defined(__x86_64__) || defined(__i386__)
#define NN_X86 1
#endif

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

/* Work item `it` of a blocked attention driver: batch b, query head h, its
 * kv head *hk, first query row *i0 of the block; fills the block's query
 * row pointers qr[] and online-softmax state (m = -inf, l = 0); returns
 * the block's row count. */
static inline int attn_item_begin(const struct attn_ctx *x, int64_t it, int64_t *b, int64_t *h, int64_t *hk,
                                  int64_t *i0, const float **qr, float *m, float *l)
{
    const int64_t qbi = it % x->nqb, bh = it / x->nqb;
    *h = bh % x->Hq;
    *b = bh / x->Hq;
    *hk = *h / x->group;
    *i0 = qbi * x->qb;
    const int nq = (int)(x->Tq - *i0 < x->qb ? x->Tq - *i0 : x->qb);
    for (int r = 0; r < nq; r++) {
        qr[r] = (const float *)((const char *)x->q->data + *b * x->q->nb[0] + *h * x->q->nb[1] +
                                (*i0 + r) * x->q->nb[2]);
        m[r] = -INFINITY;
        l[r] = 0;
    }
    return nq;
}

/* the AVX-512 rows driver takes calls of up to this many query rows */
enum { ROWS_MAX_TQ = 4 };

static inline struct threadpool *pool(struct arena *a) { return arena_backend(a)->tp; }
static inline int n_threads(struct arena *a) { return tp_n_threads(pool(a)); }

#ifdef NN_X86
/* AVX2+FMA primitives */
extern const struct prims nn_prims_avx2;
/* dequantize_row of a Q8_0 row of n at the AVX-512 level (the same floats) */
void nn_q8_row_f32_avx512(const char *src, float *dst, int64_t n);
/* AVX-512 attention of cpu_attention (c has q, k, v with unit rows: F32,
 * or F16 when c->kv16, or Q8_0 when c->kvq8); arena failures recorded */
void nn_attention_avx512(struct arena *a, struct attn_ctx *c);
#endif

#endif
