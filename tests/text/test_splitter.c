/* test_splitter.c - long-text splitting (text/splitter.h) on the scripts
 * of the multilingual model, with the synthetic multilingual tokenizer of
 * tests/data/mtl-v2/tokenizer: sentence ends of zh/ja (。！？．, no space
 * after them), hi (। ॥), ar (؟ ۔), el (; after a Greek letter, U+037E),
 * ‼ ⁉; closing brackets kept with their sentence; a fullwidth ． inside a
 * number is no end; an English ";" is no end; CJK pieces joined without a
 * space; a long unspaced sentence cut between characters, never before a
 * combining voicing mark; a long Hindi sentence cut only between words;
 * zh budgets counted with the Cangjie groups. Every split point is
 * printed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "testutil.h"
#include "text/splitter.h"
#include "text/tokenizer.h"

static struct text_tokenizer *tok;

static void show(const char *what, char **seg, int n)
{
    printf("%s: %d segments:", what, n);
    for (int i = 0; i < n; i++) printf(" [%s]", seg[i]);
    printf("\n");
}

static int64_t count(const char *s, const char *lang);

/* Split text and compare with want[] (NULL-terminated). budget 0: the
 * largest of the wanted segments' counts, so that each wanted segment fits
 * and the split points are the text's own. */
static void expect(const char *what, const char *text, const char *lang, int budget, const char *const *want)
{
    char err[ERR_MAX] = "", **seg = NULL;
    int n = 0;
    bool auto_budget = budget == 0;
    for (int i = 0; auto_budget && want[i]; i++) {
        int64_t c = count(want[i], lang);
        if (c > budget) budget = (int)c;
    }
    for (int i = 1; auto_budget && want[i]; i++) { /* neighbours must not fit together */
        char both[512];
        snprintf(both, sizeof both, "%s%s", want[i - 1], want[i]);
        CHECK(count(both, lang) > budget, "%s: segments %d and %d do not fit one budget of %d", what, i - 1, i,
              budget);
    }
    cbx_status rc = text_split(tok, text, lang, budget, &seg, &n, err);
    CHECK(rc == CBX_OK, "%s: %s", what, rc == CBX_OK ? "ok" : err);
    if (rc != CBX_OK) return;
    show(what, seg, n);
    int k = 0;
    while (want[k]) k++;
    bool ok = n == k;
    for (int i = 0; ok && i < n; i++) ok = !strcmp(seg[i], want[i]);
    CHECK(ok, "%s: %d segments as expected (want %d)", what, n, k);
    text_split_free(seg, n);
}

static int64_t count(const char *s, const char *lang)
{
    int64_t n = -1;
    char err[ERR_MAX];
    if (text_tokenizer_count_lang(tok, s, strlen(s), lang, &n, err) != CBX_OK) return -1;
    return n;
}

static void test_sentence_ends(void)
{
    expect("zh", "你好。今天天气很好！我们明天见面？好的．", NULL, 0,
           (const char *const[]){"你好。", "今天天气很好！", "我们明天见面？", "好的．", NULL});
    expect("zh, one segment: joined without spaces", "你好。今天天气很好！我们明天见面？", NULL, 1000,
           (const char *const[]){"你好。今天天气很好！我们明天见面？", NULL});
    expect("zh closing brackets", "「你好。」她說。『真的？』", NULL, 0,
           (const char *const[]){"「你好。」", "她說。", "『真的？』", NULL});
    expect("zh fullwidth period in a number", "圆周率是３．１４。很好．", NULL, 0,
           (const char *const[]){"圆周率是３．１４。", "很好．", NULL});
    expect("ja", "今日は晴れです。明日は雨でしょう！本当ですか？ はい、そうです｡", "ja", 0,
           (const char *const[]){"今日は晴れです。", "明日は雨でしょう！", "本当ですか？", "はい、そうです｡", NULL});
    expect("hi", "मेरा नाम राम है। आप कैसे हैं? बहुत अच्छा॥ धन्यवाद।", NULL, 0,
           (const char *const[]){"मेरा नाम राम है।", "आप कैसे हैं?", "बहुत अच्छा॥", "धन्यवाद।", NULL});
    expect("ar", "مرحبا بالعالم. كيف حالك؟ أنا بخير۔ شكرا", NULL, 0,
           (const char *const[]){"مرحبا بالعالم.", "كيف حالك؟", "أنا بخير۔", "شكرا", NULL});
    expect("el", "Τι κάνετε; Καλά ευχαριστώ. Εσύ τι κάνεις\xcd\xbe Ναι, πολύ καλά!", NULL, 0,
           (const char *const[]){"Τι κάνετε;", "Καλά ευχαριστώ.", "Εσύ τι κάνεις\xcd\xbe", "Ναι, πολύ καλά!", NULL});
    expect("‼ ⁉ ⁇", "Wow‼ Really⁉ Sure⁇ Yes.", NULL, 0,
           (const char *const[]){"Wow‼", "Really⁉", "Sure⁇", "Yes.", NULL});
    /* an English ";" ends no sentence: the budget holds one sentence */
    const char *en = "Hello; world. Next one.";
    int b = (int)count("Hello; world.", NULL);
    CHECK(b > 0, "count");
    expect("English ';' is no sentence end", en, NULL, b,
           (const char *const[]){"Hello; world.", "Next one.", NULL});
}

