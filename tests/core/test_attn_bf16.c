/* test_attn_bf16.c - the BF16 attention path (src/core/cpu/attn_bf16.c),
 * taken by the cpu attention kernel when the arena's BF16 hint is set, on
 * each engine this machine has: AMX-BF16 tiles, then VDPBF16PS with AMX
 * forbidden (cpu_set_amx).
 *
 * Each case runs op_attention on the cpu backend with the hint and checks:
 *  1. against the ref backend (F32 operands, double sums): the BF16 path
 *     rounds q * scale, k, v and the softmax numerators p to BF16 (8
 *     significant bits, unit roundoff u = 2^-9 ~ 2e-3). Each term q_d k_d
 *     of a score is then off by ~2u relative, the score (a sum of D terms
 *     of random sign) by ~2u sqrt(D) |q_d k_d| ~ 1e-3 here, so each weight
 *     p_j is off by ~1e-3 + u relative and each v_j by u; the output, a
 *     convex combination of the v_j (|v| <= 1), is off by a few u at worst
 *     (measured: up to 3.6e-3 abs). Tolerance: abs <= 1e-2 or rel <= 1e-2.
 *  2. against a reference computed here in double whose inputs are the
 *     same BF16 roundings (q * scale, k, v, and p = exp(s - m) rounded to
 *     BF16 in the P.V product, l = sum of the unrounded p): what is left is
 *     F32 accumulation order in the products (~1e-7 relative), the
 *     exp polynomial (~1e-7) and the rare BF16 rounding flips of p they
 *     cause: one flip of p_j moves o by 2^-8 p_j / l |v_j|, up to ~1e-4 at
 *     these weights (|v| <= 1). Tolerance: abs <= 3e-4 or rel <= 1e-3,
 *     ~10x below check 1's measured errors.
 *  3. the same call without the hint takes the F32 kernel: rel <= 1e-5
 *     against ref.
 * Shapes: T not multiples of 16 or 32, D 64 and 32, B 1 and 2, several
 * heads, GQA, causal (square and a chunk on a longer cache), masked keys
 * (per-batch -inf key padding), a full [1, H, T, T] score bias (the S3Gen
 * encoder), rows masked entirely (zeros), q/k/v as permuted views of
 * [B, T, H, D] (the estimator's layout). An engine the machine lacks is
 * named as not checked; with neither the test says so and passes without
 * checking. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/cpu_features.h"
#include "core/ops.h"
#include "testutil.h"

static struct arena *ac, *ar; /* cpu (BF16 hint set per check) and ref arenas */
static uint64_t seed = 7;

struct acase {
    int64_t B, Hq, Hk, Tq, Tk, D;
    bool causal;
    int bias; /* 0 none; 1 [B, 1, Tq, Tk] key padding (-inf past a per-batch length);
               * 2 [1, Hq, Tq, Tk] random scores; 3 [Tq, Tk] with some all -inf rows */
    bool permuted; /* q, k, v as views of [B, T, H, D] */
};

static float bf16r(float x) /* round to nearest even BF16 (finite x) */
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7FFF + ((u >> 16) & 1);
    u &= 0xFFFF0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* logical [B, H, T, D] host data -> tensor in a (permuted view when asked) */
static struct tensor *mk(struct arena *a, const float *h, int64_t B, int64_t H, int64_t T,
                         int64_t D, bool permuted)
{
    const int64_t ne[4] = {B, H, T, D};
    if (!permuted) return op_from_host(a, TYPE_F32, 4, ne, h);
    float *s = malloc((size_t)(B * H * T * D) * sizeof *s);
    if (!s) return NULL;
    for (int64_t b = 0; b < B; b++)
        for (int64_t hh = 0; hh < H; hh++)
            for (int64_t t = 0; t < T; t++)
                memcpy(s + ((b * T + t) * H + hh) * D, h + ((b * H + hh) * T + t) * D,
                       (size_t)D * sizeof *s);
    const int64_t sne[4] = {B, T, H, D};
    static const int perm[4] = {0, 2, 1, 3};
    struct tensor *r = op_permute(a, op_from_host(a, TYPE_F32, 4, sne, s), perm);
    free(s);
    return r;
}

/* the bias of a case as a logical [B, Hq, Tq, Tk] array (NULL when none)
 * and its tensor shape */
