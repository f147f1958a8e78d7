/* test_elementwise.c - the elementwise op group (ops_elementwise.c, the
 * cpy/fill kernels behind ops_shape.c): cpu kernels against the ref
 * kernels on random data with odd sizes, strided, permuted and broadcast
 * operands and sizes large enough to be threaded; the ref kernels against
 * values known independently (closed forms, hand sums, quant.c's row
 * functions). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/cpu_features.h"
#include "core/quant.h"
#include "testutil.h"

static struct arena *A_cpu, *A_ref;

/* Contiguous host copy of any tensor (views go through op_cont on its
 * arena); malloc'ed, freed by the caller. */
static void *host_copy(struct arena *a, const struct tensor *t)
{
    if (!t) return NULL;
    const struct tensor *c = tensor_is_contiguous(t) ? t : op_cont(a, t);
    if (!c) return NULL;
    void *h = malloc(tensor_nbytes(c) + 1);
    if (h && tensor_to_host(c, h) != CBX_OK) {
        free(h);
        h = NULL;
    }
    return h;
}

static struct tensor *f32(struct arena *a, int ndim, const int64_t *ne, const float *v)
{
    return op_from_host(a, TYPE_F32, ndim, ne, v);
}

static float *rnd(size_t n, float lo, float hi, uint64_t seed)
{
    float *v = malloc(n * sizeof *v);
    fill_uniform(v, n, lo, hi, seed);
    return v;
}

static int64_t numel(int ndim, const int64_t *ne)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= ne[d];
    return n;
}

/* Compare the same computation on both backends. view() builds the operand
 * from a base tensor of shape ne holding v (identity when NULL). */
typedef struct tensor *(*view_fn)(struct arena *a, struct tensor *t);
static struct tensor *v_id(struct arena *a, struct tensor *t) { (void)a; return t; }
static struct tensor *v_tr(struct arena *a, struct tensor *t) { return op_transpose(a, t, -1, -2); }
static struct tensor *v_perm(struct arena *a, struct tensor *t)
{
    return op_permute(a, t, (const int[]){2, 0, 1});
}
static struct tensor *v_slice(struct arena *a, struct tensor *t)
{
    return op_slice(a, op_slice(a, t, -1, 3, t->ne[t->ndim - 1] - 5), 0, 1, t->ne[0] - 1);
}

/* ---- binary ------------------------------------------------------------- */

static void binary_case(const char *what, int xd, const int64_t *xne, view_fn xv, int yd,
                        const int64_t *yne, view_fn yv, uint64_t seed)
{
    int64_t nx = numel(xd, xne), ny = numel(yd, yne);
    float *x = rnd((size_t)nx, -3, 3, seed), *y = rnd((size_t)ny, 0.5f, 2.5f, seed + 1);
    static const char *names[] = {"add", "sub", "mul", "div"};
    for (int op = BIN_ADD; op <= BIN_DIV; op++) {
        float *got = NULL, *want = NULL;
        struct tensor *o[2];
        struct arena *as[2] = {A_cpu, A_ref};
        for (int k = 0; k < 2; k++) {
            struct tensor *tx = xv(as[k], f32(as[k], xd, xne, x));
            struct tensor *ty = yv(as[k], f32(as[k], yd, yne, y));
            o[k] = op_binary(as[k], tx, ty, (enum binop)op);
        }
        CHECK(o[0] && o[1], "%s %s: ops ran (%s / %s)", what, names[op], arena_errmsg(A_cpu),
              arena_errmsg(A_ref));
        if (o[0] && o[1]) {
            got = host_copy(A_cpu, o[0]);
            want = host_copy(A_ref, o[1]);
            char buf[96];
            snprintf(buf, sizeof buf, "binary %s %s cpu vs ref", names[op], what);
            check_close(buf, got, want, (size_t)tensor_nelements(o[0]), 0, 0);
        }
        free(got);
        free(want);
        arena_reset(A_cpu);
        arena_reset(A_ref);
    }
    free(x);
    free(y);
}

