/* test_conv2d.c - the conv2d op group (ops_conv2d.c, cpu/conv2d.c,
 * ref/conv2d.c).
 *
 * 1. The ref kernel against small cases worked out by hand from the
 *    F.conv2d definition (cross-correlation, zero padding, stride,
 *    dilation, groups, bias).
 * 2. The cpu kernel against the ref kernel on random inputs over a grid of
 *    kernel sizes, strides, paddings, dilations, groups, batch, f16
 *    weights and strided input views, plus an image large enough to take
 *    the chunked im2col path (the CAMPPlus head shapes).
 * 3. Error paths: misfit operands make the op return NULL and record a
 *    failure in the arena. */
#include <stdio.h>
#include <stdlib.h>

#include "core/backend.h"
#include "core/ops.h"
#include "testutil.h"

#include "op_arenas.inc"



static void check_out(const char *what, const struct tensor *t, int ndim, const int64_t *ne,
                      const float *want, double rtol)
{
    bool ok = t && t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = t->ne[d] == ne[d];
    if (!ok) {
        char s[64] = "NULL";
        if (t) tensor_shape_str(t, s, sizeof s);
        CHECK(false, "%s: output %s (%s / %s)", what, s, arena_errmsg(ac), arena_errmsg(ar));
        return;
    }
    check_close(what, t->data, want, (size_t)tensor_nelements(t), 1e-6, rtol);
}

/* ---- 1. the reference against hand-computed cases --------------------- */

