/* test_cfm.c - the S3Gen CFM decoder (s3gen/cfm.c) on a small random
 * estimator (64 channels, 1 transformer block per stage, 1 mid block),
 * made in memory, so it runs in seconds (also under ASan):
 *  - cpu and ref backends agree (model code calls ops only),
 *  - meanflow (mixer present) and standard variants load and solve,
 *  - cond/uncond as one batch of 2 equals two batch-1 calls,
 *  - Q8_0 weights stay close to F32,
 *  - t_span values, bad shapes, a missing tensor and cancellation are
 *    reported. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "s3gen/cfm.h"
#include "testutil.h"

enum { C = 64, TD = 128, T = 12, MAXW = 160 };

struct wset {
    struct tensor t[MAXW];
    char names[MAXW][160];
    int n;
    const char *skip; /* a name to hide (missing-tensor case) */
};

static const struct tensor *find(const void *ctx, int part, const char *name)
{
    (void)part;
    const struct wset *w = ctx;
    if (w->skip && !strcmp(name, w->skip)) return NULL;
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->names[i], name)) return &w->t[i];
    return NULL;
}

static void add(struct wset *w, const char *name, int ndim, int64_t a, int64_t b, int64_t c,
                float lo, float hi)
{
    const int64_t ne[3] = {a, b, c};
    struct tensor *t = &w->t[w->n];
    *t = tensor_make(TYPE_F32, ndim, ne, NULL, NULL);
    size_t n = (size_t)tensor_nelements(t);
    t->data = malloc(n * sizeof(float));
    fill_uniform(t->data, n, lo, hi, (uint64_t)w->n + 1);
    snprintf(w->names[w->n], sizeof w->names[w->n], "flow.decoder.estimator.%s", name);
    t->name = w->names[w->n];
    w->n++;
}

static void lin(struct wset *w, const char *name, int64_t out, int64_t in, bool bias)
{
    char n[128];
    float s = 1.0f / sqrtf((float)in);
    snprintf(n, sizeof n, "%s.weight", name);
    add(w, n, 2, out, in, 1, -s, s);
    if (bias) {
        snprintf(n, sizeof n, "%s.bias", name);
        add(w, n, 1, out, 1, 1, -0.1f, 0.1f);
    }
}

static void conv(struct wset *w, const char *name, int64_t out, int64_t in, int64_t k)
{
    char n[128];
    float s = 1.0f / sqrtf((float)(in * k));
    snprintf(n, sizeof n, "%s.weight", name);
    add(w, n, 3, out, in, k, -s, s);
    snprintf(n, sizeof n, "%s.bias", name);
    add(w, n, 1, out, 1, 1, -0.1f, 0.1f);
}

static void norm(struct wset *w, const char *name)
{
    char n[128];
    snprintf(n, sizeof n, "%s.weight", name);
    add(w, n, 1, C, 1, 1, 0.9f, 1.1f);
    snprintf(n, sizeof n, "%s.bias", name);
    add(w, n, 1, C, 1, 1, -0.1f, 0.1f);
}

static void stage(struct wset *w, const char *p, int64_t cin, bool sample)
{
    char n[64];
#define N(fmt) (snprintf(n, sizeof n, fmt, p), n)
    lin(w, N("%s.0.mlp.1"), C, TD, true);
    conv(w, N("%s.0.block1.block.0"), C, cin, 3);
    norm(w, N("%s.0.block1.block.2"));
    conv(w, N("%s.0.block2.block.0"), C, C, 3);
    norm(w, N("%s.0.block2.block.2"));
    conv(w, N("%s.0.res_conv"), C, cin, 1);
    norm(w, N("%s.1.0.norm1"));
    lin(w, N("%s.1.0.attn1.to_q"), 512, C, false);
    lin(w, N("%s.1.0.attn1.to_k"), 512, C, false);
    lin(w, N("%s.1.0.attn1.to_v"), 512, C, false);
    lin(w, N("%s.1.0.attn1.to_out.0"), C, 512, true);
    norm(w, N("%s.1.0.norm3"));
    lin(w, N("%s.1.0.ff.net.0.proj"), 4 * C, C, true);
    lin(w, N("%s.1.0.ff.net.2"), C, 4 * C, true);
    if (sample) conv(w, N("%s.2"), C, C, 3);
#undef N
}

