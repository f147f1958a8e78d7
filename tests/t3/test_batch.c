/* test_batch.c - batched decode (t3.h, t3_batch_step): sequences decoded
 * together give, token for token, what each gives decoded alone.
 *
 * On the synthetic Turbo (GPT-2, one row per sequence; F32 weights and the
 * same weights at Q4_0, whose batched rows would take the quantised GEMM
 * path without row-exact products) and English (Llama + CFG, two rows per
 * sequence; one sequence with cfg_weight 0, one row) models: four
 * sequences with different texts, seeds, sampling and token caps, joining
 * the batch at different steps (each after its own prefill) and leaving
 * when done (up to five at once: from 5 rows up the Q4_0 products would
 * take the quantised GEMM otherwise); one more sequence is cancelled by its callback mid-way and
 * must leave without disturbing the others. Each sequence's tokens are
 * compared with t3_inference_prefixed's for the same input (solo; on the
 * GPU its recorded graph and the draw on the device), and the number of
 * rows the batched forwards carried is printed. On the backend of
 * CBX_TEST_BACKEND (cpu by default; cuda on the GPU machine, where five
 * rows take the decode GEMVs four rows a launch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/rng.h"
#include "pipeline/engine.h"
#include "t3/t3.h"
#include "testutil.h"
#include "voice/conds.h"

#define N_SEQ 5 /* the last one is cancelled */
#define CANCEL_AT 6

struct spec {
    int join;       /* batch step at which it joins */
    int n_text;
    uint64_t seed;
    int max_gen;
    bool greedy;
    double cfg;     /* Llama only */
};

static int cancel_cb(void *user, int step, int32_t token, const float *logits, int n_rows, int64_t V)
{
    (void)user; (void)token; (void)logits; (void)n_rows; (void)V;
    return step >= CANCEL_AT;
}

