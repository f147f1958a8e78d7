/* campplus.c - CAMPPlus x-vector (192-d speaker embedding for S3Gen).
 * Ports chatterbox models/s3gen/xvector.py (extract_feature, FCM,
 * BasicResBlock, TDNNLayer, CAMDenseTDNNBlock/Layer, CAMLayer,
 * TransitLayer, StatsPool, DenseLayer, CAMPPlus with feat_dim 80,
 * embedding_size 192, growth_rate 32, bn_size 4, init_channels 128,
 * "batchnorm-relu", output_level "segment"), chatterbox 0.1.7, and
 * torchaudio.compliance.kaldi.fbank with num_mel_bins=80 and its other
 * defaults; spec/voice.md §4. Batch of one utterance.
 * BatchNorms run in eval mode and are folded at load: scale = weight /
 * sqrt(running_var + 1e-5), shift = bias - running_mean * scale. A BN that
 * directly follows a conv (conv -> BN, every conv of the head, tdnn,
 * linear1 -> nonlinear2, dense) is folded into that conv: w' = w * scale
 * per output channel, bias = shift (computed in double, stored as f32);
 * a BN before a ReLU and conv (nonlinear1, transit, out_nonlinear) becomes
 * a per-channel affine. */
#include "voice/campplus.h"

#include <fftw3.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu/fft_plans.h"
#include "core/quant.h"
#include "core/weights.h"

#define BN_EPS 1e-5
#define M_CH 32          /* FCM m_channels */
#define GROWTH 32        /* growth_rate */
#define BN_CH 128        /* bn_size * growth_rate */
#define INIT_CH 128      /* init_channels */
#define SEG_LEN 100      /* CAMLayer.seg_pooling seg_len */

/* ---- weights ------------------------------------------------------------ */

struct cp_affine {   /* a folded BatchNorm: x * scale[c] + shift[c] */
    struct tensor scale, shift;
};

struct cp_conv {      /* a conv (or linear) with the following BN folded in */
    struct tensor w, b;
};

struct cp_resblock { /* BasicResBlock */
    struct cp_conv conv1, conv2;   /* conv1 + bn1, conv2 + bn2 */
    struct cp_conv shortcut;       /* shortcut.0 + shortcut.1 (w.data NULL: identity) */
    int stride;
};

struct cp_dense_layer { /* CAMDenseTDNNLayer */
    struct cp_affine nonlinear1;
    struct cp_conv linear1;                         /* [128, c_in, 1] + nonlinear2 BN */
    /* cam_layer */
    const struct tensor *linear_local;              /* [32, 128, 3] */
    const struct tensor *l1_w, *l1_b, *l2_w, *l2_b; /* linear1 [64,128,1], linear2 [32,64,1] */
};

static const int n_layers[3] = {12, 24, 16}, dilations[3] = {1, 2, 2};

struct campplus {
    /* head (FCM) */
    struct cp_conv head_conv1, head_conv2;          /* + bn1, bn2 */
    struct cp_resblock layer[2][2];
    /* xvector */
    struct cp_conv tdnn;                            /* [128, 320, 5] + BN */
    struct cp_dense_layer *block[3];
    const struct tensor *transit[3];
    struct cp_affine transit_bn[3];
    struct cp_affine out_bn;
    struct cp_conv dense;                           /* [192, 1024] (of [192, 1024, 1]) + BN' */
    struct weight_set *ws; /* every weight (folded, converted or as stored),
                            * placed on the load's backend */
};

void campplus_free(struct campplus *c)
{
    if (!c) return;
    weight_set_free(c->ws);
    for (int b = 0; b < 3; b++) free(c->block[b]);
    free(c);
}

struct loader {
    struct campplus *c;
    const struct weights *w;
    cbx_status rc;
    char *err;
};

/* A 1-D parameter [n] as doubles (any float type). */
static bool vec(struct loader *L, const struct tensor *t, double *dst, int64_t n)
{
    float *tmp = malloc((size_t)n * sizeof *tmp);
    if (!tmp) {
        L->rc = err_setf(L->err, CBX_ERR_NOMEM, "campplus: out of memory");
        return false;
    }
    dequantize_row(t->type, t->data, tmp, n);
    for (int64_t i = 0; i < n; i++) dst[i] = tmp[i];
    free(tmp);
    return true;
}

/* BatchNorm `prefix` of n channels folded into f[0..n) (scale) and
 * f[n..2n) (shift) on the host (affine false: no weight/bias, as
 * get_nonlinear("batchnorm_")). */
