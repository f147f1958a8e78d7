/* conv.c - ref kernels of the conv group (see ops.h): conv1d,
 * conv_transpose1d, pad1d, upsample_nearest, lstm.
 *
 * Naive scalar loops written straight from the PyTorch definitions, one
 * output element at a time, accumulating in double. They read every
 * operand through its strides and every weight type through ref_ld(), so they
 * double as the reference the cpu kernels are tested against. */
#include <math.h>

#include "ref.h"

static float ld1(const struct tensor *t, int64_t i0) { return ref_ld(t, (int64_t[]){i0}); }
static float ld2(const struct tensor *t, int64_t i0, int64_t i1)
{
    return ref_ld(t, (int64_t[]){i0, i1});
}
static float ld3(const struct tensor *t, int64_t i0, int64_t i1, int64_t i2)
{
    return ref_ld(t, (int64_t[]){i0, i1, i2});
}

/* x[b, c, t] for a [B, C, T] or [C, T] activation. */
static float act(const struct tensor *x, int64_t b, int64_t c, int64_t t)
{
    return x->ndim == 3 ? ld3(x, b, c, t) : ld2(x, c, t);
}
static float *act_out(const struct tensor *o, int64_t b, int64_t c, int64_t t)
{
    char *p = (char *)o->data + c * o->nb[o->ndim - 2] + t * o->nb[o->ndim - 1];
    if (o->ndim == 3) p += b * o->nb[0];
    return (float *)p;
}

/* Index into the unpadded signal of length T for padded position pos
 * (pos < 0 or >= T lies in the padding), or -1 for a zero/constant. */
static int64_t pad_index(int64_t pos, int64_t T, enum pad_mode mode)
{
    if (pos >= 0 && pos < T) return pos;
    switch (mode) {
    case PAD_REFLECT: /* edge sample not repeated: x[-1] = x[1] */
        return pos < 0 ? -pos : 2 * (T - 1) - pos;
    case PAD_REPLICATE:
        return pos < 0 ? 0 : T - 1;
    default:
        return -1;
    }
}

static void conv1d(struct arena *a, struct tensor *out, const struct tensor *x,
                   const struct tensor *w, const struct tensor *b,
                   const struct conv1d_params *p)
{
    (void)a;
    int64_t B = x->ndim == 3 ? x->ne[0] : 1, T = x->ne[x->ndim - 1];
    int64_t cout = w->ne[0], cin_g = w->ne[1], K = w->ne[2];
    int64_t cout_g = cout / p->groups, tout = out->ne[out->ndim - 1];
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t co = 0; co < cout; co++) {
            int64_t g = co / cout_g;
            for (int64_t t = 0; t < tout; t++) {
                double acc = b ? ld1(b, co) : 0.0;
                for (int64_t ci = 0; ci < cin_g; ci++)
                    for (int64_t k = 0; k < K; k++) {
                        int64_t pos = t * p->stride - p->pad_left + k * p->dilation;
                        int64_t src = pad_index(pos, T, p->pad_mode);
                        if (src < 0) continue;
                        acc += (double)ld3(w, co, ci, k) * act(x, bi, g * cin_g + ci, src);
                    }
                *act_out(out, bi, co, t) = (float)acc;
            }
        }
}

static void conv_transpose1d(struct arena *a, struct tensor *out, const struct tensor *x,
                             const struct tensor *w, const struct tensor *b,
                             const struct conv_transpose1d_params *p)
{
    (void)a;
    int64_t B = x->ndim == 3 ? x->ne[0] : 1, T = x->ne[x->ndim - 1];
    int64_t cin = w->ne[0], cout_g = w->ne[1], K = w->ne[2];
    int64_t cin_g = cin / p->groups, cout = cout_g * p->groups;
    int64_t tout = out->ne[out->ndim - 1];
    /* out[t] gathers x[s] * w[k] over all s, k with s*stride - padding + k*dilation = t */
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t co = 0; co < cout; co++) {
            int64_t g = co / cout_g, col = co % cout_g;
            for (int64_t t = 0; t < tout; t++) {
                double acc = b ? ld1(b, co) : 0.0;
                for (int64_t k = 0; k < K; k++) {
                    int64_t num = t + p->padding - k * p->dilation;
                    if (num < 0 || num % p->stride) continue;
                    int64_t s = num / p->stride;
                    if (s >= T) continue;
                    for (int64_t ci = g * cin_g; ci < (g + 1) * cin_g; ci++)
                        acc += (double)ld3(w, ci, col, k) * act(x, bi, ci, s);
                }
                *act_out(out, bi, co, t) = (float)acc;
            }
        }
}

/* Row r of the leading dims of t (all but the innermost), as an index. */
static void row_index(const struct tensor *t, int64_t r, int64_t *i)
{
    for (int d = t->ndim - 2; d >= 0; d--) {
        i[d] = r % t->ne[d];
        r /= t->ne[d];
    }
}

