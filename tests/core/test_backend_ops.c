/* test_backend_ops.c - every op on every built backend against `ref`, in
 * the spirit of ggml's test-backend-ops.
 *
 * Each case is a function that builds its inputs from seeded host data
 * (op_from_host, then views: transposes, slices, permutes) in the arena it
 * is given and returns the op's result; it runs once in a ref arena and
 * once in an arena of the backend under test, from the same host data, and
 * the results are compared after a download: F32 results by max abs error
 * relative to max |ref| against the case's tolerance (one line per case
 * and backend), other result types (F16/BF16/I32/Q8_0/Q4_0) byte for byte.
 *
 * Backends: cpu always; cuda when the build has it (-DCBX_CUDA=ON) and a
 * GPU is present. A CUDA build without a GPU says so in one line and tests
 * the cpu backend only; `--require-cuda` (the ctest `cuda_backend_ops`,
 * label cuda) tests cuda alone and fails when no GPU is found.
 * `--only NAME` runs the cases whose name contains NAME. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/ops.h"
#include "core/quant.h"
#include "core/rng.h"
#include "core/weights.h"
#include "core/window.h"
#include "testutil.h"

/* ---- inputs ------------------------------------------------------------- */

static int64_t nel(int ndim, const int64_t *ne)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= ne[d];
    return n;
}

/* F32 uniform [lo, hi) from seed, uploaded into a */
static struct tensor *in_f32(struct arena *a, uint64_t seed, int ndim, const int64_t *ne,
                             float lo, float hi)
{
    int64_t n = nel(ndim, ne);
    float *h = malloc((size_t)(n ? n : 1) * sizeof *h);
    if (!h) return NULL;
    fill_uniform(h, (size_t)n, lo, hi, seed);
    struct tensor *t = op_from_host(a, TYPE_F32, ndim, ne, h);
    free(h);
    return t;
}

/* A weight of type t (any float or block type) from uniform [-1, 1) */
static struct tensor *in_w(struct arena *a, enum dtype t, uint64_t seed, int ndim,
                           const int64_t *ne)
{
    int64_t n = nel(ndim, ne), k = ne[ndim - 1], rows = n / k;
    float *h = malloc((size_t)(n ? n : 1) * sizeof *h);
    size_t rs = dtype_row_size(t, k);
    char *q = malloc((size_t)rows * rs + 1);
    struct tensor *r = NULL;
    if (h && q) {
        fill_uniform(h, (size_t)n, -1.0f, 1.0f, seed);
        for (int64_t i = 0; i < rows; i++) {
            char *dst = q + i * rs;
            const float *src = h + i * k;
            if (t == TYPE_F32) memcpy(dst, src, (size_t)k * 4);
            else if (t == TYPE_F16)
                for (int64_t j = 0; j < k; j++) ((uint16_t *)dst)[j] = f32_to_fp16(src[j]);
            else if (t == TYPE_BF16)
                for (int64_t j = 0; j < k; j++) ((uint16_t *)dst)[j] = f32_to_bf16(src[j]);
            else quantize_row(t, src, dst, k);
        }
        r = op_from_host(a, t, ndim, ne, q);
    }
    free(h);
    free(q);
    return r;
}

/* n ids in [0, rows) of type t (I32 or I64), shape [n] or [b, n/b] */
static struct tensor *in_ids(struct arena *a, enum dtype t, int ndim, const int64_t *ne,
                             int64_t rows, uint64_t seed)
{
    int64_t n = nel(ndim, ne);
    float *u = malloc((size_t)n * sizeof *u);
    int64_t *v = malloc((size_t)n * sizeof *v);
    struct tensor *r = NULL;
    if (u && v) {
        fill_uniform(u, (size_t)n, 0.0f, (float)rows, seed);
        for (int64_t i = 0; i < n; i++) {
            int64_t id = (int64_t)u[i];
            id = id < 0 ? 0 : id >= rows ? rows - 1 : id;
            if (t == TYPE_I32) ((int32_t *)v)[i] = (int32_t)id;
            else v[i] = id;
        }
        r = op_from_host(a, t, ndim, ne, v);
    }
    free(u);
    free(v);
    return r;
}

#define NE(...) (const int64_t[]){__VA_ARGS__}
#define ND(...) (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), NE(__VA_ARGS__)

/* ---- cases ---------------------------------------------------------------- */

struct tcase {
    const char *name;
    struct tensor *(*fn)(struct arena *a, int v);
    int v;        /* variant passed to fn */
    double tol;   /* rel tolerance (max abs err / max |ref|) */
    double cpu_tol; /* for the cpu backend when it differs (0: tol): its
                     * products against block weights quantise x to Q8
                     * (see run_backend_ops for cuda's) */
};

/* elementwise */
static struct tensor *c_cpy(struct arena *a, int v)
{
    struct tensor *x = in_f32(a, 1, ND(3, 5, 7), -2, 2);
    return op_cont(a, v ? op_permute(a, x, (const int[]){2, 0, 1}) : op_transpose(a, x, 0, 2));
}
static const enum dtype cast_to[] = {TYPE_F16, TYPE_BF16, TYPE_I32, TYPE_Q8_0, TYPE_Q4_0};
static struct tensor *c_cast_from_f32(struct arena *a, int v)
{
    struct tensor *x = in_f32(a, 2, ND(3, 4, 64), -9, 9);
    return op_cast(a, v < 3 ? op_transpose(a, x, 0, 1) : x, cast_to[v]);
}
static const enum dtype cast_from[] = {TYPE_F16, TYPE_BF16, TYPE_Q8_0, TYPE_Q4_0, TYPE_Q4_1,
                                       TYPE_Q5_0, TYPE_Q5_1};
static struct tensor *c_cast_to_f32(struct arena *a, int v)
{
    struct tensor *w = in_w(a, cast_from[v], 3, ND(6, 96));
    return op_cast(a, v < 2 ? op_transpose(a, w, 0, 1) : w, TYPE_F32);
}
/* F16 <-> F32 at the edges: a backend's casts give ref's bits (the cpu's
 * by F16C instructions) over every F16 and at every rounding boundary;
 * NaNs are left out, whose payload bits no backend keeps as ref does. v
 * 0: every finite F16 to F32 (F32 results compare by value); v 1: every
 * F16 but NaN, the infinities too, to F32 and back (F16 bytes compared);
 * v 2: F32 values to F16 at every finite F16's rounding boundaries (its
 * midpoint to the next, one F32 ulp either side), past the largest,
 * through the subnormals, and seeded random bit patterns other than NaN,
 * F16 bytes compared. */
static struct tensor *c_cast_f16_edges(struct arena *a, int v)
{
    if (v < 2) {
        uint16_t *h = malloc(65536 * sizeof *h);
        if (!h) return NULL;
        int64_t n = 0;
        for (uint32_t b = 0; b < 65536; b++)
            if ((b & 0x7c00u) != 0x7c00u || (v == 1 && !(b & 0x3ffu))) h[n++] = (uint16_t)b;
        struct tensor *t = op_from_host(a, TYPE_F16, 1, &n, h);
        free(h);
        t = t ? op_cast(a, t, TYPE_F32) : NULL;
        return v == 1 && t ? op_cast(a, t, TYPE_F16) : t;
    }
    const int64_t nh = 0x7c00, nr = 65536, n = 2 * 3 * nh + nr;
    float *f = malloc((size_t)n * sizeof *f);
    if (!f) return NULL;
    int64_t k = 0;
    for (int sign = 0; sign < 2; sign++)
        for (uint32_t b = 0; b < (uint32_t)nh; b++) {
            /* between b and b + 1 (0x7bff + 1: infinity, the overflow
             * boundary 65520 as the midpoint) */
            const double lo = fp16_to_f32((uint16_t)b),
                         hi = b + 1 < (uint32_t)nh ? fp16_to_f32((uint16_t)(b + 1)) : 65536.0;
            const float mid = (float)((lo + hi) / 2);
            const float m[3] = {nextafterf(mid, 0.0f), mid, nextafterf(mid, INFINITY)};
            for (int i = 0; i < 3; i++) f[k++] = sign ? -m[i] : m[i];
        }
    struct rng_stream rs;
    rng_stream_init(&rs, "test", 77);
    while (k < n) {
        const uint32_t bits = (uint32_t)(rng_uniform(&rs) * 65536.0) << 16 | (uint32_t)(rng_uniform(&rs) * 65536.0);
        memcpy(&f[k], &bits, 4);
        k += f[k] == f[k]; /* not NaN */
    }
    struct tensor *t = op_from_host(a, TYPE_F32, 1, &n, f);
    free(f);
    return t ? op_cast(a, t, TYPE_F16) : NULL;
}
static struct tensor *c_cast_i32(struct arena *a, int v)
{
    (void)v;
    struct tensor *i = in_ids(a, TYPE_I32, ND(4, 9), 1000, 4);
    return op_cast(a, op_transpose(a, i, 0, 1), TYPE_F32);
}
static struct tensor *c_fill(struct arena *a, int v)
{
    (void)v;
    return op_fill(a, ND(3, 7, 5), 1.25f);
}
static struct tensor *c_concat(struct arena *a, int v)
{
    struct tensor *x = in_f32(a, 5, ND(2, 3, 8), -1, 1), *y = in_f32(a, 6, ND(2, 3, 8), -1, 1);
    return op_concat(a, x, y, v);
}
static struct tensor *c_binary(struct arena *a, int v)
{
    struct tensor *x = in_f32(a, 7, ND(2, 3, 4, 5), -2, 2);
    struct tensor *y;
    switch (v / 4) {
    case 0: y = in_f32(a, 8, ND(2, 3, 4, 5), 0.5f, 2); break;
    case 1: y = in_f32(a, 8, ND(3, 1, 5), 0.5f, 2); break;
    case 2: y = in_f32(a, 8, ND(5), 0.5f, 2); break;
    default: /* x a transposed view, y [4, 1] */
        x = op_transpose(a, in_f32(a, 9, ND(2, 3, 5, 4), -2, 2), 2, 3);
        y = in_f32(a, 8, ND(4, 1), 0.5f, 2);
        break;
    }
    return op_binary(a, x, y, (enum binop)(v % 4));
}
static struct tensor *c_binary_swap(struct arena *a, int v)
{
    struct tensor *x = in_f32(a, 10, ND(3, 1), -2, 2), *y = in_f32(a, 11, ND(2, 3, 6), -2, 2);
    return op_binary(a, x, y, v ? BIN_MUL : BIN_ADD);
}
static struct tensor *c_unary(struct arena *a, int v)
{
    bool pos = v == UN_LOG || v == UN_SQRT;
    struct tensor *x = in_f32(a, 12 + (uint64_t)v, ND(2, 333), pos ? 0.05f : -4, pos ? 5 : 4);
    float p0 = v == UN_CLAMP ? -1.5f : v == UN_SCALE ? 0.75f : v == UN_ELU ? 1.3f : 0.1f;
    float p1 = v == UN_CLAMP ? 2.0f : v == UN_SCALE ? -0.25f : 0.0f;
    return op_unary(a, op_slice(a, x, 1, 3, 300), (enum unop)v, p0, p1);
}
static struct tensor *c_snake(struct arena *a, int v)
{
    struct tensor *x = in_f32(a, 40, ND(2, 6, 50), -3, 3), *al = in_f32(a, 41, ND(6), 0.2f, 2);
    return op_snake(a, v ? op_slice(a, x, 2, 5, 40) : x, al);
}
static struct tensor *c_reduce(struct arena *a, int v)
{
    struct tensor *x = in_f32(a, 42, ND(3, 4, 77), -3, 3);
    return op_reduce(a, v >= 3 ? op_transpose(a, x, 1, 2) : x, (enum redop)(v % 3));
}
/* the generator's gaussians from draw 10 of a stream on; v = 1: a
 * 9 x 48000 block (HiFT's noise) */
