/* cfm.c - S3Gen flow-matching decoder. Ports chatterbox 5de7a54
 * models/s3gen/decoder.py (ConditionalDecoder, CausalResnetBlock1D,
 * CausalBlock1D, CausalConv1d), matcha/decoder.py (SinusoidalPosEmb,
 * TimestepEmbedding), matcha/transformer.py with diffusers 0.29
 * (BasicTransformerBlock, Attention/AttnProcessor2_0, GELU),
 * utils/intmeanflow.py (time_embed_mixer) and flow_matching.py
 * (CausalConditionalCFM.forward, basic_euler, solve_euler); spec/s3gen.md
 * §5-§6, spec/rng.md §3.
 *
 * Layout: upstream runs the ResNet parts on (B, C, T) and transposes to
 * (B, T, C) around every transformer stack and every channel LayerNorm.
 * Here the whole U-Net runs on [B, T, C], so
 *  - the channel LayerNorm of CausalBlock1D is a plain innermost-dim norm,
 *  - every convolution is one GEMM (op_linear): CausalConv1d(k) pads k-1
 *    zero frames in front and reads frame t's window (padded frames
 *    t..t+k-1, adjacent in memory) as one row of an overlapping
 *    [B, T, k*Cin] view, against the weight re-laid out at load as
 *    [Cout, k*Cin] (tap-major); kernel-1 convs are linears as stored,
 *  - transformer linears run on all B*T rows at once.
 * Inputs and the output keep upstream's (B, 80, T).
 *
 * Masks: flow.inference passes an all-ones mask (one unpadded row; CFG
 * repeats it), so every `* mask` is an identity and the attention bias
 * (mask_to_bias) is zero; both are omitted. */
#include "cfm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/quant.h"

#define TIME_IN 320    /* SinusoidalPosEmb(in_channels) */
#define LN_EPS 1e-5f   /* nn.LayerNorm default (CausalBlock1D, norm1, norm3) */

/* A convolution or linear as one GEMM: w [Cout, k*Cin], b [Cout] or NULL. */
struct cfm_conv {
    const struct tensor *w, *b;
    int k;
};

/* CausalBlock1D: block.0 CausalConv1d(k 3), block.2 LayerNorm, Mish. */
struct cfm_block1d {
    struct cfm_conv conv;
    const struct tensor *ln_w, *ln_b;
};

/* CausalResnetBlock1D: mlp.1 Linear(1024 -> Cout), block1, block2,
 * res_conv Conv1d(k 1). */
struct cfm_resnet {
    struct cfm_block1d block1, block2;
    struct cfm_conv mlp, res_conv;
};

/* diffusers BasicTransformerBlock (layer_norm, self-attention only). */
struct cfm_transformer {
    const struct tensor *norm1_w, *norm1_b, *norm3_w, *norm3_b;
    struct cfm_conv to_q, to_k, to_v, to_out, ff_proj, ff_out; /* to_q/k/v: no bias */
    const struct tensor *qkv; /* [to_q; to_k; to_v] rows, [3 inner, C]: one GEMM */
};

/* down_blocks.i / mid_blocks.i / up_blocks.i: resnet, transformer stack and
 * (down/up only) the trailing CausalConv1d(256, 256, 3). */
struct cfm_stage {
    struct cfm_resnet resnet;
    struct cfm_transformer *tf; /* n_blocks entries */
    struct cfm_conv sample;     /* w NULL for mid blocks */
};

struct s3gen_estimator {
    int n_blocks, n_mid, n_heads, head_dim, channels, time_dim;
    struct cfm_conv time_mlp_1, time_mlp_2, time_embed_mixer; /* mixer.w NULL: standard */
    struct cfm_stage down, *mid, up;
    struct cfm_block1d final_block;
    struct cfm_conv final_proj;
    /* memory owned by the estimator: the transformer and mid-block arrays */
    void **owned;
    int n_owned, cap_owned;
    struct weight_set *ws; /* every weight, placed on the load's backend */
};

/* ---- loading ----------------------------------------------------------- */

struct loader {
    const struct weights *w;
    struct s3gen_estimator *e;
    struct weight_set *ws;
    enum dtype wtype;
    cbx_status rc;
    char *err;
    float *row; /* scratch row of up to max_k floats */
};

static void *own(struct loader *L, size_t n)
{
    struct s3gen_estimator *e = L->e;
    if (L->rc != CBX_OK) return NULL;
    if (e->n_owned == e->cap_owned) {
        int cap = e->cap_owned ? 2 * e->cap_owned : 256;
        void **p = realloc(e->owned, sizeof *p * (size_t)cap);
        if (!p) goto nomem;
        e->owned = p;
        e->cap_owned = cap;
    }
    void *m = calloc(1, n ? n : 1);
    if (!m) goto nomem;
    e->owned[e->n_owned++] = m;
    return m;
nomem:
    L->rc = err_setf(L->err, CBX_ERR_NOMEM, "s3gen cfm: out of memory for the estimator weights");
    return NULL;
}

/* A new [rows, k] host weight of type L->wtype whose row r is fill(r)
 * (in set memory, not placed yet). */
typedef void (*row_fn)(const struct tensor *src, int64_t r, float *dst);