static void test_binary(void)
{
    const int64_t x4[4] = {2, 3, 5, 67}, x3b[3] = {3, 50, 1001};
    binary_case("same shape", 4, x4, v_id, 4, x4, v_id, 1);
    binary_case("y [67]", 4, x4, v_id, 1, (int64_t[]){67}, v_id, 2);
    binary_case("y [5, 1]", 4, x4, v_id, 2, (int64_t[]){5, 1}, v_id, 3);
    binary_case("y [3, 1, 1]", 4, x4, v_id, 3, (int64_t[]){3, 1, 1}, v_id, 4);
    binary_case("y [2, 1, 5, 1]", 4, x4, v_id, 4, (int64_t[]){2, 1, 5, 1}, v_id, 5);
    binary_case("y scalar", 4, x4, v_id, 0, NULL, v_id, 6);
    binary_case("x^T + y^T", 3, (int64_t[]){4, 9, 13}, v_tr, 3, (int64_t[]){4, 9, 13}, v_tr, 7);
    binary_case("x perm + y [5,1]", 3, (int64_t[]){5, 6, 7}, v_perm, 2, (int64_t[]){5, 1},
                v_id, 8);
    binary_case("x slice + y^T", 2, (int64_t[]){9, 40}, v_slice, 2, (int64_t[]){35, 8}, v_tr, 9);
    binary_case("large + y [1001]", 3, x3b, v_id, 1, (int64_t[]){1001}, v_id, 10);
    binary_case("large + y [50, 1]", 3, x3b, v_id, 2, (int64_t[]){50, 1}, v_id, 11);
    binary_case("large^T + y", 3, x3b, v_tr, 3, (int64_t[]){3, 1001, 50}, v_id, 12);
    binary_case("one long row", 1, (int64_t[]){70001}, v_id, 1, (int64_t[]){70001}, v_id, 13);

    /* ref against a hand loop: x[2, 3, 4] - y[3, 1] */
    float x[24], y[3], want[24];
    for (int i = 0; i < 24; i++) x[i] = (float)i * 0.5f;
    for (int i = 0; i < 3; i++) y[i] = (float)(i + 1) * 10;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) want[(i * 3 + j) * 4 + k] = x[(i * 3 + j) * 4 + k] - y[j];
    struct arena *as[2] = {A_ref, A_cpu};
    for (int k = 0; k < 2; k++) {
        struct tensor *o = op_binary(as[k], f32(as[k], 3, (int64_t[]){2, 3, 4}, x),
                                     f32(as[k], 2, (int64_t[]){3, 1}, y), BIN_SUB);
        float *got = host_copy(as[k], o);
        CHECK(got != NULL, "binary hand case ran");
        if (got) check_close(k ? "binary sub broadcast cpu vs hand" : "binary sub broadcast ref vs hand",
                             got, want, 24, 0, 0);
        free(got);
        /* add and mul commute: x [3, 1] * y [2, 3, 4] is y * x */
        float *gm = host_copy(as[k], op_mul(as[k], f32(as[k], 2, (int64_t[]){3, 1}, y),
                                            f32(as[k], 3, (int64_t[]){2, 3, 4}, x)));
        int badm = gm ? 0 : 1;
        for (int i = 0; gm && i < 24; i++) badm += gm[i] != x[i] * y[(i / 4) % 3];
        CHECK(!badm, "%s op_mul with x broadcast to y: %d wrong", k ? "cpu" : "ref", badm);
        free(gm);
        CHECK(!op_binary(as[k], f32(as[k], 2, (int64_t[]){3, 1}, y),
                         f32(as[k], 3, (int64_t[]){2, 3, 4}, x), BIN_SUB) &&
              arena_status(as[k]) != CBX_OK, "%s sub with x broadcast to y fails: '%s'",
              k ? "cpu" : "ref", arena_errmsg(as[k]));
        arena_reset(as[k]);
        /* misfit shapes fail with a message and NULL */
        struct tensor *bad = op_add(as[k], f32(as[k], 2, (int64_t[]){3, 4}, x),
                                    f32(as[k], 1, (int64_t[]){3}, y));
        CHECK(!bad && arena_status(as[k]) != CBX_OK && strstr(arena_errmsg(as[k]), "[3]"),
              "op_add [3,4] + [3] fails: '%s'", arena_errmsg(as[k]));
        arena_reset(as[k]);
    }
}

/* ---- unary -------------------------------------------------------------- */

static const char *un_names[] = {"gelu", "gelu_tanh", "silu", "mish", "elu", "leaky_relu",
                                 "relu", "tanh", "sigmoid", "softplus", "exp", "log", "sin",
                                 "cos", "abs", "sqrt", "sqr", "neg", "scale", "clamp"};

