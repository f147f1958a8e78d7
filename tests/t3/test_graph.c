/* test_graph.c - the decode step of fixed shapes (kv_cache.h invariant 5)
 * and its replay as a backend graph (backend.h): a sequence decoded with
 * the backend's graphs gives the same logits, bit for bit, at every step
 * as the same sequence decoded with ordinary steps, and the same tokens.
 *
 * On the test backend ($CBX_TEST_BACKEND, test_backend()): the synthetic
 * Turbo (GPT-2, F32 and Q4_0 weights: an F32 and a Q8_0 KV cache) and
 * English (Llama, a CFG pair of rows) models, seeded sampling. Both runs
 * compute on one backend: the first with its graphs, the second with its
 * graph hooks cleared. On a backend without graphs (cpu)
 * both runs are ordinary steps and the test says so; with
 * --require-graphs (the "cuda" label) it then fails, and it checks that
 * every step after the second was a replay.
 *
 * A third run decodes with the graphs and without host logits: on a
 * backend that draws on the device (op_sample) every replayed step then
 * ends in its draw there and only the id comes back; its tokens must be
 * the second run's.
 *
 * A fourth run makes the backend's transfers fail from the 10th on (a
 * device that faults mid-utterance): the sequence must stop
 * with an error, not decode on stale or NaN operands. A host backend's
 * copies are memcpy, which cannot fail, and its steps take the host's
 * path (no transfers): there the run is not made (the op-level case,
 * core_shape, fakes a faulted device on the cpu). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/rng.h"
#include "pipeline/engine.h"
#include "t3/t3.h"
#include "testutil.h"
#include "voice/conds.h"

#define MAX_GEN 48

struct trace {
    float *logits; /* [MAX_GEN + 1][rows][V] */
    int64_t V;
    int rows, n;
    int dev; /* steps drawn on the device (the callback had no logits) */
};

static int keep_logits(void *user, int step, int32_t token, const float *logits, int n_rows, int64_t V)
{
    (void)token;
    struct trace *t = user;
    if (step > MAX_GEN || n_rows != t->rows || V != t->V) return 0;
    t->n = step + 1;
    if (!logits) {
        t->dev++;
        return 0;
    }
    memcpy(t->logits + (size_t)step * (size_t)(n_rows * V), logits, sizeof(float) * (size_t)(n_rows * V));
    return 0;
}

/* One sequence on be: its tokens, logits (t) and replayed steps. */
static cbx_status decode(const struct t3_model *m, const struct backend *be, const struct t3_cond *c,
                         const int32_t *text, int64_t n_text, struct trace *t, int32_t **tok, int64_t *n_tok,
                         int *replays, bool host_logits, char *err)
{
    struct t3_gen_params gp = t3_gen_default_params(m);
    gp.host_logits = host_logits;
    gp.seed = 7;
    gp.max_gen_len = MAX_GEN;
    struct t3_seq *s = NULL;
    cbx_status rc = t3_seq_start(m, be, c, NULL, text, n_text, &gp, keep_logits, t, &s, err);
    int32_t k;
    while (rc == CBX_OK && !t3_seq_done(s)) rc = t3_seq_step(s, &k, err);
    if (rc == CBX_OK) rc = t3_seq_tokens(s, tok, n_tok, err);
    *replays = s ? t3_seq_replays(s) : 0;
    t3_seq_free(s);
    return rc;
}

/* The transfers of the fourth run: the backend's own (called with the
 * backend itself, whose device state follows struct backend) until the
 * 10th */
typedef bool (*transfer_fn)(const struct backend *be, void *dst, const void *src, size_t n);
static transfer_fn real_to_host, real_from_host;
static int n_transfers;
static bool failing_to_host(const struct backend *be, void *dst, const void *src, size_t n)
{
    return ++n_transfers < 10 && real_to_host(be, dst, src, n);
}
static bool failing_from_host(const struct backend *be, void *dst, const void *src, size_t n)
{
    return ++n_transfers < 10 && real_from_host(be, dst, src, n);
}

