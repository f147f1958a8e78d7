/* parity_mtl_v2_alignment_guard.c - the alignment guard (t3/alignment.h)
 * end to end on the synthetic models, against what its rules predict.
 *
 * Synthetic weights give diffuse attention (the three heads' maxima stay
 * around 0.05), so the attention rules cannot fire within a few dozen
 * steps: long_tail needs 5 of attention summed on a column and
 * alignment_repetition row maxima summing to 5, both after completion. The
 * guard then acts through two rules only. Greedy decoding (top_k 1) with a
 * repetition penalty that favours seen tokens (0.8; 1, none, through the
 * CLI) makes a synthetic model repeat tokens, and:
 *  - the stop suppression changes the stop logit alone, so a greedy run
 *    that does not pick the stop token is not changed by it;
 *  - three equal tokens in a row force the stop at the next step.
 * Prediction: the guarded run is the unguarded one cut after its first
 * three equal tokens, plus the stop token (or identical when there is no
 * such run). Checked on the tokens T3 returns (multilingual v2 T3,
 * fixture conditioning and text), then through `chatterbox tokens
 * --alignment-guard` on the multilingual model, where the output is the
 * variant's post-filtered tokens: the guarded output must be a prefix of
 * the unguarded one, ending at or before its first three equal tokens.
 * Also: Turbo refuses --alignment-guard with one line and exit 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "io/model_file.h"
#include "io/npy.h"
#include "t3/t3.h"
#include "testutil.h"

enum { MAX_GEN = 24, STOP = 6562 };

static int64_t numel(const struct npy *n)
{
    int64_t k = 1;
    for (int d = 0; d < n->ndim; d++) k *= n->ne[d];
    return k;
}

/* index of the third of the first three equal consecutive ids, or -1 */
static int64_t first_triple(const int32_t *t, int64_t n)
{
    for (int64_t k = 2; k < n; k++)
        if (t[k] == t[k - 1] && t[k] == t[k - 2]) return k;
    return -1;
}

static void print_ids(const char *what, const int32_t *t, int64_t n)
{
    printf("%s (%lld):", what, (long long)n);
    for (int64_t i = 0; i < n; i++) printf(" %d", t[i]);
    printf("\n");
}

/* Part 1: t3_inference on the multilingual v2 T3, guard off and on */
static void library(void)
{
    char err[ERR_MAX] = "", path[512];
    snprintf(path, sizeof path, "%s/models/mtl-v2", CBX_BINARY_DIR);
    struct model *md = NULL;
    cbx_status rc = model_open(path, &md, err);
    CHECK(rc == CBX_OK, "open %s: %s", path, err);
    if (rc != CBX_OK) return;
    struct t3_model m;
    struct weights w = model_weights(md, MODEL_T3);
    rc = t3_load(&m, &w, test_backend(), TYPE_F32, err);
    CHECK(rc == CBX_OK, "t3_load: %s", err);
    struct npy spk, prompt, text;
    char p1[512], p2[512], p3[512];
    snprintf(p1, sizeof p1, "%s", test_data("mtl-v2/ve_embedding.npy"));
    snprintf(p2, sizeof p2, "%s", test_data("mtl-v2/t3_cond_prompt_tokens.npy"));
    snprintf(p3, sizeof p3, "%s", test_data("mtl-v2/text_tokens.npy"));
    if (rc != CBX_OK || io_npy_read(p1, &spk, err) != CBX_OK || io_npy_read(p2, &prompt, err) != CBX_OK ||
        io_npy_read(p3, &text, err) != CBX_OK) {
        CHECK(0, "setup: %s", err);
        model_close(md);
        return;
    }
    const struct t3_cond cond = {spk.data, prompt.data, numel(&prompt), 0.5f};
    struct backend *cpu = test_compute_backend(0);
    struct t3_gen_params p = t3_gen_default_params(&m);
    p.s.top_k = 1;
    p.s.repetition_penalty = 0.8; /* < 1 favours tokens already seen */
    p.max_gen_len = MAX_GEN;
    int32_t *off = NULL, *on = NULL;
    int64_t n_off = 0, n_on = 0;
    rc = t3_inference(&m, cpu, &cond, text.data, numel(&text), &p, NULL, NULL, &off, &n_off, err);
    CHECK(rc == CBX_OK, "unguarded: %s", err);
    p.alignment_guard = true;
    if (rc == CBX_OK) rc = t3_inference(&m, cpu, &cond, text.data, numel(&text), &p, NULL, NULL, &on, &n_on, err);
    CHECK(rc == CBX_OK, "guarded: %s", err);
    if (rc == CBX_OK) {
        print_ids("mtl-v2 T3 unguarded", off, n_off);
        print_ids("mtl-v2 T3 guarded  ", on, n_on);
        /* the prediction (see the header); a stop token picked by the
         * unguarded run would be suppressed, so the runs would part there */
        int64_t stop = -1;
        for (int64_t k = 0; k < n_off && stop < 0; k++)
            if (off[k] == STOP) stop = k;
        const int64_t tri = first_triple(off, stop >= 0 ? stop : n_off);
        int64_t n_want = tri >= 0 && tri + 1 < MAX_GEN ? tri + 2 : n_off;
        bool ok = stop < 0 || tri >= 0;
        if (ok) {
            ok = n_on == n_want && !memcmp(on, off, sizeof *on * (size_t)(tri >= 0 ? tri + 1 : n_off)) &&
                 (tri < 0 || on[tri + 1] == STOP);
        }
        int64_t two = -1; /* where upstream's two-token rule would have stopped */
        for (int64_t k = 1; k < n_off && two < 0; k++)
            if (off[k] == off[k - 1]) two = k + 1;
        printf("mtl-v2 T3: %lld tokens unguarded; guarded %lld: %s at step %lld (three equal tokens %d at "
               "steps %lld-%lld; upstream's two-token rule would have stopped at step %lld); predicted %lld "
               "tokens %s\n",
               (long long)n_off, (long long)n_on, tri >= 0 ? "stop forced" : "no stop forced",
               (long long)(tri >= 0 ? tri + 1 : -1), tri >= 0 ? off[tri] : -1, (long long)(tri - 2), (long long)tri,
               (long long)two, (long long)n_want, ok ? "PASS" : "FAIL");
        CHECK(ok, "guarded tokens differ from the prediction");
        CHECK(tri >= 0, "the unguarded greedy run has no three equal tokens: the guard was not exercised");
    }
    free(off);
    free(on);
    backend_free(cpu);
    io_npy_free(&spk);
    io_npy_free(&prompt);
    io_npy_free(&text);
    t3_free(&m);
    model_close(md);
}

