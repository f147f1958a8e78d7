/* conv.c - cpu kernels of the conv group (see ops.h): conv1d,
 * conv_transpose1d, pad1d, upsample_nearest, lstm.
 *
 * conv1d: depthwise convs (Cin/groups == 1) use a direct threaded loop.
 *   Other stride-1 convs at the AVX-512 level run a register-tile kernel
 *   with no im2col and no BLAS packing: x padded once per chunk of output
 *   columns into [Cin, span] scratch, W repacked to [Cout/6][Cin_g][K][6];
 *   a task computes tiles of 6 output channels x 64 columns (24 zmm
 *   accumulators, bias-initialised), each output one FMA chain over
 *   (ci, k) of broadcast w times the shifted x row. Otherwise: im2col of a
 *   chunk of output columns into arena scratch, then one sgemm (cpu_sgemm) per
 *   (batch, group, chunk): out[Cout_g, n] = W_g[Cout_g, Cin_g*K] @
 *   cols[Cin_g*K, n]; a 1x1 unpadded stride-1 conv reads x in place.
 *   When the arena asks for BF16 products (arena_bf16) and AMX-BF16 is
 *   ready, stride-1 one-group convs run on AMX tiles instead (operands
 *   rounded to bf16, FP32 sums; see "AMX-BF16 path"), and so do one-group
 *   transposed convs, phase by phase.
 * conv_transpose1d: cols[Cout_g*K, n] = W_g^T @ x_g (sgemm), then col2im
 *   overlap-add into the output rows (threaded over output channels, so
 *   no two threads write one row).
 * lstm: the input projection of all time steps is one sgemm; each step
 *   is one threaded pass over blocks of 8 hidden units: four W_hh row dot
 *   products per unit and sequence (AVX2+FMA, written explicitly) and the
 *   cell update of the 8 units in vector lanes (vector exp for sigmoid and
 *   tanh), fused so a step costs one dispatch.
 * Time is processed in chunks so scratch stays bounded (CHUNK_FLOATS)
 * however long the signal is. The F32 paths' results differ from the ref
 * kernels only by float summation order. */
#include <math.h>
#include <string.h>

#include "../backend.h"
#include "../cpu_features.h"
#include "../threadpool.h"
#include "amx_tilecfg.h"
#include "blas.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "avx512_tr16.h"
#endif

/* im2col / col2im scratch per chunk: 2M floats (8 MiB). */
#define CHUNK_FLOATS ((int64_t)1 << 21)

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Grain so that one task touches about 32k floats. */
static int64_t grain_for(int64_t per_item)
{
    return max64(1, ((int64_t)1 << 15) / max64(1, per_item));
}

static struct threadpool *pool(struct arena *a) { return arena_backend(a)->tp; }

/* ---- helpers ------------------------------------------------------------ */

/* Pointer to row r (index over all dims but the innermost) of t. */
static char *row_ptr(const struct tensor *t, int64_t r)
{
    char *p = t->data;
    for (int d = t->ndim - 2; d >= 0; d--) {
        p += (r % t->ne[d]) * t->nb[d];
        r /= t->ne[d];
    }
    return p;
}

/* w as contiguous F32: w itself when it already is, else a converted copy
 * in arena scratch (NULL after an arena failure). */
static const float *weights_f32(struct arena *a, const struct tensor *w)
{
    if (w->type == TYPE_F32 && tensor_is_contiguous(w)) return w->data;
    int64_t n = w->ndim ? w->ne[w->ndim - 1] : 1, rows = tensor_nrows(w);
    float *dst = arena_alloc(a, (size_t)(n * rows) * sizeof *dst);
    if (!dst) return NULL;
    int64_t es = w->ndim ? w->nb[w->ndim - 1] : 0;
    for (int64_t r = 0; r < rows; r++) {
        const char *src = row_ptr(w, r);
        float *o = dst + r * n;
        for (int64_t j = 0; j < n; j++) {
            const char *p = src + j * es;
            switch (w->type) {
            case TYPE_F16: o[j] = fp16_to_f32(*(const uint16_t *)p); break;
            case TYPE_BF16: o[j] = bf16_to_f32(*(const uint16_t *)p); break;
            default: o[j] = *(const float *)p; break;
            }
        }
    }
    return dst;
}

/* Source index for padded position pos of a length-T signal, or -1 where
 * the padding is a constant. */
static int64_t pad_index(int64_t pos, int64_t T, enum pad_mode mode)
{
    if (pos >= 0 && pos < T) return pos;
    if (mode == PAD_REFLECT) return pos < 0 ? -pos : 2 * (T - 1) - pos;
    if (mode == PAD_REPLICATE) return pos < 0 ? 0 : T - 1;
    return -1;
}

/* dst[j] = xpad[pos0 + j*step], j in [0, n), where xpad is the row src
 * (length T, element stride es floats) padded on both sides by mode
 * (constant value for PAD_ZERO). In-range runs are copied without
 * per-element tests. */
static void fetch_row(float *dst, const float *src, int64_t es, int64_t T, int64_t pos0,
                      int64_t step, int64_t n, enum pad_mode mode, float value)
{
    int64_t jlo = pos0 >= 0 ? 0 : (-pos0 + step - 1) / step;
    int64_t jhi = T - 1 - pos0 < 0 ? 0 : (T - 1 - pos0) / step + 1;
    jlo = min64(jlo, n);
    jhi = max64(jlo, min64(jhi, n));
    for (int64_t j = 0; j < jlo; j++) {
        int64_t s = pad_index(pos0 + j * step, T, mode);
        dst[j] = s < 0 ? value : src[s * es];
    }
    if (es == 1 && step == 1) {
        memcpy(dst + jlo, src + pos0 + jlo, (size_t)(jhi - jlo) * sizeof *dst);
    } else {
        const float *p = src + (pos0 + jlo * step) * es;
        int64_t d = step * es;
        for (int64_t j = jlo; j < jhi; j++, p += d) dst[j] = *p;
    }
    for (int64_t j = jhi; j < n; j++) {
        int64_t s = pad_index(pos0 + j * step, T, mode);
        dst[j] = s < 0 ? value : src[s * es];
    }
}

/* x[b, c, :] of a [B, C, T] or [C, T] activation, element stride in *es. */
static const float *act_row(const struct tensor *x, int64_t b, int64_t c, int64_t *es)
{
    int n = x->ndim;
    const char *p = (const char *)x->data + c * x->nb[n - 2];
    if (n == 3) p += b * x->nb[0];
    *es = x->nb[n - 1] / (int64_t)sizeof(float);
    return (const float *)p;
}

/* o[j] += w * s[j*step] for j < n; a plain loop the compiler vectorises,
 * built twice (generic / AVX2) and picked at run time. */