static void test_unary(void)
{
    const int64_t ne_small[2] = {3, 1001}, ne_big[3] = {4, 91, 513};
    for (int op = UN_GELU; op <= UN_CLAMP; op++) {
        bool pos = op == UN_LOG || op == UN_SQRT;
        float lo = pos ? 0.01f : -30.0f, hi = pos ? 50.0f : 30.0f;
        if (op == UN_EXP) { lo = -20; hi = 20; }
        float p0 = op == UN_ELU ? 1.3f : op == UN_LEAKY_RELU ? 0.2f : op == UN_SCALE ? 0.7f
                 : op == UN_CLAMP ? -2.0f : 0.0f;
        float p1 = op == UN_SCALE ? -0.3f : op == UN_CLAMP ? 1.5f : 0.0f;
        /* float-only ops must be bit-identical; libm float vs double ref:
         * a few ulp of the largest value */
        bool exact = op == UN_LEAKY_RELU || op == UN_RELU || op == UN_ABS || op == UN_SQR ||
                     op == UN_NEG || op == UN_SCALE || op == UN_CLAMP || op == UN_SQRT;
        double rtol = exact ? 0 : 1e-6;
        /* torch's float formulas lose digits in 1 + erf(x/sqrt2) and
         * 1 + tanh(..) where x << 0 (cancellation against -1); the cpu
         * kernel keeps that float evaluation, the ref is exact */
        bool gelu = op == UN_GELU || op == UN_GELU_TANH;
        struct { const char *name; int nd; const int64_t *ne; view_fn v; } cases[] = {
            {"[3,1001]", 2, ne_small, v_id},
            {"[3,1001]^T", 2, ne_small, v_tr},
            {"[4,91,513] perm", 3, ne_big, v_perm},
            {"[4,91,513]", 3, ne_big, v_id},
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int64_t n = numel(cases[c].nd, cases[c].ne);
            float *x = rnd((size_t)n, lo, hi, 100 + (uint64_t)op * 7 + c);
            struct tensor *o0 = op_unary(A_cpu, cases[c].v(A_cpu, f32(A_cpu, cases[c].nd, cases[c].ne, x)),
                                         (enum unop)op, p0, p1);
            struct tensor *o1 = op_unary(A_ref, cases[c].v(A_ref, f32(A_ref, cases[c].nd, cases[c].ne, x)),
                                         (enum unop)op, p0, p1);
            float *got = host_copy(A_cpu, o0), *want = host_copy(A_ref, o1);
            CHECK(got && want, "unary %s ran", un_names[op]);
            if (got && want) {
                char buf[96];
                snprintf(buf, sizeof buf, "unary %s %s cpu vs ref", un_names[op], cases[c].name);
                check_close(buf, got, want, (size_t)n, 0, rtol);
                /* relative per element too, where values are not tiny */
                double worst = 0;
                for (int64_t i = 0; i < n; i++) {
                    double w = fabs((double)want[i]);
                    if (w > 1e-3) {
                        double r = fabs((double)got[i] - want[i]) / w;
                        if (r > worst) worst = r;
                    }
                }
                if (c == 3)
                    printf("unary %-10s worst elementwise rel error %.3e (|want| > 1e-3)\n",
                           un_names[op], worst);
                CHECK(worst <= (exact ? 0 : gelu ? 1e-4 : 4e-7), "unary %s %s: worst elementwise rel %.3e",
                      un_names[op], cases[c].name, worst);
            }
            free(got);
            free(want);
            free(x);
            arena_reset(A_cpu);
            arena_reset(A_ref);
        }
    }

    /* the gelus away from the cancellation: x >= -1, elementwise */
    for (int op = UN_GELU; op <= UN_GELU_TANH; op++) {
        const int64_t n = 4099;
        float *x = rnd((size_t)n, -1, 6, 150 + (uint64_t)op);
        float *got = host_copy(A_cpu, op_unary(A_cpu, f32(A_cpu, 1, &n, x), (enum unop)op, 0, 0));
        float *want = host_copy(A_ref, op_unary(A_ref, f32(A_ref, 1, &n, x), (enum unop)op, 0, 0));
        double worst = got && want ? 0 : 1;
        for (int64_t i = 0; got && want && i < n; i++)
            if (fabsf(want[i]) > 1e-3f) {
                double r = fabs((double)got[i] - want[i]) / fabs((double)want[i]);
                if (r > worst) worst = r;
            }
        printf("unary %-10s x in [-1, 6]: worst elementwise rel error %.3e\n", un_names[op], worst);
        CHECK(worst <= 4e-7, "unary %s x >= -1: worst elementwise rel %.3e", un_names[op], worst);
        free(got);
        free(want);
        free(x);
        arena_reset(A_cpu);
        arena_reset(A_ref);
    }

    /* closed forms, both backends */
    struct { enum unop op; float p0, p1, x, want; } hv[] = {
        {UN_GELU, 0, 0, 1.0f, 0.8413447461f},     /* Phi(1) */
        {UN_GELU, 0, 0, -1.0f, -0.1586552539f},
        {UN_GELU_TANH, 0, 0, 1.0f, 0.8411919906f},
        {UN_SILU, 0, 0, 1.0f, 0.7310585786f},      /* 1/(1+e^-1) */
        {UN_SILU, 0, 0, -100.0f, -0.0f},
        {UN_MISH, 0, 0, 0.0f, 0.0f},
        {UN_MISH, 0, 0, 1.0f, 0.8650983882f},      /* tanh(ln(1+e)) */
        {UN_ELU, 1.0f, 0, -1.0f, -0.6321205588f},  /* e^-1 - 1 */
        {UN_ELU, 2.0f, 0, 3.0f, 3.0f},
        {UN_LEAKY_RELU, 0.1f, 0, -2.0f, -0.2f},
        {UN_RELU, 0, 0, -1.0f, 0.0f},
        {UN_RELU, 0, 0, 2.5f, 2.5f},
        {UN_TANH, 0, 0, 0.5f, 0.4621171573f},
        {UN_SIGMOID, 0, 0, 0.0f, 0.5f},
        {UN_SOFTPLUS, 0, 0, 30.0f, 30.0f},
        {UN_SOFTPLUS, 0, 0, 0.0f, 0.6931471806f},  /* ln 2 */
        {UN_SOFTPLUS, 0, 0, 20.5f, 20.5f},         /* above torch's threshold: x itself */
        {UN_EXP, 0, 0, 1.0f, 2.7182818285f},
        {UN_LOG, 0, 0, 2.0f, 0.6931471806f},
        {UN_SIN, 0, 0, 1.5707963268f, 1.0f},
        {UN_COS, 0, 0, 0.0f, 1.0f},
        {UN_ABS, 0, 0, -3.0f, 3.0f},
        {UN_SQRT, 0, 0, 2.0f, 1.4142135624f},
        {UN_SQR, 0, 0, 3.0f, 9.0f},
        {UN_NEG, 0, 0, 2.0f, -2.0f},
        {UN_SCALE, 3.0f, 1.0f, 2.0f, 7.0f},
        {UN_CLAMP, -1.0f, 1.0f, 5.0f, 1.0f},
        {UN_CLAMP, -1.0f, 1.0f, -5.0f, -1.0f},
        {UN_CLAMP, -1.0f, 1.0f, 0.25f, 0.25f},
    };
    struct arena *as[2] = {A_ref, A_cpu};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof hv / sizeof hv[0]; i++) {
            struct tensor *o = op_unary(as[k], f32(as[k], 1, (int64_t[]){1}, &hv[i].x), hv[i].op,
                                        hv[i].p0, hv[i].p1);
            float got = NAN;
            if (o) tensor_to_host(o, &got);
            CHECK(fabsf(got - hv[i].want) <= 1e-7f * fmaxf(1.0f, fabsf(hv[i].want)),
                  "%s: %s(%g) = %.9g, want %.9g", k ? "cpu" : "ref", un_names[hv[i].op],
                  (double)hv[i].x, (double)got, (double)hv[i].want);
            arena_reset(as[k]);
        }
    /* op_scale is UN_SCALE with no shift; a scalar (0-d) operand works */
    float two = 2.0f, got = 0;
    struct tensor *o = op_scale(A_cpu, f32(A_cpu, 0, NULL, &two), -1.5f);
    if (o) tensor_to_host(o, &got);
    CHECK(o && got == -3.0f && o->ndim == 0, "op_scale of a 0-d tensor: %g", (double)got);
    /* a wrong type is refused */
    int32_t iv = 1;
    o = op_unary(A_cpu, op_from_host(A_cpu, TYPE_I32, 1, (int64_t[]){1}, &iv), UN_EXP, 0, 0);
    CHECK(!o && strstr(arena_errmsg(A_cpu), "i32"), "op_unary on i32 fails: '%s'",
          arena_errmsg(A_cpu));
    arena_reset(A_cpu);
}

/* Edge inputs through every op: NaN, infinities, signed zeros, tiny and
 * huge values, the overflow/underflow borders of exp, the range limit of
 * the vector sin/cos, torch's softplus threshold. cpu must match ref: both
 * NaN, or equal, or within 4e-7 relative (a few ulp). 19 values: the last
 * three go through the masked tail of a vector loop. */