static struct tensor *c_randn(struct arena *a, int v)
{
    struct rng_stream s;
    rng_stream_init(&s, "hift.sinegen.noise", 5);
    s.counter = 10;
    return v ? op_randn(a, ND(9, 48000), &s) : op_randn(a, ND(3, 37), &s);
}

static struct tensor *c_cumsum(struct arena *a, int v)
{
    struct tensor *x = in_f32(a, 43, ND(3, 2000), -1, 1);
    return op_cumsum(a, v ? op_transpose(a, in_f32(a, 44, ND(50, 3), -1, 1), 0, 1) : x);
}
static const enum dtype table_types[] = {TYPE_F32, TYPE_F16, TYPE_BF16, TYPE_Q8_0, TYPE_Q4_0,
                                         TYPE_Q4_1, TYPE_Q5_0, TYPE_Q5_1};
static struct tensor *c_get_rows(struct arena *a, int v)
{
    struct tensor *t = in_w(a, table_types[v % 8], 45, ND(50, 64));
    struct tensor *ids = v < 8 ? in_ids(a, TYPE_I32, ND(7), 50, 46)
                               : in_ids(a, TYPE_I64, ND(2, 5), 50, 47);
    return op_get_rows(a, t, ids);
}

/* linear */
static const enum dtype lin_types[] = {TYPE_F32, TYPE_F16, TYPE_BF16, TYPE_Q8_0, TYPE_Q4_0,
                                       TYPE_Q4_1, TYPE_Q5_0, TYPE_Q5_1};
/* v: type index + 8 * shape (0: x [3, 5, 64] + bias, 1: x [1, 1, 64] (one
 * row), 2: x [4, 64] a transposed view, 3: x [70, 256] w [300, 256], 4: x
 * [2, 63] (odd K, float types only), 7: x [4, 1024] w [300, 1024] (the
 * decode GEMV's widest rows)) */
static struct tensor *c_linear(struct arena *a, int v)
{
    enum dtype t = lin_types[v % 8];
    int shape = v / 8;
    /* shapes 5, 6: the decode GEMV's split over K (4 and 2 warps an output) */
    int64_t K = shape == 3 ? 256 : shape == 4 ? 63 : shape == 5 ? 4096 : shape == 6 ? 2048 : shape == 7 ? 1024 : 64;
    int64_t N = shape == 3 || shape == 7 ? 300 : shape == 5 ? 101 : shape == 6 ? 37 : 48;
    struct tensor *w = in_w(a, t, 50 + (uint64_t)v, ND(N, K));
    struct tensor *b = in_f32(a, 51, ND(N), -1, 1);
    struct tensor *x;
    switch (shape) {
    case 0: x = in_f32(a, 52, ND(3, 5, K), -1, 1); break;
    case 1: x = in_f32(a, 53, ND(1, 1, K), -1, 1); break;
    case 2: x = op_transpose(a, in_f32(a, 54, ND(K, 4), -1, 1), 0, 1); break;
    case 4: x = in_f32(a, 56, ND(2, K), -1, 1); break;
    case 5: x = in_f32(a, 57, ND(1, 1, K), -1, 1); break;
    case 6: x = in_f32(a, 58, ND(3, K), -1, 1); break;
    case 7: x = in_f32(a, 59, ND(4, K), -1, 1); break;
    default: x = in_f32(a, 55, ND(70, K), -1, 1); break;
    }
    return op_linear(a, x, w, shape == 2 ? NULL : b);
}
/* op_linear_ex: 0 f32 one row, gelu_tanh + residual; 1 q4_0 K 4096 one
 * row (split GEMV), residual; 2 f32 [70, 256] (not a GEMV: the product,
 * then the elementwise kernels), silu + residual; 3 q8_0 three rows,
 * gelu_tanh; 4 q4_0 K 4096 one row, a strided residual; 5 q8_0 K 4096
 * one row, 3000 outputs + residual (on a GPU: more outputs than one wave
 * of blocks at one output a warp, so a warp takes several, split over K);
 * F32 likewise: 6 K 1024, 5000 outputs, gelu_tanh + residual (GPT-2's
 * c_fc, wider), 7 K 4096 (split over four warps), 3000 outputs, two rows,
 * residual */
static struct tensor *c_linear_ex(struct arena *a, int v)
{
    static const enum dtype t[8] = {TYPE_F32, TYPE_Q4_0, TYPE_F32, TYPE_Q8_0,
                                    TYPE_Q4_0, TYPE_Q8_0, TYPE_F32, TYPE_F32};
    static const int act[8] = {UN_GELU_TANH, -1, UN_SILU, UN_GELU_TANH, -1, -1, UN_GELU_TANH, -1};
    const int64_t K = v == 1 || v == 4 || v == 5 || v == 7 ? 4096 : v == 6 ? 1024 : 256,
                  N = v == 2 ? 300 : v == 5 || v == 7 ? 3000 : v == 6 ? 5000 : 77,
                  M = v == 2 ? 70 : v == 3 ? 3 : v == 7 ? 2 : 1;
    struct tensor *w = in_w(a, t[v], 70 + (uint64_t)v, ND(N, K));
    struct tensor *b = v == 1 ? NULL : in_f32(a, 71, ND(N), -1, 1);
    struct tensor *x = in_f32(a, 72, ND(M, K), -1, 1);
    struct tensor *r = v == 3 ? NULL
                     : v == 4 ? op_transpose(a, in_f32(a, 73, ND(N, M), -1, 1), 0, 1)
                              : in_f32(a, 73, ND(M, N), -1, 1);
    return op_linear_ex(a, x, w, b, act[v], r);
}
/* op_linear_gated (Llama's down product of silu(gate) * up): x and gate
 * the two halves of one [M, 1, 2K] product, residual: 0 q4_0 K 4096, 1024
 * outputs, two rows (the CFG pair's); 1 q8_0 K 512, 300 outputs, one
 * row, bias; 2 f32 K 256, two rows (the GEMV without the gated staging:
 * op_mul first); 3 q4_0 K 1024 over 6 rows (the GEMM path) */
static struct tensor *c_linear_gated(struct arena *a, int v)
{
    static const enum dtype t[4] = {TYPE_Q4_0, TYPE_Q8_0, TYPE_F32, TYPE_Q4_0};
    static const int64_t kk[4] = {4096, 512, 256, 1024}, nn[4] = {1024, 300, 77, 90}, mm[4] = {2, 1, 2, 6};
    const int64_t K = kk[v], N = nn[v], M = mm[v];
    struct tensor *w = in_w(a, t[v], 130 + (uint64_t)v, ND(N, K));
    struct tensor *b = v == 1 ? in_f32(a, 131, ND(N), -1, 1) : NULL;
    struct tensor *gu = in_f32(a, 132, ND(M, 1, 2 * K), -2, 2);
    struct tensor *r = in_f32(a, 133, ND(M, 1, N), -1, 1);
    return op_linear_gated(a, op_slice(a, gu, 2, 0, K), op_slice(a, gu, 2, K, K), w, b, -1, r);
}
/* op_linear_cat: 0 f32 q, k, v of two rows (K 1024); 1 q4_0 gate + SiLU
 * and up, one row (K 2048); 2 q8_0 three parts of unequal width, three
 * rows; 3 f32 two parts over 9 rows (the GEMM path). With a norm of the
 * input: 4 f32 layer norm, bias, gelu_tanh, one row (K 1024: GPT-2's
 * c_fc); 5 q4_0 RMS norm, gate + SiLU and up, two rows (K 2048); 6 q8_0
 * layer norm without affine, three parts with biases, three rows; 7 f32
 * RMS norm over 9 rows (the GEMM path); 8 f32 layer norm, bias, K 4096
 * (split GEMV); 9 = 5 with a BF16 norm weight (the norm op first); the
 * quantised GEMVs' staged input at other widths of block groups: 10 q8_0
 * layer norm, bias, K 512 (16 blocks), two rows; 11 q4_0 K 768 (24
 * blocks), one row, no norm; 12 q4_0 layer norm, biases, gelu_tanh +
 * plain, 5000 and 1500 outputs of K 1024, one row (on a GPU: several
 * outputs a warp) */
