/* parity_turbo_t3_kvq8.c - a Q8_0 KV cache in the quantised T3 (gpt2.h
 * kv_type TYPE_Q8_0: 32 int8 and an F16 scale per 32 values).
 *
 * With the fixture's conditioning and text, Q4_0 weights, greedy, 64
 * sampled tokens:
 *   - Q8_0 cache vs F32 cache (the same Q4_0 weights): tokens matching
 *     (printed, at least MIN_MATCH of the first 64, in order) and the max
 *     abs difference of the raw logits over the steps whose histories agree
 *     (printed, nonzero, at most MAX_DLOGIT); printed beside it for scale:
 *     the F16 cache's difference, and the step-0 difference between the
 *     Q4_0 and the F32 weights (both F32 caches). The step-0 Q8_0 cache
 *     error must stay below Q8_REL_TO_WEIGHTS of the weights' one (not
 *     checked when the two loads hold the same weights: a Q4_0 file);
 *   - gpt2_kv_save / gpt2_kv_restore with a Q8_0 cache: save holds the
 *     cache's Q8_0 blocks (printed: their dequantised values' difference
 *     from an F32 cache's, at most 5% of the largest value), restore
 *     writes back the same bytes, and save -> restore -> save gives the
 *     same bytes (exact); a decode step from the restored cache equals one
 *     from the original, bit for bit;
 *   - a voice prefix (t3_prefix_build: prefill, save; then restore in
 *     t3_inference_turbo_prefixed) gives the tokens and logits of the run
 *     without one, bit for bit, as with F32 and F16 caches.
 * CBX_KVQ8_MODEL=<dir or .gguf> runs the same on another Turbo model (the
 * real weights) in place of the synthetic one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/quant.h"
#include "io/model_file.h"
#include "io/npy.h"
#include "t3/t3.h"
#include "testutil.h"

enum { STEPS = 64, MIN_MATCH = 16 };
#define MAX_DLOGIT 0.25
#define Q8_REL_TO_WEIGHTS 0.25

static struct npy load(const char *name) { return test_fixture("turbo", name); }

#include "t3_greedy_run.inc"

static double max_diff(const float *a, const float *b, size_t n, double *amax)
{
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs((double)a[i] - b[i]) > d) d = fabs((double)a[i] - b[i]);
        if (fabs((double)b[i]) > m) m = fabs((double)b[i]);
    }
    if (amax) *amax = m;
    return d;
}

/* cache of type kt filled with the prefill of x; its first n positions saved to dst */
static bool prefill_save(struct backend *be, const struct t3_backbone *g0, enum dtype kt, const struct tensor *x, int cap,
                         struct arena *cache, struct kv_cache *kv, void *dst)
{
    struct t3_backbone g = *g0;
    g.kv_type = kt;
    struct arena *a = arena_create(be, 0);
    bool ok = a && t3_backbone_kv_init(&g, kv, 1, cache, cap) == CBX_OK && t3_backbone_prefill_kv(a, &g, kv, x) == CBX_OK;
    ok = ok && kv_cache_save(a, kv, kv->n_past, dst) == CBX_OK;
    CHECK(ok, "prefill and save with a %s cache: %s", dtype_name(kt), a ? arena_errmsg(a) : "no arena");
    arena_free(a);
    return ok;
}

/* ln_f output of one decode step of x (position row of x) on kv, to host */
static float *step(struct backend *be, const struct t3_backbone *g, struct kv_cache *kv, const struct tensor *x)
{
    struct arena *a = arena_create(be, 0);
    struct tensor *h = a ? t3_backbone_forward(a, g, kv, op_slice(a, x, 1, 3, 1)) : NULL;
    float *y = h ? test_host_copy(a, h) : NULL;
    CHECK(y != NULL, "decode step: %s", a ? arena_errmsg(a) : "no arena");
    arena_free(a);
    return y;
}