#define AXPY_BODY                                                              \
    if (step == 1)                                                             \
        for (int64_t j = 0; j < n; j++) o[j] += w * s[j];                      \
    else                                                                       \
        for (int64_t j = 0; j < n; j++) o[j] += w * s[j * step];
static void axpy_generic(float *restrict o, const float *restrict s, float w, int64_t step,
                         int64_t n)
{
    AXPY_BODY
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) static void axpy_avx2(float *restrict o,
                                                      const float *restrict s, float w,
                                                      int64_t step, int64_t n)
{
    AXPY_BODY
}
static void axpy(float *o, const float *s, float w, int64_t step, int64_t n)
{
    if (__builtin_cpu_supports("avx2")) axpy_avx2(o, s, w, step, n);
    else axpy_generic(o, s, w, step, n);
}
#else
static void axpy(float *o, const float *s, float w, int64_t step, int64_t n)
{
    axpy_generic(o, s, w, step, n);
}
#endif

/* Rows [0, n) of out-channels: fill row r (n_cols floats at out + r*ld)
 * with bias[r] or 0. */
struct fill_job {
    float *out;
    int64_t ld, n_cols;
    const float *bias;
};
static void fill_rows(void *ctx, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    struct fill_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        float v = j->bias ? j->bias[r] : 0.0f, *o = j->out + r * j->ld;
        for (int64_t t = 0; t < j->n_cols; t++) o[t] = v;
    }
}

/* ---- conv1d ------------------------------------------------------------- */

struct conv_job {
    const struct tensor *x;
    const struct conv1d_params *p;
    const float *w, *bias;
    float *out, *scratch;    /* out: [B, Cout, Tout] contiguous */
    int64_t T, tout, K, cin_g, cout_g, cout, n_need;
    int64_t b, g, t0, tc;    /* im2col: current batch, group, chunk */
};

/* Depthwise / channel-multiplier conv: one task per (batch, out channel). */
static void conv_direct(void *ctx, int64_t r0, int64_t r1, int ith)
{
    const struct conv_job *j = ctx;
    const struct conv1d_params *p = j->p;
    float *xp = j->scratch + ith * j->n_need;
    for (int64_t r = r0; r < r1; r++) {
        int64_t b = r / j->cout, co = r % j->cout, g = co / j->cout_g;
        float *o = j->out + r * j->tout;
        float v = j->bias ? j->bias[co] : 0.0f;
        for (int64_t t = 0; t < j->tout; t++) o[t] = v;
        for (int64_t ci = 0; ci < j->cin_g; ci++) {
            int64_t es;
            const float *src = act_row(j->x, b, g * j->cin_g + ci, &es);
            fetch_row(xp, src, es, j->T, -p->pad_left, 1, j->n_need, p->pad_mode, 0.0f);
            const float *wr = j->w + (co * j->cin_g + ci) * j->K;
            for (int64_t k = 0; k < j->K; k++)
                axpy(o, xp + k * p->dilation, wr[k], p->stride, j->tout);
        }
    }
}

/* im2col rows (ci, k) of the current chunk: cols[ci*K + k][jj] =
 * xpad[(t0 + jj)*stride - pad_left + k*dilation]. */
static void conv_im2col(void *ctx, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct conv_job *j = ctx;
    const struct conv1d_params *p = j->p;
    for (int64_t r = r0; r < r1; r++) {
        int64_t ci = r / j->K, k = r % j->K, es;
        const float *src = act_row(j->x, j->b, j->g * j->cin_g + ci, &es);
        int64_t pos0 = j->t0 * p->stride - p->pad_left + k * p->dilation;
        fetch_row(j->scratch + r * j->tc, src, es, j->T, pos0, p->stride, j->tc, p->pad_mode,
                  0.0f);
    }
}

/* ---- conv1d, direct AVX-512 path (stride 1) ------------------------------ */

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

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
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

/* Stride-1 conv1d at the AVX-512 level through the register-tile kernel
 * (out [B, Cout, Tout] contiguous, w F32 [Cout, Cin_g, K]). Returns false
 * when the path does not apply and nothing was done; true when done or
 * when an arena allocation failed (recorded in the arena). */
