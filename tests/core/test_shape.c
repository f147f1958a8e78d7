/* test_shape.c - transfers, views, copies and concatenation (ops_shape.c)
 * on the cpu and ref backends, checked element by element against index
 * arithmetic done here; plus the error paths and the arena's sticky error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "testutil.h"

/* value of element (i, j, k, l): distinct and exact in float */
static float val(int64_t i, int64_t j, int64_t k, int64_t l)
{
    return (float)(i * 1000 + j * 100 + k * 10 + l);
}

/* Contiguous host copy (views through op_cont); malloc'ed. */
static float *host(struct arena *a, const struct tensor *t)
{
    if (!t) return NULL;
    const struct tensor *c = tensor_is_contiguous(t) ? t : op_cont(a, t);
    if (!c) return NULL;
    float *h = malloc(tensor_nbytes(c) + 4);
    if (h && tensor_to_host(c, h) != CBX_OK) {
        free(h);
        return NULL;
    }
    return h;
}

/* x[2, 3, 4, 5] with val() */
static struct tensor *base4(struct arena *a)
{
    float v[120];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 5; l++) v[((i * 3 + j) * 4 + k) * 5 + l] = val(i, j, k, l);
    return op_from_host(a, TYPE_F32, 4, (int64_t[]){2, 3, 4, 5}, v);
}

static void test_transfers(struct arena *a, const char *bn)
{
    /* round trips keep the bytes of every type */
    int32_t i32[7] = {1, -2, 3, 2147483647, -2147483647 - 1, 0, 42};
    uint16_t h[5] = {0x3c00, 0xbc00, 0x7bff, 0x0001, 0x7e00};
    float f[3] = {1.5f, -0.0f, 3e38f};
    int32_t gi[7] = {0};
    uint16_t gh[5] = {0};
    float gf[3] = {0};
    struct tensor *ti = op_from_host(a, TYPE_I32, 1, (int64_t[]){7}, i32);
    struct tensor *th = op_from_host(a, TYPE_F16, 2, (int64_t[]){1, 5}, h);
    struct tensor *tf = op_from_host(a, TYPE_F32, 0, NULL, f); /* scalar */
    CHECK(ti && th && tf && tensor_to_host(ti, gi) == CBX_OK && tensor_to_host(th, gh) == CBX_OK &&
          tensor_to_host(tf, gf) == CBX_OK, "%s transfers ran", bn);
    CHECK(!memcmp(gi, i32, sizeof gi) && !memcmp(gh, h, sizeof gh) && gf[0] == 1.5f && gf[1] == 0,
          "%s from_host/to_host round trip (i32, f16, 0-d f32)", bn);
    CHECK(ti && ti->be == arena_backend(a), "%s tensor lives on the arena's backend", bn);
    /* to_host of a strided view is refused (callers op_cont first) */
    struct tensor *x = base4(a);
    float tmp[120];
    CHECK(tensor_to_host(op_transpose(a, x, 0, 1), tmp) == CBX_ERR_INVALID_ARG,
          "%s to_host of a transposed view refused", bn);
    arena_reset(a);
}

