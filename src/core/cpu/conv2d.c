/* conv2d.c - cpu kernel of the conv2d group (see ops.h, op_conv2d).
 *
 * im2col of a chunk of whole output rows into arena scratch, then one
 * cpu_sgemm per (batch, group, chunk):
 *   out[Cout_g, rows*Wout] = W_g[Cout_g, Cin_g*KH*KW] @ cols[Cin_g*KH*KW, rows*Wout].
 * The im2col rows (ci, kh, kw) are filled by the thread pool. Chunks keep
 * the scratch at about CHUNK_FLOATS however large the image. Results
 * differ from the ref kernel only by float summation order. */
#include <string.h>

#include "../backend.h"
#include "../threadpool.h"
#include "blas.h"

/* im2col scratch per chunk: 256k floats (1 MiB, cache-sized; sgemm still
 * gets hundreds of columns per call). */
#define CHUNK_FLOATS ((int64_t)1 << 18)

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* w as contiguous F32: w itself when it already is, else a converted copy
 * in arena scratch (NULL after an arena failure). */
static const float *weights_f32(struct arena *a, const struct tensor *w)
{
    if (w->type == TYPE_F32 && tensor_is_contiguous(w)) return w->data;
    int64_t n = tensor_nelements(w);
    float *dst = arena_alloc(a, (size_t)n * sizeof *dst);
    if (!dst) return NULL;
    for (int64_t e = 0; e < n; e++) {
        const char *p = w->data;
        int64_t r = e;
        for (int d = w->ndim - 1; d >= 0; d--) {
            p += (r % w->ne[d]) * w->nb[d];
            r /= w->ne[d];
        }
        switch (w->type) {
        case TYPE_F16: dst[e] = fp16_to_f32(*(const uint16_t *)p); break;
        case TYPE_BF16: dst[e] = bf16_to_f32(*(const uint16_t *)p); break;
        default: dst[e] = *(const float *)p; break;
        }
    }
    return dst;
}

struct conv2d_job {
    const struct tensor *x;
    const struct conv2d_params *p;
    float *cols;
    int64_t H, W, wout, KH, KW, cin_g;
    int64_t b, g, i0, rows; /* current batch, group, first output row, rows */
};

/* cols[(ci*KH + kh)*KW + kw][r*Wout + j] = x[b, g*Cin_g + ci,
 * (i0 + r)*sh - ph + kh*dh, j*sw - pw + kw*dw], 0 outside the image. */
static void im2col_rows(void *ctx, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct conv2d_job *j = ctx;
    const struct conv2d_params *p = j->p;
    const struct tensor *x = j->x;
    int nd = x->ndim;
    int64_t es = x->nb[nd - 1] / (int64_t)sizeof(float);
    int64_t kk = j->KH * j->KW;
    for (int64_t r = r0; r < r1; r++) {
        int64_t ci = r / kk, kh = (r % kk) / j->KW, kw = r % j->KW;
        const char *plane = (const char *)x->data + (j->g * j->cin_g + ci) * x->nb[nd - 3];
        if (nd == 4) plane += j->b * x->nb[0];
        /* output columns jj whose input column jj*sw - pw + kw*dw is inside */
        int64_t off = kw * p->dilation_w - p->pad_w;
        int64_t jlo = off >= 0 ? 0 : (-off + p->stride_w - 1) / p->stride_w;
        int64_t jhi = j->W - 1 - off < 0 ? 0 : (j->W - 1 - off) / p->stride_w + 1;
        jlo = min64(jlo, j->wout);
        jhi = max64(jlo, min64(jhi, j->wout));
        float *dst = j->cols + r * j->rows * j->wout;
        for (int64_t ri = 0; ri < j->rows; ri++, dst += j->wout) {
            int64_t h = (j->i0 + ri) * p->stride_h - p->pad_h + kh * p->dilation_h;
            if (h < 0 || h >= j->H) {
                memset(dst, 0, (size_t)j->wout * sizeof *dst);
                continue;
            }
            const float *src = (const float *)(plane + h * x->nb[nd - 2]);
            for (int64_t jj = 0; jj < jlo; jj++) dst[jj] = 0.0f;
            if (es == 1 && p->stride_w == 1) {
                memcpy(dst + jlo, src + jlo + off, (size_t)(jhi - jlo) * sizeof *dst);
            } else {
                for (int64_t jj = jlo; jj < jhi; jj++)
                    dst[jj] = src[(jj * p->stride_w + off) * es];
            }
            for (int64_t jj = jhi; jj < j->wout; jj++) dst[jj] = 0.0f;
        }
    }
}

struct fill_job {
    float *out;
    int64_t ld, n;
    const float *bias;
};
static void fill_rows(void *ctx, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    struct fill_job *f = ctx;
    for (int64_t r = r0; r < r1; r++) {
        float v = f->bias[r], *o = f->out + r * f->ld;
        for (int64_t t = 0; t < f->n; t++) o[t] = v;
    }
}

static void conv2d(struct arena *a, struct tensor *out, const struct tensor *x,
                   const struct tensor *w, const struct tensor *b,
                   const struct conv2d_params *p)
{
    struct threadpool *tp = arena_backend(a)->tp;
    int nd = x->ndim;
    int64_t B = nd == 4 ? x->ne[0] : 1;
    int64_t cout = w->ne[0], hout = out->ne[nd - 2];
    struct conv2d_job j = {
        .x = x, .p = p, .H = x->ne[nd - 2], .W = x->ne[nd - 1], .wout = out->ne[nd - 1],
        .KH = w->ne[2], .KW = w->ne[3], .cin_g = w->ne[1],
    };
    int64_t cout_g = cout / p->groups, kk = j.cin_g * j.KH * j.KW, plane = hout * j.wout;
    const float *wf = weights_f32(a, w);
    const float *bias = NULL;
    if (b) bias = weights_f32(a, b);
    if (!wf || (b && !bias)) return;
    int64_t chunk_rows = min64(hout, max64(1, CHUNK_FLOATS / (kk * j.wout)));
    j.cols = arena_alloc(a, (size_t)(kk * chunk_rows * j.wout) * sizeof(float));
    if (!j.cols) return;
    int64_t grain = max64(1, ((int64_t)1 << 15) / max64(1, chunk_rows * j.wout));
    for (j.b = 0; j.b < B; j.b++)
        for (j.g = 0; j.g < p->groups; j.g++) {
            const float *wg = wf + j.g * cout_g * kk;
            float *og = (float *)out->data + (j.b * cout + j.g * cout_g) * plane;
            for (j.i0 = 0; j.i0 < hout; j.i0 += chunk_rows) {
                j.rows = min64(chunk_rows, hout - j.i0);
                int64_t n = j.rows * j.wout;
                tp_parallel_for(tp, kk, grain, im2col_rows, &j);
                float beta = 0.0f;
                if (bias) {
                    struct fill_job f = {og + j.i0 * j.wout, plane, n, bias + j.g * cout_g};
                    tp_parallel_for(tp, cout_g, grain, fill_rows, &f);
                    beta = 1.0f;
                }
                cpu_sgemm(tp, CblasNoTrans, CblasNoTrans, (int)cout_g, (int)n,
                            (int)kk, 1.0f, wg, (int)kk, j.cols, (int)n, beta,
                            og + j.i0 * j.wout, (int)plane);
            }
        }
}

void cpu_register_conv2d(struct kernels *k) { k->conv2d = conv2d; }
