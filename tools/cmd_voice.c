/* cmd_voice.c - `chatterbox voice`: make a voice profile from a reference
 * recording (upstream prepare_conditionals, src/voice/voice.h) and show
 * what a voice file holds.
 *
 *   chatterbox voice create REF -o me.voice [--npy DIR] [options]
 *   chatterbox voice info me.voice
 *
 * Everything is computed before anything is written, and the voice file is
 * written atomically, so a failure leaves no output file. Errors are one
 * line on stderr; usage errors exit 2, other failures 1. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chatterbox.h"
#include "cli.h"
#include "default_model.h"
#include "core/backend.h"
#include "core/build_id.h"
#include "io/model_file.h"
#include "voice/conds.h"
#include "voice/voice.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chatterbox voice create REF -o FILE [options]\n"
            "       chatterbox voice info FILE\n"
            "\n"
            "create: compute the conditioning tensors of a reference recording (any\n"
            "format libsndfile reads; 5-10 s of clean speech work best) with the voice\n"
            "networks of a model, and write them as a voice file for --voice.\n"
            "\n"
            "  -o, --output FILE      voice file to write (e.g. me.voice)\n"
            "  --npy DIR              also write the tensors as .npy files named as\n"
            "                         upstream's conds keys (speaker_emb, ...)\n"
            "  --model PATH           model directory or converted .gguf\n"
            "                         (default $CHATTERBOX_MODEL, else the Turbo\n"
            "                         snapshot of `chatterbox download turbo`)\n"
            "  --ref16 FILE           a 16 kHz rendition of REF to use instead of\n"
            "                         resampling (as the test fixtures do)\n"
            "  --no-loudness-norm     Turbo/Nano: keep the level (default: -27 LUFS)\n"
            "  --exaggeration X       emotion_adv stored in the voice (default 0.5)\n"
            "  -t, --threads N        CPU threads (default: all)\n"
            "  -q, --quiet            no progress on stderr\n"
            "\n"
            "info: print the metadata and tensor shapes of a voice file.\n");
}

#define usage_error(...) cli_usage_error("voice", __VA_ARGS__)

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static int cmd_create(int argc, char **argv)
{
    const char *model = NULL, *ref = NULL, *out = NULL, *npy = NULL, *ref16 = NULL;
    struct voice_params p = voice_default_params();
    double threads = 0, x;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { usage(stdout); return 0; }
        if (!strcmp(o, "--quiet") || !strcmp(o, "-q")) { quiet = 1; continue; }
        if (!strcmp(o, "--no-loudness-norm")) { p.norm_loudness = false; continue; }
        if (o[0] != '-' || !o[1]) {
            if (ref) return usage_error("unexpected argument '%s' (one reference file)", o);
            ref = o;
            continue;
        }
        if (i + 1 >= argc) return usage_error("%s needs a value", o);
        const char *v = argv[++i];
        if (!strcmp(o, "-o") || !strcmp(o, "--output")) out = v;
        else if (!strcmp(o, "--npy")) npy = v;
        else if (!strcmp(o, "--model")) model = v;
        else if (!strcmp(o, "--ref16")) ref16 = v;
        else if (!strcmp(o, "--exaggeration")) { if (!cli_parse_num("voice", o, v, 0, 10, &x)) return 2; p.exaggeration = (float)x; }
        else if (!strcmp(o, "-t") || !strcmp(o, "--threads")) { if (!cli_parse_num("voice", o, v, 1, 1024, &threads)) return 2; }
        else return usage_error("unknown option '%s'", o);
    }
    if (!ref) return usage_error("create needs a reference audio file");
    if (!out && !npy) return usage_error("create needs -o FILE (or --npy DIR)");
    char cached[4096];
    if (!model) model = cli_default_model(cached, sizeof cached);
    if (!model || !*model) {
        char msg[ERR_MAX];
        cli_no_model_message(msg, sizeof msg);
        return usage_error("%s", msg);
    }

    char err[ERR_MAX] = "";
    int status = 1;
    struct model *md = NULL;
    struct voice_models *vm = NULL;
    struct backend *be = NULL;
    struct conds c = {0};
    struct voice_report rep;
    struct audio a = {0}, a16 = {0};
    cbx_status rc = io_audio_read(ref, &a, err);
    if (rc != CBX_OK) goto done;
    if (ref16 && (rc = io_audio_read(ref16, &a16, err)) != CBX_OK) goto done;
    if (ref16 && a16.sample_rate != VOICE_S3_SR) {
        rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: sample rate %d Hz, --ref16 needs %d Hz", ref16,
                      a16.sample_rate, VOICE_S3_SR);
        goto done;
    }
    if ((rc = model_open(model, &md, err)) != CBX_OK) goto done;
    if ((rc = voice_models_load_model(md, &vm, err)) != CBX_OK) goto done;
    if (!(be = backend_cpu_create((int)threads))) {
        rc = err_setf(err, CBX_ERR_NOMEM, "cannot start %d threads", (int)threads);
        goto done;
    }
    if ((rc = voice_prepare(vm, be, &a, ref16 ? &a16 : NULL, &p, &c, &rep, err)) != CBX_OK) {
        char tmp[ERR_MAX];
        snprintf(tmp, sizeof tmp, "%s: %s", ref, strncmp(err, "voice: ", 7) ? err : err + 7);
        memcpy(err, tmp, sizeof tmp);
        goto done;
    }
    enum model_variant var = voice_models_variant(vm);
    if (!quiet) {
        double total = rep.t_resample + rep.t_loudness + rep.t_prompt_mel + rep.t_campplus + rep.t_prompt_tokens +
                       rep.t_t3_tokens + rep.t_ve;
        fprintf(stderr, "voice: %s, %.2f s at %d Hz, %s model\n", base_name(ref), (double)a.n / a.sample_rate,
                a.sample_rate, variant_get(var)->name);
        if (a.channels > 1) fprintf(stderr, "voice: %d channels mixed to mono\n", a.channels);
        if (a.sample_rate != VOICE_S3GEN_SR)
            fprintf(stderr, "voice: resampled from %d Hz to %d Hz\n", a.sample_rate, VOICE_S3GEN_SR);
        if (rep.loudness_applied)
            fprintf(stderr, "voice: loudness %.2f LUFS -> %.0f LUFS (gain %+.2f dB)\n", rep.loudness_lufs,
                    voice_rules(var)->target_lufs, rep.gain_db);
        if (rep.ve_capped)
            fprintf(stderr, "voice: long reference: the speaker embedding uses its first %d s\n",
                    VOICE_VE_MAX_LEN / VOICE_S3_SR);
        fprintf(stderr,
                "voice: %lld T3 prompt tokens, %lld S3Gen prompt tokens, %lld mel frames; %.2f s "
                "(resample %.2f, loudness %.2f, mel %.2f, campplus %.2f, tokens %.2f + %.2f, ve %.2f)\n",
                (long long)c.n_cond_prompt, (long long)c.n_prompt_token, (long long)c.n_prompt_feat, total,
                rep.t_resample, rep.t_loudness, rep.t_prompt_mel, rep.t_campplus, rep.t_prompt_tokens,
                rep.t_t3_tokens, rep.t_ve);
    }
    if (out) {
        struct conds_meta m;
        memset(&m, 0, sizeof m);
        snprintf(m.variant, sizeof m.variant, "%s", variant_get(var)->name);
        snprintf(m.source, sizeof m.source, "%s", base_name(ref));
        m.sample_rate = (uint32_t)a.sample_rate;
        m.duration = (double)a.n / a.sample_rate;
        m.loudness_norm = rep.loudness_applied;
        m.loudness_lufs = rep.loudness_lufs;
        m.gain_db = rep.gain_db;
        snprintf(m.tool, sizeof m.tool, "chatterbox %s%s%s%s", cbx_version(), cbx_build_commit[0] ? " (" : "",
                 cbx_build_commit, cbx_build_commit[0] ? ")" : "");
        if ((rc = conds_write_voice(out, &c, &m, err)) != CBX_OK) goto done;
    }
    if (npy && (rc = conds_write_npy_dir(npy, &c, err)) != CBX_OK) {
        if (out) remove(out); /* all or nothing */
        goto done;
    }
    if (!quiet && out) fprintf(stderr, "voice: wrote %s\n", out);
    status = 0;
