/* cmd_tokens.c - `chatterbox tokens`: text + voice -> T3 speech tokens
 * (Turbo, Nano), printed on stdout as space-separated integers: exactly the
 * tokens that go to S3Gen (stop token and ids >= 6561 removed). This is
 * how T3 is checked in isolation; keep the output format stable. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "default_model.h"
#include "core/backend.h"
#include "io/model_file.h"
#include "pipeline/engine.h"
#include "t3/t3.h"
#include "text/gpt2_bpe.h"
#include "text/punc_norm.h"
#include "voice/conds.h"

static void usage(FILE *f)
{
    const struct t3_gen_params d = t3_gen_default_params(); /* the Turbo row's */
    fprintf(f,
            "usage: chatterbox tokens [--model DIR|GGUF] --text TEXT [options]\n"
            "\n"
            "Turn text into T3 speech tokens (Turbo, Nano) and print them on stdout.\n"
            "\n"
            "  --model DIR|GGUF          Hugging Face model directory or converted .gguf\n"
            "                            (default $CHATTERBOX_MODEL, else the Turbo\n"
            "                            snapshot of `chatterbox download turbo`)\n"
            "  --text TEXT               text to speak (required)\n"
            "  --voice DIR               conditioning .npy files (speaker_emb.npy,\n"
            "                            cond_prompt_speech_tokens.npy); default: built-in voice\n"
            "  --seed N                  seed of every RNG stream (default 0)\n"
            "  --temperature T           default %g\n"
            "  --top-k K                 default %d (1 = greedy)\n"
            "  --top-p P                 default %g\n"
            "  --repetition-penalty R    default %g\n"
            "  --max-tokens N            at most N sampled tokens (default %d)\n"
            "  --threads N               CPU threads (default: all)\n"
            "  --quiet                   no progress on stderr\n",
            d.s.temperature, d.s.top_k, d.s.top_p, d.s.repetition_penalty, d.max_gen_len + 1);
}

struct progress { int quiet, tty; struct timespec t0; };



static double since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
}

static int on_step(void *user, int step, int32_t token, const float *logits, int64_t V)
{
    (void)token; (void)logits; (void)V;
    struct progress *p = user;
    if (!p->quiet && p->tty && (step + 1) % 16 == 0)
        fprintf(stderr, "\rt3: %d tokens, %.1f tokens/s", step + 1, (step + 1) / since(&p->t0));
    return 0;
}

