/* conv.c - cpu kernels of the conv group (see ops.h): conv1d,
 * conv_transpose1d, pad1d, upsample_nearest, lstm.
 *
 * conv1d: depthwise convs (Cin/groups == 1) use a direct threaded loop.
 *   Other stride-1 convs at the AVX-512 level run a register-tile kernel
 *   (conv_avx512.c) with no im2col and no BLAS packing: x padded once per chunk of output
 *   columns into [Cin, span] scratch, W repacked to [Cout/6][Cin_g][K][6];
 *   a task computes tiles of 6 output channels x 64 columns (24 zmm
 *   accumulators, bias-initialised), each output one FMA chain over
 *   (ci, k) of broadcast w times the shifted x row. Otherwise: im2col of a
 *   chunk of output columns into arena scratch, then one sgemm (cpu_sgemm) per
 *   (batch, group, chunk): out[Cout_g, n] = W_g[Cout_g, Cin_g*K] @
 *   cols[Cin_g*K, n]; a 1x1 unpadded stride-1 conv reads x in place.
 *   When the arena asks for BF16 products (arena_bf16) and AMX-BF16 or
 *   AVX512-BF16 is ready, stride-1 one-group convs run with BF16 products
 *   instead (operands rounded to bf16, FP32 sums; see conv_bf16.c), and so
 *   do one-group transposed convs, phase by phase.
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
#include "blas.h"
#include "conv_kernels.h"

/* ---- helpers ------------------------------------------------------------ */

/* Pointer to row r (index over all dims but the innermost) of t. */
static char *row_ptr(const struct tensor *t, int64_t r) { return (char *)t->data + tensor_row_offset(t, r); }

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

/* AXPY_BODY (conv_kernels.h), generic or AVX2, picked at run time */
static void axpy_generic(float *restrict o, const float *restrict s, float w, int64_t step,
                         int64_t n)
{
    AXPY_BODY
}
static void axpy(float *o, const float *s, float w, int64_t step, int64_t n)
{
#ifdef CONV_X86
    if (__builtin_cpu_supports("avx2")) {
        conv_axpy_avx2(o, s, w, step, n);
        return;
    }
#endif
    axpy_generic(o, s, w, step, n);
}

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
#ifdef CONV_BF16
    if (conv_conv1d_bf16(a, out, x, w, j.w, j.bias, p, B)) return;
#endif
#ifdef CONV_X86
    if (conv_conv1d_avx512(a, out, x, w, j.w, j.bias, p, B)) return;
#endif

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
#ifdef CONV_BF16
    if (conv_convt_bf16(a, out, x, w, wf, bias, p, B)) return;
#endif

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

static dot4_fn pick_dot4(void)
{
#ifdef CONV_X86
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return conv_dot4_avx2;
#endif
    return dot4_generic;
}

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

static gates_fn pick_gates(void)
{
#ifdef CONV_X86
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return conv_gates_avx2;
#endif
    return gates_generic;
}

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