static bool conv1d_direct(struct arena *a, struct tensor *out, const struct tensor *x,
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
#else
static bool conv1d_direct(struct arena *a, struct tensor *out, const struct tensor *x,
                          const struct tensor *wt, const float *w, const float *bias,
                          const struct conv1d_params *p, int64_t B)
{
    (void)a, (void)out, (void)x, (void)wt, (void)w, (void)bias, (void)p, (void)B;
    return false;
}
#endif

/* ---- conv1d / conv_transpose1d, AMX-BF16 path -----------------------------
 * Taken when the arena asks for BF16 products (arena_bf16) and AMX-BF16 is
 * ready (cpu_amx_ready), for one-group convs of stride 1:
 *   y[co][t] = bias[co] + sum over taps k and input channels ci of
 *              bf16(W[co][ci][k]) * bf16(xpad[ci][t + k*dil]),
 * operands rounded to nearest even, products and sums in FP32 on 16 x 16
 * tiles. The output tile is time-major: C[t][co] += A[t][ci] * B[ci][co]
 *   A: x of a block of 32 input channels, time-major (x is packed per task
 *      into xw[cb][pos][32] bf16), so the tile of tap k at columns
 *      t..t+15 is the 1 KiB at row t + k*dil: one contiguous, aligned load;
 *      a tap shift is a row offset and nothing is im2col'ed;
 *   B: W in VNNI pairs, packed once per weight tensor into
 *      wp[k][cb][cob][ci pair 16][co 16][2] (contiguous 1 KiB tiles) and
 *      kept in a process-wide cache (below).
 * A task is one block of up to AB_TB output columns (of one batch item and
 * one group of out-channel blocks): it packs its input window (with the
 * conv's padding, channels zero-padded to 32) and then, for each 32
 * columns and each pair of 16-channel output blocks, accumulates four
 * C tiles (2 column halves x 2 channel blocks: each A and B load feeds two
 * products) over all (k, cb), transposes them back to [co][t] and adds the
 * bias. Error: each product carries the two operands' bf16 rounding
 * (<= 2^-8 of |x w|, both together); see core_conv_amx.
 * conv_transpose1d (stride u, dilation 1, one group, u <= K) is the same
 * kernel once per output phase r in [0, u): outputs o = m*u + r - padding
 * take taps k = r + u*j at input m - j only, a stride-1 conv of x with the
 * Kr = ceil((K - r) / u) taps W[ci][co][r + u*j] reversed, written to
 * every u-th output column; all phases run in one parallel loop.
 * (An earlier opt-in path, CBX_AMX=1, split F32 operands into three bf16
 * parts to keep F32 accuracy in a channel-major layout; it saved ~7% of
 * HiFT's CPU time and was removed.) */

#define AB_TB 256  /* most output columns per task (a multiple of 32) */
#define AB_MAX_PH 16 /* most phases (transposed-conv stride) */
#define AB_CACHE_BYTES ((size_t)512 << 20) /* packed weights kept at most */

/* Packed weights of one F32 weight tensor and one phase. */
struct ab_w {
    const float *key;        /* the tensor's data */
    int64_t cout, cin, K, tag; /* tag: 0 conv, else 1 + phase + 256 * stride */
    uint64_t fp;             /* fingerprint of the values (ab_fingerprint) */
    uint16_t *wp;            /* [K][ncb][nco][16][16][2] */
    struct ab_w *next;
};

/* One phase (a plain conv has one): its packed W, taps, output columns,
 * x position of column 0's tap 0 (= -pad_left) and output column of the
 * phase's column 0. */
struct ab_phase {
    const uint16_t *wp;
    int64_t K, M, x0, o0;
};

struct ab_job {
    const struct tensor *x;
    const float *bias;
    float *out;              /* [B, Cout, Tout] contiguous */
    float *rows;             /* per thread [32][lw] floats (fetch scratch) */
    uint16_t *xw;            /* per thread [ncb][lw][32] bf16 */
    enum pad_mode mode;
    int64_t T, tout, cin, cout, ncb, nco, dil, ostep, lw, tb, n_tb, n_cg, cbg, B, nph;
    struct ab_phase ph[AB_MAX_PH];
};

/* W packing: w' [cout][cin][K] of a conv, or of phase r of a transposed
 * conv of stride u: w'[co][ci][k] = w[ci][co][r + u*(K - 1 - k)] (w
 * [cin, cout, Kfull]). */
struct ab_pack {
    const float *w;
    uint16_t *wp;
    int64_t cout, cin, K, ncb, nco, kfull, u, r;
    bool transposed;
};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && defined(__linux__)
#include <pthread.h>
#include <stdlib.h>
#define TGTAMX __attribute__((target("amx-tile,amx-bf16,avx2,fma,avx512f,avx512bw,avx512dq,avx512bf16")))

/* The packed-weight cache: entries keyed by the weight's data pointer,
 * shape and phase, checked against a fingerprint of 1024 values spread
 * over the tensor (so a tensor freed and another allocated at the same
 * address is packed afresh; weights are constant, so a match is the same
 * weights). Entries are never freed while the process runs (a reader holds
 * no lock while it uses one) but at exit; past AB_CACHE_BYTES weights are
 * packed per call into the arena instead. */
static pthread_mutex_t ab_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ab_w *ab_cache;
static size_t ab_cache_bytes;

__attribute__((destructor)) static void ab_cache_free(void)
{
    pthread_mutex_lock(&ab_lock);
    while (ab_cache) {
        struct ab_w *e = ab_cache;
        ab_cache = e->next;
        free(e->wp);
        free(e);
    }
    ab_cache_bytes = 0;
    pthread_mutex_unlock(&ab_lock);
}

static uint64_t ab_fingerprint(const float *w, int64_t n)
{
    uint64_t h = 0xcbf29ce484222325u ^ (uint64_t)n;
    int64_t m = min64(n, 1024);
    for (int64_t i = 0; i < m; i++) {
        uint32_t u;
        memcpy(&u, w + (m > 1 ? i * (n - 1) / (m - 1) : 0), 4);
        h = (h ^ u) * 0x100000001b3u;
    }
    return h;
}

/* the first n of 16 lanes (none for n <= 0) */
static inline __mmask16 lanes(int64_t n) { return (__mmask16)(n <= 0 ? 0 : n >= 16 ? 0xffff : (1u << n) - 1); }

/* bf16 of 16 floats in the low halves of dwords, as f32_to_bf16: round
 * to nearest even, a NaN kept quiet */
TGTAMX static inline __m512i ab_bf16(__m512 f)
{
    const __m512i x = _mm512_castps_si512(f);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                     _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1))));
    r = _mm512_srli_epi32(r, 16);
    return _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
}

/* w' -> wp for the blocks [b0, b1) of 16 out channels: per tile (k, cb),
 * each channel's 32 input channels gathered (zeros past Cout, Cin) and
 * rounded to bf16 pairs, one dword per K pair, then the 16 x 16 dwords
 * transposed into the tile's rows (K pair p: 16 channels x 2). */
TGTAMX static void ab_pack_w(void *ctx, int64_t b0, int64_t b1, int ith)
{
    (void)ith;
    const struct ab_pack *j = ctx;
    /* w' element (co, ci, k) at w[co * sco + ci * sci + (k's tap)]; the
     * callers keep 31 * sci within the gather's 32-bit indices */
    const int64_t sci = j->transposed ? j->cout * j->kfull : j->K, sco = j->transposed ? j->kfull : j->cin * j->K;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i idx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)sci));
    for (int64_t cob = b0; cob < b1; cob++)
        for (int64_t cb = 0; cb < j->ncb; cb++) {
            const int64_t ci0 = cb * 32;
            const __mmask16 m0 = lanes(j->cin - ci0), m1 = lanes(j->cin - ci0 - 16);
            for (int64_t k = 0; k < j->K; k++) {
                const int64_t kw = j->transposed ? j->r + j->u * (j->K - 1 - k) : k; /* w's own tap */
                __m512i r[16];
                for (int c = 0; c < 16; c++) {
                    const int64_t co = cob * 16 + c;
                    if (co >= j->cout) {
                        r[c] = _mm512_setzero_si512();
                        continue;
                    }
                    const float *b = j->w + co * sco + ci0 * sci + kw;
                    __m512 lo = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m0, idx, b, 4);
                    __m512 hi = m1 ? _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m1, idx, b + 16 * sci, 4)
                                   : _mm512_setzero_ps();
                    r[c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(ab_bf16(lo))),
                                              _mm512_cvtepi32_epi16(ab_bf16(hi)), 1);
                }
                avx512_tr16(r);
                uint16_t *t = j->wp + ((k * j->ncb + cb) * j->nco + cob) * 512;
                for (int p = 0; p < 16; p++) _mm512_storeu_si512(t + 32 * p, r[p]);
            }
        }
}

/* Packed weights of pk (pk->wp unset; n: elements of the tensor): from
 * the cache, else packed now (into the cache, or into a when the cache is
 * full). NULL after an allocation failure (recorded in a). */
