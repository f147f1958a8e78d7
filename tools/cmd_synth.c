/* cmd_synth.c - `chatterbox synth VARIANT -o DIR [--seed N]`: write a
 * synthetic Hugging Face model directory (spec/synthetic-weights.md §6)
 * through tools/lib/synth.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "core/threadpool.h"
#include "synth.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chatterbox synth VARIANT -o DIR [--seed N] [--threads N] [--quiet]\n"
            "\n"
            "Write a synthetic model directory in the Hugging Face layout: every weight\n"
            "file with deterministic values (spec/synthetic-weights.md), conds.pt and the\n"
            "tokenizer files: copied where the data directory has them, else synthetic\n"
            "ones in the real formats (English tokenizer.json; multilingual\n"
            "grapheme_mtl_merged_expanded_v1.json sized to the T3's text vocabulary,\n"
            "Cangjie5_TC.json).\n"
            "\n"
            "  VARIANT          turbo, nano, english, mtl-v2, mtl-v3, or all (one\n"
            "                   subdirectory DIR/<variant> each)\n"
            "  -o, --output DIR directory to write (created if needed)\n"
            "  --seed N         global seed XORed into every file seed (default 0, the\n"
            "                   value the test fixtures use)\n"
            "  -t, --threads N  generator threads (default: all CPUs)\n"
            "  -q, --quiet      no progress on stderr\n"
            "  -h, --help       this text\n"
            "\n"
            "Data (manifests, buffers, tokenizer files) is read from $CBX_DATA_DIR,\n"
            "<executable>/../share/chatterbox or the source tree's data/.\n");
}

#define usage_error(...) cli_usage_error("synth", __VA_ARGS__)

struct progress_state {
    bool tty;
    const char *dir;
    double t0;
    const char *file;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_progress(void *user, const char *file, uint64_t done, uint64_t total)
{
    struct progress_state *ps = user;
    if (done == 0 && total == 0) { /* a file starts */
        ps->t0 = now();
        ps->file = file;
        return;
    }
    double dt = now() - ps->t0;
    if (done < total) {
        if (!ps->tty) return;
        int width = 30, fill = (int)((double)width * (double)done / (double)total);
        fprintf(stderr, "\r  %-28s [%.*s%*s] %3d%%", file, fill,
                "##############################", width - fill, "",
                (int)(100.0 * (double)done / (double)total));
        fflush(stderr);
        return;
    }
    if (total > 1)
        fprintf(stderr, "%s  %-28s %8.1f MB  %6.1f s  %7.0f MB/s\n", ps->tty ? "\r" : "", file,
                (double)total / 1e6, dt, dt > 0 ? (double)total / 1e6 / dt : 0.0);
    else
        fprintf(stderr, "  %s\n", file);
}

int cmd_synth(int argc, char **argv)
{
    const char *variant = NULL, *out = NULL;
    uint64_t seed = 0, threads = 0;
    bool quiet = false;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (++i >= argc) return usage_error("%s needs a directory", a);
            out = argv[i];
        } else if (!strcmp(a, "--seed")) {
            if (++i >= argc) return usage_error("%s needs a number", a);
            if (!cli_parse_u64("synth", a, argv[i], &seed)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (++i >= argc) return usage_error("%s needs a number", a);
            long long t;
            if (!cli_parse_int("synth", a, argv[i], 1, 1024, &t)) return 2;
            threads = (uint64_t)t;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = true;
        } else if (a[0] == '-' && a[1]) {
            return usage_error("unknown option '%s'", a);
        } else if (!variant) {
            variant = a;
        } else {
            return usage_error("unexpected argument '%s'", a);
        }
    }
    if (!variant) return usage_error("%s", "missing VARIANT (turbo, nano, english, mtl-v2, mtl-v3, all)");
    bool all = !strcmp(variant, "all");
    const struct variant *row = variant_by_name(variant);
    int v = row ? (int)row->id : -1;
    if (v < 0 && !all) return usage_error("unknown variant '%s' (%s, all)", variant, variant_names());
    if (!out || !*out) return usage_error("%s", "missing -o DIR");

    char err[ERR_MAX] = "";
    int rc = 0;
    struct threadpool *tp = tp_create(threads ? (int)threads : tp_default_threads());
    if (!tp) {
        fprintf(stderr, "chatterbox synth: cannot start worker threads\n");
        return 1;
    }
    struct progress_state ps = {.tty = !quiet && isatty(2), .dir = out};
    struct synth_options opt = {.global_seed = seed, .tp = tp,
                                .progress = quiet ? NULL : on_progress, .progress_user = &ps};
    for (int i = all ? 0 : v; i < (all ? MODEL_N_VARIANTS : v + 1); i++) {
        const char *name = variant_get((enum model_variant)i)->name;
        char dir[4096];
        int k = all ? snprintf(dir, sizeof dir, "%s/%s", out, name)
                    : snprintf(dir, sizeof dir, "%s", out);
        if (k < 0 || (size_t)k >= sizeof dir) {
            fprintf(stderr, "chatterbox synth: output path too long\n");
            rc = 1;
            break;
        }
        if (!quiet) fprintf(stderr, "chatterbox synth: %s -> %s (seed %" PRIu64 ")\n", name, dir, seed);
        if (synth_write_variant((enum model_variant)i, dir, &opt, err) != CBX_OK) {
            fprintf(stderr, "%schatterbox synth: %s\n", ps.tty ? "\n" : "", err);
            rc = 1;
            break;
        }
    }
    tp_free(tp);
    return rc;
}
