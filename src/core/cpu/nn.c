/* nn.c - cpu kernels of the nn group: norms, softmax, fused attention,
 * rotary embedding (semantics in ops.h and ops_nn.c).
 *
 * Rows are spread over the backend's thread pool; the inner loops are
 * "primitives" (struct prims, nn_kernels.h) with a portable version here
 * and an AVX2+FMA version (nn_avx2.c), picked per call from cpu_level()
 * (so tests can force the portable path with cpu_set_level). At the
 * AVX-512 level attention has its own drivers (nn_avx512.c: attn_rows_z
 * for decode-like calls, attn_tiles_z with register-tiled products).
 * Strided rows are first gathered into the contiguous output row and the
 * primitive then works in place there.
 *
 * Attention (portable and AVX2) is flash-style: for a block of up to QB
 * query rows of one head, keys are visited in blocks of KB; scores of one
 * block are kept in a per-thread [QB, KB] tile, the running max m, normaliser l and output
 * accumulator O[QB, D] are rescaled as each block arrives (online softmax),
 * so no [Tq, Tk] matrix exists. Work items are (batch, head, query block).
 * Invariants:
 *  1. A row whose running max is still -inf has l = 0 and O = 0; its score
 *     row is zeroed before the P.V product so it contributes nothing.
 *  2. Per-thread scratch is indexed by the pool's thread index; kernels are
 *     not run from inside another pool job (ops are called by model code on
 *     the arena's single thread). */
#include <math.h>
#include <string.h>

#include "../backend.h"
#include "../cpu_features.h"
#include "../quant.h"
#include "../threadpool.h"
#include "attn_bf16.h"
#include "nn_kernels.h"

/* ---- primitives --------------------------------------------------------- */

static float g_sum(const float *x, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    return s;
}
static float g_sumsq_dev(const float *x, int64_t n, float mean)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += (x[i] - mean) * (x[i] - mean);
    return s;
}
static void g_norm(float *y, const float *x, int64_t n, float mean, float rstd,
                   const float *g, const float *b)
{
    for (int64_t i = 0; i < n; i++) {
        float v = (x[i] - mean) * rstd;
        if (g) v *= g[i];
        if (b) v += b[i];
        y[i] = v;
    }
}
static void g_affine(float *y, const float *x, int64_t n, float mul, float add)
{
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * mul + add;
}
static float g_scale_max(float *y, const float *x, int64_t n, float s, int *nan)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        y[i] = x[i] * s;
        if (isnan(y[i])) *nan = 1;
        if (y[i] > m) m = y[i];
    }
    return m;
}
static float g_max(const float *x, int64_t n)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}
static float g_exp_sum(float *y, int64_t n, float m)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++) {
        y[i] = expf(y[i] - m);
        s += y[i];
    }
    return s;
}
static void g_scal(float *y, int64_t n, float s)
{
    for (int64_t i = 0; i < n; i++) y[i] *= s;
}
static void g_qk(const float *const *q, int nq, const char *k0, int64_t ks, int nk,
                 int64_t D, float scale, float *S, int lds)
{
    for (int r = 0; r < nq; r++)
        for (int j = 0; j < nk; j++) {
            const float *kj = (const float *)(k0 + j * ks);
            float s = 0;
            for (int64_t d = 0; d < D; d++) s += q[r][d] * kj[d];
            S[r * lds + j] = s * scale;
        }
}
static void g_pv(float *O, int64_t ldo, const float *P, int ldp, int nq, const char *v0,
                 int64_t vs, int nk, int64_t D)
{
    for (int r = 0; r < nq; r++)
        for (int j = 0; j < nk; j++) {
            float p = P[r * ldp + j];
            if (p == 0) continue;
            const float *vj = (const float *)(v0 + j * vs);
            for (int64_t d = 0; d < D; d++) O[r * ldo + d] += p * vj[d];
        }
}

