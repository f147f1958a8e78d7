/* cmd_say.c - `chatterbox say`: text -> speech through the engine
 * (src/pipeline/engine.h): long text split into segments, a progress bar
 * on stderr, output to a wav/flac file (written atomically at the end, so
 * a failure or Ctrl-C leaves no file) or raw s16le PCM on stdout (each
 * chunk written and flushed as soon as it exists).
 *
 * Errors are one line "chatterbox say: ..." on stderr; usage errors exit 2,
 * runtime failures 1, an interrupt (SIGINT/SIGTERM) 130. A closed stdout
 * (broken pipe) is a runtime failure with its own message, not a signal. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "default_model.h"
#include "core/backend.h"
#include "io/audio.h"
#include "hf_download.h"
#include "pipeline/engine.h"

#define PROG "chatterbox say"
#define MAX_TEXT_BYTES (16u << 20) /* 16 MiB of text is far beyond any sane input */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chatterbox say [TEXT] -o OUT [options]\n"
            "\n"
            "Speak TEXT (or --text-file FILE, or standard input) into OUT: a .wav or\n"
            ".flac file, or '-' for raw 16-bit little-endian mono PCM at 24 kHz on stdout.\n"
            "Long text is split into sentences, spoken one by one and joined with short\n"
            "pauses.\n"
            "\n"
            "  -o, --output OUT          output file (.wav, .flac) or '-' (raw s16le)\n"
            "  --format F                wav (16-bit), wav-float (32-bit float) or flac;\n"
            "                            default from OUT's extension\n"
            "  --text-file FILE          read the text from FILE ('-': stdin)\n"
            "  --model DIR|GGUF          Hugging Face model directory or converted .gguf\n"
            "                            (default $CHATTERBOX_MODEL, else the Turbo\n"
            "                            snapshot of `chatterbox download turbo`)\n"
            "  --voice V                 a .voice file, a directory of conditioning .npy\n"
            "                            files, or a reference recording (> 5 s);\n"
            "                            default: the model's built-in voice\n"
            "  --seed N                  seed of every random stream (default 0)\n"
            "%s"
            "  --cfm-steps N             flow-matching steps (default: the model's: 2 for\n"
            "                            Turbo/Nano, 10 for English)\n"
            "  --no-split                speak the whole text as one segment (as upstream)\n"
            "  --pause-ms N              silence between segments (default 100)\n"
            "  --threads N               CPU threads (default: all)\n"
            CLI_BACKEND_HELP
            "  --stream                  audio in chunks while generating: with '-o -'\n"
            "                            each chunk is written and flushed at once\n"
            "                            (first audio after 10 speech tokens)\n"
            "  --stream-prompt N         while streaming, condition S3Gen on only the last\n"
            "                            N tokens of the voice's reference prompt (lower\n"
            "                            first-audio latency, less reference context;\n"
            "                            default 50, 2 s; 0: all of it)\n"
            "  --stream-first-prompt N   while streaming, condition the first chunk alone\n"
            "                            on the last N reference tokens (default 25: first\n"
            "                            audio does not wait for the whole reference; 0:\n"
            "                            all of it)\n"
            "  --stream-context N        while streaming, each chunk's mel sees N speech\n"
            "                            tokens of left context (default 32, 1.3 s), not\n"
            "                            the whole utterance so far; 0: all of it\n"
            "  --precision P             S3Gen arithmetic: auto (default: bf16 for\n"
            "                            quantised models, else f32), f32 or bf16\n"
            "                            (BF16 products on CPUs with AMX, TF32 on the\n"
            "                            CUDA backend, else f32)\n"
            "  --prefix-cache DIR        keep each voice's T3 prefix (its keys and values,\n"
            "                            ~0.5 s to compute) in DIR for later runs\n"
            "                            (default $CHATTERBOX_PREFIX_CACHE, else\n"
            "                            $XDG_CACHE_HOME/chatterbox/prefixes or\n"
            "                            ~/.cache/chatterbox/prefixes; 16 files of\n"
            "                            ~20 MB at most)\n"
            "  --no-prefix-cache         compute the voice prefix in this run only\n"
            "  --lines                   live mode: speak each line of standard input\n"
            "                            as it arrives (streamed), for piping from\n"
            "                            another program; ends at end of input. The\n"
            "                            voice is prepared before the first line\n"
            "  -q, --quiet               nothing on stderr but errors\n"
            "  -v, --verbose             per-stage times, tokens/s and real-time factor\n",
            cli_gen_help);
}