static void run_model(const char *dir, int wtype, const char *label)
{
    char err[ERR_MAX] = "";
    /* the test's backend (CBX_TEST_BACKEND): the scheduler's batched step
     * on a shared cpu pool or on the GPU */
    struct engine_model *em = test_load_engine_t3(dir, test_backend_name(), wtype, label);
    if (!em) return;
    cbx_status rc = CBX_OK;
    const struct t3_model *m = engine_model_t3(em);
    const struct conds *v = engine_model_voice(em);
    CHECK(v != NULL, "%s: built-in voice", label);
    struct backend *be = backend_create(test_backend_name(), test_n_threads(), true, err);
    struct t3_batch *b = t3_batch_create(be);
    CHECK(be && b, "%s: backend and batch: %s", label, err);
    if (!v || !be || !b) goto done;
    const struct t3_cond c = {v->speaker_emb, v->cond_prompt_tokens, v->n_cond_prompt, v->emotion_adv};
    struct t3_prefix *pfx = NULL;
    rc = t3_prefix_build(m, be, &c, &pfx, err);
    CHECK(rc == CBX_OK, "%s: prefix: %s", label, err);
    if (rc != CBX_OK) goto done;
    const bool cfg = m->order == T3_ORDER_CFG;
    const struct spec sp[N_SEQ] = {
        {0, 7, 11, 40, false, 0.5},
        {0, 12, 22, 25, true, 0.5},
        {3, 4, 33, 33, false, 0.0},
        {4, 9, 44, 30, false, 0.7},
        {2, 6, 55, 40, false, 0.5},
    };
    int32_t *text[N_SEQ] = {0}, *solo[N_SEQ] = {0};
    int64_t n_solo[N_SEQ] = {0};
    struct t3_gen_params gp[N_SEQ];
    struct t3_seq *seq[N_SEQ] = {0};
    for (int i = 0; i < N_SEQ; i++) {
        text[i] = malloc(sizeof(int32_t) * (size_t)(sp[i].n_text + 2));
        CHECK(text[i] != NULL, "alloc");
        if (!text[i]) goto free_seqs;
        struct rng_stream rs;
        rng_stream_init(&rs, "test.text", 1000 + (uint64_t)i);
        int k = 0;
        if (cfg) text[i][k++] = m->hp.start_text;
        for (int j = 0; j < sp[i].n_text; j++)
            text[i][k++] = (int32_t)(rng_next_m24(&rs) % (uint32_t)(m->hp.text_vocab - 1)) + 1;
        if (cfg) text[i][k++] = m->hp.stop_text;
        gp[i] = t3_gen_default_params(m);
        gp[i].seed = sp[i].seed;
        gp[i].max_gen_len = sp[i].max_gen;
        if (sp[i].greedy) gp[i].s.top_k = 1;
        if (cfg) gp[i].cfg_weight = sp[i].cfg;
        const int64_t nt = sp[i].n_text + (cfg ? 2 : 0);
        if (i < N_SEQ - 1) {
            rc = t3_inference_prefixed(m, be, pfx, text[i], nt, &gp[i], NULL, NULL, &solo[i], &n_solo[i], err);
            CHECK(rc == CBX_OK, "%s: solo %d: %s", label, i, err);
        }
    }
    /* the batch: joins at their steps, leaves when done */
    int64_t rows_total = 0, steps = 0, max_rows = 0;
    bool cancelled = false;
    for (int step = 0; step < 2000; step++) {
        struct t3_seq *act[N_SEQ];
        int idx[N_SEQ], n = 0;
        for (int i = 0; i < N_SEQ; i++) {
            if (!seq[i] && step == sp[i].join) {
                const int64_t nt = sp[i].n_text + (cfg ? 2 : 0);
                rc = t3_seq_start(m, be, NULL, pfx, text[i], nt, &gp[i], i == N_SEQ - 1 ? cancel_cb : NULL,
                                  NULL, &seq[i], err);
                CHECK(rc == CBX_OK, "%s: start %d: %s", label, i, err);
                if (rc != CBX_OK) goto free_seqs;
            }
            if (seq[i] && !t3_seq_done(seq[i])) {
                idx[n] = i;
                act[n++] = seq[i];
            }
        }
        bool later = false;
        for (int i = 0; i < N_SEQ; i++) later = later || sp[i].join > step;
        if (n == 0 && !later) break;
        int32_t tok[N_SEQ];
        cbx_status rcs[N_SEQ];
        int rows = 0;
        for (int j = 0; j < n; j++) rows += cfg && gp[idx[j]].cfg_weight != 0 ? 2 : 1;
        rc = t3_batch_step(b, act, n, tok, rcs, err);
        CHECK(rc == CBX_OK, "%s: batch step %d: %s", label, step, err);
        if (rc != CBX_OK) goto free_seqs;
        for (int j = 0; j < n; j++) {
            if (idx[j] == N_SEQ - 1) {
                if (rcs[j] == CBX_ERR_CANCELLED) cancelled = true;
                else CHECK(rcs[j] == CBX_OK, "%s: cancelled sequence's step: %d", label, rcs[j]);
            } else {
                CHECK(rcs[j] == CBX_OK, "%s: sequence %d step %d: %d", label, idx[j], step, rcs[j]);
            }
        }
        if (n > 0) {
            rows_total += rows;
            steps++;
            if (rows > max_rows) max_rows = rows;
        }
    }
    CHECK(cancelled && t3_seq_done(seq[N_SEQ - 1]), "%s: the cancelled sequence left", label);
    printf("%s: %lld batch steps, %.2f rows per step on average, up to %lld\n", label, (long long)steps,
           steps ? (double)rows_total / (double)steps : 0.0, (long long)max_rows);
    CHECK(max_rows >= 5, "%s: the batch ran %lld rows at once at most", label, (long long)max_rows);
    for (int i = 0; i < N_SEQ - 1; i++) {
        int32_t *tk = NULL;
        int64_t nk = 0;
        rc = t3_seq_tokens(seq[i], &tk, &nk, err);
        CHECK(rc == CBX_OK, "%s: tokens %d: %s", label, i, err);
        int64_t first = -1;
        for (int64_t j = 0; rc == CBX_OK && j < nk && j < n_solo[i]; j++)
            if (tk[j] != solo[i][j]) {
                first = j;
                break;
            }
        printf("%s: sequence %d (join %d, seed %llu, cfg %.1f): %lld tokens batched, %lld alone, first "
               "difference at %lld\n", label, i, sp[i].join, (unsigned long long)sp[i].seed, cfg ? sp[i].cfg : 0.0,
               (long long)nk, (long long)n_solo[i], (long long)first);
        CHECK(rc == CBX_OK && nk == n_solo[i] && first < 0, "%s: sequence %d batched == alone", label, i);
        CHECK(nk >= 3, "%s: sequence %d made %lld tokens (want a few)", label, i, (long long)nk);
        free(tk);
    }
free_seqs:
    for (int i = 0; i < N_SEQ; i++) {
        t3_seq_free(seq[i]);
        free(text[i]);
        free(solo[i]);
    }
    t3_prefix_free(pfx);
done:
    t3_batch_free(b);
    backend_free(be);
    engine_model_free(em);
}

int main(void)
{
    char turbo[4096], english[4096];
    snprintf(turbo, sizeof turbo, "%s/models/turbo", CBX_BINARY_DIR);
    snprintf(english, sizeof english, "%s/models/english", CBX_BINARY_DIR);
    run_model(turbo, -1, "turbo f32");
    run_model(turbo, TYPE_Q4_0, "turbo q4_0");
    run_model(english, -1, "english f32");
    run_model(english, TYPE_Q4_0, "english q4_0");
    return test_summary();
}