static const struct prims prims_generic = {
    g_sum, g_sumsq_dev, g_norm, g_affine, g_scale_max, g_max, g_exp_sum, g_scal, g_qk, g_pv,
};

/* The primitives of the SIMD level in use now (cpu_features.h). */
static const struct prims *prims_now(void)
{
#ifdef NN_X86
    enum cpu_level l = cpu_level();
    if (l >= CPU_AVX2) return &nn_prims_avx2;
#endif
    return &prims_generic;
}

/* ---- helpers ------------------------------------------------------------ */

/* Row r of x as contiguous floats: in place when its innermost stride is
 * 4 bytes, else gathered into y (the output row). */
static const float *src_row(const struct tensor *x, int64_t r, float *y)
{
    const char *p = (const char *)x->data + tensor_row_offset(x, r);
    int64_t n = x->ne[x->ndim - 1], s = x->nb[x->ndim - 1];
    if (s == (int64_t)sizeof(float)) return (const float *)p;
    for (int64_t i = 0; i < n; i++) y[i] = *(const float *)(p + i * s);
    return y;
}

/* A per-channel parameter as contiguous F32 (converted into arena scratch
 * unless it already is); NULL stays NULL. */
static const float *param_f32(struct arena *a, const struct tensor *v)
{
    if (!v) return NULL;
    if (v->type == TYPE_F32 && v->nb[0] == (int64_t)sizeof(float)) return v->data;
    float *f = arena_alloc_host(a, (size_t)v->ne[0] * sizeof *f + 1);
    if (!f) return NULL;
    for (int64_t i = 0; i < v->ne[0]; i++) {
        const char *p = (const char *)v->data + i * v->nb[0];
        switch (v->type) {
        case TYPE_F16: f[i] = fp16_to_f32(*(const uint16_t *)p); break;
        case TYPE_BF16: f[i] = bf16_to_f32(*(const uint16_t *)p); break;
        default: f[i] = *(const float *)p; break;
        }
    }
    return f;
}

/* rows per chunk so that a chunk holds about 16K elements */
static int64_t row_grain(int64_t n) { return n >= 16384 ? 1 : 16384 / (n > 0 ? n : 1); }

/* fn(c) over the rows of x on the arena's pool, unless the arena has
 * failed (param_f32 fails it) */
static void for_rows(struct arena *a, const struct tensor *x, tp_fn fn, void *c)
{
    if (arena_status(a) != CBX_OK) return;
    tp_parallel_for(pool(a), tensor_nrows(x), row_grain(x->ne[x->ndim - 1]), fn, c);
}

/* ---- norms, affine, softmax ---------------------------------------------- */

struct rows_ctx;
/* out row r (y) from x's row r (xr, n elements) */
typedef void (*row_fn)(const struct rows_ctx *k, int64_t r, float *y, const float *xr, int64_t n);

struct rows_ctx {
    const struct prims *P;
    const struct tensor *x;
    struct tensor *out;
    const float *g, *b;
    float eps, scale;
    int dim, n_groups;
    row_fn row; /* each_row's */
};

/* k->row over rows [r0, r1) of x into out (contiguous F32) */
static void each_row(void *c, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct rows_ctx *k = c;
    const int64_t n = k->x->ne[k->x->ndim - 1];
    for (int64_t r = r0; r < r1; r++) {
        float *y = (float *)k->out->data + r * n;
        k->row(k, r, y, src_row(k->x, r, y), n);
    }
}

/* y = LayerNorm(x) of one row of n (g, b may be NULL) */
static void layer_norm_row(const struct prims *P, float *y, const float *x, int64_t n, float eps,
                           const float *g, const float *b)
{
    float mean = P->sum(x, n) / (float)n;
    float var = P->sumsq_dev(x, n, mean) / (float)n;
    P->norm(y, x, n, mean, 1.0f / sqrtf(var + eps), g, b);
}