static void test_unary_special(void)
{
    const float sp[19] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-30f, -1e-30f, 88.5f, 89.0f,
                          -87.5f, -100.0f, -104.0f, 8191.0f, 8193.0f, -3e5f, 20.0f, 20.5f,
                          9.2f, -9.2f};
    for (int op = UN_GELU; op <= UN_CLAMP; op++) {
        float p0 = op == UN_ELU ? 1.0f : op == UN_LEAKY_RELU ? 0.01f : op == UN_CLAMP ? -1.0f : 2.0f;
        float p1 = op == UN_CLAMP ? 1.0f : 0.5f;
        float g[19], w[19];
        struct tensor *o0 = op_unary(A_cpu, f32(A_cpu, 1, (int64_t[]){19}, sp), (enum unop)op, p0, p1);
        struct tensor *o1 = op_unary(A_ref, f32(A_ref, 1, (int64_t[]){19}, sp), (enum unop)op, p0, p1);
        if (!o0 || !o1 || tensor_to_host(o0, g) != CBX_OK || tensor_to_host(o1, w) != CBX_OK) {
            CHECK(0, "unary %s special values ran", un_names[op]);
            continue;
        }
        int bad = -1;
        for (int i = 0; i < 19 && bad < 0; i++) {
            bool ok = (isnan(g[i]) && isnan(w[i])) || g[i] == w[i] ||
                      fabsf(g[i] - w[i]) <= 4e-7f * fabsf(w[i]) || fabsf(g[i] - w[i]) < 1e-37f;
            if (!ok) bad = i;
        }
        CHECK(bad < 0, "unary %s special: x=%g cpu %.9g ref %.9g", un_names[op],
              bad < 0 ? 0.0 : (double)sp[bad], bad < 0 ? 0.0 : (double)g[bad],
              bad < 0 ? 0.0 : (double)w[bad]);
        arena_reset(A_cpu);
        arena_reset(A_ref);
    }
}

/* The 16-lane (AVX-512) GELU (erf and tanh), tanh, SiLU, sigmoid, Mish
 * and Snake repeat the 8-lane (AVX2) operations lane for lane: outputs
 * must be the same bits, for every length 1..40 (masked tails), a threaded
 * size, and the special values (Snake: arguments past 8192 and NaN, which
 * take libm's sinf per 8-lane half). Skipped (with a note) where the CPU
 * has no AVX-512. */
static void test_unary_widths(void)
{
    if (cpu_level_detected() < CPU_AVX512) {
        printf("unary widths: no AVX-512 here, 16-lane path not tested\n");
        return;
    }
    enum { N_OPS = 7, SNAKE = -1 };
    static const int ops[N_OPS] = {UN_GELU, UN_SILU, UN_SIGMOID, UN_MISH, UN_GELU_TANH, UN_TANH, SNAKE};
    const float sp[19] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-30f, -1e-30f, 88.5f, 89.0f,
                          -87.5f, -100.0f, -104.0f, 8191.0f, 8193.0f, -3e5f, 20.0f, 20.5f,
                          9.2f, -9.2f};
    const int64_t big = 70001;
    float *x = rnd((size_t)big, -12, 12, 977);
    memcpy(x + 100, sp, sizeof sp);
    enum cpu_level lvl = cpu_level();
    const float al[1] = {1.7f};
    /* Snake's input: also one argument past 8192 in the first 8-lane half
     * of every 16 elements, so the other half must keep its vector sin */
    float *xs = malloc((size_t)big * sizeof *xs);
    if (!xs) {
        CHECK(0, "out of memory");
        free(x);
        return;
    }
    memcpy(xs, x, (size_t)big * sizeof *xs);
    for (int64_t i = 3; i < big; i += 16) xs[i] = 6000.0f;
    const int64_t one = 1;
    for (int k = 0; k < N_OPS; k++) {
        long diff = 0, total = 0;
        double maxd = 0;
        for (int64_t n = 1; n <= 41; n++) {
            int64_t len = n == 41 ? big : n, off = n == 41 ? 0 : 90 + n % 7;
            float *o[2] = {NULL, NULL};
            for (int w = 0; w < 2; w++) {
                cpu_set_level(w ? CPU_AVX2 : CPU_AVX512);
                struct tensor *in = f32(A_cpu, 1, &len, x + off);
                if (ops[k] == SNAKE) { /* [1, 1, len]: one channel */
                    const int64_t ne3[3] = {1, 1, len};
                    in = f32(A_cpu, 3, ne3, (n == 41 ? xs : x) + off);
                }
                o[w] = host_copy(A_cpu, ops[k] == SNAKE ? op_snake(A_cpu, in, f32(A_cpu, 1, &one, al))
                                                        : op_unary(A_cpu, in, (enum unop)ops[k], 0, 0));
            }
            cpu_set_level(lvl);
            const char *nm = ops[k] == SNAKE ? "snake" : un_names[ops[k]];
            CHECK(o[0] && o[1], "unary %s widths n=%lld ran", nm, (long long)len);
            for (int64_t i = 0; o[0] && o[1] && i < len; i++, total++) {
                if (memcmp(&o[0][i], &o[1][i], 4) == 0) continue;
                bool both_nan = isnan(o[0][i]) && isnan(o[1][i]);
                if (!both_nan) diff++;
                double d = fabs((double)o[0][i] - o[1][i]);
                if (!both_nan && !(d <= maxd)) maxd = d;
            }
            free(o[0]);
            free(o[1]);
            arena_reset(A_cpu);
        }
        const char *nm = ops[k] == SNAKE ? "snake" : un_names[ops[k]];
        printf("unary %-10s 16 vs 8 lanes: %ld of %ld differ, max abs %.3g\n", nm, diff, total, maxd);
        CHECK(diff == 0, "unary %s: the AVX-512 path differs from AVX2 in %ld values (max abs %.3g)", nm, diff,
              maxd);
    }
    free(x);
    free(xs);
}

/* ---- snake -------------------------------------------------------------- */

