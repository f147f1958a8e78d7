/* test_conv.c - the conv op group (ops_conv.c, cpu/conv.c, ref/conv.c).
 *
 * 1. The ref kernels against small cases worked out by hand from the
 *    PyTorch definitions (conv1d is cross-correlation; F.pad modes;
 *    ConvTranspose1d overlap-add; nearest upsampling; one LSTM cell).
 * 2. The cpu kernels against the ref kernels on random inputs over a grid
 *    of strides, dilations, groups, pad modes, batch sizes and strided
 *    input views, plus shapes large enough to take the chunked paths.
 * 3. Error paths: misfit operands make the op return NULL and record a
 *    failure in the arena. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/ops.h"
#include "testutil.h"

#include "op_arenas.inc"


static struct tensor *from(int ndim, const int64_t *ne, const float *v)
{
    return op_from_host(ad, TYPE_F32, ndim, ne, v);
}

/* An activation [B, C, T] (or [C, T] when B == 0) as view kind:
 * 0 contiguous, 1 transposed from [B, T, C], 2 sliced from a longer T
 * and more channels. */
static struct tensor *act(int64_t B, int64_t C, int64_t T, int view)
{
    int nd = B ? 3 : 2;
    int64_t ne[3], *e = ne + (B ? 0 : 1);
    ne[0] = B;
    if (view == 1) {
        e[nd - 2] = T, e[nd - 1] = C;
        return op_transpose(ad, rnd(nd, e, -1, 1), nd - 2, nd - 1);
    }
    if (view == 2) {
        e[nd - 2] = C + 3, e[nd - 1] = T + 7;
        struct tensor *t = rnd(nd, e, -1, 1);
        return op_slice(ad, op_slice(ad, t, nd - 1, 4, T), nd - 2, 1, C);
    }
    e[nd - 2] = C, e[nd - 1] = T;
    return rnd(nd, e, -1, 1);
}


/* Output (contiguous) against expected values. */
static void check_values(const char *what, const struct tensor *t, const float *want, size_t n)
{
    if (!t || (size_t)tensor_nelements(t) != n) {
        CHECK(false, "%s: no output or %lld elements, want %zu", what,
              t ? (long long)tensor_nelements(t) : -1LL, n);
        return;
    }
    check_close(what, t->data, want, n, 1e-6, 1e-6);
}

/* cpu against ref; both outputs must exist with the expected shape. */
static void compare(const char *what, const struct tensor *c, const struct tensor *r,
                    int ndim, const int64_t *ne, double rtol)
{
    bool ok = c && r && c->ndim == ndim && r->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = c->ne[d] == ne[d] && r->ne[d] == ne[d];
    if (!ok) {
        char s1[64] = "NULL", s2[64] = "NULL";
        if (c) tensor_shape_str(c, s1, sizeof s1);
        if (r) tensor_shape_str(r, s2, sizeof s2);
        CHECK(false, "%s: cpu %s ref %s (%s / %s)", what, s1, s2, arena_errmsg(ac),
              arena_errmsg(ar));
        return;
    }
    check_close(what, c->data, r->data, (size_t)tensor_nelements(c), 1e-7, rtol);
}

/* ---- 1. the reference against hand-computed cases --------------------- */