static void bn_fold(struct loader *L, float *f, int64_t n, bool affine, const char *prefix)
{
    if (L->rc != CBX_OK) return;
    const int64_t ne[1] = {n};
    const struct tensor *g = NULL, *b = NULL, *m, *v;
    if (affine) {
        g = weights_getf(L->w, &L->rc, L->err, 1, ne, "%s.weight", prefix);
        b = weights_getf(L->w, &L->rc, L->err, 1, ne, "%s.bias", prefix);
    }
    m = weights_getf(L->w, &L->rc, L->err, 1, ne, "%s.running_mean", prefix);
    v = weights_getf(L->w, &L->rc, L->err, 1, ne, "%s.running_var", prefix);
    if (L->rc != CBX_OK) return;
    double *d = malloc((size_t)(4 * n) * sizeof *d);
    if (!d) {
        L->rc = err_setf(L->err, CBX_ERR_NOMEM, "campplus: out of memory");
        return;
    }
    double *dg = d, *db = d + n, *dm = d + 2 * n, *dv = d + 3 * n;
    bool ok = vec(L, m, dm, n) && vec(L, v, dv, n);
    if (ok && affine) ok = vec(L, g, dg, n) && vec(L, b, db, n);
    if (ok) {
        for (int64_t i = 0; i < n; i++) {
            double s = (affine ? dg[i] : 1.0) / sqrt(dv[i] + BN_EPS);
            f[i] = (float)s;
            f[n + i] = (float)((affine ? db[i] : 0.0) - dm[i] * s);
        }
    }
    free(d);
}

/* A host F32 weight of the set filled from src, placed in role, copied into
 * *dst (a descriptor the model holds by value; the set keeps the original). */
static void place_f32(struct loader *L, struct tensor *dst, enum weight_role role, int ndim, const int64_t *ne,
                      const float *src, const char *name)
{
    struct tensor *t = weight_new(L->c->ws, TYPE_F32, ndim, ne, name, &L->rc, L->err);
    if (!t) return;
    memcpy(t->data, src, tensor_nbytes(t));
    const struct tensor *p = weight_place(L->c->ws, t, role, WEIGHT_AS_STORED, 0, &L->rc, L->err);
    if (p) *dst = *p;
}