/* c: channels of the viewed x (its dim -2) */
static void snake_case(const char *what, int nd, const int64_t *ne, view_fn v, int64_t c,
                       uint64_t seed)
{
    int64_t n = numel(nd, ne);
    float *x = rnd((size_t)n, -4, 4, seed), *al = rnd((size_t)c, 0.1f, 1.0f, seed + 1);
    struct tensor *o0 = op_snake(A_cpu, v(A_cpu, f32(A_cpu, nd, ne, x)), f32(A_cpu, 1, &c, al));
    struct tensor *o1 = op_snake(A_ref, v(A_ref, f32(A_ref, nd, ne, x)), f32(A_ref, 1, &c, al));
    float *got = host_copy(A_cpu, o0), *want = host_copy(A_ref, o1);
    CHECK(got && want, "snake %s ran (%s)", what, arena_errmsg(A_cpu));
    if (got && want) {
        char buf[96];
        snprintf(buf, sizeof buf, "snake %s cpu vs ref", what);
        check_close(buf, got, want, (size_t)n, 0, 1e-6);
    }
    free(got);
    free(want);
    free(x);
    free(al);
    arena_reset(A_cpu);
    arena_reset(A_ref);
}

static void test_snake(void)
{
    snake_case("[2,7,1003]", 3, (int64_t[]){2, 7, 1003}, v_id, 7, 200);
    snake_case("[3,40000]", 2, (int64_t[]){3, 40000}, v_id, 3, 201);
    snake_case("[B,T,C]^T", 3, (int64_t[]){2, 301, 16}, v_tr, 16, 202);
    snake_case("[2,64,2000]", 3, (int64_t[]){2, 64, 2000}, v_id, 64, 203);

    const float pi = 3.14159265358979f;
    float x[6] = {pi / 2, 0, -pi / 2, pi, 1, 2}, al[2] = {1.0f, 0.5f};
    /* channel 0, alpha 1: x + sin^2(x); channel 1, alpha 0.5: x + 2 sin^2(x/2) */
    float want[6] = {pi / 2 + 1, 0, -pi / 2 + 1, pi + 2, 1 + 2 * sinf(0.5f) * sinf(0.5f),
                     2 + 2 * sinf(1.0f) * sinf(1.0f)};
    struct arena *as[2] = {A_ref, A_cpu};
    for (int k = 0; k < 2; k++) {
        /* alpha as [1, C, 1], as stored by some checkpoints */
        struct tensor *o = op_snake(as[k], f32(as[k], 2, (int64_t[]){2, 3}, x),
                                    f32(as[k], 3, (int64_t[]){1, 2, 1}, al));
        float got[6] = {0};
        if (o) tensor_to_host(o, got);
        check_close(k ? "snake cpu vs closed form" : "snake ref vs closed form", got, want, 6,
                    0, 2e-7);
        o = op_snake(as[k], f32(as[k], 2, (int64_t[]){2, 3}, x), f32(as[k], 1, (int64_t[]){3}, x));
        CHECK(!o && arena_status(as[k]) != CBX_OK, "snake with 3 alphas for 2 channels fails: '%s'",
              arena_errmsg(as[k]));
        arena_reset(as[k]);
    }
}

/* ---- reduce, cumsum ----------------------------------------------------- */

static void test_reduce(void)
{
    static const char *names[] = {"sum", "mean", "max"};
    struct { const char *name; int nd; int64_t ne[3]; view_fn v; } cases[] = {
        {"[3,7,1001]", 3, {3, 7, 1001}, v_id},
        {"[3,7,1001]^T", 3, {3, 7, 1001}, v_tr},
        {"[2,5,70000]", 3, {2, 5, 70000}, v_id},
        {"[5000,9]", 2, {5000, 9}, v_id},
    };
    for (int op = RED_SUM; op <= RED_MAX; op++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int64_t n = numel(cases[c].nd, cases[c].ne);
            float *x = rnd((size_t)n, -1, 3, 300 + (uint64_t)c);
            struct tensor *o0 = op_reduce(A_cpu, cases[c].v(A_cpu, f32(A_cpu, cases[c].nd, cases[c].ne, x)),
                                          (enum redop)op);
            struct tensor *o1 = op_reduce(A_ref, cases[c].v(A_ref, f32(A_ref, cases[c].nd, cases[c].ne, x)),
                                          (enum redop)op);
            float *got = host_copy(A_cpu, o0), *want = host_copy(A_ref, o1);
            CHECK(got && want && o0->ne[o0->ndim - 1] == 1, "reduce %s ran, keepdim", names[op]);
            if (got && want) {
                char buf[96];
                snprintf(buf, sizeof buf, "reduce %s %s cpu vs ref", names[op], cases[c].name);
                check_close(buf, got, want, (size_t)tensor_nelements(o0), 0,
                            op == RED_MAX ? 0 : 1e-6);
            }
            free(got);
            free(want);
            free(x);
            arena_reset(A_cpu);
            arena_reset(A_ref);
        }
    /* hand values: rows 1..10 and 10..1 */
    float x[20];
    for (int i = 0; i < 10; i++) {
        x[i] = (float)(i + 1);
        x[10 + i] = (float)(10 - i);
    }
    x[15] = NAN;
    struct arena *as[2] = {A_ref, A_cpu};
    for (int k = 0; k < 2; k++) {
        float s[2] = {0}, m[2] = {0}, mx[2] = {0};
        struct tensor *t = f32(as[k], 2, (int64_t[]){2, 10}, x);
        struct tensor *o;
        if ((o = op_reduce(as[k], t, RED_SUM))) tensor_to_host(o, s);
        if ((o = op_reduce(as[k], t, RED_MEAN))) tensor_to_host(o, m);
        if ((o = op_reduce(as[k], t, RED_MAX))) tensor_to_host(o, mx);
        CHECK(s[0] == 55 && m[0] == 5.5f && mx[0] == 10 && isnan(s[1]) && isnan(mx[1]),
              "%s reduce hand: sum %g mean %g max %g, NaN row sum %g max %g", k ? "cpu" : "ref",
              (double)s[0], (double)m[0], (double)mx[0], (double)s[1], (double)mx[1]);
        arena_reset(as[k]);
    }
}