static float *mk_bias(const struct acase *c, int *ndim, int64_t ne[4])
{
    int64_t B = c->B, H = c->Hq, Tq = c->Tq, Tk = c->Tk;
    float *full = malloc((size_t)(B * H * Tq * Tk) * sizeof *full);
    float *r = malloc((size_t)(B * H * Tq * Tk) * sizeof *r);
    if (!full || !r) {
        free(full);
        free(r);
        return NULL;
    }
    fill_uniform(r, (size_t)(B * H * Tq * Tk), -2, 2, seed++);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Tq; i++)
                for (int64_t j = 0; j < Tk; j++) {
                    float v = 0;
                    if (c->bias == 1) v = j < Tk - 7 - 13 * b ? 0.0f : -INFINITY;
                    if (c->bias == 2) v = r[((0 * H + h) * Tq + i) * Tk + j];
                    if (c->bias == 3) v = i % 9 == 4 ? -INFINITY : r[i * Tk + j];
                    full[((b * H + h) * Tq + i) * Tk + j] = v;
                }
    if (c->bias == 1) {
        *ndim = 4;
        ne[0] = B, ne[1] = 1, ne[2] = Tq, ne[3] = Tk;
    } else if (c->bias == 2) {
        *ndim = 4;
        ne[0] = 1, ne[1] = H, ne[2] = Tq, ne[3] = Tk;
    } else {
        *ndim = 2;
        ne[0] = Tq, ne[1] = Tk;
    }
    free(r);
    return full;
}

/* the bias tensor's own data (its shape, from the logical array) */
static struct tensor *bias_tensor(struct arena *a, const struct acase *c, const float *full,
                                  int ndim, const int64_t *ne)
{
    int64_t H = c->Hq, Tq = c->Tq, Tk = c->Tk, n = 1;
    for (int d = 0; d < ndim; d++) n *= ne[d];
    float *h = malloc((size_t)n * sizeof *h);
    if (!h) return NULL;
    for (int64_t e = 0; e < n; e++) {
        int64_t b = 0, hh = 0, i = 0, j;
        if (c->bias == 1) b = e / (Tq * Tk), i = e / Tk % Tq, j = e % Tk;
        else if (c->bias == 2) hh = e / (Tq * Tk), i = e / Tk % Tq, j = e % Tk;
        else i = e / Tk, j = e % Tk;
        h[e] = full[((b * H + hh) * Tq + i) * Tk + j];
    }
    struct tensor *t = op_from_host(a, TYPE_F32, ndim, ne, h);
    free(h);
    return t;
}

/* check 2's reference (see the header) */
static void ref_bf16(const struct acase *c, const float *q, const float *k, const float *v,
                     const float *bias, float scale, float *y)
{
    int64_t B = c->B, Hq = c->Hq, Hk = c->Hk, Tq = c->Tq, Tk = c->Tk, D = c->D;
    double *s = malloc((size_t)Tk * sizeof *s), *o = malloc((size_t)D * sizeof *o);
    if (!s || !o) {
        free(s);
        free(o);
        return;
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            int64_t hk = h / (Hq / Hk);
            for (int64_t i = 0; i < Tq; i++) {
                const float *qr = q + ((b * Hq + h) * Tq + i) * D;
                int64_t last = c->causal ? Tk - Tq + i : Tk - 1;
                double m = -INFINITY;
                for (int64_t j = 0; j < Tk; j++) {
                    s[j] = -INFINITY;
                    if (j > last) continue;
                    const float *kr = k + ((b * Hk + hk) * Tk + j) * D;
                    double dot = 0;
                    for (int64_t d = 0; d < D; d++) dot += (double)bf16r(qr[d] * scale) * bf16r(kr[d]);
                    s[j] = dot;
                    if (bias) s[j] += bias[((b * Hq + h) * Tq + i) * Tk + j];
                    if (s[j] > m) m = s[j];
                }
                float *yr = y + ((b * Hq + h) * Tq + i) * D;
                for (int64_t d = 0; d < D; d++) o[d] = 0;
                double l = 0;
                if (m > -INFINITY)
                    for (int64_t j = 0; j < Tk; j++) {
                        float p = (float)exp(s[j] - m);
                        l += p;
                        double pr = bf16r(p);
                        const float *vr = v + ((b * Hk + hk) * Tk + j) * D;
                        for (int64_t d = 0; d < D; d++) o[d] += pr * bf16r(vr[d]);
                    }
                for (int64_t d = 0; d < D; d++) yr[d] = l > 0 ? (float)(o[d] / l) : 0.0f;
            }
        }
    free(s);
    free(o);
}