static const uint16_t *ab_weights(struct arena *a, struct ab_pack *pk, int64_t n)
{
    int64_t tag = pk->transposed ? 1 + pk->r + 256 * pk->u : 0;
    uint64_t fp = ab_fingerprint(pk->w, n);
    pthread_mutex_lock(&ab_lock);
    struct ab_w *e = ab_cache;
    while (e && !(e->key == pk->w && e->cout == pk->cout && e->cin == pk->cin &&
                  e->K == pk->K && e->tag == tag && e->fp == fp))
        e = e->next;
    size_t nb = (size_t)(pk->K * pk->ncb * pk->nco) * 1024;
    bool room = ab_cache_bytes + nb <= AB_CACHE_BYTES;
    if (!e && room) ab_cache_bytes += nb; /* reserved */
    pthread_mutex_unlock(&ab_lock);
    if (e) return e->wp;

    struct ab_w *ne = NULL;
    if (room) {
        ne = malloc(sizeof *ne);
        pk->wp = ne ? aligned_alloc(64, nb) : NULL;
        if (!pk->wp) {
            free(ne);
            pthread_mutex_lock(&ab_lock);
            ab_cache_bytes -= nb;
            pthread_mutex_unlock(&ab_lock);
            arena_fail(a, CBX_ERR_NOMEM, "conv: out of memory for packed weights");
            return NULL;
        }
    } else if (!(pk->wp = arena_alloc(a, nb))) {
        return NULL;
    }
    tp_parallel_for(pool(a), pk->nco, 1, ab_pack_w, pk);
    if (ne) {
        *ne = (struct ab_w){.key = pk->w, .cout = pk->cout, .cin = pk->cin, .K = pk->K,
                            .tag = tag, .fp = fp, .wp = pk->wp};
        pthread_mutex_lock(&ab_lock);
        ne->next = ab_cache;
        ab_cache = ne;
        pthread_mutex_unlock(&ab_lock);
    }
    return pk->wp;
}

/* The input window of a task: xw[cb][pos][32] = bf16 of xpad[cb*32 + c]
 * at x position c0 + pos for pos < n (zero past n up to lw, and for
 * channels past Cin), through rows (32 x lw floats). */
TGTAMX static void ab_pack_x(const struct ab_job *j, int64_t b, int64_t c0, int64_t n,
                             float *rows, uint16_t *xw)
{
    const __m512i il = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                        24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                        16, 0);
    int64_t n16 = (n + 15) / 16 * 16;
    for (int64_t cb = 0; cb < j->ncb; cb++) {
        for (int c = 0; c < 32; c++) {
            int64_t ci = cb * 32 + c, es;
            float *dst = rows + c * j->lw;
            if (ci < j->cin) {
                const float *src = act_row(j->x, b, ci, &es);
                fetch_row(dst, src, es, j->T, c0, 1, n, j->mode, 0.0f);
                memset(dst + n, 0, (size_t)(n16 - n) * sizeof *dst);
            } else {
                memset(dst, 0, (size_t)n16 * sizeof *dst);
            }
        }
        uint16_t *o = xw + cb * j->lw * 32;
        for (int64_t s = 0; s < n16; s += 16) {
            __m512i v[16];
            for (int r = 0; r < 16; r++) { /* lane i: channels 2r, 2r+1 at column s + i */
                __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(rows + (2 * r + 1) * j->lw + s),
                                                 _mm512_loadu_ps(rows + 2 * r * j->lw + s));
                v[r] = _mm512_permutexvar_epi16(il, (__m512i)h);
            }
            avx512_tr16(v);
            for (int i = 0; i < 16; i++) _mm512_storeu_si512(o + (s + i) * 32, v[i]);
        }
        if (n16 < j->lw) memset(o + n16 * 32, 0, (size_t)((j->lw - n16) * 32) * sizeof *o);
    }
}

/* A stored C tile tile[t][co] (16 x 16) -> y[co][t * ystep] for co < nr,
 * t < nt, plus bias (ldy: floats between y's rows). */
TGTAMX static void ab_store(const float *tile, float *y, int64_t ldy, int64_t ystep,
                            const float *bias, int nr, int64_t nt)
{
    if (nt <= 0 || nr <= 0) return;
    __m512i v[16];
    for (int i = 0; i < 16; i++) v[i] = _mm512_load_si512(tile + 16 * i);
    avx512_tr16(v);
    __mmask16 m = (__mmask16)(nt >= 16 ? 0xffffu : (1u << nt) - 1);
    __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                                       13, 14, 15),
                                     _mm512_set1_epi32((int)ystep));
    for (int r = 0; r < nr; r++) {
        __m512 o = _mm512_add_ps(_mm512_castsi512_ps(v[r]), _mm512_set1_ps(bias ? bias[r] : 0.0f));
        if (ystep == 1) _mm512_mask_storeu_ps(y + r * ldy, m, o);
        else _mm512_mask_i32scatter_ps(y + r * ldy, m, idx, o, 4);
    }
}

/* tiles 0-7 all 16 rows x 64 bytes; static, see amx_tilecfg.h (a config
 * built on the stack could lose its stores) */
static const struct amx_tilecfg ab_cfg __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

/* Tasks: (phase, batch item, column block, group of out-channel blocks). */
TGTAMX static void ab_run(void *ctx, int64_t i0, int64_t i1, int ith)
{
    const struct ab_job *j = ctx;
    _tile_loadconfig(&ab_cfg);
    float tmp[4 * 256] __attribute__((aligned(64)));
    float *rows = j->rows + ith * 32 * j->lw;
    uint16_t *xw = j->xw + ith * j->ncb * j->lw * 32;
    const int64_t dil32 = j->dil * 32, lw32 = j->lw * 32, wstep = j->nco * 512;
    for (int64_t i = i0; i < i1; i++) {
        int64_t cg = i % j->n_cg, r = i / j->n_cg, tb = r % j->n_tb;
        int64_t b = r / j->n_tb % j->B;
        const struct ab_phase *ph = j->ph + r / j->n_tb / j->B;
        int64_t t0 = tb * j->tb, tc = min64(j->tb, ph->M - t0);
        if (tc <= 0) continue;
        int64_t cb0 = cg * j->cbg, cb1 = min64(j->nco, cb0 + j->cbg), K = ph->K;
        ab_pack_x(j, b, ph->x0 + t0, tc + (K - 1) * j->dil, rows, xw);
        for (int64_t t = 0; t < tc; t += 32) {
            for (int64_t cob = cb0; cob < cb1; cob += 2) {
                const uint16_t *xa = xw + t * 32, *wb = ph->wp + cob * 512;
                bool two = cob + 1 < cb1;
                _tile_zero(0);
                _tile_zero(2);
                if (two) {
                    _tile_zero(1);
                    _tile_zero(3);
                }
                for (int64_t k = 0; k < K; k++)
                    for (int64_t cb = 0; cb < j->ncb; cb++) {
                        const uint16_t *pa = xa + cb * lw32 + k * dil32;
                        const uint16_t *pw = wb + (k * j->ncb + cb) * wstep;
                        _tile_loadd(4, pa, 64);
                        _tile_loadd(5, pa + 512, 64);
                        _tile_loadd(6, pw, 64);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_dpbf16ps(2, 5, 6);
                        if (two) {
                            _tile_loadd(7, pw + 512, 64);
                            _tile_dpbf16ps(1, 4, 7);
                            _tile_dpbf16ps(3, 5, 7);
                        }
                    }
                _tile_stored(0, tmp, 64);
                _tile_stored(2, tmp + 512, 64);
                if (two) {
                    _tile_stored(1, tmp + 256, 64);
                    _tile_stored(3, tmp + 768, 64);
                }
                for (int q = 0; q < (two ? 2 : 1); q++) {
                    int64_t co0 = (cob + q) * 16;
                    int nr = (int)min64(16, j->cout - co0);
                    float *y = j->out + (b * j->cout + co0) * j->tout + ph->o0 + (t0 + t) * j->ostep;
                    const float *bias = j->bias ? j->bias + co0 : NULL;
                    ab_store(tmp + q * 256, y, j->tout, j->ostep, bias, nr, tc - t);
                    ab_store(tmp + 512 + q * 256, y + 16 * j->ostep, j->tout, j->ostep, bias, nr,
                             tc - t - 16);
                }
            }
        }
    }
    _tile_release();
}

