/* cmd_convert.c - `chatterbox convert DIR -o model.gguf [--quant TYPE]`:
 * a Hugging Face model directory -> one GGUF file (layout in
 * src/io/model_file.h, which types each tensor gets in
 * src/io/quant_policy.h). */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "io/model_file.h"
#include "io/quant_policy.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chatterbox convert DIR -o FILE.gguf [--quant TYPE] [--variant V] [--quiet]\n"
            "\n"
            "Write a Hugging Face model directory (weights, conds.pt built-in voice,\n"
            "tokenizer files) as one GGUF file that every --model option accepts.\n"
            "\n"
            "  -o, --output FILE  file to write (replaced atomically; nothing is left\n"
            "                     behind when converting fails)\n"
            "  --quant TYPE       type of the linear weights: f32 (default), f16, bf16,\n"
            "                     q8_0, q4_0, q4_1, q5_0, q5_1. Norms, biases, embeddings,\n"
            "                     convolutions and small tensors keep their stored type.\n"
            "  --variant V        turbo, nano, english, mtl-v2, mtl-v3 (default: detected;\n"
            "                     needed for a snapshot that holds several)\n"
            "  -q, --quiet        no progress on stderr\n"
            "  -h, --help         this text\n"
            "\n"
            "Tensor names are the upstream ones, up to 79 bytes; ggml's own GGUF reader\n"
            "refuses names of 64 bytes or more, so the file is for chatterbox.\n");
}

#define usage_error(...) cli_usage_error("convert", __VA_ARGS__)

/* The GGUF writer's temporary file ("<path>.tmp.<pid>", io/gguf.h),
 * removed when the conversion is interrupted so no partial file stays. */
static char tmp_path[4200];

static void on_signal(int sig)
{
    if (tmp_path[0]) unlink(tmp_path); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

struct progress {
    struct timespec t0;
    int last_pct;
};

static double since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
}

static void on_progress(void *user, int i, int n, const char *name, uint64_t bytes, uint64_t total)
{
    struct progress *p = user;
    int pct = total ? (int)(100.0 * (double)bytes / (double)total) : 100;
    if (i < n && pct == p->last_pct && i % 64) return;
    p->last_pct = pct;
    if (i < n)
        fprintf(stderr, "\rconvert: %3d%% tensor %d/%d %-60.60s", pct, i + 1, n, name);
    else
        fprintf(stderr, "\rconvert: 100%% %d tensors, %.1f MB in %.1f s%*s\n", n, (double)total / 1e6,
                since(&p->t0), 60, "");
}

int cmd_convert(int argc, char **argv)
{
    const char *src = NULL, *dst = NULL;
    struct model_convert_params prm = {TYPE_F32, -1, NULL, NULL};
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(o, "--quiet") || !strcmp(o, "-q")) { quiet = 1; continue; }
        if (o[0] != '-') {
            if (src) return usage_error("more than one source directory ('%s', '%s')", src, o);
            src = o;
            continue;
        }
        if (i + 1 >= argc) return usage_error("%s needs a value", o);
        const char *val = argv[++i];
        if (!strcmp(o, "-o") || !strcmp(o, "--output")) {
            dst = val;
        } else if (!strcmp(o, "--quant")) {
            int t = dtype_from_name(val);
            if (t < 0 || !quant_policy_target_ok((enum dtype)t))
                return usage_error("--quant '%s' unknown (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1)", val);
            prm.type = (enum dtype)t;
        } else if (!strcmp(o, "--variant")) {
            const struct variant *vr = variant_by_name(val);
            if (!vr) return usage_error("--variant '%s' unknown (%s)", val, variant_names());
            prm.variant = (int)vr->id;
        } else {
            return usage_error("unknown option '%s'", o);
        }
    }
    if (!src) return usage_error("a model directory is required");
    if (!dst) return usage_error("-o FILE is required");

    if ((size_t)snprintf(tmp_path, sizeof tmp_path, "%s.tmp.%ld", dst, (long)getpid()) >= sizeof tmp_path)
        tmp_path[0] = 0;
    cli_on_stop_signals(on_signal);
    struct progress pr = {{0, 0}, -1};
    clock_gettime(CLOCK_MONOTONIC, &pr.t0);
    if (!quiet) {
        prm.progress = on_progress;
        prm.progress_user = &pr;
    }
    char err[ERR_MAX] = "";
    cbx_status rc = model_convert(src, dst, &prm, err);
    if (rc != CBX_OK) {
        if (!quiet && pr.last_pct >= 0) fputc('\n', stderr);
        fprintf(stderr, "chatterbox convert: %s\n", err);
        return 1;
    }
    if (!quiet) fprintf(stderr, "convert: wrote %s (%s)\n", dst, dtype_name(prm.type));
    return 0;
}
