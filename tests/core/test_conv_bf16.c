/* test_conv_bf16.c - the BF16 conv1d and conv_transpose1d paths of
 * src/core/cpu/conv.c (conv_bf16.c; taken when the arena asks for BF16
 * products), on each engine this machine has: AMX-BF16 tiles, then
 * VDPBF16PS with AMX forbidden (cpu_set_amx).
 *
 * At HiFT-like shapes (kernels 3/7/11, dilations 1/3/5, channels that are
 * not multiples of 16 or 32, odd T, batches 1 and 2, bias, views; the
 * upsampling transposed convs and odd strides / paddings) the cpu output
 * with the BF16 hint is compared with the ref backend:
 *  1. against the ref conv of the F32 operands. Each product carries the
 *     bf16 rounding (RNE, relative error <= 2^-9) of both operands, so
 *     |y - ref| <= (2^-8 + 2^-18) * S per output, S = sum |x| |w| over the
 *     output's terms (the ref conv of |x| and |w|); 2^-12 * S more is
 *     allowed for the two sides' FP32 summation (both sum up to 2816
 *     terms in different orders). Asserted per element; the max abs and
 *     rel error (to max |ref|) are printed.
 *  2. against the ref conv of the operands rounded to bf16 in this test
 *     (f32_to_bf16, RNE): only FP32 summation order differs, so the rel
 *     error (max abs / max |ref|) must stay below 2e-5 (measured ~1e-6);
 *     operands truncated instead of rounded, or a tap or channel out of
 *     place, exceed it by orders of magnitude.
 * Without the hint the same cpu conv is the F32 path (core_conv). An
 * engine the CPU or OS lack is named as not checked; with neither the test
 * says so and passes unchecked. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/cpu_features.h"
#include "core/ops.h"
#include "testutil.h"

#include "op_arenas.inc" /* ac gets the BF16 hint */

enum xform { RAW, ABS, BF16 };

static float apply(float v, enum xform f)
{
    if (f == ABS) return fabsf(v);
    if (f == BF16) return bf16_to_f32(f32_to_bf16(v));
    return v;
}

/* A [B, C, T] activation (B == 0: [C, T]) from host values v laid out for
 * view kind: 0 contiguous [B, C, T]; 1 a transposed [B, T, C]; 2 sliced
 * out of [B, C + 3, T + 7] at channel 1, column 4. Values pass through f. */
static struct tensor *act(const float *v, int64_t B, int64_t C, int64_t T, int view,
                          enum xform f)
{
    int nd = B ? 3 : 2;
    int64_t ne[3] = {B, 0, 0}, *e = ne + (B ? 0 : 1);
    if (view == 1) e[nd - 2] = T, e[nd - 1] = C;
    else if (view == 2) e[nd - 2] = C + 3, e[nd - 1] = T + 7;
    else e[nd - 2] = C, e[nd - 1] = T;
    size_t n = (size_t)((B ? B : 1) * e[nd - 2] * e[nd - 1]);
    float *buf = malloc(n * sizeof *buf);
    if (!buf) return NULL;
    for (size_t i = 0; i < n; i++) buf[i] = apply(v[i], f);
    struct tensor *t = op_from_host(ad, TYPE_F32, nd, e, buf);
    free(buf);
    if (!t) return NULL;
    if (view == 1) return op_transpose(ad, t, nd - 2, nd - 1);
    if (view == 2) return op_slice(ad, op_slice(ad, t, nd - 1, 4, T), nd - 2, 1, C);
    return t;
}

static struct tensor *param(const float *v, int ndim, const int64_t *ne, enum xform f)
{
    struct tensor tmp = tensor_make(TYPE_F32, ndim, ne, NULL, NULL);
    size_t n = (size_t)tensor_nelements(&tmp);
    float *buf = malloc(n * sizeof *buf);
    if (!buf) return NULL;
    for (size_t i = 0; i < n; i++) buf[i] = apply(v[i], f);
    struct tensor *t = op_from_host(ad, TYPE_F32, ndim, ne, buf);
    free(buf);
    return t;
}