static void layer_norm_one(const struct rows_ctx *k, int64_t r, float *y, const float *xr, int64_t n)
{
    (void)r;
    layer_norm_row(k->P, y, xr, n, k->eps, k->g, k->b);
}

static void cpu_layer_norm(struct arena *a, struct tensor *out, const struct tensor *x,
                           const struct tensor *g, const struct tensor *b, float eps)
{
    struct rows_ctx c = {.P = prims_now(), .x = x, .out = out, .g = param_f32(a, g),
                         .b = param_f32(a, b), .eps = eps, .row = layer_norm_one};
    for_rows(a, x, each_row, &c);
}

/* op_add_layer_norm: per row, s = x + r (float adds, as op_add) written
 * to sum, then layer_norm_row's arithmetic on s while it is in cache. */
struct add_ln_ctx {
    const struct prims *P;
    const struct tensor *x, *r;
    struct tensor *sum, *out;
    const float *g, *b;
    float eps;
};

static void add_layer_norm_rows(void *c, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct add_ln_ctx *k = c;
    int64_t n = k->x->ne[k->x->ndim - 1];
    for (int64_t r = r0; r < r1; r++) {
        float *s = (float *)k->sum->data + r * n, *y = (float *)k->out->data + r * n;
        const float *x = src_row(k->x, r, s);
        const float *q = src_row(k->r, r, y);
        for (int64_t i = 0; i < n; i++) s[i] = x[i] + q[i];
        layer_norm_row(k->P, y, s, n, k->eps, k->g, k->b);
    }
}

static void cpu_add_layer_norm(struct arena *a, struct tensor *sum, struct tensor *out,
                               const struct tensor *x, const struct tensor *r,
                               const struct tensor *g, const struct tensor *b, float eps)
{
    struct add_ln_ctx c = {.P = prims_now(), .x = x, .r = r, .sum = sum, .out = out,
                           .g = param_f32(a, g), .b = param_f32(a, b), .eps = eps};
    for_rows(a, x, add_layer_norm_rows, &c);
}

/* HF LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then weight * that. */
static void rms_norm_one(const struct rows_ctx *k, int64_t r, float *y, const float *xr, int64_t n)
{
    (void)r;
    float var = k->P->sumsq_dev(xr, n, 0.0f) / (float)n;
    k->P->norm(y, xr, n, 0.0f, 1.0f / sqrtf(var + k->eps), k->g, NULL);
}

static void cpu_rms_norm(struct arena *a, struct tensor *out, const struct tensor *x,
                         const struct tensor *g, float eps)
{
    struct rows_ctx c = {.P = prims_now(), .x = x, .out = out, .g = param_f32(a, g), .eps = eps, .row = rms_norm_one};
    for_rows(a, x, each_row, &c);
}

/* One (batch, group) per index; x viewed as rows of T (one per channel). */
static void group_norm_items(void *c, int64_t i0, int64_t i1, int ith)
{
    (void)ith;
    const struct rows_ctx *k = c;
    const struct prims *P = k->P;
    int64_t C = k->x->ne[k->x->ndim - 2], T = k->x->ne[k->x->ndim - 1];
    int64_t cg = C / k->n_groups;
    for (int64_t it = i0; it < i1; it++) {
        int64_t r0 = it * cg; /* first row (= b*C + channel) of the group */
        double sum = 0, ss = 0;
        for (int64_t c2 = 0; c2 < cg; c2++) {
            float *y = (float *)k->out->data + (r0 + c2) * T;
            sum += P->sum(src_row(k->x, r0 + c2, y), T);
        }
        float mean = (float)(sum / (double)(cg * T));
        for (int64_t c2 = 0; c2 < cg; c2++) {
            float *y = (float *)k->out->data + (r0 + c2) * T;
            ss += P->sumsq_dev(src_row(k->x, r0 + c2, y), T, mean);
        }
        float rstd = 1.0f / sqrtf((float)(ss / (double)(cg * T)) + k->eps);
        for (int64_t c2 = 0; c2 < cg; c2++) {
            int64_t ch = (r0 + c2) % C;
            float *y = (float *)k->out->data + (r0 + c2) * T;
            float mul = rstd * (k->g ? k->g[ch] : 1.0f);
            float add = (k->b ? k->b[ch] : 0.0f) - mean * mul;
            P->affine(y, src_row(k->x, r0 + c2, y), T, mul, add);
        }
    }
}

