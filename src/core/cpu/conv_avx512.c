/* conv_avx512.c - the direct AVX-512 conv1d of the conv group (stride 1,
 * see conv.c's header and conv_kernels.h): x padded once per chunk of
 * output columns (or read in place), W read in place, register tiles of
 * 6 output channels x 64 columns. Functions carry their own target
 * attribute; the file is compiled for the baseline ISA (and to nothing
 * off x86). */
#include "../cpu_features.h"
#include "conv_kernels.h"

#ifdef CONV_X86
#include <immintrin.h>

#define DC_R 6     /* output channels per register tile */
#define DC_TT 64   /* output columns per register tile: 4 x 16 lanes */
#define DC_TB 256  /* output columns per task */
#define DC_TERMS 128 /* products per FMA chain before it is added to y */

struct dconv_job {
    const struct tensor *x;
    const struct conv1d_params *p;
    const float *w;          /* [Cout, Cin_g, K] */
    const float *bias;       /* [Cout] or NULL */
    float *xp;               /* padded chunk [Cin][ldp], or NULL: x in place */
    float *win;              /* x in place: per thread [Cin_g][DC_TT + span] */
    float *out;              /* [B, Cout, Tout] contiguous */
    int64_t T, tout, K, cin, cin_g, cout_g, cout, n_cot, ldp, ldx, span;
    int64_t b, t0, tc, n_tb; /* current batch and chunk of output columns */
    bool t_major;            /* task order: column blocks outer */
};

/* xp[ci] = xpad[t0 - pad_left .. + tc + (K-1)*dil), zeros up to ldp. */
static void dconv_pad(void *ctx, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct dconv_job *j = ctx;
    const struct conv1d_params *p = j->p;
    int64_t n = j->tc + (j->K - 1) * p->dilation;
    for (int64_t ci = r0; ci < r1; ci++) {
        int64_t es;
        const float *src = act_row(j->x, j->b, ci, &es);
        float *dst = j->xp + ci * j->ldp;
        fetch_row(dst, src, es, j->T, j->t0 - p->pad_left, 1, n, p->pad_mode, 0.0f);
        memset(dst + n, 0, (size_t)(j->ldp - n) * sizeof *dst);
    }
}

#define TGT512 __attribute__((target("avx2,fma,avx512f")))

/* One register tile: y[r][col] for rows r < nr and columns 16*NC (the
 * last vector's lanes masked by m) += s, s = sum over (ci, k) of
 * w[r*ldw + ci*K + k] * x[ci*ldx + k*dil + col]; with bias set,
 * y = bias[r] + s instead. W is read in place, six rows at once (rows
 * past nr repeat row nr - 1; their sums are dropped). The caller passes
 * blocks of input channels of about DC_TERMS products each, so the sum is
 * blocked (each block's chain starts at zero) and its float error stays
 * that of BLAS's K blocks rather than of one chain over Cin*K products. */