static void pad1d(struct arena *a, struct tensor *out, const struct tensor *x, int left,
                  int right, enum pad_mode mode, float value)
{
    (void)a;
    (void)right;
    int n = x->ndim;
    int64_t T = x->ne[n - 1], rows = tensor_nrows(x), tout = out->ne[n - 1];
    int64_t i[TENSOR_MAX_DIMS];
    for (int64_t r = 0; r < rows; r++) {
        row_index(x, r, i);
        float *o = (float *)out->data + r * tout;
        for (int64_t t = 0; t < tout; t++) {
            int64_t src = pad_index(t - left, T, mode);
            if (src < 0) {
                o[t] = value;
            } else {
                i[n - 1] = src;
                o[t] = ref_ld(x, i);
            }
        }
    }
}

/* Source index of output t, computed as torch does (UpSample.h
 * nearest_idx: exact for factors 1 and 2, else floorf(t * (float)(1/f))
 * clamped), so that any float rounding at huge t is reproduced too. */
static int64_t nearest_src(int64_t t, int factor, int64_t T)
{
    if (factor == 1) return t;
    if (factor == 2) return t >> 1;
    float scale = (float)(1.0 / factor);
    int64_t s = (int64_t)floorf((float)t * scale);
    return s < T - 1 ? s : T - 1;
}

static void upsample_nearest(struct arena *a, struct tensor *out, const struct tensor *x,
                             int factor)
{
    (void)a;
    int n = x->ndim;
    int64_t rows = tensor_nrows(x), tout = out->ne[n - 1];
    int64_t i[TENSOR_MAX_DIMS];
    for (int64_t r = 0; r < rows; r++) {
        row_index(x, r, i);
        float *o = (float *)out->data + r * tout;
        for (int64_t t = 0; t < tout; t++) {
            i[n - 1] = nearest_src(t, factor, x->ne[n - 1]);
            o[t] = ref_ld(x, i);
        }
    }
}

static double sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

static void lstm(struct arena *a, struct tensor *out, struct tensor *h_n, struct tensor *c_n,
                 const struct tensor *x, const struct tensor *w_ih,
                 const struct tensor *w_hh, const struct tensor *b_ih,
                 const struct tensor *b_hh, const struct tensor *h0, const struct tensor *c0)
{
    int64_t B = x->ne[0], T = x->ne[1], In = x->ne[2], H = w_hh->ne[1];
    float *h = arena_alloc(a, (size_t)H * sizeof *h);
    float *c = arena_alloc(a, (size_t)H * sizeof *c);
    float *hn = arena_alloc(a, (size_t)H * sizeof *hn);
    double *gate = arena_alloc(a, (size_t)(4 * H) * sizeof *gate);
    if (!h || !c || !hn || !gate) return;
    for (int64_t bi = 0; bi < B; bi++) {
        for (int64_t j = 0; j < H; j++) {
            h[j] = h0 ? ld2(h0, bi, j) : 0.0f;
            c[j] = c0 ? ld2(c0, bi, j) : 0.0f;
        }
        for (int64_t t = 0; t < T; t++) {
            /* gates = W_ih x_t + b_ih + W_hh h_{t-1} + b_hh, rows i, f, g, o */
            for (int64_t r = 0; r < 4 * H; r++) {
                double s = 0;
                if (b_ih) s += ld1(b_ih, r);
                if (b_hh) s += ld1(b_hh, r);
                for (int64_t k = 0; k < In; k++) s += (double)ld2(w_ih, r, k) * ld3(x, bi, t, k);
                for (int64_t k = 0; k < H; k++) s += (double)ld2(w_hh, r, k) * h[k];
                gate[r] = s;
            }
            for (int64_t j = 0; j < H; j++) {
                double ig = sigmoid(gate[j]), fg = sigmoid(gate[H + j]);
                double gg = tanh(gate[2 * H + j]), og = sigmoid(gate[3 * H + j]);
                double cj = fg * c[j] + ig * gg;
                c[j] = (float)cj;
                hn[j] = (float)(og * tanh(cj));
            }
            float *o = (float *)out->data + (bi * T + t) * H;
            for (int64_t j = 0; j < H; j++) o[j] = h[j] = hn[j];
        }
        for (int64_t j = 0; j < H; j++) {
            if (h_n) ((float *)h_n->data)[bi * H + j] = h[j];
            if (c_n) ((float *)c_n->data)[bi * H + j] = c[j];
        }
    }
}

void ref_register_conv(struct kernels *k)
{
    k->conv1d = conv1d;
    k->conv_transpose1d = conv_transpose1d;
    k->pad1d = pad1d;
    k->upsample_nearest = upsample_nearest;
    k->lstm = lstm;
}
