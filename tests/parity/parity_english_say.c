/* parity_english_say.c - English (Llama T3 with CFG, standard S3Gen) END TO
 * END through the product, vs the upstream fixture: the English row of
 * say_parity.inc (the text front-end case is tests/data/english/
 * tokenizer_cases.json case 1, ids from the real tokenizers library),
 * plus Turbo's refusal of the English-only options.
 * Needs the synth_english and synth_turbo model directories. */
#include "say_parity.inc"

static const struct say_row english = {
    .variant = "english",
    .text_ids = "75 164 59 216 207 229 77 65 22 181 204 14 126 197 177 130 62 178 92 160",
    .tol = 1e-2,
    .trim = false,
    .stream = false,
    .text = "the quick brown fox jumps over the lazy dog.",
    .language = NULL,
    .ids = "235 2 662 2 475 2 564 2 603 2 640 2 193 2 607 2 523 16",
    .bad_language = {"--text-ids '1 2 3' --language fr", "speaks one language"},
};

int main(void)
{
    say_parity(&english);
    /* Turbo has no CFG */
    char cmd[3000], from[700], out[8192];
    const char *dir = test_tmpdir("english-say");
    snprintf(cmd, sizeof cmd, "'%s/chatterbox' say --model '%s/models/turbo' --cfg-weight 0.3 'Hi.' -o '%s/x.wav' 2>'%s/err.txt'",
             CBX_BINARY_DIR, CBX_BINARY_DIR, dir, dir);
    int st = say_run(cmd);
    snprintf(from, sizeof from, "%s/err.txt", dir);
    test_slurp(from, out, sizeof out);
    printf("say --cfg-weight on turbo -> exit %d: %s", st, out);
    CHECK(st == 2 && strstr(out, "not an option of the turbo model"), "turbo --cfg-weight: exit %d '%s'", st, out);
    return test_summary();
}