static int run(const char *args, bool err2, char *out, size_t n)
{
    return test_run_cli("tokens", args, err2, out, n);
}

static int64_t parse_ids(const char *s, int32_t *t, int64_t max)
{
    int64_t n = 0;
    char *end;
    for (long v; n < max && (v = strtol(s, &end, 10), end != s); s = end) t[n++] = (int32_t)v;
    return n;
}

/* Part 2: the CLI */
static void cli(void)
{
    static char out[1 << 16];
    static int32_t off[2048], on[2048];
    const char *ids = "20 30 40 50 60 70 80 90 100 110 120 130";
    const char *variant = "mtl-v2";
    char args[4096];
    const char *common = "--top-k 1 --repetition-penalty 1 --max-tokens 24 --threads 2 --quiet";
    snprintf(args, sizeof args, "--model '%s/models/%s' --text-ids '%s' %s", CBX_BINARY_DIR, variant, ids, common);
    CHECK(run(args, false, out, sizeof out) == 0, "tokens on %s exits 0", variant);
    const int64_t n_off = parse_ids(out, off, 2048);
    snprintf(args, sizeof args, "--model '%s/models/%s' --text-ids '%s' %s --alignment-guard", CBX_BINARY_DIR, variant,
             ids, common);
    CHECK(run(args, false, out, sizeof out) == 0, "tokens --alignment-guard on %s exits 0", variant);
    const int64_t n_on = parse_ids(out, on, 2048);
    const int64_t tri = first_triple(off, n_off);
    const bool prefix = n_on <= n_off && !memcmp(on, off, sizeof *on * (size_t)n_on);
    const bool ok = prefix && n_on > 0 && (tri < 0 ? n_on == n_off : n_on <= tri + 1);
    printf("tokens --alignment-guard (%s): unguarded %lld tokens, guarded %lld, a prefix: %s; first three equal "
           "tokens end at output %lld: %s\n",
           variant, (long long)n_off, (long long)n_on, prefix ? "yes" : "no", (long long)tri, ok ? "PASS" : "FAIL");
    CHECK(ok, "tokens --alignment-guard: guarded output not as predicted");

    /* Turbo: one error line, exit 2 */
    snprintf(args, sizeof args, "--model '%s/models/turbo' --text hi --alignment-guard", CBX_BINARY_DIR);
    const int st = run(args, true, out, sizeof out);
    const bool one = strchr(out, '\n') == out + strlen(out) - 1;
    printf("turbo --alignment-guard: exit %d: %s", st, out);
    CHECK(st == 2 && one && strstr(out, "--alignment-guard"), "turbo --alignment-guard: exit %d, want 2 and one line", st);
}

int main(void)
{
    library();
    cli();
    return test_summary();
}
