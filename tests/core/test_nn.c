/* test_nn.c - the nn op group (ops_nn.c, cpu/nn.c, ref/nn.c): norms,
 * channel affine, softmax, fused attention, rotary embedding.
 *
 * 1. ref kernels on hand-computed cases (softmax of [0, ln 3], layer norm
 *    of [1, 2, 3], ...), run through the cpu backend as well;
 * 2. cpu (SIMD level in use, then forced portable) against ref on random
 *    inputs with odd sizes and strided views (attention: both AVX-512
 *    drivers, rows for Tq <= 4 and tiles above, each across block tails);
 * 3. ref attention against a composition computed here: scores by naive
 *    loops, op_softmax (checked in 1), P @ V by naive loops;
 * 4. rope against a double-precision hand formula, with and without
 *    Llama-3 frequency scaling;
 * 5. operand errors: NULL result and a message in the arena. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/cpu_features.h"
#include "core/ops.h"
#include "testutil.h"

static struct arena *ac, *ar; /* cpu and ref arenas */
static uint64_t seed = 1;

static float *rnd(size_t n, float lo, float hi)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (p) fill_uniform(p, n, lo, hi, seed++);
    return p;
}

static struct tensor *up(struct arena *a, int ndim, const int64_t *ne, const float *host)
{
    return op_from_host(a, TYPE_F32, ndim, ne, host);
}


static int64_t nel(int ndim, const int64_t *ne)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= ne[d];
    return n;
}

/* got vs want, both possibly NULL (a NULL counts as a failure) */
static void cmp(const char *what, const float *got, const float *want, int64_t n,
                double atol, double rtol)
{
    if (!got || !want) {
        CHECK(0, "%s: no result", what);
        return;
    }
    check_close(what, got, want, (size_t)n, atol, rtol);
}

/* ---- 1. hand-computed cases ---------------------------------------------- */