static void cpu_group_norm(struct arena *a, struct tensor *out, const struct tensor *x,
                           int n_groups, const struct tensor *g, const struct tensor *b,
                           float eps)
{
    struct rows_ctx c = {.P = prims_now(), .x = x, .out = out, .g = param_f32(a, g),
                         .b = param_f32(a, b), .eps = eps, .n_groups = n_groups};
    if (arena_status(a) != CBX_OK) return;
    int64_t items = tensor_nrows(x) / x->ne[x->ndim - 2] * n_groups;
    tp_parallel_for(pool(a), items, 1, group_norm_items, &c);
}

static void channel_affine_one(const struct rows_ctx *k, int64_t r, float *y, const float *xr, int64_t n)
{
    const struct tensor *x = k->x;
    const int last = x->ndim - 1;
    if (k->dim == last) {
        for (int64_t i = 0; i < n; i++) y[i] = xr[i] * k->g[i] + k->b[i];
    } else {
        int64_t ch = r;
        for (int d = last - 1; d > k->dim; d--) ch /= x->ne[d];
        ch %= x->ne[k->dim];
        k->P->affine(y, xr, n, k->g[ch], k->b[ch]);
    }
}

static void cpu_channel_affine(struct arena *a, struct tensor *out, const struct tensor *x,
                               int dim, const struct tensor *scale,
                               const struct tensor *shift)
{
    struct rows_ctx c = {.P = prims_now(), .x = x, .out = out, .g = param_f32(a, scale),
                         .b = param_f32(a, shift), .dim = dim, .row = channel_affine_one};
    for_rows(a, x, each_row, &c);
}

static void softmax_one(const struct rows_ctx *k, int64_t r, float *y, const float *xr, int64_t n)
{
    (void)r;
    const struct prims *P = k->P;
    int nan = 0;
    float m = P->scale_max(y, xr, n, k->scale, &nan);
    if (nan || !isfinite(m)) { /* torch gives NaN (ops_nn.c, convention 2) */
        for (int64_t i = 0; i < n; i++) y[i] = NAN;
        return;
    }
    P->scal(y, n, 1.0f / P->exp_sum(y, n, m));
}

static void cpu_softmax(struct arena *a, struct tensor *out, const struct tensor *x, float scale)
{
    struct rows_ctx c = {.P = prims_now(), .x = x, .out = out, .scale = scale, .row = softmax_one};
    for_rows(a, x, each_row, &c);
}

/* ---- attention ------------------------------------------------------------ */

enum { QB_MAX = 32, KB = 64 };