static void hand_conv1d(void)
{
    const float x4[4] = {1, 2, 3, 4}, w3[3] = {1, 0, -1};
    struct tensor *x = from(2, (int64_t[]){1, 4}, x4);
    struct tensor *w = from(3, (int64_t[]){1, 1, 3}, w3);
    struct conv1d_params p = {.stride = 1, .dilation = 1, .groups = 1};
    /* out[t] = x[t] - x[t+2] on the padded signal */
    check_values("ref conv1d [1,2,3,4]*[1,0,-1] valid", op_conv1d(ar, x, w, NULL, &p),
                 (float[]){-2, -2}, 2);
    p.pad_left = p.pad_right = 1;
    check_values("ref conv1d zero pad 1", op_conv1d(ar, x, w, NULL, &p),
                 (float[]){-2, -2, -2, 3}, 4);
    p.pad_mode = PAD_REFLECT; /* padded: 2 1 2 3 4 3 */
    check_values("ref conv1d reflect pad 1", op_conv1d(ar, x, w, NULL, &p),
                 (float[]){0, -2, -2, 0}, 4);
    p.pad_mode = PAD_REPLICATE; /* padded: 1 1 2 3 4 4 */
    check_values("ref conv1d replicate pad 1", op_conv1d(ar, x, w, NULL, &p),
                 (float[]){-1, -2, -2, -1}, 4);
    p.pad_mode = PAD_ZERO;
    p.stride = 2;
    check_values("ref conv1d stride 2 pad 1", op_conv1d(ar, x, w, NULL, &p),
                 (float[]){-2, -2}, 2);
    /* causal: pad_left = K-1 = 2: padded 0 0 1 2 3 4 */
    p = (struct conv1d_params){.pad_left = 2};
    check_values("ref conv1d causal (zero-initialised params)", op_conv1d(ar, x, w, NULL, &p),
                 (float[]){-1, -2, -2, -2}, 4);
    /* dilation 2 on 1..6: out[t] = x[t] - x[t+4], plus bias 0.5 */
    struct tensor *x6 = from(2, (int64_t[]){1, 6}, (float[]){1, 2, 3, 4, 5, 6});
    struct tensor *b = from(1, (int64_t[]){1}, (float[]){0.5f});
    p = (struct conv1d_params){.stride = 1, .dilation = 2, .groups = 1};
    check_values("ref conv1d dilation 2 + bias", op_conv1d(ar, x6, w, b, &p),
                 (float[]){-3.5f, -3.5f}, 2);
    /* groups 2: out0 = x0[t] + x0[t+1], out1 = 2 * x1[t] */
    struct tensor *x2 = from(3, (int64_t[]){1, 2, 3}, (float[]){1, 2, 3, 10, 20, 30});
    struct tensor *w2 = from(3, (int64_t[]){2, 1, 2}, (float[]){1, 1, 2, 0});
    p = (struct conv1d_params){.groups = 2};
    check_values("ref conv1d groups 2", op_conv1d(ar, x2, w2, NULL, &p),
                 (float[]){3, 5, 20, 40}, 4);
    /* 2 in -> 1 out, K 1: a weighted channel sum */
    struct tensor *w21 = from(3, (int64_t[]){1, 2, 1}, (float[]){1, -1});
    check_values("ref conv1d 2->1 channels", op_conv1d(ar, x2, w21, NULL, NULL),
                 (float[]){-9, -18, -27}, 3);
}

static void hand_conv_transpose1d(void)
{
    /* x = [1, 2], w = [1, 1, 1], stride 2: x0 -> out[0..2], x1 -> out[2..4] */
    struct tensor *x = from(2, (int64_t[]){1, 2}, (float[]){1, 2});
    struct tensor *w = from(3, (int64_t[]){1, 1, 3}, (float[]){1, 1, 1});
    struct conv_transpose1d_params p = {.stride = 2};
    check_values("ref conv_transpose1d stride 2", op_conv_transpose1d(ar, x, w, NULL, &p),
                 (float[]){1, 1, 3, 2, 2}, 5);
    p.padding = 1; /* drop one sample each side */
    check_values("ref conv_transpose1d padding 1", op_conv_transpose1d(ar, x, w, NULL, &p),
                 (float[]){1, 3, 2}, 3);
    p.output_padding = 1; /* one more sample on the right */
    check_values("ref conv_transpose1d output_padding 1",
                 op_conv_transpose1d(ar, x, w, NULL, &p), (float[]){1, 3, 2, 2}, 4);
    /* dilation 2, stride 1, w = [1, 10]: out[t] = x[t] + 10 x[t-2], + bias 1 */
    struct tensor *w2 = from(3, (int64_t[]){1, 1, 2}, (float[]){1, 10});
    struct tensor *b = from(1, (int64_t[]){1}, (float[]){1});
    p = (struct conv_transpose1d_params){.dilation = 2};
    check_values("ref conv_transpose1d dilation 2 + bias",
                 op_conv_transpose1d(ar, x, w2, b, &p), (float[]){2, 3, 11, 21}, 4);
    /* 1 in -> 2 out channels: w[0] = [[1], [-1]] */
    struct tensor *w12 = from(3, (int64_t[]){1, 2, 1}, (float[]){1, -1});
    check_values("ref conv_transpose1d 1->2 channels",
                 op_conv_transpose1d(ar, x, w12, NULL, NULL), (float[]){1, 2, -1, -2}, 4);
}