static struct tensor *c_linear_cat(struct arena *a, int v)
{
    const bool bf16_g = v == 9;
    if (bf16_g) v = 5;
    static const enum dtype t[13] = {TYPE_F32, TYPE_Q4_0, TYPE_Q8_0, TYPE_F32,  TYPE_F32, TYPE_Q4_0, TYPE_Q8_0,
                                     TYPE_F32, TYPE_F32,  TYPE_BF16, TYPE_Q8_0, TYPE_Q4_0, TYPE_Q4_0};
    static const int nw[13] = {3, 2, 3, 2, 1, 2, 3, 2, 1, 0, 1, 2, 2},
                     rows[13] = {2, 1, 3, 9, 1, 2, 3, 9, 1, 0, 2, 1, 1};
    static const int64_t kk[13] = {1024, 2048, 256, 320, 1024, 2048, 256, 320, 4096, 0, 512, 768, 1024};
    static const int64_t nn[13][3] = {{96, 64, 64}, {150, 150, 0}, {40, 7, 33}, {50, 70, 0}, {200, 0, 0},
                                      {150, 150, 0}, {40, 7, 33},  {50, 70, 0}, {90, 0, 0},  {0, 0, 0},
                                      {70, 0, 0},    {65, 33, 0},  {5000, 1500, 0}};
    static const int acts[13][3] = {{-1, -1, -1},     {UN_SILU, -1, -1}, {UN_GELU_TANH, -1, UN_SILU},
                                    {-1, UN_SILU, -1}, {UN_GELU_TANH, -1, -1}, {UN_SILU, -1, -1},
                                    {-1, UN_SILU, -1}, {UN_SILU, -1, -1}, {-1, -1, -1},
                                    {-1, -1, -1},     {-1, -1, -1},     {UN_GELU_TANH, -1, -1},
                                    {UN_GELU_TANH, -1, -1}};
    const struct tensor *w[3], *b[3] = {NULL, NULL, NULL};
    for (int i = 0; i < nw[v]; i++) {
        w[i] = in_w(a, t[v], 74 + (uint64_t)(3 * v + i), ND(nn[v][i], kk[v]));
        if (v == 4 || v == 6 || v == 8 || v == 10 || v == 12)
            b[i] = in_f32(a, 120 + (uint64_t)(3 * v + i), ND(nn[v][i]), -1, 1);
    }
    /* a mean well away from zero, as a residual stream's */
    struct tensor *x = in_f32(a, 75, ND(rows[v], kk[v]), v < 4 ? -1 : 0.5f, v < 4 ? 1 : 3);
    struct linear_norm nm = {v == 5 || v == 7 ? LINEAR_NORM_RMS : LINEAR_NORM_LAYER, NULL, NULL,
                             v == 6 ? 1e-5f : 1e-6f};
    if (v != 6) nm.g = bf16_g ? in_w(a, TYPE_BF16, 76, ND(kk[v])) : in_f32(a, 76, ND(kk[v]), 0.5f, 1.5f);
    if (nm.kind == LINEAR_NORM_LAYER && v != 6) nm.b = in_f32(a, 77, ND(kk[v]), -1, 1);
    return op_linear_cat(a, x, v < 4 || v == 11 ? NULL : &nm, nw[v], w, b, v == 0 ? NULL : acts[v]);
}
static struct tensor *c_matmul(struct arena *a, int v)
{
    switch (v) {
    case 0: return op_matmul(a, in_f32(a, 60, ND(2, 3, 17, 19), -1, 1), in_f32(a, 61, ND(2, 3, 19, 23), -1, 1));
    case 1: return op_matmul(a, in_f32(a, 62, ND(3, 17, 19), -1, 1), in_f32(a, 63, ND(2, 1, 19, 23), -1, 1));
    case 2: /* y a transposed view, x a permuted one */
        return op_matmul(a, op_permute(a, in_f32(a, 64, ND(17, 2, 19), -1, 1), (const int[]){1, 0, 2}),
                         op_transpose(a, in_f32(a, 65, ND(2, 23, 19), -1, 1), 1, 2));
    case 3: return op_matmul(a, in_f32(a, 66, ND(1, 5, 8), -1, 1), in_f32(a, 67, ND(8, 1), -1, 1));
    default: /* x's inner strides (22, 2) fit no BLAS layout: a copy first */
        return op_matmul(a, op_slice(a, op_permute(a, in_f32(a, 68, ND(2, 9, 11, 2), -1, 1),
                                                   (const int[]){0, 3, 1, 2}), 1, 0, 1),
                         in_f32(a, 69, ND(2, 1, 11, 6), -1, 1));
    }
}

/* nn */
static struct tensor *c_layer_norm(struct arena *a, int v)
{
    struct tensor *x = in_f32(a, 70, ND(4, 7, 96), -2, 3);
    if (v == 3) x = op_slice(a, op_transpose(a, in_f32(a, 71, ND(4, 96, 9), -2, 3), 1, 2), 1, 1, 7);
    struct tensor *g = v == 2 ? in_w(a, TYPE_F16, 72, ND(96)) : in_f32(a, 72, ND(96), 0.5f, 1.5f);
    struct tensor *b = in_f32(a, 73, ND(96), -1, 1);
    return v == 1 ? op_layer_norm(a, x, NULL, NULL, 1e-5f) : op_layer_norm(a, x, g, b, 1e-5f);
}
static struct tensor *c_add_layer_norm(struct arena *a, int v)
{
    struct tensor *x = in_f32(a, 74, ND(3, 5, 80), -2, 2);
    struct tensor *r = op_transpose(a, in_f32(a, 75, ND(3, 80, 5), -2, 2), 1, 2);
    struct tensor *g = in_w(a, TYPE_BF16, 76, ND(80)), *b = in_f32(a, 77, ND(80), -1, 1), *sum = NULL;
    struct tensor *o = op_add_layer_norm(a, x, r, g, b, 1e-6f, &sum);
    return v ? sum : o;
}
static struct tensor *c_rms_norm(struct arena *a, int v)
{
    struct tensor *x = in_f32(a, 78, ND(5, 130), -2, 2);
    struct tensor *g = v == 1 ? in_w(a, TYPE_BF16, 79, ND(130)) : in_f32(a, 79, ND(130), 0, 2);
    return op_rms_norm(a, v == 2 ? op_slice(a, x, 1, 1, 129) : x, v == 2 ? NULL : g, 1e-6f);
}
static struct tensor *c_group_norm(struct arena *a, int v)
{
    if (v == 1)
        return op_group_norm(a, in_f32(a, 80, ND(8, 30), -2, 2), 2, NULL, NULL, 1e-5f);
    struct tensor *x = in_f32(a, 81, ND(2, 8, 30), -2, 2);
    if (v == 2) x = op_transpose(a, in_f32(a, 82, ND(2, 30, 8), -2, 2), 1, 2);
    return op_group_norm(a, x, 4, in_f32(a, 83, ND(8), 0.5f, 1.5f), in_f32(a, 84, ND(8), -1, 1), 1e-5f);
}
static struct tensor *c_channel_affine(struct arena *a, int v)
{
    struct tensor *x = in_f32(a, 85, ND(2, 6, 10), -2, 2);
    int dim = v ? -1 : 1;
    int64_t c = v ? 10 : 6;
    return op_channel_affine(a, v ? op_transpose(a, in_f32(a, 86, ND(2, 10, 6), -2, 2), 1, 2) : x, dim,
                             in_f32(a, 87, ND(c), 0.5f, 2), in_w(a, TYPE_F16, 88, ND(c)));
}
static struct tensor *c_softmax(struct arena *a, int v)
{
    struct tensor *x = in_f32(a, 89, ND(3, 4, 100), -8, 8);
    return op_softmax(a, v ? op_transpose(a, x, 1, 2) : x, v ? 1.0f : 0.5f);
}

/* attention variants: 0 plain GQA, 1 causal, 2 bias [1, Hq, Tq, Tk], 3 bias
 * [Tq, Tk] + causal, 4 decode Tq 1, 5 F16 kv, 6 Q8_0 kv, 7 causal Tq > Tk
 * (queries that see no key), 8 permuted [B, T, H, D] views, 9 long keys
 * (global score scratch), 10 -inf bias rows; decode over many keys (the
 * cuda backend's split-key path): 11 1000 keys, 12 f16 kv + bias, 13 q8_0
 * kv causal, 14 the first 200 of 300 keys masked (whole chunks see none);
 * many queries over several 64 x 64 tiles (the cuda backend's flash
 * kernel): 15 head dim 64 GQA, 16 causal + bias [Tq, Tk], 17 head dim 128
 * f16 kv causal, 18 q8_0 kv causal Tq > Tk, 19 permuted views with a
 * -inf bias row, 20 head dim 32 over 1000 keys */
static struct tensor *c_attention(struct arena *a, int v)
{
    int64_t B = 2, Hq = 4, Hk = 2, Tq = 5, Tk = 9, D = 16;
    if (v == 4) { Tq = 1; Tk = 33; }
    if (v == 6) D = 32;
    if (v == 7) { Tq = 6; Tk = 4; }
    if (v == 9) { B = 1; Hq = 2; Hk = 1; Tq = 2; Tk = 9000; D = 8; }
    if (v >= 11 && v <= 14) { Tq = 1; Tk = v == 13 ? 700 : v == 14 ? 300 : 1000; D = v == 13 ? 32 : 64; }
    if (v >= 15 && v <= 20) {
        static const int64_t fl[6][3] = {{130, 150, 64}, {100, 170, 64}, {67, 129, 128},
                                         {90, 70, 64},   {65, 64, 64},   {40, 1000, 32}};
        Tq = fl[v - 15][0];
        Tk = fl[v - 15][1];
        D = fl[v - 15][2];
    }
    struct tensor *q = in_f32(a, 90, ND(B, Hq, Tq, D), -1, 1);
    struct tensor *k = in_f32(a, 91, ND(B, Hk, Tk, D), -1, 1);
    struct tensor *vv = in_f32(a, 92, ND(B, Hk, Tk, D), -1, 1);
    if (v == 21) { B = 3; Tq = 1; Tk = 500; D = 20; }
    if (v == 8 || v == 19 || v == 21) {
        const int perm[4] = {0, 2, 1, 3};
        q = op_permute(a, in_f32(a, 93, ND(B, Tq, Hq, D), -1, 1), perm);
        k = op_permute(a, in_f32(a, 94, ND(B, Tk, Hk, D), -1, 1), perm);
        vv = op_permute(a, in_f32(a, 95, ND(B, Tk, Hk, D), -1, 1), perm);
    }
    if (v == 5 || v == 6 || v == 12 || v == 13 || v == 17 || v == 18) {
        enum dtype kt = v == 5 || v == 12 || v == 17 ? TYPE_F16 : TYPE_Q8_0;
        k = op_cast(a, k, kt);
        vv = op_cast(a, vv, kt);
    }
    struct tensor *bias = NULL;
    if (v == 2) bias = in_f32(a, 96, ND(1, Hq, Tq, Tk), -2, 2);
    if (v == 3 || v == 16) bias = in_f32(a, 97, ND(Tq, Tk), -2, 2);
    if (v == 12) bias = in_f32(a, 99, ND(B, Hq, 1, Tk), -2, 2);
    if (v == 10 || v == 14 || v == 19) { /* 10, 19: query row 1 masked out; 14: keys < 200 */
        int64_t n = Tq * Tk;
        float *h = malloc((size_t)n * sizeof *h);
        if (!h) return NULL;
        fill_uniform(h, (size_t)n, -1, 1, 98);
        for (int64_t j = 0; j < (v == 14 ? 200 : Tk); j++) h[(v == 14 ? 0 : Tk) + j] = -INFINITY;
        bias = op_from_host(a, TYPE_F32, 2, NE(Tq, Tk), h);
        free(h);
    }
    const bool causal = v == 1 || v == 3 || v == 7 || v == 13 || v == 16 || v == 17 || v == 18;
    struct attn_params p = {1.0f / sqrtf((float)D), causal, NULL, NULL};
    return op_attention(a, q, k, vv, bias, &p);
}