static void hand_cases(struct arena *a, const char *be)
{
    char what[96];
    {
        const int64_t ne[1] = {2};
        const float x[2] = {0, logf(3)}, want[2] = {0.25f, 0.75f};
        float *y = test_host_copy(a, op_softmax(a, up(a, 1, ne, x), 1.0f));
        snprintf(what, sizeof what, "%s softmax [0, ln 3]", be);
        cmp(what, y, want, 2, 1e-7, 0);
        free(y);
        /* scale applies before the max: softmax(-2 * [0, ln 3]) */
        const float want2[2] = {0.9f, 0.1f};
        y = test_host_copy(a, op_softmax(a, up(a, 1, ne, x), -2.0f));
        snprintf(what, sizeof what, "%s softmax -2*[0, ln 3]", be);
        cmp(what, y, want2, 2, 1e-7, 0);
        free(y);
    }
    {
        const int64_t ne[2] = {2, 3};
        const float x[6] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, 0, -INFINITY};
        float *y = test_host_copy(a, op_softmax(a, up(a, 2, ne, x), 1.0f));
        CHECK(y && isnan(y[0]) && isnan(y[1]) && isnan(y[2]), "%s softmax all -inf row is NaN", be);
        CHECK(y && y[3] == 0 && y[4] == 1 && y[5] == 0, "%s softmax one finite entry", be);
        free(y);
        /* a NaN anywhere in a row (rows of 11: in the SIMD tail, in the
         * SIMD body) makes the row NaN; a row of zeros is uniform */
        const int64_t n11[2] = {3, 11};
        float z[33] = {0};
        z[9] = NAN;
        z[11 + 3] = NAN;
        y = test_host_copy(a, op_softmax(a, up(a, 2, n11, z), 1.0f));
        int nans = 0;
        for (int i = 0; y && i < 22; i++) nans += isnan(y[i]) != 0;
        CHECK(nans == 22 && y && fabsf(y[22] - 1.0f / 11) < 1e-7f, "%s softmax NaN row is NaN", be);
        free(y);
    }
    {
        const int64_t ne[1] = {3}, n1[1] = {3};
        const float x[3] = {1, 2, 3}, g[3] = {1, 2, 3}, b[3] = {0.5f, 0, -1};
        /* mean 2, biased var 2/3: (x - 2) / sqrt(2/3 + eps) */
        double r = 1 / sqrt(2.0 / 3 + 1e-5);
        const float want[3] = {(float)(-r * 1 + 0.5), 0, (float)(r * 3 - 1)};
        float *y = test_host_copy(a, op_layer_norm(a, up(a, 1, ne, x), up(a, 1, n1, g), up(a, 1, n1, b), 1e-5f));
        snprintf(what, sizeof what, "%s layer_norm [1, 2, 3]", be);
        cmp(what, y, want, 3, 1e-6, 0);
        free(y);
        /* rms: [3, 4] / sqrt(12.5 + eps) * g */
        const int64_t n2[1] = {2};
        const float x2[2] = {3, 4}, g2[2] = {1, -2};
        double q = 1 / sqrt(12.5 + 1e-6);
        const float want2[2] = {(float)(3 * q), (float)(-8 * q)};
        y = test_host_copy(a, op_rms_norm(a, up(a, 1, n2, x2), up(a, 1, n2, g2), 1e-6f));
        snprintf(what, sizeof what, "%s rms_norm [3, 4]", be);
        cmp(what, y, want2, 2, 1e-6, 0);
        free(y);
    }
    {
        /* group norm [C=4, T=2], 2 groups: {1,3,5,7} and {0,0,0,4} */
        const int64_t ne[2] = {4, 2}, nc[1] = {4};
        const float x[8] = {1, 3, 5, 7, 0, 0, 0, 4}, g[4] = {1, 1, 2, 2}, b[4] = {0, 0, 1, 1};
        double r0 = 1 / sqrt(5.0), r1 = 1 / sqrt(3.0); /* var 5 and 3 */
        const float want[8] = {(float)(-3 * r0), (float)(-r0), (float)(r0), (float)(3 * r0),
                               (float)(2 * -r1 + 1), (float)(2 * -r1 + 1), (float)(2 * -r1 + 1),
                               (float)(2 * 3 * r1 + 1)};
        float *y = test_host_copy(a, op_group_norm(a, up(a, 2, ne, x), 2, up(a, 1, nc, g), up(a, 1, nc, b), 0));
        snprintf(what, sizeof what, "%s group_norm [4, 2] / 2", be);
        cmp(what, y, want, 8, 1e-6, 0);
        free(y);
        /* channel affine over dim 0 of the same x */
        const float s[4] = {2, -1, 0, 0.5f}, t[4] = {1, 0, 3, -1};
        const float want2[8] = {3, 7, -5, -7, 3, 3, -1, 1};
        y = test_host_copy(a, op_channel_affine(a, up(a, 2, ne, x), 0, up(a, 1, nc, s), up(a, 1, nc, t)));
        snprintf(what, sizeof what, "%s channel_affine dim 0", be);
        cmp(what, y, want2, 8, 0, 0);
        free(y);
    }
    {
        /* attention, one head, D = 1: q = 1, k = [0, ln 3], v = [10, 20]
         * -> weights [0.25, 0.75] -> 17.5; causal with Tq = Tk = 2: the
         * first query sees only key 0 -> 10. */
        const int64_t nq[4] = {1, 1, 2, 1}, nk[4] = {1, 1, 2, 1};
        const float q[2] = {1, 1}, k[2] = {0, logf(3)}, v[2] = {10, 20};
        struct attn_params p = {.scale = 1.0f, .causal = false};
        float *y = test_host_copy(a, op_attention(a, up(a, 4, nq, q), up(a, 4, nk, k), up(a, 4, nk, v), NULL, &p));
        const float want[2] = {17.5f, 17.5f};
        snprintf(what, sizeof what, "%s attention hand", be);
        cmp(what, y, want, 2, 1e-5, 0);
        free(y);
        p.causal = true;
        y = test_host_copy(a, op_attention(a, up(a, 4, nq, q), up(a, 4, nk, k), up(a, 4, nk, v), NULL, &p));
        const float want2[2] = {10, 17.5f};
        snprintf(what, sizeof what, "%s attention hand causal", be);
        cmp(what, y, want2, 2, 1e-5, 0);
        free(y);
        /* a -inf bias row sees nothing: zeros */
        const int64_t nb[2] = {2, 2};
        const float bias[4] = {-INFINITY, -INFINITY, 0, 0};
        p.causal = false;
        y = test_host_copy(a, op_attention(a, up(a, 4, nq, q), up(a, 4, nk, k), up(a, 4, nk, v),
                                 up(a, 2, nb, bias), &p));
        const float want3[2] = {0, 17.5f};
        snprintf(what, sizeof what, "%s attention masked row -> 0", be);
        cmp(what, y, want3, 2, 1e-5, 0);
        free(y);
    }
    CHECK(arena_status(a) == CBX_OK, "%s hand cases: %s", be, arena_errmsg(a));
    arena_reset(a);
}

/* ---- 2. cpu against ref ---------------------------------------------------- */

/* A [ne] F32 tensor in both arenas from the same host data; when `perm`
 * is given the data is stored in permuted order and the tensor is the
 * permuted view with shape ne (so it has non-contiguous strides). */
struct pair { struct tensor *c, *r; };

static struct pair mk(int ndim, const int64_t *ne, const int *perm, float lo, float hi)
{
    struct pair p = {NULL, NULL};
    int64_t n = nel(ndim, ne);
    float *h = rnd((size_t)n, lo, hi);
    if (!h) return p;
    if (!perm) {
        p.c = up(ac, ndim, ne, h);
        p.r = up(ar, ndim, ne, h);
    } else {
        /* storage shape s with s[perm[i]] = ne[i]; view dim i = storage dim perm[i] */
        int64_t s[TENSOR_MAX_DIMS];
        for (int i = 0; i < ndim; i++) s[perm[i]] = ne[i];
        p.c = op_permute(ac, up(ac, ndim, s, h), perm);
        p.r = op_permute(ar, up(ar, ndim, s, h), perm);
    }
    free(h);
    return p;
}