/* y of the case: a conv1d (tp NULL) or a conv_transpose1d (tp set) */
static struct tensor *run(struct arena *a, const struct tensor *x, const struct tensor *w,
                          const struct tensor *b, const struct conv1d_params *p,
                          const struct conv_transpose1d_params *tp)
{
    return tp ? op_conv_transpose1d(a, x, w, b, tp) : op_conv1d(a, x, w, b, p);
}

/* One case: x [B, cin, T] (view kind as act), w [cout, cin, K] (conv1d)
 * or [cin, cout, K] (tp set), bias or not. */
static void check_case(const char *what, int64_t B, int64_t cin, int64_t cout, int64_t K,
                       int64_t T, int view, bool bias, const struct conv1d_params *p,
                       const struct conv_transpose1d_params *tp)
{
    size_t nx = (size_t)((B ? B : 1) * (cin + 3) * (T + 7)), nw = (size_t)(cout * cin * K);
    float *xv = malloc(nx * sizeof *xv), *wv = malloc(nw * sizeof *wv);
    float *bv = malloc((size_t)cout * sizeof *bv);
    if (!xv || !wv || !bv) {
        CHECK(false, "%s: out of memory", what);
        goto out;
    }
    fill_uniform(xv, nx, -1, 1, seed++);
    float ws = 1.0f / sqrtf((float)(cin * K));
    fill_uniform(wv, nw, -ws, ws, seed++);
    fill_uniform(bv, (size_t)cout, -0.5f, 0.5f, seed++);
    int64_t wne[3] = {tp ? cin : cout, tp ? cout : cin, K};
    struct tensor *x = act(xv, B, cin, T, view, RAW), *w = param(wv, 3, wne, RAW);
    struct tensor *b = bias ? param(bv, 1, (int64_t[]){cout}, RAW) : NULL;
    struct tensor *xa = act(xv, B, cin, T, view, ABS), *wa = param(wv, 3, wne, ABS);
    struct tensor *xb = act(xv, B, cin, T, view, BF16), *wb = param(wv, 3, wne, BF16);
    struct tensor *y = run(ac, x, w, b, p, tp);
    struct tensor *yr = run(ar, x, w, b, p, tp);
    struct tensor *ys = run(ar, xa, wa, NULL, p, tp);
    struct tensor *yb = run(ar, xb, wb, b, p, tp);
    if (!y || !yr || !ys || !yb || tensor_nelements(y) != tensor_nelements(yr)) {
        CHECK(false, "%s: no output (%s / %s / %s)", what, arena_errmsg(ac), arena_errmsg(ar),
              arena_errmsg(ad));
        goto out;
    }
    size_t n = (size_t)tensor_nelements(y);
    const float *g = y->data, *r = yr->data, *s = ys->data;
    double max_abs = 0, max_ref = 0, worst = 0; /* worst: error / bound */
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)g[i] - r[i]), bound = (0x1p-8 + 0x1p-18 + 0x1p-12) * s[i] + 1e-6;
        max_abs = fmax(max_abs, e);
        max_ref = fmax(max_ref, fabs(r[i]));
        worst = fmax(worst, e / bound);
    }
    printf("%-50s vs f32 ref: max abs %.3g rel %.3g, worst error / bound %.3f\n", what, max_abs,
           max_ref > 0 ? max_abs / max_ref : 0, worst);
    CHECK(worst <= 1.0, "%s: bf16 error beyond (2^-8 + 2^-12) sum |x w| (%.3f of it)", what,
          worst);
    char w2[200];
    snprintf(w2, sizeof w2, "%s vs bf16-input ref", what);
    check_close(w2, g, yb->data, n, 0.0, 2e-5);
out:
    free(xv);
    free(wv);
    free(bv);
    arena_reset(ac);
    arena_reset(ar);
    arena_reset(ad);
}

/* Under the sanitizers (CBX_TEST_SHORT, tests/CMakeLists.txt) long time
 * axes shrink to about an eighth, still odd (column tails): the ref conv
 * checked against runs ~15x slower there. The release pass runs them
 * whole. */
static int64_t tlen(int64_t T)
{
#ifdef CBX_TEST_SHORT
    if (T > 100) return (T / 8) | 1;
#endif
    return T;
}

