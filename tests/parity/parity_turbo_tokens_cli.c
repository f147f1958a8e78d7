/* parity_turbo_tokens_cli.c - the `chatterbox tokens` command end to end:
 * fixture text + the fixture's conditioning as a --voice directory of .npy
 * files, seed 42, default sampling, --max-tokens 64 (the fixture scenario)
 * prints exactly the fixture's sampled tokens that go to S3Gen (< 6561).
 * Also the greedy run (--top-k 1) and the CLI's usage errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/npy.h"
#include "testutil.h"

static const char *TEXT = "Oh, that's hilarious! [chuckle] Um anyway, we do have a new model in store.";

static int run(const char *args, char *out, size_t n)
{
    return test_run_cli("tokens", args, false, out, n);
}

static void check_tokens(const char *what, const char *out, const char *fixture)
{
    struct npy want;
    char err[ERR_MAX];
    if (io_npy_read(test_data(fixture), &want, err) != CBX_OK) {
        CHECK(0, "%s", err);
        return;
    }
    int64_t nw = 1;
    for (int d = 0; d < want.ndim; d++) nw *= want.ne[d];
    const int32_t *w = want.data;
    int64_t i = 0, same = 0, n_want = 0;
    const char *p = out;
    bool ok = true;
    for (int64_t k = 0; k < nw; k++) {
        if (w[k] >= 6561) continue; /* what tts_turbo.py drops before S3Gen */
        n_want++;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) { ok = false; break; }
        p = end;
        if (v == w[k] && ok) same++;
        else ok = false;
        i++;
    }
    while (*p == ' ' || *p == '\n') p++;
    ok = ok && *p == 0;
    printf("%-48s %lld tokens identical of %lld %s\n", what, (long long)same, (long long)n_want,
           ok ? "PASS" : "FAIL");
    CHECK(ok, "%s: output differs from %s", what, fixture);
    io_npy_free(&want);
}

int main(void)
{
    const char *voice = test_tmpdir("tokens-voice");
    char cmd[8192], spk[4096];
    snprintf(spk, sizeof spk, "%s", test_data("turbo/ve_embedding.npy")); /* test_data's buffer is shared */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/speaker_emb.npy' && cp '%s' '%s/cond_prompt_speech_tokens.npy'",
             spk, voice, test_data("turbo/t3_cond_prompt_tokens.npy"), voice);
    CHECK(system(cmd) == 0, "voice dir");
    char *out = malloc(1 << 16), args[8192];
    const char *model = CBX_BINARY_DIR "/models/turbo";

    snprintf(args, sizeof args, "--model '%s' --voice '%s' --text \"%s\" --seed 42 --max-tokens 64 --quiet",
             model, voice, TEXT);
    CHECK(run(args, out, 1 << 16) == 0, "sampled run exits 0");
    check_tokens("parity_turbo_tokens_cli sampled", out, "turbo/t3_sampled_tokens.npy");

    snprintf(args, sizeof args, "--model '%s' --voice '%s' --text \"%s\" --top-k 1 --max-tokens 64 --quiet",
             model, voice, TEXT);
    CHECK(run(args, out, 1 << 16) == 0, "greedy run exits 0");
    check_tokens("parity_turbo_tokens_cli greedy", out, "turbo/t3_greedy_tokens.npy");

    /* usage errors exit 2 with nothing on stdout; runtime errors exit 1 */
    setenv("XDG_CACHE_HOME", test_tmpdir("tokens-no-cache"), 1); /* no cached default model */
    CHECK(run("--text hi", out, 1 << 16) == 2 || getenv("CHATTERBOX_MODEL"), "missing --model -> 2");
    snprintf(args, sizeof args, "--model '%s' --text hi --top-p 7", model);
    CHECK(run(args, out, 1 << 16) == 2 && out[0] == 0, "bad --top-p -> 2");
    snprintf(args, sizeof args, "--model '%s' --text hi --frobnicate 1", model);
    CHECK(run(args, out, 1 << 16) == 2, "unknown option -> 2");
    CHECK(run("--model /nonexistent --text hi", out, 1 << 16) == 1 && out[0] == 0, "missing model -> 1");
    snprintf(args, sizeof args, "--model '%s' --voice /nonexistent --text hi", model);
    CHECK(run(args, out, 1 << 16) == 1 && out[0] == 0, "missing voice dir -> 1");
    snprintf(cmd, sizeof cmd, "'%s/chatterbox' tokens --model '%s' --text \"$(printf '\\377\\376')\" >/dev/null 2>&1",
             CBX_BINARY_DIR, model);
    int st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "invalid UTF-8 text -> 1");
    free(out);
    return test_summary();
}