/* attention over the first kv_len keys, the length an operand on the
 * backend (attn_params.kv_len): 0 decode over a 300-key cache holding 137,
 * 1 q8_0 kv 700 of 1000, D 32, 2 f16 kv 1 of 40, 3 four causal queries
 * (not the decode kernel) 50 of 64, 4 q8_0 kv 450 of 1000, D 64 (T3's
 * quantised cache) */
static struct tensor *c_attention_len(struct arena *a, int v)
{
    const int64_t B = 2, Hq = 4, Hk = 2, Tq = v == 3 ? 4 : 1, D = v == 1 ? 32 : 64;
    const int64_t Tk = v == 0 ? 300 : v == 1 || v == 4 ? 1000 : v == 2 ? 40 : 64;
    const int32_t len = v == 0 ? 137 : v == 1 ? 700 : v == 2 ? 1 : v == 4 ? 450 : 50;
    struct tensor *q = in_f32(a, 120, ND(B, Hq, Tq, D), -1, 1);
    struct tensor *k = in_f32(a, 121, ND(B, Hk, Tk, D), -1, 1);
    struct tensor *vv = in_f32(a, 122, ND(B, Hk, Tk, D), -1, 1);
    if (v == 1 || v == 2 || v == 4) {
        k = op_cast(a, k, v == 2 ? TYPE_F16 : TYPE_Q8_0);
        vv = op_cast(a, vv, v == 2 ? TYPE_F16 : TYPE_Q8_0);
    }
    struct attn_params p = {1.0f / sqrtf((float)D), v == 3, NULL, op_from_host(a, TYPE_I32, 1, NE(1), &len)};
    return op_attention(a, q, k, vv, NULL, &p);
}

/* op_attention_group (T3's batched decode step): four members of 1, 2, 1
 * and 2 rows over caches of 300, 40, 1000 and 65 positions holding 137,
 * 5, 300 and 64 (the last one's new key goes to its last position), GQA 4
 * query heads over 2, D 64, the new rows permuted views of a projection;
 * caches 0 f32, 1 q8_0, 2 f16. 3: 45 members of 1 and 2 rows in turn
 * (67 rows: more than one launch's table on cuda, a CFG pair across its
 * boundary), caches of 20-64 positions, f32. The output attends each new
 * key, so a misplaced write shows in it. */
static struct tensor *c_attention_group(struct arena *a, int v)
{
    static const enum dtype ct[] = {TYPE_F32, TYPE_Q8_0, TYPE_F16, TYPE_F32};
    enum { N_MAX = 45 };
    int N = 4, rows[N_MAX] = {1, 2, 1, 2}, cap[N_MAX] = {300, 40, 1000, 65}, n_past[N_MAX] = {137, 5, 300, 64};
    int64_t R = 6;
    if (v == 3) {
        N = N_MAX;
        R = 0;
        for (int i = 0; i < N; i++) {
            rows[i] = 1 + i % 2;
            cap[i] = 20 + i;
            n_past[i] = (7 * i) % cap[i];
            R += rows[i];
        }
    }
    const int64_t Hq = 4, Hk = 2, D = 64;
    struct tensor *kc[N_MAX], *vc[N_MAX];
    for (int i = 0; i < N; i++) {
        kc[i] = op_cast(a, in_f32(a, 150 + (uint64_t)i, ND(rows[i], Hk, cap[i], D), -1, 1), ct[v]);
        vc[i] = op_cast(a, in_f32(a, 160 + (uint64_t)i, ND(rows[i], Hk, cap[i], D), -1, 1), ct[v]);
        if (!kc[i] || !vc[i]) return NULL;
    }
    const int perm[4] = {0, 2, 1, 3};
    struct tensor *q = op_permute(a, in_f32(a, 170, ND(R, 1, Hq, D), -1, 1), perm);
    struct tensor *k = op_permute(a, in_f32(a, 171, ND(R, 1, Hk, D), -1, 1), perm);
    struct tensor *vv = op_permute(a, in_f32(a, 172, ND(R, 1, Hk, D), -1, 1), perm);
    const struct attn_group g = {N, rows, n_past, kc, vc, 0.125f};
    return op_attention_group(a, q, k, vv, &g);
}

/* op_attention_append (a recorded decode step): the new keys and values
 * (permuted views of a projection) written at *at and attended, GQA 4
 * query heads over 2; 0 f32 cache at 137 of 300, D 64; 1 q8_0 at 450 of
 * 1000, D 64 (T3's quantised cache); 2 f16 at 0 of 40 (the only key is
 * the new one); 3 f32 at the last of 65, D 80 (element-wise reads); 4 q8_0
 * D 32 (a cache the cuda kernel does not read by blocks: copy and attend).
 * With RoPE on q and the new keys (Llama's step): 5 q8_0 at 450 of 1000
 * with Llama-3 scaling (T3's), 6 f32 at 137 of 300, theta 1e4, 7 f16 at 30
 * of 40 rotating 32 of 64 dims (a rotation the cuda kernel leaves to
 * op_rope). The result is the output, then both caches as f32, so a
 * misplaced or missing write shows. */
static struct tensor *flat_f32(struct arena *a, struct tensor *t)
{
    if (!t) return NULL;
    const int64_t n = tensor_nelements(t);
    return op_reshape(a, t->type == TYPE_F32 ? t : op_cast(a, t, TYPE_F32), 1, &n);
}

static struct tensor *c_attention_append(struct arena *a, int v)
{
    static const enum dtype ct[] = {TYPE_F32, TYPE_Q8_0, TYPE_F16, TYPE_F32, TYPE_Q8_0, TYPE_Q8_0, TYPE_F32, TYPE_F16};
    static const int64_t caps[] = {300, 1000, 40, 65, 50, 1000, 300, 40}, dims[] = {64, 64, 64, 80, 32, 64, 64, 64};
    static const int32_t ats[] = {137, 450, 0, 64, 20, 450, 137, 30};
    static const struct rope_params ropes[] = {
        {500000.0f, 64, 8.0f, 1.0f, 4.0f, 8192}, {10000.0f, 64, 0, 0, 0, 0}, {10000.0f, 32, 0, 0, 0, 0}};
    const int64_t B = 2, Hq = 4, Hk = 2, D = dims[v], cap = caps[v];
    const int32_t at = ats[v], len = at + 1;
    struct tensor *kc = op_cast(a, in_f32(a, 180, ND(B, Hk, cap, D), -1, 1), ct[v]);
    struct tensor *vc = op_cast(a, in_f32(a, 181, ND(B, Hk, cap, D), -1, 1), ct[v]);
    const int perm[4] = {0, 2, 1, 3};
    struct tensor *q = op_permute(a, in_f32(a, 182, ND(B, 1, Hq, D), -1, 1), perm);
    struct tensor *k = op_permute(a, in_f32(a, 183, ND(B, 1, Hk, D), -2, 2), perm);
    struct tensor *vv = op_permute(a, in_f32(a, 184, ND(B, 1, Hk, D), -2, 2), perm);
    struct tensor *o = op_attention_append(a, q, k, vv, kc, vc, op_from_host(a, TYPE_I32, 1, NE(1), &at),
                                           op_from_host(a, TYPE_I32, 1, NE(1), &len), 1.0f / sqrtf((float)D),
                                           v >= 5 ? &ropes[v - 5] : NULL);
    struct tensor *r = flat_f32(a, o);
    if (!r) return NULL;
    r = op_concat(a, r, flat_f32(a, kc), 0);
    return r ? op_concat(a, r, flat_f32(a, vc), 0) : NULL;
}

/* op_copy_into_at: new rows into a cache view at a position held in a
 * tensor: 0 one f32 position at 7 of 20 from a permuted view, 1 into a
 * q8_0 cache at the last position, 2 three positions into an f16 cache at
 * 0; the whole cache is the result */
static struct tensor *c_copy_into_at(struct arena *a, int v)
{
    static const enum dtype ct[] = {TYPE_F32, TYPE_Q8_0, TYPE_F16};
    const int64_t n = v == 2 ? 3 : 1;
    const int32_t at = v == 0 ? 7 : v == 1 ? 19 : 0;
    struct tensor *cache = op_cast(a, in_f32(a, 130, ND(2, 3, 20, 32), -1, 1), ct[v]);
    const int perm[4] = {0, 2, 1, 3};
    struct tensor *x = op_permute(a, in_f32(a, 131, ND(2, n, 3, 32), -2, 2), perm);
    if (op_copy_into_at(a, cache, x, 2, op_from_host(a, TYPE_I32, 1, NE(1), &at)) != CBX_OK) return NULL;
    return ct[v] == TYPE_F32 ? cache : op_cast(a, cache, TYPE_F32);
}

/* backend.copy_2d (a voice prefix restored into a KV cache): R rows of W
 * floats from src into the first half of each row of dst [R, 2W], whose
 * other half must stay as it was; v 0: 16 rows of 24 KiB, v 1: 300 rows
 * of 96 bytes (grouped on the cpu pool) */
static struct tensor *c_copy_2d(struct arena *a, int v)
{
    const struct backend *be = arena_backend(a);
    const int64_t R = v ? 300 : 16, W = v ? 24 : 6144;
    struct tensor *src = in_f32(a, 140, ND(R, W), -1, 1), *dst = in_f32(a, 141, ND(R, 2 * W), -1, 1);
    const size_t w = sizeof(float) * (size_t)W;
    if (!src || !dst || !be->copy_2d || !be->copy_2d(be, dst->data, 2 * w, src->data, w, w, (size_t)R)) return NULL;
    return dst;
}

/* attention probabilities export: the output, checked like any case, and
 * the exported rows, kept in probs[] per run and compared below */
static float probs_buf[2][3 * 40];
static int probs_slot;
static struct tensor *c_attention_probs(struct arena *a, int v)
{
    (void)v;
    struct tensor *q = in_f32(a, 100, ND(1, 3, 6, 16), -1, 1);
    struct tensor *k = in_f32(a, 101, ND(1, 3, 30, 16), -1, 1);
    struct tensor *vv = in_f32(a, 102, ND(1, 3, 30, 16), -1, 1);
    struct attn_probs pr = {0, 2, 3, 3, probs_buf[probs_slot], 40};
    struct attn_params p = {0.25f, true, &pr, NULL};
    return op_attention(a, q, k, vv, NULL, &p);
}