#define DC_TILE(NC)                                                                       \
    TGT512 static void dconv_tile##NC(const float *x, int64_t ldx, const float *w,           \
                                      int64_t ldw, const float *bias, int64_t cin,          \
                                      int64_t K, int64_t dil, float *y, int64_t ldy,        \
                                      int nr, __mmask16 m)                                  \
    {                                                                                     \
        __m512 acc[DC_R][NC];                                                             \
        const float *wr[DC_R];                                                            \
        _Pragma("GCC unroll 8") for (int r = 0; r < DC_R; r++) {                          \
            wr[r] = w + (r < nr ? r : nr - 1) * ldw;                                      \
            _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++)                          \
                acc[r][c] = bias ? _mm512_set1_ps(bias[r < nr ? r : nr - 1])              \
                                 : _mm512_setzero_ps();                                   \
        }                                                                                 \
        int64_t o = 0;                                                                    \
        for (int64_t ci = 0; ci < cin; ci++, x += ldx) {                                  \
            const float *xk = x;                                                          \
            for (int64_t k = 0; k < K; k++, xk += dil, o++) {                             \
                __m512 xv[NC];                                                            \
                _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++)                      \
                    xv[c] = _mm512_loadu_ps(xk + 16 * c);                                 \
                _Pragma("GCC unroll 8") for (int r = 0; r < DC_R; r++) {                  \
                    __m512 wv = _mm512_set1_ps(wr[r][o]);                                 \
                    _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++)                  \
                        acc[r][c] = _mm512_fmadd_ps(wv, xv[c], acc[r][c]);                \
                }                                                                         \
            }                                                                             \
        }                                                                                 \
        _Pragma("GCC unroll 8") for (int r = 0; r < DC_R; r++) {                          \
            if (r >= nr) break;                                                           \
            float *yr = y + r * ldy;                                                      \
            _Pragma("GCC unroll 4") for (int c = 0; c < NC - 1; c++)                      \
                _mm512_storeu_ps(yr + 16 * c, bias ? acc[r][c] : _mm512_add_ps(           \
                                     _mm512_loadu_ps(yr + 16 * c), acc[r][c]));           \
            float *yl = yr + 16 * (NC - 1);                                               \
            _mm512_mask_storeu_ps(yl, m, bias ? acc[r][NC - 1] : _mm512_add_ps(           \
                                      _mm512_maskz_loadu_ps(m, yl), acc[r][NC - 1]));     \
        }                                                                                 \
    }
DC_TILE(1)
DC_TILE(2)
DC_TILE(3)
DC_TILE(4)
#undef DC_TILE

/* One tile through the kernel of its vector count, in blocks of input
 * channels (see DC_TILE); w: row co0 of W, bias: bias + co0 or NULL. */
static void dconv_tile(const struct dconv_job *j, const float *x, int64_t ldx, const float *w,
                       const float *bias, float *y, int nr, int64_t rem)
{
    int nc = (int)((rem + 15) / 16);
    __mmask16 m = (__mmask16)(0xffffu >> (16 * nc - rem));
    int64_t dil = j->p->dilation, cb = max64(1, DC_TERMS / j->K), ck = j->cin_g * j->K;
    static const float zero[DC_R];
    for (int64_t c0 = 0; c0 < j->cin_g; c0 += cb) {
        const float *xb = x + c0 * ldx, *wb = w + c0 * j->K;
        const float *bb = c0 == 0 ? (bias ? bias : zero) : NULL;
        int64_t nci = min64(cb, j->cin_g - c0);
        switch (nc) {
        case 1: dconv_tile1(xb, ldx, wb, ck, bb, nci, j->K, dil, y, j->tout, nr, m); break;
        case 2: dconv_tile2(xb, ldx, wb, ck, bb, nci, j->K, dil, y, j->tout, nr, m); break;
        case 3: dconv_tile3(xb, ldx, wb, ck, bb, nci, j->K, dil, y, j->tout, nr, m); break;
        default: dconv_tile4(xb, ldx, wb, ck, bb, nci, j->K, dil, y, j->tout, nr, m); break;
        }
    }
}

/* Tasks over (group, channel tile) x blocks of DC_TB columns of the chunk,
 * in the order that keeps the larger operand's share in cache: t_major
 * when all of the packed W fits in L2 (consecutive tasks then share the
 * x columns), else channel tiles outer (they share a tile's W). Tiles
 * read x in place (or the padded chunk xp); a tile whose input window
 * crosses x's ends reads a padded copy of that window built in the
 * thread's win. */
