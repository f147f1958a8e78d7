/* parity_turbo_t3_prefix.c - the T3 voice-prefix cache (t3.h, t3_prefix):
 * a run that restores a prebuilt prefix gives the same tokens and logits as
 * one without it.
 *
 * For the fixture's conditioning (speaker embedding + 250 prompt tokens)
 * and three texts (the fixture's 20 ids, a short sentence of < 16 tokens,
 * whose prefill takes the dot-product path of op_linear, and a long one of
 * > 16 tokens, which takes the sgemm path), three runs each:
 *   one_pass  [cond; text; start] in one forward, upstream's shape;
 *   uncached  t3_inference_turbo: prefix pass then text pass, no cache;
 *   cached    t3_inference_turbo_prefixed with one prefix built once and
 *             shared by every text.
 * Checks: cached == uncached bit for bit (logits of every step, tokens);
 * cached vs one_pass: tokens identical, logits within the T3 parity
 * tolerance (rel 1e-4), max abs difference printed. Greedy for every text,
 * upstream's sampling (seed 42) for the fixture text; the fixture tokens
 * are checked too. The same at Q4_0 weights for one text (cached ==
 * uncached bit for bit; the difference to one_pass is printed: there a
 * short text's prefill multiplies Q8_0-quantised activations, the one-pass
 * prefill F32 ones). Plus t3_prefix_matches and the wrong-model error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "io/model_file.h"
#include "io/npy.h"
#include "t3/t3.h"
#include "testutil.h"
#include "text/gpt2_bpe.h"

#define MAX_GEN 15 /* 16 sampled tokens per run */

static struct npy load(const char *name) { return test_fixture("turbo", name); }

struct run {
    float *logits; /* [rows][V] raw logits per step */
    int64_t rows, V;
    int32_t *tok;
    int64_t n;
};

static int record(void *user, int step, int32_t token, const float *logits, int n_rows, int64_t V)
{
    (void)n_rows;
    (void)token;
    struct run *r = user;
    if (step <= MAX_GEN) {
        memcpy(r->logits + (size_t)step * (size_t)V, logits, sizeof(float) * (size_t)V);
        r->rows = step + 1;
    }
    return 0;
}

enum mode { ONE_PASS, UNCACHED, CACHED };

static bool run(const struct t3_model *m, const struct backend *be, const struct t3_cond *c,
                const struct t3_prefix *pfx, const int32_t *text, int64_t n_text, bool greedy,
                enum mode mode, struct run *r)
{
    char err[ERR_MAX] = "";
    struct t3_gen_params p = t3_gen_default_params(NULL);
    p.host_logits = true; /* record() keeps them */
    if (greedy) p.s.top_k = 1;
    p.max_gen_len = MAX_GEN;
    p.seed = 42;
    p.one_pass = mode == ONE_PASS;
    r->V = m->hp.speech_vocab;
    r->rows = 0;
    r->logits = calloc((size_t)(MAX_GEN + 1) * (size_t)r->V, sizeof(float));
    cbx_status rc = mode == CACHED
        ? t3_inference_prefixed(m, be, pfx, text, n_text, &p, record, r, &r->tok, &r->n, err)
        : t3_inference(m, be, c, text, n_text, &p, record, r, &r->tok, &r->n, err);
    CHECK(rc == CBX_OK, "T3 run (mode %d): %s", (int)mode, err);
    return rc == CBX_OK;
}

static void run_free(struct run *r)
{
    free(r->logits);
    free(r->tok);
    memset(r, 0, sizeof *r);
}

/* max |a - b| over the common steps */
static double max_diff(const struct run *a, const struct run *b, int64_t *rows)
{
    *rows = a->rows < b->rows ? a->rows : b->rows;
    double d = 0;
    for (size_t i = 0; i < (size_t)(*rows * a->V); i++) {
        double e = fabs((double)a->logits[i] - (double)b->logits[i]);
        if (e > d || isnan(e)) d = isnan(e) ? INFINITY : e;
    }
    return d;
}

static bool same_tokens(const struct run *a, const struct run *b)
{
    return a->n == b->n && !memcmp(a->tok, b->tok, sizeof(int32_t) * (size_t)a->n);
}

/* The three runs of one text; tol_one_pass < 0: only report one_pass. */
static void compare(const char *what, const struct t3_model *m, const struct backend *be,
                    const struct t3_cond *c, const struct t3_prefix *pfx, const int32_t *text,
                    int64_t n_text, bool greedy, double tol_one_pass, const struct npy *want)
{
    struct run one = {0}, unc = {0}, cac = {0};
    if (run(m, be, c, pfx, text, n_text, greedy, ONE_PASS, &one) &&
        run(m, be, c, pfx, text, n_text, greedy, UNCACHED, &unc) &&
        run(m, be, c, pfx, text, n_text, greedy, CACHED, &cac)) {
        int64_t rows, rows1;
        double d = max_diff(&cac, &unc, &rows), d1 = max_diff(&cac, &one, &rows1);
        double scale = 0;
        for (size_t i = 0; i < (size_t)(rows1 * one.V); i++)
            if (fabs(one.logits[i]) > scale) scale = fabs(one.logits[i]);
        const bool t_unc = same_tokens(&cac, &unc), t_one = same_tokens(&cac, &one);
        printf("%-44s %2lld text ids, %lld tokens | cached vs uncached: max_abs %.3e over %lld steps, tokens %s"
               " | cached vs one-pass: max_abs %.3e rel %.3e, tokens %s\n",
               what, (long long)n_text, (long long)cac.n, d, (long long)rows, t_unc ? "identical" : "DIFFER",
               d1, scale > 0 ? d1 / scale : d1, t_one ? "identical" : "differ");
        CHECK(d == 0 && rows == cac.n && rows == unc.n, "%s: cached logits differ from uncached (%.3e)", what, d);
        CHECK(t_unc, "%s: cached tokens differ from uncached", what);
        if (tol_one_pass >= 0) {
            CHECK(t_one, "%s: cached tokens differ from the one-pass prefill", what);
            CHECK(scale > 0 && d1 / scale <= tol_one_pass, "%s: cached vs one-pass logits rel %.3e > %.1e", what,
                  d1 / scale, tol_one_pass);
        }
        if (want) {
            int64_t nw = test_numel(want), k = 0;
            const int32_t *w = want->data;
            while (k < cac.n && k < nw && cac.tok[k] == w[k]) k++;
            printf("%-44s fixture tokens: identical prefix %lld of %lld (cached run)\n", what, (long long)k,
                   (long long)cac.n);
            CHECK(k == cac.n && k > 0, "%s: cached tokens leave the fixture at %lld", what, (long long)k);
        }
    }
    run_free(&one);
    run_free(&unc);
    run_free(&cac);
}