/* rope: 0 full, 1 partial n_dims, 2 llama3 scaling, 3 strided view */
static struct tensor *c_rope(struct arena *a, int v)
{
    struct tensor *x = in_f32(a, 110, ND(2, 3, 5, 16), -2, 2);
    if (v == 3) x = op_permute(a, in_f32(a, 111, ND(2, 5, 3, 16), -2, 2), (const int[]){0, 2, 1, 3});
    int32_t ph[5] = {0, 1, 7, 100, 4095};
    struct tensor *pos = op_from_host(a, TYPE_I32, 1, NE(5), ph);
    struct rope_params p = {10000.0f, v == 1 ? 8 : 16, 0, 0, 0, 0};
    if (v == 2) p = (struct rope_params){500000.0f, 16, 8.0f, 1.0f, 4.0f, 8192};
    return op_rope(a, x, pos, &p);
}

/* conv */
static struct tensor *c_conv1d(struct arena *a, int v)
{
    struct conv1d_params p = {1, 1, 1, 2, 2, PAD_ZERO};
    int64_t cin = 6, cout = 8, K = 5;
    switch (v) {
    case 1: p = (struct conv1d_params){2, 2, 1, 4, 3, PAD_ZERO}; break;
    case 2: p = (struct conv1d_params){1, 1, 2, 3, 3, PAD_REFLECT}; K = 7; break;
    case 3: p = (struct conv1d_params){1, 1, 6, 1, 1, PAD_REPLICATE}; cout = 6; K = 3; break;
    case 4: p = (struct conv1d_params){1, 3, 1, 12, 0, PAD_ZERO}; break; /* causal */
    case 5: p = (struct conv1d_params){1, 1, 1, 0, 0, PAD_ZERO}; K = 1; break;
    default: break;
    }
    struct tensor *x = in_f32(a, 120, ND(2, cin, 40), -1, 1);
    if (v == 6) x = in_f32(a, 121, ND(cin, 40), -1, 1);
    if (v == 7) x = op_slice(a, op_transpose(a, in_f32(a, 122, ND(2, 45, cin), -1, 1), 1, 2), 2, 2, 40);
    struct tensor *w = in_w(a, v == 6 ? TYPE_F16 : v == 7 ? TYPE_BF16 : TYPE_F32, 123,
                            ND(cout, cin / (p.groups ? p.groups : 1), K));
    struct tensor *b = v == 1 ? NULL : in_f32(a, 124, ND(cout), -1, 1);
    return op_conv1d(a, x, w, b, &p);
}
/* reduced-precision products (arena_set_bf16: S3Gen's BF16 setting, and
 * T3's prefill for quantised models): cuda TF32, cpu BF16 on AMX (F32
 * without), ref F32; 0 linear f32 [70,256]x[300,256], 1 the same q4_0,
 * 2 conv1d K 7 dilation 3 over [2, 64, 300], 3 conv_transpose1d stride 5,
 * 4 linear_ex f32 [70,256]x[300,256] + GELU (erf) + residual (S3Gen's
 * feed-forward; on the cpu the GELU and the residual in the BF16 GEMM's
 * store); attention with head dim 64 (cpu: BF16 products where the CPU has
 * them, cuda: the tensor-core kernel): 5 S3Gen's 8 heads over 300 keys
 * (the last tiles cut), 6 GQA, causal, bias [Tq, Tk] with a -inf row,
 * 7 causal with Tq > Tk (rows that see no key) */
static struct tensor *c_reduced(struct arena *a, int v)
{
    arena_set_bf16(a, true);
    struct tensor *y;
    if (v >= 5) {
        const int64_t B = v == 5 ? 2 : 1, Hq = v == 5 ? 8 : 4, Hk = v == 6 ? 2 : Hq;
        const int64_t Tq = v == 5 ? 300 : v == 6 ? 130 : 70, Tk = v == 5 ? 300 : v == 6 ? 150 : 40, D = 64;
        struct tensor *q = in_f32(a, 170, ND(B, Hq, Tq, D), -1, 1);
        struct tensor *k = in_f32(a, 171, ND(B, Hk, Tk, D), -1, 1);
        struct tensor *vv = in_f32(a, 172, ND(B, Hk, Tk, D), -1, 1);
        struct tensor *bias = NULL;
        if (v == 6) {
            float *h = malloc((size_t)(Tq * Tk) * sizeof *h);
            if (!h) return NULL;
            fill_uniform(h, (size_t)(Tq * Tk), -2, 2, 173);
            for (int64_t j = 0; j < Tk; j++) h[Tk + j] = -INFINITY; /* query row 1 */
            bias = op_from_host(a, TYPE_F32, 2, NE(Tq, Tk), h);
            free(h);
        }
        struct attn_params p = {1.0f / sqrtf((float)D), v != 5, NULL, NULL};
        y = op_attention(a, q, k, vv, bias, &p);
    } else if (v < 2) {
        struct tensor *w = in_w(a, v ? TYPE_Q4_0 : TYPE_F32, 160, ND(300, 256));
        y = op_linear(a, in_f32(a, 161, ND(70, 256), -1, 1), w, in_f32(a, 162, ND(300), -1, 1));
    } else if (v == 4) {
        struct tensor *w = in_w(a, TYPE_F32, 160, ND(300, 256));
        y = op_linear_ex(a, in_f32(a, 161, ND(70, 256), -1, 1), w, in_f32(a, 162, ND(300), -1, 1), UN_GELU,
                         in_f32(a, 169, ND(70, 300), -1, 1));
    } else if (v == 2) {
        struct conv1d_params p = {1, 3, 1, 9, 9, PAD_ZERO};
        y = op_conv1d(a, in_f32(a, 163, ND(2, 64, 300), -1, 1), in_w(a, TYPE_F32, 164, ND(48, 64, 7)),
                      in_f32(a, 165, ND(48), -1, 1), &p);
    } else {
        struct conv_transpose1d_params p = {5, 3, 0, 1, 1};
        y = op_conv_transpose1d(a, in_f32(a, 166, ND(1, 64, 50), -1, 1), in_w(a, TYPE_F32, 167, ND(64, 32, 11)),
                                in_f32(a, 168, ND(32), -1, 1), &p);
    }
    arena_set_bf16(a, false);
    return y;
}
static struct tensor *c_conv_t1d(struct arena *a, int v)
{
    struct conv_transpose1d_params p = {3, 2, 1, 1, 1};
    int64_t cin = 6, coutg = 4, K = 7;
    if (v == 1) { p = (struct conv_transpose1d_params){2, 1, 0, 1, 2}; coutg = 2; K = 4; }
    if (v == 2) { p = (struct conv_transpose1d_params){8, 4, 0, 2, 1}; K = 16; }
    if (v == 3) { p = (struct conv_transpose1d_params){5, 0, 2, 1, 3}; coutg = 3; K = 3; }
    struct tensor *x = v == 3 ? op_transpose(a, in_f32(a, 133, ND(11, cin), -1, 1), 0, 1)
                              : in_f32(a, 130, ND(2, cin, 11), -1, 1);
    struct tensor *w = in_w(a, v == 1 ? TYPE_F16 : TYPE_F32, 131, ND(cin, coutg, K));
    struct tensor *b = v == 2 ? NULL : in_f32(a, 132, ND(coutg * p.groups), -1, 1);
    return op_conv_transpose1d(a, x, w, b, &p);
}
static struct tensor *c_pad1d(struct arena *a, int v)
{
    struct tensor *x = in_f32(a, 140, ND(2, 3, 10), -1, 1);
    return op_pad1d(a, v == 3 ? op_transpose(a, x, 0, 1) : x, 3, 2, (enum pad_mode)(v % 3), 0.5f);
}
static struct tensor *c_upsample(struct arena *a, int v)
{
    static const int f[] = {1, 2, 3, 5};
    return op_upsample_nearest(a, in_f32(a, 141, ND(2, 3, 7), -1, 1), f[v]);
}
/* lstm: 0 out, 1 h_n and c_n, 2 no biases or initial state, 3 F16 weights */
static struct tensor *c_lstm(struct arena *a, int v)
{
    int64_t B = 2, T = 6, In = 10, H = 8;
    enum dtype wt = v == 3 ? TYPE_F16 : TYPE_F32;
    struct tensor *x = in_f32(a, 150, ND(B, T, In), -1, 1);
    struct tensor *wih = in_w(a, wt, 151, ND(4 * H, In)), *whh = in_w(a, wt, 152, ND(4 * H, H));
    struct tensor *bih = in_f32(a, 153, ND(4 * H), -1, 1), *bhh = in_f32(a, 154, ND(4 * H), -1, 1);
    struct tensor *h0 = in_f32(a, 155, ND(B, H), -1, 1), *c0 = in_f32(a, 156, ND(B, H), -1, 1);
    struct tensor *hn = NULL, *cn = NULL;
    struct tensor *o = v == 2 ? op_lstm(a, x, wih, whh, NULL, NULL, NULL, NULL, &hn, &cn)
                              : op_lstm(a, x, wih, whh, bih, bhh, h0, c0, &hn, &cn);
    return v == 1 ? op_concat(a, hn, cn, 1) : o;
}
static struct tensor *c_conv2d(struct arena *a, int v)
{
    struct conv2d_params p = {2, 1, 1, 1, 1, 1, 1};
    int64_t cin = 4, cout = 6;
    if (v == 1) p = (struct conv2d_params){1, 2, 2, 1, 2, 2, 0};
    struct tensor *x = v == 2 ? in_f32(a, 160, ND(cin, 9, 11), -1, 1) : in_f32(a, 161, ND(2, cin, 9, 11), -1, 1);
    struct tensor *w = in_w(a, v == 2 ? TYPE_F16 : TYPE_F32, 162, ND(cout, cin / (p.groups ? p.groups : 1), 3, 3));
    return op_conv2d(a, x, w, in_f32(a, 163, ND(cout), -1, 1), &p);
}

/* spectral: stft 0 center reflect + hann 48 in 64, 1 no center, 2
 * normalized + no window, 3 [L] input, replicate; istft: 0 center, 1 no
 * center (rectangular window), 2 normalized with a length */
static struct tensor *hann(struct arena *a, int n)
{
    float h[64];
    window_hann(h, n, true);
    return op_from_host(a, TYPE_F32, 1, NE(n), h);
}
static struct tensor *c_stft(struct arena *a, int v)
{
    struct stft_params p = {64, 16, 48, v != 1, v == 3 ? PAD_REPLICATE : PAD_REFLECT, v == 2};
    struct tensor *x = v == 3 ? in_f32(a, 170, ND(300), -1, 1) : in_f32(a, 171, ND(2, 300), -1, 1);
    return op_stft(a, x, v == 2 ? NULL : hann(a, 48), &p);
}
static struct tensor *c_istft(struct arena *a, int v)
{
    struct stft_params p = {16, 4, 16, v != 1, PAD_REFLECT, v == 2};
    struct tensor *spec = in_f32(a, 172, ND(2, 9, 40, 2), -1, 1);
    /* without centring a hann window's zero first sample breaks NOLA */
    return op_istft(a, spec, v == 1 ? NULL : hann(a, 16), &p, v == 2 ? 150 : 0);
}

