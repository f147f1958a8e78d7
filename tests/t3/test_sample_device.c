/* test_sample_device.c - the draw on the device (op_sample, what a
 * recorded T3 decode step ends in) against the host's draw of the same
 * logits (t3_step_draw: t3/sampler.h and rng.h), case by case over both
 * processor orders, CFG pairs, greedy, ties, -inf entries and the sort of
 * a whole row; each case draws in a chain, so the device's repetition
 * history and stream position carry from draw to draw as in a sequence.
 * Tokens must be identical at every draw, and the history and stream
 * position equal at the end.
 *
 * Backends: cuda when the build has it and a GPU is present. Elsewhere
 * the test checks that host backends refuse the op (t3 then draws on the
 * host) and says so; `--require-cuda` (the ctest `cuda_sample_device`,
 * label cuda) fails without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/backend.h"
#include "core/error.h"
#include "core/ops.h"
#include "t3/t3.h"
#include "testutil.h"

#define DRAWS 40

struct scase {
    const char *name;
    enum t3_order order;
    int64_t V;
    int rows;
    double cfg;
    struct sampler_params s;
    float scale;    /* logits uniform in [-scale, scale), spikes of 2 scale */
    float quantum;  /* > 0: logits rounded to multiples (ties) */
    int neg_inf;    /* every neg_inf-th logit -inf (and draw 0 all -inf);
                     * one row only (a CFG pair of -inf is NaN) */
};

static const struct scase cases[] = {
    {"turbo defaults", T3_ORDER_TURBO, 6563, 1, 0, {0.8, 1000, 0.95, 0.0, 1.2}, 3, 0, 0},
    {"turbo greedy, ties", T3_ORDER_TURBO, 6563, 1, 0, {0.8, 1, 0.95, 0.0, 1.2}, 3, 0.5f, 0},
    {"turbo top-p over the whole row", T3_ORDER_TURBO, 6563, 1, 0, {1.0, 0, 0.9, 0.0, 1.0}, 2, 0, 0},
    {"turbo top-k 50, ties", T3_ORDER_TURBO, 6563, 1, 0, {0.7, 50, 0.8, 0.0, 1.3}, 4, 0.25f, 0},
    {"turbo -inf entries", T3_ORDER_TURBO, 6563, 1, 0, {0.8, 1000, 0.95, 0.0, 1.2}, 3, 0, 7},
    {"llama defaults, cfg", T3_ORDER_CFG, 8194, 2, 0.5, {0.8, 0, 1.0, 0.05, 1.2}, 3, 0, 0},
    {"llama top-p and min-p, cfg", T3_ORDER_CFG, 8194, 2, 0.5, {0.9, 0, 0.8, 0.02, 1.1}, 2, 0, 0},
    {"llama greedy, cfg, ties", T3_ORDER_CFG, 8194, 2, 0.5, {0.8, 1, 1.0, 0.05, 1.2}, 3, 0.5f, 0},
    {"llama one row, no processors", T3_ORDER_CFG, 8194, 1, 0, {1.0, 0, 1.0, 0.0, 1.0}, 0.5f, 0, 0},
    {"llama -inf entries", T3_ORDER_CFG, 8194, 1, 0, {0.8, 0, 1.0, 0.05, 1.2}, 3, 0, 5},
    {"turbo top-k 5: top-p's sort within a warp", T3_ORDER_TURBO, 6563, 1, 0, {0.8, 5, 0.99, 0.0, 1.2}, 1, 0, 0},
};

static void make_logits(const struct scase *c, int draw, float *raw)
{
    const int64_t n = c->V * c->rows;
    fill_uniform(raw, (size_t)n, -c->scale, c->scale, 1000u * (uint64_t)(c - cases) + (uint64_t)draw);
    for (int64_t i = 0; i < n; i++) {
        if (i % 97 == 13) raw[i] += 2 * c->scale;
        if (c->quantum > 0) raw[i] = c->quantum * roundf(raw[i] / c->quantum);
        if (c->neg_inf && (i % c->neg_inf == 0 || draw == 0)) raw[i] = -INFINITY;
    }
}