static void hand_pad_upsample(void)
{
    struct tensor *x = from(1, (int64_t[]){3}, (float[]){1, 2, 3});
    check_values("ref pad1d reflect (2, 2)", op_pad1d(ar, x, 2, 2, PAD_REFLECT, 0),
                 (float[]){3, 2, 1, 2, 3, 2, 1}, 7);
    check_values("ref pad1d replicate (2, 1)", op_pad1d(ar, x, 2, 1, PAD_REPLICATE, 0),
                 (float[]){1, 1, 1, 2, 3, 3}, 6);
    check_values("ref pad1d constant 7 (1, 2)", op_pad1d(ar, x, 1, 2, PAD_ZERO, 7),
                 (float[]){7, 1, 2, 3, 7, 7}, 6);
    check_values("ref upsample_nearest x3", op_upsample_nearest(ar, x, 3),
                 (float[]){1, 1, 1, 2, 2, 2, 3, 3, 3}, 9);
    check_values("ref upsample_nearest x2", op_upsample_nearest(ar, x, 2),
                 (float[]){1, 1, 2, 2, 3, 3}, 6);
}

static double sig(double v) { return 1 / (1 + exp(-v)); }

static void hand_lstm(void)
{
    /* H = In = 1. Step 1 (x = 1, h0 = 0, c0 = 0.5): w_ih = [ln 3, 0, ln 3, 0]
     * gives i = 3/4, f = 1/2, g = tanh(ln 3) = 0.8, o = 1/2, all different so
     * a wrong gate order shows: c1 = 0.5*0.5 + 0.75*0.8 = 0.85,
     * h1 = 0.5*tanh(0.85). Step 2 (x = 0): every gate sees w_hh * h1 = h1. */
    float l3 = logf(3.0f);
    struct tensor *x = from(3, (int64_t[]){1, 2, 1}, (float[]){1, 0});
    struct tensor *wih = from(2, (int64_t[]){4, 1}, (float[]){l3, 0, l3, 0});
    struct tensor *whh = from(2, (int64_t[]){4, 1}, (float[]){1, 1, 1, 1});
    struct tensor *h0 = from(2, (int64_t[]){1, 1}, (float[]){0});
    struct tensor *c0 = from(2, (int64_t[]){1, 1}, (float[]){0.5f});
    double c1 = 0.85, h1 = 0.5 * tanh(0.85);
    double c2 = sig(h1) * c1 + sig(h1) * tanh(h1), h2 = sig(h1) * tanh(c2);
    struct tensor *hn, *cn;
    struct tensor *y = op_lstm(ar, x, wih, whh, NULL, NULL, h0, c0, &hn, &cn);
    check_values("ref lstm two steps (gate order i,f,g,o)", y, (float[]){(float)h1, (float)h2}, 2);
    check_values("ref lstm h_n", hn, (float[]){(float)h2}, 1);
    check_values("ref lstm c_n", cn, (float[]){(float)c2}, 1);
    /* biases are added to the gates: b_ih + b_hh = [ln 3, 0, ln 3, 0] with
     * x = 0 gives the same first step */
    struct tensor *x0 = from(3, (int64_t[]){1, 1, 1}, (float[]){0});
    struct tensor *bih = from(1, (int64_t[]){4}, (float[]){l3, 0, 0, 0});
    struct tensor *bhh = from(1, (int64_t[]){4}, (float[]){0, 0, l3, 0});
    y = op_lstm(ar, x0, wih, whh, bih, bhh, NULL, c0, NULL, NULL);
    check_values("ref lstm biases", y, (float[]){(float)h1}, 1);
}

/* ---- 2. cpu against ref ------------------------------------------------ */

static uint64_t lcg = 12345;
static int pick(int n)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((lcg >> 33) % (uint64_t)n);
}

static const char *mode_name[] = {"zero", "reflect", "replicate"};