static const struct tcase cases[] = {
    {"cpy transpose", c_cpy, 0, 0, 0},
    {"cpy permute", c_cpy, 1, 0, 0},
    {"cast f32->f16", c_cast_from_f32, 0, 0, 0},
    {"cast f32->bf16", c_cast_from_f32, 1, 0, 0},
    {"cast f32->i32", c_cast_from_f32, 2, 0, 0},
    {"cast f32->q8_0", c_cast_from_f32, 3, 0, 0},
    {"cast f32->q4_0", c_cast_from_f32, 4, 0, 0},
    {"cast f16->f32", c_cast_to_f32, 0, 0, 0},
    {"cast bf16->f32", c_cast_to_f32, 1, 0, 0},
    {"cast q8_0->f32", c_cast_to_f32, 2, 0, 0},
    {"cast q4_0->f32", c_cast_to_f32, 3, 0, 0},
    {"cast q4_1->f32", c_cast_to_f32, 4, 0, 0},
    {"cast q5_0->f32", c_cast_to_f32, 5, 0, 0},
    {"cast q5_1->f32", c_cast_to_f32, 6, 0, 0},
    {"cast i32->f32", c_cast_i32, 0, 0, 0},
    {"cast f16->f32 every finite f16", c_cast_f16_edges, 0, 0, 0},
    {"cast f16->f32->f16 every f16 but nan", c_cast_f16_edges, 1, 0, 0},
    {"cast f32->f16 rounding boundaries", c_cast_f16_edges, 2, 0, 0},
    {"fill", c_fill, 0, 0, 0},
    {"randn [3,37]", c_randn, 0, 0, 0},
    {"randn [9,48000]", c_randn, 1, 2e-7, 0},
    {"concat dim 1", c_concat, 1, 0, 0},
    {"concat dim 2", c_concat, 2, 0, 0},
    {"binary add same shape", c_binary, 0, 0, 0},
    {"binary sub same shape", c_binary, 1, 0, 0},
    {"binary mul same shape", c_binary, 2, 0, 0},
    {"binary div same shape", c_binary, 3, 0, 0},
    {"binary add bcast [3,1,5]", c_binary, 4, 0, 0},
    {"binary sub bcast [3,1,5]", c_binary, 5, 0, 0},
    {"binary mul bcast [3,1,5]", c_binary, 6, 0, 0},
    {"binary div bcast [3,1,5]", c_binary, 7, 0, 0},
    {"binary add bcast [5]", c_binary, 8, 0, 0},
    {"binary div bcast [5]", c_binary, 11, 0, 0},
    {"binary mul strided x", c_binary, 14, 0, 0},
    {"binary sub strided x", c_binary, 13, 0, 0},
    {"binary add x bcast to y", c_binary_swap, 0, 0, 0},
    {"binary mul x bcast to y", c_binary_swap, 1, 0, 0},
    {"unary gelu", c_unary, UN_GELU, 1e-6, 1e-5},
    {"unary gelu_tanh", c_unary, UN_GELU_TANH, 1e-6, 1e-5},
    {"unary silu", c_unary, UN_SILU, 1e-6, 1e-5},
    {"unary mish", c_unary, UN_MISH, 1e-6, 1e-5},
    {"unary elu", c_unary, UN_ELU, 1e-6, 1e-5},
    {"unary leaky_relu", c_unary, UN_LEAKY_RELU, 0, 0},
    {"unary relu", c_unary, UN_RELU, 0, 0},
    {"unary tanh", c_unary, UN_TANH, 1e-6, 1e-5},
    {"unary sigmoid", c_unary, UN_SIGMOID, 1e-6, 1e-5},
    {"unary softplus", c_unary, UN_SOFTPLUS, 1e-6, 1e-5},
    {"unary exp", c_unary, UN_EXP, 1e-6, 1e-5},
    {"unary log", c_unary, UN_LOG, 1e-6, 1e-5},
    {"unary sin", c_unary, UN_SIN, 1e-6, 1e-5},
    {"unary cos", c_unary, UN_COS, 1e-6, 1e-5},
    {"unary abs", c_unary, UN_ABS, 0, 0},
    {"unary sqrt", c_unary, UN_SQRT, 1e-6, 1e-5},
    {"unary sqr", c_unary, UN_SQR, 0, 0},
    {"unary neg", c_unary, UN_NEG, 0, 0},
    {"unary scale", c_unary, UN_SCALE, 0, 0},
    {"unary clamp", c_unary, UN_CLAMP, 0, 0},
    {"snake", c_snake, 0, 1e-6, 1e-5},
    {"snake strided", c_snake, 1, 1e-6, 1e-5},
    {"reduce sum", c_reduce, RED_SUM, 1e-6, 0},
    {"reduce mean", c_reduce, RED_MEAN, 1e-6, 0},
    {"reduce max", c_reduce, RED_MAX, 0, 0},
    {"reduce sum strided", c_reduce, 3 + RED_SUM, 1e-6, 0},
    {"reduce max strided", c_reduce, 3 + RED_MAX, 0, 0},
    {"cumsum [3, 2000]", c_cumsum, 0, 1e-6, 0},
    {"cumsum strided", c_cumsum, 1, 1e-6, 0},
    {"get_rows f32 i32", c_get_rows, 0, 0, 0},
    {"get_rows f16 i32", c_get_rows, 1, 0, 0},
    {"get_rows bf16 i32", c_get_rows, 2, 0, 0},
    {"get_rows q8_0 i32", c_get_rows, 3, 0, 0},
    {"get_rows q4_0 i32", c_get_rows, 4, 0, 0},
    {"get_rows q4_1 i32", c_get_rows, 5, 0, 0},
    {"get_rows q5_0 i32", c_get_rows, 6, 0, 0},
    {"get_rows q5_1 i32", c_get_rows, 7, 0, 0},
    {"get_rows f32 i64 [2,5]", c_get_rows, 8, 0, 0},
    {"get_rows q8_0 i64 [2,5]", c_get_rows, 11, 0, 0},
#define LIN(tn, ti, tol, ctol)                                                             \
    {"linear " tn " [3,5,64] bias", c_linear, ti, tol, ctol},                              \
    {"linear " tn " one row", c_linear, 8 + ti, tol, ctol},                                \
    {"linear " tn " strided x", c_linear, 16 + ti, tol, ctol},                             \
    {"linear " tn " [70,256]x[300,256]", c_linear, 24 + ti, tol, ctol}
    LIN("f32", 0, 1e-5, 1e-5),
    LIN("f16", 1, 1e-5, 1e-5),
    LIN("bf16", 2, 1e-5, 1e-5),
    LIN("q8_0", 3, 1e-5, 3e-2),
    LIN("q4_0", 4, 1e-5, 3e-2),
    LIN("q4_1", 5, 1e-5, 3e-2),
    LIN("q5_0", 6, 1e-5, 3e-2),
    LIN("q5_1", 7, 1e-5, 3e-2),
    {"linear f32 K 63 two rows", c_linear, 32 + 0, 1e-5, 1e-5},
    {"linear f16 K 63 two rows", c_linear, 32 + 1, 1e-5, 1e-5},
    {"linear bf16 K 63 two rows", c_linear, 32 + 2, 1e-5, 1e-5},
    {"linear_ex f32 gelu_tanh + residual", c_linear_ex, 0, 1e-5, 1e-5},
    {"linear_ex q4_0 K 4096 + residual", c_linear_ex, 1, 1e-5, 3e-2},
    {"linear_ex f32 [70,256] silu + residual", c_linear_ex, 2, 1e-5, 1e-5},
    {"linear_ex q8_0 three rows gelu_tanh", c_linear_ex, 3, 1e-5, 3e-2},
    {"linear_ex q4_0 strided residual", c_linear_ex, 4, 1e-5, 3e-2},
    {"linear_ex q8_0 K 4096, 3000 outputs + residual", c_linear_ex, 5, 1e-5, 3e-2},
    {"linear_ex f32 K 1024, 5000 outputs, gelu_tanh + residual", c_linear_ex, 6, 1e-5, 1e-5},
    {"linear_ex f32 K 4096, 3000 outputs, two rows + residual", c_linear_ex, 7, 1e-5, 1e-5},
    {"linear_gated q4_0 K 4096, two rows + residual", c_linear_gated, 0, 1e-5, 3e-2},
    {"linear_gated q8_0 K 512, bias + residual", c_linear_gated, 1, 1e-5, 3e-2},
    {"linear_gated f32 K 256, two rows + residual", c_linear_gated, 2, 1e-5, 1e-5},
    {"linear_gated q4_0 K 1024, 6 rows + residual", c_linear_gated, 3, 1e-5, 3e-2},
    {"linear f32 K 4096 one row", c_linear, 40 + 0, 1e-5, 1e-5},
    {"linear q8_0 K 4096 one row", c_linear, 40 + 3, 1e-5, 3e-2},
    {"linear q4_0 K 4096 one row", c_linear, 40 + 4, 1e-5, 3e-2},
    {"linear f32 K 2048 three rows", c_linear, 48 + 0, 1e-5, 1e-5},
    {"linear q8_0 K 2048 three rows", c_linear, 48 + 3, 1e-5, 3e-2},
    {"linear q4_0 K 2048 three rows", c_linear, 48 + 4, 1e-5, 3e-2},
    {"linear f32 K 1024 four rows", c_linear, 56 + 0, 1e-5, 1e-5},
    {"linear q8_0 K 1024 four rows", c_linear, 56 + 3, 1e-5, 3e-2},
    {"linear q4_0 K 1024 four rows", c_linear, 56 + 4, 1e-5, 3e-2},
    {"linear_cat f32 q, k, v two rows", c_linear_cat, 0, 1e-5, 1e-5},
    {"linear_cat q4_0 gate silu + up", c_linear_cat, 1, 1e-5, 3e-2},
    {"linear_cat q8_0 three widths three rows", c_linear_cat, 2, 1e-5, 3e-2},
    {"linear_cat f32 nine rows", c_linear_cat, 3, 1e-5, 1e-5},
    {"linear_cat f32 layer norm, bias, gelu_tanh", c_linear_cat, 4, 1e-5, 1e-5},
    {"linear_cat q4_0 rms norm, gate silu + up, two rows", c_linear_cat, 5, 1e-5, 3e-2},
    {"linear_cat q8_0 plain layer norm, biases, three rows", c_linear_cat, 6, 1e-5, 3e-2},
    {"linear_cat f32 rms norm nine rows", c_linear_cat, 7, 1e-5, 1e-5},
    {"linear_cat f32 layer norm K 4096", c_linear_cat, 8, 1e-5, 1e-5},
    {"linear_cat q4_0 bf16 rms norm weight, two rows", c_linear_cat, 9, 1e-5, 3e-2},
    {"linear_cat q8_0 layer norm K 512, two rows", c_linear_cat, 10, 1e-5, 3e-2},
    {"linear_cat q4_0 K 768, gelu_tanh + plain", c_linear_cat, 11, 1e-5, 3e-2},
    {"linear_cat q4_0 layer norm, biases, 5000 + 1500 outputs", c_linear_cat, 12, 1e-5, 3e-2},
    {"matmul batched", c_matmul, 0, 1e-5, 0},
    {"matmul broadcast batch", c_matmul, 1, 1e-5, 0},
    {"matmul strided views", c_matmul, 2, 1e-5, 0},
    {"matmul [5,8]x[8,1]", c_matmul, 3, 1e-5, 0},
    {"matmul non-BLAS strides", c_matmul, 4, 1e-5, 0},
    {"layer_norm g,b", c_layer_norm, 0, 1e-6, 1e-5},
    {"layer_norm no affine", c_layer_norm, 1, 1e-6, 1e-5},
    {"layer_norm f16 g", c_layer_norm, 2, 1e-6, 1e-5},
    {"layer_norm strided", c_layer_norm, 3, 1e-6, 1e-5},
    {"add_layer_norm out", c_add_layer_norm, 0, 1e-6, 1e-5},
    {"add_layer_norm sum", c_add_layer_norm, 1, 0, 0},
    {"rms_norm f32 g", c_rms_norm, 0, 1e-6, 1e-5},
    {"rms_norm bf16 g", c_rms_norm, 1, 1e-6, 1e-5},
    {"rms_norm strided no g", c_rms_norm, 2, 1e-6, 1e-5},
    {"group_norm [2,8,30] g4", c_group_norm, 0, 1e-6, 1e-5},
    {"group_norm [8,30] g2", c_group_norm, 1, 1e-6, 1e-5},
    {"group_norm strided", c_group_norm, 2, 1e-6, 1e-5},
    {"channel_affine dim 1", c_channel_affine, 0, 1e-6, 1e-5},
    {"channel_affine dim -1 strided", c_channel_affine, 1, 1e-6, 1e-5},
    {"softmax", c_softmax, 0, 1e-6, 1e-5},
    {"softmax strided", c_softmax, 1, 1e-6, 1e-5},
    {"attention gqa", c_attention, 0, 1e-5, 1e-5},
    {"attention causal", c_attention, 1, 1e-5, 1e-5},
    {"attention bias [1,Hq,Tq,Tk]", c_attention, 2, 1e-5, 1e-5},
    {"attention bias [Tq,Tk] causal", c_attention, 3, 1e-5, 1e-5},
    {"attention decode Tq 1", c_attention, 4, 1e-5, 1e-5},
    {"attention f16 kv", c_attention, 5, 1e-5, 1e-5},
    {"attention q8_0 kv", c_attention, 6, 1e-5, 1e-5},
    {"attention causal Tq > Tk", c_attention, 7, 1e-5, 1e-5},
    {"attention permuted views", c_attention, 8, 1e-5, 1e-5},
    {"attention 9000 keys", c_attention, 9, 1e-5, 1e-5},
    {"attention -inf bias row", c_attention, 10, 1e-5, 1e-5},
    {"attention probs export", c_attention_probs, 0, 1e-5, 1e-5},
    {"attention kv_len decode 137 of 300", c_attention_len, 0, 1e-5, 1e-5},
    {"attention kv_len q8_0 700 of 1000", c_attention_len, 1, 1e-5, 1e-5},
    {"attention kv_len f16 1 of 40", c_attention_len, 2, 1e-5, 1e-5},
    {"attention kv_len 4 causal queries", c_attention_len, 3, 1e-5, 1e-5},
    {"attention kv_len q8_0 450 of 1000, D 64", c_attention_len, 4, 1e-5, 1e-5},
    {"attention group f32 caches", c_attention_group, 0, 1e-5, 1e-5},
    {"attention group q8_0 caches", c_attention_group, 1, 1e-5, 1e-5},
    {"attention group f16 caches", c_attention_group, 2, 1e-5, 1e-5},
    {"attention group 45 members, 67 rows", c_attention_group, 3, 1e-5, 1e-5},
    {"copy_2d 16 rows of 24 KiB", c_copy_2d, 0, 0, 0},
    {"copy_2d 300 rows of 96 bytes", c_copy_2d, 1, 0, 0},
    {"copy_into_at f32", c_copy_into_at, 0, 0, 0},
    {"copy_into_at q8_0 last", c_copy_into_at, 1, 0, 0},
    {"copy_into_at f16 3 positions", c_copy_into_at, 2, 0, 0},
    {"attention append f32 137 of 300", c_attention_append, 0, 1e-5, 1e-5},
    {"attention append q8_0 450 of 1000", c_attention_append, 1, 1e-5, 1e-5},
    {"attention append f16 0 of 40", c_attention_append, 2, 1e-5, 1e-5},
    {"attention append f32 last of 65, D 80", c_attention_append, 3, 1e-5, 1e-5},
    {"attention append q8_0 D 32", c_attention_append, 4, 1e-5, 1e-5},
    {"attention append rope llama3 q8_0 450 of 1000", c_attention_append, 5, 1e-5, 1e-5},
    {"attention append rope f32 137 of 300", c_attention_append, 6, 1e-5, 1e-5},
    {"attention append rope 32 of 64 dims f16", c_attention_append, 7, 1e-5, 1e-5},
    {"attention decode 1000 keys", c_attention, 11, 1e-5, 1e-5},
    {"attention decode f16 kv bias", c_attention, 12, 1e-5, 1e-5},
    {"attention decode q8_0 kv causal", c_attention, 13, 1e-5, 1e-5},
    {"attention decode masked chunks", c_attention, 14, 1e-5, 1e-5},
    {"attention tiles D 64 gqa", c_attention, 15, 1e-5, 1e-5},
    {"attention tiles causal bias [Tq,Tk]", c_attention, 16, 1e-5, 1e-5},
    {"attention tiles D 128 f16 kv causal", c_attention, 17, 1e-5, 1e-5},
    {"attention tiles q8_0 kv causal Tq > Tk", c_attention, 18, 1e-5, 1e-5},
    {"attention tiles permuted -inf row", c_attention, 19, 1e-5, 1e-5},
    {"attention tiles D 32 1000 keys", c_attention, 20, 1e-5, 1e-5},
    {"attention decode D 20 permuted views", c_attention, 21, 1e-5, 1e-5},
    {"rope", c_rope, 0, 1e-6, 1e-5},
    {"rope partial n_dims", c_rope, 1, 1e-6, 1e-5},
    {"rope llama3 scaling", c_rope, 2, 1e-6, 1e-5},
    {"rope strided", c_rope, 3, 1e-6, 1e-5},
    {"conv1d pad 2", c_conv1d, 0, 1e-5, 1e-5},
    {"conv1d stride 2 dilation 2 no bias", c_conv1d, 1, 1e-5, 1e-5},
    {"conv1d groups 2 reflect", c_conv1d, 2, 1e-5, 1e-5},
    {"conv1d depthwise replicate", c_conv1d, 3, 1e-5, 1e-5},
    {"conv1d causal dilation 3", c_conv1d, 4, 1e-5, 1e-5},
    {"conv1d k1", c_conv1d, 5, 1e-5, 1e-5},
    {"conv1d [Cin,T] f16 w", c_conv1d, 6, 1e-5, 1e-5},
    {"conv1d strided x bf16 w", c_conv1d, 7, 1e-5, 1e-5},
    {"linear f32 w, reduced-precision products", c_reduced, 0, 5e-3, 3e-2},
    {"linear q4_0 w, reduced-precision products", c_reduced, 1, 5e-3, 3e-2},
    {"conv1d dilation 3, reduced-precision products", c_reduced, 2, 5e-3, 3e-2},
    {"conv_transpose1d, reduced-precision products", c_reduced, 3, 5e-3, 3e-2},
    {"linear_ex f32 w + gelu + residual, reduced-precision products", c_reduced, 4, 5e-3, 3e-2},
    {"attention 8 heads x 64, reduced-precision products", c_reduced, 5, 1e-2, 1e-2},
    {"attention gqa causal -inf bias row, reduced-precision products", c_reduced, 6, 1e-2, 1e-2},
    {"attention causal Tq > Tk, reduced-precision products", c_reduced, 7, 1e-2, 1e-2},
    {"conv_transpose1d s3 p2 op1", c_conv_t1d, 0, 1e-5, 1e-5},
    {"conv_transpose1d groups 2 f16", c_conv_t1d, 1, 1e-5, 1e-5},
    {"conv_transpose1d s8 k16 dil 2", c_conv_t1d, 2, 1e-5, 1e-5},
    {"conv_transpose1d [Cin,T] view s5 k3 g3", c_conv_t1d, 3, 1e-5, 1e-5},
    {"pad1d zero", c_pad1d, PAD_ZERO, 0, 0},
    {"pad1d reflect", c_pad1d, PAD_REFLECT, 0, 0},
    {"pad1d replicate", c_pad1d, PAD_REPLICATE, 0, 0},
    {"pad1d strided", c_pad1d, 3, 0, 0},
    {"upsample x1", c_upsample, 0, 0, 0},
    {"upsample x2", c_upsample, 1, 0, 0},
    {"upsample x3", c_upsample, 2, 0, 0},
    {"upsample x5", c_upsample, 3, 0, 0},
    {"lstm out", c_lstm, 0, 1e-5, 1e-5},
    {"lstm h_n c_n", c_lstm, 1, 1e-5, 1e-5},
    {"lstm no bias no state", c_lstm, 2, 1e-5, 1e-5},
    {"lstm f16 weights", c_lstm, 3, 1e-5, 1e-5},
    {"conv2d stride pad", c_conv2d, 0, 1e-5, 1e-5},
    {"conv2d groups dilation", c_conv2d, 1, 1e-5, 1e-5},
    {"conv2d [C,H,W] f16 w", c_conv2d, 2, 1e-5, 1e-5},
    {"stft center reflect hann", c_stft, 0, 2e-6, 2e-6},
    {"stft no center", c_stft, 1, 2e-6, 2e-6},
    {"stft normalized no window", c_stft, 2, 2e-6, 2e-6},
    {"stft [L] replicate", c_stft, 3, 2e-6, 2e-6},
    {"istft center", c_istft, 0, 2e-6, 2e-6},
    {"istft no center", c_istft, 1, 2e-6, 2e-6},
    {"istft normalized length 150", c_istft, 2, 2e-6, 2e-6},
};