static struct pair mkvec(int64_t n, enum dtype t, float lo, float hi)
{
    struct pair p = {NULL, NULL};
    float *h = rnd((size_t)n, lo, hi);
    if (!h) return p;
    if (t == TYPE_F32) {
        p.c = up(ac, 1, &n, h);
        p.r = up(ar, 1, &n, h);
    } else {
        uint16_t *u = malloc((size_t)n * 2);
        if (u) {
            for (int64_t i = 0; i < n; i++) u[i] = f32_to_fp16(h[i]);
            p.c = op_from_host(ac, TYPE_F16, 1, &n, u);
            p.r = op_from_host(ar, TYPE_F16, 1, &n, u);
        }
        free(u);
    }
    free(h);
    return p;
}

static void compare(const char *what, struct tensor *c, struct tensor *r, double atol, double rtol)
{
    float *yc = test_host_copy(ac, c), *yr = test_host_copy(ar, r);
    cmp(what, yc, yr, c ? tensor_nelements(c) : 0, atol, rtol);
    free(yc);
    free(yr);
    CHECK(arena_status(ac) == CBX_OK && arena_status(ar) == CBX_OK, "%s: %s / %s", what,
          arena_errmsg(ac), arena_errmsg(ar));
    arena_reset(ac);
    arena_reset(ar);
}

static void norms_vs_ref(const char *lvl)
{
    char w[128];
    static const int64_t shapes[][3] = {{3, 5, 67}, {1, 1, 1}, {2, 3, 1024}, {4, 2, 37}};
    for (int s = 0; s < 4; s++) {
        const int64_t *ne = shapes[s];
        for (int strided = 0; strided < 2; strided++) {
            static const int perm[3] = {2, 1, 0}; /* innermost dim strided */
            struct pair x = mk(3, ne, strided ? perm : NULL, -3, 5);
            struct pair g = mkvec(ne[2], s == 3 ? TYPE_F16 : TYPE_F32, 0.5f, 1.5f);
            struct pair b = mkvec(ne[2], TYPE_F32, -1, 1);
            snprintf(w, sizeof w, "%s layer_norm [%lld,%lld,%lld]%s", lvl, (long long)ne[0],
                     (long long)ne[1], (long long)ne[2], strided ? " strided" : "");
            compare(w, op_layer_norm(ac, x.c, g.c, b.c, 1e-5f), op_layer_norm(ar, x.r, g.r, b.r, 1e-5f),
                    1e-6, 2e-6);
            x = mk(3, ne, strided ? perm : NULL, -3, 5);
            snprintf(w, sizeof w, "%s layer_norm no affine [%lld,%lld,%lld]%s", lvl, (long long)ne[0],
                     (long long)ne[1], (long long)ne[2], strided ? " strided" : "");
            compare(w, op_layer_norm(ac, x.c, NULL, NULL, 1e-12f),
                    op_layer_norm(ar, x.r, NULL, NULL, 1e-12f), 1e-6, 2e-6);
            x = mk(3, ne, strided ? perm : NULL, -3, 5);
            g = mkvec(ne[2], s == 3 ? TYPE_F16 : TYPE_F32, 0.5f, 1.5f);
            snprintf(w, sizeof w, "%s rms_norm [%lld,%lld,%lld]%s", lvl, (long long)ne[0],
                     (long long)ne[1], (long long)ne[2], strided ? " strided" : "");
            compare(w, op_rms_norm(ac, x.c, g.c, 1e-6f), op_rms_norm(ar, x.r, g.r, 1e-6f), 1e-6, 2e-6);

            /* residual add + layer norm: the norm against ref, the sum
             * exactly, and the cpu result the same bits as op_add then
             * op_layer_norm on cpu (strided: x permuted, r contiguous) */
            x = mk(3, ne, strided ? perm : NULL, -3, 5);
            struct pair r = mk(3, ne, NULL, -2, 2);
            g = mkvec(ne[2], s == 3 ? TYPE_F16 : TYPE_F32, 0.5f, 1.5f);
            b = mkvec(ne[2], TYPE_F32, -1, 1);
            struct tensor *sc = NULL, *sr = NULL;
            struct tensor *yc = op_add_layer_norm(ac, x.c, r.c, g.c, b.c, 1e-5f, &sc);
            struct tensor *yr = op_add_layer_norm(ar, x.r, r.r, g.r, b.r, 1e-5f, &sr);
            struct tensor *yu = op_layer_norm(ac, op_add(ac, x.c, r.c), g.c, b.c, 1e-5f);
            float *hc = test_host_copy(ac, sc), *hr = test_host_copy(ar, sr), *hu = test_host_copy(ac, yu), *hy = test_host_copy(ac, yc);
            int64_t n = nel(3, ne);
            snprintf(w, sizeof w, "%s add_layer_norm sum [%lld,%lld,%lld]%s", lvl, (long long)ne[0],
                     (long long)ne[1], (long long)ne[2], strided ? " strided" : "");
            cmp(w, hc, hr, sc && sr ? n : 0, 0, 0);
            snprintf(w, sizeof w, "%s add_layer_norm vs unfused cpu [%lld,%lld,%lld]%s", lvl,
                     (long long)ne[0], (long long)ne[1], (long long)ne[2], strided ? " strided" : "");
            cmp(w, hy, hu, yc && yu ? n : 0, 0, 0);
            free(hc);
            free(hr);
            free(hu);
            free(hy);
            snprintf(w, sizeof w, "%s add_layer_norm [%lld,%lld,%lld]%s", lvl, (long long)ne[0],
                     (long long)ne[1], (long long)ne[2], strided ? " strided" : "");
            compare(w, yc, yr, 1e-6, 2e-6);
        }
    }
    /* group norm: [B, C, T] and [C, T], contiguous and a transposed [B, T, C] */
    for (int strided = 0; strided < 2; strided++) {
        static const int perm[3] = {0, 2, 1};
        const int64_t ne[3] = {2, 12, 37};
        struct pair x = mk(3, ne, strided ? perm : NULL, -2, 3);
        struct pair g = mkvec(12, TYPE_F32, 0.5f, 1.5f), b = mkvec(12, TYPE_F32, -1, 1);
        snprintf(w, sizeof w, "%s group_norm [2,12,37]/3%s", lvl, strided ? " strided" : "");
        compare(w, op_group_norm(ac, x.c, 3, g.c, b.c, 1e-5f), op_group_norm(ar, x.r, 3, g.r, b.r, 1e-5f),
                1e-6, 2e-6);
        static const int perm2[2] = {1, 0};
        const int64_t ne2[2] = {8, 301};
        x = mk(2, ne2, strided ? perm2 : NULL, -2, 3);
        snprintf(w, sizeof w, "%s group_norm [8,301]/8 no affine%s", lvl, strided ? " strided" : "");
        compare(w, op_group_norm(ac, x.c, 8, NULL, NULL, 1e-5f),
                op_group_norm(ar, x.r, 8, NULL, NULL, 1e-5f), 1e-6, 2e-6);
    }
    /* channel affine over each dim */
    for (int dim = -1; dim < 3; dim++)
        for (int strided = 0; strided < 2; strided++) {
            static const int perm[3] = {1, 2, 0};
            const int64_t ne[3] = {3, 5, 33};
            int64_t c = ne[dim < 0 ? 2 : dim];
            struct pair x = mk(3, ne, strided ? perm : NULL, -2, 3);
            struct pair s = mkvec(c, TYPE_F32, 0.5f, 1.5f), t = mkvec(c, TYPE_F16, -1, 1);
            snprintf(w, sizeof w, "%s channel_affine dim %d%s", lvl, dim, strided ? " strided" : "");
            compare(w, op_channel_affine(ac, x.c, dim, s.c, t.c),
                    op_channel_affine(ar, x.r, dim, s.r, t.r), 1e-6, 1e-6);
        }
}