static void attn_items(void *c, int64_t it0, int64_t it1, int ith)
{
    const struct attn_ctx *x = c;
    const struct prims *P = x->P;
    const struct tensor *k = x->k, *v = x->v, *bias = x->bias;
    const int64_t D = x->D, Tq = x->Tq, Tk = x->Tk;
    float *S = x->scratch + ith * x->per_thread; /* [QB_MAX, KB] */
    float *O = S + QB_MAX * KB;                  /* [QB_MAX, D] */
    float m[QB_MAX], l[QB_MAX];
    const float *qr[QB_MAX];
    for (int64_t it = it0; it < it1; it++) {
        int64_t b, h, hk, i0;
        const int nq = attn_item_begin(x, it, &b, &h, &hk, &i0, qr, m, l);
        memset(O, 0, (size_t)nq * (size_t)D * sizeof *O);
        /* query i sits at absolute position Tk - Tq + i */
        int64_t shift = Tk - Tq, kend = Tk;
        if (x->p->causal && shift + i0 + nq < kend) kend = shift + i0 + nq;
        const char *kb = (const char *)k->data + b * k->nb[0] + hk * k->nb[1];
        const char *vb = (const char *)v->data + b * v->nb[0] + hk * v->nb[1];
        for (int64_t j0 = 0; j0 < kend; j0 += KB) {
            int nk = (int)(kend - j0 < KB ? kend - j0 : KB);
            P->qk(qr, nq, kb + j0 * k->nb[2], k->nb[2], nk, D, x->p->scale, S, KB);
            for (int r = 0; r < nq; r++) {
                float *s = S + r * KB;
                if (bias) {
                    const char *br = (const char *)bias->data + b * bias->nb[0] +
                                     h * bias->nb[1] + (i0 + r) * bias->nb[2] + j0 * bias->nb[3];
                    int64_t bs = bias->nb[3];
                    if (bs == (int64_t)sizeof(float)) {
                        const float *bf = (const float *)br;
                        for (int j = 0; j < nk; j++) s[j] += bf[j];
                    } else {
                        for (int j = 0; j < nk; j++) s[j] += *(const float *)(br + j * bs);
                    }
                }
                if (x->p->causal) /* keys after shift + i0 + r are masked */
                    for (int64_t j = shift + i0 + r + 1 - j0; j < nk; j++)
                        if (j >= 0) s[j] = -INFINITY;
                float mnew = P->max(s, nk);
                if (m[r] > mnew) mnew = m[r];
                if (mnew == -INFINITY) { /* invariant 1 */
                    memset(s, 0, (size_t)nk * sizeof *s);
                    continue;
                }
                float corr = expf(m[r] - mnew); /* 0 when m was -inf */
                float sum = P->exp_sum(s, nk, mnew);
                l[r] = l[r] * corr + sum;
                if (corr != 1.0f) P->scal(O + r * D, D, corr);
                m[r] = mnew;
            }
            P->pv(O, D, S, KB, nq, vb + j0 * v->nb[2], v->nb[2], nk, D);
        }
        for (int r = 0; r < nq; r++) {
            float *y = (float *)x->out->data + ((b * x->Hq + h) * Tq + i0 + r) * D;
            if (l[r] > 0) {
                float inv = 1.0f / l[r];
                for (int64_t d = 0; d < D; d++) y[d] = O[r * D + d] * inv;
            } else { /* sees no key: zeros (ops_nn.c, convention 2) */
                memset(y, 0, (size_t)D * sizeof *y);
            }
        }
    }
}

struct q8_deq_ctx { const struct tensor *t; float *dst; bool z; };

static void q8_deq_rows(void *p, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct q8_deq_ctx *c = p;
    const struct tensor *t = c->t;
    const int64_t n = t->ne[3];
    for (int64_t r = r0; r < r1; r++) {
        int64_t i2 = r % t->ne[2], i1 = (r / t->ne[2]) % t->ne[1], i0 = r / (t->ne[2] * t->ne[1]);
        const char *src = (const char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2];
#ifdef NN_X86
        if (c->z) {
            nn_q8_row_f32_avx512(src, c->dst + r * n, n);
            continue;
        }
#endif
        dequantize_row(TYPE_Q8_0, src, c->dst + r * n, n);
    }
}

/* A Q8_0 t (rows contiguous by definition) dequantised to a contiguous F32
 * copy (dequantize_row's floats), rows spread over the pool. */
static const struct tensor *q8_rows_f32(struct arena *a, const struct tensor *t)
{
    struct tensor c = tensor_make(TYPE_F32, 4, t->ne, NULL, t->be);
    c.data = arena_alloc(a, tensor_nbytes(&c) + 1);
    if (!c.data) return NULL;
    struct q8_deq_ctx x = {t, c.data, false};
#ifdef NN_X86
    x.z = cpu_level() >= CPU_AVX512;
#endif
    int64_t rows = t->ne[0] * t->ne[1] * t->ne[2];
    if (rows > 0 && t->ne[3] > 0) tp_parallel_for(pool(a), rows, 1 + 4096 / t->ne[3], q8_deq_rows, &x);
    return arena_desc(a, &c);
}