static bool ab_ready(struct arena *a)
{
    return arena_bf16(a) && cpu_amx_ready() && cpu_features()->amx_bf16 &&
           cpu_features()->avx512_bf16 && cpu_features()->avx512bw;
}

/* Blocking and scratch of j (phases set), then the run. */
static void ab_launch(struct arena *a, struct ab_job *j)
{
    struct threadpool *tp = pool(a);
    int64_t nt = tp ? tp_n_threads(tp) : 1, mmax = 0, kmax = 0;
    for (int64_t r = 0; r < j->nph; r++) {
        mmax = max64(mmax, j->ph[r].M);
        kmax = max64(kmax, j->ph[r].K);
    }
    if (mmax <= 0 || j->B <= 0) return;
    /* column blocks of 32..AB_TB columns, about 4 tasks per thread; then
     * out-channel groups (even numbers of 16-channel blocks) when the
     * columns alone give too few tasks */
    int64_t n32 = (mmax + 31) / 32, want = 4 * nt, outer = j->B * j->nph;
    j->tb = 32 * max64(1, min64(AB_TB / 32, n32 * outer / want));
    j->n_tb = (mmax + j->tb - 1) / j->tb;
    int64_t npair = (j->nco + 1) / 2, ng = min64(npair, max64(1, want / (outer * j->n_tb)));
    j->cbg = 2 * ((npair + ng - 1) / ng);
    j->n_cg = (j->nco + j->cbg - 1) / j->cbg;
    j->lw = (j->tb + (kmax - 1) * j->dil + 15) / 16 * 16;
    j->rows = arena_alloc(a, (size_t)(nt * 32 * j->lw) * sizeof(float));
    j->xw = arena_alloc(a, (size_t)(nt * j->ncb * j->lw * 32) * sizeof(uint16_t));
    if (!j->rows || !j->xw) return;
    tp_parallel_for(tp, outer * j->n_tb * j->n_cg, 1, ab_run, j);
}

/* conv1d on AMX-BF16 when the arena asks for BF16 products and it applies
 * (stride 1, one group); false: nothing done. true: done, or an allocation
 * failed (recorded in the arena). */
static bool conv1d_amx(struct arena *a, struct tensor *out, const struct tensor *x,
                       const struct tensor *wt, const float *w, const float *bias,
                       const struct conv1d_params *p, int64_t B)
{
    if (p->stride != 1 || p->groups != 1 || wt->ne[2] > INT32_MAX / 32 || !ab_ready(a)) return false;
    int n = x->ndim;
    struct ab_job j = {
        .x = x, .bias = bias, .out = out->data, .mode = p->pad_mode, .T = x->ne[n - 1],
        .tout = out->ne[n - 1], .cin = x->ne[n - 2], .cout = wt->ne[0], .dil = p->dilation,
        .ostep = 1, .B = B, .nph = 1,
    };
    j.ncb = (j.cin + 31) / 32;
    j.nco = (j.cout + 15) / 16;
    struct ab_pack pk = {.w = w, .cout = j.cout, .cin = j.cin, .K = wt->ne[2], .ncb = j.ncb,
                         .nco = j.nco};
    j.ph[0] = (struct ab_phase){.K = pk.K, .M = j.tout, .x0 = -p->pad_left};
    if (!(j.ph[0].wp = ab_weights(a, &pk, j.cout * j.cin * pk.K))) return true;
    ab_launch(a, &j);
    return true;
}

/* conv_transpose1d on AMX-BF16 by output phases (see above) when the arena
 * asks for BF16 products and it applies (one group, dilation 1, stride u
 * with 1 < u <= K, u <= AB_MAX_PH); false: nothing done. true: done, or an
 * allocation failed (recorded in the arena). */
static bool convt_amx(struct arena *a, struct tensor *out, const struct tensor *x,
                      const struct tensor *wt, const float *w, const float *bias,
                      const struct conv_transpose1d_params *p, int64_t B)
{
    int64_t u = p->stride, K = wt->ne[2];
    if (p->groups != 1 || p->dilation != 1 || u < 1 || u > K || u > AB_MAX_PH ||
        wt->ne[1] * K > INT32_MAX / 32 || !ab_ready(a))
        return false;
    int n = x->ndim;
    struct ab_job j = {
        .x = x, .bias = bias, .out = out->data, .mode = PAD_ZERO, .T = x->ne[n - 1],
        .tout = out->ne[n - 1], .cin = x->ne[n - 2], .cout = wt->ne[1], .dil = 1, .ostep = u,
        .B = B, .nph = u,
    };
    j.ncb = (j.cin + 31) / 32;
    j.nco = (j.cout + 15) / 16;
    for (int64_t r = 0; r < u; r++) {
        /* outputs o = m*u + r - padding for m in [m0, m1]; taps r + u*j,
         * reversed: column m reads x from m - (Kr - 1) */
        int64_t P = p->padding, kr = (K - r + u - 1) / u;
        int64_t m0 = P - r > 0 ? (P - r + u - 1) / u : -((r - P) / u);
        int64_t lim = j.tout - 1 + P - r; /* m*u <= lim */
        int64_t m1 = lim >= 0 ? lim / u : -((-lim + u - 1) / u);
        struct ab_pack pk = {.w = w, .cout = j.cout, .cin = j.cin, .K = kr, .ncb = j.ncb,
                             .nco = j.nco, .kfull = K, .u = u, .r = r, .transposed = true};
        j.ph[r] = (struct ab_phase){.K = kr, .M = max64(0, m1 - m0 + 1), .x0 = m0 - (kr - 1),
                                    .o0 = m0 * u + r - P};
        if (!(j.ph[r].wp = ab_weights(a, &pk, j.cin * j.cout * K))) return true;
    }
    ab_launch(a, &j);
    return true;
}
#else
static bool conv1d_amx(struct arena *a, struct tensor *out, const struct tensor *x,
                       const struct tensor *wt, const float *w, const float *bias,
                       const struct conv1d_params *p, int64_t B)
{
    (void)a, (void)out, (void)x, (void)wt, (void)w, (void)bias, (void)p, (void)B;
    return false;
}
static bool convt_amx(struct arena *a, struct tensor *out, const struct tensor *x,
                      const struct tensor *wt, const float *w, const float *bias,
                      const struct conv_transpose1d_params *p, int64_t B)
{
    (void)a, (void)out, (void)x, (void)wt, (void)w, (void)bias, (void)p, (void)B;
    return false;
}
#endif