static void softmax_vs_ref(const char *lvl)
{
    char w[128];
    static const int64_t lens[] = {1, 7, 8, 67, 1001};
    for (int i = 0; i < 5; i++)
        for (int strided = 0; strided < 2; strided++) {
            static const int perm[2] = {1, 0};
            const int64_t ne[2] = {5, lens[i]};
            struct pair x = mk(2, ne, strided ? perm : NULL, -8, 8);
            float sc = i % 2 ? 0.125f : -1.5f;
            snprintf(w, sizeof w, "%s softmax [5,%lld] scale %g%s", lvl, (long long)lens[i], (double)sc,
                     strided ? " strided" : "");
            compare(w, op_softmax(ac, x.c, sc), op_softmax(ar, x.r, sc), 1e-7, 2e-6);
        }
    /* wide range with -inf entries (a padding mask) */
    const int64_t ne[2] = {3, 50};
    float *h = rnd(150, -60, 60);
    if (!h) return;
    for (int j = 20; j < 50; j++) h[j] = -INFINITY;
    for (int j = 0; j < 50; j += 3) h[100 + j] = -INFINITY;
    snprintf(w, sizeof w, "%s softmax with -inf entries", lvl);
    compare(w, op_softmax(ac, up(ac, 2, ne, h), 1.0f), op_softmax(ar, up(ar, 2, ne, h), 1.0f),
            1e-7, 2e-6);
    free(h);
}

/* attention case: layout 0 = [B, H, T, D] contiguous, 1 = permuted views of
 * [B, T, H, D], 2 = k/v as a prefix of a cache of Tmax positions, 3 = rows
 * with a non-unit innermost stride (views of [B, H, D, T]). bias_kind:
 * 0 none, 1 [B, Hq, Tq, Tk], 2 [1, 1, Tq, Tk] with -inf padding, 3 [Tq, Tk]
 * with whole -inf rows, 4 [B, 1, Tq, Tk] as a transposed (strided) view. */
struct attn_case {
    int64_t B, Hq, Hk, Tq, Tk, D;
    bool causal;
    int layout, bias_kind;
};

/* f16: k/v of an F16 KV cache: the values rounded to F16 and stored so
 * (layout 2: a prefix of an F16 cache; 3: strided rows; 1: contiguous) */
