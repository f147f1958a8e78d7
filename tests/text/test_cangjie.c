/* test_cangjie.c - the Cangjie table (text/cangjie.h) against upstream's
 * ChineseCangjieConverter rules on hand-made tables: word2cj last entry
 * wins, the index is the glyph's first place in cj2word[code] (multi-
 * character entries take places too), extra fields are ignored; every
 * kind of bad file refused with a message naming the entry; the synthetic
 * Cangjie5_TC.json of tests/data/mtl-v2/tokenizer loads with indices above
 * 9; every allocation of the loader may fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_hook.h"
#include "testutil.h"
#include "text/cangjie.h"

static void expect(const struct cangjie *t, const char *glyph_utf8, int32_t c, const char *code, int index)
{
    size_t n = 0;
    int i = -1;
    const char *got = cangjie_code(t, c, &n, &i);
    if (!code) {
        CHECK(!got, "%s: no code (got %s)", glyph_utf8, got ? got : "-");
        return;
    }
    CHECK(got && n == strlen(code) && !memcmp(got, code, n) && i == index, "%s: code %.*s index %d (want %s %d)",
          glyph_utf8, got ? (int)n : 1, got ? got : "-", i, code, index);
}

static void test_rules(void)
{
    char err[ERR_MAX] = "";
    /* 日 a; 月 b; 明 ab; 間 ab (index 1), 問 ab (2), 旦 ab (3); the pair
     * "日月" takes place 4 of ab; 晶 ab (5); 日 again as ab at 6, then 明
     * as ab again (its index stays its first place, 0); 月 last as "x"
     * (the last entry wins: index 0 of x) */
    const char *json = "[\"日\\ta\", \"月\\tb\", \"明\\tab\", \"間\\tab\\tTC\", \"問\\tab\", \"旦\\tab\","
                       " \"日月\\tab\", \"晶\\tab\", \"日\\tab\", \"明\\tab\", \"月\\tx\\tmore\\tfields\"]";
    struct cangjie *t = NULL;
    cbx_status rc = cangjie_load_mem(json, strlen(json), "rules", &t, err);
    CHECK(rc == CBX_OK, "hand-made table loads: %s", rc == CBX_OK ? "ok" : err);
    if (!t) return;
    expect(t, "日", 0x65e5, "ab", 6);
    expect(t, "月", 0x6708, "x", 0);
    expect(t, "明", 0x660e, "ab", 0);
    expect(t, "間", 0x9593, "ab", 1);
    expect(t, "問", 0x554f, "ab", 2);
    expect(t, "旦", 0x65e6, "ab", 3);
    expect(t, "晶", 0x6676, "ab", 5);
    expect(t, "水", 0x6c34, NULL, 0);
    expect(t, "-1", -1, NULL, 0);
    printf("rules: %zu entries, %zu glyphs\n", cangjie_n_entries(t), cangjie_n_glyphs(t));
    CHECK(cangjie_n_entries(t) == 11 && cangjie_n_glyphs(t) == 7, "11 entries, 7 glyphs");
    cangjie_free(t);
    /* an empty list is a table with no codes */
    rc = cangjie_load_mem("[]", 2, "empty", &t, err);
    CHECK(rc == CBX_OK && t && cangjie_n_glyphs(t) == 0, "empty list");
    cangjie_free(t);
}

static void test_bad(void)
{
    static const struct { const char *json, *want; } bad[] = {
        {"", "not valid JSON"},
        {"[\"日\\ta\"", "not valid JSON"},
        {"{\"日\": \"a\"}", "not a JSON list"},
        {"\"日\\ta\"", "not a JSON list"},
        {"[\"日\\ta\", 3]", "entry 1 is not a string"},
        {"[\"日\\ta\", null]", "entry 1 is not a string"},
        {"[\"日\\ta\", \"月b\"]", "entry 1 (\"月b\") has no tab"},
        {"[\"\xff\\ta\"]", "entry 0 is not valid UTF-8"},
        {"[\"a\\nb\"]", "entry 0 (\"a?b\") has no tab"}, /* one line */
        {"[[\"日\", \"a\"]]", "entry 0 is not a string"},
    };
    int n = (int)(sizeof bad / sizeof bad[0]);
    for (int i = 0; i < n; i++) {
        char err[ERR_MAX] = "";
        struct cangjie *t = (struct cangjie *)1;
        cbx_status rc = cangjie_load_mem(bad[i].json, strlen(bad[i].json), "bad.json", &t, err);
        CHECK(rc == CBX_ERR_FORMAT && !t && strstr(err, "bad.json") && strstr(err, bad[i].want) && !strchr(err, '\n'),
              "bad table %d refused: \"%s\" (want \"%s\")", i, err, bad[i].want);
    }
    char err[ERR_MAX] = "";
    struct cangjie *t = NULL;
    cbx_status rc = cangjie_load_file(test_path(test_tmpdir("cangjie"), "absent.json"), &t, err);
    CHECK(rc == CBX_ERR_NOT_FOUND && !t && strstr(err, "absent.json"), "absent file: %s", err);
}

static void test_synthetic(void)
{
    char err[ERR_MAX] = "";
    struct cangjie *t = NULL;
    cbx_status rc = cangjie_load_file(test_data("mtl-v2/tokenizer/Cangjie5_TC.json"), &t, err);
    CHECK(rc == CBX_OK, "synthetic Cangjie5_TC.json loads: %s", rc == CBX_OK ? "ok" : err);
    if (!t) return;
    int max_index = 0, with_index = 0;
    for (int32_t c = 0x4e00; c <= 0x9fff; c++) {
        size_t n;
        int i = 0;
        if (!cangjie_code(t, c, &n, &i)) continue;
        with_index += i > 0;
        if (i > max_index) max_index = i;
    }
    printf("synthetic table: %zu entries, %zu glyphs, %d with an index above 0, largest index %d\n",
           cangjie_n_entries(t), cangjie_n_glyphs(t), with_index, max_index);
    CHECK(cangjie_n_glyphs(t) > 200 && max_index >= 10 && with_index > 10, "indices above 0 and above 9 occur");
    cangjie_free(t);
}

static void test_alloc_failures(void)
{
#ifdef HAVE_ALLOC_HOOK
    char err[ERR_MAX] = "";
    size_t len = 0;
    char *json = test_read_file(test_data("mtl-v2/tokenizer/Cangjie5_TC.json"), &len);
    CHECK(json != NULL, "read the synthetic table");
    if (!json) return;
    long k = 0;
    int bad = 0;
    for (; k < 100000; k++) {
        struct cangjie *t = NULL;
        alloc_hook_arm(k);
        cbx_status rc = cangjie_load_mem(json, len, "synthetic", &t, err);
        alloc_hook_disarm();
        bool hit = alloc_hook_hit();
        /* cJSON does not tell a failed allocation from bad JSON */
        bool ok = hit ? (rc == CBX_ERR_NOMEM || rc == CBX_ERR_FORMAT) && !t : rc == CBX_OK && t && cangjie_n_glyphs(t) > 200;
        if (!ok && bad++ < 3) printf("  allocation %ld: rc %d: %s\n", k, (int)rc, err);
        cangjie_free(t);
        if (!hit) break;
    }
    printf("  alloc-failure run, Cangjie loader: %ld allocations, %d wrong\n", k, bad);
    CHECK(bad == 0 && k > 5, "the loader fails cleanly at each of %ld allocations", k);
    free(json);
#else
    printf("  alloc-failure run skipped (sanitizer build)\n");
#endif
}

int main(void)
{
    test_rules();
    test_bad();
    test_synthetic();
    test_alloc_failures();
    return test_summary();
}