/* segments concatenated (with sep between) */
static char *joined(char **seg, int n, const char *sep)
{
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(seg[i]) + strlen(sep);
    char *s = malloc(len);
    if (!s) return NULL;
    s[0] = 0;
    for (int i = 0; i < n; i++) {
        if (i) strcat(s, sep);
        strcat(s, seg[i]);
    }
    return s;
}

static void test_long(void)
{
    char err[ERR_MAX] = "", **seg = NULL;
    int n = 0;
    /* a zh sentence with no clause mark: cut between characters; the
     * budget counts the Cangjie groups (about 4-7 ids a character) */
    const char *zh = "我們明天早上八點在學校門口見面好嗎";
    int64_t plain = count(zh, NULL), cj = count(zh, "zh");
    printf("zh sentence: %lld ids without the language step, %lld with Cangjie\n", (long long)plain,
           (long long)cj);
    CHECK(cj > 3 * plain, "Cangjie groups counted");
    cbx_status rc = text_split(tok, zh, "zh", 20, &seg, &n, err);
    CHECK(rc == CBX_OK && n > 3, "long zh sentence cut: %s", rc == CBX_OK ? "ok" : err);
    if (rc == CBX_OK) {
        show("zh, budget 20", seg, n);
        char *all = joined(seg, n, "");
        CHECK(all && !strcmp(all, zh), "zh pieces give back the sentence, no space added");
        free(all);
        int over = 0;
        for (int i = 0; i < n; i++) over += count(seg[i], "zh") > 20 + 1; /* +1: the [zh] tag */
        CHECK(over == 0, "zh segments within the budget");
    }
    text_split_free(seg, n);
    /* kana with a decomposed voicing mark: never cut before U+3099 */
    const char *ja = "か\xe3\x82\x99か\xe3\x82\x99か\xe3\x82\x99き\xe3\x82\x99く\xe3\x82\x99け\xe3\x82\x99こ\xe3\x82\x99";
    rc = text_split(tok, ja, NULL, 3, &seg, &n, err);
    CHECK(rc == CBX_OK && n > 1, "long kana run cut: %s", rc == CBX_OK ? "ok" : err);
    if (rc == CBX_OK) {
        show("ja decomposed, budget 3", seg, n);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += !strncmp(seg[i], "\xe3\x82\x99", 3);
        CHECK(bad == 0, "no segment starts with a voicing mark");
        char *all = joined(seg, n, "");
        CHECK(all && !strcmp(all, ja), "kana pieces give back the text");
        free(all);
    }
    text_split_free(seg, n);
    /* a Hindi sentence over budget: cut between words only */
    const char *hi = "मेरे पास बारह किताबें और तीन कलम हैं जो मुझे बहुत पसंद हैं";
    rc = text_split(tok, hi, "hi", 12, &seg, &n, err);
    CHECK(rc == CBX_OK && n > 1, "long hi sentence cut: %s", rc == CBX_OK ? "ok" : err);
    if (rc == CBX_OK) {
        show("hi, budget 12", seg, n);
        char *all = joined(seg, n, " ");
        CHECK(all && !strcmp(all, hi), "hi pieces are whole words (joined with spaces: the sentence)");
        free(all);
    }
    text_split_free(seg, n);
    /* a zh sentence with clause marks: cut after ，、 first */
    expect("zh clauses", "北京、上海和深圳都是大城市，人口很多", "zh", 0,
           (const char *const[]){"北京、", "上海和深圳都是大城市，", "人口很多", NULL});
}

int main(void)
{
    char err[ERR_MAX] = "";
    cbx_status rc = text_tokenizer_load_dir(TEXT_TOK_GRAPHEME_MTL, test_data("mtl-v2/tokenizer"), &tok, err);
    CHECK(rc == CBX_OK, "load the synthetic multilingual tokenizer: %s", rc == CBX_OK ? "ok" : err);
    if (tok) {
        test_sentence_ends();
        test_long();
    }
    text_tokenizer_free(tok);
    return test_summary();
}
