/* test_split.c - long-text splitting of the engine (pipeline/engine.h
 * engine_split, engine_has_word, engine_seed) with the Turbo tokenizer of
 * data/chatterbox-turbo: sentence ends, abbreviations, line breaks,
 * clause and word cuts under the token budget, packing of short
 * sentences, dropping of segments with nothing to speak, and that no word
 * is lost or reordered. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/engine.h"
#include "testutil.h"
#include "text/gpt2_bpe.h"
#include "text/tokenizer.h"

static struct text_tokenizer *tok;

static int64_t count(const char *s)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    char err[ERR_MAX];
    if (gpt2_bpe_encode(text_tokenizer_gpt2(tok), s, &ids, &n, err) != CBX_OK) return -1;
    free(ids);
    return n;
}

/* Split and compare with want[] (NULL-terminated). */
static void expect(const char *what, const char *text, int budget, const char *const *want)
{
    struct engine_segments S;
    char err[ERR_MAX] = "";
    cbx_status rc = engine_split(tok, text, NULL, budget, &S, err);
    CHECK(rc == CBX_OK, "%s: %s", what, err);
    if (rc != CBX_OK) return;
    int n = 0;
    while (want[n]) n++;
    int ok = S.n == n;
    for (int i = 0; ok && i < n; i++) ok = !strcmp(S.text[i], want[i]);
    CHECK(ok, "%s: %d segments (want %d)", what, S.n, n);
    if (!ok)
        for (int i = 0; i < S.n; i++) printf("    got [%d] '%s' (%lld tokens)\n", i, S.text[i], (long long)count(S.text[i]));
    engine_segments_free(&S);
}

/* Words of s in order, white space collapsed (for "nothing lost"). */
static void collapse(const char *s, char *out, size_t n)
{
    size_t k = 0;
    int sp = 1;
    for (; *s && k + 1 < n; s++) {
        if (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r') {
            if (!sp) out[k++] = ' ';
            sp = 1;
        } else {
            out[k++] = *s;
            sp = 0;
        }
    }
    if (k && out[k - 1] == ' ') k--;
    out[k] = 0;
}

/* Every segment within budget (tolerance: the short-tail merge), has a
 * word, and the segments joined give the text back. */
static void invariants(const char *what, const char *text, int budget)
{
    struct engine_segments S;
    char err[ERR_MAX] = "";
    cbx_status rc = engine_split(tok, text, NULL, budget, &S, err);
    CHECK(rc == CBX_OK && S.n > 0, "%s: %s", what, err);
    if (rc != CBX_OK) return;
    size_t len = strlen(text) + 2;
    char *joined = calloc(len * 2, 1), *a = malloc(len * 2), *b = malloc(len * 2);
    int64_t worst = 0;
    int words = 1;
    for (int i = 0; i < S.n; i++) {
        if (i) strcat(joined, " ");
        strcat(joined, S.text[i]);
        int64_t c = count(S.text[i]);
        if (c > worst) worst = c;
        words &= engine_has_word(S.text[i]);
    }
    collapse(joined, a, len * 2);
    collapse(text, b, len * 2);
    CHECK(!strcmp(a, b), "%s: segments joined give the text back", what);
    CHECK(worst <= budget + budget / 2, "%s: %d segments, largest %lld tokens (budget %d)", what, S.n,
          (long long)worst, budget);
    CHECK(words, "%s: every segment has a word", what);
    printf("  %s: %d segments, largest %lld tokens, budget %d\n", what, S.n, (long long)worst, budget);
    free(joined);
    free(a);
    free(b);
    engine_segments_free(&S);
}