/* A copy of t with unit innermost stride (t itself when it has one), of
 * t's type (F32 or F16), or converted to F32 when f32 is set. Q8_0 rows are
 * returned as they are, or dequantised when f32 is set. */
static const struct tensor *unit_rows(struct arena *a, const struct tensor *t, bool f32)
{
    if (t->type == TYPE_Q8_0) return f32 ? q8_rows_f32(a, t) : t;
    const bool h = t->type == TYPE_F16;
    const int64_t es = h ? 2 : 4;
    if (t->nb[3] == es && (!h || !f32)) return t;
    struct tensor c = tensor_make(h && !f32 ? TYPE_F16 : TYPE_F32, 4, t->ne, NULL, t->be);
    c.data = arena_alloc(a, tensor_nbytes(&c));
    if (!c.data) return NULL;
    float *d = c.data;
    uint16_t *d16 = c.data;
    for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
                for (int64_t i3 = 0; i3 < t->ne[3]; i3++) {
                    const char *e = (const char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] +
                                    i2 * t->nb[2] + i3 * t->nb[3];
                    if (!h) *d++ = *(const float *)e;
                    else if (f32) *d++ = fp16_to_f32(*(const uint16_t *)e);
                    else *d16++ = *(const uint16_t *)e;
                }
    return arena_desc(a, &c);
}

static void attention_out(struct arena *a, struct tensor *out, const struct tensor *q,
                          const struct tensor *k, const struct tensor *v,
                          const struct tensor *bias, const struct attn_params *p)
{
    struct attn_ctx c = {.P = prims_now(), .bias = bias, .out = out, .p = p};
    c.B = q->ne[0]; c.Hq = q->ne[1]; c.Tq = q->ne[2]; c.Tk = k->ne[2]; c.D = q->ne[3];
    c.group = q->ne[1] / k->ne[1];
    c.q = unit_rows(a, q, true);
#ifdef NN_X86
    if (cpu_level() >= CPU_AVX512) { /* F16 k and v (both or neither) are read as stored */
        c.kv16 = k->type == TYPE_F16;
        /* Q8_0 k and v (both or neither): read as stored by the rows
         * driver (the decode step); longer queries (tiles, AMX) get them
         * dequantised to F32 once per call */
        c.kvq8 = k->type == TYPE_Q8_0 && c.Tq <= ROWS_MAX_TQ && 16 * k->nb[2] <= INT32_MAX &&
                 16 * v->nb[2] <= INT32_MAX;
        c.k = unit_rows(a, k, k->type == TYPE_Q8_0 && !c.kvq8);
        c.v = unit_rows(a, v, v->type == TYPE_Q8_0 && !c.kvq8);
        /* long queries with the BF16 hint: BF16 products (attn_bf16.c) */
        if (arena_status(a) == CBX_OK && !attn_bf16(a, out, c.q, c.k, c.v, bias, p))
            nn_attention_avx512(a, &c);
        return;
    }
#endif
    /* the AVX2 / scalar primitives take F32 rows: F16 and Q8_0 k, v are
     * converted (the whole of k and v, each call) */
    c.k = unit_rows(a, k, true);
    c.v = unit_rows(a, v, true);
    if (arena_status(a) != CBX_OK) return;
    int nt = n_threads(a);
    /* smaller query blocks when there would be too few items to share */
    c.qb = QB_MAX;
    while (c.qb > 8 && c.B * c.Hq * ((c.Tq + c.qb - 1) / c.qb) < 4 * nt) c.qb /= 2;
    c.nqb = (c.Tq + c.qb - 1) / c.qb;
    c.per_thread = (QB_MAX * KB + QB_MAX * c.D + 15) & ~(int64_t)15;
    c.scratch = arena_alloc_host(a, (size_t)(nt * c.per_thread) * sizeof(float));
    if (!c.scratch) return;
    tp_parallel_for(pool(a), c.B * c.Hq * c.nqb, 1, attn_items, &c);
}