static void transfer_failure(const struct t3_model *m, struct backend *be, const struct t3_cond *c,
                             const int32_t *text, int64_t n_text, int full, const char *label)
{
    if (be->host) {
        printf("%s on %s: no failed-transfer run (a host backend copies with memcpy)\n", label, be->name);
        return;
    }
    real_to_host = be->to_host;
    real_from_host = be->from_host;
    n_transfers = 0;
    be->to_host = failing_to_host;
    be->from_host = failing_from_host;
    struct trace t = {malloc(sizeof(float) * (size_t)(MAX_GEN + 1) * (size_t)(m->hp.speech_vocab * 2)),
                      m->hp.speech_vocab, m->order == T3_ORDER_CFG ? 2 : 1, 0, 0};
    char err[ERR_MAX] = "";
    int32_t *tok = NULL;
    int64_t n_tok = 0;
    int replays = 0;
    cbx_status rc = t.logits ? decode(m, be, c, text, n_text, &t, &tok, &n_tok, &replays, true, err)
                             : CBX_ERR_NOMEM;
    be->to_host = real_to_host;
    be->from_host = real_from_host;
    printf("%s on %s, transfers failing from the 10th: %s after %d of %d steps (%d transfers): %s\n", label,
           be->name, cbx_status_str(rc), t.n, full, n_transfers, err);
    CHECK(rc == CBX_ERR_INTERNAL && err[0] && t.n < full,
          "%s: a failed transfer stops the sequence with an error (%s after %d of %d steps)", label,
          cbx_status_str(rc), t.n, full);
    free(t.logits);
    free(tok);
}