static void hand(void)
{
    /* x [1, 3, 3] = 1..9; w [1, 1, 2, 2] = [[1, 0], [0, -1]]: out[i][j] =
     * x[i][j] - x[i+1][j+1] = -4 everywhere (2x2) */
    const float x9[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w4[4] = {1, 0, 0, -1};
    struct tensor *x = op_from_host(ad, TYPE_F32, 3, (int64_t[]){1, 3, 3}, x9);
    struct tensor *w = op_from_host(ad, TYPE_F32, 4, (int64_t[]){1, 1, 2, 2}, w4);
    const float want1[4] = {-4, -4, -4, -4};
    check_out("ref 2x2 valid", op_conv2d(ar, x, w, NULL, NULL), 3, (int64_t[]){1, 2, 2},
              want1, 1e-7);
    /* padding (1, 1), stride (2, 2): padded 5x5, out 2x2 at rows/cols 0, 2:
     * out[i][j] = xp[2i][2j] - xp[2i+1][2j+1]; xp[0][*] = 0 etc.
     * (0,0): 0 - x[0][0] = -1; (0,1): 0 - x[0][2] = -3;
     * (1,0): 0 - x[2][0] = -7; (1,1): x[1][1] - x[2][2] = 5 - 9 = -4 */
    struct conv2d_params p = {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
    const float want2[4] = {-1, -3, -7, -4};
    check_out("ref pad 1 stride 2", op_conv2d(ar, x, w, NULL, &p), 3, (int64_t[]){1, 2, 2},
              want2, 1e-7);
    /* dilation (2, 2), bias 10: out 1x1 = x[0][0] - x[2][2] + 10 = 2 */
    const float b1[1] = {10}, want3[1] = {2};
    struct tensor *b = op_from_host(ad, TYPE_F32, 1, (int64_t[]){1}, b1);
    struct conv2d_params d = {.dilation_h = 2, .dilation_w = 2};
    check_out("ref dilation 2 bias", op_conv2d(ar, x, w, b, &d), 3, (int64_t[]){1, 1, 1},
              want3, 1e-7);
    /* groups 2: x [2, 1, 2] channels (1, 2) and (3, 4); w [2, 1, 1, 2] =
     * (1, 1) and (1, -1): out [2, 1, 1] = 1+2, 3-4 */
    const float x4[4] = {1, 2, 3, 4}, wg[4] = {1, 1, 1, -1}, want4[2] = {3, -1};
    struct tensor *xg = op_from_host(ad, TYPE_F32, 3, (int64_t[]){2, 1, 2}, x4);
    struct tensor *wgt = op_from_host(ad, TYPE_F32, 4, (int64_t[]){2, 1, 1, 2}, wg);
    check_out("ref groups 2", op_conv2d(ar, xg, wgt, NULL, &(struct conv2d_params){.groups = 2}),
              3, (int64_t[]){2, 1, 1}, want4, 1e-7);
    /* the cpu kernel on the same hand cases */
    check_out("cpu 2x2 valid", op_conv2d(ac, x, w, NULL, NULL), 3, (int64_t[]){1, 2, 2},
              want1, 1e-7);
    check_out("cpu pad 1 stride 2", op_conv2d(ac, x, w, NULL, &p), 3, (int64_t[]){1, 2, 2},
              want2, 1e-7);
    check_out("cpu dilation 2 bias", op_conv2d(ac, x, w, b, &d), 3, (int64_t[]){1, 1, 1},
              want3, 1e-7);
    check_out("cpu groups 2", op_conv2d(ac, xg, wgt, NULL, &(struct conv2d_params){.groups = 2}),
              3, (int64_t[]){2, 1, 1}, want4, 1e-7);
    reset();
}

/* ---- 2. cpu against ref ------------------------------------------------ */

struct case2d {
    int64_t B, cin, cout, H, W, KH, KW;
    struct conv2d_params p;
    int view;   /* 0 contiguous, 1 sliced from a larger image, 2 H/W transposed */
    int f16, bias;
};

static int one(int v) { return v ? v : 1; } /* 0 means 1 in conv2d_params */

static void run_case(const struct case2d *c)
{
    int64_t ne[4] = {c->B, c->cin, c->H, c->W};
    struct tensor *x;
    if (c->view == 1) {
        struct tensor *big = rnd(4, (int64_t[]){c->B, c->cin + 2, c->H + 3, c->W + 5}, -1, 1);
        x = op_slice(ad, op_slice(ad, op_slice(ad, big, 1, 1, c->cin), 2, 2, c->H), 3, 3, c->W);
    } else if (c->view == 2) {
        x = op_transpose(ad, rnd(4, (int64_t[]){c->B, c->cin, c->W, c->H}, -1, 1), 2, 3);
    } else {
        x = rnd(4, ne, -1, 1);
    }
    int g = c->p.groups ? c->p.groups : 1;
    struct tensor *w = rnd(4, (int64_t[]){c->cout, c->cin / g, c->KH, c->KW}, -0.5f, 0.5f);
    if (c->f16) w = op_cast(ad, w, TYPE_F16);
    struct tensor *b = c->bias ? rnd(1, (int64_t[]){c->cout}, -1, 1) : NULL;
    struct tensor *oc = op_conv2d(ac, x, w, b, &c->p);
    struct tensor *orf = op_conv2d(ar, x, w, b, &c->p);
    char what[160];
    snprintf(what, sizeof what,
             "cpu vs ref B%lld %lld->%lld %lldx%lld k%lldx%lld s(%d,%d) p(%d,%d) d(%d,%d) g%d "
             "view%d%s%s",
             (long long)c->B, (long long)c->cin, (long long)c->cout, (long long)c->H,
             (long long)c->W, (long long)c->KH, (long long)c->KW, one(c->p.stride_h), one(c->p.stride_w),
             c->p.pad_h, c->p.pad_w, one(c->p.dilation_h), one(c->p.dilation_w), g, c->view,
             c->f16 ? " f16" : "", c->bias ? " bias" : "");
    if (!oc || !orf) {
        CHECK(false, "%s: no output (%s / %s)", what, arena_errmsg(ac), arena_errmsg(ar));
        reset();
        return;
    }
    check_out(what, oc, orf->ndim, orf->ne, orf->data, 1e-5);
    reset();
}

static void cpu_vs_ref(void)
{
    const struct case2d cases[] = {
        {1, 1, 32, 12, 17, 3, 3, {.pad_h = 1, .pad_w = 1}, 0, 0, 0},
        {2, 5, 7, 9, 11, 3, 3, {.stride_h = 2, .pad_h = 1, .pad_w = 1}, 1, 0, 1},
        {1, 6, 4, 8, 13, 1, 1, {.stride_h = 2}, 2, 0, 0},
        {2, 4, 6, 10, 9, 3, 2, {.stride_h = 3, .stride_w = 2, .pad_h = 2, .pad_w = 1,
                                .dilation_h = 2, .dilation_w = 3}, 0, 1, 1},
        {1, 6, 9, 7, 8, 3, 3, {.groups = 3, .pad_h = 1, .pad_w = 1}, 1, 0, 1},
        {1, 4, 4, 6, 5, 2, 3, {.groups = 4, .pad_w = 2}, 2, 1, 0},
        /* CAMPPlus head shapes, narrower in time: still several im2col chunks
         * (256k floats / (288 x 203) = 4 output rows per chunk) */
        {1, 32, 32, 40, 203, 3, 3, {.stride_h = 2, .pad_h = 1, .pad_w = 1}, 0, 0, 0},
        {1, 32, 32, 23, 203, 3, 3, {.pad_h = 1, .pad_w = 1}, 1, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    /* [Cin, H, W] without a batch dim */
    struct tensor *x = rnd(3, (int64_t[]){3, 7, 6}, -1, 1);
    struct tensor *w = rnd(4, (int64_t[]){2, 3, 3, 3}, -1, 1);
    struct conv2d_params p = {.pad_h = 1, .pad_w = 1};
    struct tensor *oc = op_conv2d(ac, x, w, NULL, &p), *orf = op_conv2d(ar, x, w, NULL, &p);
    if (oc && orf) check_out("cpu vs ref [Cin, H, W]", oc, 3, orf->ne, orf->data, 1e-5);
    else CHECK(false, "[Cin, H, W]: no output (%s)", arena_errmsg(ac));
    reset();
}

/* ---- 3. error paths ----------------------------------------------------- */


static void errors(void)
{
    struct tensor *x = rnd(4, (int64_t[]){1, 4, 5, 5}, -1, 1);
    struct tensor *w = rnd(4, (int64_t[]){2, 3, 3, 3}, -1, 1);
    expect_fail("channel mismatch", op_conv2d(ac, x, w, NULL, NULL));
    struct tensor *w4 = rnd(4, (int64_t[]){2, 4, 7, 3}, -1, 1);
    expect_fail("kernel larger than image", op_conv2d(ac, x, w4, NULL, NULL));
    struct tensor *w3 = rnd(3, (int64_t[]){2, 4, 3}, -1, 1);
    expect_fail("3-dim weight", op_conv2d(ac, x, w3, NULL, NULL));
    struct tensor *wok = rnd(4, (int64_t[]){2, 4, 3, 3}, -1, 1);
    struct tensor *bad_b = rnd(1, (int64_t[]){3}, -1, 1);
    expect_fail("bias size", op_conv2d(ac, x, wok, bad_b, NULL));
    expect_fail("groups 3 of 4 channels",
                op_conv2d(ac, x, wok, NULL, &(struct conv2d_params){.groups = 3}));
    expect_fail("negative padding",
                op_conv2d(ac, x, wok, NULL, &(struct conv2d_params){.pad_h = -1}));
    struct tensor *x2 = rnd(2, (int64_t[]){5, 5}, -1, 1);
    expect_fail("2-dim input", op_conv2d(ac, x2, wok, NULL, NULL));
    reset();
}

int main(void)
{
    if (!op_arenas_open()) return test_summary();
    hand();
    cpu_vs_ref();
    errors();
    op_arenas_close();
    return test_summary();
}