/* The optional probability export (attn_params.probs, ops.h): a pass of
 * its own over the asked rows after the output is done, so the drivers
 * above stay exactly as they are (the output is bit-identical with and
 * without it) and a call without it pays nothing. Scores and softmax in
 * double, as the ref kernel; k in any of its types (F32, F16, Q8_0) and
 * strides. Cost: n * Tk * D multiply-adds (T3's alignment guard: 3 heads,
 * one query row per decode step). */
static void attention_probs(struct arena *a, const struct tensor *q, const struct tensor *k,
                            const struct tensor *bias, const struct attn_params *p)
{
    const struct attn_probs *pr = p->probs;
    const int64_t Tq = q->ne[2], Tk = k->ne[2], D = q->ne[3], b = pr->b, h = pr->h;
    const int64_t hk = h / (q->ne[1] / k->ne[1]);
    double *s = arena_alloc_host(a, (size_t)(Tk > 0 ? Tk : 1) * sizeof *s);
    float *kr = arena_alloc_host(a, (size_t)(D > 0 ? D : 1) * sizeof *kr);
    float *qr = arena_alloc_host(a, (size_t)(D > 0 ? D : 1) * sizeof *qr);
    if (!s || !kr || !qr) return;
    for (int64_t r = 0; r < pr->n; r++) {
        const int64_t i = pr->i0 + r;
        float *dst = pr->dst + r * pr->ld;
        const char *qp = (const char *)q->data + b * q->nb[0] + h * q->nb[1] + i * q->nb[2];
        for (int64_t d = 0; d < D; d++) qr[d] = *(const float *)(qp + d * q->nb[3]);
        const int64_t last = p->causal ? Tk - Tq + i : Tk - 1; /* last visible key */
        double m = -INFINITY;
        for (int64_t j = 0; j < Tk; j++) {
            s[j] = -INFINITY;
            if (j > last) continue;
            const char *kp = (const char *)k->data + b * k->nb[0] + hk * k->nb[1] + j * k->nb[2];
            if (k->type == TYPE_Q8_0) dequantize_row(TYPE_Q8_0, kp, kr, D);
            else if (k->type == TYPE_F16)
                for (int64_t d = 0; d < D; d++) kr[d] = fp16_to_f32(*(const uint16_t *)(kp + d * k->nb[3]));
            else
                for (int64_t d = 0; d < D; d++) kr[d] = *(const float *)(kp + d * k->nb[3]);
            double dot = 0;
            for (int64_t d = 0; d < D; d++) dot += (double)qr[d] * kr[d];
            s[j] = dot * p->scale;
            if (bias)
                s[j] += *(const float *)((const char *)bias->data + b * bias->nb[0] + h * bias->nb[1] +
                                         i * bias->nb[2] + j * bias->nb[3]);
            if (s[j] > m) m = s[j];
        }
        if (m == -INFINITY) { /* sees no key: zeros (ops_nn.c, convention 2) */
            memset(dst, 0, (size_t)Tk * sizeof *dst);
            continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < Tk; j++) sum += (s[j] = exp(s[j] - m));
        for (int64_t j = 0; j < Tk; j++) dst[j] = (float)(s[j] / sum);
    }
}

static void cpu_attention(struct arena *a, struct tensor *out, const struct tensor *q,
                          const struct tensor *k, const struct tensor *v,
                          const struct tensor *bias, const struct attn_params *p)
{
    attention_out(a, out, q, k, v, bias, p);
    if (p->probs && arena_status(a) == CBX_OK) attention_probs(a, q, k, bias, p);
}

/* ---- rotary ------------------------------------------------------------ */