static void run_model(const char *dir, int wtype, const char *label, bool require)
{
    char err[ERR_MAX] = "";
    struct engine_model *em = test_load_engine_t3(dir, NULL, wtype, label);
    if (!em) return;
    cbx_status rc = CBX_OK;
    const struct t3_model *m = engine_model_t3(em);
    const struct conds *v = engine_model_voice(em);
    struct backend *be = test_compute_backend(test_n_threads());
    struct backend hooks;
    const bool cfg = m->order == T3_ORDER_CFG;
    const int rows = cfg ? 2 : 1;
    const int64_t V = m->hp.speech_vocab;
    struct trace tr[3] = {{NULL, V, rows, 0, 0}, {NULL, V, rows, 0, 0}, {NULL, V, rows, 0, 0}};
    int32_t text[16], *tok[3] = {NULL, NULL, NULL};
    int64_t n_tok[3] = {0, 0, 0};
    int replays[3] = {0, 0, 0};
    CHECK(v && be, "%s: voice and backend", label);
    if (!v || !be) goto done;
    hooks = *be;
    for (int i = 0; i < 3; i++) {
        tr[i].logits = malloc(sizeof(float) * (size_t)(MAX_GEN + 1) * (size_t)(rows * V));
        CHECK(tr[i].logits != NULL, "alloc");
        if (!tr[i].logits) goto done;
    }
    struct rng_stream rs;
    rng_stream_init(&rs, "test.text", 77);
    int n_text = 0;
    if (cfg) text[n_text++] = m->hp.start_text;
    for (int j = 0; j < 10; j++) text[n_text++] = (int32_t)(rng_next_m24(&rs) % (uint32_t)(m->hp.text_vocab - 1)) + 1;
    if (cfg) text[n_text++] = m->hp.stop_text;
    const struct t3_cond c = {v->speaker_emb, v->cond_prompt_tokens, v->n_cond_prompt, v->emotion_adv};
    for (int i = 0; i < 3; i++) {
        const bool off = i == 1; /* the second run without graphs */
        be->graph_begin = off ? NULL : hooks.graph_begin;
        be->graph_end = off ? NULL : hooks.graph_end;
        be->graph_run = off ? NULL : hooks.graph_run;
        be->graph_free = off ? NULL : hooks.graph_free;
        rc = decode(m, be, &c, text, n_text, &tr[i], &tok[i], &n_tok[i], &replays[i], i < 2, err);
        CHECK(rc == CBX_OK, "%s: decode %s graphs: %s", label, off ? "without" : "with", err);
        if (rc != CBX_OK) goto done;
    }
    const bool graphs = be->graph_begin != NULL;
    int first = -1;
    for (int s = 0; s < tr[0].n && s < tr[1].n && first < 0; s++)
        if (memcmp(tr[0].logits + (size_t)s * (size_t)(rows * V), tr[1].logits + (size_t)s * (size_t)(rows * V),
                   sizeof(float) * (size_t)(rows * V)) != 0)
            first = s;
    printf("%s on %s: %d steps, %d of them replayed graphs (%s); logits first differ at step %d; tokens %lld "
           "and %lld\n",
           label, be->name, tr[0].n, replays[0], graphs ? "the backend has graphs" : "no graphs on this backend",
           first, (long long)n_tok[0], (long long)n_tok[1]);
    CHECK(tr[0].n == tr[1].n && tr[0].n >= 8, "%s: %d and %d steps (want the same, >= 8)", label, tr[0].n, tr[1].n);
    CHECK(first < 0, "%s: logits bit-identical with and without graphs (first difference at step %d)", label, first);
    CHECK(n_tok[0] == n_tok[1] && (n_tok[0] == 0 || memcmp(tok[0], tok[1], sizeof(int32_t) * (size_t)n_tok[0]) == 0),
          "%s: the same tokens with and without graphs", label);
    CHECK(replays[1] == 0, "%s: no replays without graphs (%d)", label, replays[1]);
    CHECK(tr[0].dev == 0 && tr[1].dev == 0, "%s: host logits asked for, %d and %d steps drawn on the device", label,
          tr[0].dev, tr[1].dev);
    /* the third run: the draw on the device where the backend has it */
    const bool dev = be->k.sample != NULL && graphs;
    printf("%s on %s: %d steps drawn on the device (%s); tokens %lld, %s the run without graphs\n", label, be->name,
           tr[2].dev, dev ? "the backend samples" : "no device sampling on this backend", (long long)n_tok[2],
           n_tok[2] == n_tok[1] && memcmp(tok[1], tok[2], sizeof(int32_t) * (size_t)n_tok[1]) == 0 ? "the same as"
                                                                                                  : "NOT those of");
    CHECK(n_tok[2] == n_tok[1] && (n_tok[1] == 0 || memcmp(tok[1], tok[2], sizeof(int32_t) * (size_t)n_tok[1]) == 0),
          "%s: the same tokens drawn on the device as without graphs", label);
    /* the recorded step and every replay draw there */
    CHECK(tr[2].dev == (dev ? replays[2] + 1 : 0), "%s: %d steps drawn on the device, want %d", label, tr[2].dev,
          dev ? replays[2] + 1 : 0);
    if (graphs || require)
        CHECK(graphs && replays[0] == tr[0].n - 3,
              "%s: every step after the second replayed (%d of %d steps; the first two run as usual)", label,
              replays[0], tr[0].n);
    transfer_failure(m, be, &c, text, n_text, tr[0].n, label);
done:
    for (int i = 0; i < 3; i++) {
        free(tr[i].logits);
        free(tok[i]);
    }
    backend_free(be);
    engine_model_free(em);
}

int main(int argc, char **argv)
{
    const bool require = argc > 1 && strcmp(argv[1], "--require-graphs") == 0;
    char turbo[4096], english[4096];
    snprintf(turbo, sizeof turbo, "%s/models/turbo", CBX_BINARY_DIR);
    snprintf(english, sizeof english, "%s/models/english", CBX_BINARY_DIR);
    run_model(turbo, -1, "turbo f32", require);
    run_model(turbo, TYPE_Q4_0, "turbo q4_0", require);
    run_model(english, -1, "english f32", require);
    return test_summary();
}