static void save_restore(struct backend *be, const struct t3_model *mq, const struct t3_cond *c, const struct npy *text)
{
    const struct t3_backbone *g = &mq->tfmr;
    struct arena *xa = arena_create(be, 0);
    struct tensor *x = xa ? t3_prepare_input_embeds(xa, mq, c, text->data, test_numel(text), 1) : NULL;
    CHECK(x != NULL, "input embeddings");
    if (!x) {
        arena_free(xa);
        return;
    }
    const int n = (int)x->ne[1], cap = n + 4;
    struct t3_backbone gq = *g, gf = *g;
    gq.kv_type = TYPE_Q8_0;
    gf.kv_type = TYPE_F32;
    const size_t nf = 2 * (size_t)g->n_layer * (size_t)n * (size_t)g->d_model, nb = t3_backbone_kv_bytes(&gq, n);
    CHECK(t3_backbone_kv_bytes(&gf, n) == nf * sizeof(float) && nb == nf / 32 * sizeof(struct block_q8_0),
          "gpt2_kv_bytes: %zu (F32), %zu (Q8_0) for %zu values", t3_backbone_kv_bytes(&gf, n), nb, nf);
    unsigned char *s8 = malloc(nb), *s8b = malloc(nb);
    float *s32 = malloc(nf * sizeof *s32), *d8 = malloc(nf * sizeof *d8);
    struct arena *c8 = arena_create(be, 0), *c32 = arena_create(be, 0), *c8b = arena_create(be, 0);
    struct kv_cache k8, k32, k8b;
    bool ok = s8 && s32 && s8b && d8 && c8 && c32 && c8b && prefill_save(be, g, TYPE_Q8_0, x, cap, c8, &k8, s8) &&
              prefill_save(be, g, TYPE_F32, x, cap, c32, &k32, s32);
    CHECK(ok, "setup");
    if (ok) {
        dequantize_row(TYPE_Q8_0, s8, d8, (int64_t)nf);
        double amax, d = max_diff(d8, s32, nf, &amax);
        /* each layer's keys and values also carry the earlier layers'
         * cache error (the prefill attends over the cache), so this is
         * more than one rounding */
        printf("kv save, Q8_0 vs F32 cache after a %d-position prefill: max |dkv| %.3g (max |kv| %.3g, rel %.3g)\n", n,
               d, amax, amax > 0 ? d / amax : 0);
        CHECK(d > 0 && d <= 0.05 * amax, "Q8_0 cache values: max |d| %.3g, max |kv| %.3g (want 0 < d <= 5%%)", d, amax);
        /* restore into a fresh Q8_0 cache, save again */
        struct arena *a = arena_create(be, 0);
        ok = a && t3_backbone_kv_init(&gq, &k8b, 1, c8b, cap) == CBX_OK && kv_cache_restore(a, &k8b, n, s8, false) == CBX_OK &&
             kv_cache_save(a, &k8b, n, s8b) == CBX_OK;
        CHECK(ok, "restore and save again: %s", a ? arena_errmsg(a) : "no arena");
        arena_free(a);
        if (ok) {
            size_t ndiff = 0;
            for (size_t i = 0; i < nb; i++) ndiff += s8[i] != s8b[i];
            printf("save -> restore -> save (Q8_0): %zu of %zu bytes differ\n", ndiff, nb);
            CHECK(ndiff == 0, "save -> restore -> save: %zu of %zu bytes differ", ndiff, nb);
            /* the restored bytes are the prefilled ones */
            int64_t rows = 0, bad = 0;
            for (int il = 0; il < g->n_layer; il++)
                for (int s = 0; s < 2; s++) {
                    const struct tensor *t0 = s ? k8.v[il] : k8.k[il], *t1 = s ? k8b.v[il] : k8b.k[il];
                    char *h0 = test_host_bytes(t0), *h1 = test_host_bytes(t1);
                    for (int64_t h = 0; h0 && h1 && h < t0->ne[1]; h++)
                        for (int64_t j = 0; j < n; j++, rows++)
                            bad += memcmp(h0 + h * t0->nb[1] + j * t0->nb[2], h1 + h * t1->nb[1] + j * t1->nb[2],
                                          (size_t)t0->nb[2]) != 0;
                    if (!h0 || !h1) bad++;
                    free(h0);
                    free(h1);
                }
            printf("restored Q8_0 cache: %lld of %lld rows differ from the prefilled bytes\n", (long long)bad,
                   (long long)rows);
            CHECK(bad == 0, "restored Q8_0 cache: %lld of %lld rows differ", (long long)bad, (long long)rows);
            float *y0 = step(be, &gq, &k8, x), *y1 = step(be, &gq, &k8b, x);
            if (y0 && y1) {
                double dd = max_diff(y0, y1, (size_t)g->d_model, NULL);
                printf("decode step from the restored vs the prefilled Q8_0 cache: max |d| %.3g\n", dd);
                CHECK(dd == 0, "decode step after restore differs: %.3g", dd);
            }
            free(y0);
            free(y1);
        }
    }
    free(s8);
    free(s32);
    free(s8b);
    free(d8);
    arena_free(c8);
    arena_free(c32);
    arena_free(c8b);
    arena_free(xa);
}