static struct pair mk_qkv(int64_t B, int64_t H, int64_t T, int64_t D, int layout, int64_t Tmax,
                          bool f16)
{
    if (f16 && layout == 3) { /* F16 rows with a non-unit innermost stride */
        static const int perm[4] = {0, 1, 3, 2};
        struct pair p = mk_qkv(B, H, D, T, 0, 0, false);
        p.c = op_permute(ac, op_cast(ac, p.c, TYPE_F16), perm);
        p.r = op_permute(ar, op_cast(ar, p.r, TYPE_F16), perm);
        return p;
    }
    if (f16) {
        struct pair p = mk_qkv(B, H, layout == 2 ? Tmax : T, D, layout == 2 ? 0 : layout, 0, false);
        p.c = op_cast(ac, p.c, TYPE_F16);
        p.r = op_cast(ar, p.r, TYPE_F16);
        if (layout == 2) {
            p.c = op_slice(ac, p.c, 2, 0, T);
            p.r = op_slice(ar, p.r, 2, 0, T);
        }
        return p;
    }
    const int64_t ne[4] = {B, H, T, D};
    if (layout == 1) {
        static const int perm[4] = {0, 2, 1, 3};
        return mk(4, ne, perm, -1, 1);
    }
    if (layout == 3) {
        static const int perm[4] = {0, 1, 3, 2};
        return mk(4, ne, perm, -1, 1);
    }
    if (layout == 2) {
        const int64_t nc[4] = {B, H, Tmax, D};
        struct pair p = mk(4, nc, NULL, -1, 1);
        p.c = op_slice(ac, p.c, 2, 0, T);
        p.r = op_slice(ar, p.r, 2, 0, T);
        return p;
    }
    return mk(4, ne, NULL, -1, 1);
}

static struct pair mk_bias(const struct attn_case *t)
{
    struct pair p = {NULL, NULL};
    if (t->bias_kind == 0) return p;
    if (t->bias_kind == 1) {
        const int64_t ne[4] = {t->B, t->Hq, t->Tq, t->Tk};
        return mk(4, ne, NULL, -2, 2);
    }
    if (t->bias_kind == 4) {
        static const int perm[4] = {0, 1, 3, 2};
        const int64_t ne[4] = {t->B, 1, t->Tq, t->Tk};
        return mk(4, ne, perm, -2, 2);
    }
    int64_t n = t->Tq * t->Tk;
    float *h = rnd((size_t)n, -1, 1);
    if (!h) return p;
    if (t->bias_kind == 2) /* padding: the last third of the keys */
        for (int64_t i = 0; i < t->Tq; i++)
            for (int64_t j = t->Tk - t->Tk / 3; j < t->Tk; j++) h[i * t->Tk + j] = -INFINITY;
    else /* every third query row sees nothing */
        for (int64_t i = 0; i < t->Tq; i += 3)
            for (int64_t j = 0; j < t->Tk; j++) h[i * t->Tk + j] = -INFINITY;
    if (t->bias_kind == 2) {
        const int64_t ne[4] = {1, 1, t->Tq, t->Tk};
        p.c = up(ac, 4, ne, h);
        p.r = up(ar, 4, ne, h);
    } else {
        const int64_t ne[2] = {t->Tq, t->Tk};
        p.c = up(ac, 2, ne, h);
        p.r = up(ar, 2, ne, h);
    }
    free(h);
    return p;
}

