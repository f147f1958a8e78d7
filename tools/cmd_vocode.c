/* cmd_vocode.c - `chatterbox vocode`: S3 speech tokens + a voice -> 24 kHz
 * audio through S3Gen (flow + HiFT), as S3Gen.inference does. Checks the
 * S3Gen half of the pipeline in isolation; pairs with `chatterbox tokens`:
 *   chatterbox tokens --model M --text "..." | chatterbox vocode --model M --tokens - -o out.wav */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "core/backend.h"
#include "io/audio.h"
#include "io/model_file.h"
#include "io/npy.h"
#include "s3gen/s3gen.h"
#include "voice/conds.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chatterbox vocode --model DIR|GGUF --tokens \"T1 T2 ...\" -o OUT [options]\n"
            "\n"
            "Turn S3 speech tokens into 24 kHz audio with S3Gen (flow matching + HiFT).\n"
            "\n"
            "  --model DIR|GGUF     Hugging Face model directory or converted .gguf\n"
            "                       (default $CHATTERBOX_MODEL)\n"
            "  --tokens LIST|-      speech token ids (0..6560) separated by spaces or commas;\n"
            "                       '-' reads them from stdin (e.g. from 'chatterbox tokens')\n"
            "  -o, --output FILE    output audio (.wav: 16-bit PCM, .flac)\n"
            "  --format F           pcm16, f32 (float wav) or flac; default from the extension\n"
            "  --voice DIR|FILE     prompt_token.npy, prompt_feat.npy, embedding.npy, or a\n"
            "                       voice file; default: the built-in voice (conds.pt gen part)\n"
            "  --seed N             seed of every RNG stream (default 0)\n"
            "  --cfm-steps N        flow-matching Euler steps (default 2 meanflow, 10 standard)\n"
            "  --threads N          CPU threads (default: all)\n"
            CLI_BACKEND_HELP
            "  --quiet              no progress on stderr\n");
}

static double since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
}

/* The whole of stdin as a string (owned, free()); NULL on failure. */
static char *read_stdin(void)
{
    size_t n = 0, cap = 4096;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *b = cap > ((size_t)64 << 20) ? NULL : realloc(buf, cap * 2);
            if (!b) break;
            buf = b;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, stdin);
        n += got;
        if (got == 0) {
            if (ferror(stdin)) break;
            buf[n] = 0;
            return buf;
        }
    }
    free(buf);
    return NULL;
}