/* One case on be: DRAWS chained draws; mismatches counted into *bad. */
static void run_case(const struct backend *be, const struct scase *c, int *bad, int *total)
{
    char err[ERR_MAX] = "";
    struct t3_model m;
    memset(&m, 0, sizeof m);
    m.order = c->order;
    m.hp.speech_vocab = c->V;
    struct t3_gen_params gp = t3_gen_default_params(&m);
    gp.s = c->s;
    gp.cfg_weight = c->cfg;
    const struct sample_params sp = t3_sample_params(&m, &gp);
    const int64_t V = c->V;
    float *raw = malloc(sizeof(float) * (size_t)(V * c->rows));
    int32_t *hist = malloc(sizeof(int32_t) * (DRAWS + 1)), *seen = calloc((size_t)V, sizeof(int32_t));
    struct arena *keep = arena_create(be, 0), *step = arena_create(be, 0);
    CHECK(raw && hist && seen && keep && step, "%s: out of memory", c->name);
    if (!raw || !hist || !seen || !keep || !step) goto done;
    struct rng_stream rs;
    rng_stream_init(&rs, "t3.sample", 42u + (uint64_t)(c - cases));
    rs.counter = 5; /* a stream already drawn from */
    int64_t nh = 1;
    hist[0] = (int32_t)(V - 2); /* the start token */
    seen[V - 2] = 1;
    const uint32_t r0[4] = {(uint32_t)rs.key, (uint32_t)(rs.key >> 32), (uint32_t)rs.counter, 0};
    const int64_t one[1] = {1}, four[1] = {4}, nv[1] = {V}, nl[2] = {c->rows, V};
    struct tensor *tok = arena_tensor(keep, TYPE_I32, 1, one);
    struct tensor *dseen = op_from_host(keep, TYPE_I32, 1, nv, seen);
    struct tensor *drng = op_from_host(keep, TYPE_I32, 1, four, r0);
    CHECK(tok && dseen && drng, "%s: device state: %s", c->name, arena_errmsg(keep));
    if (!tok || !dseen || !drng) goto done;
    int mism = 0, first = -1, neg = 0;
    for (int d = 0; d < DRAWS; d++) {
        make_logits(c, d, raw);
        int32_t want = -2, got = -2;
        cbx_status rc = t3_step_draw(&m, &gp, raw, c->rows, hist, nh, &rs, &want, err);
        CHECK(rc == CBX_OK, "%s: host draw: %s", c->name, err);
        arena_reset(step);
        struct tensor *l = op_from_host(step, TYPE_F32, 2, nl, raw);
        rc = l ? op_sample(step, tok, l, dseen, drng, &sp) : arena_status(step);
        if (rc == CBX_OK) rc = tensor_to_host(tok, &got);
        CHECK(rc == CBX_OK, "%s: device draw: %s", c->name, arena_errmsg(step));
        if (rc != CBX_OK) break;
        if (got != want) {
            mism++;
            if (first < 0) first = d;
        }
        neg += want < 0;
        if (want >= 0) hist[nh++] = want; /* the host's history goes on */
    }
    /* the device's history and stream position after the chain */
    uint32_t r1[4] = {0, 0, 0, 0};
    int32_t *dev_seen = malloc(sizeof(int32_t) * (size_t)V);
    bool state_ok = dev_seen && tensor_to_host(drng, r1) == CBX_OK && tensor_to_host(dseen, dev_seen) == CBX_OK;
    if (state_ok) {
        memset(seen, 0, sizeof(int32_t) * (size_t)V);
        for (int64_t i = 0; i < nh; i++) seen[hist[i]] = 1;
        for (int64_t i = 0; i < V && state_ok; i++) state_ok = (dev_seen[i] != 0) == (seen[i] != 0);
        state_ok = state_ok && ((uint64_t)r1[2] | (uint64_t)r1[3] << 32) == rs.counter;
    }
    free(dev_seen);
    printf("  %-32s V %5lld rows %d: %d/%d draws identical (%d with nothing to draw), stream at %llu%s\n", c->name,
           (long long)V, c->rows, DRAWS - mism, DRAWS, neg, (unsigned long long)rs.counter,
           state_ok ? "" : ", device state differs");
    CHECK(mism == 0, "%s: %d draws differ, the first at %d", c->name, mism, first);
    CHECK(state_ok, "%s: the device's history or stream position differs from the host's", c->name);
    CHECK(!c->neg_inf || neg >= 1, "%s: the all -inf draw gave a token", c->name);
    *bad += mism;
    *total += DRAWS;
done:
    arena_free(step);
    arena_free(keep);
    free(raw);
    free(hist);
    free(seen);
}

/* Host backends have no kernel: op_sample refuses, t3 draws on the host. */
static void check_host_refusal(void)
{
    struct backend *cpu = backend_cpu_create(1);
    struct arena *a = cpu ? arena_create(cpu, 0) : NULL;
    CHECK(a != NULL, "cpu backend");
    if (a) {
        const int64_t one[1] = {1}, four[1] = {4}, nv[1] = {8}, nl[2] = {1, 8};
        struct tensor *out = arena_tensor(a, TYPE_I32, 1, one), *seen = arena_tensor(a, TYPE_I32, 1, nv);
        struct tensor *rng = arena_tensor(a, TYPE_I32, 1, four), *l = arena_tensor(a, TYPE_F32, 2, nl);
        struct sample_params sp = {SAMPLE_TURBO, 0, 0, 1, false, 0, 0, 1};
        cbx_status rc = op_sample(a, out, l, seen, rng, &sp);
        CHECK(rc == CBX_ERR_UNSUPPORTED, "op_sample on cpu: %s, want unsupported", cbx_status_str(rc));
        printf("  cpu: op_sample refused (%s): t3 draws on the host\n", arena_errmsg(a));
    }
    arena_free(a);
    backend_cpu_free(cpu);
}

int main(int argc, char **argv)
{
    const bool require = argc > 1 && strcmp(argv[1], "--require-cuda") == 0;
    check_host_refusal();
    struct backend *be = NULL;
    char err[ERR_MAX] = "no CUDA in this build";
#ifdef CBX_HAVE_CUDA
    be = backend_create("cuda", 0, false, err);
#endif
    if (!be) {
        printf("device draw not tested: %s\n", err);
        CHECK(!require, "--require-cuda: %s", err);
        return test_summary();
    }
    int bad = 0, total = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(be, &cases[i], &bad, &total);
    printf("cuda: %d of %d draws differ from the host's\n", bad, total);
    backend_free(be);
    return test_summary();
}