static void attention_vs_ref(const char *lvl)
{
    static const struct attn_case cases[] = {
        {2, 4, 4, 37, 37, 64, false, 0, 0},
        {1, 3, 3, 70, 70, 64, true, 1, 0},   /* prefill, permuted projections */
        {2, 6, 2, 33, 33, 36, true, 0, 0},   /* GQA, D % 8 != 0 */
        {1, 4, 4, 1, 300, 64, true, 2, 0},   /* decode from a cache prefix */
        {2, 8, 2, 1, 129, 128, false, 2, 1}, /* GQA decode with bias */
        {1, 2, 2, 5, 77, 64, true, 2, 2},    /* chunk of 5 on a cache, padding */
        {2, 2, 1, 45, 45, 80, false, 0, 3},  /* masked rows */
        {1, 2, 2, 19, 23, 13, false, 3, 4},  /* strided rows, strided bias */
        {1, 2, 2, 9, 4, 8, true, 0, 0},      /* Tq > Tk causal: rows see nothing */
        {1, 1, 1, 3, 0, 8, false, 0, 0},     /* no keys at all */
        {1, 16, 16, 96, 96, 64, true, 1, 0}, /* many items, all query blocks */
        /* AVX-512 row path (Tq <= 4): a T3 decode step on a long cache
         * (many 16-key steps, a partial last one), CFG-like batch of 2 with
         * a per-head bias, several causal rows on a cache */
        {1, 16, 16, 1, 661, 64, true, 2, 0},
        {2, 4, 4, 1, 150, 64, false, 2, 1},
        {1, 3, 3, 4, 37, 72, true, 2, 2},
        {1, 2, 2, 2, 40, 16, false, 0, 3},   /* a row that sees nothing */
        /* AVX-512 tile path: several key blocks with a partial last one,
         * causal chunks on a cache (diagonal inside a block), GQA, D > 64 */
        {1, 8, 8, 200, 200, 64, false, 0, 1},
        {1, 2, 2, 7, 150, 64, true, 2, 2},
        {2, 4, 2, 130, 130, 96, true, 1, 0},
        {1, 3, 3, 61, 257, 40, false, 0, 4},
    };
    /* every case with F32 k/v, then with F16 k/v (an F16 KV cache: the
     * kernels read halves, ref converts each element) */
    for (size_t i = 0; i < 2 * (sizeof cases / sizeof cases[0]); i++) {
        const bool f16 = i >= sizeof cases / sizeof cases[0];
        const struct attn_case *t = &cases[i % (sizeof cases / sizeof cases[0])];
        int64_t Tmax = t->Tk + 11;
        struct pair q = mk_qkv(t->B, t->Hq, t->Tq, t->D, t->layout == 2 ? 0 : t->layout, 0, false);
        struct pair k = mk_qkv(t->B, t->Hk, t->Tk, t->D, t->layout, Tmax, f16);
        struct pair v = mk_qkv(t->B, t->Hk, t->Tk, t->D, t->layout, Tmax, f16);
        struct pair b = mk_bias(t);
        struct attn_params p = {.scale = 1.0f / sqrtf((float)t->D), .causal = t->causal};
        char w[160];
        snprintf(w, sizeof w, "%s attn B%lld Hq%lld Hk%lld Tq%lld Tk%lld D%lld%s L%d b%d%s", lvl,
                 (long long)t->B, (long long)t->Hq, (long long)t->Hk, (long long)t->Tq,
                 (long long)t->Tk, (long long)t->D, t->causal ? " causal" : "", t->layout,
                 t->bias_kind, f16 ? " kv f16" : "");
        compare(w, op_attention(ac, q.c, k.c, v.c, b.c, &p), op_attention(ar, q.r, k.r, v.r, b.r, &p),
                1e-6, 1e-5);
    }
}

/* ---- 3. ref attention against a composition ----------------------------- */

static void attention_composed(void)
{
    /* GQA (Hq 4, Hk 2), causal with Tq < Tk, bias [1, Hq, Tq, Tk] */
    const int64_t B = 2, Hq = 4, Hk = 2, Tq = 6, Tk = 9, D = 5;
    const float scale = 0.37f;
    const int64_t nq[4] = {B, Hq, Tq, D}, nk[4] = {B, Hk, Tk, D}, nb[4] = {1, Hq, Tq, Tk};
    float *q = rnd((size_t)(B * Hq * Tq * D), -1, 1), *k = rnd((size_t)(B * Hk * Tk * D), -1, 1);
    float *v = rnd((size_t)(B * Hk * Tk * D), -1, 1), *bias = rnd((size_t)(Hq * Tq * Tk), -1, 1);
    float *s = malloc((size_t)(B * Hq * Tq * Tk) * sizeof *s);
    float *want = malloc((size_t)(B * Hq * Tq * D) * sizeof *want);
    float *pr = NULL, *got = NULL;
    if (!q || !k || !v || !bias || !s || !want) goto done;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < Tq; i++)
                for (int64_t j = 0; j < Tk; j++) {
                    int64_t hk = h / (Hq / Hk);
                    double dot = 0;
                    for (int64_t d = 0; d < D; d++)
                        dot += (double)q[((b * Hq + h) * Tq + i) * D + d] *
                               k[((b * Hk + hk) * Tk + j) * D + d];
                    float sc = (float)(dot * scale) + bias[(h * Tq + i) * Tk + j];
                    s[((b * Hq + h) * Tq + i) * Tk + j] = j > Tk - Tq + i ? -INFINITY : sc;
                }
    const int64_t ns[4] = {B, Hq, Tq, Tk};
    pr = test_host_copy(ar, op_softmax(ar, up(ar, 4, ns, s), 1.0f));
    if (!pr) goto done;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < Tq; i++)
                for (int64_t d = 0; d < D; d++) {
                    double o = 0;
                    for (int64_t j = 0; j < Tk; j++)
                        o += (double)pr[((b * Hq + h) * Tq + i) * Tk + j] *
                             v[((b * Hk + h / (Hq / Hk)) * Tk + j) * D + d];
                    want[((b * Hq + h) * Tq + i) * D + d] = (float)o;
                }
    struct attn_params p = {.scale = scale, .causal = true};
    got = test_host_copy(ar, op_attention(ar, up(ar, 4, nq, q), up(ar, 4, nk, k), up(ar, 4, nk, v),
                                up(ar, 4, nb, bias), &p));
    cmp("ref attention vs scores+softmax+PV", got, want, B * Hq * Tq * D, 1e-6, 1e-5);
done:
    CHECK(q && k && v && bias && s && want && pr, "composition inputs");
    free(q); free(k); free(v); free(bias); free(s); free(want); free(pr); free(got);
    arena_reset(ar);
}

/* ---- 4. rope against a double-precision formula ------------------------- */

