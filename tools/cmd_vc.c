/* cmd_vc.c - `chatterbox vc`: voice conversion (src/pipeline/vc.h), the
 * speech of a source recording said again in a target voice, as upstream's
 * ChatterboxVC.generate does with the english model:
 *   chatterbox vc SOURCE.wav --voice TARGET -o out.wav
 * Output to a wav/flac file (written atomically at the end, so a failure
 * leaves no file) or raw s16le PCM on stdout ('-o -').
 * Errors are one line "chatterbox vc: ..." on stderr; usage errors exit 2,
 * runtime failures 1. */
#include <errno.h>
#include <math.h>
#include <signal.h>
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
#include "hf_download.h"
#include "io/model_file.h"
#include "pipeline/vc.h"

#define PROG "chatterbox vc"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chatterbox vc SOURCE [--voice TARGET] -o OUT [options]\n"
            "\n"
            "Voice conversion: say the speech of SOURCE (an audio file, any rate) again in\n"
            "the TARGET voice, as upstream's ChatterboxVC (english model: S3 tokenizer, then\n"
            "S3Gen with 10 flow steps and classifier-free guidance). No watermark.\n"
            "\n"
            "  --model DIR|GGUF     english model: Hugging Face directory or converted .gguf\n"
            "                       (default $CHATTERBOX_MODEL, else the cached english\n"
            "                       snapshot of `chatterbox download english`)\n"
            "  --voice TARGET       a .voice file, a conditioning .npy directory, or an audio\n"
            "                       clip (its first 10 s); default: the model's built-in voice\n"
            "  -o, --output FILE    output audio (.wav: 16-bit PCM, .flac), or '-' for raw\n"
            "                       16-bit little-endian mono PCM at 24 kHz on stdout\n"
            "  --format F           pcm16, f32 (float wav) or flac; default from the extension\n"
            "  --seed N             seed of every random stream (default 0)\n"
            "  --cfm-steps N        flow-matching Euler steps (default 10)\n"
            "  --threads N          CPU threads (default: all)\n"
            CLI_BACKEND_HELP
            "  --quiet              no progress on stderr\n");
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* n samples as s16le on stdout; 1 = broken pipe, 2 = other failure. */
static int write_raw(const float *pcm, int64_t n)
{
    int16_t buf[4096];
    for (int64_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < sizeof buf / sizeof buf[0] && i < n; k++, i++) {
            /* as libsndfile's clipped float -> short: lrintf(x * 32767) */
            float x = pcm[i] > 1.0f ? 1.0f : pcm[i] < -1.0f ? -1.0f : pcm[i];
            int16_t v = (int16_t)lrintf(x * 32767.0f);
            uint8_t *b = (uint8_t *)&buf[k];
            b[0] = (uint8_t)(v & 0xff); /* little-endian whatever the host */
            b[1] = (uint8_t)((uint16_t)v >> 8);
        }
        if (fwrite(buf, sizeof buf[0], k, stdout) != k) return errno == EPIPE ? 1 : 2;
    }
    if (fflush(stdout) != 0) return errno == EPIPE ? 1 : 2;
    return 0;
}

