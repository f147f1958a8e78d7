/* test_synth_tokenizer.c - the synthetic multilingual front-end files
 * (tools/lib/synth_tokenizer.h; the English tokenizer.json is checked
 * against its fixture by text_grapheme): the multilingual tokenizer has
 * exactly the ids asked for, the special ids and the 60 added tags where
 * the real file has them, loads as the multilingual front end and encodes
 * a sentence of every language it can without [UNK]; Cangjie5_TC.json is a
 * list of "glyph\tcode" strings with the key radicals and repeated codes;
 * both are byte-identical from run to run. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synth_tokenizer.h"
#include "testutil.h"
#include "text/grapheme_bpe.h"
#include "text/tokenizer.h"

#include "mtl_sentences.inc"

/* ja and zh need their own conversions (kakasi, Cangjie), not the
 * grapheme vocabulary alone: left out here. */
static bool plain(const char *code) { return strcmp(code, "ja") && strcmp(code, "zh"); }

static void test_mtl(int n_ids)
{
    char err[ERR_MAX] = "";
    char *a = NULL, *b = NULL;
    size_t na = 0;
    cbx_status rc = synth_mtl_tokenizer_json(n_ids, &a, &na, err);
    CHECK(rc == CBX_OK, "synthetic multilingual tokenizer (%d ids): %s", n_ids, err);
    CHECK(synth_mtl_tokenizer_json(n_ids, &b, NULL, err) == CBX_OK && a && b && !strcmp(a, b),
          "%d ids: the writer is deterministic", n_ids);
    free(b);
    if (!a) return;
    struct text_tokenizer *t = NULL;
    const struct text_tokenizer_file f = {"grapheme_mtl_merged_expanded_v1.json", a};
    rc = text_tokenizer_load_mem(TEXT_TOK_GRAPHEME_MTL, &f, 1, &t, err);
    CHECK(rc == CBX_OK, "%d ids: loads as the multilingual front end: %s", n_ids, err);
    if (rc != CBX_OK) {
        free(a);
        return;
    }
    const struct grapheme_bpe *g = text_tokenizer_grapheme(t);
    printf("multilingual tokenizer: %lld ids (asked %d), %zu bytes\n", (long long)text_tokenizer_vocab_size(t),
           n_ids, na);
    CHECK(text_tokenizer_vocab_size(t) == n_ids, "%lld ids, want %d", (long long)text_tokenizer_vocab_size(t), n_ids);
    static const struct { const char *s; int id; } fixed[] = {
        {"[STOP]", 0}, {"[UNK]", 1}, {"[SPACE]", 2}, {"[START]", 255}, {"[ar]", -60}, {"[zh]", -38},
        {"[cj_a]", -37}, {"[cj_z]", -12}, {"[cj_0]", -11}, {"[cj_9]", -2}, {"[cj_.]", -1}};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        int want = fixed[i].id < 0 ? n_ids + fixed[i].id : fixed[i].id;
        CHECK(grapheme_bpe_token_id(g, fixed[i].s) == want, "%s at %d, want %d", fixed[i].s,
              grapheme_bpe_token_id(g, fixed[i].s), want);
    }
    /* every language of the list: no [UNK], and merges shorten the text */
    int clean = 0, tried = 0;
    for (int i = 0; i < N_MTL_SENTENCES; i++) {
        const char *code = mtl_sentences[i][0], *text = mtl_sentences[i][1];
        if (!plain(code)) continue;
        int32_t *ids = NULL;
        int64_t n = 0, unk = 0;
        tried++;
        rc = text_tokenizer_encode_lang(t, text, code, &ids, &n, err);
        CHECK(rc == CBX_OK, "%s: %s", code, err);
        for (int64_t k = 0; k < n; k++) unk += ids[k] == 1;
        const int64_t chars = (int64_t)strlen(text);
        CHECK(rc == CBX_OK && unk == 0 && n > 1 && n < chars, "%s: %lld ids for %lld bytes, %lld [UNK]", code,
              (long long)n, (long long)chars, (long long)unk);
        clean += rc == CBX_OK && unk == 0;
        free(ids);
    }
    printf("%d of %d languages encode without [UNK] %s\n", clean, tried, clean == tried ? "PASS" : "FAIL");
    text_tokenizer_free(t);
    free(a);
}

static void test_cangjie(void)
{
    char err[ERR_MAX] = "";
    char *a = NULL, *b = NULL;
    cbx_status rc = synth_cangjie_json(&a, NULL, err);
    CHECK(rc == CBX_OK, "Cangjie5_TC.json: %s", err);
    CHECK(synth_cangjie_json(&b, NULL, err) == CBX_OK && a && b && !strcmp(a, b), "Cangjie: deterministic");
    free(b);
    cJSON *list = a ? cJSON_Parse(a) : NULL;
    CHECK(cJSON_IsArray(list), "Cangjie5_TC.json is a JSON list");
    int n = 0, bad = 0, repeats = 0;
    const char *codes[512];
    for (const cJSON *e = list ? list->child : NULL; e && n < 512; e = e->next) {
        const char *s = cJSON_GetStringValue(e);
        const char *tab = s ? strchr(s, '\t') : NULL;
        if (!tab || tab == s || !tab[1] || strspn(tab + 1, "abcdefghijklmnopqrstuvwxyz") != strlen(tab + 1)) {
            bad++;
            continue;
        }
        for (int k = 0; k < n; k++) repeats += !strcmp(codes[k], tab + 1);
        codes[n++] = tab + 1;
    }
    const char *first = list && list->child ? cJSON_GetStringValue(list->child) : NULL;
    printf("Cangjie5_TC.json: %d entries, %d malformed, %d repeated codes\n", n, bad, repeats);
    CHECK(n >= 100 && bad == 0 && repeats > 0, "%d entries, %d malformed, %d repeated codes", n, bad, repeats);
    CHECK(first && !strcmp(first, "日\ta"), "first entry '%s', want 日 a", first ? first : "(none)");
    cJSON_Delete(list);
    free(a);
}

int main(void)
{
    char err[ERR_MAX] = "";
    test_mtl(2454); /* mtl-v2 / mtl-v3 text_emb rows */
    test_mtl(2600); /* another T3's vocabulary */
    char *s = NULL;
    CHECK(synth_mtl_tokenizer_json(100, &s, NULL, err) == CBX_ERR_INVALID_ARG && !s, "100 ids refused: %s", err);
    test_cangjie();
    return test_summary();
}
