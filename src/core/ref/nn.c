/* nn.c - ref kernels of the nn group: norms, softmax, attention, rotary.
 *
 * Naive scalar loops, single thread, any strides: the reference the cpu
 * kernels are tested against. Sums and exponentials are taken in double,
 * so these are at least as accurate as the float32 PyTorch ops they stand
 * for; the rotary angles alone are float32, as HF computes them (the
 * rounding of pos * inv_freq is part of the model's behaviour).
 * Semantics as documented in ops.h and ops_nn.c. */
#include <math.h>

#include "../backend.h"
#include "../quant.h"
#include "../scalar.h"

/* element i of a per-channel parameter vector (F32/F16/BF16) */
static float pget(const struct tensor *v, int64_t i)
{
    const char *p = (const char *)v->data + i * v->nb[0];
    switch (v->type) {
    case TYPE_F16: return fp16_to_f32(*(const uint16_t *)p);
    case TYPE_BF16: return bf16_to_f32(*(const uint16_t *)p);
    default: return *(const float *)p;
    }
}

static float xget(const struct tensor *t, int64_t row, int64_t i)
{
    return *(const float *)((const char *)t->data + tensor_row_offset(t, row) + i * t->nb[t->ndim - 1]);
}

/* out is contiguous: row r starts at r * D */
static float *orow(struct tensor *out, int64_t r)
{
    return (float *)out->data + r * out->ne[out->ndim - 1];
}

static void ref_layer_norm(struct arena *a, struct tensor *out, const struct tensor *x,
                           const struct tensor *g, const struct tensor *b, float eps)
{
    (void)a;
    int64_t n = x->ne[x->ndim - 1], rows = tensor_nrows(x);
    for (int64_t r = 0; r < rows; r++) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n; i++) mean += xget(x, r, i);
        mean /= (double)n;
        for (int64_t i = 0; i < n; i++) {
            double d = xget(x, r, i) - mean;
            var += d * d;
        }
        var /= (double)n; /* biased, as torch */
        double rstd = 1.0 / sqrt(var + eps);
        float *y = orow(out, r);
        for (int64_t i = 0; i < n; i++) {
            double v = (xget(x, r, i) - mean) * rstd;
            if (g) v *= pget(g, i);
            if (b) v += pget(b, i);
            y[i] = (float)v;
        }
    }
}

/* sum = x + r in float (as the ref add), then the layer norm of sum */
static void ref_add_layer_norm(struct arena *a, struct tensor *sum, struct tensor *out,
                               const struct tensor *x, const struct tensor *r,
                               const struct tensor *g, const struct tensor *b, float eps)
{
    int64_t n = x->ne[x->ndim - 1], rows = tensor_nrows(x);
    for (int64_t k = 0; k < rows; k++) {
        float *s = orow(sum, k);
        for (int64_t i = 0; i < n; i++) s[i] = xget(x, k, i) + xget(r, k, i);
    }
    ref_layer_norm(a, out, sum, g, b, eps);
}

static void ref_rms_norm(struct arena *a, struct tensor *out, const struct tensor *x,
                         const struct tensor *g, float eps)
{
    (void)a;
    int64_t n = x->ne[x->ndim - 1], rows = tensor_nrows(x);
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t i = 0; i < n; i++) {
            double v = xget(x, r, i);
            ss += v * v;
        }
        double rstd = 1.0 / sqrt(ss / (double)n + eps);
        float *y = orow(out, r);
        for (int64_t i = 0; i < n; i++) {
            double v = xget(x, r, i) * rstd;
            if (g) v *= pget(g, i);
            y[i] = (float)v;
        }
    }
}