static void conv1d(struct arena *a, struct tensor *out, const struct tensor *x,
                   const struct tensor *w, const struct tensor *b,
                   const struct conv1d_params *p)
{
    struct threadpool *tp = pool(a);
    int n = x->ndim;
    int64_t B = n == 3 ? x->ne[0] : 1;
    struct conv_job j = {
        .x = x, .p = p, .bias = b ? b->data : NULL, .out = out->data,
        .T = x->ne[n - 1], .tout = out->ne[n - 1], .K = w->ne[2], .cin_g = w->ne[1],
        .cout = w->ne[0],
    };
    j.cout_g = j.cout / p->groups;
    j.w = weights_f32(a, w);
    if (!j.w) return;
    if (b && !tensor_is_contiguous(b) && !(j.bias = weights_f32(a, b))) return;

    if (j.cin_g == 1) {
        j.n_need = (j.tout - 1) * p->stride + (j.K - 1) * p->dilation + 1;
        int nt = tp ? tp_n_threads(tp) : 1;
        j.scratch = arena_alloc(a, (size_t)(nt * j.n_need) * sizeof(float));
        if (!j.scratch) return;
        tp_parallel_for(tp, B * j.cout, grain_for(j.K * j.tout), conv_direct, &j);
        return;
    }
    if (conv1d_amx(a, out, x, w, j.w, j.bias, p, B)) return;
    if (conv1d_direct(a, out, x, w, j.w, j.bias, p, B)) return;

    int64_t kk = j.cin_g * j.K;
    int64_t es = x->nb[n - 1] / (int64_t)sizeof(float), ld = x->nb[n - 2] / (int64_t)sizeof(float);
    bool in_place = j.K == 1 && p->stride == 1 && p->pad_left == 0 && p->pad_right == 0 &&
                    es == 1 && x->nb[n - 2] % (int64_t)sizeof(float) == 0 && ld >= j.T;
    int64_t chunk = in_place ? j.tout : min64(j.tout, max64(128, CHUNK_FLOATS / kk));
    if (!in_place) {
        j.scratch = arena_alloc(a, (size_t)(kk * chunk) * sizeof(float));
        if (!j.scratch) return;
    }
    for (j.b = 0; j.b < B; j.b++)
        for (j.g = 0; j.g < p->groups; j.g++) {
            const float *wg = j.w + j.g * j.cout_g * kk;
            float *og = j.out + (j.b * j.cout + j.g * j.cout_g) * j.tout;
            for (j.t0 = 0; j.t0 < j.tout; j.t0 += chunk) {
                j.tc = min64(chunk, j.tout - j.t0);
                const float *cols = j.scratch;
                int64_t ldb = j.tc;
                if (in_place) {
                    int64_t unused;
                    cols = act_row(x, j.b, j.g * j.cin_g, &unused);
                    ldb = ld;
                } else {
                    tp_parallel_for(tp, kk, grain_for(j.tc), conv_im2col, &j);
                }
                float beta = 0.0f;
                if (j.bias) {
                    struct fill_job f = {og + j.t0, j.tout, j.tc, j.bias + j.g * j.cout_g};
                    tp_parallel_for(tp, j.cout_g, grain_for(j.tc), fill_rows, &f);
                    beta = 1.0f;
                }
                cpu_sgemm(tp, CblasNoTrans, CblasNoTrans, (int)j.cout_g,
                            (int)j.tc, (int)kk, 1.0f, wg, (int)kk, cols, (int)ldb, beta,
                            og + j.t0, (int)j.tout);
            }
        }
}

/* ---- conv_transpose1d --------------------------------------------------- */

struct convt_job {
    const struct tensor *x;
    const struct conv_transpose1d_params *p;
    float *out, *cols, *xs;
    int64_t T, tout, K, cin_g, cout_g, cout;
    int64_t b, g, t0, tc;
};

/* Pack x[b, g*cin_g + r, t0 .. t0+tc) into xs rows (for strided inputs). */
static void convt_pack(void *ctx, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct convt_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        int64_t es;
        const float *src = act_row(j->x, j->b, j->g * j->cin_g + r, &es);
        fetch_row(j->xs + r * j->tc, src, es, j->T, j->t0, 1, j->tc, PAD_ZERO, 0.0f);
    }
}

/* Overlap-add: out[co][(t0+jj)*stride - padding + k*dilation] +=
 * cols[co*K + k][jj], one task per output channel of the group. */
static void convt_col2im(void *ctx, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct convt_job *j = ctx;
    const struct conv_transpose1d_params *p = j->p;
    int64_t s = p->stride;
    for (int64_t co = r0; co < r1; co++) {
        float *o = j->out + (j->b * j->cout + j->g * j->cout_g + co) * j->tout;
        for (int64_t k = 0; k < j->K; k++) {
            const float *c = j->cols + (co * j->K + k) * j->tc;
            int64_t base = j->t0 * s - p->padding + k * p->dilation; /* output of jj = 0 */
            int64_t jlo = base >= 0 ? 0 : (-base + s - 1) / s;
            int64_t jhi = j->tout - 1 - base < 0 ? 0 : (j->tout - 1 - base) / s + 1;
            jlo = min64(jlo, j->tc);
            jhi = max64(jlo, min64(jhi, j->tc));
            float *ob = o + base + jlo * s;
            const float *cb = c + jlo;
            if (s == 1) {
                for (int64_t jj = 0; jj < jhi - jlo; jj++) ob[jj] += cb[jj];
            } else {
                for (int64_t jj = 0; jj < jhi - jlo; jj++) ob[jj * s] += cb[jj];
            }
        }
    }
}

