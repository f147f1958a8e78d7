/* hift.c - HiFT vocoder: mel + F0 source -> 24 kHz waveform.
 * Ports chatterbox/models/s3gen/hifigan.py (HiFTGenerator, SineGen,
 * SourceModuleHnNSF, ResBlock, Snake) and f0_predictor.py
 * (ConvRNNF0Predictor), chatterbox 0.1.7, in call order; spec/hift.md.
 *
 * Weight norm (hift.md §8) is folded at load: W = v * (g / ||v||), the norm
 * over every axis but axis 0, as torch._weight_norm(v, g, dim=0) computes
 * it (for ConvTranspose1d axis 0 is the input channel, as upstream).
 *
 * Memory: the long signals' intermediates (ResBlocks, the 9-harmonic
 * SineGen tensors) live in private scratch arenas created per call on the
 * caller's backend and reset block by block; the caller's arena receives
 * only stage results (35 MiB at 134 frames, growing linearly with T). */
#include "hift.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/weights.h"
#include "core/quant.h"
#include "core/rng.h"
#include "core/window.h"

/* ---- configuration (hift.md §1) ----------------------------------------- */

#define N_MELS 80
#define N_UPS 3
#define N_KERNELS 3           /* resblocks per stage */
#define N_HARMONIC 9          /* nb_harmonics 8 + the fundamental */
#define N_FFT 16
#define HOP 4
#define N_BINS (N_FFT / 2 + 1)

static const int upsample_rates[N_UPS] = {8, 5, 3};
static const int upsample_kernel_sizes[N_UPS] = {16, 11, 7};
static const int resblock_kernel_sizes[N_KERNELS] = {3, 7, 11};
static const int source_resblock_kernel_sizes[N_UPS] = {7, 7, 11};
static const int resblock_dilations[3] = {1, 3, 5}; /* every ResBlock */
/* source_downs[i]: Conv1d(18, C_i, 2u, u, padding u/2) with u = 15, 3, and
 * Conv1d(18, C_2, 1, 1) for u = 1 (cumulative products of [1, 3, 5] reversed) */
static const int source_down_rates[N_UPS] = {15, 3, 1};

static const float sine_amp = 0.1f;      /* nsf_alpha */
static const float noise_std = 0.003f;   /* nsf_sigma */
static const float voiced_threshold = 10.0f;
static const float lrelu_slope = 0.1f;
static const float audio_limit = 0.99f;

/* ---- model ------------------------------------------------------------- */

struct hift_conv {
    const struct tensor *w, *b; /* F32; w [out, in, k] (ConvTranspose1d [in, out, k]) */
};

/* ResBlock(C, k, [1, 3, 5]) with Snake activations. */
struct hift_resblock {
    int k;
    struct hift_conv convs1[3], convs2[3];
    const struct tensor *alpha1[3], *alpha2[3]; /* activations{1,2}.j.alpha [C] */
};

struct hift {
    int base_channels; /* 512 */
    /* f0_predictor */
    struct hift_conv condnet[5];
    const struct tensor *classifier_w, *classifier_b; /* [1, Cc], [1] */
    /* m_source */
    const struct tensor *l_linear_w, *l_linear_b;     /* [1, 9], [1] */
    /* decoder */
    struct hift_conv conv_pre, ups[N_UPS], source_downs[N_UPS], conv_post;
    struct hift_resblock source_resblocks[N_UPS], resblocks[N_UPS * N_KERNELS];
    float stft_window[N_FFT]; /* periodic Hann (scipy get_window("hann", 16)) */
    struct weight_set *ws; /* every weight (folded, converted or as stored),
                            * placed on the load's backend */
};

void hift_free(struct hift *h)
{
    if (!h) return;
    weight_set_free(h->ws);
    free(h);
}

/* ---- loading ----------------------------------------------------------- */

struct loader {
    struct hift *h;
    const struct weights *w;
    cbx_status rc;
    char *err;
};

/* Tensor t as contiguous F32 rows into dst (any stored type). */
static void to_f32(const struct tensor *t, float *dst)
{
    int64_t inner = t->ne[t->ndim - 1], rows = tensor_nrows(t);
    for (int64_t r = 0; r < rows; r++)
        dequantize_row(t->type, (const char *)t->data + tensor_row_offset(t, r), dst + r * inner, inner);
}