int main(void)
{
    char err[ERR_MAX] = "";
    const char *dir = test_model_dir("turbo");
    struct model *md = test_open_model(dir);
    struct t3_model m, mq;
    if (!md || !test_load_t3_f32_q4(md, &m, &mq)) return test_summary();
    struct gpt2_bpe *tok = NULL;
    cbx_status rct = gpt2_bpe_load_dir(dir, &tok, err);
    CHECK(rct == CBX_OK, "tokenizer: %s", err);
    if (rct != CBX_OK) return test_summary();

    struct npy spk = load("ve_embedding"), prompt = load("t3_cond_prompt_tokens"), text = load("text_tokens");
    struct npy want_gt = load("t3_greedy_tokens"), want_st = load("t3_sampled_tokens");
    struct t3_cond cond = {spk.data, prompt.data, test_numel(&prompt), 0.0f};
    struct backend *cpu = test_compute_backend(0);

    /* one prefix per model, shared by every text */
    struct t3_prefix *pfx = NULL, *pfxq = NULL;
    cbx_status rc = t3_prefix_build(&m, cpu, &cond, &pfx, err);
    CHECK(rc == CBX_OK, "t3_prefix_build: %s", err);
    cbx_status rcq = t3_prefix_build(&mq, cpu, &cond, &pfxq, err);
    CHECK(rcq == CBX_OK, "t3_prefix_build q4_0: %s", err);
    if (rc == CBX_OK && rcq == CBX_OK) {
        printf("prefix: %d positions, %.1f MB\n", pfx->n, (double)pfx->bytes / 1e6);
        CHECK(pfx->n == 1 + test_numel(&prompt), "prefix of %d positions", pfx->n);

        /* the voice check */
        CHECK(t3_prefix_matches(pfx, &m, &cond), "prefix matches its own conditioning");
        CHECK(!t3_prefix_matches(pfx, &mq, &cond), "prefix of another model must not match");
        float *spk2 = malloc(sizeof(float) * 256);
        memcpy(spk2, spk.data, sizeof(float) * 256);
        spk2[255] += 1e-3f;
        struct t3_cond c2 = {spk2, prompt.data, test_numel(&prompt), 0.0f};
        CHECK(!t3_prefix_matches(pfx, &m, &c2), "another speaker embedding must not match");
        c2.speaker_emb = spk.data;
        c2.n_prompt--;
        CHECK(!t3_prefix_matches(pfx, &m, &c2), "a shorter prompt must not match");
        free(spk2);
        int32_t *t = NULL;
        int64_t n = 0;
        struct t3_gen_params gp = t3_gen_default_params(NULL);
        rc = t3_inference_prefixed(&m, cpu, pfxq, text.data, test_numel(&text), &gp, NULL, NULL, &t, &n, err);
        CHECK(rc == CBX_ERR_INVALID_ARG && !t, "a prefix of another model is refused (%s)", err);

        int32_t *ids_s = NULL, *ids_l = NULL;
        int64_t n_s = 0, n_l = 0;
        gpt2_bpe_encode(tok, "Hello there, how are you?", &ids_s, &n_s, err);
        gpt2_bpe_encode(tok, "The quick brown fox jumps over the lazy dog, and then, after a short rest in "
                             "the warm afternoon sun, it runs back across the green field.",
                        &ids_l, &n_l, err);
        CHECK(n_s > 0 && n_s + 1 < 16 && n_l + 1 > 16, "text sizes %lld and %lld", (long long)n_s, (long long)n_l);

        compare("fixture text, greedy", &m, cpu, &cond, pfx, text.data, test_numel(&text), true, 1e-4, &want_gt);
        compare("fixture text, sampled (seed 42)", &m, cpu, &cond, pfx, text.data, test_numel(&text), false, 1e-4,
                &want_st);
        compare("short text, greedy", &m, cpu, &cond, pfx, ids_s, n_s, true, 1e-4, NULL);
        compare("long text, greedy", &m, cpu, &cond, pfx, ids_l, n_l, true, 1e-4, NULL);
        compare("q4_0: short text, greedy", &mq, cpu, &cond, pfxq, ids_s, n_s, true, -1, NULL);
        free(ids_s);
        free(ids_l);
    }
    t3_prefix_free(pfx);
    t3_prefix_free(pfxq);
    io_npy_free(&spk); io_npy_free(&prompt); io_npy_free(&text);
    io_npy_free(&want_gt); io_npy_free(&want_st);
    gpt2_bpe_free(tok);
    backend_free(cpu);
    test_free_t3_f32_q4(md, &m, &mq);
    return test_summary();
}
