/* cmd_download.c - `chatterbox download VARIANT`: fetch the official Hugging
 * Face snapshot of a variant (tools/lib/hf_download.h) and print its directory
 * on stdout, so scripts can write `m=$(chatterbox download turbo --quiet)`.
 * Progress on stderr: a bar on a terminal, one line per file otherwise,
 * nothing with --quiet; failures are one line and exit 1. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "hf_download.h"
#include "io/variant.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chatterbox download VARIANT [options]\n"
            "\n"
            "Download the official model files from Hugging Face (resumable, size and\n"
            "sha256 checked) and print the snapshot directory on stdout. A complete\n"
            "snapshot is not fetched again. VARIANT: turbo, nano, english, mtl-v2\n"
            "(also: multilingual), mtl-v3.\n"
            "\n"
            "  --dir DIR          where to put the files (default: the cache,\n"
            "                     $XDG_CACHE_HOME/chatterbox/<repo>, else ~/.cache/chatterbox/<repo>)\n"
            "  --revision REV     branch, tag or commit (default main)\n"
            "  --retries N        automatic resumes per file after a dropped connection (default 3)\n"
            "  --quiet            no progress on stderr\n"
            "\n"
            "Environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN (access token\n"
            "for private or gated repositories).\n");
}

struct view {
    int quiet, tty;
    int width; /* of the last bar line, to clear it */
};

static void human(double bytes, char *out, size_t n)
{
    if (bytes >= 1e9) snprintf(out, n, "%.2f GB", bytes / 1e9);
    else if (bytes >= 1e6) snprintf(out, n, "%.1f MB", bytes / 1e6);
    else if (bytes >= 1e3) snprintf(out, n, "%.1f kB", bytes / 1e3);
    else snprintf(out, n, "%.0f B", bytes);
}

static void on_progress(void *user, const struct hf_progress *p)
{
    struct view *v = user;
    if (v->quiet) return;
    char done[32], total[32], rate[32];
    human((double)p->done, done, sizeof done);
    human((double)p->total, total, sizeof total);
    double speed = p->seconds > 0 ? (double)(p->done - p->resumed_from) / p->seconds : 0;
    human(speed, rate, sizeof rate);
    switch (p->event) {
    case HF_EV_LISTED:
        fprintf(stderr, "download: %s@%.12s, %d files, %s\n", p->repo, p->commit, p->count, total);
        break;
    case HF_EV_PRESENT:
        fprintf(stderr, "[%d/%d] %s: present (%s)\n", p->index + 1, p->count, p->file, total);
        break;
    case HF_EV_START:
        if (p->resumed_from > 0 && !v->tty)
            fprintf(stderr, "[%d/%d] %s: resuming at %s of %s\n", p->index + 1, p->count, p->file, done, total);
        break;
    case HF_EV_BYTES:
        if (v->tty) {
            enum { BAR = 24 };
            int fill = p->total > 0 ? (int)(BAR * (double)p->done / (double)p->total) : 0;
            char bar[BAR + 1];
            for (int i = 0; i < BAR; i++) bar[i] = i < fill ? '#' : '.';
            bar[BAR] = 0;
            double eta = speed > 0 ? (double)(p->total - p->done) / speed : 0;
            fprintf(stderr, "\r[%d/%d] %s [%s] %3d%% %s / %s  %s/s  ETA %d:%02d\033[K", p->index + 1, p->count,
                    p->file, bar, p->total > 0 ? (int)(100.0 * (double)p->done / (double)p->total) : 0, done,
                    total, rate, (int)eta / 60, (int)eta % 60);
        }
        break;
    case HF_EV_RETRY:
        fprintf(stderr, "%s[%d/%d] %s: connection dropped at %s of %s; resuming (retry %d)\n", v->tty ? "\r" : "",
                p->index + 1, p->count, p->file, done, total, p->attempt);
        break;
    case HF_EV_DONE:
        fprintf(stderr, "%s[%d/%d] %s: %s in %.1f s (%s/s)%s\n", v->tty ? "\r" : "", p->index + 1, p->count,
                p->file, total, p->seconds, rate, v->tty ? "\033[K" : "");
        break;
    }
}

int cmd_download(int argc, char **argv)
{
    const char *variant = NULL, *dir = NULL;
    struct hf_download_params params;
    hf_download_default_params(&params);
    struct view view = {0, isatty(2), 0};

    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(o, "--quiet") || !strcmp(o, "-q")) {
            view.quiet = 1;
            continue;
        }
        if (o[0] != '-') {
            if (variant) {
                fprintf(stderr, "chatterbox download: one variant at a time ('%s' and '%s')\n", variant, o);
                return 2;
            }
            variant = o;
            continue;
        }
        if (strcmp(o, "--dir") && strcmp(o, "--revision") && strcmp(o, "--retries")) {
            fprintf(stderr, "chatterbox download: unknown option '%s' (see --help)\n", o);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "chatterbox download: %s needs a value\n", o);
            return 2;
        }
        const char *val = argv[++i];
        if (!strcmp(o, "--dir")) dir = val;
        else if (!strcmp(o, "--revision")) params.revision = val;
        else {
            char *end;
            errno = 0;
            long n = strtol(val, &end, 10);
            if (errno || end == val || *end || n < 0 || n > 100) {
                fprintf(stderr, "chatterbox download: --retries needs an integer in [0, 100], got '%s'\n", val);
                return 2;
            }
            params.retries = (int)n;
        }
    }
    if (!variant) {
        fprintf(stderr, "chatterbox download: which model? VARIANT is one of %s (multilingual = mtl-v2)\n",
                variant_names());
        return 2;
    }
    if (!hf_variant_repo(variant)) {
        fprintf(stderr, "chatterbox download: unknown variant '%s' (%s; multilingual = mtl-v2)\n", variant,
                variant_names());
        return 2;
    }

    char cache[4096];
    if (!dir) {
        if (hf_cache_model_dir(variant, cache, sizeof cache) != CBX_OK) {
            fprintf(stderr, "chatterbox download: no cache directory: set XDG_CACHE_HOME or HOME, or give --dir\n");
            return 1;
        }
        dir = cache;
    }
    params.progress = on_progress;
    params.user = &view;
    char err[ERR_MAX] = "";
    cbx_status rc = hf_download_snapshot(variant, dir, &params, err);
    if (rc != CBX_OK) {
        fprintf(stderr, "%schatterbox download: %s\n", view.tty && !view.quiet ? "\r\033[K" : "", err);
        return 1;
    }
    printf("%s\n", dir);
    return fflush(stdout) ? 1 : 0;
}