static double inv_freq_llama3(const struct rope_params *p, int i)
{
    double f = pow(p->theta, -2.0 * i / p->n_dims);
    if (p->factor == 0) return f;
    double wl = 2 * M_PI / f, lo = p->original_max_pos / (double)p->low_freq_factor;
    double hi = p->original_max_pos / (double)p->high_freq_factor;
    if (wl > lo) return f / p->factor;
    if (wl < hi) return f;
    double sm = (p->original_max_pos / wl - p->low_freq_factor) /
                (p->high_freq_factor - p->low_freq_factor);
    return (1 - sm) * f / p->factor + sm * f;
}

static void rope_case(const char *lvl, const struct rope_params *p, int64_t D, bool strided)
{
    const int64_t B = 2, H = 3, T = 9, ne[4] = {B, H, T, D};
    const int32_t pos[9] = {0, 1, 2, 7, 100, 255, 511, 1023, 2047};
    static const int perm[4] = {0, 2, 1, 3}; /* a [B, T, H, D] projection */
    struct pair x = mk(4, ne, strided ? perm : NULL, -1, 1);
    float *xh = test_host_copy(ar, op_cont(ar, x.r));
    const int64_t nt[1] = {T};
    struct tensor *pc = op_from_host(ac, TYPE_I32, 1, nt, pos);
    struct tensor *pr = op_from_host(ar, TYPE_I32, 1, nt, pos);
    float *yc = test_host_copy(ac, op_rope(ac, x.c, pc, p)), *yr = test_host_copy(ar, op_rope(ar, x.r, pr, p));
    float *want = malloc((size_t)(B * H * T * D) * sizeof *want);
    char w[128];
    if (xh && want) {
        int half = p->n_dims / 2;
        for (int64_t r = 0; r < B * H * T; r++) {
            const float *xr = xh + r * D;
            float *wr = want + r * D;
            for (int i = 0; i < half; i++) {
                double ang = pos[r % T] * inv_freq_llama3(p, i);
                wr[i] = (float)(xr[i] * cos(ang) - xr[i + half] * sin(ang));
                wr[i + half] = (float)(xr[i + half] * cos(ang) + xr[i] * sin(ang));
            }
            for (int64_t d = p->n_dims; d < D; d++) wr[d] = xr[d];
        }
    }
    /* HF rounds pos * inv_freq to float32: up to ~2 ulp of a 2047-radian
     * angle (2.4e-4) plus inv_freq's own rounding times pos */
    snprintf(w, sizeof w, "%s rope ref vs double theta %g n %d D %lld%s%s", lvl, (double)p->theta,
             p->n_dims, (long long)D, p->factor != 0 ? " llama3" : "", strided ? " strided" : "");
    cmp(w, yr, want, B * H * T * D, 8e-4, 0);
    snprintf(w, sizeof w, "%s rope cpu vs ref theta %g n %d D %lld%s%s", lvl, (double)p->theta,
             p->n_dims, (long long)D, p->factor != 0 ? " llama3" : "", strided ? " strided" : "");
    cmp(w, yc, yr, B * H * T * D, 1e-6, 0);
    free(xh); free(yc); free(yr); free(want);
    arena_reset(ac);
    arena_reset(ar);
}

static void rope_tests(const char *lvl)
{
    struct rope_params p = {10000, 64, 0, 0, 0, 0};
    rope_case(lvl, &p, 64, false);
    rope_case(lvl, &p, 64, true);
    p.n_dims = 32; /* partial rotary, odd tail passed through */
    rope_case(lvl, &p, 37, true);
    struct rope_params l3 = {500000, 64, 8, 1, 4, 8192};
    rope_case(lvl, &l3, 64, false);
    rope_case(lvl, &l3, 64, true);
    /* the same scaling with a short original context puts bands of the
     * 64 frequencies into all three regions at these positions */
    struct rope_params l3b = {10000, 64, 4, 1, 4, 64};
    rope_case(lvl, &l3b, 64, false);
}

/* ---- 5. operand errors ---------------------------------------------------- */

static void expect_fail(struct arena *a, struct tensor *t, const char *what)
{
    CHECK(t == NULL && arena_status(a) != CBX_OK, "%s rejected", what);
    if (arena_status(a) != CBX_OK) printf("  %-28s -> %s\n", what, arena_errmsg(a));
    arena_reset(a);
}