int cmd_tokens(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *voice = NULL;
    struct t3_gen_params gp = t3_gen_default_params();
    double v, threads = 0;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { usage(stdout); return 0; }
        if (!strcmp(o, "--quiet") || !strcmp(o, "-q")) { quiet = 1; continue; }
        const char *val = cli_option_value("tokens", argc, argv, &i);
        if (!val) return 2;
        if (!strcmp(o, "--model")) model = val;
        else if (!strcmp(o, "--text")) text = val;
        else if (!strcmp(o, "--voice")) voice = val;
        else if (!strcmp(o, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(val, &end, 10);
            if (errno || end == val || *end || val[0] == '-') {
                fprintf(stderr, "chatterbox tokens: --seed needs a non-negative integer, got '%s'\n", val);
                return 2;
            }
            gp.seed = s;
        } else if (!strcmp(o, "--temperature")) { if (!cli_parse_num("tokens", o, val, 1e-6, 100, &gp.s.temperature)) return 2; }
        else if (!strcmp(o, "--top-k")) { if (!cli_parse_num("tokens", o, val, 0, 1e9, &v)) return 2; gp.s.top_k = (int)v; }
        else if (!strcmp(o, "--top-p")) { if (!cli_parse_num("tokens", o, val, 0, 1, &gp.s.top_p)) return 2; }
        else if (!strcmp(o, "--repetition-penalty")) { if (!cli_parse_num("tokens", o, val, 1e-6, 100, &gp.s.repetition_penalty)) return 2; }
        else if (!strcmp(o, "--max-tokens")) { if (!cli_parse_num("tokens", o, val, 1, 100000, &v)) return 2; gp.max_gen_len = (int)v - 1; }
        else if (!strcmp(o, "--threads")) { if (!cli_parse_num("tokens", o, val, 1, 1024, &threads)) return 2; }
        else {
            fprintf(stderr, "chatterbox tokens: unknown option '%s' (see --help)\n", o);
            return 2;
        }
    }
    char cached[4096];
    if (!model) model = cli_default_model(cached, sizeof cached);
    if (!model || !*model) {
        char msg[ERR_MAX];
        cli_no_model_message(msg, sizeof msg);
        fprintf(stderr, "chatterbox tokens: %s\n", msg);
        return 2;
    }
    if (!text) { fprintf(stderr, "chatterbox tokens: --text is required\n"); return 2; }

    char err[ERR_MAX] = "";
    int status = 1;
    struct model *md = NULL;
    struct gpt2_bpe *tok = NULL;
    struct conds voice_c = {0};
    struct t3_model m = {0};
    struct backend *be = NULL;
    char *norm = NULL;
    int32_t *ids = NULL, *out = NULL;
    int64_t n_ids = 0, n_out = 0;
    cbx_status rc = model_open(model, &md, err);
    if (rc != CBX_OK) goto fail;
    enum model_variant var = model_get_variant(md);
    if (variant_get(var)->backbone != VARIANT_T3_GPT2) {
        rc = err_setf(err, CBX_ERR_UNSUPPORTED, "%s: the %s model is not supported by 'tokens' yet (turbo, nano)",
                      model, variant_get(var)->name);
        goto fail;
    }
    if ((rc = engine_tokenizer_load(md, &tok, err)) != CBX_OK) goto fail;
    if ((rc = punc_norm(text, PUNC_TURBO, &norm, err)) != CBX_OK) goto fail;
    if ((rc = gpt2_bpe_encode(tok, norm, &ids, &n_ids, err)) != CBX_OK) goto fail;
    /* tokenizer(..., truncation=True): cut at model_max_length */
    if (gpt2_bpe_max_length(tok) > 0 && n_ids > gpt2_bpe_max_length(tok)) {
        if (!quiet)
            fprintf(stderr, "chatterbox tokens: text truncated from %lld to %lld tokens (as upstream)\n",
                    (long long)n_ids, (long long)gpt2_bpe_max_length(tok));
        n_ids = gpt2_bpe_max_length(tok);
    }
    rc = voice ? conds_from_npy_dir(voice, &voice_c, err) : conds_from_model(md, &voice_c, err);
    if (rc != CBX_OK) goto fail;
    if (voice_c.n_speaker != 256) {
        rc = err_setf(err, CBX_ERR_FORMAT, "voice: speaker_emb has %lld values, need 256", (long long)voice_c.n_speaker);
        goto fail;
    }
    struct weights t3w = model_weights(md, MODEL_T3);
    if ((rc = t3_load_gpt2(&m, &t3w, TYPE_F32, err)) != CBX_OK) goto fail;
    if (!(be = backend_cpu_create((int)threads))) {
        rc = err_setf(err, CBX_ERR_NOMEM, "cannot start %d threads", (int)threads);
        goto fail;
    }
    struct t3_cond cond = {voice_c.speaker_emb, voice_c.cond_prompt_tokens, voice_c.n_cond_prompt};
    struct progress pr = {quiet, isatty(2), {0, 0}};
    clock_gettime(CLOCK_MONOTONIC, &pr.t0);
    rc = t3_inference_turbo(&m, be, &cond, ids, n_ids, &gp, on_step, &pr, &out, &n_out, err);
    if (rc != CBX_OK) goto fail;
    if (!quiet)
        fprintf(stderr, "%st3: %lld tokens in %.2f s (%.1f tokens/s)\n", pr.tty ? "\r" : "", (long long)n_out, since(&pr.t0),
                n_out / since(&pr.t0));
    n_out = t3_filter_speech_tokens(out, n_out);
    for (int64_t i = 0; i < n_out; i++) printf(i ? " %d" : "%d", out[i]);
    printf("\n");
    if (fflush(stdout) != 0 || ferror(stdout)) {
        rc = err_setf(err, CBX_ERR_IO, "cannot write to stdout");
        goto fail;
    }
    status = 0;
fail:
    if (rc != CBX_OK) fprintf(stderr, "chatterbox tokens: %s\n", err);
    free(out);
    free(ids);
    free(norm);
    t3_free(&m);
    conds_free(&voice_c);
    gpt2_bpe_free(tok);
    model_close(md);
    backend_cpu_free(be);
    return status;
}