static void conv_case(int64_t B, int64_t cin, int64_t cout, int64_t K, int64_t T, int dil,
                      int view, bool bias, enum pad_mode mode, bool causal)
{
    T = tlen(T);
    int pl = causal ? (int)((K - 1) * dil) : (int)((K - 1) * dil / 2);
    int pr = causal ? 0 : (int)((K - 1) * dil - pl);
    struct conv1d_params p = {.stride = 1, .dilation = dil, .groups = 1, .pad_left = pl,
                              .pad_right = pr, .pad_mode = mode};
    char what[160];
    snprintf(what, sizeof what, "conv1d B%lld %lld->%lld K%lld d%d T%lld view %d%s%s",
             (long long)B, (long long)cin, (long long)cout, (long long)K, dil, (long long)T, view,
             bias ? " bias" : "", mode == PAD_REFLECT ? " reflect" : causal ? " causal" : "");
    check_case(what, B, cin, cout, K, T, view, bias, &p, NULL);
}

static void convt_case(int64_t B, int64_t cin, int64_t cout, int64_t K, int64_t T, int stride,
                       int padding, int out_pad, int view, bool bias)
{
    T = tlen(T);
    struct conv_transpose1d_params tp = {stride, padding, out_pad, 1, 1};
    char what[160];
    snprintf(what, sizeof what, "convT B%lld %lld->%lld K%lld s%d p%d op%d T%lld view %d%s",
             (long long)B, (long long)cin, (long long)cout, (long long)K, stride, padding,
             out_pad, (long long)T, view, bias ? " bias" : "");
    check_case(what, B, cin, cout, K, T, view, bias, NULL, &tp);
}

static void run_cases(void)
{
    seed = 7;
    /* HiFT ResBlocks of the three stages (256/128/64 channels), kernels
     * 3/7/11 with dilations 1/3/5, odd T (column tails) */
    conv_case(1, 256, 256, 3, 1071, 1, 0, true, PAD_ZERO, false);
    conv_case(1, 256, 256, 11, 333, 5, 0, true, PAD_ZERO, false);
    conv_case(1, 128, 128, 7, 2001, 3, 0, true, PAD_ZERO, false);
    conv_case(1, 64, 64, 11, 5003, 5, 0, true, PAD_ZERO, false);
    /* channels not multiples of 16 / 32, batch 2, views, no bias */
    conv_case(2, 80, 96, 7, 201, 1, 0, true, PAD_ZERO, false);   /* conv_pre-like */
    conv_case(0, 64, 18, 7, 1235, 1, 2, true, PAD_ZERO, false);  /* conv_post-like, sliced */
    conv_case(2, 100, 40, 3, 77, 3, 1, false, PAD_ZERO, false);  /* transposed view */
    conv_case(2, 45, 23, 5, 19, 1, 2, true, PAD_REFLECT, false); /* short T, reflect */
    conv_case(1, 18, 64, 1, 999, 1, 0, true, PAD_ZERO, false);   /* source_downs k1 */
    conv_case(2, 256, 256, 3, 129, 1, 0, true, PAD_ZERO, true);  /* causal k3 */
    conv_case(1, 512, 33, 3, 17, 1, 0, true, PAD_ZERO, false);   /* few columns */
    /* transposed convs, by output phase: HiFT's upsampling (strides 8, 5,
     * 3, padding (K - u) / 2) and odd ones (output padding, u == K, no
     * padding, padding past a phase's first outputs, batch 2, views) */
    convt_case(1, 512, 256, 16, 127, 8, 4, 0, 0, true);
    convt_case(1, 256, 128, 11, 403, 5, 3, 0, 0, true);
    convt_case(1, 128, 64, 7, 1001, 3, 2, 0, 0, true);
    convt_case(2, 45, 23, 5, 37, 2, 1, 1, 2, true);
    convt_case(2, 40, 17, 4, 29, 4, 0, 0, 1, false);
    convt_case(1, 33, 50, 9, 51, 3, 7, 2, 0, true);
    convt_case(0, 64, 32, 3, 20, 1, 1, 0, 0, true);
}

int main(void)
{
    if (!test_bf16_usable("conv1d")) return 0;
    if (!op_arenas_open()) return test_summary();
    arena_set_bf16(ac, true);
    for (int e = 0; e < 2; e++) /* AMX tiles, then VDPBF16PS */
        if (test_bf16_engine(e)) run_cases();
    cpu_set_amx(true);
    op_arenas_close();
    return test_summary();
}