static void errors(void)
{
    struct arena *a = ac;
    struct attn_params p = {.scale = 0.125f, .causal = false};
    const int64_t nq[4] = {1, 4, 3, 8}, nk[4] = {1, 2, 5, 8}, nk3[4] = {1, 3, 5, 8};
    const int64_t nkd[4] = {1, 2, 5, 7}, nb_bad[4] = {2, 4, 3, 5}, nb_bad2[4] = {1, 3, 3, 5};
    const int64_t nb_bad3[2] = {3, 6}, nb_ok[3] = {4, 3, 5};
#define Z(ne, n) op_fill(a, n, ne, 0)
    expect_fail(a, op_attention(a, Z(nq, 4), Z(nkd, 4), Z(nkd, 4), NULL, &p), "attention head dim");
    expect_fail(a, op_attention(a, Z(nq, 4), Z(nk3, 4), Z(nk3, 4), NULL, &p), "attention Hq % Hk");
    expect_fail(a, op_attention(a, Z(nq, 4), Z(nk, 4), Z(nk3, 4), NULL, &p), "attention k/v mismatch");
    expect_fail(a, op_attention(a, Z(nq, 4), Z(nk, 4), Z(nk, 4), Z(nb_bad, 4), &p), "attention bias batch");
    expect_fail(a, op_attention(a, Z(nq, 4), Z(nk, 4), Z(nk, 4), Z(nb_bad2, 4), &p), "attention bias heads");
    expect_fail(a, op_attention(a, Z(nq, 4), Z(nk, 4), Z(nk, 4), Z(nb_bad3, 2), &p), "attention bias Tk");
    expect_fail(a, op_attention(a, Z(nq, 3), Z(nk, 4), Z(nk, 4), NULL, &p), "attention 3-D q");
    struct tensor *ok = op_attention(a, Z(nq, 4), Z(nk, 4), Z(nk, 4), Z(nb_ok, 3), &p);
    CHECK(ok && arena_status(a) == CBX_OK, "attention bias [Hq, Tq, Tk] accepted: %s", arena_errmsg(a));
    arena_reset(a);

    const int64_t nx[2] = {4, 6}, n5[1] = {5}, n6[1] = {6};
    expect_fail(a, op_layer_norm(a, Z(nx, 2), Z(n5, 1), NULL, 1e-5f), "layer_norm weight size");
    expect_fail(a, op_rms_norm(a, Z(nx, 2), Z(nx, 2), 1e-5f), "rms_norm 2-D weight");
    expect_fail(a, op_add_layer_norm(a, Z(nx, 2), Z(n6, 1), NULL, NULL, 1e-5f, NULL), "add_layer_norm shapes");
    expect_fail(a, op_add_layer_norm(a, Z(nx, 2), Z(nx, 2), Z(n5, 1), NULL, 1e-5f, NULL),
                "add_layer_norm weight size");
    expect_fail(a, op_group_norm(a, Z(nx, 2), 3, NULL, NULL, 1e-5f), "group_norm C % G");
    expect_fail(a, op_group_norm(a, Z(nx, 2), 2, Z(n6, 1), NULL, 1e-5f), "group_norm weight size");
    expect_fail(a, op_channel_affine(a, Z(nx, 2), 2, Z(n6, 1), Z(n6, 1)), "channel_affine dim");
    expect_fail(a, op_channel_affine(a, Z(nx, 2), 0, Z(n6, 1), Z(n6, 1)), "channel_affine size");
    struct tensor *ids = op_from_host(a, TYPE_I32, 1, n5, (int32_t[5]){0, 1, 2, 3, 4});
    expect_fail(a, op_softmax(a, ids, 1.0f), "softmax of i32");

    struct rope_params rp = {10000, 8, 0, 0, 0, 0};
    const int64_t nr[4] = {1, 2, 3, 8}, n3[1] = {3};
    int32_t pos[5] = {0, 1, 2, 3, 4};
    expect_fail(a, op_rope(a, Z(nr, 4), op_from_host(a, TYPE_I32, 1, n5, pos), &rp), "rope pos length");
    expect_fail(a, op_rope(a, Z(nr, 4), Z(n3, 1), &rp), "rope f32 pos");
    rp.n_dims = 7;
    expect_fail(a, op_rope(a, Z(nr, 4), op_from_host(a, TYPE_I32, 1, n3, pos), &rp), "rope odd n_dims");
    rp.n_dims = 16;
    expect_fail(a, op_rope(a, Z(nr, 4), op_from_host(a, TYPE_I32, 1, n3, pos), &rp), "rope n_dims > D");
    rp.n_dims = 8;
    rp.factor = 8; /* low == high */
    rp.low_freq_factor = rp.high_freq_factor = 1;
    rp.original_max_pos = 8192;
    expect_fail(a, op_rope(a, Z(nr, 4), op_from_host(a, TYPE_I32, 1, n3, pos), &rp), "rope llama3 params");

    CHECK(op_softmax(a, NULL, 1) == NULL && arena_status(a) == CBX_OK, "NULL operand passes through");
#undef Z
}

int main(void)
{
    struct backend *cpu = backend_cpu_create(3);
    ac = cpu ? arena_create(cpu, 16 << 20) : NULL;
    ar = arena_create(backend_ref(), 16 << 20);
    if (!ac || !ar) {
        CHECK(0, "backend/arena creation");
        return test_summary();
    }
    hand_cases(ar, "ref");
    hand_cases(ac, "cpu");
    attention_composed();
    errors();

    for (int lvl = (int)cpu_level(); lvl >= 0; lvl--) {
        cpu_set_level((enum cpu_level)lvl);
        const char *name = cpu_level_name((enum cpu_level)lvl);
        norms_vs_ref(name);
        softmax_vs_ref(name);
        attention_vs_ref(name);
        rope_tests(name);
    }
    cpu_set_level(CPU_AVX512);

    arena_free(ac);
    arena_free(ar);
    backend_cpu_free(cpu);
    return test_summary();
}