/* The weight *w converted to type (F16/BF16) for the cpu kernel; *w is
 * replaced by the F32 values the conversion rounds to, for the ref kernel,
 * so the comparison tests the cpu conversion independently. */
static struct tensor *as_type(struct tensor **w, enum dtype type)
{
    if (!*w || type == TYPE_F32) return *w;
    int64_t n = tensor_nelements(*w);
    uint16_t *h = malloc((size_t)n * 2);
    float *back = malloc((size_t)n * 4);
    struct tensor *wc = NULL;
    if (h && back) {
        for (int64_t i = 0; i < n; i++) {
            float v = ((float *)(*w)->data)[i];
            h[i] = type == TYPE_F16 ? f32_to_fp16(v) : f32_to_bf16(v);
            back[i] = type == TYPE_F16 ? fp16_to_f32(h[i]) : bf16_to_f32(h[i]);
        }
        wc = op_from_host(ad, type, (*w)->ndim, (*w)->ne, h);
        *w = op_from_host(ad, TYPE_F32, (*w)->ndim, (*w)->ne, back);
    }
    free(h);
    free(back);
    return wc;
}

static void conv1d_case(int64_t B, int64_t cin, int64_t cout, int64_t K, int64_t T, int view,
                        bool bias, enum dtype wtype, const struct conv1d_params *p)
{
    int nd = B ? 3 : 2;
    int64_t groups = p->groups ? p->groups : 1, stride = p->stride ? p->stride : 1;
    int64_t dil = p->dilation ? p->dilation : 1;
    struct tensor *x = act(B, cin, T, view);
    struct tensor *w = rnd(3, (int64_t[]){cout, cin / groups, K}, -0.5f, 0.5f);
    struct tensor *b = bias ? rnd(1, (int64_t[]){cout}, -1, 1) : NULL;
    struct tensor *wc = as_type(&w, wtype); /* cpu reads wc, ref reads w */
    int64_t tout = (T + p->pad_left + p->pad_right - dil * (K - 1) - 1) / stride + 1;
    int64_t ne[3] = {B, cout, tout};
    char what[160];
    snprintf(what, sizeof what, "conv1d B%lld %lld->%lld K%lld T%lld s%lld d%lld g%lld %s(%d,%d)%s%s%s",
             (long long)B, (long long)cin, (long long)cout, (long long)K, (long long)T,
             (long long)stride, (long long)dil, (long long)groups, mode_name[p->pad_mode],
             p->pad_left, p->pad_right, view == 1 ? " T" : view == 2 ? " S" : "",
             bias ? " b" : "", wtype == TYPE_F16 ? " f16" : wtype == TYPE_BF16 ? " bf16" : "");
    compare(what, op_conv1d(ac, x, wc, b, p), op_conv1d(ar, x, w, b, p), nd, ne + (B ? 0 : 1),
            2e-6);
    reset();
}