/* ---- runner ----------------------------------------------------------------- */

struct result {
    void *data;
    size_t nbytes;
    enum dtype type;
    int64_t n;
};

/* run case c in arena a; the result downloaded (NULL data on failure) */
static struct result run(struct arena *a, const struct tcase *c)
{
    struct result r = {NULL, 0, TYPE_F32, 0};
    arena_reset(a);
    struct tensor *t = c->fn(a, c->v);
    if (t) t = op_cont(a, t);
    if (!t || arena_status(a) != CBX_OK) return r;
    r.type = t->type;
    r.n = tensor_nelements(t);
    r.nbytes = tensor_nbytes(t);
    r.data = malloc(r.nbytes ? r.nbytes : 1);
    if (r.data && tensor_to_host(t, r.data) != CBX_OK) {
        free(r.data);
        r.data = NULL;
    }
    return r;
}

/* cuda's decode products (up to 4 rows) against Q8_0 / Q4_0 weights
 * quantise x to Q8_0 as the cpu's do, bit for bit; its other products are
 * exact. So a case with a cpu tolerance of its own passes on cuda when it
 * is within tol of ref (exact) or within QX_TOL of the cpu backend's
 * result (the same integer sums, summed in another order). */
#define QX_TOL 1e-5

/* Every case on backend be against ref (arena ar); acpu (NULL for the cpu
 * backend itself): an arena on the cpu backend, for the cases above. */