static void make(struct wset *w, bool meanflow)
{
    memset(w, 0, sizeof *w);
    lin(w, "time_mlp.linear_1", TD, 320, true);
    lin(w, "time_mlp.linear_2", TD, TD, true);
    if (meanflow) lin(w, "time_embed_mixer", TD, 2 * TD, false);
    stage(w, "down_blocks.0", 320, true);
    stage(w, "mid_blocks.0", C, false);
    stage(w, "up_blocks.0", 2 * C, true);
    conv(w, "final_block.block.0", C, C, 3);
    norm(w, "final_block.block.2");
    conv(w, "final_proj", 80, C, 1);
}

static void unmake(struct wset *w)
{
    for (int i = 0; i < w->n; i++) free(w->t[i].data);
}

static float *host(const struct tensor *t)
{
    if (!t) return NULL;
    float *h = malloc(tensor_nbytes(t));
    tensor_to_host(t, h);
    return h;
}

/* x, mu, cond [B, 80, T], spks [B, 80] with fixed random values */
static struct tensor *input(struct arena *a, int64_t B, int which)
{
    const int64_t ne3[3] = {B, 80, T}, ne2[2] = {B, 80};
    size_t n = (size_t)(B * 80 * (which == 3 ? 1 : T));
    float *v = malloc(n * sizeof *v);
    fill_uniform(v, n, -1, 1, 100 + (uint64_t)which);
    struct tensor *t = op_from_host(a, TYPE_F32, which == 3 ? 2 : 3, which == 3 ? ne2 : ne3, v);
    free(v);
    return t;
}

static int cancel_at_1(void *user, int step, float t, float r, const struct tensor *x,
                       const struct tensor *v)
{
    (void)t; (void)r; (void)x; (void)v;
    (*(int *)user)++;
    return step == 1;
}