static void cpu_vs_ref_conv1d(void)
{
    /* a random walk over the grid; each case valid by construction */
    for (int i = 0; i < 72; i++) {
        int64_t B = pick(3); /* 0 = no batch dim */
        int gsel = pick(3);
        int64_t cin = 1 + pick(7), groups = 1;
        if (gsel == 1) cin = 2 * (1 + pick(4)), groups = 2;
        if (gsel == 2) cin = 1 + pick(9), groups = cin; /* depthwise */
        int64_t cout = groups * (1 + pick(3));
        if (gsel == 2 && pick(2)) cout = cin;
        int64_t K = 1 + pick(7), T = 3 + pick(40);
        struct conv1d_params p = {.stride = 1 + pick(3), .dilation = 1 + pick(3),
                                  .groups = (int)groups, .pad_mode = (enum pad_mode)pick(3)};
        int64_t span = p.dilation * (K - 1) + 1;
        if (pick(4) == 0) {
            p.pad_left = (int)(span - 1); /* causal */
        } else {
            p.pad_left = pick(5);
            p.pad_right = pick(5);
        }
        if (p.pad_mode == PAD_REFLECT) {
            if (p.pad_left >= T) p.pad_left = (int)T - 1;
            if (p.pad_right >= T) p.pad_right = (int)T - 1;
        }
        if (T + p.pad_left + p.pad_right < span) T = span; /* keep it valid */
        conv1d_case(B, cin, cout, K, T, pick(3), pick(2), TYPE_F32, &p);
    }
    /* named paths */
    struct conv1d_params p1 = {.stride = 1, .dilation = 1, .groups = 1};
    conv1d_case(2, 16, 24, 1, 77, 0, true, TYPE_F32, &p1);  /* 1x1 in place */
    conv1d_case(2, 16, 24, 1, 77, 2, false, TYPE_F32, &p1); /* 1x1 in place, ld > T */
    conv1d_case(1, 16, 24, 1, 77, 1, true, TYPE_F32, &p1);  /* 1x1 transposed: im2col */
    struct conv1d_params pdw = {.groups = 33, .pad_left = 2, .pad_right = 2, .dilation = 1};
    conv1d_case(2, 33, 33, 5, 301, 1, true, TYPE_F32, &pdw); /* conformer depthwise */
    struct conv1d_params pc = {.pad_left = 2};
    conv1d_case(1, 31, 17, 3, 129, 0, true, TYPE_F16, &pc);  /* causal, f16 weights */
    conv1d_case(0, 31, 17, 3, 129, 2, false, TYPE_BF16, &pc);
    /* long enough for several im2col chunks (Cin*K = 5632 -> 372 columns) */
    struct conv1d_params pl = {.pad_left = 5, .pad_right = 5, .pad_mode = PAD_REFLECT};
    conv1d_case(1, 512, 6, 11, 1001, 0, true, TYPE_F32, &pl);
    /* the AVX-512 direct path (stride 1): tiles whose input window lies
     * inside x read it in place, edge tiles a padded copy; column tails of
     * 1..63, output channels not a multiple of the 6-row tile, channel
     * blocks of the blocked sum, groups, batches, row-padded (S) views;
     * transposed (T) inputs take the padded-chunk path, in two chunks for
     * 520 x 4500 */
    struct conv1d_params pg = {.dilation = 3, .groups = 2, .pad_left = 6, .pad_right = 6};
    conv1d_case(2, 12, 20, 5, 700, 2, true, TYPE_F32, &pg);
    struct conv1d_params pr = {.dilation = 2, .pad_left = 6, .pad_right = 6,
                               .pad_mode = PAD_REFLECT};
    conv1d_case(1, 9, 13, 7, 333, 0, false, TYPE_F32, &pr);
    conv1d_case(2, 9, 13, 7, 333, 1, true, TYPE_F32, &pr);
    struct conv1d_params pcz = {.dilation = 5, .pad_left = 50};
    conv1d_case(0, 70, 7, 11, 1111, 2, true, TYPE_F16, &pcz);
    struct conv1d_params prp = {.pad_left = 1, .pad_right = 1, .pad_mode = PAD_REPLICATE};
    conv1d_case(1, 520, 7, 3, 4500, 1, true, TYPE_F32, &prp);
    struct conv1d_params pv = {.dilation = 1};
    conv1d_case(1, 3, 5, 2, 65, 0, true, TYPE_F32, &pv);
    /* HiFT ResBlock shapes through the F32 direct path (the AMX-BF16 path
     * is test_conv_bf16's): channels not multiples of 16 / 32 (80, 40, 18,
     * 8), column tails, batches, transposed (T) and row-padded (S) views,
     * every padding mode */
    struct conv1d_params pa = {.dilation = 5, .pad_left = 25, .pad_right = 25};
    conv1d_case(1, 64, 64, 11, 3001, 0, true, TYPE_F32, &pa);
    struct conv1d_params pa3 = {.dilation = 3, .pad_left = 9, .pad_right = 9};
    conv1d_case(2, 128, 128, 7, 517, 2, true, TYPE_F32, &pa3);
    struct conv1d_params pa1 = {.pad_left = 3, .pad_right = 3, .pad_mode = PAD_REFLECT};
    conv1d_case(1, 80, 96, 7, 200, 1, true, TYPE_F32, &pa1);  /* conv_pre-like */
    conv1d_case(0, 64, 18, 7, 1234, 0, true, TYPE_F32, &pa1); /* conv_post-like */
    struct conv1d_params pa4 = {.pad_left = 3, .pad_mode = PAD_REPLICATE};
    conv1d_case(2, 40, 8, 4, 45, 0, false, TYPE_F16, &pa4);
    struct conv1d_params pa5 = {.pad_left = 1, .pad_right = 1};
    conv1d_case(1, 256, 256, 3, 700, 0, true, TYPE_F32, &pa5);
    /* HiFT source downsampling conv: 18 -> 32, K 30, stride 15, padding 7 */
    struct conv1d_params ps = {.stride = 15, .pad_left = 7, .pad_right = 7};
    conv1d_case(1, 18, 32, 30, 1500, 0, true, TYPE_F32, &ps);
}

