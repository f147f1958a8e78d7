/* cmd_tokens.c - `chatterbox tokens`: text + voice -> T3 speech tokens,
 * printed on stdout as space-separated integers: exactly the tokens that
 * go to S3Gen (the variant's filter applied: Turbo/Nano drop the stop token
 * and ids >= 6561; English cuts with drop_invalid_tokens first). A client
 * of the engine (engine_tokens): the same front end, voice handling and
 * T3 as `say`. This is how T3 is checked in isolation; keep the output
 * format stable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "default_model.h"
#include "core/backend.h"
#include "pipeline/engine.h"
#include "voice/conds.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chatterbox tokens [--model DIR|GGUF] (--text TEXT | --text-ids IDS) [options]\n"
            "\n"
            "Turn text into T3 speech tokens and print them on stdout (the tokens S3Gen\n"
            "is given). The text is one segment: no splitting, no retries.\n"
            "\n"
            "  --model DIR|GGUF          Hugging Face model directory or converted .gguf\n"
            "                            (default $CHATTERBOX_MODEL, else the Turbo\n"
            "                            snapshot of `chatterbox download turbo`)\n"
            "  --text TEXT               text to speak\n"
            "  --voice V                 a .voice file, a directory of conditioning .npy\n"
            "                            files, or a reference recording; default: the\n"
            "                            model's built-in voice\n"
            "  --seed N                  seed of every RNG stream (default 0)\n"
            "%s"
            "  --threads N               CPU threads (default: all)\n"
            CLI_BACKEND_HELP
            "  --quiet                   no progress on stderr\n",
            cli_gen_help);
}

struct progress { int quiet, tty; struct timespec t0; };

static double since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
}

static int on_progress(void *user, const struct engine_progress *e)
{
    struct progress *p = user;
    if (!p->quiet && p->tty && e->tokens > 0 && e->tokens % 16 == 0)
        fprintf(stderr, "\rt3: %d tokens, %.1f tokens/s", e->tokens, e->tokens / since(&p->t0));
    return 0;
}

int cmd_tokens(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *voice = NULL, *backend = NULL;
    struct cli_gen g;
    memset(&g, 0, sizeof g);
    uint64_t seed = 0;
    double threads = 0;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { usage(stdout); cli_gen_free(&g); return 0; }
        if (!strcmp(o, "--quiet") || !strcmp(o, "-q")) { quiet = 1; continue; }
        if (cli_gen_flag(&g, o)) continue;
        const char *val = cli_option_value("tokens", argc, argv, &i);
        bool ok = val != NULL;
        if (!ok) ;
        else if (!strcmp(o, "--model")) model = val;
        else if (!strcmp(o, "--text")) text = val;
        else if (!strcmp(o, "--voice")) voice = val;
        else if (!strcmp(o, "--backend")) { ok = cli_backend_ok("tokens", val); backend = val; }
        else if (!strcmp(o, "--seed")) ok = cli_parse_u64("tokens", o, val, &seed);
        else if (!strcmp(o, "--threads")) ok = cli_parse_num("tokens", o, val, 1, 1024, &threads);
        else if (cli_gen_is_option(o)) ok = cli_gen_parse(&g, "tokens", o, val);
        else {
            fprintf(stderr, "chatterbox tokens: unknown option '%s' (see --help)\n", o);
            ok = false;
        }
        if (!ok) {
            cli_gen_free(&g);
            return 2;
        }
    }
    char cached[4096];
    if (!model) model = cli_default_model(cached, sizeof cached);
    int usage_err = 0;
    if (!model || !*model) {
        char msg[ERR_MAX];
        cli_no_model_message(msg, sizeof msg);
        fprintf(stderr, "chatterbox tokens: %s\n", msg);
        usage_err = 1;
    } else if (!text && !g.text_ids) {
        fprintf(stderr, "chatterbox tokens: --text or --text-ids is required\n");
        usage_err = 1;
    } else if (text && g.text_ids) {
        fprintf(stderr, "chatterbox tokens: give --text or --text-ids, not both\n");
        usage_err = 1;
    }
    if (usage_err) {
        cli_gen_free(&g);
        return 2;
    }
    char err[ERR_MAX] = "";
    int status = 1;
    struct engine_model *m = NULL;
    struct backend *be = NULL;
    struct conds voice_c = {0};
    int32_t *out = NULL;
    int64_t n_out = 0;
    struct engine_load_params lp = engine_load_default_params();
    lp.t3_only = true;
    lp.t3_path = g.t3;
    lp.backend = backend;
    struct engine_params ep = engine_default_params();
    cbx_status rc = engine_model_load(model, &lp, &m, err);
    if (rc != CBX_OK) goto fail;
    if (!cli_gen_apply(&g, "tokens", m, &ep)) {
        status = 2;
        goto done;
    }
    ep.seed = seed;
    if (!(be = backend_create_like(engine_model_backend(m), (int)threads, false, err))) {
        rc = CBX_ERR_NOMEM;
        goto fail;
    }
    if (voice && (rc = engine_voice_load(m, be, voice, &voice_c, err)) != CBX_OK) goto fail;
    struct progress pr = {quiet, isatty(2), {0, 0}};
    clock_gettime(CLOCK_MONOTONIC, &pr.t0);
    rc = engine_tokens(m, be, voice ? &voice_c : NULL, text, &ep, on_progress, &pr, &out, &n_out, err);
    if (rc != CBX_OK) goto fail;
    if (!quiet)
        fprintf(stderr, "%st3: %lld tokens in %.2f s\n", pr.tty ? "\r" : "", (long long)n_out, since(&pr.t0));
    for (int64_t i = 0; i < n_out; i++) printf(i ? " %d" : "%d", out[i]);
    printf("\n");
    if (fflush(stdout) != 0 || ferror(stdout)) {
        rc = err_setf(err, CBX_ERR_IO, "cannot write to stdout");
        goto fail;
    }
    status = 0;
fail:
    if (rc != CBX_OK) fprintf(stderr, "chatterbox tokens: %s\n", err);
done:
    free(out);
    conds_free(&voice_c);
    engine_model_free(m);
    backend_free(be);
    cli_gen_free(&g);
    return status;
}
