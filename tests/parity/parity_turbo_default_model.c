/* parity_turbo_default_model.c - the default --model of `say` and `tokens`
 * (tools/default_model.h): $CHATTERBOX_MODEL, else the complete Turbo
 * snapshot of the download cache ($XDG_CACHE_HOME/chatterbox/ResembleAI/
 * chatterbox-turbo), else one line naming `chatterbox download turbo`.
 *
 * Each case runs the CLI with a temporary XDG_CACHE_HOME (and HOME), so
 * the user's real cache plays no part:
 *   - empty cache: say and tokens exit 2 with one line naming
 *     `chatterbox download turbo`, and write nothing;
 *   - a cache directory without a download manifest: one line calling
 *     the snapshot incomplete;
 *   - a complete cached snapshot (links to the synthetic Turbo model
 *     under build/models/turbo, plus the manifest `chatterbox download`
 *     writes): `tokens` without --model prints exactly what it prints with
 *     --model, and `say` without --model writes a wav;
 *   - CHATTERBOX_MODEL wins over the cache (a missing path is reported).
 * Named parity_turbo_* so that ctest gives it the synthetic Turbo model. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hf_download.h"
#include "testutil.h"

#define BIN CBX_BINARY_DIR "/chatterbox"

static char tmp[1024], model[1100];
static char out_text[65536], err_text[8192];

/* Run `env <env> chatterbox <args>` in tmp with HOME and XDG_CACHE_HOME
 * set to cache; stdout/stderr into out_text/err_text; the exit status. */
static int run(const char *cache, const char *env, const char *args)
{
    char cmd[8192], o[1200], e[1200];
    snprintf(o, sizeof o, "%s/stdout", tmp);
    snprintf(e, sizeof e, "%s/stderr", tmp);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && env -u CHATTERBOX_MODEL HOME='%s' XDG_CACHE_HOME='%s' %s '%s' %s >'%s' 2>'%s' </dev/null",
             tmp, cache, cache, env ? env : "", BIN, args, o, e);
    int st = system(cmd);
    test_slurp(o, out_text, sizeof out_text);
    test_slurp(e, err_text, sizeof err_text);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void no_model(const char *label, const char *cache, const char *args, const char *what)
{
    int rc = run(cache, NULL, args);
    printf("  %-34s exit %d: %s", label, rc, err_text);
    CHECK(rc == 2 && test_count_lines(err_text) == 1 && strstr(err_text, "chatterbox download turbo") &&
              strstr(err_text, what) && out_text[0] == 0,
          "%s: exit %d (want 2), one line naming `chatterbox download turbo` and '%s'", label, rc, what);
}

/* A cached Turbo snapshot: links to every file of the synthetic model and
 * a download manifest with their sizes (what hf_snapshot_complete reads). */
static bool make_snapshot(const char *cache, char *dir, size_t n)
{
    char sub[1400];
    snprintf(sub, sizeof sub, "mkdir -p '%s'", cache);
    if (system(sub) != 0) return false;
    setenv("XDG_CACHE_HOME", cache, 1);
    bool ok = hf_cache_model_dir("turbo", dir, n) == CBX_OK;
    unsetenv("XDG_CACHE_HOME");
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (!ok || system(cmd) != 0) return false;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, HF_MANIFEST_NAME);
    FILE *m = fopen(path, "w");
    DIR *d = opendir(model);
    if (!m || !d) {
        if (m) fclose(m);
        if (d) closedir(d);
        return false;
    }
    fprintf(m, "{\"variant\": \"turbo\", \"repo\": \"ResembleAI/chatterbox-turbo\", \"files\": [");
    struct dirent *e;
    int k = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char src[2400], dst[4400];
        struct stat st;
        snprintf(src, sizeof src, "%s/%s", model, e->d_name);
        snprintf(dst, sizeof dst, "%s/%s", dir, e->d_name);
        if (stat(src, &st) != 0 || !S_ISREG(st.st_mode) || symlink(src, dst) != 0) continue;
        fprintf(m, "%s{\"name\": \"%s\", \"size\": %lld}", k++ ? ", " : "", e->d_name, (long long)st.st_size);
    }
    closedir(d);
    fprintf(m, "]}\n");
    return fclose(m) == 0 && k > 0;
}