done:
    if (rc != CBX_OK) fprintf(stderr, "chatterbox voice: %s\n", err);
    conds_free(&c);
    backend_cpu_free(be);
    voice_models_free(vm);
    model_close(md);
    io_audio_free(&a16);
    io_audio_free(&a);
    return status;
}

static void print_shape(const char *name, int64_t a, int64_t b, int64_t c3)
{
    if (c3) printf("  %-30s [%lld, %lld, %lld]\n", name, (long long)a, (long long)b, (long long)c3);
    else printf("  %-30s [%lld, %lld]\n", name, (long long)a, (long long)b);
}

static int cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        if (argv[i][0] == '-' && argv[i][1]) return usage_error("unknown option '%s'", argv[i]);
        if (path) return usage_error("info takes one file");
        path = argv[i];
    }
    if (!path) return usage_error("info needs a voice file");
    char err[ERR_MAX] = "";
    struct conds c;
    struct conds_meta m;
    if (conds_read_voice(path, &c, &m, err) != CBX_OK) {
        fprintf(stderr, "chatterbox voice: %s\n", err);
        return 1;
    }
    printf("file:            %s\n", path);
    printf("format version:  %u\n", m.format_version);
    printf("variant:         %s\n", m.variant);
    printf("source:          %s (%u Hz, %.2f s)\n", m.source, m.sample_rate, m.duration);
    if (m.loudness_norm)
        printf("loudness:        normalised from %.2f LUFS (gain %+.2f dB)\n", m.loudness_lufs, m.gain_db);
    else
        printf("loudness:        not normalised\n");
    printf("exaggeration:    %g\n", c.emotion_adv);
    printf("tool:            %s\n", m.tool);
    printf("tensors:\n");
    print_shape("t3.speaker_emb", 1, c.n_speaker, 0);
    print_shape("t3.cond_prompt_speech_tokens", 1, c.n_cond_prompt, 0);
    print_shape("t3.emotion_adv", 1, 1, 1);
    print_shape("gen.prompt_token", 1, c.n_prompt_token, 0);
    print_shape("gen.prompt_feat", 1, c.n_prompt_feat, 80);
    print_shape("gen.embedding", 1, c.n_embedding, 0);
    conds_free(&c);
    return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}

int cmd_voice(int argc, char **argv)
{
    if (argc < 2) return usage_error("missing subcommand (create, info)");
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "create")) return cmd_create(argc - 1, argv + 1);
    if (!strcmp(argv[1], "info")) return cmd_info(argc - 1, argv + 1);
    return usage_error("unknown subcommand '%s' (create, info)", argv[1]);
}