static void convt_case(int64_t B, int64_t cin, int64_t cout, int64_t K, int64_t T, int view,
                       bool bias, const struct conv_transpose1d_params *p)
{
    int nd = B ? 3 : 2;
    int64_t groups = p->groups ? p->groups : 1, stride = p->stride ? p->stride : 1;
    int64_t dil = p->dilation ? p->dilation : 1;
    struct tensor *x = act(B, cin, T, view);
    struct tensor *w = rnd(3, (int64_t[]){cin, cout / groups, K}, -0.5f, 0.5f);
    struct tensor *b = bias ? rnd(1, (int64_t[]){cout}, -1, 1) : NULL;
    int64_t tout = (T - 1) * stride - 2 * p->padding + dil * (K - 1) + p->output_padding + 1;
    int64_t ne[3] = {B, cout, tout};
    char what[160];
    snprintf(what, sizeof what, "conv_t1d B%lld %lld->%lld K%lld T%lld s%lld d%lld g%lld p%d op%d%s%s",
             (long long)B, (long long)cin, (long long)cout, (long long)K, (long long)T,
             (long long)stride, (long long)dil, (long long)groups, p->padding,
             p->output_padding, view == 1 ? " T" : view == 2 ? " S" : "", bias ? " b" : "");
    compare(what, op_conv_transpose1d(ac, x, w, b, p), op_conv_transpose1d(ar, x, w, b, p), nd,
            ne + (B ? 0 : 1), 2e-6);
    reset();
}

static void cpu_vs_ref_conv_transpose1d(void)
{
    for (int i = 0; i < 40; i++) {
        int64_t B = pick(3), groups = 1 + pick(2) * (1 + pick(2)); /* 1, 2 or 3 */
        int64_t cin = groups * (1 + pick(5)), cout = groups * (1 + pick(4));
        int64_t K = 1 + pick(8), T = 1 + pick(30);
        struct conv_transpose1d_params p = {.stride = 1 + pick(4), .dilation = 1 + pick(2),
                                            .groups = (int)groups};
        p.output_padding = pick(p.stride > p.dilation ? p.stride : p.dilation);
        p.padding = pick(3);
        int64_t tout = (T - 1) * p.stride - 2 * p.padding + p.dilation * (K - 1) +
                       p.output_padding + 1;
        if (tout < 1) p.padding = 0;
        convt_case(B, cin, cout, K, T, pick(3), pick(2), &p);
    }
    /* HiFT ups[0] shape (512 -> 256, K 16, stride 8, padding 4) on enough
     * frames for several col2im chunks (Cout*K = 4096 -> 512 columns) */
    struct conv_transpose1d_params p8 = {.stride = 8, .padding = 4};
    convt_case(1, 24, 256, 16, 1100, 0, true, &p8);
    struct conv_transpose1d_params p5 = {.stride = 5, .padding = 3};
    convt_case(1, 64, 32, 11, 300, 1, true, &p5);
}

