/* parity_mtl_v3_say.c - Multilingual v3 END TO END through the product, vs
 * the upstream fixture: the mtl-v3 row of say_parity.inc (v2's code with
 * v3's T3; the text front-end case in German). Then `--t3 FILE`: the v2 T3
 * under another name (a hard link, as a single-language pack would be
 * named) in place of v3's turns the v3 directory into v2, so `tokens`
 * gives the mtl-v2 fixture's S3Gen input; a T3 that does not fit (the
 * English one, 704 text ids) and a file that is no T3 fail with one line.
 * Needs the synth_mtl-v3, synth_mtl-v2 and synth_english model directories. */
#include <unistd.h>

#include "say_parity.inc"

static const struct say_row mtl_v3 = {
    .variant = "mtl-v3",
    .text_ids = "75 164 59 216 207 229 77 65 22 181 204 14 126 197 177 130 62 178 92 160",
    .tol = 1e-2,
    .trim = true,
    .stream = false,
    .text = "Guten Morgen, wir gehen nach Hause.",
    .language = "de",
    .ids = NULL,
    .bad_language = {"--language XX 'Hallo.'", "unsupported language \"XX\""},
};

static char pack[700];
static void remove_pack(void)
{
    if (pack[0]) remove(pack);
}

/* `tokens` on the v3 directory with --t3 t3; its stdout and stderr. */
static int tokens_t3(const char *dir, const char *voice, const char *t3, char *out, size_t n)
{
    char cmd[3000], from[700];
    snprintf(cmd, sizeof cmd,
             "'%s/chatterbox' tokens --model '%s/models/mtl-v3' --voice '%s' --t3 '%s' --text-ids '%s' --seed 42 "
             "--top-k 1 --max-tokens 64 --quiet > '%s/t3.txt' 2>&1",
             CBX_BINARY_DIR, CBX_BINARY_DIR, voice, t3, mtl_v3.text_ids, dir);
    int st = say_run(cmd);
    snprintf(from, sizeof from, "%s/t3.txt", dir);
    test_slurp(from, out, n);
    return st;
}

int main(void)
{
    say_parity(&mtl_v3);

    char voice[700], src[700], out[8192], err[ERR_MAX] = "";
    const char *dir = test_tmpdir("mtl-v3-t3-file");
    snprintf(voice, sizeof voice, "%s/voice", dir);
    test_fixture_voice_dir("mtl-v3", voice); /* v2's: the same reference */
    snprintf(src, sizeof src, "%s/models/mtl-v2/t3_mtl23ls_v2.safetensors", CBX_BINARY_DIR);
    snprintf(pack, sizeof pack, "%s/t3_es_pack.safetensors", dir);
    remove(pack);
    atexit(remove_pack);
    CHECK(link(src, pack) == 0 || test_copy_file(src, pack), "%s -> %s", src, pack);
    int st = tokens_t3(dir, voice, pack, out, sizeof out);
    struct npy want;
    char from[700];
    snprintf(from, sizeof from, "%s/s3gen_input_tokens.npy", test_data("mtl-v2"));
    if (io_npy_read(from, &want, err) == CBX_OK) {
        const int32_t *w = want.data;
        int64_t nw = want.ne[0], n = 0, same = 0;
        char *p = out, *end;
        for (long v = strtol(p, &end, 10); end != p; p = end, v = strtol(p, &end, 10), n++)
            if (n < nw && v == w[n] && same == n) same++;
        printf("%-60s exit %d, %lld tokens, want %lld, identical prefix %lld %s\n",
               "parity_mtl_v3_t3_file (v3 dir, --t3 the v2 T3 renamed)", st, (long long)n, (long long)nw,
               (long long)same, st == 0 && n == nw && same == nw ? "PASS" : "FAIL");
        CHECK(st == 0 && n == nw && same == nw, "--t3: exit %d, %lld of %lld, identical prefix %lld: %.200s", st,
              (long long)n, (long long)nw, (long long)same, out);
        io_npy_free(&want);
    } else {
        CHECK(0, "%s", err);
    }
    remove_pack();

    /* a T3 that does not fit, a file that is no T3: one line, exit 1 */
    const char *const bad[][2] = {
        {"english/t3_cfg.safetensors", "704 text ids does not fit the mtl-v3 model"},
        {"mtl-v3/conds.pt", "must be .safetensors or .gguf"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(src, sizeof src, "%s/models/%s", CBX_BINARY_DIR, bad[i][0]);
        st = tokens_t3(dir, voice, src, out, sizeof out);
        printf("tokens --t3 %-28s -> exit %d: %s", bad[i][0], st, out);
        CHECK(st == 1 && strstr(out, bad[i][1]) && strchr(out, '\n') == out + strlen(out) - 1,
              "--t3 %s: exit %d, '%s'", bad[i][0], st, out);
    }
    return test_summary();
}