static void test_cumsum(void)
{
    struct { const char *name; int nd; int64_t ne[3]; view_fn v; } cases[] = {
        {"[3,7,1001]", 3, {3, 7, 1001}, v_id},
        {"[3,7,1001]^T", 3, {3, 7, 1001}, v_tr},
        {"[40,3000]", 2, {40, 3000}, v_id},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t n = numel(cases[c].nd, cases[c].ne);
        float *x = rnd((size_t)n, -1, 3, 400 + (uint64_t)c);
        struct tensor *o0 = op_cumsum(A_cpu, cases[c].v(A_cpu, f32(A_cpu, cases[c].nd, cases[c].ne, x)));
        struct tensor *o1 = op_cumsum(A_ref, cases[c].v(A_ref, f32(A_ref, cases[c].nd, cases[c].ne, x)));
        float *got = host_copy(A_cpu, o0), *want = host_copy(A_ref, o1);
        CHECK(got && want, "cumsum ran");
        if (got && want) {
            char buf[96];
            snprintf(buf, sizeof buf, "cumsum %s cpu vs ref (bit-exact)", cases[c].name);
            check_close(buf, got, want, (size_t)n, 0, 0);
        }
        free(got);
        free(want);
        free(x);
        arena_reset(A_cpu);
        arena_reset(A_ref);
    }
    /* torch.cumsum on CPU accumulates float32 in double (checked against
     * torch 2.11: cumsum([1e8, 1, 1, 1, 1, 1]) ends at 100000008, where a
     * float accumulator stays at 1e8, ulp 8) */
    const float x[12] = {1, 2, 3, 4, 0, 0, 1e8f, 1, 1, 1, 1, 1},
                want[12] = {1, 3, 6, 10, 10, 10, 1e8f, 1e8f, 1e8f, 1e8f, 1e8f, 100000008.0f};
    struct arena *as[2] = {A_ref, A_cpu};
    for (int k = 0; k < 2; k++) {
        float got[12] = {0};
        struct tensor *o = op_cumsum(as[k], f32(as[k], 2, (int64_t[]){2, 6}, x));
        if (o) tensor_to_host(o, got);
        check_close(k ? "cumsum cpu vs hand (double accumulate)" : "cumsum ref vs hand (double accumulate)",
                    got, want, 12, 0, 0);
        arena_reset(as[k]);
    }
}

/* ---- get_rows ----------------------------------------------------------- */

static void test_get_rows(void)
{
    enum dtype types[] = {TYPE_F32, TYPE_F16, TYPE_BF16, TYPE_Q8_0, TYPE_Q4_0,
                          TYPE_Q4_1, TYPE_Q5_0, TYPE_Q5_1};
    const int64_t N = 50, D = 96;
    float *w = rnd((size_t)(N * D), -2, 2, 500);
    const int32_t ids32[7] = {3, 0, 49, 17, 3, 25, 48};
    const int64_t ids64[2][5] = {{1, 2, 3, 4, 49}, {0, 0, 10, 20, 30}};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        enum dtype t = types[ti];
        size_t rs = dtype_row_size(t, D);
        char *tb = malloc(rs * (size_t)N);
        float *deq = malloc((size_t)(N * D) * sizeof *deq);
        /* expected rows: quant.c's own round trip, independent of cpy */
        for (int64_t r = 0; r < N; r++) {
            quantize_row(t, w + r * D, tb + (size_t)r * rs, D);
            dequantize_row(t, tb + (size_t)r * rs, deq + r * D, D);
        }
        struct arena *as[2] = {A_ref, A_cpu};
        for (int k = 0; k < 2; k++) {
            struct arena *a = as[k];
            struct tensor *table = op_from_host(a, t, 2, (int64_t[]){N, D}, tb);
            struct tensor *o1 = op_get_rows(a, table, op_from_host(a, TYPE_I32, 1, (int64_t[]){7}, ids32));
            struct tensor *o2 = op_get_rows(a, table, op_from_host(a, TYPE_I64, 2, (int64_t[]){2, 5}, ids64));
            /* a row slice of the table: row i is table row 10 + i */
            struct tensor *o3 = op_get_rows(a, op_slice(a, table, 0, 10, 30),
                                            op_from_host(a, TYPE_I32, 1, (int64_t[]){2}, (int32_t[]){0, 29}));
            CHECK(o1 && o2 && o3 && o2->ndim == 3 && o2->ne[2] == D, "get_rows %s ran (%s)",
                  dtype_name(t), arena_errmsg(a));
            if (o1 && o2 && o3) {
                float *g1 = host_copy(a, o1), *g2 = host_copy(a, o2), *g3 = host_copy(a, o3);
                float *e1 = malloc(7 * D * sizeof *e1), *e2 = malloc(10 * D * sizeof *e2),
                      e3[2 * 96];
                for (int i = 0; i < 7; i++) memcpy(e1 + i * D, deq + ids32[i] * D, D * sizeof *e1);
                for (int i = 0; i < 10; i++)
                    memcpy(e2 + i * D, deq + ids64[i / 5][i % 5] * D, D * sizeof *e2);
                memcpy(e3, deq + 10 * D, D * sizeof *e3);
                memcpy(e3 + D, deq + 39 * D, D * sizeof *e3);
                char buf[96];
                snprintf(buf, sizeof buf, "get_rows %s %s i32 [7]", k ? "cpu" : "ref", dtype_name(t));
                check_close(buf, g1, e1, (size_t)(7 * D), 0, 0);
                snprintf(buf, sizeof buf, "get_rows %s %s i64 [2,5]", k ? "cpu" : "ref", dtype_name(t));
                check_close(buf, g2, e2, (size_t)(10 * D), 0, 0);
                snprintf(buf, sizeof buf, "get_rows %s %s row slice", k ? "cpu" : "ref", dtype_name(t));
                check_close(buf, g3, e3, (size_t)(2 * D), 0, 0);
                free(g1); free(g2); free(g3); free(e1); free(e2);
            }
            arena_reset(a);
            /* out of range, both signs */
            int32_t bad[3] = {1, 50, 2};
            struct tensor *ob = op_get_rows(a, op_from_host(a, t, 2, (int64_t[]){N, D}, tb),
                                            op_from_host(a, TYPE_I32, 1, (int64_t[]){3}, bad));
            CHECK(!ob && arena_status(a) == CBX_ERR_INVALID_ARG && strstr(arena_errmsg(a), "50"),
                  "get_rows id 50 of 50 rows fails: '%s'", arena_errmsg(a));
            arena_reset(a);
            int64_t neg = -1;
            ob = op_get_rows(a, op_from_host(a, t, 2, (int64_t[]){N, D}, tb),
                             op_from_host(a, TYPE_I64, 1, (int64_t[]){1}, &neg));
            CHECK(!ob && arena_status(a) == CBX_ERR_INVALID_ARG, "get_rows id -1 fails: '%s'",
                  arena_errmsg(a));
            arena_reset(a);
        }
        free(tb);
        free(deq);
    }
    /* large gather, threaded on cpu */
    int64_t nid = 3000;
    int32_t *ids = malloc((size_t)nid * sizeof *ids);
    for (int64_t i = 0; i < nid; i++) ids[i] = (int32_t)((i * 7919) % N);
    struct tensor *o0 = op_get_rows(A_cpu, f32(A_cpu, 2, (int64_t[]){N, D}, w),
                                    op_from_host(A_cpu, TYPE_I32, 1, &nid, ids));
    struct tensor *o1 = op_get_rows(A_ref, f32(A_ref, 2, (int64_t[]){N, D}, w),
                                    op_from_host(A_ref, TYPE_I32, 1, &nid, ids));
    float *g = host_copy(A_cpu, o0), *e = host_copy(A_ref, o1);
    if (g && e) check_close("get_rows f32 3000 ids cpu vs ref", g, e, (size_t)(nid * D), 0, 0);
    else CHECK(0, "large get_rows ran");
    free(g); free(e); free(ids); free(w);
    arena_reset(A_cpu);
    arena_reset(A_ref);
}