/* "86 1206, 2626" -> ids; returns 0 and prints why on bad input. */
static int parse_tokens(const char *s, int32_t **ids, int64_t *n)
{
    size_t cap = 64;
    int64_t k = 0;
    int32_t *v = malloc(sizeof *v * cap);
    if (!v) return 0;
    for (const char *p = s;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long t = strtoll(p, &end, 10);
        if (errno || end == p || t < 0 || t >= S3GEN_SPEECH_VOCAB ||
            (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r' && *end != ',')) {
            int len = 0;
            while (p[len] && p[len] != ' ' && p[len] != ',' && p[len] != '\n' && len < 32) len++;
            fprintf(stderr, "chatterbox vocode: token %lld ('%.*s') is not a speech token id (0..%d)\n",
                    (long long)k + 1, len, p, S3GEN_SPEECH_VOCAB - 1);
            free(v);
            return 0;
        }
        if ((size_t)k == cap) {
            int32_t *nv = realloc(v, sizeof *v * cap * 2);
            if (!nv) {
                free(v);
                return 0;
            }
            v = nv;
            cap *= 2;
        }
        v[k++] = (int32_t)t;
        p = end;
    }
    if (k == 0) {
        fprintf(stderr, "chatterbox vocode: no speech tokens given\n");
        free(v);
        return 0;
    }
    *ids = v;
    *n = k;
    return 1;
}

/* --voice DIR: the S3Gen reference dict as .npy files (voice.md §7):
 * prompt_token.npy (1, Np) int32/int64, prompt_feat.npy (1, Tp, 80) and
 * embedding.npy (1, 192) float; or a voice file (`chatterbox voice create`). */
static cbx_status load_voice(const char *path, struct conds *c, char *err)
{
    char p[4096];
    struct npy tok = {0}, feat = {0}, emb = {0};
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode)) return conds_read_voice(path, c, NULL, err);
    memset(c, 0, sizeof *c);
    cbx_status rc;
    snprintf(p, sizeof p, "%s/prompt_token.npy", path);
    if ((rc = io_npy_read(p, &tok, err)) != CBX_OK) goto done;
    snprintf(p, sizeof p, "%s/prompt_feat.npy", path);
    if ((rc = io_npy_read_f32(p, &feat, err)) != CBX_OK) goto done;
    snprintf(p, sizeof p, "%s/embedding.npy", path);
    if ((rc = io_npy_read_f32(p, &emb, err)) != CBX_OK) goto done;
    int64_t nt = 1, nf = 1, ne = 1;
    for (int d = 0; d < tok.ndim; d++) nt *= tok.ne[d];
    for (int d = 0; d < feat.ndim; d++) nf *= feat.ne[d];
    for (int d = 0; d < emb.ndim; d++) ne *= emb.ne[d];
    if ((tok.type != TYPE_I32 && tok.type != TYPE_I64) || feat.ndim < 2 || feat.ne[feat.ndim - 1] != 80 ||
        ne != S3GEN_XVEC_DIM) {
        rc = err_setf(err, CBX_ERR_FORMAT, "voice %s: want prompt_token (1, Np) int, prompt_feat "
                      "(1, Tp, 80), embedding (1, 192); got %s tokens, %lld feat values, %lld "
                      "embedding values", path, dtype_name(tok.type), (long long)nf, (long long)ne);
        goto done;
    }
    c->prompt_token = malloc(sizeof *c->prompt_token * (size_t)(nt ? nt : 1));
    if (!c->prompt_token) {
        rc = err_setf(err, CBX_ERR_NOMEM, "voice: out of memory");
        goto done;
    }
    for (int64_t i = 0; i < nt; i++) {
        int64_t id = tok.type == TYPE_I64 ? ((const int64_t *)tok.data)[i] : ((const int32_t *)tok.data)[i];
        if (id < 0 || id >= S3GEN_SPEECH_VOCAB) {
            rc = err_setf(err, CBX_ERR_FORMAT, "voice %s: prompt_token[%lld] = %lld is not a speech token",
                          path, (long long)i, (long long)id);
            goto done;
        }
        c->prompt_token[i] = (int32_t)id;
    }
    c->n_prompt_token = nt;
    c->prompt_feat = feat.data;
    c->n_prompt_feat = nf / 80;
    feat.data = NULL;
    c->embedding = emb.data;
    c->n_embedding = ne;
    emb.data = NULL;
done:
    if (rc != CBX_OK) conds_free(c);
    io_npy_free(&tok);
    io_npy_free(&feat);
    io_npy_free(&emb);
    return rc;
}

struct progress { int quiet, tty, n; struct timespec t0; };

static int on_step(void *user, int step, float t, float r, const struct tensor *x,
                   const struct tensor *v)
{
    (void)t; (void)r; (void)x; (void)v;
    struct progress *p = user;
    if (!p->quiet && p->tty) fprintf(stderr, "\rs3gen: cfm step %d/%d, %.1f s", step + 1, p->n, since(&p->t0));
    return 0;
}