int main(void)
{
    struct model *md = test_open_model_env("CBX_KVQ8_MODEL", "turbo");
    struct t3_model m, mq;
    if (!md || !test_load_t3_f32_q4(md, &m, &mq)) return test_summary();
    const enum dtype kv_default = mq.tfmr.kv_type;

    struct npy spk = load("ve_embedding"), prompt = load("t3_cond_prompt_tokens"), text = load("text_tokens");
    struct t3_cond cond = {spk.data, prompt.data, test_numel(&prompt), 0.0f};
    struct backend *cpu = test_compute_backend(0);
    CHECK(cpu != NULL, "backend");

    struct run r8 = {0}, r16 = {0}, r32 = {0}, rf = {0}, rp = {0};
    mq.tfmr.kv_type = TYPE_Q8_0;
    bool ok = cpu && run(&mq, cpu, &cond, NULL, &text, NULL, &r8);
    mq.tfmr.kv_type = TYPE_F16;
    ok = ok && run(&mq, cpu, &cond, NULL, &text, NULL, &r16);
    mq.tfmr.kv_type = TYPE_F32;
    ok = ok && run(&mq, cpu, &cond, NULL, &text, NULL, &r32);
    /* the F32 weights with an F32 cache; a Q4_0 file loads as stored both
     * times, so there is no weight error to compare with */
    const bool f32w = m.tfmr.gpt2[0].c_attn_w->type == TYPE_F32;
    m.tfmr.kv_type = TYPE_F32;
    ok = ok && run(&m, cpu, &cond, NULL, &text, NULL, &rf);
    if (ok) {
        const size_t V = (size_t)r8.V;
        double d8 = max_diff(r8.logits, r32.logits, V, NULL), d16 = max_diff(r16.logits, r32.logits, V, NULL);
        double dw = max_diff(r32.logits, rf.logits, V, NULL);
        printf("step 0 (after the prefill): max |dlogit| vs an F32 cache: Q8_0 cache %.3g, F16 cache %.3g; "
               "Q4_0 vs F32 weights %s%.3g\n", d8, d16, f32w ? "" : "(not F32: the file's weights twice) ", dw);
        if (f32w)
            CHECK(d8 < Q8_REL_TO_WEIGHTS * dw, "step 0: Q8_0 cache error %.3g not below %.2f x the Q4_0 weights' %.3g",
                  d8, Q8_REL_TO_WEIGHTS, dw);
        int64_t n = r8.rows < r32.rows ? r8.rows : r32.rows, match = 0, agree = 0, same = 0;
        while (match < n && r8.tok[match] == r32.tok[match]) match++;
        for (int64_t i = 0; i < n; i++) same += r8.tok[i] == r32.tok[i];
        /* logits of step i depend on tokens < i: compare while they agree */
        double dmax = 0, lmax = 0, d16max = 0;
        for (int64_t i = 0; i < n && i <= match; i++, agree++) {
            double lm, a = max_diff(r8.logits + i * r8.V, r32.logits + i * r32.V, V, &lm);
            if (a > dmax) dmax = a;
            if (lm > lmax) lmax = lm;
        }
        int64_t m16 = 0;
        while (m16 < n && r16.tok[m16] == r32.tok[m16]) m16++;
        for (int64_t i = 0; i < n && i <= m16; i++) {
            double a = max_diff(r16.logits + i * r16.V, r32.logits + i * r32.V, V, NULL);
            if (a > d16max) d16max = a;
        }
        printf("q4_0 greedy, Q8_0 vs F32 cache: %lld of %lld tokens equal, first %lld in order; max |dlogit| %.3g "
               "over %lld steps (max |logit| %.3g); F16 vs F32 cache: first %lld in order, max |dlogit| %.3g\n",
               (long long)same, (long long)n, (long long)match, dmax, (long long)agree, lmax, (long long)m16, d16max);
        CHECK(n == STEPS, "%lld steps, want %d", (long long)n, STEPS);
        CHECK(match >= MIN_MATCH, "only the first %lld tokens match", (long long)match);
        CHECK(dmax > 0, "Q8_0 and F32 caches give identical logits: Q8_0 cache not used?");
        CHECK(dmax <= MAX_DLOGIT, "max |dlogit| %.3g > %.3g", dmax, MAX_DLOGIT);
    }
    if (ok) save_restore(cpu, &mq, &cond, &text);
    /* a voice prefix with a Q8_0 cache: bit for bit the run without */
    if (ok) {
        char err[ERR_MAX] = "";
        struct t3_prefix *pfx = NULL;
        mq.tfmr.kv_type = TYPE_Q8_0;
        cbx_status rc = t3_prefix_build(&mq, cpu, &cond, &pfx, err);
        CHECK(rc == CBX_OK, "t3_prefix_build: %s", err);
        if (rc == CBX_OK && run(&mq, cpu, &cond, pfx, &text, NULL, &rp)) {
            bool same = rp.rows == r8.rows && !memcmp(rp.tok, r8.tok, sizeof(int32_t) * (size_t)rp.rows) &&
                        !memcmp(rp.logits, r8.logits, sizeof(float) * (size_t)rp.rows * (size_t)rp.V);
            printf("voice prefix with a Q8_0 cache: %s the run without\n", same ? "bit for bit" : "differs from");
            CHECK(same, "prefixed run with a Q8_0 cache differs from the run without a prefix");
        }
        t3_prefix_free(pfx);
    }
    mq.tfmr.kv_type = kv_default;
    free(r8.logits);
    free(r16.logits);
    free(r32.logits);
    free(rf.logits);
    free(rp.logits);
    io_npy_free(&spk); io_npy_free(&prompt); io_npy_free(&text);
    backend_free(cpu);
    test_free_t3_f32_q4(md, &m, &mq);
    return test_summary();
}