/* ---- cpy (op_cast / op_cont / op_copy_into) ----------------------------- */

static void test_cpy(void)
{
    const int64_t ne[3] = {3, 17, 65};
    const int64_t n = 3 * 17 * 65;
    float *x = rnd((size_t)n, -70000, 70000, 600); /* beyond f16 range too */
    for (int64_t i = 0; i < 40; i++) x[i] *= 1e-9f; /* f16 subnormals */
    struct arena *as[2] = {A_ref, A_cpu};
    for (int k = 0; k < 2; k++) {
        struct arena *a = as[k];
        const char *bn = k ? "cpu" : "ref";
        char buf[96];
        struct tensor *t = f32(a, 3, ne, x);
        /* f32 -> f16 / bf16 against tensor.c's scalar conversions */
        uint16_t *h16 = host_copy(a, op_cast(a, t, TYPE_F16));
        uint16_t *hb = host_copy(a, op_cast(a, t, TYPE_BF16));
        int bad16 = 0, badb = 0;
        for (int64_t i = 0; h16 && hb && i < n; i++) {
            bad16 += h16[i] != f32_to_fp16(x[i]);
            badb += hb[i] != f32_to_bf16(x[i]);
        }
        CHECK(h16 && hb && !bad16 && !badb, "%s cast f32 -> f16 (%d wrong), bf16 (%d wrong)", bn,
              bad16, badb);
        /* and back */
        float *back = NULL, *want = malloc((size_t)n * sizeof *want);
        if (h16) {
            back = host_copy(a, op_cast(a, op_from_host(a, TYPE_F16, 3, ne, h16), TYPE_F32));
            for (int64_t i = 0; i < n; i++) want[i] = fp16_to_f32(h16[i]);
            snprintf(buf, sizeof buf, "%s cast f16 -> f32", bn);
            if (back) check_close(buf, back, want, (size_t)n, 0, 0);
            else CHECK(0, "%s", buf);
            free(back);
        }
        if (hb) {
            back = host_copy(a, op_cast(a, op_from_host(a, TYPE_BF16, 3, ne, hb), TYPE_F32));
            for (int64_t i = 0; i < n; i++) want[i] = bf16_to_f32(hb[i]);
            snprintf(buf, sizeof buf, "%s cast bf16 -> f32", bn);
            if (back) check_close(buf, back, want, (size_t)n, 0, 0);
            else CHECK(0, "%s", buf);
            free(back);
        }
        free(h16);
        free(hb);
        free(want);
        arena_reset(a);

        /* integers: truncation toward zero, i64 -> i32 / f32 */
        float fv[6] = {2.7f, -2.7f, 0.0f, 1e6f, -0.5f, 123456.9f};
        int32_t *iv = host_copy(a, op_cast(a, f32(a, 1, (int64_t[]){6}, fv), TYPE_I32));
        CHECK(iv && iv[0] == 2 && iv[1] == -2 && iv[2] == 0 && iv[3] == 1000000 && iv[4] == 0 &&
              iv[5] == 123456, "%s cast f32 -> i32 truncates", bn);
        free(iv);
        int64_t lv[4] = {5, -7, 1LL << 40, 123456789};
        struct tensor *l = op_from_host(a, TYPE_I64, 1, (int64_t[]){4}, lv);
        int32_t *i32 = host_copy(a, op_cast(a, l, TYPE_I32));
        float *f = host_copy(a, op_cast(a, l, TYPE_F32));
        int64_t *i64 = i32 ? host_copy(a, op_cast(a, op_from_host(a, TYPE_I32, 1, (int64_t[]){4}, i32),
                                                  TYPE_I64)) : NULL;
        CHECK(i32 && i32[0] == 5 && i32[1] == -7 && i32[2] == 0 && i32[3] == 123456789,
              "%s cast i64 -> i32", bn);
        CHECK(f && f[0] == 5 && f[1] == -7 && f[2] == 1099511627776.0f && f[3] == 123456792.0f,
              "%s cast i64 -> f32", bn);
        CHECK(i64 && i64[1] == -7 && i64[3] == 123456789, "%s cast i32 -> i64", bn);
        free(i32); free(f); free(i64);
        arena_reset(a);

        /* block types: f32 -> block -> f32 equals quant.c's row functions,
         * and stays close to the input */
        enum dtype bt[] = {TYPE_Q8_0, TYPE_Q4_0, TYPE_Q4_1, TYPE_Q5_0, TYPE_Q5_1};
        const int64_t qne[2] = {5, 128};
        float *q = rnd(5 * 128, -1, 1, 601);
        for (size_t i = 0; i < sizeof bt / sizeof bt[0]; i++) {
            size_t rs = dtype_row_size(bt[i], 128);
            char *blk = malloc(rs * 5);
            float *rt = malloc(5 * 128 * sizeof *rt);
            for (int r = 0; r < 5; r++) {
                quantize_row(bt[i], q + r * 128, blk + rs * (size_t)r, 128);
                dequantize_row(bt[i], blk + rs * (size_t)r, rt + r * 128, 128);
            }
            struct tensor *qt = op_cast(a, f32(a, 2, qne, q), bt[i]);
            char *gotb = host_copy(a, qt);
            CHECK(gotb && memcmp(gotb, blk, rs * 5) == 0, "%s cast f32 -> %s matches quantize_row",
                  bn, dtype_name(bt[i]));
            float *gotf = host_copy(a, op_cast(a, qt, TYPE_F32));
            snprintf(buf, sizeof buf, "%s %s -> f32 vs dequantize_row", bn, dtype_name(bt[i]));
            if (gotf) check_close(buf, gotf, rt, 5 * 128, 0, 0);
            else CHECK(0, "%s", buf);
            snprintf(buf, sizeof buf, "%s %s round trip vs input", bn, dtype_name(bt[i]));
            /* error up to about one quantisation step: amax/127 (8-bit),
             * amax/15 .. amax/8 (4- and 5-bit) */
            if (gotf) check_close(buf, gotf, q, 5 * 128, 0, bt[i] == TYPE_Q8_0 ? 1e-2 : 0.15);
            /* same block type: op_cont of a row slice copies blocks */
            char *sl = host_copy(a, op_cont(a, op_slice(a, qt, 0, 2, 2)));
            CHECK(sl && memcmp(sl, blk + 2 * rs, 2 * rs) == 0, "%s cont of %s row slice", bn,
                  dtype_name(bt[i]));
            free(sl); free(gotb); free(gotf); free(blk); free(rt);
            arena_reset(a);
        }
        free(q);
    }

    /* cpu vs ref on strided sources, including threaded sizes */
    free(x);
    x = rnd(4 * 100 * 333, -3, 3, 602);
    struct { const char *name; int nd; int64_t ne[3]; view_fn v; enum dtype to; } cases[] = {
        {"f32 perm -> f32", 3, {3, 17, 65}, v_perm, TYPE_F32},
        {"f32^T -> f16", 3, {3, 17, 65}, v_tr, TYPE_F16},
        {"f32 slice -> bf16", 2, {9, 40}, v_slice, TYPE_BF16},
        {"f32 large -> f16", 3, {4, 100, 333}, v_id, TYPE_F16},
        {"f32 large^T -> f32", 3, {4, 100, 333}, v_tr, TYPE_F32},
        {"f32 large -> q8_0", 2, {300, 256}, v_id, TYPE_Q8_0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct tensor *o0 = op_cast(A_cpu, cases[c].v(A_cpu, f32(A_cpu, cases[c].nd, cases[c].ne, x)), cases[c].to);
        struct tensor *o1 = op_cast(A_ref, cases[c].v(A_ref, f32(A_ref, cases[c].nd, cases[c].ne, x)), cases[c].to);
        /* compare as f32 */
        float *g = host_copy(A_cpu, op_cast(A_cpu, o0, TYPE_F32));
        float *e = host_copy(A_ref, op_cast(A_ref, o1, TYPE_F32));
        char buf[96];
        snprintf(buf, sizeof buf, "cpy %s cpu vs ref", cases[c].name);
        if (g && e) check_close(buf, g, e, (size_t)tensor_nelements(o0), 0, 0);
        else CHECK(0, "%s ran: %s %s", buf, arena_errmsg(A_cpu), arena_errmsg(A_ref));
        free(g);
        free(e);
        arena_reset(A_cpu);
        arena_reset(A_ref);
    }
    free(x);

    /* fill */
    for (int k = 0; k < 2; k++) {
        int64_t fne[2] = {301, 257};
        float *g = host_copy(as[k], op_fill(as[k], 2, fne, -2.5f));
        int bad = g ? 0 : 1;
        for (int64_t i = 0; g && i < 301 * 257; i++) bad += g[i] != -2.5f;
        CHECK(!bad, "%s fill: %d wrong", k ? "cpu" : "ref", bad);
        free(g);
        arena_reset(as[k]);
    }
}

int main(void)
{
    struct backend *cpu = backend_cpu_create(4);
    A_cpu = arena_create(cpu, 0);
    A_ref = arena_create(backend_ref(), 0);
    if (!cpu || !A_cpu || !A_ref) {
        fprintf(stderr, "setup failed\n");
        return 2;
    }
    test_binary();
    test_unary();
    test_unary_special();
    test_unary_widths();
    test_snake();
    test_reduce();
    test_cumsum();
    test_get_rows();
    test_cpy();
    /* again on the portable paths (libm activations, f16 conversion
     * without F16C) */
    enum cpu_level lvl = cpu_level();
    if (lvl >= CPU_AVX512) { /* the 8-lane activations against ref as well */
        cpu_set_level(CPU_AVX2);
        printf("-- cpu level forced to avx2 --\n");
        test_unary();
        test_unary_special();
    }
    cpu_set_level(CPU_GENERIC);
    printf("-- cpu level forced to generic --\n");
    test_unary();
    test_unary_special();
    test_snake();
    test_cpy();
    test_get_rows();
    cpu_set_level(lvl);
    arena_free(A_cpu);
    arena_free(A_ref);
    backend_cpu_free(cpu);
    return test_summary();
}