int cmd_vocode(int argc, char **argv)
{
    const char *model = getenv("CHATTERBOX_MODEL"), *tokens = NULL, *voice = NULL, *out = NULL,
               *format = NULL;
    struct s3gen_params sp = s3gen_default_params();
    long long v, threads = 0;
    const char *backend = NULL; /* --backend */
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { usage(stdout); return 0; }
        if (!strcmp(o, "--quiet") || !strcmp(o, "-q")) { quiet = 1; continue; }
        const char *val = cli_option_value("vocode", argc, argv, &i);
        if (!val) return 2;
        if (!strcmp(o, "--model")) model = val;
        else if (!strcmp(o, "--tokens")) tokens = val;
        else if (!strcmp(o, "--voice")) voice = val;
        else if (!strcmp(o, "-o") || !strcmp(o, "--output")) out = val;
        else if (!strcmp(o, "--format")) format = val;
        else if (!strcmp(o, "--seed")) { if (!cli_parse_u64("vocode", o, val, &sp.seed)) return 2; }
        else if (!strcmp(o, "--cfm-steps")) { if (!cli_parse_int("vocode", o, val, 1, 1000, &v)) return 2; sp.n_cfm_steps = (int)v; }
        else if (!strcmp(o, "--backend")) { if (!cli_backend_ok("vocode", val)) return 2; backend = val; }
        else if (!strcmp(o, "--threads")) { if (!cli_parse_int("vocode", o, val, 1, 1024, &threads)) return 2; }
        else {
            fprintf(stderr, "chatterbox vocode: unknown option '%s' (see --help)\n", o);
            return 2;
        }
    }
    if (!model) { fprintf(stderr, "chatterbox vocode: --model DIR|GGUF is required (or set CHATTERBOX_MODEL)\n"); return 2; }
    if (!tokens) { fprintf(stderr, "chatterbox vocode: --tokens is required\n"); return 2; }
    if (!out) { fprintf(stderr, "chatterbox vocode: -o FILE is required\n"); return 2; }
    char err[ERR_MAX] = "";
    enum audio_format fmt;
    if (format) {
        if (!strcasecmp(format, "pcm16")) fmt = AUDIO_WAV_PCM16;
        else if (!strcasecmp(format, "f32")) fmt = AUDIO_WAV_FLOAT;
        else if (!strcasecmp(format, "flac")) fmt = AUDIO_FLAC;
        else {
            fprintf(stderr, "chatterbox vocode: --format must be pcm16, f32 or flac, got '%s'\n", format);
            return 2;
        }
    } else if (io_audio_format_from_path(out, &fmt, err) != CBX_OK) {
        fprintf(stderr, "chatterbox vocode: %s (or give --format)\n", err);
        return 2;
    }
    char *stdin_text = NULL;
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    if (!strcmp(tokens, "-")) {
        if (!(stdin_text = read_stdin())) {
            fprintf(stderr, "chatterbox vocode: cannot read the tokens from stdin\n");
            return 1;
        }
        tokens = stdin_text;
    }
    int ok = parse_tokens(tokens, &ids, &n_ids);
    free(stdin_text);
    if (!ok) return 2;

    int status = 1;
    struct model *md = NULL;
    struct conds vc = {0};
    struct s3gen s3 = {0};
    struct backend *be = NULL;
    float *pcm = NULL;
    int64_t n_pcm = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cbx_status rc = model_open(model, &md, err);
    if (rc != CBX_OK) goto fail;
    rc = voice ? load_voice(voice, &vc, err) : conds_from_model(md, &vc, err);
    if (rc != CBX_OK) goto fail;
    if (!vc.embedding || !vc.prompt_feat) {
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: the voice has no S3Gen part (prompt_token, prompt_feat, "
                      "embedding)", voice ? voice : model);
        goto fail;
    }
    struct weights w = model_weights(md, MODEL_S3GEN);
    if (!(be = backend_create(backend, (int)threads, false, err))) {
        rc = CBX_ERR_NOMEM;
        goto fail;
    }
    if ((rc = s3gen_load(&s3, &w, be, TYPE_F32, err)) != CBX_OK) goto fail;
    double t_load = since(&t0);
    struct progress pr = {quiet, isatty(2), sp.n_cfm_steps > 0 ? sp.n_cfm_steps : s3.meanflow ? 2 : 10, {0, 0}};
    clock_gettime(CLOCK_MONOTONIC, &pr.t0);
    sp.cb = on_step;
    sp.user = &pr;
    if ((rc = s3gen_vocode(&s3, be, ids, n_ids, &vc, &sp, &pcm, &n_pcm, err)) != CBX_OK) goto fail;
    double t_run = since(&pr.t0), secs = (double)n_pcm / S3GEN_SAMPLE_RATE;
    if ((rc = io_audio_write(out, pcm, n_pcm, S3GEN_SAMPLE_RATE, fmt, err)) != CBX_OK) goto fail;
    if (!quiet)
        fprintf(stderr, "%ss3gen: %lld tokens -> %.2f s of audio in %.2f s (RTF %.3f, load %.2f s) -> %s\n",
                pr.tty ? "\r" : "", (long long)n_ids, secs, t_run, secs > 0 ? t_run / secs : 0.0, t_load, out);
    status = 0;
fail:
    if (rc != CBX_OK) fprintf(stderr, "chatterbox vocode: %s\n", err);
    free(pcm);
    free(ids);
    s3gen_free(&s3);
    conds_free(&vc);
    model_close(md);
    backend_free(be);
    return status;
}