static void run_case(const struct acase *c)
{
    int64_t nq = c->B * c->Hq * c->Tq * c->D, nkv = c->B * c->Hk * c->Tk * c->D;
    float *q = malloc((size_t)nq * sizeof *q), *k = malloc((size_t)nkv * sizeof *k);
    float *v = malloc((size_t)nkv * sizeof *v), *want2 = malloc((size_t)nq * sizeof *want2);
    int bnd = 0;
    int64_t bne[4] = {0};
    float *bias = c->bias ? mk_bias(c, &bnd, bne) : NULL;
    if (!q || !k || !v || !want2 || (c->bias && !bias)) {
        CHECK(0, "host allocation");
        goto out;
    }
    /* projections of roughly the model's magnitude: |s| up to ~3 */
    fill_uniform(q, (size_t)nq, -1.5f, 1.5f, seed++);
    fill_uniform(k, (size_t)nkv, -1.5f, 1.5f, seed++);
    fill_uniform(v, (size_t)nkv, -1, 1, seed++);
    struct attn_params p = {.scale = 1.0f / sqrtf((float)c->D), .causal = c->causal};
    char what[160];
    snprintf(what, sizeof what, "B%lld Hq%lld Hk%lld Tq%lld Tk%lld D%lld%s%s%s",
             (long long)c->B, (long long)c->Hq, (long long)c->Hk, (long long)c->Tq,
             (long long)c->Tk, (long long)c->D, c->causal ? " causal" : "",
             c->bias == 1 ? " key-mask" : c->bias == 2 ? " score-bias" : c->bias == 3 ? " masked-rows" : "",
             c->permuted ? " permuted" : "");

    struct arena *as[2] = {ar, ac};
    float *got[3] = {NULL, NULL, NULL}; /* ref, cpu bf16, cpu f32 */
    for (int r = 0; r < 3; r++) {
        struct arena *a = as[r > 0];
        arena_set_bf16(ac, r == 1);
        struct tensor *tq = mk(a, q, c->B, c->Hq, c->Tq, c->D, c->permuted);
        struct tensor *tk = mk(a, k, c->B, c->Hk, c->Tk, c->D, c->permuted);
        struct tensor *tv = mk(a, v, c->B, c->Hk, c->Tk, c->D, c->permuted);
        struct tensor *tb = bias ? bias_tensor(a, c, bias, bnd, bne) : NULL;
        got[r] = test_host_copy(a, op_attention(a, tq, tk, tv, tb, &p));
        arena_reset(a);
    }
    arena_set_bf16(ac, false);
    if (!got[0] || !got[1] || !got[2]) {
        CHECK(0, "%s: attention failed", what);
    } else {
        char w[200];
        snprintf(w, sizeof w, "bf16 vs ref f32     %s", what);
        check_close(w, got[1], got[0], (size_t)nq, 1e-2, 1e-2);
        ref_bf16(c, q, k, v, bias, p.scale, want2);
        snprintf(w, sizeof w, "bf16 vs bf16-input  %s", what);
        check_close(w, got[1], want2, (size_t)nq, 3e-4, 1e-3);
        snprintf(w, sizeof w, "no hint (f32) vs ref    %s", what);
        check_close(w, got[2], got[0], (size_t)nq, 0, 1e-5);
        if (c->bias == 3) { /* rows that see nothing are zeros */
            double z = 0;
            for (int64_t b = 0; b < c->B; b++)
                for (int64_t h = 0; h < c->Hq; h++)
                    for (int64_t d = 0; d < c->D; d++)
                        z = fmax(z, fabs(got[1][((b * c->Hq + h) * c->Tq + 4) * c->D + d]));
            CHECK(z == 0, "%s: masked row 4 gives zeros (max |y| %g)", what, z);
        }
    }
    for (int r = 0; r < 3; r++) free(got[r]);
out:
    free(q);
    free(k);
    free(v);
    free(want2);
    free(bias);
}

int main(void)
{
    if (!test_bf16_usable("attention")) return 0;
    struct backend *cpu = backend_cpu_create(2);
    ac = cpu ? arena_create(cpu, 16 << 20) : NULL;
    ar = arena_create(backend_ref(), 16 << 20);
    if (!ac || !ar) {
        CHECK(0, "backend/arena creation");
        return test_summary();
    }
    static const struct acase cases[] = {
        {1, 8, 8, 515, 515, 64, false, 0, true},   /* the estimator, shorter */
        {2, 8, 8, 131, 131, 64, false, 1, true},   /* CFG pair, per-batch key padding */
        {1, 8, 8, 301, 301, 64, false, 2, false},  /* encoder: full score bias */
        {2, 4, 2, 37, 37, 64, false, 3, false},    /* GQA, rows masked entirely */
        {1, 3, 3, 70, 70, 64, true, 0, true},      /* causal prefill */
        {1, 2, 2, 45, 200, 64, true, 0, false},    /* causal chunk on a longer cache */
        {2, 2, 2, 50, 33, 64, true, 0, false},     /* causal Tq > Tk: early rows see nothing */
        {1, 4, 4, 97, 113, 32, false, 1, false},   /* D 32 */
        {1, 2, 2, 16, 1, 64, false, 0, false},     /* one key */
    };
    for (int e = 0; e < 2; e++) /* AMX tiles, then VDPBF16PS */
        if (test_bf16_engine(e))
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    cpu_set_amx(true);
    arena_free(ac);
    arena_free(ar);
    backend_cpu_free(cpu);
    return test_summary();
}