static void cpu_vs_ref_pad_upsample(void)
{
    for (int view = 0; view < 3; view++)
        for (int m = 0; m < 3; m++)
            for (int B = 0; B < 3; B += 2) {
                int64_t T = 13 + view;
                struct tensor *x = act(B, 5, T, view);
                int l = m == PAD_REFLECT ? 12 : 20, r = m == PAD_REFLECT ? 3 : 0;
                int64_t ne[3] = {B, 5, T + l + r};
                char what[96];
                snprintf(what, sizeof what, "pad1d %s (%d,%d) B%d view %d", mode_name[m], l, r,
                         B, view);
                compare(what, op_pad1d(ac, x, l, r, (enum pad_mode)m, -2.5f),
                        op_pad1d(ar, x, l, r, (enum pad_mode)m, -2.5f), B ? 3 : 2,
                        ne + (B ? 0 : 1), 0);
                reset();
            }
    const int factors[] = {1, 2, 3, 5, 8, 480};
    for (int i = 0; i < 6; i++) {
        int view = i % 3;
        struct tensor *x = act(2, 3, 37, view);
        int64_t ne[3] = {2, 3, 37 * factors[i]};
        char what[96];
        snprintf(what, sizeof what, "upsample_nearest x%d view %d", factors[i], view);
        compare(what, op_upsample_nearest(ac, x, factors[i]),
                op_upsample_nearest(ar, x, factors[i]), 3, ne, 0);
        reset();
    }
}

static void lstm_case(int64_t B, int64_t T, int64_t In, int64_t H, bool bias, bool state,
                      bool strided, enum dtype wtype)
{
    struct tensor *x = rnd(3, (int64_t[]){B, T, In}, -1, 1);
    if (strided) /* a [B, T, In] slice of a wider feature dim */
        x = op_slice(ad, rnd(3, (int64_t[]){B, T, In + 3}, -1, 1), 2, 2, In);
    struct tensor *wih = rnd(2, (int64_t[]){4 * H, In}, -0.4f, 0.4f);
    struct tensor *whh = rnd(2, (int64_t[]){4 * H, H}, -0.4f, 0.4f);
    struct tensor *bih = bias ? rnd(1, (int64_t[]){4 * H}, -0.5f, 0.5f) : NULL;
    struct tensor *bhh = bias ? rnd(1, (int64_t[]){4 * H}, -0.5f, 0.5f) : NULL;
    struct tensor *h0 = state ? rnd(2, (int64_t[]){B, H}, -1, 1) : NULL;
    struct tensor *c0 = state ? rnd(2, (int64_t[]){B, H}, -1, 1) : NULL;
    struct tensor *wihc = as_type(&wih, wtype), *whhc = as_type(&whh, wtype);
    struct tensor *hc = NULL, *cc = NULL, *hr = NULL, *cr = NULL;
    struct tensor *yc = op_lstm(ac, x, wihc, whhc, bih, bhh, h0, c0, &hc, &cc);
    struct tensor *yr = op_lstm(ar, x, wih, whh, bih, bhh, h0, c0, &hr, &cr);
    char what[128];
    snprintf(what, sizeof what, "lstm B%lld T%lld In%lld H%lld%s%s%s%s", (long long)B,
             (long long)T, (long long)In, (long long)H, bias ? " bias" : "",
             state ? " h0c0" : "", strided ? " S" : "",
             wtype == TYPE_F16 ? " f16" : wtype == TYPE_BF16 ? " bf16" : "");
    compare(what, yc, yr, 3, (int64_t[]){B, T, H}, 1e-5);
    char w2[160];
    snprintf(w2, sizeof w2, "%s h_n", what);
    compare(w2, hc, hr, 2, (int64_t[]){B, H}, 1e-5);
    snprintf(w2, sizeof w2, "%s c_n", what);
    compare(w2, cc, cr, 2, (int64_t[]){B, H}, 1e-5);
    if (hr && T == 0 && h0) /* no steps: the initial state comes back */
        check_close("lstm h_n == h0 when T = 0 (ref)", hr->data, h0->data, (size_t)(B * H), 0, 0);
    if (yr && hr && T > 0) /* h_n is the last output step */
        check_close("lstm h_n == y[:, -1] (ref, first sequence)", hr->data,
                    (float *)yr->data + (T - 1) * H, (size_t)H, 0, 0);
    reset();
}

static void cpu_vs_ref_lstm(void)
{
    lstm_case(2, 7, 5, 3, true, true, false, TYPE_F32);
    lstm_case(2, 9, 11, 13, false, false, true, TYPE_F32);
    lstm_case(1, 6, 40, 17, true, false, false, TYPE_F16);
    lstm_case(3, 20, 40, 45, true, true, true, TYPE_F32); /* 8-lane blocks + a tail of 5 */
    lstm_case(4, 16, 40, 256, true, false, false, TYPE_BF16); /* VoiceEncoder layer 1 */
    lstm_case(2, 0, 4, 3, true, true, false, TYPE_F32); /* no steps: h_n = h0 */
}