/* HF inv_freq in float32 (1 / base ** (arange(0, dim, 2).float() / dim))
 * with _compute_llama3_parameters when factor != 0, each step in float32
 * as torch evaluates it (python scalars cast to float32). */
static float inv_freq(const struct rope_params *p, int i)
{
    float f = 1.0f / powf(p->theta, (float)(2 * i) / (float)p->n_dims);
    if (p->factor == 0) return f;
    float wavelen = (float)(2 * M_PI) / f;
    if (wavelen > (float)((double)p->original_max_pos / p->low_freq_factor)) return f / p->factor;
    if (wavelen < (float)((double)p->original_max_pos / p->high_freq_factor)) return f;
    float smooth = ((float)p->original_max_pos / wavelen - p->low_freq_factor) /
                   (float)((double)p->high_freq_factor - p->low_freq_factor);
    return (1 - smooth) * f / p->factor + smooth * f;
}

struct rope_ctx {
    const struct tensor *x, *pos;
    struct tensor *out;
    const struct rope_params *p;
    const float *inv;
    float *cs; /* [T][half][2]: cos, sin */
};

static void rope_table(void *c, int64_t t0, int64_t t1, int ith)
{
    (void)ith;
    const struct rope_ctx *k = c;
    int half = k->p->n_dims / 2;
    for (int64_t t = t0; t < t1; t++) {
        float ps = (float)*(const int32_t *)((const char *)k->pos->data + t * k->pos->nb[0]);
        for (int i = 0; i < half; i++) {
            float ang = ps * k->inv[i]; /* float32 product, as HF */
            k->cs[(t * half + i) * 2] = cosf(ang);
            k->cs[(t * half + i) * 2 + 1] = sinf(ang);
        }
    }
}

static void rope_rows(void *c, int64_t r0, int64_t r1, int ith)
{
    (void)ith;
    const struct rope_ctx *k = c;
    int64_t T = k->x->ne[2], D = k->x->ne[3];
    int half = k->p->n_dims / 2;
    for (int64_t r = r0; r < r1; r++) {
        float *y = (float *)k->out->data + r * D;
        const float *x = src_row(k->x, r, y);
        const float *cs = k->cs + (r % T) * half * 2;
        for (int i = 0; i < half; i++) {
            float x0 = x[i], x1 = x[i + half], co = cs[2 * i], si = cs[2 * i + 1];
            y[i] = x0 * co + (-x1) * si; /* q * cos + rotate_half(q) * sin */
            y[i + half] = x1 * co + x0 * si;
        }
        if (x != y)
            for (int64_t d = k->p->n_dims; d < D; d++) y[d] = x[d];
    }
}

static void cpu_rope(struct arena *a, struct tensor *out, const struct tensor *x,
                     const struct tensor *pos, const struct rope_params *p)
{
    int half = p->n_dims / 2;
    int64_t T = x->ne[2];
    float *inv = arena_alloc_host(a, (size_t)half * sizeof *inv);
    float *cs = arena_alloc_host(a, (size_t)(T * half * 2 + 1) * sizeof *cs);
    if (!inv || !cs) return;
    for (int i = 0; i < half; i++) inv[i] = inv_freq(p, i);
    struct rope_ctx c = {.x = x, .pos = pos, .out = out, .p = p, .inv = inv, .cs = cs};
    tp_parallel_for(pool(a), T, 1 + 4096 / half, rope_table, &c);
    tp_parallel_for(pool(a), tensor_nrows(x), row_grain(x->ne[3]), rope_rows, &c);
}

void cpu_register_nn(struct kernels *k)
{
    k->layer_norm = cpu_layer_norm;
    k->add_layer_norm = cpu_add_layer_norm;
    k->rms_norm = cpu_rms_norm;
    k->group_norm = cpu_group_norm;
    k->channel_affine = cpu_channel_affine;
    k->softmax = cpu_softmax;
    k->attention = cpu_attention;
    k->rope = cpu_rope;
}