static void conv_transpose1d(struct arena *a, struct tensor *out, const struct tensor *x,
                             const struct tensor *w, const struct tensor *b,
                             const struct conv_transpose1d_params *p)
{
    struct threadpool *tp = pool(a);
    int n = x->ndim;
    int64_t B = n == 3 ? x->ne[0] : 1;
    struct convt_job j = {
        .x = x, .p = p, .out = out->data, .T = x->ne[n - 1], .tout = out->ne[n - 1],
        .K = w->ne[2], .cout_g = w->ne[1],
    };
    j.cin_g = w->ne[0] / p->groups;
    j.cout = j.cout_g * p->groups;
    const float *wf = weights_f32(a, w);
    const float *bias = b ? (tensor_is_contiguous(b) ? b->data : weights_f32(a, b)) : NULL;
    if (!wf || (b && !bias)) return;
    if (convt_amx(a, out, x, w, wf, bias, p, B)) return;

    struct fill_job f = {j.out, j.tout, j.tout, NULL};
    for (int64_t bi = 0; bi < B; bi++) {
        f.out = j.out + bi * j.cout * j.tout;
        f.bias = bias;
        tp_parallel_for(tp, j.cout, grain_for(j.tout), fill_rows, &f);
    }

    int64_t m = j.cout_g * j.K;
    int64_t es = x->nb[n - 1] / (int64_t)sizeof(float), ld = x->nb[n - 2] / (int64_t)sizeof(float);
    int64_t chunk = min64(j.T, max64(64, CHUNK_FLOATS / m));
    bool direct = es == 1 && x->nb[n - 2] % (int64_t)sizeof(float) == 0 && ld >= chunk;
    j.cols = arena_alloc(a, (size_t)(m * chunk) * sizeof(float));
    if (!direct) j.xs = arena_alloc(a, (size_t)(j.cin_g * chunk) * sizeof(float));
    if (!j.cols || (!direct && !j.xs)) return;

    for (j.b = 0; j.b < B; j.b++)
        for (j.g = 0; j.g < p->groups; j.g++) {
            const float *wg = wf + j.g * j.cin_g * m; /* rows ci of the group: [cin_g, m] */
            for (j.t0 = 0; j.t0 < j.T; j.t0 += chunk) {
                j.tc = min64(chunk, j.T - j.t0);
                const float *xb;
                int64_t ldb;
                if (direct) {
                    int64_t unused;
                    xb = act_row(x, j.b, j.g * j.cin_g, &unused) + j.t0;
                    ldb = ld;
                } else {
                    tp_parallel_for(tp, j.cin_g, grain_for(j.tc), convt_pack, &j);
                    xb = j.xs;
                    ldb = j.tc;
                }
                /* cols[m, tc] = W_g^T[m, cin_g] @ x_g[cin_g, tc] */
                cpu_sgemm(tp, CblasTrans, CblasNoTrans, (int)m, (int)j.tc,
                            (int)j.cin_g, 1.0f, wg, (int)m, xb, (int)ldb, 0.0f, j.cols,
                            (int)j.tc);
                tp_parallel_for(tp, j.cout_g, grain_for(j.K * j.tc), convt_col2im, &j);
            }
        }
}

/* ---- pad1d, upsample_nearest ------------------------------------------- */

struct rows_job {
    const struct tensor *x;
    float *out;
    int64_t T, tout;
    int left, factor;
    enum pad_mode mode;
    float value;
    const int64_t *idx;
};

static void pad_rows(void *ctx, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct rows_job *j = ctx;
    int64_t es = j->x->nb[j->x->ndim - 1] / (int64_t)sizeof(float);
    for (int64_t r = r0; r < r1; r++)
        fetch_row(j->out + r * j->tout, (const float *)row_ptr(j->x, r), es, j->T, -j->left, 1,
                  j->tout, j->mode, j->value);
}

static void pad1d(struct arena *a, struct tensor *out, const struct tensor *x, int left,
                  int right, enum pad_mode mode, float value)
{
    (void)right;
    int n = x->ndim;
    struct rows_job j = {.x = x, .out = out->data, .T = x->ne[n - 1], .tout = out->ne[n - 1],
                         .left = left, .mode = mode, .value = value};
    tp_parallel_for(pool(a), tensor_nrows(x), grain_for(j.tout), pad_rows, &j);
}

static void upsample_rows(void *ctx, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct rows_job *j = ctx;
    int64_t es = j->x->nb[j->x->ndim - 1] / (int64_t)sizeof(float);
    for (int64_t r = r0; r < r1; r++) {
        const float *src = (const float *)row_ptr(j->x, r);
        float *o = j->out + r * j->tout;
        for (int64_t t = 0; t < j->tout; t++) o[t] = src[j->idx[t] * es];
    }
}

static void upsample_nearest(struct arena *a, struct tensor *out, const struct tensor *x,
                             int factor)
{
    int n = x->ndim;
    struct rows_job j = {.x = x, .out = out->data, .T = x->ne[n - 1], .tout = out->ne[n - 1],
                         .factor = factor};
    int64_t *idx = arena_alloc(a, (size_t)j.tout * sizeof *idx);
    if (!idx) return;
    /* source index as torch computes it (UpSample.h nearest_idx): exact for
     * factors 1 and 2, else floorf(t * (float)(1/factor)), clamped */
    float scale = (float)(1.0 / factor);
    for (int64_t t = 0; t < j.tout; t++) {
        int64_t s = factor == 1 ? t : factor == 2 ? t >> 1 : (int64_t)floorf((float)t * scale);
        idx[t] = min64(s, j.T - 1);
    }
    j.idx = idx;
    tp_parallel_for(pool(a), tensor_nrows(x), grain_for(j.tout), upsample_rows, &j);
}

/* ---- lstm --------------------------------------------------------------- */

/* r[q] = w[q * stride .. + n) . h for the four gate rows q = i, f, g, o of
 * one hidden unit (stride = H*H floats between them). */
typedef void (*dot4_fn)(const float *w, int64_t stride, const float *h, int64_t n, float *r);