int main(void)
{
    char err[ERR_MAX] = "";
    struct backend *cpu = backend_cpu_create(2);
    struct arena *a = arena_create(cpu, 0), *ar = arena_create(backend_ref(), 0);

    for (int variant = 0; variant < 2; variant++) {
        bool meanflow = variant == 0;
        const char *vn = meanflow ? "meanflow" : "standard";
        struct wset *w = malloc(sizeof *w);
        make(w, meanflow);
        struct weights src = {find, w, 0, "s3gen", false};
        struct s3gen_cfm c, cq;
        cbx_status rc = s3gen_cfm_load(&c, &src, cpu, TYPE_F32, err);
        CHECK(rc == CBX_OK, "%s load: %s", vn, err);
        if (rc != CBX_OK) return test_summary();
        CHECK(c.meanflow == meanflow, "%s: meanflow flag %d", vn, c.meanflow);

        /* one estimator call, B = 2, on cpu and ref */
        arena_reset(a);
        arena_reset(ar);
        float t[2] = {0.3f, 0.3f}, r[2] = {0.8f, 0.8f};
        struct tensor *v = s3gen_estimator_forward(a, &c, input(a, 2, 0), input(a, 2, 1), input(a, 2, 3),
                                                   input(a, 2, 2), t, meanflow ? r : NULL);
        struct tensor *vr = s3gen_estimator_forward(ar, &c, input(ar, 2, 0), input(ar, 2, 1), input(ar, 2, 3),
                                                    input(ar, 2, 2), t, meanflow ? r : NULL);
        CHECK(v && vr, "%s estimator: %s %s", vn, arena_errmsg(a), arena_errmsg(ar));
        if (!v || !vr) return test_summary();
        CHECK(v->ndim == 3 && v->ne[0] == 2 && v->ne[1] == 80 && v->ne[2] == T, "%s: output shape", vn);
        float *hv = host(v), *hr = host(vr);
        char what[96];
        snprintf(what, sizeof what, "cfm %s estimator cpu vs ref", vn);
        check_close(what, hv, hr, (size_t)(2 * 80 * T), 0, 1e-5);
        bool finite = true;
        for (int i = 0; i < 2 * 80 * T; i++) finite = finite && isfinite(hv[i]);
        CHECK(finite, "%s: non-finite velocity", vn);

        /* the same rows as two batch-1 calls */
        struct tensor *v0 = s3gen_estimator_forward(a, &c, op_slice(a, input(a, 2, 0), 0, 1, 1),
                                                    op_slice(a, input(a, 2, 1), 0, 1, 1),
                                                    op_slice(a, input(a, 2, 3), 0, 1, 1),
                                                    op_slice(a, input(a, 2, 2), 0, 1, 1), t, meanflow ? r : NULL);
        float *h0 = host(v0);
        snprintf(what, sizeof what, "cfm %s row 1 alone vs in the batch", vn);
        if (h0) check_close(what, h0, hv + 80 * T, (size_t)(80 * T), 0, 1e-5);
        CHECK(h0 != NULL, "%s batch-1 call: %s", vn, arena_errmsg(a));

        /* Q8_0 weights: close to F32 */
        rc = s3gen_cfm_load(&cq, &src, cpu, TYPE_Q8_0, err);
        CHECK(rc == CBX_OK, "%s q8_0 load: %s", vn, err);
        struct tensor *vq = rc == CBX_OK ? s3gen_estimator_forward(a, &cq, input(a, 2, 0), input(a, 2, 1),
                                                                   input(a, 2, 3), input(a, 2, 2), t,
                                                                   meanflow ? r : NULL) : NULL;
        float *hq = host(vq);
        snprintf(what, sizeof what, "cfm %s q8_0 vs f32 weights", vn);
        if (hq) check_close(what, hq, hv, (size_t)(2 * 80 * T), 0, 5e-2);
        CHECK(hq != NULL, "%s q8_0 estimator: %s", vn, arena_errmsg(a));
        if (rc == CBX_OK) s3gen_cfm_free(&cq);

        /* solver: default steps, CFG batched == separate, finite result */
        arena_reset(a);
        struct tensor *z = input(a, 1, 0), *mu = input(a, 1, 1), *cond = input(a, 1, 2), *spk = input(a, 1, 3);
        struct s3gen_cfm_params p = {0, false, NULL, NULL};
        struct tensor *x1 = s3gen_cfm_solve(a, &c, z, mu, spk, cond, &p);
        CHECK(x1 != NULL, "%s solve: %s", vn, arena_errmsg(a));
        if (!meanflow && x1) {
            p.cfg_separate = true;
            p.n_steps = 10;
            struct tensor *x2 = s3gen_cfm_solve(a, &c, z, mu, spk, cond, &p);
            float *a1 = host(x1), *a2 = host(x2);
            if (a2) check_close("cfm standard solve: CFG separate vs batched", a2, a1, (size_t)(80 * T), 0, 1e-5);
            CHECK(a2 != NULL, "separate solve: %s", arena_errmsg(a));
            free(a1);
            free(a2);
        }
        /* cancellation from the step callback */
        int calls = 0;
        struct s3gen_cfm_params pc = {3, false, cancel_at_1, &calls};
        struct tensor *xc = s3gen_cfm_solve(a, &c, z, mu, spk, cond, &pc);
        CHECK(xc == NULL && arena_status(a) == CBX_ERR_CANCELLED && calls == 2,
              "%s: cancel gave %s after %d calls", vn, cbx_status_str(arena_status(a)), calls);

        /* wrong shapes are refused with a message */
        arena_reset(a);
        struct tensor *bad = s3gen_estimator_forward(a, &c, input(a, 1, 0), input(a, 2, 1), input(a, 1, 3),
                                                     input(a, 1, 2), t, r);
        printf("mismatched batch -> %s: %s\n", cbx_status_str(arena_status(a)), arena_errmsg(a));
        CHECK(bad == NULL && arena_status(a) == CBX_ERR_INVALID_ARG, "%s: bad shapes accepted", vn);

        free(hv); free(hr); free(h0); free(hq);
        s3gen_cfm_free(&c);

        /* a missing tensor is named */
        w->skip = "flow.decoder.estimator.mid_blocks.0.1.0.attn1.to_k.weight";
        rc = s3gen_cfm_load(&c, &src, cpu, TYPE_F32, err);
        printf("missing tensor -> %s: %s\n", cbx_status_str(rc), err);
        CHECK(rc != CBX_OK && strstr(err, "to_k") && c.est == NULL, "%s: missing tensor not reported", vn);
        unmake(w);
        free(w);
    }

    /* t_span: linspace (meanflow) and the cosine schedule */
    float span[11];
    s3gen_cfm_t_span(true, 2, span);
    CHECK(span[0] == 0.0f && span[1] == 0.5f && span[2] == 1.0f, "meanflow t_span %g %g %g", span[0], span[1], span[2]);
    s3gen_cfm_t_span(false, 10, span);
    const float want[11] = {0, 0.0123117f, 0.0489435f, 0.1089935f, 0.1909830f, 0.2928932f,
                            0.4122147f, 0.5460095f, 0.6909830f, 0.8435655f, 1};
    check_close("cfm cosine t_span (spec values)", span, want, 11, 1e-6, 0);

    arena_free(a);
    arena_free(ar);
    backend_cpu_free(cpu);
    return test_summary();
}