static void ref_group_norm(struct arena *a, struct tensor *out, const struct tensor *x,
                           int n_groups, const struct tensor *g, const struct tensor *b,
                           float eps)
{
    (void)a;
    int three = x->ndim == 3;
    int64_t B = three ? x->ne[0] : 1, C = x->ne[three], T = x->ne[three + 1];
    int64_t nbb = three ? x->nb[0] : 0, nbc = x->nb[three], nbt = x->nb[three + 1];
    int64_t cg = C / n_groups;
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t gi = 0; gi < n_groups; gi++) {
            const char *base = (const char *)x->data + bi * nbb + gi * cg * nbc;
            double mean = 0, var = 0;
            for (int64_t c = 0; c < cg; c++)
                for (int64_t t = 0; t < T; t++)
                    mean += *(const float *)(base + c * nbc + t * nbt);
            mean /= (double)(cg * T);
            for (int64_t c = 0; c < cg; c++)
                for (int64_t t = 0; t < T; t++) {
                    double d = *(const float *)(base + c * nbc + t * nbt) - mean;
                    var += d * d;
                }
            var /= (double)(cg * T);
            double rstd = 1.0 / sqrt(var + eps);
            for (int64_t c = 0; c < cg; c++) {
                int64_t ch = gi * cg + c;
                float *y = (float *)out->data + (bi * C + ch) * T;
                for (int64_t t = 0; t < T; t++) {
                    double v = (*(const float *)(base + c * nbc + t * nbt) - mean) * rstd;
                    if (g) v *= pget(g, ch);
                    if (b) v += pget(b, ch);
                    y[t] = (float)v;
                }
            }
        }
}

static void ref_channel_affine(struct arena *a, struct tensor *out, const struct tensor *x,
                               int dim, const struct tensor *scale,
                               const struct tensor *shift)
{
    (void)a;
    int64_t n = tensor_nelements(x);
    float *y = out->data;
    for (int64_t e = 0; e < n; e++) {
        /* unravel e over x's shape */
        int64_t rem = e, off = 0, c = 0;
        for (int d = x->ndim - 1; d >= 0; d--) {
            int64_t i = rem % x->ne[d];
            rem /= x->ne[d];
            off += i * x->nb[d];
            if (d == dim) c = i;
        }
        float v = *(const float *)((const char *)x->data + off);
        y[e] = (float)((double)v * pget(scale, c) + pget(shift, c));
    }
}

static void ref_softmax(struct arena *a, struct tensor *out, const struct tensor *x,
                        float scale)
{
    (void)a;
    int64_t n = x->ne[x->ndim - 1], rows = tensor_nrows(x);
    for (int64_t r = 0; r < rows; r++) {
        float *y = orow(out, r);
        double m = -INFINITY;
        for (int64_t i = 0; i < n; i++) {
            double v = (double)(xget(x, r, i) * scale); /* torch: x * scale in float */
            if (v > m) m = v;
        }
        /* As torch: all -inf gives exp(-inf - -inf) = NaN, and a NaN
         * entry makes the sum NaN; either way the whole row is NaN. */
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += exp((double)(xget(x, r, i) * scale) - m);
        for (int64_t i = 0; i < n; i++)
            y[i] = (float)(exp((double)(xget(x, r, i) * scale) - m) / sum);
    }
}

/* element of a 4-D F32 or F16 tensor (an F16 KV cache) */
/* element of an F32, F16 or Q8_0 (k, v of a KV cache) 4-D tensor; Q8_0
 * rows are contiguous blocks, element = d * q as dequantize_row */
static float at4(const struct tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3)
{
    const char *r = (const char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2];
    if (t->type == TYPE_Q8_0) {
        const struct block_q8_0 *b = (const struct block_q8_0 *)r + i3 / QK;
        return (float)b->qs[i3 % QK] * fp16_to_f32(b->d);
    }
    const char *p = r + i3 * t->nb[3];
    return t->type == TYPE_F16 ? fp16_to_f32(*(const uint16_t *)p) : *(const float *)p;
}