static void dconv_run(void *ctx, int64_t i0, int64_t i1, int ith)
{
    const struct dconv_job *j = ctx;
    const struct conv1d_params *p = j->p;
    int64_t ck = j->cin_g * j->K, n_gt = j->cout / j->cout_g * j->n_cot;
    for (int64_t i = i0; i < i1; i++) {
        int64_t gt = j->t_major ? i % n_gt : i / j->n_tb;
        int64_t tb = j->t_major ? i / n_gt : i % j->n_tb;
        int64_t g = gt / j->n_cot, co0 = (gt % j->n_cot) * DC_R;
        int nr = (int)min64(DC_R, j->cout_g - co0);
        const float *w = j->w + (g * j->cout_g + co0) * ck;
        const float *bias = j->bias ? j->bias + g * j->cout_g + co0 : NULL;
        float *y = j->out + (j->b * j->cout + g * j->cout_g + co0) * j->tout + j->t0;
        int64_t t1 = min64(j->tc, (tb + 1) * DC_TB);
        for (int64_t t = tb * DC_TB; t < t1; t += DC_TT) {
            int64_t rem = min64(DC_TT, t1 - t), nv = (rem + 15) / 16 * 16 + j->span;
            if (j->xp) {
                dconv_tile(j, j->xp + g * j->cin_g * j->ldp + t, j->ldp, w, bias, y + t, nr, rem);
                continue;
            }
            int64_t es, s0 = j->t0 + t - p->pad_left; /* x column of the tile's column 0 */
            const float *xr = act_row(j->x, j->b, g * j->cin_g, &es);
            if (s0 >= 0 && s0 + nv <= j->T) {
                dconv_tile(j, xr + s0, j->ldx, w, bias, y + t, nr, rem);
                continue;
            }
            int64_t lw = DC_TT + j->span;
            float *win = j->win + ith * j->cin_g * lw;
            for (int64_t ci = 0; ci < j->cin_g; ci++)
                fetch_row(win + ci * lw, xr + ci * j->ldx, 1, j->T, s0, 1, nv, p->pad_mode, 0.0f);
            dconv_tile(j, win, lw, w, bias, y + t, nr, rem);
        }
    }
}

bool conv_conv1d_avx512(struct arena *a, struct tensor *out, const struct tensor *x,
                        const struct tensor *wt, const float *w, const float *bias,
                        const struct conv1d_params *p, int64_t B)
{
    if (p->stride != 1 || cpu_level() < CPU_AVX512) return false;
    struct threadpool *tp = pool(a);
    int n = x->ndim;
    struct dconv_job j = {
        .x = x, .p = p, .w = w, .bias = bias, .out = out->data, .T = x->ne[n - 1],
        .tout = out->ne[n - 1], .K = wt->ne[2], .cin = x->ne[n - 2], .cin_g = wt->ne[1],
        .cout = wt->ne[0],
    };
    int64_t groups = p->groups, nt = tp ? tp_n_threads(tp) : 1;
    j.span = (j.K - 1) * p->dilation;
    j.cout_g = j.cout / groups;
    j.n_cot = (j.cout_g + DC_R - 1) / DC_R;
    int64_t n_gt = groups * j.n_cot, chunk = j.tout;
    j.t_major = j.cout * j.cin_g * j.K * (int64_t)sizeof(float) <= ((int64_t)1 << 20);
    /* x read in place when its rows are contiguous inside (any row
     * stride); else padded into xp chunk by chunk, within CHUNK_FLOATS */
    bool in_place = x->nb[n - 1] == (int64_t)sizeof(float) && x->nb[n - 2] % (int64_t)sizeof(float) == 0;
    if (in_place) {
        j.ldx = x->nb[n - 2] / (int64_t)sizeof(float);
        j.win = arena_alloc(a, (size_t)(nt * j.cin_g * (DC_TT + j.span)) * sizeof(float));
        if (!j.win) return true;
    } else {
        chunk = min64(j.tout, max64(DC_TB, (CHUNK_FLOATS / j.cin - j.span - 16) / DC_TB * DC_TB));
        j.ldp = (chunk + 15) / 16 * 16 + j.span;
        j.xp = arena_alloc(a, (size_t)(j.cin * j.ldp) * sizeof(float));
        if (!j.xp) return true;
    }
    for (j.b = 0; j.b < B; j.b++)
        for (j.t0 = 0; j.t0 < j.tout; j.t0 += chunk) {
            j.tc = min64(chunk, j.tout - j.t0);
            j.n_tb = (j.tc + DC_TB - 1) / DC_TB;
            if (j.xp) tp_parallel_for(tp, j.cin, grain_for(j.ldp), dconv_pad, &j);
            tp_parallel_for(tp, n_gt * j.n_tb, 1, dconv_run, &j);
        }
    return true;
}
#endif