static void test_views(struct arena *a, const char *bn)
{
    struct tensor *x = base4(a);
    /* slice on every dim, negative dim too */
    for (int d = 0; d < 4; d++) {
        int64_t start = d == 3 ? 2 : 1, len = d == 0 ? 1 : 2;
        struct tensor *s = op_slice(a, x, d - (d == 3 ? 4 : 0), start, len);
        float *g = host(a, s);
        int bad = g ? 0 : 1;
        int64_t ne[4] = {2, 3, 4, 5};
        ne[d] = len;
        int64_t n = 0;
        for (int64_t i = 0; g && i < ne[0]; i++)
            for (int64_t j = 0; j < ne[1]; j++)
                for (int64_t k = 0; k < ne[2]; k++)
                    for (int64_t l = 0; l < ne[3]; l++) {
                        int64_t idx[4] = {i, j, k, l};
                        idx[d] += start;
                        bad += g[n++] != val(idx[0], idx[1], idx[2], idx[3]);
                    }
        CHECK(!bad && s && s->data != NULL && s->ne[d] == len, "%s slice dim %d [%lld, +%lld): %d wrong",
              bn, d, (long long)start, (long long)len, bad);
        free(g);
    }
    /* permute {3, 1, 0, 2}: out[a][b][c][e] = x[c][b][e][a]; op_cont copies it */
    struct tensor *p = op_permute(a, x, (const int[]){3, 1, 0, 2});
    CHECK(p && p->ne[0] == 5 && p->ne[1] == 3 && p->ne[2] == 2 && p->ne[3] == 4 &&
          p->data == x->data, "%s permute is a view of shape [5, 3, 2, 4]", bn);
    struct tensor *pc = op_cont(a, p);
    CHECK(pc && tensor_is_contiguous(pc) && pc->data != x->data, "%s cont makes a copy", bn);
    float *g = host(a, pc);
    int bad = g ? 0 : 1, n = 0;
    for (int i = 0; g && i < 5; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 2; k++)
                for (int l = 0; l < 4; l++) bad += g[n++] != val(k, j, l, i);
    CHECK(!bad, "%s cont of permuted view: %d wrong", bn, bad);
    free(g);
    /* transpose(-1, -3) swaps dims 3 and 1 */
    struct tensor *t = op_transpose(a, x, -1, -3);
    g = host(a, t);
    bad = g ? 0 : 1;
    n = 0;
    for (int i = 0; g && i < 2; i++)
        for (int j = 0; j < 5; j++)
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 3; l++) bad += g[n++] != val(i, l, k, j);
    CHECK(!bad && t->ne[1] == 5 && t->ne[3] == 3, "%s transpose(-1, -3): %d wrong", bn, bad);
    free(g);
    /* reshape of contiguous data is a view with the same bytes */
    struct tensor *r = op_reshape(a, x, 2, (int64_t[]){6, 20});
    CHECK(r && r->data == x->data && r->ne[0] == 6 && r->nb[0] == 80, "%s reshape [6, 20] view", bn);
    /* a size-1 dim slice of a contiguous tensor is still contiguous: reshape works */
    struct tensor *r2 = op_reshape(a, op_slice(a, x, 0, 1, 1), 2, (int64_t[]){12, 5});
    g = host(a, r2);
    CHECK(g && g[0] == val(1, 0, 0, 0) && g[59] == val(1, 2, 3, 4), "%s reshape of x[1:2]", bn);
    free(g);
    /* split_dim: x[2, 3, 4, 5] as [6, 4, 5] split back on dim 0, and the
     * last dim of a column slice (a fused projection's third) split in two */
    struct tensor *sp = op_split_dim(a, op_reshape(a, x, 3, (int64_t[]){6, 4, 5}), 0, 2);
    g = host(a, sp);
    bad = g ? 0 : 1;
    for (int i = 0; g && i < 120; i++) bad += g[i] != val(i / 60, (i / 20) % 3, (i / 5) % 4, i % 5);
    CHECK(!bad && sp->ndim == 4 && sp->ne[0] == 2 && sp->ne[1] == 3, "%s split_dim 6 -> 2 x 3: %d wrong",
          bn, bad);
    free(g);
    /* y[4, 12] = v[r][c] = 100 r + c; columns 4..7 split into [4, 2, 2] */
    float yv[48];
    for (int i = 0; i < 48; i++) yv[i] = (float)(100 * (i / 12) + i % 12);
    struct tensor *y = op_from_host(a, TYPE_F32, 2, (int64_t[]){4, 12}, yv);
    struct tensor *ys = op_split_dim(a, op_slice(a, y, 1, 4, 4), -1, 2);
    g = host(a, ys);
    bad = g ? 0 : 1;
    for (int r = 0; g && r < 4; r++)
        for (int h = 0; h < 2; h++)
            for (int d = 0; d < 2; d++) bad += g[(r * 2 + h) * 2 + d] != (float)(100 * r + 4 + h * 2 + d);
    CHECK(!bad && ys->ndim == 3 && ys->ne[1] == 2 && ys->ne[2] == 2, "%s split_dim of a column slice: %d wrong",
          bn, bad);
    free(g);
    CHECK(arena_status(a) == CBX_OK, "%s views: no error (%s)", bn, arena_errmsg(a));
    CHECK(!op_split_dim(a, y, 1, 5) && arena_status(a) != CBX_OK,
          "%s split_dim 12 into 5 fails: '%s'", bn, arena_errmsg(a));
    arena_reset(a);
}