int main(void)
{
    snprintf(tmp, sizeof tmp, "%s", test_tmpdir("default-model"));
    snprintf(model, sizeof model, "%s/models/turbo", CBX_BINARY_DIR);
    char empty[1200], partial[1200], full[1200], snap[4096], args[4096];
    snprintf(empty, sizeof empty, "%s/empty-cache", tmp);
    snprintf(partial, sizeof partial, "%s/partial-cache", tmp);
    snprintf(full, sizeof full, "%s/cache", tmp);
    char mk[4000];
    snprintf(mk, sizeof mk, "mkdir -p '%s' '%s/chatterbox/ResembleAI/chatterbox-turbo'", empty, partial);
    CHECK(system(mk) == 0, "make the test caches");

    printf("no model anywhere:\n");
    no_model("say, empty cache", empty, "say Hello. -o out.wav", "--model");
    no_model("tokens, empty cache", empty, "tokens --text Hello.", "--model");
    no_model("say, incomplete snapshot", partial, "say Hello. -o out.wav", "incomplete");
    no_model("tokens, incomplete snapshot", partial, "tokens --text Hello.", "incomplete");
    snprintf(args, sizeof args, "%s/out.wav", tmp);
    CHECK(!test_exists(args), "say left no out.wav");

    printf("cached Turbo snapshot:\n");
    if (!test_exists(model)) {
        CHECK(false, "synthetic Turbo model %s is missing (ctest fixture synth_turbo_model)", model);
        return test_summary();
    }
    CHECK(make_snapshot(full, snap, sizeof snap), "cached snapshot at %s", snap);
    CHECK(hf_snapshot_complete(snap), "the test snapshot counts as complete");
    const char *gen = "--text 'Hello there.' --top-k 1 --max-tokens 12 --seed 3 --quiet";
    snprintf(args, sizeof args, "tokens --model '%s' %s", model, gen);
    int rc = run(empty, NULL, args);
    char want[65536];
    snprintf(want, sizeof want, "%s", out_text);
    printf("  tokens --model DIR:            exit %d: %s", rc, want);
    CHECK(rc == 0 && want[0], "tokens with --model works (exit %d: %s)", rc, err_text);
    snprintf(args, sizeof args, "tokens %s", gen);
    rc = run(full, NULL, args);
    printf("  tokens (cache default):        exit %d: %s", rc, out_text);
    CHECK(rc == 0 && !strcmp(out_text, want), "tokens without --model uses the cached snapshot (same tokens)");

    rc = run(full, "CHATTERBOX_MODEL=/nonexistent/model", args);
    printf("  tokens, CHATTERBOX_MODEL set:  exit %d: %s", rc, err_text);
    CHECK(rc != 0 && strstr(err_text, "/nonexistent/model"), "CHATTERBOX_MODEL wins over the cache");
    snprintf(args, sizeof args, "CHATTERBOX_MODEL='%s'", model);
    char tok_args[1024];
    snprintf(tok_args, sizeof tok_args, "tokens %s", gen);
    rc = run(empty, args, tok_args);
    printf("  tokens, CHATTERBOX_MODEL only: exit %d: %s", rc, out_text);
    CHECK(rc == 0 && !strcmp(out_text, want), "CHATTERBOX_MODEL alone works");

    rc = run(full, NULL, "say 'Hello there.' --top-k 1 --max-tokens 12 --quiet -o cached.wav");
    snprintf(args, sizeof args, "%s/cached.wav", tmp);
    struct stat st;
    bool wrote = stat(args, &st) == 0 && st.st_size > 44;
    printf("  say (cache default):           exit %d, %lld bytes %s", rc, wrote ? (long long)st.st_size : 0LL,
           err_text[0] ? err_text : "\n");
    CHECK(rc == 0 && wrote, "say without --model writes a wav from the cached snapshot");
    return test_summary();
}