int cmd_vc(int argc, char **argv)
{
    const char *model_path = getenv("CHATTERBOX_MODEL"), *source = NULL, *voice_path = NULL,
               *out_path = NULL, *format = NULL;
    struct vc_params p = vc_default_params(NULL);
    long long v, threads = 0;
    const char *backend = NULL; /* --backend */
    int quiet = 0;
    uint64_t seed = 0;
    if (model_path && !*model_path) model_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { usage(stdout); return 0; }
        if (!strcmp(o, "--quiet") || !strcmp(o, "-q")) { quiet = 1; continue; }
        if (o[0] != '-' || !strcmp(o, "-")) {
            if (source) return cli_usage_error("vc", "one SOURCE only, got '%s' and '%s'", source, o);
            source = o;
            continue;
        }
        const char *val = cli_option_value("vc", argc, argv, &i);
        if (!val) return 2;
        if (!strcmp(o, "--model")) model_path = val;
        else if (!strcmp(o, "--voice")) voice_path = val;
        else if (!strcmp(o, "-o") || !strcmp(o, "--output")) out_path = val;
        else if (!strcmp(o, "--format")) format = val;
        else if (!strcmp(o, "--seed")) { if (!cli_parse_u64("vc", o, val, &seed)) return 2; }
        else if (!strcmp(o, "--cfm-steps")) { if (!cli_parse_int("vc", o, val, 1, 1000, &v)) return 2; p.n_cfm_steps = (int)v; }
        else if (!strcmp(o, "--backend")) { if (!cli_backend_ok("vc", val)) return 2; backend = val; }
        else if (!strcmp(o, "--threads")) { if (!cli_parse_int("vc", o, val, 1, 1024, &threads)) return 2; }
        else return cli_usage_error("vc", "unknown option '%s'", o);
    }
    if (!source) return cli_usage_error("vc", "SOURCE audio file is required");
    if (!strcmp(source, "-")) return cli_usage_error("vc", "SOURCE must be a file (stdin is not read)");
    if (!out_path) return cli_usage_error("vc", "-o OUT is required (a .wav/.flac file, or '-' for raw PCM on stdout)");
    char err[ERR_MAX] = "";
    const int raw = !strcmp(out_path, "-");
    enum audio_format fmt = AUDIO_WAV_PCM16;
    if (format) {
        if (raw) return cli_usage_error("vc", "--format does not apply to '-o -' (raw 16-bit PCM)");
        if (!strcasecmp(format, "pcm16")) fmt = AUDIO_WAV_PCM16;
        else if (!strcasecmp(format, "f32")) fmt = AUDIO_WAV_FLOAT;
        else if (!strcasecmp(format, "flac")) fmt = AUDIO_FLAC;
        else return cli_usage_error("vc", "--format must be pcm16, f32 or flac, got '%s'", format);
    } else if (!raw && io_audio_format_from_path(out_path, &fmt, err) != CBX_OK) {
        return cli_usage_error("vc", "%s (or give --format)", err);
    }
    char cached[4096];
    if (!model_path) {
        if (hf_cache_model_dir("english", cached, sizeof cached) == CBX_OK && hf_snapshot_complete(cached))
            model_path = cached;
        else {
            fprintf(stderr, PROG ": no model: give --model DIR|GGUF (english), set CHATTERBOX_MODEL, or run "
                    "`chatterbox download english`\n");
            return 2;
        }
    }

    int status = 1;
    struct vc_model *vm = NULL;
    struct backend *be = NULL;
    struct audio src = {0};
    struct conds target = {0};
    float *pcm = NULL;
    int64_t n_pcm = 0, n_tok = 0;
    int32_t *tok = NULL;
    int broken = 0;
    cbx_status rc = CBX_OK;
    if (!raw && (rc = cli_check_output(out_path, err)) != CBX_OK) goto fail;
    /* the source first: a missing or unreadable file fails before the model loads */
    if ((rc = io_audio_read(source, &src, err)) != CBX_OK) goto fail;
    if ((double)src.n / src.sample_rate < VC_MIN_SOURCE_SECONDS) {
        rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: %.3f s of audio, voice conversion needs at least %.1f s",
                      source, (double)src.n / src.sample_rate, VC_MIN_SOURCE_SECONDS);
        goto fail;
    }
    signal(SIGPIPE, SIG_IGN); /* a closed stdout shows up as EPIPE */
    const double t0 = now();
    if ((rc = vc_model_load(model_path, -1, backend, &vm, err)) != CBX_OK) goto fail;
    const double t_load = now() - t0;
    if (!(be = backend_create_like(vc_model_backend(vm), (int)threads, false, err))) {
        rc = CBX_ERR_NOMEM;
        goto fail;
    }
    if (voice_path && (rc = vc_voice_load(vm, be, voice_path, &target, err)) != CBX_OK) goto fail;
    if (!voice_path && !vc_model_voice(vm)) {
        rc = err_setf(err, CBX_ERR_NOT_FOUND, "%s: no built-in voice (%s); give --voice TARGET", model_path,
                      vc_model_no_voice_reason(vm));
        goto fail;
    }
    struct vc_params dp = vc_default_params(vm);
    dp.n_cfm_steps = p.n_cfm_steps;
    dp.seed = seed;
    const double t1 = now();
    if (!quiet && isatty(2)) fprintf(stderr, "vc: converting %.2f s of %s ...", (double)src.n / src.sample_rate, source);
    rc = vc_convert(vm, be, &src, source, voice_path ? &target : NULL, &dp, &pcm, &n_pcm, &tok, &n_tok, err);
    if (!quiet && isatty(2)) fputc('\r', stderr);
    if (rc != CBX_OK) goto fail;
    const double t_run = now() - t1, secs = (double)n_pcm / VC_SAMPLE_RATE;
    if (raw) {
        if ((broken = write_raw(pcm, n_pcm)) != 0) goto fail;
    } else if ((rc = io_audio_write(out_path, pcm, n_pcm, VC_SAMPLE_RATE, fmt, err)) != CBX_OK) {
        goto fail;
    }
    if (!quiet)
        fprintf(stderr, "vc: %lld speech tokens -> %.2f s of audio in %.2f s (RTF %.3f, load %.2f s)%s%s\n",
                (long long)n_tok, secs, t_run, secs > 0 ? t_run / secs : 0.0, t_load, raw ? "" : " -> ",
                raw ? "" : out_path);
    status = 0;
fail:
    if (status != 0) {
        if (broken)
            fprintf(stderr, PROG ": %s\n", broken == 1 ? "standard output was closed (broken pipe)"
                                                        : "cannot write to standard output");
        else
            fprintf(stderr, PROG ": %s\n", err[0] ? err : cbx_status_str(rc));
    }
    free(pcm);
    free(tok);
    conds_free(&target);
    io_audio_free(&src);
    backend_free(be);
    vc_model_free(vm);
    return status;
}