#define usage_error(...) cli_usage_error("say", __VA_ARGS__)
#define parse_num(opt, s, lo, hi, out) cli_parse_num("say", opt, s, lo, hi, out)

static bool parse_int(const char *opt, const char *s, long lo, long hi, int *out)
{
    long long v;
    if (!cli_parse_int("say", opt, s, lo, hi, &v)) return false;
    *out = (int)v;
    return true;
}

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Whole stream into a NUL-terminated buffer (owned by the caller). */
static char *read_all(FILE *f, const char *name, char *err)
{
    size_t n = 0, cap = 4096;
    char *buf = malloc(cap);
    if (!buf) { err_setf(err, CBX_ERR_NOMEM, "out of memory"); return NULL; }
    for (;;) {
        if (n + 1 == cap) {
            if (cap >= MAX_TEXT_BYTES) {
                err_setf(err, CBX_ERR_INVALID_ARG, "%s: more than %u MiB of text", name, MAX_TEXT_BYTES >> 20);
                free(buf);
                return NULL;
            }
            char *b = realloc(buf, cap * 2);
            if (!b) { free(buf); err_setf(err, CBX_ERR_NOMEM, "out of memory"); return NULL; }
            buf = b;
            cap *= 2;
        }
        size_t k = fread(buf + n, 1, cap - 1 - n, f);
        n += k;
        if (k == 0) break;
    }
    if (ferror(f)) {
        err_setf(err, CBX_ERR_IO, "%s: cannot read: %s", name, strerror(errno));
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    if (strlen(buf) != n) {
        err_setf(err, CBX_ERR_INVALID_ARG, "%s: the text contains a NUL byte (not a text file?)", name);
        free(buf);
        return NULL;
    }
    return buf;
}

struct say {
    int quiet, verbose, tty;
    FILE *raw;            /* stdout for '-o -', else NULL */
    int broken_pipe;
    double t0, t_seg;
    int last_len;
    int printed; /* segments reported (verbose, no tty) */
    int16_t *s16;
    size_t s16_cap;
};

static int on_progress(void *user, const struct engine_progress *p)
{
    struct say *s = user;
    if (interrupted) return 1;
    if (s->quiet) return 0;
    if (s->tty) {
        if (p->stage == ENGINE_STAGE_T3 && p->tokens % 8 != 1 && p->tokens != 0) return 0;
        char bar[21];
        int filled = (int)(20.0 * (p->segment + (p->stage == ENGINE_STAGE_DONE ? 1 : 0)) / p->n_segments);
        for (int i = 0; i < 20; i++) bar[i] = i < filled ? '#' : '.';
        bar[20] = 0;
        double el = now() - s->t0;
        int len;
        if (p->stage == ENGINE_STAGE_DONE) {
            len = fprintf(stderr, "\rsay: [%s] %d/%d segments, %lld speech tokens, %.1f s", bar,
                          p->n_segments, p->n_segments, (long long)p->total_tokens, el);
        } else {
            len = fprintf(stderr, "\rsay: [%s] segment %d/%d %s %d tokens%s, %.1f s", bar, p->segment + 1,
                          p->n_segments, p->stage == ENGINE_STAGE_T3 ? "t3" : "s3gen",
                          p->stage == ENGINE_STAGE_T3 ? p->tokens : (int)(p->total_tokens),
                          p->attempt ? " (retry)" : "", el);
        }
        if (len < s->last_len) fprintf(stderr, "%*s", s->last_len - len, "");
        s->last_len = len;
        if (p->stage == ENGINE_STAGE_DONE) fputc('\n', stderr);
    } else if (s->verbose && p->stage == ENGINE_STAGE_S3GEN && p->segment >= s->printed) {
        s->printed = p->segment + 1;
        fprintf(stderr, "say: segment %d/%d: t3 done, %lld speech tokens so far%s\n", p->segment + 1,
                p->n_segments, (long long)p->total_tokens, p->attempt ? " (after retries)" : "");
    }
    return 0;
}

/* '-o -': each chunk as s16le, flushed at once. */
static int on_chunk(void *user, const float *pcm, int64_t n, int sample_rate)
{
    (void)sample_rate;
    struct say *s = user;
    if (interrupted) return 1;
    if (!s->raw) return 0;
    if ((size_t)n > s->s16_cap) {
        int16_t *b = realloc(s->s16, sizeof(int16_t) * (size_t)n);
        if (!b) return 1;
        s->s16 = b;
        s->s16_cap = (size_t)n;
    }
    for (int64_t i = 0; i < n; i++) {
        /* as libsndfile's clipped float -> short: lrintf(x * 32767) */
        float x = pcm[i] > 1.0f ? 1.0f : pcm[i] < -1.0f ? -1.0f : pcm[i];
        int16_t v = (int16_t)lrintf(x * 32767.0f);
        uint8_t *b = (uint8_t *)&s->s16[i];
        b[0] = (uint8_t)(v & 0xff); /* little-endian whatever the host */
        b[1] = (uint8_t)((uint16_t)v >> 8);
    }
    if (fwrite(s->s16, sizeof(int16_t), (size_t)n, s->raw) != (size_t)n || fflush(s->raw) != 0) {
        s->broken_pipe = errno == EPIPE ? 1 : 2;
        return 1;
    }
    return 0;
}

/* ---- --lines: live mode ------------------------------------------------ */

/* Each line of standard input spoken as soon as it is read (streamed, so
 * with '-o -' its first chunk follows within the first-audio latency);
 * lines without letters or digits are skipped. Each line is one
 * engine_synthesize call with the same parameters, so a line sounds as
 * `say --stream LINE` would. *pcm (file output) collects every line; st
 * sums the lines' figures. */
static cbx_status say_lines(const struct engine_model *m, const struct backend *be,
                            const struct conds *voice, const struct engine_params *ep, struct say *s,
                            float **pcm, int64_t *n_pcm, struct engine_stats *st, char *err)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t cap_all = 0;
    int n_lines = 0;
    cbx_status rc = CBX_OK;
    memset(st, 0, sizeof *st);
    /* the voice's T3 prefix now, before the first line arrives, so that
     * line starts decoding at once (cbx_prepare_voice) */
    const double tp = now();
    if ((rc = engine_prepare_voice(m, be, voice, err)) != CBX_OK) return rc;
    if (s->verbose) fprintf(stderr, "say: voice ready in %.3f s\n", now() - tp);
    /* memory kept from one line to the next (engine_work) */
    struct engine_params lp = *ep;
    if (!(lp.work = engine_work_create())) return err_setf(err, CBX_ERR_NOMEM, "out of memory");
    ep = &lp;
    while (rc == CBX_OK && !interrupted && (len = getline(&line, &cap, stdin)) >= 0) {
        if (!engine_has_word(line)) continue;
        float *one = NULL;
        int64_t n_one = 0;
        struct engine_stats ls;
        const double t0 = now();
        rc = engine_synthesize(m, be, voice, line, ep, on_chunk, on_progress, s, pcm ? &one : NULL,
                               &n_one, &ls, err);
        if (rc != CBX_OK) break;
        n_lines++;
        if (s->verbose)
            fprintf(stderr, "say: line %d: %.2f s of audio, first audio after %.0f ms, done in %.2f s\n",
                    n_lines, ls.audio_seconds, 1000 * ls.t_first_audio, now() - t0);
        if (pcm && n_one > 0) {
            if (*n_pcm + n_one > cap_all) {
                int64_t c = (*n_pcm + n_one) * 2;
                float *b = realloc(*pcm, sizeof *b * (size_t)c);
                if (!b) { free(one); rc = err_setf(err, CBX_ERR_NOMEM, "out of memory"); break; }
                *pcm = b;
                cap_all = c;
            }
            memcpy(*pcm + *n_pcm, one, sizeof *one * (size_t)n_one);
            *n_pcm += n_one;
        }
        free(one);
        st->n_segments += ls.n_segments;
        st->n_retries += ls.n_retries;
        st->n_text_tokens += ls.n_text_tokens;
        st->n_speech_tokens += ls.n_speech_tokens;
        st->n_t3_steps += ls.n_t3_steps;
        st->n_samples += ls.n_samples;
        st->audio_seconds += ls.audio_seconds;
        st->t_text += ls.t_text;
        st->t_t3 += ls.t_t3;
        st->t_s3gen += ls.t_s3gen;
        st->t_total += ls.t_total;
        st->n_chunks += ls.n_chunks;
        if (n_lines == 1) st->t_first_audio = ls.t_first_audio;
    }
    free(line);
    engine_work_free(lp.work);
    if (rc == CBX_OK && interrupted) rc = err_setf(err, CBX_ERR_CANCELLED, "interrupted");
    if (rc == CBX_OK && ferror(stdin)) rc = err_setf(err, CBX_ERR_IO, "stdin: cannot read: %s", strerror(errno));
    if (rc == CBX_OK && n_lines == 0) rc = err_setf(err, CBX_ERR_INVALID_ARG, "no line of the input has anything to speak");
    return rc;
}

