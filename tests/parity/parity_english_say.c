/* parity_english_say.c - English (Llama T3 with CFG, standard S3Gen) END TO
 * END through the product, vs the upstream fixture. The real grapheme
 * tokenizer file is not available, so the text goes in as the fixture's
 * ids (`--text-ids`, the start/stop text tokens added by the tool as
 * upstream's generate() does). The fixture's voice tensors are put in a
 * --voice directory of .npy files (emotion_adv absent: 0.5, the fixture's
 * exaggeration). With seed 42, greedy decoding (--top-k 1: argmax after
 * the repetition penalty, as the fixture's greedy run) and the fixture's
 * max_new_tokens 64:
 *   1. `chatterbox tokens` prints exactly the fixture's S3Gen input
 *      (drop_invalid_tokens, then ids < 6561), and text through the
 *      model's tokenizer.json gives the tokens of its ids;
 *   2. `chatterbox say` gives s3gen_wav within rel 1e-2 (the S3Gen
 *      waveform tolerance, fixtures/README.md), from the Hugging Face
 *      directory and from a GGUF converted (F32) from it;
 *   3. options the variant lacks or misuses fail with one line, exit 2.
 * Needs the synth_english model directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "io/audio.h"
#include "io/model_file.h"
#include "io/npy.h"
#include "testutil.h"

#define TEXT_IDS "75 164 59 216 207 229 77 65 22 181 204 14 126 197 177 130 62 178 92 160"
#define TOL 1e-2

static char gguf_path[600];
static void remove_gguf(void)
{
    if (gguf_path[0]) remove(gguf_path);
}

static int run(const char *cmd)
{
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void say_cli(const char *what, const char *model, const char *voice, const char *dir,
                    const struct npy *want)
{
    char out[700], cmd[3000], err[ERR_MAX] = "";
    snprintf(out, sizeof out, "%s/say.wav", dir);
    snprintf(cmd, sizeof cmd,
             "'%s/chatterbox' say --text-ids '" TEXT_IDS "' --model '%s' --voice '%s' --seed 42 --top-k 1 "
             "--max-tokens 64 --no-prefix-cache --format wav-float -o '%s' --quiet",
             CBX_BINARY_DIR, model, voice, out);
    int rc = run(cmd);
    CHECK(rc == 0, "%s: exit %d", what, rc);
    struct audio a = {0};
    if (rc == 0 && io_audio_read(out, &a, err) == CBX_OK) {
        const int64_t nw = want->ne[want->ndim - 1];
        CHECK(a.sample_rate == 24000, "%s: %d Hz", what, a.sample_rate);
        CHECK(a.n == nw, "%s: %lld samples, want %lld", what, (long long)a.n, (long long)nw);
        if (a.n == nw) check_close(what, a.pcm, want->data, (size_t)nw, 0, TOL);
    } else {
        CHECK(0, "%s: no output: %s", what, err);
    }
    io_audio_free(&a);
    remove(out);
}

int main(void)
{
    char model[600], err[ERR_MAX] = "", voice[700], from[700], cmd[3000], out[8192];
    snprintf(model, sizeof model, "%s/models/english", CBX_BINARY_DIR);
    const char *dir = test_tmpdir("english-say");
    snprintf(voice, sizeof voice, "%s/voice", dir);
    test_fixture_voice_dir("english", voice);

    /* 1. tokens: the S3Gen input of the fixture */
    snprintf(cmd, sizeof cmd,
             "'%s/chatterbox' tokens --model '%s' --voice '%s' --text-ids '" TEXT_IDS
             "' --seed 42 --top-k 1 --max-tokens 64 --quiet > '%s/tokens.txt'",
             CBX_BINARY_DIR, model, voice, dir);
    CHECK(run(cmd) == 0, "chatterbox tokens --text-ids: exit status");
    snprintf(from, sizeof from, "%s/tokens.txt", dir);
    test_slurp(from, out, sizeof out);
    struct npy want_tok;
    snprintf(from, sizeof from, "%s/s3gen_input_tokens.npy", test_data("english"));
    if (io_npy_read(from, &want_tok, err) == CBX_OK) {
        const int32_t *w = want_tok.data;
        int64_t nw = want_tok.ne[0], n = 0, same = 0;
        char *p = out, *end;
        for (long v = strtol(p, &end, 10); end != p; p = end, v = strtol(p, &end, 10), n++)
            if (n < nw && v == w[n] && same == n) same++;
        printf("%-60s %lld tokens, want %lld, identical prefix %lld %s\n",
               "parity_english_tokens (tokens --text-ids, greedy)", (long long)n, (long long)nw, (long long)same,
               n == nw && same == nw ? "PASS" : "FAIL");
        CHECK(n == nw && same == nw, "tokens: %lld of %lld, identical prefix %lld", (long long)n, (long long)nw,
              (long long)same);
        io_npy_free(&want_tok);
    } else {
        CHECK(0, "%s", err);
    }

    /* 1b. the text front end in the engine: text through the model
     * directory's tokenizer.json (the synthetic one `synth english`
     * writes) gives the speech tokens of the ids the real `tokenizers`
     * library makes of it (tests/data/english/tokenizer_cases.json, case
     * 1): punc_norm, [SPACE], grapheme BPE, start/stop */
    char out2[8192];
    snprintf(cmd, sizeof cmd,
             "'%s/chatterbox' tokens --model '%s' --voice '%s' --text 'the quick brown fox jumps over the lazy dog.' "
             "--seed 7 --max-tokens 24 --quiet > '%s/t1.txt' && '%s/chatterbox' tokens --model '%s' --voice '%s' "
             "--text-ids '235 2 662 2 475 2 564 2 603 2 640 2 193 2 607 2 523 16' --seed 7 --max-tokens 24 --quiet "
             "> '%s/t2.txt'",
             CBX_BINARY_DIR, model, voice, dir, CBX_BINARY_DIR, model, voice, dir);
    CHECK(run(cmd) == 0, "tokens --text / --text-ids: exit status");
    snprintf(from, sizeof from, "%s/t1.txt", dir);
    test_slurp(from, out, sizeof out);
    snprintf(from, sizeof from, "%s/t2.txt", dir);
    test_slurp(from, out2, sizeof out2);
    printf("%-60s %s\n", "parity_english_text_front_end (text vs its ids, sampled)",
           out[0] && !strcmp(out, out2) ? "identical PASS" : "differ FAIL");
    CHECK(out[0] && !strcmp(out, out2), "tokens from text '%s' vs from ids '%s'", out, out2);

    /* 2. say: the waveform, HF directory and converted GGUF */
    struct npy want;
    snprintf(from, sizeof from, "%s/s3gen_wav.npy", test_data("english"));
    if (io_npy_read(from, &want, err) != CBX_OK) {
        CHECK(0, "%s", err);
        return test_summary();
    }
    say_cli("parity_english_say (say --text-ids, HF dir, seed 42, greedy, 64 tokens)", model, voice, dir, &want);
    snprintf(gguf_path, sizeof gguf_path, "%s/english-say-parity.gguf", CBX_BINARY_DIR);
    atexit(remove_gguf);
    struct model_convert_params prm = {TYPE_F32, -1, NULL, NULL};
    cbx_status rc = model_convert(model, gguf_path, &prm, err);
    CHECK(rc == CBX_OK, "convert %s -> %s: %s", model, gguf_path, err);
    if (rc == CBX_OK) say_cli("parity_english_say_gguf (say --text-ids, F32 gguf)", gguf_path, voice, dir, &want);
    io_npy_free(&want);

    /* 3. errors: one line, exit 2 */
    static const char *const bad[][2] = {
        {"--language fr", "speaks one language"},
        {"--text-ids '1 x 3'", "non-negative integers"},
        {"--cfg-weight -1", "--cfg-weight"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd,
                 "'%s/chatterbox' say --model '%s' %s %s -o '%s/x.wav' 2>'%s/err.txt'", CBX_BINARY_DIR, model,
                 strstr(bad[i][0], "text-ids") ? "" : "--text-ids '1 2 3'", bad[i][0], dir, dir);
        int st = run(cmd);
        snprintf(from, sizeof from, "%s/err.txt", dir);
        test_slurp(from, out, sizeof out);
        printf("say %-24s -> exit %d: %s", bad[i][0], st, out);
        CHECK(st == 2 && strstr(out, bad[i][1]) && !strchr(strchr(out, '\n') ? strchr(out, '\n') + 1 : "", '\n'),
              "say %s: exit %d, '%s'", bad[i][0], st, out);
        snprintf(from, sizeof from, "%s/x.wav", dir);
        FILE *f = fopen(from, "rb");
        CHECK(!f, "say %s left an output file", bad[i][0]);
        if (f) fclose(f);
    }
    /* Turbo has no CFG */
    snprintf(cmd, sizeof cmd, "'%s/chatterbox' say --model '%s/models/turbo' --cfg-weight 0.3 'Hi.' -o '%s/x.wav' 2>'%s/err.txt'",
             CBX_BINARY_DIR, CBX_BINARY_DIR, dir, dir);
    int st = run(cmd);
    snprintf(from, sizeof from, "%s/err.txt", dir);
    test_slurp(from, out, sizeof out);
    printf("say --cfg-weight on turbo -> exit %d: %s", st, out);
    CHECK(st == 2 && strstr(out, "not an option of the turbo model"), "turbo --cfg-weight: exit %d '%s'", st, out);
    return test_summary();
}