static void test_concat(struct arena *a, const char *bn)
{
    struct tensor *x = base4(a);
    for (int d = 0; d < 4; d++) {
        /* y = x sliced to length 1 on dim d, with values shifted */
        struct tensor *ys = op_slice(a, x, d, 0, 1);
        struct tensor *y = op_unary(a, ys, UN_SCALE, 1.0f, 0.5f); /* v + 0.5 */
        struct tensor *c = op_concat(a, x, y, d);
        float *g = host(a, c);
        int64_t ne[4] = {2, 3, 4, 5};
        int64_t nx = ne[d];
        ne[d] += 1;
        int bad = g ? 0 : 1;
        int64_t n = 0;
        for (int64_t i = 0; g && i < ne[0]; i++)
            for (int64_t j = 0; j < ne[1]; j++)
                for (int64_t k = 0; k < ne[2]; k++)
                    for (int64_t l = 0; l < ne[3]; l++) {
                        int64_t idx[4] = {i, j, k, l};
                        float want;
                        if (idx[d] < nx) {
                            want = val(i, j, k, l);
                        } else {
                            idx[d] = 0;
                            want = val(idx[0], idx[1], idx[2], idx[3]) + 0.5f;
                        }
                        bad += g[n++] != want;
                    }
        CHECK(!bad && c && c->ne[d] == nx + 1, "%s concat dim %d: %d wrong", bn, d, bad);
        free(g);
    }
    /* concat of two views (x^T with itself) along dim -1 */
    struct tensor *xt = op_transpose(a, op_reshape(a, x, 2, (int64_t[]){24, 5}), 0, 1); /* [5, 24] */
    struct tensor *c = op_concat(a, xt, xt, -1);
    float *g = host(a, c);
    CHECK(g && c->ne[1] == 48 && g[0] == val(0, 0, 0, 0) && g[24] == val(0, 0, 0, 0) &&
          g[48 + 1] == val(0, 0, 1, 1) && g[48 * 4 + 24 + 23] == val(1, 2, 3, 4),
          "%s concat of transposed views", bn);
    free(g);
    CHECK(arena_status(a) == CBX_OK, "%s concat: no error (%s)", bn, arena_errmsg(a));
    arena_reset(a);
}

/* KV-cache style: write [H, 3, D] rows at positions 5..7 of a [H, 16, D]
 * cache; everything else keeps its value. */
static void test_copy_into(struct arena *a, const char *bn)
{
    const int64_t H = 3, T = 16, D = 8;
    struct tensor *cache = op_fill(a, 3, (int64_t[]){H, T, D}, -1.0f);
    float nv[3 * 3 * 8];
    for (int i = 0; i < 72; i++) nv[i] = (float)i;
    /* source as a permuted view: new[T=3, H, D] -> [H, 3, D] */
    float nvp[72];
    for (int h = 0; h < 3; h++)
        for (int t = 0; t < 3; t++)
            for (int d = 0; d < 8; d++) nvp[(t * 3 + h) * 8 + d] = nv[(h * 3 + t) * 8 + d];
    struct tensor *src = op_permute(a, op_from_host(a, TYPE_F32, 3, (int64_t[]){3, H, D}, nvp),
                                    (const int[]){1, 0, 2});
    cbx_status rc = op_copy_into(a, op_slice(a, cache, 1, 5, 3), src);
    float *g = host(a, cache);
    int bad = g ? 0 : 1;
    for (int64_t h = 0; g && h < H; h++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t d = 0; d < D; d++) {
                float want = (t >= 5 && t < 8) ? nv[(h * 3 + (t - 5)) * 8 + d] : -1.0f;
                bad += g[(h * T + t) * D + d] != want;
            }
    CHECK(rc == CBX_OK && !bad, "%s copy_into a cache slice: %d wrong (%s)", bn, bad, arena_errmsg(a));
    free(g);
    /* shape mismatch */
    rc = op_copy_into(a, op_slice(a, cache, 1, 5, 2), src);
    CHECK(rc != CBX_OK && arena_status(a) == rc, "%s copy_into shape mismatch fails: '%s'", bn,
          arena_errmsg(a));
    arena_reset(a);
}