static int say_main(int argc, char **argv, struct cli_gen *g);

int cmd_say(int argc, char **argv)
{
    struct cli_gen gen;
    memset(&gen, 0, sizeof gen);
    const int status = say_main(argc, argv, &gen);
    cli_gen_free(&gen);
    return status;
}

static int say_main(int argc, char **argv, struct cli_gen *g)
{
    const char *model_path = NULL, *text_arg = NULL, *text_file = NULL,
               *voice_path = NULL, *out_path = NULL, *format = NULL;
    struct engine_params ep = engine_default_params();
    int threads = 0, quiet = 0, verbose = 0, lines = 0, no_prefix_cache = 0;
    const char *backend_name = NULL; /* --backend: engine_load_params.backend */
    const char *prefix_cache = NULL;
    double v;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { usage(stdout); return 0; }
        if (!strcmp(o, "--quiet") || !strcmp(o, "-q")) { quiet = 1; continue; }
        if (!strcmp(o, "--verbose") || !strcmp(o, "-v")) { verbose = 1; continue; }
        if (!strcmp(o, "--no-split")) { ep.split = false; continue; }
        if (!strcmp(o, "--no-prefix-cache")) { no_prefix_cache = 1; continue; }
        if (!strcmp(o, "--stream")) { ep.stream = true; continue; }
        if (cli_gen_flag(g, o)) continue;
        if (!strcmp(o, "--lines")) { lines = 1; ep.stream = true; continue; }
        if (!strcmp(o, "-")) { text_file = "-"; continue; } /* stdin, as --text-file - */
        if (o[0] != '-') {
            if (text_arg) return usage_error("more than one TEXT argument (quote the text)");
            text_arg = o;
            continue;
        }
        if (!strcmp(o, "--")) {
            if (i + 1 < argc) {
                if (text_arg || i + 2 < argc) return usage_error("more than one TEXT argument (quote the text)");
                text_arg = argv[++i];
            }
            continue;
        }
        static const char *const with_value[] = {
            "-o", "--output", "--format", "--text-file", "--model", "--voice", "--seed", "--cfm-steps", "--threads", "--backend",
            "--pause-ms", "--stream-prompt", "--stream-first-prompt", "--stream-context", "--precision", "--prefix-cache", "-t"};
        if (cli_gen_is_option(o)) {
            if (i + 1 >= argc) return usage_error("%s needs a value", o);
            if (!cli_gen_parse(g, "say", o, argv[++i])) return 2;
            continue;
        }
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= !strcmp(o, with_value[k]);
        if (!known) return usage_error("unknown option '%s'", o);
        if (i + 1 >= argc) return usage_error("%s needs a value", o);
        const char *val = argv[++i];
        if (!strcmp(o, "-o") || !strcmp(o, "--output")) out_path = val;
        else if (!strcmp(o, "--format")) format = val;
        else if (!strcmp(o, "--text-file")) text_file = val;
        else if (!strcmp(o, "--model")) model_path = val;
        else if (!strcmp(o, "--prefix-cache")) prefix_cache = val;
        else if (!strcmp(o, "--voice")) voice_path = val;
        else if (!strcmp(o, "--seed")) { if (!cli_parse_u64("say", o, val, &ep.seed)) return 2; }
        else if (!strcmp(o, "--cfm-steps")) { if (!parse_int(o, val, 1, 1000, &ep.cfm_steps)) return 2; }
        else if (!strcmp(o, "--stream-first-prompt")) { if (!parse_int(o, val, 0, 100000, &ep.stream_first_prompt_tokens)) return 2; }
        else if (!strcmp(o, "--stream-context")) { if (!parse_int(o, val, 0, 100000, &ep.stream_context_tokens)) return 2; }
        else if (!strcmp(o, "--stream-prompt")) { if (!parse_int(o, val, 0, 100000, &ep.stream_prompt_tokens)) return 2; }
        else if (!strcmp(o, "--precision")) {
            if (!strcmp(val, "auto")) ep.precision = ENGINE_PREC_AUTO;
            else if (!strcmp(val, "f32")) ep.precision = ENGINE_PREC_F32;
            else if (!strcmp(val, "bf16")) ep.precision = ENGINE_PREC_BF16;
            else return usage_error("--precision: '%s' is not auto, f32 or bf16", val);
        }
        else if (!strcmp(o, "--pause-ms")) { if (!parse_int(o, val, 0, 60000, &ep.pause_ms)) return 2; }
        else if (!strcmp(o, "--backend")) { if (!cli_backend_ok("say", val)) return 2; backend_name = val; }
        else if (!strcmp(o, "--threads") || !strcmp(o, "-t")) { if (!parse_num(o, val, 1, 1024, &v)) return 2; threads = (int)v; }
    }
    (void)v;
    if (!out_path) return usage_error("-o OUT is required (a .wav/.flac file, or '-' for raw PCM on stdout)");
    if (text_arg && text_file) return usage_error("give the text either as an argument or with --text-file, not both");
    if (g->text_ids && (text_arg || text_file || lines))
        return usage_error("--text-ids is the text: give no TEXT, --text-file or --lines with it");
    if (lines && (text_arg || (text_file && strcmp(text_file, "-"))))
        return usage_error("--lines reads its text from standard input, line by line");
    const int raw = !strcmp(out_path, "-");
    enum audio_format fmt = AUDIO_WAV_PCM16;
    char err[ERR_MAX] = "";
    if (format) {
        if (!strcmp(format, "wav")) fmt = AUDIO_WAV_PCM16;
        else if (!strcmp(format, "wav-float")) fmt = AUDIO_WAV_FLOAT;
        else if (!strcmp(format, "flac")) fmt = AUDIO_FLAC;
        else return usage_error("unknown --format '%s' (wav, wav-float, flac)", format);
        if (raw) return usage_error("--format does not apply to '-o -' (raw s16le PCM)");
    } else if (!raw && io_audio_format_from_path(out_path, &fmt, err) != CBX_OK) {
        return usage_error("cannot tell the format of '%s' from its extension; use .wav or .flac, or --format",
                           out_path);
    }
    char cached[4096];
    if (!model_path) model_path = cli_default_model(cached, sizeof cached);
    if (!model_path || !*model_path) {
        char msg[ERR_MAX];
        cli_no_model_message(msg, sizeof msg);
        return usage_error("%s", msg);
    }

    int status = 1;
    char *text = NULL;
    struct engine_model *m = NULL;
    struct backend *be = NULL;
    struct conds voice = {0};
    float *pcm = NULL;
    int64_t n_pcm = 0;
    struct say s = {quiet, verbose && !quiet, isatty(2), raw ? stdout : NULL, 0, now(), 0, 0, 0, NULL, 0};
    cbx_status rc = CBX_OK;

    /* text: argument, file, or standard input (--lines: read as it comes);
     * none with --text-ids */
    if (lines || g->text_ids) {
        /* say_lines */
    } else if (text_arg) {
        text = strdup(text_arg);
        if (!text) { rc = err_setf(err, CBX_ERR_NOMEM, "out of memory"); goto fail; }
    } else if (text_file && strcmp(text_file, "-")) {
        FILE *f = fopen(text_file, "rb");
        if (!f) { rc = err_setf(err, CBX_ERR_IO, "%s: cannot open: %s", text_file, strerror(errno)); goto fail; }
        text = read_all(f, text_file, err);
        fclose(f);
        if (!text) { rc = CBX_ERR_IO; goto fail; }
    } else {
        if (!text_file && isatty(0))
            return usage_error("no text: give TEXT, --text-file FILE, or pipe text on standard input");
        if (!(text = read_all(stdin, "stdin", err))) { rc = CBX_ERR_IO; goto fail; }
    }
    if (!lines && !g->text_ids && !text[strspn(text, " \t\r\n\f\v")]) {
        free(text);
        return usage_error("the text is empty");
    }
    if (!lines && !g->text_ids && !engine_has_word(text)) {
        free(text);
        return usage_error("the text has nothing to speak (no letters or digits)");
    }
    if (!raw && (rc = cli_check_output(out_path, err)) != CBX_OK) goto fail;

    cli_on_stop_signals(on_signal);
    /* a closed stdout shows up as EPIPE from fwrite, reported in one line */
    signal(SIGPIPE, SIG_IGN);

    /* the voice prefix store: --prefix-cache, $CHATTERBOX_PREFIX_CACHE
     * ("" turns it off), else <cache root>/prefixes */
    struct engine_load_params lp = engine_load_default_params();
    char pdir[4096];
    lp.prefix_dir = cli_prefix_dir(prefix_cache, no_prefix_cache, pdir, sizeof pdir);
    lp.t3_path = g->t3;
    lp.backend = backend_name;
    if ((rc = engine_model_load(model_path, &lp, &m, err)) != CBX_OK) goto fail;
    if (interrupted) goto fail;
    if (!cli_gen_apply(g, "say", m, &ep)) {
        engine_model_free(m);
        free(text);
        return 2;
    }
    if (s.verbose)
        fprintf(stderr, "say: model %s (%s) loaded in %.2f s on %s\n", model_path,
                variant_get(engine_model_variant(m))->name, engine_model_load_seconds(m),
                engine_model_backend(m)->name);
    if (!(be = backend_create_like(engine_model_backend(m), threads, false, err))) {
        rc = CBX_ERR_NOMEM;
        goto fail;
    }
    if (voice_path) {
        double t0 = now();
        if ((rc = engine_voice_load(m, be, voice_path, &voice, err)) != CBX_OK) goto fail;
        if (s.verbose) fprintf(stderr, "say: voice %s loaded in %.2f s\n", voice_path, now() - t0);
    }
    if (interrupted) goto fail;
    struct engine_stats st;
    s.t0 = now();
    if (lines)
        rc = say_lines(m, be, voice_path ? &voice : NULL, &ep, &s, raw ? NULL : &pcm, &n_pcm, &st, err);
    else
        rc = engine_synthesize(m, be, voice_path ? &voice : NULL, text, &ep, on_chunk, on_progress, &s,
                               raw ? NULL : &pcm, &n_pcm, &st, err);
    if (s.tty && !quiet && s.last_len && rc != CBX_OK) fputc('\n', stderr);
    if (rc != CBX_OK) goto fail;
    if (!raw && (rc = io_audio_write(out_path, pcm, n_pcm, ENGINE_SAMPLE_RATE, fmt, err)) != CBX_OK)
        goto fail;
    if (s.verbose) {
        const double gen = st.t_t3 + st.t_s3gen;
        fprintf(stderr,
                "say: %d segment%s, %lld text tokens, %lld speech tokens (%d retr%s)\n"
                "say: text %.3f s | t3 %.2f s (%.1f tokens/s) | s3gen %.2f s (%s) | total %.2f s\n"
                "say: %.2f s of audio, real-time factor %.3f (generation / audio)\n",
                st.n_segments, st.n_segments == 1 ? "" : "s", (long long)st.n_text_tokens,
                (long long)st.n_speech_tokens, st.n_retries, st.n_retries == 1 ? "y" : "ies", st.t_text,
                st.t_t3, st.t_t3 > 0 ? (double)st.n_t3_steps / st.t_t3 : 0.0, st.t_s3gen,
                st.s3gen_bf16 ? "bf16 products allowed" : "f32 products",
                st.t_total,
                st.audio_seconds, st.audio_seconds > 0 ? gen / st.audio_seconds : 0.0);
        static const char *const from[] = {"built", "in memory", "loaded"};
        if (st.prefix_source >= 0 && st.prefix_source < 3)
            fprintf(stderr, "say: voice prefix %s (%.3f s)%s%s\n", from[st.prefix_source], st.t_t3_prefix,
                    st.prefix_saved ? ", saved in " : "", st.prefix_saved ? lp.prefix_dir : "");
        if (st.prefix_note[0]) fprintf(stderr, "say: voice prefix store: %s\n", st.prefix_note);
        if (ep.stream && !lines)
            fprintf(stderr, "say: stream: first audio after %.0f ms, %d chunks\n", 1000 * st.t_first_audio,
                    st.n_chunks);
    }
    if (!raw && !quiet) fprintf(stderr, "say: wrote %s (%.2f s)\n", out_path, (double)n_pcm / ENGINE_SAMPLE_RATE);
    status = 0;
fail:
    if (status != 0) {
        if (interrupted) {
            fprintf(stderr, PROG ": interrupted%s\n", raw ? "" : "; no output written");
            status = 130;
        } else if (s.broken_pipe) {
            fprintf(stderr, PROG ": %s\n", s.broken_pipe == 1 ? "standard output was closed (broken pipe)"
                                                              : "cannot write to standard output");
        } else {
            fprintf(stderr, PROG ": %s\n", err[0] ? err : cbx_status_str(rc));
        }
    }
    free(s.s16);
    free(pcm);
    conds_free(&voice);
    backend_free(be);
    engine_model_free(m);
    free(text);
    return status;
}