static const struct tensor *derive(struct loader *L, const struct tensor *src, int64_t rows,
                                   int64_t k, row_fn fill)
{
    size_t rs = dtype_row_size(L->wtype, k);
    if (L->rc != CBX_OK) return NULL;
    if (rs == 0) {
        L->rc = err_setf(L->err, CBX_ERR_INVALID_ARG,
                         "s3gen cfm: %s has rows of %lld, not a multiple of the %s block",
                         src->name ? src->name : "weight", (long long)k, dtype_name(L->wtype));
        return NULL;
    }
    const int64_t ne[2] = {rows, k};
    struct tensor *t = weight_new(L->ws, L->wtype, 2, ne, src->name, &L->rc, L->err);
    if (!t) return NULL;
    for (int64_t r = 0; r < rows; r++) {
        fill(src, r, L->row);
        quantize_row(L->wtype, L->row, (char *)t->data + (size_t)r * rs, k);
    }
    if (L->w->mapped) weight_drop_source(src); /* only the derived weight is read from now on */
    return t;
}

static float elem(const struct tensor *t, const char *p)
{
    if (t->type == TYPE_F32) {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    if (t->type == TYPE_F16) return fp16_to_f32(*(const uint16_t *)p);
    return bf16_to_f32(*(const uint16_t *)p);
}

/* conv weight [Cout, Cin, k] row o -> [k*Cin] tap-major: dst[j*Cin + c] =
 * w[o, c, j] */
static void conv_row(const struct tensor *w, int64_t o, float *dst)
{
    int64_t cin = w->ne[1], k = w->ne[2];
    for (int64_t c = 0; c < cin; c++)
        for (int64_t j = 0; j < k; j++)
            dst[j * cin + c] = elem(w, (const char *)w->data + o * w->nb[0] + c * w->nb[1] + j * w->nb[2]);
}

/* linear weight [out, in] row o, any stored type */
static void linear_row(const struct tensor *w, int64_t o, float *dst)
{
    dequantize_row(w->type, (const char *)w->data + o * w->nb[0], dst, w->ne[1]);
}

/* c's weight and bias placed (c as raw_linear / raw_conv made it). */
static struct cfm_conv place(struct loader *L, struct cfm_conv c)
{
    c.w = weight_place(L->ws, c.w, WEIGHT_LINEAR, WEIGHT_AS_STORED, 0, &L->rc, L->err);
    c.b = weight_place(L->ws, c.b, WEIGHT_PLAIN, WEIGHT_AS_STORED, 0, &L->rc, L->err);
    return c;
}

/* Linear `name` [out, in] (bias `name` with .bias when has_bias), not
 * placed yet. */
static struct cfm_conv raw_linear(struct loader *L, const char *name, int64_t out, int64_t in,
                                  bool has_bias)
{
    struct cfm_conv c = {NULL, NULL, 1};
    char n[256];
    const int64_t ne[2] = {out, in}, nb[1] = {out};
    snprintf(n, sizeof n, "flow.decoder.estimator.%s.weight", name);
    const struct tensor *w = weights_get(L->w, n, 2, ne, &L->rc, L->err);
    if (has_bias) {
        snprintf(n, sizeof n, "flow.decoder.estimator.%s.bias", name);
        c.b = weights_get(L->w, n, 1, nb, &L->rc, L->err);
    }
    if (!w) return c;
    if (w->type == L->wtype && (dtype_traits(w->type)->quantized || w->nb[1] == (int64_t)dtype_traits(w->type)->size))
        c.w = w;
    else
        c.w = derive(L, w, out, in, linear_row);
    return c;
}

/* Conv1d `name` [out, in, k] with bias, as a [out, k*in] GEMM weight. */
static struct cfm_conv raw_conv(struct loader *L, const char *name, int64_t out, int64_t in, int k)
{
    struct cfm_conv c = {NULL, NULL, k};
    char n[256];
    const int64_t ne[3] = {out, in, k}, nb[1] = {out};
    snprintf(n, sizeof n, "flow.decoder.estimator.%s.weight", name);
    const struct tensor *w = weights_get(L->w, n, 3, ne, &L->rc, L->err);
    snprintf(n, sizeof n, "flow.decoder.estimator.%s.bias", name);
    c.b = weights_get(L->w, n, 1, nb, &L->rc, L->err);
    if (!w) return c;
    if (dtype_traits(w->type)->quantized) {
        L->rc = err_setf(L->err, CBX_ERR_FORMAT, "s3gen cfm: conv weight %s is stored quantised", n);
        return c;
    }
    c.w = derive(L, w, out, in * k, conv_row);
    return c;
}

/* The rows of n host weights of type L->wtype (not placed yet) stacked
 * into one placed [sum rows, k] tensor (raw row copies: the same numbers,
 * one GEMM instead of n). */
static const struct tensor *stack_rows(struct loader *L, const struct tensor *const *w, int n)
{
    if (L->rc != CBX_OK) return NULL;
    int64_t rows = 0, k = w[0]->ne[1];
    for (int i = 0; i < n; i++) {
        if (w[i]->type != L->wtype || w[i]->ndim != 2 || w[i]->ne[1] != k) {
            L->rc = err_setf(L->err, CBX_ERR_INTERNAL, "s3gen cfm: cannot stack %s", w[i]->name);
            return NULL;
        }
        rows += w[i]->ne[0];
    }
    const size_t rs = dtype_row_size(L->wtype, k);
    const int64_t ne[2] = {rows, k};
    struct tensor *t = weight_new(L->ws, L->wtype, 2, ne, w[0]->name, &L->rc, L->err);
    if (!t) return NULL;
    char *d = t->data;
    for (int i = 0; i < n; i++)
        for (int64_t r = 0; r < w[i]->ne[0]; r++, d += rs)
            memcpy(d, (const char *)w[i]->data + r * w[i]->nb[0], rs);
    return weight_place(L->ws, t, WEIGHT_LINEAR, WEIGHT_AS_STORED, 0, &L->rc, L->err);
}

static struct cfm_conv get_linear(struct loader *L, const char *name, int64_t out, int64_t in, bool has_bias)
{
    return place(L, raw_linear(L, name, out, in, has_bias));
}

static struct cfm_conv get_conv(struct loader *L, const char *name, int64_t out, int64_t in, int k)
{
    return place(L, raw_conv(L, name, out, in, k));
}

static const struct tensor *get_vec(struct loader *L, const char *name, int64_t n)
{
    char s[256];
    const int64_t ne[1] = {n};
    snprintf(s, sizeof s, "flow.decoder.estimator.%s", name);
    return weight_place(L->ws, weights_get(L->w, s, 1, ne, &L->rc, L->err), WEIGHT_NORM, WEIGHT_AS_STORED, 0,
                        &L->rc, L->err);
}

static void load_block1d(struct loader *L, struct cfm_block1d *b, const char *prefix, int64_t cin,
                         int64_t cout)
{
    char n[200];
    snprintf(n, sizeof n, "%s.block.0", prefix);
    b->conv = get_conv(L, n, cout, cin, 3);
    snprintf(n, sizeof n, "%s.block.2.weight", prefix);
    b->ln_w = get_vec(L, n, cout);
    snprintf(n, sizeof n, "%s.block.2.bias", prefix);
    b->ln_b = get_vec(L, n, cout);
}

static void load_resnet(struct loader *L, struct cfm_resnet *r, const char *prefix, int64_t cin,
                        int64_t cout)
{
    char n[160];
    snprintf(n, sizeof n, "%s.mlp.1", prefix);
    r->mlp = get_linear(L, n, cout, L->e->time_dim, true);
    snprintf(n, sizeof n, "%s.block1", prefix);
    load_block1d(L, &r->block1, n, cin, cout);
    snprintf(n, sizeof n, "%s.block2", prefix);
    load_block1d(L, &r->block2, n, cout, cout);
    snprintf(n, sizeof n, "%s.res_conv", prefix);
    r->res_conv = get_conv(L, n, cout, cin, 1);
}

static void load_transformer(struct loader *L, struct cfm_transformer *t, const char *prefix)
{
    const struct s3gen_estimator *e = L->e;
    int64_t C = e->channels, inner = (int64_t)e->n_heads * e->head_dim, ff = 4 * C;
    char n[160];
#define V(field, suffix, len) (snprintf(n, sizeof n, "%s." suffix, prefix), t->field = get_vec(L, n, len))
#define LIN(field, suffix, out, in, bias) \
    (snprintf(n, sizeof n, "%s." suffix, prefix), t->field = get_linear(L, n, out, in, bias))
    V(norm1_w, "norm1.weight", C);
    V(norm1_b, "norm1.bias", C);
    /* q, k, v read from the host to be stacked, then placed */
    (snprintf(n, sizeof n, "%s.attn1.to_q", prefix), t->to_q = raw_linear(L, n, inner, C, false));
    (snprintf(n, sizeof n, "%s.attn1.to_k", prefix), t->to_k = raw_linear(L, n, inner, C, false));
    (snprintf(n, sizeof n, "%s.attn1.to_v", prefix), t->to_v = raw_linear(L, n, inner, C, false));
    LIN(to_out, "attn1.to_out.0", C, inner, true);
    V(norm3_w, "norm3.weight", C);
    V(norm3_b, "norm3.bias", C);
    LIN(ff_proj, "ff.net.0.proj", ff, C, true);
    LIN(ff_out, "ff.net.2", C, ff, true);
    if (t->to_q.w && t->to_k.w && t->to_v.w) {
        const struct tensor *parts[3] = {t->to_q.w, t->to_k.w, t->to_v.w};
        t->qkv = stack_rows(L, parts, 3);
    }
    t->to_q = place(L, t->to_q);
    t->to_k = place(L, t->to_k);
    t->to_v = place(L, t->to_v);
#undef V
#undef LIN
}

static void load_stage(struct loader *L, struct cfm_stage *s, const char *prefix, int64_t cin,
                       bool sample)
{
    char n[96];
    int64_t C = L->e->channels;
    snprintf(n, sizeof n, "%s.0", prefix);
    load_resnet(L, &s->resnet, n, cin, C);
    s->tf = own(L, sizeof *s->tf * (size_t)L->e->n_blocks);
    for (int i = 0; s->tf && i < L->e->n_blocks; i++) {
        snprintf(n, sizeof n, "%s.1.%d", prefix, i);
        load_transformer(L, &s->tf[i], n);
    }
    if (sample) {
        snprintf(n, sizeof n, "%s.2", prefix);
        s->sample = get_conv(L, n, C, C, 3);
    }
}

void s3gen_cfm_free(struct s3gen_cfm *c)
{
    if (!c) return;
    struct s3gen_estimator *e = c->est;
    if (e) {
        for (int i = 0; i < e->n_owned; i++) free(e->owned[i]);
        free(e->owned);
        weight_set_free(e->ws);
        free(e);
    }
    memset(c, 0, sizeof *c);
}

cbx_status s3gen_cfm_load(struct s3gen_cfm *c, const struct weights *w, const struct backend *be, enum dtype wtype,
                          char *err)
{
    memset(c, 0, sizeof *c);
    const struct dtype_traits *wt = dtype_traits(wtype);
    if (!wt || wtype == TYPE_I8 || wtype == TYPE_I16 || wtype == TYPE_I32 || wtype == TYPE_I64 ||
        wtype == TYPE_F64 || wtype == TYPE_U8 || wtype == TYPE_BOOL || wtype == TYPE_Q8_1)
        return err_setf(err, CBX_ERR_INVALID_ARG, "s3gen cfm: cannot hold weights as %s",
                        wt ? wt->name : "an unknown type");
    struct s3gen_estimator *e = calloc(1, sizeof *e);
    float *row = NULL;
    if (!e || !(e->ws = weight_set_create(be))) {
        free(e);
        return err_setf(err, CBX_ERR_NOMEM, "s3gen cfm: out of memory");
    }
    c->est = e;
    struct loader L = {w, e, e->ws, wtype, CBX_OK, err, NULL};

    /* sizes from the weights: channels[0] from down_blocks.0.0.mlp.1, the
     * time embedding width from time_mlp.linear_2, counts from the names */
    const int64_t any2[2] = {-1, -1};
    const struct tensor *t2 = weights_get(w, "flow.decoder.estimator.time_mlp.linear_2.weight", 2,
                                          any2, &L.rc, err);
    const struct tensor *m0 = weights_get(w, "flow.decoder.estimator.down_blocks.0.0.mlp.1.weight",
                                          2, any2, &L.rc, err);
    if (L.rc != CBX_OK) goto fail;
    e->time_dim = (int)t2->ne[0];
    e->channels = (int)m0->ne[0];
    e->head_dim = 64;                        /* attention_head_dim */
    e->n_heads = 8;                          /* num_heads */
    while (weights_has(w, "flow.decoder.estimator.down_blocks.0.1.%d.norm1.weight", e->n_blocks)) e->n_blocks++;
    while (weights_has(w, "flow.decoder.estimator.mid_blocks.%d.0.mlp.1.weight", e->n_mid)) e->n_mid++;
    if (e->n_blocks == 0 || e->channels % 64 || m0->ne[1] != e->time_dim) {
        L.rc = err_setf(err, CBX_ERR_FORMAT, "s3gen cfm: unexpected estimator layout (%d transformer "
                        "blocks, %d channels)", e->n_blocks, e->channels);
        goto fail;
    }
    c->meanflow = weights_has(w, "flow.decoder.estimator.time_embed_mixer.weight");
    c->cfg_rate = S3GEN_CFG_RATE;

    int64_t C = e->channels, T = e->time_dim;
    int64_t max_k = 4 * C > 3 * 2 * C ? 4 * C : 3 * 2 * C;
    if (2 * T > max_k) max_k = 2 * T;
    if (3 * 4 * S3GEN_MEL_CHANNELS > max_k) max_k = 3 * 4 * S3GEN_MEL_CHANNELS;
    row = malloc(sizeof *row * (size_t)max_k);
    if (!row) {
        L.rc = err_setf(err, CBX_ERR_NOMEM, "s3gen cfm: out of memory");
        goto fail;
    }
    L.row = row;
    e->time_mlp_1 = get_linear(&L, "time_mlp.linear_1", T, TIME_IN, true);
    e->time_mlp_2 = get_linear(&L, "time_mlp.linear_2", T, T, true);
    if (c->meanflow) e->time_embed_mixer = get_linear(&L, "time_embed_mixer", T, 2 * T, false);
    /* in_channels 320 = [x | mu | spks | cond] */
    load_stage(&L, &e->down, "down_blocks.0", 4 * S3GEN_MEL_CHANNELS, true);
    e->mid = own(&L, sizeof *e->mid * (size_t)(e->n_mid ? e->n_mid : 1));
    for (int i = 0; e->mid && i < e->n_mid; i++) {
        char n[64];
        snprintf(n, sizeof n, "mid_blocks.%d", i);
        load_stage(&L, &e->mid[i], n, C, false);
    }
    load_stage(&L, &e->up, "up_blocks.0", 2 * C, true);
    load_block1d(&L, &e->final_block, "final_block", C, C);
    e->final_proj = get_conv(&L, "final_proj", S3GEN_MEL_CHANNELS, C, 1);
    if (L.rc != CBX_OK) goto fail;
    free(row);
    return CBX_OK;
fail:
    free(row);
    s3gen_cfm_free(c);
    return L.rc;
}

/* ---- forward ----------------------------------------------------------- */

/* Two scratch arenas used in turn: each unit (ResNet block, transformer
 * block, conv) reads its input from one and writes into the other, which
 * was reset first, so memory stays at about two units' activations. */
struct pingpong {
    struct arena *out;   /* the caller's arena: failures are reported there */
    struct arena *ar[2];
    int cur;
};

/* The arena for the next unit, or NULL after a failure (reported to out). */
static struct arena *next(struct pingpong *p)
{
    for (int i = 0; i < 2; i++)
        if (arena_status(p->ar[i]) != CBX_OK) {
            if (arena_status(p->out) == CBX_OK)
                arena_fail(p->out, arena_status(p->ar[i]), "s3gen estimator: %s", arena_errmsg(p->ar[i]));
            return NULL;
        }
    p->cur ^= 1;
    arena_reset(p->ar[p->cur]);
    return p->ar[p->cur];
}

/* CausalConv1d (k > 1) or Conv1d(k 1) on h [B, T, Cin] -> [B, T, Cout]. */
static struct tensor *conv(struct arena *a, const struct tensor *h, const struct cfm_conv *c)
{
    if (!h) return NULL;
    if (c->k == 1) return op_linear(a, h, c->w, c->b);
    int64_t B = h->ne[0], T = h->ne[1], C = h->ne[2];
    const int64_t zne[3] = {B, c->k - 1, C};
    struct tensor *p = op_concat(a, op_fill(a, 3, zne, 0.0f), h, 1); /* F.pad(x, (k-1, 0)) */
    if (!p) return NULL;
    struct tensor win = *p;                                           /* [B, T, k*C] windows */
    win.ne[1] = T;
    win.ne[2] = c->k * C;
    return op_linear(a, arena_desc(a, &win), c->w, c->b);
}

/* CausalBlock1D: Mish(LayerNorm_C(CausalConv1d(x))) */
static struct tensor *block1d(struct arena *a, const struct tensor *x, const struct cfm_block1d *b)
{
    struct tensor *h = conv(a, x, &b->conv);
    h = op_layer_norm(a, h, b->ln_w, b->ln_b, LN_EPS);
    return op_unary(a, h, UN_MISH, 0, 0);
}

/* CausalResnetBlock1D: h = block1(x); h += mlp(t_emb) over time;
 * h = block2(h); out = h + res_conv(x). t_mish = Mish(t_emb) [B, 1024]
 * (mlp.0), shared by every block. */
/* A sum x + r not yet formed (r NULL: just x): a residual add is left to
 * the next unit, which fuses it with its layer norm (op_add_layer_norm). */
struct resid {
    const struct tensor *x, *r;
};

/* the sum as a tensor (NULL after a failure) */
static struct tensor *resid_sum(struct arena *a, struct resid v)
{
    if (!v.x) return NULL;
    return v.r ? op_add(a, v.x, v.r) : (struct tensor *)v.x;
}

static struct resid resnet(struct arena *a, const struct tensor *x, const struct tensor *t_mish,
                           const struct cfm_resnet *r)
{
    struct resid out = {NULL, NULL};
    if (!x) return out;
    struct tensor *h = block1d(a, x, &r->block1);
    struct tensor *te = op_split_dim(a, op_linear(a, t_mish, r->mlp.w, r->mlp.b), 1, 1); /* [B, 1, Cout] */
    h = op_add(a, h, te);
    h = block1d(a, h, &r->block2);
    struct tensor *rc = conv(a, x, &r->res_conv);
    if (h && rc) out = (struct resid){h, rc};
    return out;
}

/* BasicTransformerBlock: h += attn1(norm1(h)); h += ff(norm3(h)).
 * h [B, T, C], given as a pending sum; the block's last residual add is
 * left pending too. */
static struct resid transformer(struct arena *a, const struct s3gen_estimator *e,
                                struct resid in, const struct cfm_transformer *l)
{
    struct resid out = {NULL, NULL};
    if (!in.x) return out;
    const int64_t inner = (int64_t)e->n_heads * e->head_dim;
    struct tensor *h = (struct tensor *)in.x, *n;
    if (in.r)
        n = op_add_layer_norm(a, in.x, in.r, l->norm1_w, l->norm1_b, LN_EPS, &h);
    else
        n = op_layer_norm(a, h, l->norm1_w, l->norm1_b, LN_EPS);
    /* q, k, v: column slices of one [B, T, 3 inner] GEMM, viewed as heads
     * (attention reads them with strides) */
    struct tensor *qkv = op_linear(a, n, l->qkv, NULL);
    struct tensor *q = op_split_heads(a, op_slice(a, qkv, 2, 0, inner), e->n_heads);
    struct tensor *k = op_split_heads(a, op_slice(a, qkv, 2, inner, inner), e->n_heads);
    struct tensor *v = op_split_heads(a, op_slice(a, qkv, 2, 2 * inner, inner), e->n_heads);
    /* F.scaled_dot_product_attention, scale dim_head^-0.5, bidirectional */
    struct attn_params ap = {.scale = 1.0f / sqrtf((float)e->head_dim), .causal = false};
    struct tensor *o = op_attention(a, q, k, v, NULL, &ap);           /* [B, H, T, Dh] */
    o = op_merge_heads(a, o);
    struct tensor *hs;
    n = op_add_layer_norm(a, h, op_linear(a, o, l->to_out.w, l->to_out.b), l->norm3_w, l->norm3_b,
                          LN_EPS, &hs);
    struct tensor *f = op_linear_ex(a, n, l->ff_proj.w, l->ff_proj.b, UN_GELU, NULL);
    struct tensor *y = op_linear(a, f, l->ff_out.w, l->ff_out.b);
    if (hs && y) out = (struct resid){hs, y};
    return out;
}

/* resnet, then the transformer stack, each unit in the next scratch arena */
static struct tensor *stage(struct pingpong *p, const struct s3gen_estimator *e,
                            const struct tensor *h, const struct tensor *t_mish,
                            const struct cfm_stage *s)
{
    struct arena *a;
    if (!h || !(a = next(p))) return NULL;
    struct resid x = resnet(a, h, t_mish, &s->resnet);
    for (int i = 0; x.x && i < e->n_blocks; i++) {
        if (!(a = next(p))) return NULL;
        x = transformer(a, e, x, &s->tf[i]);
    }
    return resid_sum(a, x);
}

/* SinusoidalPosEmb(320)(t) for B times -> host emb[B * 320], in float32
 * as torch: freq_k = exp(k * -(float)(ln 1e4 / 159)), a = (1000 t) freq_k,
 * [sin a | cos a]. */
static void sinusoid(const float *t, int64_t B, float *emb)
{
    const int half = TIME_IN / 2;
    const float step = (float)(-(log(10000.0) / (half - 1)));
    for (int64_t b = 0; b < B; b++) {
        float st = 1000.0f * t[b];
        for (int k = 0; k < half; k++) {
            float arg = st * expf((float)k * step);
            emb[b * TIME_IN + k] = sinf(arg);
            emb[b * TIME_IN + half + k] = cosf(arg);
        }
    }
}

/* time_mlp(SinusoidalPosEmb(t)): linear_1 -> SiLU -> linear_2, [B, 1024] */
static struct tensor *time_mlp(struct arena *a, const struct s3gen_estimator *e, const float *t,
                               int64_t B)
{
    float *emb = arena_alloc_host(a, sizeof *emb * (size_t)(B * TIME_IN));
    if (!emb) return NULL;
    sinusoid(t, B, emb);
    const int64_t ne[2] = {B, TIME_IN};
    struct tensor *h = op_linear(a, op_from_host(a, TYPE_F32, 2, ne, emb), e->time_mlp_1.w, e->time_mlp_1.b);
    h = op_unary(a, h, UN_SILU, 0, 0);
    return op_linear(a, h, e->time_mlp_2.w, e->time_mlp_2.b);
}

static bool is_bct(const struct tensor *t, int64_t B, int64_t T)
{
    return t && t->type == TYPE_F32 && t->ndim == 3 && t->ne[0] == B &&
           t->ne[1] == S3GEN_MEL_CHANNELS && t->ne[2] == T;
}

/* s3gen_estimator_forward with its two scratch arenas given (sc[0], sc[1],
 * reset here before use): a solver passes the same pair to every step, so
 * the steps after the first reuse memory that is already mapped (no
 * first-touch page faults). */
static struct tensor *estimator(struct arena *a, struct arena *const sc[2],
                                const struct s3gen_cfm *c, const struct tensor *x,
                                const struct tensor *mu, const struct tensor *spks,
                                const struct tensor *cond, const float *t, const float *r)
{
    if (!x || !mu || !spks || !cond) return NULL;
    const struct s3gen_estimator *e = c->est;
    int64_t B = x->ne[0], T = x->ndim == 3 ? x->ne[2] : 0;
    char s1[64], s2[64], s3[64], s4[64];
    if (!is_bct(x, B, T) || !is_bct(mu, B, T) || !is_bct(cond, B, T) || T < 1 || spks->ndim != 2 ||
        spks->ne[0] != B || spks->ne[1] != S3GEN_MEL_CHANNELS || (c->meanflow && !r)) {
        arena_fail(a, CBX_ERR_INVALID_ARG,
                   "s3gen estimator: x %s, mu %s, cond %s (want [B, 80, T]), spks %s (want [B, 80])%s",
                   tensor_shape_str(x, s1, sizeof s1), tensor_shape_str(mu, s2, sizeof s2),
                   tensor_shape_str(cond, s3, sizeof s3), tensor_shape_str(spks, s4, sizeof s4),
                   c->meanflow && !r ? ", meanflow needs r" : "");
        return NULL;
    }
    struct pingpong p = {a, {sc[0], sc[1]}, 0};
    struct tensor *out = NULL;
    arena_reset(sc[0]);
    arena_reset(sc[1]);

    /* t = time_mlp(time_embeddings(t)); meanflow: t = time_embed_mixer(
     * [t | time_mlp(time_embeddings(r))]); kept in a */
    struct tensor *t_emb = time_mlp(a, e, t, B);
    if (c->meanflow)
        t_emb = op_linear(a, op_concat(a, t_emb, time_mlp(a, e, r, B), 1), e->time_embed_mixer.w, NULL);
    struct tensor *t_mish = op_unary(a, t_emb, UN_MISH, 0, 0); /* mlp.0 of every resnet */

    /* x = pack([x, mu, spks repeated over T, cond]) -> [B, T, 320] */
    struct arena *s = next(&p);
    if (!s || !t_mish) goto done;
    const int64_t bt80[3] = {B, T, S3GEN_MEL_CHANNELS};
    struct tensor *sp = op_add(s, op_fill(s, 3, bt80, 0.0f), op_split_dim(s, spks, 1, 1));
    struct tensor *h = op_concat(s, op_transpose(s, x, 1, 2), op_transpose(s, mu, 1, 2), 2);
    h = op_concat(s, op_concat(s, h, sp, 2), op_transpose(s, cond, 1, 2), 2);

    /* down_blocks.0: resnet, transformers, skip, CausalConv1d */
    h = stage(&p, e, h, t_mish, &e->down);
    struct tensor *skip = op_cont(a, h);                       /* hiddens[0], [B, T, C] */
    if (!skip || !(s = next(&p))) goto done;
    h = conv(s, skip, &e->down.sample);
    for (int i = 0; i < e->n_mid; i++) h = stage(&p, e, h, t_mish, &e->mid[i]);
    /* up_blocks.0: [x[:, :, :T_skip] | skip] (T_skip == T: one level) */
    if (!h || !(s = next(&p))) goto done;
    h = op_concat(s, h, skip, 2);                              /* [B, T, 2C] */
    h = stage(&p, e, h, t_mish, &e->up);
    if (!h || !(s = next(&p))) goto done;
    h = conv(s, h, &e->up.sample);
    /* final_block, final_proj, back to (B, 80, T) */
    h = block1d(s, h, &e->final_block);
    h = conv(s, h, &e->final_proj);                            /* [B, T, 80] */
    out = op_cont(a, op_transpose(a, h, 1, 2));
    if (out) out->name = "flow.decoder.estimator";
done:
    for (int i = 0; i < 2; i++) /* a failure in a scratch arena is reported in a */
        if (arena_status(p.ar[i]) != CBX_OK && arena_status(a) == CBX_OK)
            arena_fail(a, arena_status(p.ar[i]), "s3gen estimator: %s", arena_errmsg(p.ar[i]));
    return arena_status(a) == CBX_OK ? out : NULL;
}

/* Scratch arena pair for estimator(); false (reported in a) when out of memory. */
static bool scratch_pair(struct arena *a, struct arena *sc[2])
{
    sc[0] = arena_scratch(a);
    sc[1] = arena_scratch(a);
    if (sc[0] && sc[1]) return true;
    arena_scratch_done(a, sc[0]);
    arena_scratch_done(a, sc[1]);
    sc[0] = sc[1] = NULL;
    return false;
}

struct tensor *s3gen_estimator_forward(struct arena *a, const struct s3gen_cfm *c,
                                       const struct tensor *x, const struct tensor *mu,
                                       const struct tensor *spks, const struct tensor *cond,
                                       const float *t, const float *r)
{
    struct arena *sc[2];
    if (!x || !mu || !spks || !cond || !scratch_pair(a, sc)) return NULL;
    struct tensor *out = estimator(a, sc, c, x, mu, spks, cond, t, r);
    arena_scratch_done(a, sc[0]);
    arena_scratch_done(a, sc[1]);
    return out;
}

double s3gen_estimator_flops(const struct s3gen_cfm *c, int64_t B, int64_t T)
{
    const struct s3gen_estimator *e = c->est;
    double C = e->channels, I = (double)e->n_heads * e->head_dim, bt = (double)(B * T), M = S3GEN_MEL_CHANNELS;
    double tf = bt * (3 * C * I + I * C + 2 * C * 4 * C) + (double)B * T * T * I * 2;
    double res_common = bt * (3 * C * C) + (double)B * e->time_dim * C;
    double down = bt * (3 * 4 * M * C + 4 * M * C) + res_common;   /* block1 k3, res_conv */
    double mid = bt * (3 * C * C + C * C) + res_common;
    double up = bt * (3 * 2 * C * C + 2 * C * C) + res_common;
    double sample = bt * 3 * C * C;
    double total = down + up + e->n_mid * mid + (2 + e->n_mid) * e->n_blocks * tf + 3 * sample +
                   bt * C * M;
    return 2.0 * total;
}

/* ---- solvers ----------------------------------------------------------- */

void s3gen_cfm_t_span(bool meanflow, int n, float *span)
{
    /* torch.linspace(0, 1, n + 1) in float32: step = 1/n; the first half
     * counts up from 0, the second half down from 1 */
    float step = 1.0f / (float)n;
    int64_t steps = n + 1, halfway = steps / 2;
    for (int64_t i = 0; i < steps; i++)
        span[i] = i < halfway ? step * (float)i : 1.0f - step * (float)(steps - i - 1);
    if (!meanflow) /* cosine scheduler: 1 - cos(t * 0.5 * pi) */
        for (int64_t i = 0; i < steps; i++) span[i] = 1.0f - cosf(span[i] * 0.5f * (float)M_PI);
}

struct tensor *s3gen_cfm_solve(struct arena *a, const struct s3gen_cfm *c,
                               const struct tensor *z, const struct tensor *mu,
                               const struct tensor *spks, const struct tensor *cond,
                               const struct s3gen_cfm_params *p)
{
    if (!z || !mu || !spks || !cond) return NULL;
    int n = p && p->n_steps > 0 ? p->n_steps : c->meanflow ? S3GEN_MEANFLOW_STEPS : S3GEN_STANDARD_STEPS;
    int64_t T = z->ndim == 3 ? z->ne[2] : 0;
    char s1[64];
    if (!is_bct(z, 1, T) || n > 1000) {
        arena_fail(a, CBX_ERR_INVALID_ARG, "s3gen cfm: noise %s (want [1, 80, T]), %d steps",
                   tensor_shape_str(z, s1, sizeof s1), n);
        return NULL;
    }
    bool batched = !c->meanflow && !(p && p->cfg_separate);
    float *span = arena_alloc_host(a, sizeof *span * (size_t)(n + 1));
    struct arena *s = span ? arena_scratch(a) : NULL, *sc[2] = {NULL, NULL};
    if (!span || !s || !scratch_pair(a, sc)) {
        arena_fail(a, CBX_ERR_NOMEM, "s3gen cfm: out of memory");
        arena_scratch_done(a, s);
        return NULL;
    }
    s3gen_cfm_t_span(c->meanflow, n, span);
    struct tensor *x = op_cont(a, z);
    /* solve_euler's unconditional row: zeros for mu, spks and cond */
    const int64_t zs[2] = {1, S3GEN_MEL_CHANNELS};
    struct tensor *mu0 = NULL, *spks0 = NULL, *cond0 = NULL, *mu_in = NULL, *spks_in = NULL, *cond_in = NULL;
    if (!c->meanflow) {
        mu0 = op_fill(a, 3, z->ne, 0.0f);
        spks0 = op_fill(a, 2, zs, 0.0f);
        cond0 = mu0;
        if (batched) {
            mu_in = op_concat(a, mu, mu0, 0);
            spks_in = op_concat(a, spks, spks0, 0);
            cond_in = op_concat(a, cond, cond0, 0);
        }
    }
    for (int i = 0; i < n && x; i++) {
        arena_reset(s);
        float t = span[i], r = span[i + 1], tt[2] = {t, t};
        struct tensor *v, *x_in = x, *v_all;
        if (c->meanflow) {
            v_all = v = estimator(s, sc, c, x, mu, spks, cond, &t, &r);
        } else {
            struct tensor *vc, *vu;
            if (batched) {
                x_in = op_concat(s, x, x, 0);
                v_all = estimator(s, sc, c, x_in, mu_in, spks_in, cond_in, tt, NULL);
                vc = op_slice(s, v_all, 0, 0, 1);
                vu = op_slice(s, v_all, 0, 1, 1);
            } else {
                vc = estimator(s, sc, c, x, mu, spks, cond, &t, NULL);
                vu = estimator(s, sc, c, x, mu0, spks0, cond0, &t, NULL);
                v_all = p && p->cb ? op_concat(s, vc, vu, 0) : vc;
            }
            /* (1.0 + rate) * v_c - rate * v_u, scalars rounded to float */
            v = op_binary(s, op_scale(s, vc, (float)(1.0 + c->cfg_rate)),
                          op_scale(s, vu, (float)c->cfg_rate), BIN_SUB);
        }
        if (v && p && p->cb && p->cb(p->user, i, t, r, x_in, v_all)) {
            arena_fail(a, CBX_ERR_CANCELLED, "s3gen cfm: cancelled at step %d", i);
            x = NULL;
            break;
        }
        /* x = x + (r - t) * dxdt, written back into x's memory in a */
        struct tensor *xn = op_add(s, x, op_scale(s, v, r - t));
        if (!xn || op_copy_into(s, x, xn) != CBX_OK) {
            if (arena_status(a) == CBX_OK)
                arena_fail(a, arena_status(s) != CBX_OK ? arena_status(s) : CBX_ERR_INTERNAL,
                           "%s", arena_errmsg(s));
            x = NULL;
        }
    }
    arena_scratch_done(a, s);
    arena_scratch_done(a, sc[0]);
    arena_scratch_done(a, sc[1]);
    if (x) x->name = "flow.decoder";
    return arena_status(a) == CBX_OK ? x : NULL;
}

struct tensor *s3gen_cfm_forward(struct arena *a, const struct s3gen_cfm *c,
                                 const struct tensor *mu, const struct tensor *spks,
                                 const struct tensor *cond, const struct tensor *noised_mels,
                                 struct rng_stream *z_stream, const struct s3gen_cfm_params *p)
{
    if (!mu || !spks || !cond) return NULL;
    int64_t T = mu->ndim == 3 ? mu->ne[2] : 0;
    char s1[64], s2[64];
    if (!is_bct(mu, 1, T) || (noised_mels && (!is_bct(noised_mels, 1, noised_mels->ne[2]) ||
                                               noised_mels->ne[2] > T))) {
        arena_fail(a, CBX_ERR_INVALID_ARG, "s3gen cfm: mu %s, noised_mels %s",
                   tensor_shape_str(mu, s1, sizeof s1),
                   noised_mels ? tensor_shape_str(noised_mels, s2, sizeof s2) : "none");
        return NULL;
    }
    /* z = torch.randn_like(mu), drawn on the backend */
    struct tensor *z = op_randn(a, 3, mu->ne, z_stream);
    if (!z) return NULL;
    if (noised_mels) { /* z[..., prompt_len:] = noised_mels */
        int64_t w = noised_mels->ne[2];
        if (op_copy_into(a, op_slice(a, z, 2, T - w, w), noised_mels) != CBX_OK) return NULL;
    }
    return s3gen_cfm_solve(a, c, z, mu, spks, cond, p);
}