static void test_errors(struct arena *a, const char *bn)
{
    struct tensor *x = base4(a);
    /* each error case on a fresh arena state */
    struct tensor *r;
    r = op_slice(a, x, 2, 3, 2);
    CHECK(!r && arena_status(a) != CBX_OK && strstr(arena_errmsg(a), "op_slice"),
          "%s slice [3, 5) of 4 fails: '%s'", bn, arena_errmsg(a));
    arena_reset(a);
    x = base4(a);
    r = op_slice(a, x, 4, 0, 1);
    CHECK(!r && arena_status(a) != CBX_OK, "%s slice of dim 4 fails: '%s'", bn, arena_errmsg(a));
    arena_reset(a);
    x = base4(a);
    r = op_reshape(a, op_transpose(a, x, 0, 1), 1, (int64_t[]){120});
    CHECK(!r && arena_status(a) != CBX_OK && strstr(arena_errmsg(a), "not contiguous"),
          "%s reshape of a transposed view fails: '%s'", bn, arena_errmsg(a));
    arena_reset(a);
    x = base4(a);
    r = op_reshape(a, x, 2, (int64_t[]){7, 17});
    CHECK(!r && arena_status(a) != CBX_OK, "%s reshape to a different count fails: '%s'", bn,
          arena_errmsg(a));
    arena_reset(a);
    x = base4(a);
    r = op_reshape(a, x, 5, (int64_t[]){2, 3, 4, 5, 1});
    CHECK(!r && arena_status(a) != CBX_OK, "%s reshape to 5 dims fails: '%s'", bn, arena_errmsg(a));
    arena_reset(a);
    x = base4(a);
    r = op_concat(a, x, op_slice(a, x, 1, 0, 2), 0); /* dim 1 differs: 3 vs 2 */
    CHECK(!r && arena_status(a) != CBX_OK && strstr(arena_errmsg(a), "op_concat"),
          "%s concat shape mismatch fails: '%s'", bn, arena_errmsg(a));
    /* sticky: every later op returns NULL and the first message stays */
    char first[ERR_MAX];
    snprintf(first, sizeof first, "%s", arena_errmsg(a));
    struct tensor *after = op_cont(a, x);
    struct tensor *after2 = op_add(a, x, x);
    struct tensor *after3 = op_fill(a, 1, (int64_t[]){4}, 0);
    CHECK(!after && !after2 && !after3 && strcmp(first, arena_errmsg(a)) == 0,
          "%s sticky error: later ops return NULL, message kept", bn);
    /* NULL operands pass through */
    CHECK(!op_slice(a, NULL, 0, 0, 1) && !op_cont(a, NULL) && !op_concat(a, NULL, x, 0),
          "%s NULL operand -> NULL", bn);
    arena_reset(a);
    CHECK(arena_status(a) == CBX_OK && base4(a) != NULL, "%s reset clears the error", bn);
    x = base4(a);
    r = op_permute(a, x, (const int[]){0, 1, 1, 2});
    CHECK(!r && arena_status(a) != CBX_OK, "%s bad permutation fails: '%s'", bn, arena_errmsg(a));
    arena_reset(a);
}

/* A device whose copies fail (a stand-in: the cpu backend's kernels and
 * memory, its transfers refused as a faulted GPU's are): op_from_host
 * fails its arena, tensor_to_host returns an error, neither passes
 * stale bytes on as a result. */
static bool refuse(const struct backend *be, void *dst, const void *src, size_t n)
{
    (void)be, (void)dst, (void)src, (void)n;
    return false;
}

static void test_failed_transfers(const struct backend *cpu)
{
    struct backend dev = *cpu;
    dev.name = "faulted";
    dev.host = false;
    dev.to_host = refuse;
    dev.from_host = refuse;
    struct arena *a = arena_create(&dev, 0);
    CHECK(a != NULL, "arena on the faulted device");
    if (!a) return;
    const float f[4] = {1, 2, 3, 4};
    struct tensor *t = op_from_host(a, TYPE_F32, 1, (int64_t[]){4}, f);
    printf("faulted device: upload gave %s, arena says \"%s\"\n", t ? "a tensor" : "NULL", arena_errmsg(a));
    CHECK(!t && arena_status(a) == CBX_ERR_INTERNAL && strstr(arena_errmsg(a), "upload"),
          "a failed upload fails its arena (%s)", arena_errmsg(a));
    arena_reset(a);
    struct tensor *z = op_fill(a, 1, (int64_t[]){4}, 7.0f); /* computed there, read back */
    float g[4] = {0};
    CHECK(z && tensor_to_host(z, g) == CBX_ERR_INTERNAL, "a failed download is an error, not a result");
    arena_free(a);
}

int main(void)
{
    struct backend *cpu = backend_cpu_create(2);
    struct arena *ac = arena_create(cpu, 0), *ar = arena_create(backend_ref(), 0);
    if (!cpu || !ac || !ar) {
        fprintf(stderr, "setup failed\n");
        return 2;
    }
    struct arena *as[2] = {ac, ar};
    const char *names[2] = {"cpu", "ref"};
    for (int k = 0; k < 2; k++) {
        test_transfers(as[k], names[k]);
        test_views(as[k], names[k]);
        test_concat(as[k], names[k]);
        test_copy_into(as[k], names[k]);
        test_errors(as[k], names[k]);
    }
    test_failed_transfers(cpu);
    arena_free(ac);
    arena_free(ar);
    backend_cpu_free(cpu);
    return test_summary();
}