/* Tensor as F32 in role (converted when stored otherwise), placed. */
static const struct tensor *get_plain(struct loader *L, enum weight_role role, int ndim, const int64_t *ne,
                                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static const struct tensor *get_plain(struct loader *L, enum weight_role role, int ndim, const int64_t *ne,
                                      const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const struct tensor *t = weights_get(L->w, name, ndim, ne, &L->rc, L->err);
    return weight_place(L->h->ws, t, role, TYPE_F32, 0, &L->rc, L->err);
}

/* Weight-normed layer `<prefix>`: W = v * (g / ||v||) with the norm over all
 * axes but 0 (torch._weight_norm, dim 0), v of shape ne; plus its bias
 * [bias_n]. Accepts parametrizations.weight.original0/1 and weight_g/_v.
 * The folded weight is placed in role (a conv or a transposed conv). */
static struct hift_conv get_wn(struct loader *L, enum weight_role role, const int64_t ne[3], int64_t bias_n,
                               const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static struct hift_conv get_wn(struct loader *L, enum weight_role role, const int64_t ne[3], int64_t bias_n,
                               const char *fmt, ...)
{
    struct hift_conv c = {0};
    char prefix[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    if (L->rc != CBX_OK) return c;
    const char *gs = "parametrizations.weight.original0", *vs = "parametrizations.weight.original1";
    if (!weights_has(L->w, "%s.%s", prefix, vs) && weights_has(L->w, "%s.weight_v", prefix)) {
        gs = "weight_g";
        vs = "weight_v";
    }
    const int64_t gne[3] = {ne[0], 1, 1};
    const struct tensor *g = weights_getf(L->w, &L->rc, L->err, 3, gne, "%s.%s", prefix, gs);
    const struct tensor *v = weights_getf(L->w, &L->rc, L->err, 3, ne, "%s.%s", prefix, vs);
    c.b = get_plain(L, WEIGHT_PLAIN, 1, (int64_t[]){bias_n}, "%s.bias", prefix);
    if (!g || !v) return c;
    struct tensor *w = weight_new(L->h->ws, TYPE_F32, 3, v->ne, v->name, &L->rc, L->err);
    float *gv = malloc(sizeof(float) * (size_t)g->ne[0]);
    if (!w || !gv) {
        free(gv);
        if (L->rc == CBX_OK) L->rc = err_setf(L->err, CBX_ERR_NOMEM, "hift: out of memory for %s", prefix);
        return c;
    }
    to_f32(v, w->data);
    to_f32(g, gv);
    if (L->w->mapped) weight_drop_source(v); /* only the folded weight is read from now on */
    int64_t n = v->ne[1] * v->ne[2];
    float *wd = w->data;
    for (int64_t o = 0; o < v->ne[0]; o++) {
        float *row = wd + o * n;
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)row[i] * row[i];
        float norm = (float)sqrt(ss);
        float s = gv[o] / norm; /* v * (g / norm) */
        for (int64_t i = 0; i < n; i++) row[i] = row[i] * s;
    }
    free(gv);
    c.w = weight_place(L->h->ws, w, role, WEIGHT_AS_STORED, 0, &L->rc, L->err);
    return c;
}

static void load_resblock(struct loader *L, struct hift_resblock *r, int64_t C, int k,
                          const char *list, int idx)
{
    r->k = k;
    const int64_t wne[3] = {C, C, k}, cne[1] = {C};
    for (int j = 0; j < 3; j++) {
        r->convs1[j] = get_wn(L, WEIGHT_CONV1D, wne, C, "mel2wav.%s.%d.convs1.%d", list, idx, j);
        r->convs2[j] = get_wn(L, WEIGHT_CONV1D, wne, C, "mel2wav.%s.%d.convs2.%d", list, idx, j);
        r->alpha1[j] = get_plain(L, WEIGHT_PLAIN, 1, cne, "mel2wav.%s.%d.activations1.%d.alpha", list, idx, j);
        r->alpha2[j] = get_plain(L, WEIGHT_PLAIN, 1, cne, "mel2wav.%s.%d.activations2.%d.alpha", list, idx, j);
    }
}

cbx_status hift_load(struct hift **out, const struct weights *w, const struct backend *be, char *err)
{
    *out = NULL;
    struct hift *h = calloc(1, sizeof *h);
    if (!h || !(h->ws = weight_set_create(be))) {
        free(h);
        return err_setf(err, CBX_ERR_NOMEM, "hift: out of memory");
    }
    struct loader L = {h, w, CBX_OK, err};

    /* base_channels from conv_pre's output channels */
    const char *pre_v = weights_has(w, "mel2wav.conv_pre.weight_v")
                            ? "mel2wav.conv_pre.weight_v"
                            : "mel2wav.conv_pre.parametrizations.weight.original1";
    const struct tensor *v = weights_get(w, pre_v, 3, (int64_t[]){-1, N_MELS, 7}, &L.rc, err);
    if (!v) goto fail;
    int64_t C = v->ne[0];
    if (C % 8 || C < 8) {
        L.rc = err_setf(err, CBX_ERR_FORMAT, "hift: %s has %lld output channels, want a multiple of 8",
                        pre_v, (long long)C);
        goto fail;
    }
    h->base_channels = (int)C;

    /* f0_predictor: condnet.{0,2,4,6,8} conv(k 3) + ELU, classifier */
    const struct tensor *c0 = weights_get(
        w, weights_has(w, "mel2wav.f0_predictor.condnet.0.weight_v")
               ? "mel2wav.f0_predictor.condnet.0.weight_v"
               : "mel2wav.f0_predictor.condnet.0.parametrizations.weight.original1",
        3, (int64_t[]){-1, N_MELS, 3}, &L.rc, err);
    if (!c0) goto fail;
    int64_t Cc = c0->ne[0];
    for (int i = 0; i < 5; i++) {
        const int64_t ne[3] = {Cc, i == 0 ? N_MELS : Cc, 3};
        h->condnet[i] = get_wn(&L, WEIGHT_CONV1D, ne, Cc, "mel2wav.f0_predictor.condnet.%d", 2 * i);
    }
    h->classifier_w = get_plain(&L, WEIGHT_LINEAR, 2, (int64_t[]){1, Cc}, "mel2wav.f0_predictor.classifier.weight");
    h->classifier_b = get_plain(&L, WEIGHT_PLAIN, 1, (int64_t[]){1}, "mel2wav.f0_predictor.classifier.bias");

    /* m_source.l_linear */
    h->l_linear_w = get_plain(&L, WEIGHT_LINEAR, 2, (int64_t[]){1, N_HARMONIC}, "mel2wav.m_source.l_linear.weight");
    h->l_linear_b = get_plain(&L, WEIGHT_PLAIN, 1, (int64_t[]){1}, "mel2wav.m_source.l_linear.bias");

    /* decoder */
    h->conv_pre = get_wn(&L, WEIGHT_CONV1D, (int64_t[]){C, N_MELS, 7}, C, "mel2wav.conv_pre");
    for (int i = 0; i < N_UPS; i++) {
        int64_t cin = C >> i, cout = C >> (i + 1);
        h->ups[i] = get_wn(&L, WEIGHT_CONV_TRANSPOSE1D, (int64_t[]){cin, cout, upsample_kernel_sizes[i]}, cout, "mel2wav.ups.%d", i);
        int u = source_down_rates[i];
        int64_t kd = u == 1 ? 1 : 2 * u;
        h->source_downs[i].w = get_plain(&L, WEIGHT_CONV1D, 3, (int64_t[]){cout, 2 * N_BINS, kd},
                                         "mel2wav.source_downs.%d.weight", i);
        h->source_downs[i].b = get_plain(&L, WEIGHT_PLAIN, 1, (int64_t[]){cout}, "mel2wav.source_downs.%d.bias", i);
        load_resblock(&L, &h->source_resblocks[i], cout, source_resblock_kernel_sizes[i],
                      "source_resblocks", i);
        for (int j = 0; j < N_KERNELS; j++)
            load_resblock(&L, &h->resblocks[i * N_KERNELS + j], cout, resblock_kernel_sizes[j],
                          "resblocks", i * N_KERNELS + j);
    }
    h->conv_post = get_wn(&L, WEIGHT_CONV1D, (int64_t[]){2 * N_BINS, C >> N_UPS, 7}, 2 * N_BINS, "mel2wav.conv_post");
    window_hann(h->stft_window, N_FFT, true);
    if (L.rc != CBX_OK) goto fail;
    *out = h;
    return CBX_OK;
fail:
    hift_free(h);
    return L.rc;
}

/* ---- building blocks ---------------------------------------------------- */

static struct tensor *conv(struct arena *a, const struct tensor *x, const struct hift_conv *c,
                           int stride, int dilation, int padding)
{
    const struct conv1d_params p = {stride, dilation, 1, padding, padding, PAD_ZERO};
    return op_conv1d(a, x, c->w, c->b, &p);
}

/* s's failure passed on to a, s reset (its tensors are dead). */
static void drop(struct arena *a, struct arena *s)
{
    if (arena_status(s) != CBX_OK) arena_fail(a, arena_status(s), "%s", arena_errmsg(s));
    arena_reset(s);
}

/* Intermediates of long signals (a ResBlock holds ~13 tensors of
 * [C, 120 T]) live in scratch arenas that are reset once a block's result
 * exists: a block computes in scratch s and only its last op allocates in
 * the output arena a, so a grows by a few tensors per stage rather than by
 * every intermediate. done(): pass s's failure on to a, reset s. */
static struct tensor *done(struct arena *a, struct arena *s, struct tensor *y)
{
    drop(a, s);
    return arena_status(a) == CBX_OK ? y : NULL;
}

/* ResBlock.forward: for j: x = convs2[j](snake2(convs1[j](snake1(x)))) + x.
 * Result in a. The intermediates live in four scratch arenas of s, each
 * reset once its tensor is consumed: x's value (two in turn) and the
 * chain's temporaries (two in turn), so at most four [C, L] tensors are
 * alive instead of a block's thirteen (at HiFT's last stage each is
 * 64 x 120 T floats: 15 MB for 10 s of audio). */
static struct tensor *resblock(struct arena *a, struct arena *s, const struct hift_resblock *r,
                               struct tensor *x)
{
    if (!x) return NULL;
    struct arena *xs[2] = {arena_scratch(s), arena_scratch(s)};
    struct arena *p = arena_scratch(s), *q = arena_scratch(s);
    if (xs[0] && xs[1] && p && q)
        for (int j = 0; j < 3; j++) {
            const int d = resblock_dilations[j];
            struct tensor *t = op_snake(p, x, r->alpha1[j]);
            t = conv(q, t, &r->convs1[j], 1, d, (r->k * d - d) / 2);
            drop(s, p);
            t = op_snake(p, t, r->alpha2[j]);
            drop(s, q);
            t = conv(q, t, &r->convs2[j], 1, 1, (r->k - 1) / 2);
            drop(s, p);
            x = op_add(j == 2 ? a : xs[j & 1], t, x);
            drop(s, q);
            if (j > 0) drop(s, xs[(j - 1) & 1]);
        }
    for (int i = 0; i < 2; i++) arena_scratch_done(s, xs[i]);
    arena_scratch_done(s, p);
    arena_scratch_done(s, q);
    return done(a, s, x);
}

static bool want_mel(struct arena *a, const struct tensor *mel, const char *fn)
{
    if (!mel) return false;
    if (mel->type != TYPE_F32 || mel->ndim != 3 || mel->ne[0] != 1 || mel->ne[1] != N_MELS ||
        mel->ne[2] < 1) {
        char s[64];
        arena_fail(a, CBX_ERR_INVALID_ARG, "%s: mel %s, want F32 [1, %d, T>0]", fn,
                   tensor_shape_str(mel, s, sizeof s), N_MELS);
        return false;
    }
    return true;
}

/* ---- ConvRNNF0Predictor ------------------------------------------------- */

struct tensor *hift_f0(struct arena *a, const struct hift *h, const struct tensor *mel)
{
    if (!want_mel(a, mel, "hift_f0")) return NULL;
    /* always F32 products (whatever arena_bf16 says): f0 is integrated
     * into the sine phase over the whole utterance, so an error here
     * becomes a phase drift of the waveform, not a local one; the f0
     * predictor is ~2% of HiFT's work */
    const bool bf16 = arena_bf16(a);
    arena_set_bf16(a, false);
    /* condnet: 5 x [Conv1d(k 3, padding 1), ELU] */
    struct tensor *x = NULL;
    for (int i = 0; i < 5; i++) {
        x = conv(a, i == 0 ? mel : x, &h->condnet[i], 1, 1, 1); /* [1, Cc, T] */
        x = op_unary(a, x, UN_ELU, 1.0f, 0.0f);
    }
    x = op_transpose(a, x, 1, 2);                          /* [1, T, Cc] */
    x = op_linear(a, x, h->classifier_w, h->classifier_b); /* [1, T, 1] */
    arena_set_bf16(a, bf16);
    if (!x) return NULL;
    x = op_reshape(a, x, 2, (int64_t[]){1, mel->ne[2]});   /* squeeze(-1) */
    x = op_unary(a, x, UN_ABS, 0, 0);                      /* [1, T] */
    if (x) x->name = "mel2wav.f0_predictor";
    return x;
}

/* ---- f0_upsamp + SourceModuleHnNSF (SineGen) ----------------------------- */

/* f0 [1, T] -> s [1, 1, 480 T]. The per-frame factors (f0 * (i + 1) / 24000,
 * uv, noise_amp) are formed on the host from the T f0 values (exactly the
 * float32 operations upstream applies per sample: nearest upsampling only
 * repeats them), the phases are drawn from the shared RNG on the host, the
 * noise (9 x S gaussians) by op_randn on the backend; the rest are ops. */
static struct tensor *source_in(struct arena *out, struct arena *a, const struct hift *h,
                                const struct tensor *f0, uint64_t seed)
{
    if (f0->type != TYPE_F32 || f0->ndim != 2 || f0->ne[0] != 1 || f0->ne[1] < 1) {
        char s[64];
        arena_fail(a, CBX_ERR_INVALID_ARG, "hift_source: f0 %s, want F32 [1, T>0]",
                   tensor_shape_str(f0, s, sizeof s));
        return NULL;
    }
    const int64_t T = f0->ne[1], S = T * HIFT_SAMPLES_PER_FRAME;
    float *f0h = arena_alloc_host(a, sizeof(float) * (size_t)T);
    float *fmat = arena_alloc_host(a, sizeof(float) * (size_t)(N_HARMONIC * T));
    float *uvh = arena_alloc_host(a, sizeof(float) * (size_t)T);
    float *amp = arena_alloc_host(a, sizeof(float) * (size_t)T);
    if (!f0h || !fmat || !uvh || !amp) return NULL;
    if (tensor_to_host(f0, f0h) != CBX_OK) {
        arena_fail(a, CBX_ERR_INTERNAL, "hift_source: cannot read f0");
        return NULL;
    }
    /* SineGen.forward */
    for (int i = 0; i < N_HARMONIC; i++)               /* F_mat = f0 * (i + 1) / sampling_rate */
        for (int64_t t = 0; t < T; t++)
            fmat[i * T + t] = f0h[t] * (float)(i + 1) / (float)HIFT_SAMPLE_RATE;
    for (int64_t t = 0; t < T; t++) {
        uvh[t] = f0h[t] > voiced_threshold ? 1.0f : 0.0f; /* _f02uv */
        /* noise_amp = uv * noise_std + (1 - uv) * sine_amp / 3 */
        amp[t] = uvh[t] * noise_std + (1.0f - uvh[t]) * sine_amp / 3.0f;
    }
    /* Uniform(-pi, pi).sample((B, 9, 1)): low + rand * (high - low) in float32;
     * phase_vec[:, 0, :] = 0 (drawn, then overwritten) */
    struct rng_stream rs;
    float phase[N_HARMONIC];
    const float low = (float)-M_PI, high = (float)M_PI;
    rng_stream_init(&rs, "hift.sinegen.phase", seed);
    rng_uniform_fill(&rs, phase, N_HARMONIC);
    for (int i = 0; i < N_HARMONIC; i++) phase[i] = low + phase[i] * (high - low);
    phase[0] = 0.0f;
    rng_stream_init(&rs, "hift.sinegen.noise", seed);   /* randn_like(sine_waves) [1, 9, S] */
    struct tensor *noise = op_randn(a, 2, (int64_t[]){N_HARMONIC, S}, &rs); /* on the backend */

    const int R = HIFT_SAMPLES_PER_FRAME;
    struct tensor *F = op_upsample_nearest(a, op_from_host(a, TYPE_F32, 2, (int64_t[]){N_HARMONIC, T}, fmat), R);
    /* theta_mat = 2 * pi * (cumsum(F_mat, -1) % 1); the sums are >= 0, so
     * % 1 is x - trunc(x), exact in float32 */
    struct tensor *cs = op_cumsum(a, F);                                  /* [9, S] */
    struct tensor *fl = op_cast(a, op_cast(a, cs, TYPE_I64), TYPE_F32);
    struct tensor *theta = op_scale(a, op_binary(a, cs, fl, BIN_SUB), (float)(2.0 * M_PI));
    /* sine_waves = sine_amp * sin(theta_mat + phase_vec) */
    struct tensor *ph = op_from_host(a, TYPE_F32, 2, (int64_t[]){N_HARMONIC, 1}, phase);
    struct tensor *sine = op_scale(a, op_unary(a, op_add(a, theta, ph), UN_SIN, 0, 0), sine_amp);
    /* sine_waves = sine_waves * uv + noise_amp * randn */
    struct tensor *uv = op_upsample_nearest(a, op_from_host(a, TYPE_F32, 2, (int64_t[]){1, T}, uvh), R);
    struct tensor *na = op_upsample_nearest(a, op_from_host(a, TYPE_F32, 2, (int64_t[]){1, T}, amp), R);
    struct tensor *nz = op_mul(a, na, noise);
    struct tensor *sw = op_add(a, op_mul(a, sine, uv), nz);               /* [9, S] */
    /* SourceModuleHnNSF: sine_merge = tanh(l_linear(sine_wavs)) over the 9 harmonics */
    struct tensor *m = op_matmul(a, h->l_linear_w, sw);                   /* [1, S] */
    m = op_unary(out, op_add(a, m, h->l_linear_b), UN_TANH, 0, 0);
    return op_reshape(out, m, 3, (int64_t[]){1, 1, S});                   /* [1, 1, S] */
}

struct tensor *hift_source(struct arena *a, const struct hift *h, const struct tensor *f0,
                           uint64_t seed)
{
    if (!f0) return NULL;
    struct arena *s = arena_scratch(a);
    if (!s) return NULL;
    struct tensor *y = done(a, s, source_in(a, s, h, f0, seed));
    if (y) y->name = "mel2wav.m_source";
    arena_scratch_done(a, s);
    return y;
}

/* ---- HiFTGenerator.decode ---------------------------------------------- */

static struct tensor *window_tensor(struct arena *a, const struct hift *h)
{
    return op_from_host(a, TYPE_F32, 1, (int64_t[]){N_FFT}, h->stft_window);
}

static const struct stft_params stft_p = {N_FFT, HOP, N_FFT, true, PAD_REFLECT, false};

/* One upsampling stage of decode: result in out, intermediates in a, the
 * ResBlocks' own in s. */
static struct tensor *stage(struct arena *out, struct arena *a, struct arena *s,
                            const struct hift *h, int i, struct tensor *x,
                            const struct tensor *s_stft)
{
    int u = upsample_rates[i], k = upsample_kernel_sizes[i];
    x = op_unary(a, x, UN_LEAKY_RELU, lrelu_slope, 0);
    const struct conv_transpose1d_params up = {u, (k - u) / 2, 0, 1, 1};
    x = op_conv_transpose1d(a, x, h->ups[i].w, h->ups[i].b, &up);        /* [1, C/2^(i+1), T*8*..] */
    if (i == N_UPS - 1) x = op_pad1d(a, x, 1, 0, PAD_REFLECT, 0);        /* reflection_pad: -> F */
    /* fusion */
    int d = source_down_rates[i];
    struct tensor *si = conv(a, s_stft, &h->source_downs[i], d, 1, d / 2);
    si = resblock(a, s, &h->source_resblocks[i], si);
    x = op_add(a, x, si);
    /* xs = sum of the stage's resblocks; x = xs / num_kernels */
    struct tensor *xs = NULL;
    for (int j = 0; j < N_KERNELS; j++) {
        struct tensor *r = resblock(a, s, &h->resblocks[i * N_KERNELS + j], x);
        xs = xs ? op_add(a, xs, r) : r;
    }
    xs = op_binary(out, xs, op_fill(a, 1, (int64_t[]){1}, (float)N_KERNELS), BIN_DIV);
    return done(out, a, xs);
}

struct tensor *hift_decode(struct arena *a, const struct hift *h, const struct tensor *mel,
                           const struct tensor *source)
{
    if (!want_mel(a, mel, "hift_decode") || !source) return NULL;
    const int64_t T = mel->ne[2], S = T * HIFT_SAMPLES_PER_FRAME;
    if (source->type != TYPE_F32 || source->ndim != 3 || source->ne[0] != 1 || source->ne[1] != 1 ||
        source->ne[2] != S) {
        char s[64];
        arena_fail(a, CBX_ERR_INVALID_ARG, "hift_decode: source %s, want [1, 1, %lld] for %lld frames",
                   tensor_shape_str(source, s, sizeof s), (long long)S, (long long)T);
        return NULL;
    }
    struct tensor *win = window_tensor(a, h);
    /* _stft: s_stft = cat([real, imag], dim 1) */
    struct tensor *sf = op_reshape(a, op_cont(a, source), 2, (int64_t[]){1, S});
    struct tensor *st = op_stft(a, sf, win, &stft_p);                     /* [1, 9, F, 2] */
    st = op_cont(a, op_permute(a, st, (const int[]){0, 3, 1, 2}));       /* [1, 2, 9, F] */
    if (!st) return NULL;
    const int64_t F = st->ne[3];
    struct tensor *s_stft = op_reshape(a, st, 3, (int64_t[]){1, 2 * N_BINS, F}); /* [1, 18, F] */

    struct arena *s1 = arena_scratch(a), *s2 = arena_scratch(a);
    struct tensor *x = conv(a, mel, &h->conv_pre, 1, 1, 3);               /* [1, C, T] */
    for (int i = 0; i < N_UPS && s1 && s2; i++) x = stage(a, s1, s2, h, i, x, s_stft);
    arena_scratch_done(a, s1);
    arena_scratch_done(a, s2);
    x = op_unary(a, x, UN_LEAKY_RELU, 0.01f, 0);                        /* F.leaky_relu default */
    x = conv(a, x, &h->conv_post, 1, 1, 3);                             /* [1, 18, F] */
    if (!x) return NULL;
    /* magnitude = exp(x[:, :9]); phase = sin(x[:, 9:]) */
    struct tensor *mag = op_unary(a, op_slice(a, x, 1, 0, N_BINS), UN_EXP, 0, 0);
    struct tensor *phase = op_unary(a, op_slice(a, x, 1, N_BINS, N_BINS), UN_SIN, 0, 0);
    /* _istft: clip(magnitude, max=1e2); complex(mag * cos(phase), mag * sin(phase)) */
    mag = op_unary(a, mag, UN_CLAMP, -INFINITY, 100.0f);
    struct tensor *re = op_mul(a, mag, op_unary(a, phase, UN_COS, 0, 0));
    struct tensor *im = op_mul(a, mag, op_unary(a, phase, UN_SIN, 0, 0));
    const int64_t sne[4] = {1, N_BINS, F, 1};
    struct tensor *spec = op_concat(a, op_reshape(a, re, 4, sne), op_reshape(a, im, 4, sne), 3);
    struct tensor *wav = op_istft(a, spec, win, &stft_p, 0);            /* [1, 480 T] */
    if (!wav) return NULL;
    if (wav->ne[1] != S) {
        arena_fail(a, CBX_ERR_INTERNAL, "hift_decode: istft gave %lld samples, want %lld",
                   (long long)wav->ne[1], (long long)S);
        return NULL;
    }
    wav = op_unary(a, wav, UN_CLAMP, -audio_limit, audio_limit);
    if (wav) wav->name = "mel2wav";
    return wav;
}

/* ---- HiFTGenerator.inference -------------------------------------------- */

struct tensor *hift_inference(struct arena *a, const struct hift *h, const struct tensor *mel,
                              uint64_t seed, struct tensor **source, struct tensor **f0)
{
    if (source) *source = NULL;
    if (f0) *f0 = NULL;
    struct tensor *f = hift_f0(a, h, mel);           /* mel -> f0 */
    struct tensor *s = hift_source(a, h, f, seed);   /* f0 -> source */
    struct tensor *wav = hift_decode(a, h, mel, s);
    if (!wav) return NULL;
    if (source) *source = s;
    if (f0) *f0 = f;
    return wav;
}