/* ---- 3. error paths ---------------------------------------------------- */


static void errors(void)
{
    struct tensor *x = rnd(3, (int64_t[]){1, 3, 8}, -1, 1);
    struct tensor *w = rnd(3, (int64_t[]){4, 2, 3}, -1, 1);
    struct tensor *w3 = rnd(3, (int64_t[]){4, 3, 3}, -1, 1);
    struct tensor *w9 = rnd(3, (int64_t[]){4, 3, 9}, -1, 1);
    struct tensor *b5 = rnd(1, (int64_t[]){5}, -1, 1);
    expect_fail("conv1d mismatched channels", op_conv1d(ac, x, w, NULL, NULL));
    expect_fail("conv1d reflect pad >= T",
                op_conv1d(ac, x, w3, NULL,
                          &(struct conv1d_params){.pad_left = 8, .pad_mode = PAD_REFLECT}));
    expect_fail("conv1d K larger than padded input", op_conv1d(ac, x, w9, NULL, NULL));
    expect_fail("conv1d dilated span > input",
                op_conv1d(ac, x, w3, NULL, &(struct conv1d_params){.dilation = 4}));
    expect_fail("conv1d bias size", op_conv1d(ac, x, w3, b5, NULL));
    expect_fail("conv1d groups not dividing",
                op_conv1d(ac, x, w3, NULL, &(struct conv1d_params){.groups = 2}));
    expect_fail("conv_transpose1d mismatched channels",
                op_conv_transpose1d(ac, x, rnd(3, (int64_t[]){2, 4, 3}, -1, 1), NULL, NULL));
    struct tensor *wt = rnd(3, (int64_t[]){3, 2, 3}, -1, 1);
    expect_fail("conv_transpose1d output_padding >= stride",
                op_conv_transpose1d(ac, x, wt, NULL,
                                    &(struct conv_transpose1d_params){.stride = 2,
                                                                      .output_padding = 2}));
    expect_fail("conv_transpose1d padding too large",
                op_conv_transpose1d(ac, rnd(2, (int64_t[]){3, 1}, -1, 1), wt, NULL,
                                    &(struct conv_transpose1d_params){.padding = 2}));
    expect_fail("pad1d reflect pad >= T", op_pad1d(ac, x, 0, 8, PAD_REFLECT, 0));
    expect_fail("pad1d negative", op_pad1d(ac, x, -1, 0, PAD_ZERO, 0));
    expect_fail("upsample factor 0", op_upsample_nearest(ac, x, 0));
    struct tensor *wih = rnd(2, (int64_t[]){12, 5}, -1, 1), *whh = rnd(2, (int64_t[]){12, 3}, -1, 1);
    struct tensor *hn = (struct tensor *)1;
    expect_fail("lstm input size != w_ih", op_lstm(ac, x, wih, whh, NULL, NULL, NULL, NULL, &hn, NULL));
    CHECK(hn == NULL, "lstm failure clears *h_n");
    expect_fail("lstm h0 shape",
                op_lstm(ac, op_transpose(ad, x, 1, 2), rnd(2, (int64_t[]){12, 3}, -1, 1), whh,
                        NULL, NULL,
                        rnd(2, (int64_t[]){2, 3}, -1, 1), NULL, NULL, NULL));
    /* a NULL operand is not an error of its own (an earlier op failed) */
    CHECK(op_conv1d(ac, NULL, w3, NULL, NULL) == NULL && arena_status(ac) == CBX_OK,
          "conv1d NULL operand returns NULL without failing");
    reset();
}

int main(void)
{
    if (!op_arenas_open()) return test_summary();
    hand_conv1d();
    hand_conv_transpose1d();
    hand_pad_upsample();
    hand_lstm();
    reset();
    cpu_vs_ref_conv1d();
    cpu_vs_ref_conv_transpose1d();
    cpu_vs_ref_pad_upsample();
    cpu_vs_ref_lstm();
    errors();
    op_arenas_close();
    return test_summary();
}