static void run_backend_ops(const struct backend *be, struct arena *ar, struct arena *acpu, const char *only)
{
    struct arena *ab = arena_create(be, 0);
    CHECK(ab != NULL, "%s arena", be->name);
    if (!ab) return;
    printf("\n== backend %s vs ref ==\n", be->name);
    const bool is_cpu = strcmp(be->name, "cpu") == 0;
    double worst_rel = 0;
    int ncases = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct tcase *c = &cases[i];
        if (only && !strstr(c->name, only)) continue;
        ncases++;
        char what[160];
        snprintf(what, sizeof what, "%s: %s", be->name, c->name);
        probs_slot = 0;
        struct result want = run(ar, c);
        probs_slot = 1;
        struct result got = run(ab, c);
        if (!want.data || !got.data) {
            CHECK(0, "%s: ran (ref: %s; %s: %s)", what, want.data ? "ok" : arena_errmsg(ar),
                  be->name, got.data ? "ok" : arena_errmsg(ab));
        } else if (want.type != got.type || want.nbytes != got.nbytes) {
            CHECK(0, "%s: result %s of %zu bytes, ref %s of %zu", what, dtype_name(got.type),
                  got.nbytes, dtype_name(want.type), want.nbytes);
        } else if (want.type == TYPE_F32) {
            double tol = is_cpu && c->cpu_tol > 0 ? c->cpu_tol : c->tol;
            double ma, rel = rel_error(got.data, want.data, (size_t)want.n, &ma);
            const bool lin =
                c->fn == c_linear || c->fn == c_linear_ex || c->fn == c_linear_cat || c->fn == c_linear_gated;
            if (acpu && lin && c->cpu_tol > 0 && c->cpu_tol != c->tol) {
                struct result q = run(acpu, c);
                double qa, qrel = q.data && q.n == want.n ? rel_error(got.data, q.data, (size_t)q.n, &qa) : 1e300;
                const bool ok = rel <= c->tol || qrel <= QX_TOL;
                printf("%-48s n=%-9zu rel=%.3e vs ref (tol %.1e), %.3e vs cpu (tol %.1e): %s %s\n", what,
                       (size_t)want.n, rel, c->tol, qrel, QX_TOL,
                       rel <= c->tol ? "exact" : "the cpu's Q8_0 product", ok ? "PASS" : "FAIL");
                CHECK(ok, "%s: rel %.3e vs ref, %.3e vs cpu", what, rel, qrel);
                if (rel <= c->tol && rel > worst_rel) worst_rel = rel;
                free(q.data);
            } else {
                check_close(what, got.data, want.data, (size_t)want.n, 0, tol);
                if (rel > worst_rel) worst_rel = rel;
            }
        } else {
            size_t diff = 0;
            for (size_t b = 0; b < want.nbytes; b++)
                diff += ((const unsigned char *)got.data)[b] != ((const unsigned char *)want.data)[b];
            printf("%-48s %s, %zu bytes, %zu differ %s\n", what, dtype_name(want.type),
                   want.nbytes, diff, diff ? "FAIL" : "PASS");
            CHECK(diff == 0, "%s: %zu of %zu bytes differ", what, diff, want.nbytes);
        }
        if (c->fn == c_attention_probs && want.data && got.data) {
            char pw[160];
            snprintf(pw, sizeof pw, "%s: attention probabilities export", be->name);
            float a0[3 * 30], a1[3 * 30];
            for (int r = 0; r < 3; r++)
                for (int j = 0; j < 30; j++) {
                    a0[r * 30 + j] = probs_buf[0][r * 40 + j];
                    a1[r * 30 + j] = probs_buf[1][r * 40 + j];
                }
            check_close(pw, a1, a0, 3 * 30, 0, 1e-5);
        }
        free(want.data);
        free(got.data);
    }
    printf("== %s: %d cases, worst rel error of the f32 results %.3e ==\n", be->name, ncases,
           worst_rel);
    arena_free(ab);
}

/* Weights placed on backend be (core/weights.h: the backend's
 * prepare_weight hook: cpu repacks decode linears, cuda uploads) give the
 * linear products of the same weights unplaced on ref, for one row
 * (decode) and 8 rows, per weight type; the set's release path runs too. */
static void placed_weights(const struct backend *be, struct arena *ar, struct arena *acpu)
{
    static const enum dtype types[] = {TYPE_F32, TYPE_F16, TYPE_Q8_0, TYPE_Q4_0};
    const bool is_cpu = strcmp(be->name, "cpu") == 0;
    struct arena *ab = arena_create(be, 0);
    CHECK(ab != NULL, "%s arena", be->name);
    if (!ab) return;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const int64_t wne[2] = {96, 256};
        arena_reset(ar);
        struct tensor *wh = in_w(ar, types[ti], 7 + ti, 2, wne); /* host (ref) */
        /* the placed source is a copy of its own: a decode weight's source
         * pages may be dropped once placed (weights.h: a file mapping) */
        struct arena *src = arena_create(backend_ref(), 0);
        struct tensor *ws = src ? in_w(src, types[ti], 7 + ti, 2, wne) : NULL;
        struct weight_set *set = weight_set_create(be);
        cbx_status rc = CBX_OK;
        char err[ERR_MAX] = "";
        const struct tensor *wp = ws && set ? weight_place(set, ws, WEIGHT_LINEAR, WEIGHT_AS_STORED,
                                                           WEIGHT_DECODE, &rc, err) : NULL;
        CHECK(wp != NULL, "%s: place a %s linear weight: %s", be->name, dtype_name(types[ti]), err);
        for (int rows = 1; wp && rows <= 8; rows += 7) {
            const int64_t xne[2] = {rows, 256};
            arena_reset(ab);
            struct tensor *yw = op_linear(ar, in_f32(ar, 3, 2, xne, -1, 1), wh, NULL);
            struct tensor *yp = op_linear(ab, in_f32(ab, 3, 2, xne, -1, 1), wp, NULL);
            float want[8 * 96], got[8 * 96];
            const bool ok = yw && yp && tensor_to_host(yw, want) == CBX_OK && tensor_to_host(yp, got) == CBX_OK;
            char what[160];
            snprintf(what, sizeof what, "%s: placed %s weight, %d row%s", be->name, dtype_name(types[ti]), rows,
                     rows > 1 ? "s" : "");
            CHECK(ok, "%s: ran (%s)", what, ok ? "" : arena_errmsg(yp ? ar : ab));
            /* the cpu quantises x to Q8 against block weights; cuda's
             * decode products as the cpu's (QX_TOL) */
            const bool blocks = types[ti] != TYPE_F32 && types[ti] != TYPE_F16;
            const double tol = is_cpu && blocks ? 3e-2 : 1e-5;
            if (ok && acpu && blocks && rows <= 4) {
                arena_reset(acpu);
                struct tensor *yc = op_linear(acpu, in_f32(acpu, 3, 2, xne, -1, 1), wh, NULL);
                float cpu[8 * 96];
                const bool okc = yc && tensor_to_host(yc, cpu) == CBX_OK;
                CHECK(okc, "%s: ran on cpu", what);
                if (okc) check_close(what, got, cpu, (size_t)(rows * 96), 0, QX_TOL);
            } else if (ok) {
                check_close(what, got, want, (size_t)(rows * 96), 0, tol);
            }
        }
        weight_set_free(set);
        arena_free(src);
    }
    arena_free(ab);
}

int main(int argc, char **argv)
{
    bool require_cuda = false;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--require-cuda")) require_cuda = true;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--require-cuda] [--only NAME]\n", argv[0]);
            return 2;
        }
    }
    struct arena *ar = arena_create(backend_ref(), 0);
    CHECK(ar != NULL, "ref arena");
    if (!ar) return test_summary();
    if (!require_cuda) {
        struct backend *cpu = backend_cpu_create(2);
        CHECK(cpu != NULL, "cpu backend");
        if (cpu) run_backend_ops(cpu, ar, NULL, only);
        if (cpu && !only) placed_weights(cpu, ar, NULL);
        backend_cpu_free(cpu);
    }
#ifdef CBX_HAVE_CUDA
    {
        char err[ERR_MAX] = "";
        int n = backend_cuda_device_count();
        struct backend *cu = n > 0 ? backend_cuda_create(0, err) : NULL;
        if (!cu) {
            printf("\ncuda: built with CBX_CUDA, but %s: the cuda backend is NOT tested%s\n",
                   n > 0 ? err : "no GPU was found", require_cuda ? " (required: FAIL)" : "");
            CHECK(!require_cuda, "--require-cuda: a usable CUDA device (%s)",
                  n > 0 ? err : "none found");
        } else {
            struct backend *cpu = backend_cpu_create(2);
            struct arena *acpu = cpu ? arena_create(cpu, 0) : NULL;
            CHECK(acpu != NULL, "cpu arena beside cuda");
            run_backend_ops(cu, ar, acpu, only);
            if (!only) placed_weights(cu, ar, acpu);
            arena_free(acpu);
            backend_cpu_free(cpu);
            backend_cuda_free(cu);
        }
    }
#else
    printf("\ncuda: not built (configure with -DCBX_CUDA=ON)\n");
    CHECK(!require_cuda, "--require-cuda in a build without CBX_CUDA");
#endif
    arena_free(ar);
    return test_summary();
}