int main(void)
{
    char err[ERR_MAX] = "", dir[512];
    snprintf(dir, sizeof dir, "%s/data/chatterbox-turbo", CBX_SOURCE_DIR);
    cbx_status rc = text_tokenizer_load_dir(TEXT_TOK_GPT2, dir, &tok, err);
    CHECK(rc == CBX_OK, "tokenizer %s: %s", dir, err);
    if (rc != CBX_OK) return test_summary();

    /* a short text stays one segment, byte for byte (upstream parity) */
    const char *fixture = "Oh, that's hilarious! [chuckle] Um anyway, we do have a new model in store.";
    expect("fixture text, default budget", fixture, 60, (const char *const[]){fixture, NULL});
    expect("three sentences packed", "Hello there. How are you? I am fine!", 60,
           (const char *const[]){"Hello there. How are you? I am fine!", NULL});
    expect("three sentences, budget 4", "Hello there. How are you? I am fine!", 4,
           (const char *const[]){"Hello there.", "How are you?", "I am fine!", NULL});
    expect("abbreviations and initials", "Dr. Smith met J. R. Jones today. The weather was very nice and warm.", 12,
           (const char *const[]){"Dr. Smith met J. R. Jones today.", "The weather was very nice and warm.", NULL});
    expect("closing quotes stay", "He said \"stop!\" Then he left the room quietly.", 8,
           (const char *const[]){"He said \"stop!\"", "Then he left the room quietly.", NULL});
    expect("line breaks", "First line here\nSecond line here", 4,
           (const char *const[]){"First line here", "Second line here", NULL});
    expect("decimal point is no sentence end", "It costs 3.50 dollars today. That is a very good price.", 9,
           (const char *const[]){"It costs 3.50 dollars today.", "That is a very good price.", NULL});
    expect("nothing-to-speak pieces dropped", "Hello world again.\n...\n!!!\nGoodbye world again.", 6,
           (const char *const[]){"Hello world again.", "Goodbye world again.", NULL});
    expect("clause cut", "One two three four five six, seven eight nine ten eleven twelve.", 8,
           (const char *const[]){"One two three four five six,", "seven eight nine ten eleven twelve.", NULL});
    /* a 16-token sentence, then a 1-token tail: over budget 16, under 16/8 */
    char longs[512] = "Alpha", tail[600];
    while (count(longs) < 15) strcat(longs, " beta");
    strcat(longs, ".");
    snprintf(tail, sizeof tail, "%s Ok", longs);
    CHECK(count(longs) == 16 && count("Ok") == 1, "short-tail case: %lld + %lld tokens", (long long)count(longs),
          (long long)count("Ok"));
    expect("short tail joins the previous segment", tail, 16, (const char *const[]){tail, NULL});
    expect("a longer tail does not", "Alpha beta beta. Gamma delta epsilon.", 8,
           (const char *const[]){"Alpha beta beta.", "Gamma delta epsilon.", NULL});
    expect("CJK enders without spaces", "你好。世界！", 2, (const char *const[]){"你好。", "世界！", NULL});
    expect("only punctuation", "... !!! ???", 60, (const char *const[]){NULL});

    /* long input: budget respected, nothing lost */
    char para[4096] = "";
    for (int i = 0; i < 30; i++)
        strcat(para, i % 3 == 2 ? "and then the quick brown fox jumped over the lazy dog, again. "
                                : "the quick brown fox jumps over the lazy dog ");
    invariants("paragraph", para, 20);
    char words[4096] = "";
    for (int i = 0; i < 150; i++) strcat(words, "word ");
    invariants("no punctuation at all", words, 16);

    CHECK(engine_has_word("[chuckle]") && engine_has_word("42") && engine_has_word("\xc3\xa9") &&
              engine_has_word("\xe4\xbd\xa0"),
          "engine_has_word: letters and digits of any script");
    CHECK(!engine_has_word("") && !engine_has_word("... !?") && !engine_has_word("\xc2\xbf?") &&
              !engine_has_word(" \n\t"),
          "engine_has_word: punctuation and space only");

    CHECK(engine_seed(42, 0, 0) == 42, "segment 0, attempt 0 keeps the seed (upstream parity)");
    CHECK(engine_seed(42, 0, 1) != 42 && engine_seed(42, 1, 0) != 42 &&
              engine_seed(42, 0, 1) != engine_seed(42, 1, 0) && engine_seed(42, 1, 0) == engine_seed(42, 1, 0) &&
              engine_seed(42, 1, 0) != engine_seed(43, 1, 0),
          "derived seeds: distinct per segment/attempt, deterministic");

    text_tokenizer_free(tok);
    return test_summary();
}