static void dot4_generic(const float *w, int64_t stride, const float *h, int64_t n, float *r)
{
    for (int q = 0; q < 4; q++) {
        const float *row = w + q * stride;
        float s = 0.0f;
        for (int64_t i = 0; i < n; i++) s += row[i] * h[i];
        r[q] = s;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma"))) static float hsum256(__m256 s)
{
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}
/* h is loaded once per 8 lanes for all four rows. */
__attribute__((target("avx2,fma"))) static void dot4_avx2(const float *w, int64_t stride,
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
static dot4_fn pick_dot4(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? dot4_avx2
                                                                           : dot4_generic;
}
#else
static dot4_fn pick_dot4(void) { return dot4_generic; }
#endif

/* Cell update of n <= 8 hidden units from their gate pre-activations
 * pre[q*8 + u] (q = i, f, g, o): c' = sigmoid(f)*c + sigmoid(i)*tanh(g),
 * h' = sigmoid(o)*tanh(c'); c[u] updated in place, h[u] written. */
typedef void (*gates_fn)(const float *pre, float *c, float *h, int n);

struct lstm_job {
    const float *gx;       /* [B*T, 4H]: x_t @ W_ih^T + b_ih + b_hh */
    const float *whh;      /* [4H, H] */
    const float *h_prev;   /* [B, H] h_{t-1} */
    float *h_next, *c;     /* [B, H] h_t (other buffer), c updated in place */
    float *out;            /* [B, T, H] */
    int64_t B, T, H, t;
    dot4_fn dot4;
    gates_fn gates;
};

static float sigmoidf(float v) { return 1.0f / (1.0f + expf(-v)); }

static void gates_generic(const float *pre, float *c, float *h, int n)
{
    for (int u = 0; u < n; u++) {
        float ig = sigmoidf(pre[u]), fg = sigmoidf(pre[8 + u]);
        float gg = tanhf(pre[16 + u]), og = sigmoidf(pre[24 + u]);
        c[u] = fg * c[u] + ig * gg;
        h[u] = og * tanhf(c[u]);
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
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

__attribute__((target("avx2,fma"))) static void gates_avx2(const float *pre, float *c, float *h,
                                                          int n)
{
    __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n),
                                   _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 ig = sigmoid8(_mm256_loadu_ps(pre)), fg = sigmoid8(_mm256_loadu_ps(pre + 8));
    __m256 gg = tanh8(_mm256_loadu_ps(pre + 16)), og = sigmoid8(_mm256_loadu_ps(pre + 24));
    __m256 cv = _mm256_fmadd_ps(fg, _mm256_maskload_ps(c, m), _mm256_mul_ps(ig, gg));
    _mm256_maskstore_ps(c, m, cv);
    _mm256_maskstore_ps(h, m, _mm256_mul_ps(og, tanh8(cv)));
}
static gates_fn pick_gates(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? gates_avx2
                                                                           : gates_generic;
}
#else
static gates_fn pick_gates(void) { return gates_generic; }
#endif

/* One time step for hidden units [k0, k1): the four gate rows of each unit
 * (i, f, g, o at k, H+k, 2H+k, 3H+k) dotted with h_{t-1} of every
 * sequence, then the cell update of blocks of 8 units in vector lanes.
 * Units are independent given h_{t-1}, which is read-only during the step
 * (h is double buffered), so tasks never share a written element. */
static void lstm_step(void *ctx, int64_t k0, int64_t k1, int ith)
{
    (void)ith;
    const struct lstm_job *j = ctx;
    int64_t H = j->H;
    float pre[32], hv[8];
    for (int64_t kb = k0; kb < k1; kb += 8) {
        int n = (int)min64(8, k1 - kb);
        for (int64_t b = 0; b < j->B; b++) {
            const float *gx = j->gx + (b * j->T + j->t) * 4 * H;
            for (int u = 0; u < n; u++) {
                float d[4];
                int64_t k = kb + u;
                j->dot4(j->whh + k * H, H * H, j->h_prev + b * H, H, d);
                for (int q = 0; q < 4; q++) pre[q * 8 + u] = gx[q * H + k] + d[q];
            }
            for (int u = n; u < 8; u++)
                for (int q = 0; q < 4; q++) pre[q * 8 + u] = 0.0f;
            j->gates(pre, j->c + b * H + kb, hv, n);
            memcpy(j->h_next + b * H + kb, hv, (size_t)n * sizeof *hv);
            memcpy(j->out + (b * j->T + j->t) * H + kb, hv, (size_t)n * sizeof *hv);
        }
    }
}

/* Tasks over blocks of 8 hidden units (so the vector lanes never straddle
 * two tasks' units). */
static void lstm_blocks(void *ctx, int64_t r0, int64_t r1, int ith)
{
    const struct lstm_job *j = ctx;
    lstm_step(ctx, r0 * 8, min64(r1 * 8, j->H), ith);
}

/* Copy a [B, H] state view (or zeros) into contiguous dst. */
static void load_state(float *dst, const struct tensor *s, int64_t B, int64_t H)
{
    if (!s) {
        memset(dst, 0, (size_t)(B * H) * sizeof *dst);
        return;
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < H; k++)
            dst[b * H + k] = *(const float *)((const char *)s->data + b * s->nb[0] + k * s->nb[1]);
}

static void lstm(struct arena *a, struct tensor *out, struct tensor *h_n, struct tensor *c_n,
                 const struct tensor *x, const struct tensor *w_ih,
                 const struct tensor *w_hh, const struct tensor *b_ih,
                 const struct tensor *b_hh, const struct tensor *h0, const struct tensor *c0)
{
    struct threadpool *tp = pool(a);
    int64_t B = x->ne[0], T = x->ne[1], In = x->ne[2], H = w_hh->ne[1], G = 4 * H;
    const float *wih = weights_f32(a, w_ih), *whh = weights_f32(a, w_hh);
    const float *bih = b_ih ? weights_f32(a, b_ih) : NULL;
    const float *bhh = b_hh ? weights_f32(a, b_hh) : NULL;
    const float *xs = tensor_is_contiguous(x) ? x->data : weights_f32(a, x);
    float *gx = arena_alloc(a, (size_t)(max64(1, B * T) * G) * sizeof(float));
    float *h = arena_alloc(a, (size_t)(2 * B * H) * sizeof(float));
    float *c = arena_alloc(a, (size_t)(B * H) * sizeof(float));
    if (!wih || !whh || (b_ih && !bih) || (b_hh && !bhh) || !xs || !gx || !h || !c) return;
    load_state(h, h0, B, H);
    load_state(c, c0, B, H);

    if (T > 0) {
            /* gx[b*T + t] = x_t @ W_ih^T + b_ih + b_hh, all steps at once */
        for (int64_t r = 0; r < B * T; r++)
            for (int64_t k = 0; k < G; k++)
                gx[r * G + k] = (bih ? bih[k] : 0.0f) + (bhh ? bhh[k] : 0.0f);
        cpu_sgemm(tp, CblasNoTrans, CblasTrans, (int)(B * T), (int)G, (int)In,
                    1.0f, xs, (int)In, wih, (int)In, 1.0f, gx, (int)G);
    }
    struct lstm_job j = {.gx = gx, .whh = whh, .c = c, .out = out->data, .B = B, .T = T,
                         .H = H, .dot4 = pick_dot4(), .gates = pick_gates()};
    float *hb[2] = {h, h + B * H};
    for (j.t = 0; j.t < T; j.t++) {
        j.h_prev = hb[j.t & 1];
        j.h_next = hb[(j.t + 1) & 1];
        tp_parallel_for(tp, (H + 7) / 8, max64(1, grain_for(4 * H * B) / 8), lstm_blocks, &j);
    }
    if (h_n) memcpy(h_n->data, hb[T & 1], (size_t)(B * H) * sizeof(float));
    if (c_n) memcpy(c_n->data, c, (size_t)(B * H) * sizeof(float));
}

void cpu_register_conv(struct kernels *k)
{
    k->conv1d = conv1d;
    k->conv_transpose1d = conv_transpose1d;
    k->pad1d = pad1d;
    k->upsample_nearest = upsample_nearest;
    k->lstm = lstm;
}