static void ref_attention(struct arena *a, struct tensor *out, const struct tensor *q,
                          const struct tensor *k, const struct tensor *v,
                          const struct tensor *bias, const struct attn_params *p)
{
    int64_t B = q->ne[0], Hq = q->ne[1], Tq = q->ne[2], D = q->ne[3];
    int64_t Hk = k->ne[1], Tk = k->ne[2], group = Hq / Hk;
    double *s = arena_alloc_host(a, (size_t)(Tk > 0 ? Tk : 1) * sizeof *s);
    double *o = arena_alloc_host(a, (size_t)(D > 0 ? D : 1) * sizeof *o);
    if (!s || !o) return;
    float *y = out->data;
    const struct attn_probs *pr = p->probs; /* optional export (ops.h) */
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            int64_t hk = h / group;
            for (int64_t i = 0; i < Tq; i++) {
                float *pe = pr && b == pr->b && h == pr->h && i >= pr->i0 && i < pr->i0 + pr->n
                                ? pr->dst + (i - pr->i0) * pr->ld : NULL;
                int64_t last = p->causal ? Tk - Tq + i : Tk - 1; /* last visible key */
                double m = -INFINITY;
                for (int64_t j = 0; j < Tk; j++) {
                    if (j > last) { s[j] = -INFINITY; continue; }
                    double dot = 0;
                    for (int64_t d = 0; d < D; d++)
                        dot += (double)at4(q, b, h, i, d) * at4(k, b, hk, j, d);
                    s[j] = dot * p->scale;
                    if (bias) s[j] += at4(bias, b, h, i, j);
                    if (s[j] > m) m = s[j];
                }
                for (int64_t d = 0; d < D; d++) o[d] = 0;
                float *yr = y + ((b * Hq + h) * Tq + i) * D;
                if (m == -INFINITY) { /* sees no key: zeros (ops_nn.c, convention 2) */
                    for (int64_t d = 0; d < D; d++) yr[d] = 0;
                    if (pe)
                        for (int64_t j = 0; j < Tk; j++) pe[j] = 0;
                    continue;
                }
                double sum = 0;
                for (int64_t j = 0; j < Tk; j++) {
                    s[j] = exp(s[j] - m);
                    sum += s[j];
                }
                if (pe)
                    for (int64_t j = 0; j < Tk; j++) pe[j] = (float)(s[j] / sum);
                for (int64_t j = 0; j < Tk; j++)
                    if (s[j] != 0)
                        for (int64_t d = 0; d < D; d++) o[d] += s[j] * at4(v, b, hk, j, d);
                for (int64_t d = 0; d < D; d++) yr[d] = (float)(o[d] / sum);
            }
        }
}


static void ref_rope(struct arena *a, struct tensor *out, const struct tensor *x,
                     const struct tensor *pos, const struct rope_params *p)
{
    (void)a;
    int64_t B = x->ne[0], H = x->ne[1], T = x->ne[2], D = x->ne[3];
    int half = p->n_dims / 2;
    float *y = out->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                float ps = (float)*(const int32_t *)((const char *)pos->data + t * pos->nb[0]);
                float *yr = y + ((b * H + h) * T + t) * D;
                for (int i = 0; i < half; i++) {
                    float ang = ps * scalar_rope_inv_freq(p, i); /* float32, as HF */
                    float c = (float)cos((double)ang), s = (float)sin((double)ang);
                    float x0 = at4(x, b, h, t, i), x1 = at4(x, b, h, t, i + half);
                    /* q * cos + rotate_half(q) * sin */
                    yr[i] = x0 * c + (-x1) * s;
                    yr[i + half] = x1 * c + x0 * s;
                }
                for (int64_t d = p->n_dims; d < D; d++) yr[d] = at4(x, b, h, t, d);
            }
}

void ref_register_nn(struct kernels *k)
{
    k->layer_norm = ref_layer_norm;
    k->add_layer_norm = ref_add_layer_norm;
    k->rms_norm = ref_rms_norm;
    k->group_norm = ref_group_norm;
    k->channel_affine = ref_channel_affine;
    k->softmax = ref_softmax;
    k->attention = ref_attention;
    k->rope = ref_rope;
}