/* BatchNorm `prefix` of n channels folded into *bn. */
static void bn(struct loader *L, struct cp_affine *bn, int64_t n, bool affine, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void bn(struct loader *L, struct cp_affine *bn, int64_t n, bool affine, const char *fmt, ...)
{
    if (L->rc != CBX_OK) return;
    char prefix[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    float *f = malloc((size_t)(2 * n) * sizeof *f);
    if (!f) {
        L->rc = err_setf(L->err, CBX_ERR_NOMEM, "campplus: out of memory");
        return;
    }
    bn_fold(L, f, n, affine, prefix);
    const int64_t ne[1] = {n};
    place_f32(L, &bn->scale, WEIGHT_NORM, 1, ne, f, NULL);
    place_f32(L, &bn->shift, WEIGHT_NORM, 1, ne, f + n, NULL);
    free(f);
}

/* A conv1d weight, placed: as stored when F32/F16/BF16, else dequantised
 * to F32 (the conv ops take float weights only). */
static const struct tensor *conv_w(struct loader *L, int ndim, const int64_t *ne, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static const struct tensor *conv_w(struct loader *L, int ndim, const int64_t *ne, const char *fmt, ...)
{
    if (L->rc != CBX_OK) return NULL;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const struct tensor *t = weights_get(L->w, name, ndim, ne, &L->rc, L->err);
    const bool f = t && (t->type == TYPE_F32 || t->type == TYPE_F16 || t->type == TYPE_BF16);
    return weight_place(L->c->ws, t, WEIGHT_CONV1D, f ? WEIGHT_AS_STORED : TYPE_F32, 0, &L->rc, L->err);
}

/* A bias [n]: must be F32 (biases are never quantised). */
static const struct tensor *bias(struct loader *L, int64_t n, const char *name)
{
    const struct tensor *t = weights_get(L->w, name, 1, (int64_t[]){n}, &L->rc, L->err);
    if (t && t->type != TYPE_F32) {
        L->rc = err_setf(L->err, CBX_ERR_FORMAT, "campplus: %s is %s, want f32", name,
                         dtype_name(t->type));
        return NULL;
    }
    return weight_place(L->c->ws, t, WEIGHT_PLAIN, WEIGHT_AS_STORED, 0, &L->rc, L->err);
}

/* Conv weight `wname` (any stored type) with the BatchNorm `bn_prefix`
 * that follows it folded in (affine false: BN without weight/bias). The
 * weight keeps its shape except that out_ndim 2 drops a trailing kernel
 * dim of 1 (the dense layer used as a linear map). */
static void conv_bn(struct loader *L, struct cp_conv *out, int ndim, const int64_t *ne,
                    int out_ndim, const char *wname, const char *bn_prefix, bool bn_affine)
{
    if (L->rc != CBX_OK) return;
    const struct tensor *t = weights_get(L->w, wname, ndim, ne, &L->rc, L->err);
    if (L->rc != CBX_OK) return;
    int64_t n = tensor_nelements(t), row = t->ne[t->ndim - 1], cout = ne[0];
    float *f = malloc((size_t)(2 * cout) * sizeof *f), *w = malloc((size_t)n * sizeof *w);
    if (!f || !w) {
        free(f);
        free(w);
        L->rc = err_setf(L->err, CBX_ERR_NOMEM, "campplus: out of memory");
        return;
    }
    bn_fold(L, f, cout, bn_affine, bn_prefix);
    if (L->rc == CBX_OK) {
        size_t rs = dtype_row_size(t->type, row);
        for (int64_t r = 0; r < n / row; r++) /* weights are contiguous in every source */
            dequantize_row(t->type, (const char *)t->data + r * rs, w + r * row, row);
        const float *scale = f, *shift = f + cout;
        int64_t per = n / cout;
        for (int64_t o = 0; o < cout; o++)
            for (int64_t k = 0; k < per; k++) w[o * per + k] = (float)((double)w[o * per + k] * scale[o]);
        int64_t wne[4] = {ne[0], ne[1], ndim > 2 ? ne[2] : 1, ndim > 3 ? ne[3] : 1};
        const enum weight_role role = out_ndim == 4 ? WEIGHT_CONV2D : out_ndim == 3 ? WEIGHT_CONV1D : WEIGHT_LINEAR;
        place_f32(L, &out->w, role, out_ndim, wne, w, t->name);
        place_f32(L, &out->b, WEIGHT_PLAIN, 1, ne, shift, NULL); /* b[o] = shift[o] */
    }
    free(f);
    free(w);
}

cbx_status campplus_load(struct campplus **out, const struct weights *w, const struct backend *be, char *err)
{
    *out = NULL;
    struct campplus *c = calloc(1, sizeof *c);
    if (!c || !(c->ws = weight_set_create(be))) {
        free(c);
        return err_setf(err, CBX_ERR_NOMEM, "campplus: out of memory");
    }
    struct loader L = {c, w, CBX_OK, err};
    const char *P = "speaker_encoder";
    /* head = FCM(feat_dim 80) */
    char wn[200], bnn[200];
#define NAMES(wfmt, bfmt, ...)                                                 \
    (snprintf(wn, sizeof wn, wfmt, __VA_ARGS__), snprintf(bnn, sizeof bnn, bfmt, __VA_ARGS__))
    NAMES("%s.head.conv1.weight", "%s.head.bn1", P);
    conv_bn(&L, &c->head_conv1, 4, (int64_t[]){M_CH, 1, 3, 3}, 4, wn, bnn, true);
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < 2; k++) {
            struct cp_resblock *r = &c->layer[l][k];
            r->stride = k == 0 ? 2 : 1; /* _make_layer: strides [2, 1] */
            NAMES("%s.head.layer%d.%d.conv1.weight", "%s.head.layer%d.%d.bn1", P, l + 1, k);
            conv_bn(&L, &r->conv1, 4, (int64_t[]){M_CH, M_CH, 3, 3}, 4, wn, bnn, true);
            NAMES("%s.head.layer%d.%d.conv2.weight", "%s.head.layer%d.%d.bn2", P, l + 1, k);
            conv_bn(&L, &r->conv2, 4, (int64_t[]){M_CH, M_CH, 3, 3}, 4, wn, bnn, true);
            if (r->stride != 1) { /* in_planes == planes: a projection only when strided */
                NAMES("%s.head.layer%d.%d.shortcut.0.weight", "%s.head.layer%d.%d.shortcut.1", P,
                      l + 1, k);
                conv_bn(&L, &r->shortcut, 4, (int64_t[]){M_CH, M_CH, 1, 1}, 4, wn, bnn, true);
            }
        }
    NAMES("%s.head.conv2.weight", "%s.head.bn2", P);
    conv_bn(&L, &c->head_conv2, 4, (int64_t[]){M_CH, M_CH, 3, 3}, 4, wn, bnn, true);
    /* xvector.tdnn: TDNNLayer(320, 128, 5, stride 2, padding (5-1)/2) */
    int64_t head_out = M_CH * (CAMPPLUS_FEAT_DIM / 8);
    NAMES("%s.xvector.tdnn.linear.weight", "%s.xvector.tdnn.nonlinear.batchnorm", P);
    conv_bn(&L, &c->tdnn, 3, (int64_t[]){INIT_CH, head_out, 5}, 3, wn, bnn, true);
    int64_t ch = INIT_CH;
    for (int b = 0; b < 3 && L.rc == CBX_OK; b++) {
        c->block[b] = calloc((size_t)n_layers[b], sizeof *c->block[b]);
        if (!c->block[b]) {
            L.rc = err_setf(err, CBX_ERR_NOMEM, "campplus: out of memory");
            break;
        }
        for (int i = 0; i < n_layers[b]; i++) {
            struct cp_dense_layer *d = &c->block[b][i];
            int64_t cin = ch + (int64_t)i * GROWTH;
            char pre[96], name[160];
            snprintf(pre, sizeof pre, "%s.xvector.block%d.tdnnd%d", P, b + 1, i + 1);
            bn(&L, &d->nonlinear1, cin, true, "%s.nonlinear1.batchnorm", pre);
            NAMES("%s.linear1.weight", "%s.nonlinear2.batchnorm", pre);
            conv_bn(&L, &d->linear1, 3, (int64_t[]){BN_CH, cin, 1}, 3, wn, bnn, true);
            d->linear_local = conv_w(&L, 3, (int64_t[]){GROWTH, BN_CH, 3},
                                     "%s.cam_layer.linear_local.weight", pre);
            d->l1_w = conv_w(&L, 3, (int64_t[]){BN_CH / 2, BN_CH, 1}, "%s.cam_layer.linear1.weight", pre);
            snprintf(name, sizeof name, "%s.cam_layer.linear1.bias", pre);
            d->l1_b = bias(&L, BN_CH / 2, name);
            d->l2_w = conv_w(&L, 3, (int64_t[]){GROWTH, BN_CH / 2, 1}, "%s.cam_layer.linear2.weight", pre);
            snprintf(name, sizeof name, "%s.cam_layer.linear2.bias", pre);
            d->l2_b = bias(&L, GROWTH, name);
        }
        ch += (int64_t)n_layers[b] * GROWTH;
        bn(&L, &c->transit_bn[b], ch, true, "%s.xvector.transit%d.nonlinear.batchnorm", P, b + 1);
        c->transit[b] = conv_w(&L, 3, (int64_t[]){ch / 2, ch, 1}, "%s.xvector.transit%d.linear.weight",
                               P, b + 1);
        ch /= 2;
    }
    bn(&L, &c->out_bn, ch, true, "%s.xvector.out_nonlinear.batchnorm", P);
    /* DenseLayer on the pooled [B, 1024]: linear(x.unsqueeze(-1)).squeeze(-1),
     * a matrix product with the [192, 1024] weight; BN without affine */
    NAMES("%s.xvector.dense.linear.weight", "%s.xvector.dense.nonlinear.batchnorm", P);
    conv_bn(&L, &c->dense, 3, (int64_t[]){CAMPPLUS_EMBED, 2 * ch, 1}, 2, wn, bnn, false);
#undef NAMES
    if (L.rc != CBX_OK) {
        campplus_free(c);
        return L.rc;
    }
    *out = c;
    return CBX_OK;
}

/* ---- forward ---------------------------------------------------------- */

static struct tensor *affine(struct arena *a, struct tensor *x, const struct cp_affine *bn)
{
    return op_channel_affine(a, x, 1, &bn->scale, &bn->shift);
}

static struct tensor *relu(struct arena *a, struct tensor *x)
{
    return op_unary(a, x, UN_RELU, 0, 0);
}

/* BasicResBlock.forward, x [1, 32, H, T] -> [1, 32, H/stride, T] */
static struct tensor *resblock(struct arena *a, const struct cp_resblock *r, struct tensor *x)
{
    struct conv2d_params p1 = {.stride_h = r->stride, .pad_h = 1, .pad_w = 1};
    struct conv2d_params p2 = {.pad_h = 1, .pad_w = 1};
    /* out = F.relu(self.bn1(self.conv1(x))); out = self.bn2(self.conv2(out)) */
    struct tensor *out = relu(a, op_conv2d(a, x, &r->conv1.w, &r->conv1.b, &p1));
    out = op_conv2d(a, out, &r->conv2.w, &r->conv2.b, &p2);
    /* out += self.shortcut(x) */
    struct tensor *sc = x;
    if (r->shortcut.w.data) {
        struct conv2d_params ps = {.stride_h = r->stride};
        sc = op_conv2d(a, x, &r->shortcut.w, &r->shortcut.b, &ps);
    }
    return relu(a, op_add(a, out, sc));
}

/* FCM.forward: x [1, 80, T] -> [1, 320, T] */
/* t from a stage computed in arena `from`; a failure there is recorded in
 * `to` (the arena the caller checks). */
static struct tensor *staged(struct arena *to, struct arena *from, struct tensor *t,
                             const char *what)
{
    if (!t && arena_status(to) == CBX_OK)
        arena_fail(to, arena_status(from) != CBX_OK ? arena_status(from) : CBX_ERR_INTERNAL,
                   "%s: %s", what, arena_errmsg(from));
    return t;
}

/* FCM.forward: x [1, 80, T] -> [1, 320, T]. The head's images are the
 * largest activations (32 x 40 x T), so its stages alternate between
 * arenas pp[0] and pp[1], each reset once the next stage has read its
 * output: memory stays at two stages' worth and is reused while warm.
 * The result lives in pp[1]. */
static struct tensor *fcm(struct arena *a, struct arena *pp[2], const struct campplus *c,
                          struct tensor *x)
{
    int64_t T = x->ne[2];
    x = op_reshape(a, x, 4, (int64_t[]){1, 1, CAMPPLUS_FEAT_DIM, T});  /* x.unsqueeze(1) */
    struct conv2d_params p = {.pad_h = 1, .pad_w = 1};
    int cur = 0; /* arena of the next stage's output */
    struct tensor *out =
        relu(pp[cur], op_conv2d(pp[cur], x, &c->head_conv1.w, &c->head_conv1.b, &p));
    out = staged(a, pp[cur], out, "head.conv1");
    for (int l = 0; l < 2 && out; l++)                                /* layer1, layer2 */
        for (int k = 0; k < 2 && out; k++) {
            cur ^= 1;
            out = staged(a, pp[cur], resblock(pp[cur], &c->layer[l][k], out), "head.layer");
            arena_reset(pp[cur ^ 1]);
        }
    if (!out) return NULL;
    struct conv2d_params p2 = {.stride_h = 2, .pad_h = 1, .pad_w = 1};
    cur ^= 1;                                                         /* back to pp[1] */
    out = relu(pp[cur], op_conv2d(pp[cur], out, &c->head_conv2.w, &c->head_conv2.b, &p2));
    out = staged(a, pp[cur], out, "head.conv2");
    arena_reset(pp[cur ^ 1]);
    if (!out) return NULL;                                           /* [1, 32, 10, T] */
    /* out.reshape(B, C * H, T) */
    return op_reshape(a, out, 3, (int64_t[]){1, out->ne[1] * out->ne[2], out->ne[3]});
}

/* CAMLayer.forward, x [1, 128, T] -> [1, 32, T]. The context
 * x.mean(-1) + seg_pooling(x) is constant over each 100-frame segment and
 * linear1/linear2 are 1x1 convs, so the mask is computed once per segment
 * ([1, 128, n_seg] -> [1, 32, n_seg]) and then repeated over the segment's
 * frames, as seg_pooling repeats the pooled means: the same numbers. */
static struct tensor *cam_layer(struct arena *a, const struct cp_dense_layer *d, int dilation,
                                struct tensor *x)
{
    int64_t T = x->ne[2], n_seg = (T + SEG_LEN - 1) / SEG_LEN;
    /* y = self.linear_local(x) */
    struct conv1d_params pl = {.dilation = dilation, .pad_left = dilation, .pad_right = dilation};
    struct tensor *y = op_conv1d(a, x, d->linear_local, NULL, &pl);
    /* context = x.mean(-1, keepdim=True) + F.avg_pool1d(x, 100, 100, ceil_mode=True)
     * (the last, partial window averages over its actual length) */
    struct tensor *mean = op_reduce(a, x, RED_MEAN);                   /* [1, 128, 1] */
    struct tensor *seg = NULL;
    for (int64_t s = 0; s < n_seg; s++) {
        int64_t len = T - s * SEG_LEN < SEG_LEN ? T - s * SEG_LEN : SEG_LEN;
        struct tensor *m = op_reduce(a, op_slice(a, x, 2, s * SEG_LEN, len), RED_MEAN);
        seg = seg ? op_concat(a, seg, m, 2) : m;
    }                                                                  /* [1, 128, n_seg] */
    struct tensor *context = op_add(a, seg, mean);
    /* m = sigmoid(linear2(relu(linear1(context)))) */
    context = relu(a, op_conv1d(a, context, d->l1_w, d->l1_b, NULL));
    struct tensor *m = op_unary(a, op_conv1d(a, context, d->l2_w, d->l2_b, NULL), UN_SIGMOID, 0, 0);
    /* repeat each segment's mask over its frames: [1, 32, n_seg*100][..., :T]
     * (one segment: m [1, 32, 1] broadcasts in the product) */
    if (n_seg > 1) m = op_slice(a, op_upsample_nearest(a, m, SEG_LEN), 2, 0, T);
    return op_mul(a, y, m);                                            /* y * m */
}

/* CAMDenseTDNNBlock b on x [1, c0, T] -> [1, c0 + 32 n_layers, T].
 * torch.cat([x, layer(x)], dim=1) per layer is done by writing each
 * layer's 32 channels into one preallocated buffer, whose leading
 * channels are the next layer's input (a view, B = 1), so nothing is
 * copied twice. Each layer's intermediates live in scratch arena s, reset
 * after the layer, so memory stays bounded and warm. */
static struct tensor *dense_block(struct arena *a, struct arena *s, const struct campplus *c,
                                  int b, struct tensor *x)
{
    if (!x) return NULL;
    int64_t c0 = x->ne[1], T = x->ne[2];
    struct tensor *buf = arena_tensor(a, TYPE_F32, 3,
                                      (int64_t[]){1, c0 + (int64_t)n_layers[b] * GROWTH, T});
    if (!buf || op_copy_into(a, op_slice(a, buf, 1, 0, c0), x) != CBX_OK) return NULL;
    for (int i = 0; i < n_layers[b]; i++) {
        const struct cp_dense_layer *d = &c->block[b][i];
        int64_t cin = c0 + (int64_t)i * GROWTH;
        struct tensor *xi = op_slice(a, buf, 1, 0, cin);               /* [1, c_in, T] */
        /* bn_function: linear1(nonlinear1(x)); then nonlinear2, cam_layer */
        struct tensor *h = relu(s, affine(s, xi, &d->nonlinear1));
        h = relu(s, op_conv1d(s, h, &d->linear1.w, &d->linear1.b, NULL)); /* [1, 128, T] */
        struct tensor *y = cam_layer(s, d, dilations[b], h);           /* [1, 32, T] */
        if (!y) {
            arena_fail(a, arena_status(s) != CBX_OK ? arena_status(s) : CBX_ERR_INTERNAL,
                       "xvector.block%d.tdnnd%d: %s", b + 1, i + 1, arena_errmsg(s));
            return NULL;
        }
        if (op_copy_into(a, op_slice(a, buf, 1, cin, GROWTH), y) != CBX_OK) return NULL;
        arena_reset(s);
    }
    return buf;
}

/* CAMPPlus.forward on x [1, 80, T] (mean-normalised fbank, transposed);
 * pp: two scratch arenas (head stages, dense layers). */
static struct tensor *campplus_forward(struct arena *a, struct arena *pp[2],
                                       const struct campplus *c, struct tensor *x)
{
    x = fcm(a, pp, c, x);                                              /* [1, 320, T] */
    /* xvector.tdnn: Conv1d(320, 128, 5, stride 2, padding 2) -> BN -> ReLU */
    struct conv1d_params pt = {.stride = 2, .pad_left = 2, .pad_right = 2};
    x = relu(a, op_conv1d(a, x, &c->tdnn.w, &c->tdnn.b, &pt));         /* [1, 128, T'] */
    arena_reset(pp[1]);
    struct arena *s = pp[0]; /* scratch of the dense layers */
    for (int b = 0; b < 3; b++) {
        x = dense_block(a, s, c, b, x);                                /* + 32 per layer */
        /* transit: BN -> ReLU -> Conv1d(c, c/2, 1) */
        x = op_conv1d(a, relu(a, affine(a, x, &c->transit_bn[b])), c->transit[b], NULL, NULL);
    }
    x = relu(a, affine(a, x, &c->out_bn));                             /* [1, 512, T'] */
    if (!x) return NULL;
    /* stats: cat([x.mean(-1), x.std(-1, unbiased=True)]) */
    int64_t T = x->ne[2];
    struct tensor *mean = op_reduce(a, x, RED_MEAN);                   /* [1, 512, 1] */
    struct tensor *dev = op_binary(a, x, mean, BIN_SUB);
    struct tensor *var = op_reduce(a, op_unary(a, dev, UN_SQR, 0, 0), RED_SUM);
    struct tensor *std = op_unary(a, op_scale(a, var, 1.0f / (float)(T - 1)), UN_SQRT, 0, 0);
    struct tensor *stats = op_concat(a, mean, std, 1);                 /* [1, 1024, 1] */
    stats = op_reshape(a, stats, 2, (int64_t[]){1, 2 * x->ne[1]});
    /* dense: Conv1d(1024, 192, 1) as a linear map, then BatchNorm(affine=False) */
    return op_linear(a, stats, &c->dense.w, &c->dense.b);              /* [1, 192] */
}

static cbx_status arena_err(struct arena *a, char *err, const char *what)
{
    cbx_status s = arena_status(a);
    if (s == CBX_OK) s = CBX_ERR_INTERNAL;
    return err_setf(err, s, "%s: %s", what, arena_errmsg(a));
}

cbx_status campplus_embed_fbank(const struct campplus *c, const struct backend *be,
                                const float *fbank, int64_t frames, float out[192], char *err)
{
    if (frames < 3)
        return err_setf(err, CBX_ERR_INVALID_ARG,
                        "campplus: %lld fbank frames, need at least 3 (the pooled std needs 2 frames after the stride-2 tdnn)",
                        (long long)frames);
    struct arena *a = arena_create(be, (size_t)16 << 20);
    struct arena *pp[2] = {arena_create(be, 0), arena_create(be, 0)};
    cbx_status rc = CBX_OK;
    if (!a || !pp[0] || !pp[1]) {
        rc = err_setf(err, CBX_ERR_NOMEM, "campplus: out of memory");
        goto cleanup;
    }
    /* extract_feature: feature - feature.mean(dim=0, keepdim=True), then
     * CAMPPlus.forward: x.permute(0, 2, 1) -> [1, 80, T] */
    struct tensor *f = op_from_host(a, TYPE_F32, 2, (int64_t[]){frames, CAMPPLUS_FEAT_DIM}, fbank);
    struct tensor *ft = op_transpose(a, f, 0, 1);                      /* [80, T] view */
    struct tensor *x = op_binary(a, ft, op_reduce(a, op_cont(a, ft), RED_MEAN), BIN_SUB);
    x = op_reshape(a, x, 3, (int64_t[]){1, CAMPPLUS_FEAT_DIM, frames});
    struct tensor *e = campplus_forward(a, pp, c, x);
    if (!e) {
        rc = arena_err(a, err, "campplus forward");
        goto cleanup;
    }
    rc = tensor_to_host(e, out);
    if (rc != CBX_OK) err_setf(err, rc, "campplus: embedding read-back failed");
cleanup:
    arena_free(pp[1]);
    arena_free(pp[0]);
    arena_free(a);
    return rc;
}

cbx_status campplus_embed(const struct campplus *c, const struct backend *be,
                          const float *wav16, int64_t n, float out[192], char *err)
{
    float *fb = NULL;
    int64_t frames = 0;
    cbx_status rc = kaldi_fbank(wav16, n, CAMPPLUS_FEAT_DIM, &fb, &frames, err);
    if (rc == CBX_OK) rc = campplus_embed_fbank(c, be, fb, frames, out, err);
    free(fb);
    return rc;
}

/* ---- torchaudio.compliance.kaldi.fbank ---------------------------------- */

#define FB_SR 16000
#define FB_WIN 400      /* frame_length 25 ms */
#define FB_SHIFT 160    /* frame_shift 10 ms */
#define FB_NFFT 512     /* round_to_power_of_two */
#define FB_PREEMPH 0.97f
#define FB_LOW 20.0
#define FB_EPS 1.1920928955078125e-07f /* torch.finfo(torch.float).eps */

/* The r2c plan of FB_NFFT from the process's plan cache (FFTW's planner is
 * not thread-safe; the new-array execute functions are). */
static fftwf_plan get_plan(void)
{
    fftwf_plan r2c, c2r;
    return fft_plans_get(FB_NFFT, &r2c, &c2r) ? r2c : NULL;
}

static float mel_scale(float f) { return 1127.0f * logf(1.0f + f / 700.0f); }

/* get_mel_banks(num_bins, 512, 16000, low 20, high 0 -> 8000, vtln 1.0):
 * banks [num_bins, 257], the last FFT bin weighted 0. float32 like
 * torchaudio (the band edges are Python floats, the rest tensors). */
static void mel_banks(int num_bins, float *banks)
{
    const int nb = FB_NFFT / 2;
    double mel_low = 1127.0 * log(1.0 + FB_LOW / 700.0);
    double mel_high = 1127.0 * log(1.0 + (FB_SR / 2.0) / 700.0);
    double delta = (mel_high - mel_low) / (num_bins + 1);
    const float bin_width = (float)FB_SR / FB_NFFT;
    for (int m = 0; m < num_bins; m++) {
        float left = (float)(mel_low + m * delta), center = (float)(mel_low + (m + 1) * delta),
              right = (float)(mel_low + (m + 2) * delta);
        float *row = banks + (size_t)m * (nb + 1);
        for (int k = 0; k < nb; k++) {
            float mel = mel_scale(bin_width * (float)k);
            float up = (mel - left) / (center - left), down = (right - mel) / (right - center);
            float v = up < down ? up : down;
            row[k] = v > 0.0f ? v : 0.0f;
        }
        row[nb] = 0.0f; /* F.pad(bins, (0, 1)) */
    }
}

cbx_status kaldi_fbank(const float *wav16, int64_t n, int num_mel_bins, float **out,
                       int64_t *frames, char *err)
{
    *out = NULL;
    *frames = 0;
    if (num_mel_bins < 1 || num_mel_bins > 256)
        return err_setf(err, CBX_ERR_INVALID_ARG, "kaldi_fbank: num_mel_bins %d, want 1..256",
                        num_mel_bins);
    if (n < FB_WIN)
        return err_setf(err, CBX_ERR_INVALID_ARG,
                        "kaldi_fbank: %lld samples, need at least %d (25 ms at 16 kHz)",
                        (long long)n, FB_WIN);
    fftwf_plan plan = get_plan();
    if (!plan) return err_setf(err, CBX_ERR_NOMEM, "kaldi_fbank: FFT plan failed");
    const int nbin = FB_NFFT / 2 + 1;
    int64_t F = 1 + (n - FB_WIN) / FB_SHIFT; /* snip_edges */
    cbx_status rc = CBX_OK;
    float *banks = malloc((size_t)num_mel_bins * nbin * sizeof *banks);
    float *fr = fftwf_malloc(FB_NFFT * sizeof *fr);
    fftwf_complex *X = fftwf_malloc(nbin * sizeof *X);
    float *pw = malloc(nbin * sizeof *pw);
    float *res = malloc((size_t)(F * num_mel_bins) * sizeof *res);
    float win[FB_WIN];
    if (!banks || !fr || !X || !pw || !res) {
        rc = err_setf(err, CBX_ERR_NOMEM, "kaldi_fbank: out of memory");
        goto cleanup;
    }
    mel_banks(num_mel_bins, banks);
    /* povey: torch.hann_window(400, periodic=False).pow(0.85) */
    for (int k = 0; k < FB_WIN; k++) {
        float h = (float)(0.5 - 0.5 * cos(2.0 * M_PI * k / (FB_WIN - 1)));
        win[k] = powf(h, 0.85f);
    }
    for (int64_t t = 0; t < F; t++) {
        const float *x = wav16 + t * FB_SHIFT;
        /* dither 0; remove_dc_offset: minus the frame mean */
        double s = 0.0;
        for (int k = 0; k < FB_WIN; k++) s += x[k];
        float mean = (float)(s / FB_WIN);
        float prev = x[0] - mean; /* preemphasis with replicate padding */
        for (int k = 0; k < FB_WIN; k++) {
            float cur = x[k] - mean;
            fr[k] = (cur - FB_PREEMPH * prev) * win[k];
            prev = cur;
        }
        memset(fr + FB_WIN, 0, (FB_NFFT - FB_WIN) * sizeof *fr);
        fftwf_execute_dft_r2c(plan, fr, X);
        /* use_power: |X|^2 (torch: fft.abs().pow(2.0)) */
        for (int k = 0; k < nbin; k++) {
            float mag = hypotf(X[k][0], X[k][1]);
            pw[k] = mag * mag;
        }
        /* mel energies, then log(max(e, eps)) */
        float *o = res + t * num_mel_bins;
        for (int m = 0; m < num_mel_bins; m++) {
            const float *b = banks + (size_t)m * nbin;
            float e = 0.0f;
            for (int k = 0; k < nbin; k++) e += b[k] * pw[k];
            o[m] = logf(e > FB_EPS ? e : FB_EPS);
        }
    }
    *out = res;
    res = NULL;
    *frames = F;
cleanup:
    free(banks);
    fftwf_free(fr);
    fftwf_free(X);
    free(pw);
    free(res);
    return rc;
}
