/* test_mtl_tokenizer.c - the multilingual text front end (punc_norm,
 * str.lower, NFKD, language step, "[xx]" tag, [SPACE], grapheme BPE)
 * against ids from upstream's own MTLTokenizer (chatterbox-tts 0.1.7) and
 * the Hugging Face tokenizers library (tools/dev/mtl_cases.py,
 * tests/data/mtl-v2/tokenizer/):
 * every case per language (ids identical for every language but ja; for
 * ja, kakasi standing in for pykakasi, the share of identical cases is
 * printed and must reach 90%), the language errors (unknown code, zh
 * without Cangjie5_TC.json, in a directory and in memory, a language for
 * the English kind), ja/zh encodes on 4 threads at once (libkakasi is
 * global state behind a lock; seen to differ without it), the table
 * carried in a model GGUF (tokenizer.Cangjie5_TC_json), and
 * lower-casing, NFKD,
 * Cased and Case_Ignorable on every code point against Python's unicodedata
 * tables (disagreements from the Unicode versions reported); every
 * allocation of the multilingual encode (ko, zh, ja) may fail (ja: up to
 * libkakasi's first, after which the step refuses with one line). */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "alloc_hook.h"
#include "testutil.h"
#include "io/gguf.h"
#include "io/model_file.h"
#include "text/cangjie.h"
#include "text/mtl_text.h"
#include "text/punc_norm.h"
#include "text/tokenizer.h"

#include "ids_json.inc"

#define N_LANG 24 /* 23 codes + none */
static const char *const lang_names[N_LANG] = {"ar", "da", "de", "el", "en", "es", "fi", "fr", "he", "hi", "it", "ja",
                                               "ko", "ms", "nl", "no", "pl", "pt", "ru", "sv", "sw", "tr", "zh", "-"};

static int lang_index(const char *code)
{
    for (int i = 0; i < N_LANG - 1; i++)
        if (code && !strcasecmp(code, lang_names[i])) return i;
    return N_LANG - 1;
}

static void test_cases(const cJSON *root, const struct text_tokenizer *t, const struct cangjie *cj)
{
    char err[ERR_MAX] = "";
    int total[N_LANG] = {0}, matched[N_LANG] = {0}, n_cases = 0, n_ok = 0;
    for (const cJSON *c = cJSON_GetObjectItem(root, "cases")->child; c; c = c->next, n_cases++) {
        const cJSON *jl = cJSON_GetObjectItem(c, "language");
        const char *lang = cJSON_IsString(jl) ? jl->valuestring : NULL;
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        const char *want_norm = cJSON_GetObjectItem(c, "normalized")->valuestring;
        const char *want_prep = cJSON_GetObjectItem(c, "prepared")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(c, "ids");
        /* the steps one by one, for a readable failure */
        char *norm = NULL, *prep = NULL;
        /* Japanese: kakasi's readings and segments may differ from
         * pykakasi's; measured below, not required per case */
        bool ja = lang && !strcasecmp(lang, "ja");
        cbx_status rc = punc_norm(text, PUNC_MULTILINGUAL, &norm, err);
        CHECK(rc == CBX_OK && !strcmp(norm, want_norm), "case %d [%s] punc_norm: got \"%s\" want \"%s\"", n_cases,
              lang ? lang : "-", norm ? norm : err, want_norm);
        rc = norm ? mtl_text_prepare(norm, strlen(norm), lang, cj, &prep, err) : CBX_ERR_INTERNAL;
        bool same_prep = rc == CBX_OK && !strcmp(prep, want_prep);
        if (ja) {
            CHECK(rc == CBX_OK, "case %d [ja] prepared: %s", n_cases, rc == CBX_OK ? "ok" : err);
            if (!same_prep && prep) printf("  ja differs: \"%s\"\n       pykakasi: \"%s\"\n", prep, want_prep);
        } else {
            CHECK(same_prep, "case %d [%s] prepared: got \"%s\" want \"%s\"", n_cases, lang ? lang : "-",
                  prep ? prep : err, want_prep);
        }
        /* the whole front end */
        int32_t *ids = NULL;
        int64_t n = 0;
        rc = text_tokenizer_encode_lang(t, text, lang, &ids, &n, err);
        bool ok = rc == CBX_OK && same_ids(ids, n, want);
        if (ja) CHECK(rc == CBX_OK, "case %d [ja] encodes: %s", n_cases, rc == CBX_OK ? "ok" : err);
        else CHECK(ok, "case %d [%s] ids (\"%.60s\"): %s", n_cases, lang ? lang : "-", text,
                   rc == CBX_OK ? "differ" : err);
        if (rc == CBX_OK && !ok && !ja) print_ids(ids, n, want);
        free(ids);
        if (!lang) { /* encode == encode_lang(NULL) */
            rc = text_tokenizer_encode(t, text, &ids, &n, err);
            CHECK(rc == CBX_OK && same_ids(ids, n, want), "case %d: text_tokenizer_encode == no language", n_cases);
            free(ids);
        }
        int li = lang_index(lang);
        total[li]++;
        matched[li] += ok;
        n_ok += ok;
        free(norm);
        free(prep);
    }
    printf("multilingual fixture: %d cases, ids identical %d\n  per language (matched/total):", n_cases, n_ok);
    int n_langs = 0;
    for (int i = 0; i < N_LANG; i++) {
        if (total[i]) printf(" %s %d/%d", lang_names[i], matched[i], total[i]);
        n_langs += total[i] >= 3;
    }
    printf("\n");
    CHECK(n_langs == 23, "%d languages with at least 3 cases (want all 23)", n_langs);
    int ja = lang_index("ja"), zh = lang_index("zh");
    double share = total[ja] ? (double)matched[ja] / total[ja] : 0;
    printf("zh: %d/%d cases with identical ids; ja (kakasi vs pykakasi): %d/%d identical, %.1f%%\n", matched[zh],
           total[zh], matched[ja], total[ja], 100 * share);
    CHECK(total[zh] >= 5 && matched[zh] == total[zh], "zh ids identical for every case");
    CHECK(total[ja] >= 20 && share >= 0.90, "ja: %.1f%% of %d cases identical (want at least 90%%)", 100 * share,
          total[ja]);
}

static void test_errors(const struct text_tokenizer *t)
{
    char err[ERR_MAX] = "";
    int32_t *ids = NULL;
    int64_t n = -1;
    /* ja and zh in any case of the code */
    static const char *const cjk[] = {"ja", "zh", "JA", "Zh"};
    for (int i = 0; i < 4; i++) {
        err[0] = 0;
        cbx_status rc = text_tokenizer_encode_lang(t, "こんにちは 你好", cjk[i], &ids, &n, err);
        CHECK(rc == CBX_OK && n > 3, "language %s: %s", cjk[i], rc == CBX_OK ? "ok" : err);
        free(ids);
        ids = NULL;
    }
    /* a directory without Cangjie5_TC.json: loads; only zh fails, naming it */
    const char *dir = test_tmpdir("mtl_no_cangjie");
    const char *json = test_path(dir, "grapheme_mtl_merged_expanded_v1.json");
    CHECK(test_copy_file(test_data("mtl-v2/tokenizer/grapheme_mtl_merged_expanded_v1.json"), json) == 1,
          "copy the grapheme JSON");
    struct text_tokenizer *bare = NULL;
    cbx_status rc0 = text_tokenizer_load_dir(TEXT_TOK_GRAPHEME_MTL, dir, &bare, err);
    CHECK(rc0 == CBX_OK, "loads without Cangjie5_TC.json: %s", rc0 == CBX_OK ? "ok" : err);
    if (bare) {
        rc0 = text_tokenizer_encode_lang(bare, "你好", "zh", &ids, &n, err);
        CHECK(rc0 == CBX_ERR_NOT_FOUND && !ids && strstr(err, "Cangjie5_TC.json") && strstr(err, dir) &&
                  !strchr(err, '\n'),
              "zh without the table: %s", err);
        rc0 = text_tokenizer_encode_lang(bare, "こんにちは", "ja", &ids, &n, err);
        CHECK(rc0 == CBX_OK, "ja without the table: %s", rc0 == CBX_OK ? "ok" : err);
        free(ids);
        ids = NULL;
    }
    text_tokenizer_free(bare);
    /* from memory (a GGUF's files): with and without the table */
    size_t n_g = 0, n_c = 0;
    char *g = test_read_file(test_data("mtl-v2/tokenizer/grapheme_mtl_merged_expanded_v1.json"), &n_g);
    char *c = test_read_file(test_data("mtl-v2/tokenizer/Cangjie5_TC.json"), &n_c);
    struct text_tokenizer_file files[2] = {{"grapheme_mtl_merged_expanded_v1.json", g}, {"Cangjie5_TC.json", c}};
    for (int with = 0; with < 2 && g && c; with++) {
        struct text_tokenizer *m = NULL;
        rc0 = text_tokenizer_load_mem(TEXT_TOK_GRAPHEME_MTL, files, 1 + with, &m, err);
        CHECK(rc0 == CBX_OK, "load from memory, %s the table: %s", with ? "with" : "without", rc0 ? err : "ok");
        if (!m) continue;
        int32_t *want = NULL;
        int64_t n_want = 0;
        rc0 = text_tokenizer_encode_lang(m, "你好，世界！", "zh", &ids, &n, err);
        cbx_status rc1 = text_tokenizer_encode_lang(t, "你好，世界！", "zh", &want, &n_want, err);
        if (with)
            CHECK(rc0 == CBX_OK && rc1 == CBX_OK && n == n_want && !memcmp(ids, want, (size_t)n * sizeof *ids),
                  "zh from memory == from the directory");
        else
            CHECK(rc0 == CBX_ERR_NOT_FOUND && strstr(err, "Cangjie5_TC.json"), "zh from memory, no table: %s", err);
        free(ids);
        free(want);
        ids = NULL;
        text_tokenizer_free(m);
    }
    free(g);
    free(c);
    /* a broken table is an error at load, naming the file */
    FILE *f = fopen(test_path(dir, "Cangjie5_TC.json"), "w");
    CHECK(f && fputs("[\"x\"]", f) >= 0 && fclose(f) == 0, "write a broken table");
    rc0 = text_tokenizer_load_dir(TEXT_TOK_GRAPHEME_MTL, dir, &bare, err);
    CHECK(rc0 == CBX_ERR_FORMAT && !bare && strstr(err, "Cangjie5_TC.json") && strstr(err, "no tab"),
          "broken table refused: %s", err);
    static const char *const bad[] = {"xx", "", "eng", "en-US", "[fr]", "f"};
    for (int i = 0; i < 6; i++) {
        err[0] = 0;
        cbx_status rc = text_tokenizer_encode_lang(t, "Hello", bad[i], &ids, &n, err);
        CHECK(rc == CBX_ERR_INVALID_ARG && !ids && n == 0 && strstr(err, "unsupported language") &&
                  strstr(err, "ar, da, de") && strstr(err, "tr, zh"),
              "bad language \"%s\": %s", bad[i], err);
    }
    cbx_status rc = text_tokenizer_encode_lang(t, "abc\xff", "fr", &ids, &n, err);
    CHECK(rc == CBX_ERR_INVALID_ARG && !ids && n == 0, "invalid UTF-8 refused: %s", err);
    /* the splitter's count: no tag */
    int64_t c1 = -1, c2 = -1;
    const char *s = "Bonjour le monde, ça va ?";
    rc = text_tokenizer_count(t, s, strlen(s), &c1, err);
    int32_t *tagged = NULL;
    cbx_status rc2 = text_tokenizer_encode_raw_lang(t, s, "fr", &tagged, &c2, err);
    CHECK(rc == CBX_OK && rc2 == CBX_OK && c1 > 0 && c2 == c1 + 1, "count %lld, with [fr] %lld", (long long)c1,
          (long long)c2);
    free(tagged);
    /* a language for the English kind */
    struct text_tokenizer *en = NULL;
    rc = text_tokenizer_load_dir(TEXT_TOK_GRAPHEME, test_data("english"), &en, err);
    CHECK(rc == CBX_OK, "load english tokenizer: %s", err);
    if (en) {
        rc = text_tokenizer_encode_lang(en, "Hello", "en", &ids, &n, err);
        CHECK(rc == CBX_ERR_INVALID_ARG && !ids && strstr(err, "takes none"), "English kind with a language: %s",
              err);
        rc = text_tokenizer_encode_lang(en, "Hello", NULL, &ids, &n, err);
        CHECK(rc == CBX_OK && n > 0, "English kind without a language");
        free(ids);
    }
    text_tokenizer_free(en);
}

/* One code point as UTF-8 */
static void cp_utf8(int32_t c, char *o)
{
    o[utf8proc_encode_char(c, (utf8proc_uint8_t *)o)] = 0;
}

/* Inclusive [lo, hi] ranges as one flag per code point (caller frees). */
static unsigned char *range_flags(const cJSON *ranges)
{
    unsigned char *f = calloc(0x110000, 1);
    for (const cJSON *r = ranges ? ranges->child : NULL; f && r; r = r->next)
        for (int c = cJSON_GetArrayItem(r, 0)->valueint; c <= cJSON_GetArrayItem(r, 1)->valueint; c++) f[c] = 1;
    return f;
}

/* lower, NFKD, Cased, Case_Ignorable on every code point Python knows */
static void test_unicode(const cJSON *u)
{
    char err[ERR_MAX] = "";
    const cJSON *lower = cJSON_GetObjectItem(u, "lower"), *nfkd = cJSON_GetObjectItem(u, "nfkd");
    unsigned char *assigned = range_flags(cJSON_GetObjectItem(u, "assigned")),
                  *cased = range_flags(cJSON_GetObjectItem(u, "cased")),
                  *ign = range_flags(cJSON_GetObjectItem(u, "case_ignorable"));
    if (!assigned || !cased || !ign) {
        CHECK(false, "out of memory");
        free(assigned), free(cased), free(ign);
        return;
    }
    int n_assigned = 0, bad_lower = 0, bad_nfkd = 0, bad_cased = 0, bad_ign = 0, newer = 0, newer_change = 0;
    for (int32_t c = 0; c < 0x110000; c++) {
        if (c >= 0xd800 && c < 0xe000) continue;
        char s[8], key[16];
        cp_utf8(c, s);
        char *lo = NULL;
        utf8proc_uint8_t *de = NULL;
        if (mtl_text_lower(s, strlen(s), &lo, err) != CBX_OK) { CHECK(false, "lower U+%04X: %s", c, err); break; }
        utf8proc_map((const utf8proc_uint8_t *)s, 0, &de,
                     UTF8PROC_NULLTERM | UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
        if (!assigned[c]) {
            /* assigned in utf8proc's Unicode only */
            if (utf8proc_category(c) != UTF8PROC_CATEGORY_CN) {
                newer++;
                newer_change += strcmp(lo, s) != 0 || strcmp((const char *)de, s) != 0;
            }
        } else {
            n_assigned++;
            snprintf(key, sizeof key, "%x", (unsigned)c);
            const cJSON *wl = cJSON_GetObjectItem(lower, key), *wd = cJSON_GetObjectItem(nfkd, key);
            const char *want_lower = wl ? wl->valuestring : s;
            const char *want_nfkd = wd ? wd->valuestring : s;
            if (strcmp(lo, want_lower)) {
                if (bad_lower++ < 5) printf("  lower U+%04X: \"%s\" want \"%s\"\n", c, lo, want_lower);
            }
            if (!(c >= 0xac00 && c <= 0xd7a3) && strcmp((const char *)de, want_nfkd)) {
                if (bad_nfkd++ < 5) printf("  NFKD U+%04X: \"%s\" want \"%s\"\n", c, (const char *)de, want_nfkd);
            }
            if (!mtl_text_is_cased(c) != !cased[c]) {
                if (bad_cased++ < 5) printf("  Cased U+%04X: %d\n", c, mtl_text_is_cased(c));
            }
            if (!mtl_text_is_case_ignorable(c) != !ign[c]) {
                if (bad_ign++ < 5) printf("  Case_Ignorable U+%04X: %d\n", c, mtl_text_is_case_ignorable(c));
            }
        }
        free(lo);
        free(de);
    }
    printf("unicode: %d code points assigned in Python's unicodedata %s: lower differs %d, NFKD differs %d, "
           "Cased differs %d, Case_Ignorable differs %d; %d more assigned only in utf8proc %s (%d of them "
           "changed by lower or NFKD there, left as they are by Python)\n",
           n_assigned, cJSON_GetObjectItem(u, "unidata_version")->valuestring, bad_lower, bad_nfkd, bad_cased,
           bad_ign, newer, utf8proc_unicode_version(), newer_change);
    free(assigned);
    free(cased);
    free(ign);
    CHECK(n_assigned > 140000, "%d assigned code points", n_assigned);
    CHECK(bad_lower == 0 && bad_nfkd == 0 && bad_cased == 0 && bad_ign == 0,
          "lower, NFKD, Cased, Case_Ignorable agree with Python on every code point both know");
}

/* A model GGUF holding only the metadata model_open checks and the
 * tokenizer files as convert stores them (tokenizer.<file, '.' as '_'>). */
static bool write_gguf(const char *path, bool with_cangjie)
{
    char err[ERR_MAX];
    struct io_gguf_writer *w = NULL;
    if (io_gguf_writer_create(&w, err) != CBX_OK) return false;
    bool ok = true;
    struct io_gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = GGUF_TYPE_STRING;
    v.v.str.s = "chatterbox";
    v.v.str.len = 10;
    ok &= io_gguf_writer_set(w, "general.architecture", &v, err) == CBX_OK;
    v.v.str.s = "mtl-v2";
    v.v.str.len = 6;
    ok &= io_gguf_writer_set(w, "chatterbox.variant", &v, err) == CBX_OK;
    memset(&v, 0, sizeof v);
    v.type = GGUF_TYPE_UINT32;
    v.v.u32 = 1;
    ok &= io_gguf_writer_set(w, "chatterbox.format_version", &v, err) == CBX_OK;
    v.v.u32 = 0;
    static const char *const parts[] = {"t3", "s3gen", "ve", "conds"};
    for (int i = 0; i < 4; i++) {
        char key[64];
        snprintf(key, sizeof key, "chatterbox.%s.tensor_count", parts[i]);
        ok &= io_gguf_writer_set(w, key, &v, err) == CBX_OK;
    }
    static const char *const files[] = {"grapheme_mtl_merged_expanded_v1.json", "Cangjie5_TC.json"};
    for (int i = 0; i < 1 + with_cangjie && ok; i++) {
        char rel[128], key[128];
        snprintf(rel, sizeof rel, "mtl-v2/tokenizer/%s", files[i]);
        size_t n = 0;
        char *text = test_read_file(test_data(rel), &n);
        ok = text && model_text_file_key(files[i], key, sizeof key);
        memset(&v, 0, sizeof v);
        v.type = GGUF_TYPE_STRING;
        v.v.str.s = text;
        v.v.str.len = n;
        ok = ok && io_gguf_writer_set(w, key, &v, err) == CBX_OK;
        free(text);
    }
    ok = ok && io_gguf_writer_write(w, path, err) == CBX_OK;
    if (!ok) printf("  gguf: %s\n", err);
    io_gguf_writer_free(w);
    return ok;
}

/* the table travels in a converted GGUF: zh from the GGUF == from the
 * directory; a GGUF without it loads and zh names the metadata key */
static void test_gguf(const struct text_tokenizer *dir_tok)
{
    char err[ERR_MAX] = "";
    const char *tmp = test_tmpdir("mtl_gguf");
    for (int with = 1; with >= 0; with--) {
        const char *path = test_path(tmp, with ? "with.gguf" : "without.gguf");
        CHECK(write_gguf(path, with), "write %s", path);
        struct model *m = NULL;
        struct text_tokenizer *t = NULL;
        cbx_status rc = model_open(path, &m, err);
        if (rc == CBX_OK) rc = text_tokenizer_load_model(m, &t, err);
        CHECK(rc == CBX_OK, "tokenizer from a GGUF %s the table: %s", with ? "with" : "without",
              rc == CBX_OK ? "ok" : err);
        if (t) {
            const char *text = "我們明天早上八點在學校門口見面，好嗎？";
            int32_t *a = NULL, *b = NULL;
            int64_t na = 0, nb = 0;
            rc = text_tokenizer_encode_lang(t, text, "zh", &a, &na, err);
            printf("gguf %s the table: zh %s\n", with ? "with" : "without", rc == CBX_OK ? "encodes" : err);
            if (with) {
                cbx_status rc2 = text_tokenizer_encode_lang(dir_tok, text, "zh", &b, &nb, err);
                CHECK(rc == CBX_OK && rc2 == CBX_OK && na == nb && na > 40 &&
                          !memcmp(a, b, (size_t)na * sizeof *a),
                      "zh from the GGUF: %lld ids, as from the directory", (long long)na);
            } else {
                CHECK(rc == CBX_ERR_NOT_FOUND && strstr(err, "tokenizer.Cangjie5_TC_json") && strstr(err, path),
                      "zh from a GGUF without the table: %s", err);
            }
            free(a);
            free(b);
        }
        text_tokenizer_free(t);
        model_close(m);
    }
}

/* libkakasi keeps global state: ja (and zh) encodes on 4 threads at once
 * give the ids of one thread alone */
struct worker {
    const struct text_tokenizer *t;
    const cJSON *cases;
    int differ, failed;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    char err[ERR_MAX];
    for (int rep = 0; rep < 5; rep++)
        for (const cJSON *c = w->cases->child; c; c = c->next) {
            const cJSON *jl = cJSON_GetObjectItem(c, "language");
            const char *lang = cJSON_IsString(jl) ? jl->valuestring : NULL;
            if (!lang || (strcmp(lang, "ja") && strcmp(lang, "zh"))) continue;
            int32_t *ids = NULL;
            int64_t n = 0;
            cbx_status rc = text_tokenizer_encode_lang(w->t, cJSON_GetObjectItem(c, "text")->valuestring, lang, &ids,
                                                       &n, err);
            const cJSON *mine = cJSON_GetObjectItem(c, "mine");
            w->failed += rc != CBX_OK;
            w->differ += rc == CBX_OK && !same_ids(ids, n, mine);
            free(ids);
        }
    return NULL;
}

static void test_threads(cJSON *root, const struct text_tokenizer *t)
{
    char err[ERR_MAX];
    cJSON *cases = cJSON_GetObjectItem(root, "cases");
    int n_cases = 0;
    for (cJSON *c = cases->child; c; c = c->next) { /* one thread's ids as "mine" */
        const cJSON *jl = cJSON_GetObjectItem(c, "language");
        const char *lang = cJSON_IsString(jl) ? jl->valuestring : NULL;
        if (!lang || (strcmp(lang, "ja") && strcmp(lang, "zh"))) continue;
        int32_t *ids = NULL;
        int64_t n = 0;
        if (text_tokenizer_encode_lang(t, cJSON_GetObjectItem(c, "text")->valuestring, lang, &ids, &n, err) != CBX_OK)
            continue;
        cJSON *a = cJSON_CreateArray();
        for (int64_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
        if (a) cJSON_AddItemToObject(c, "mine", a);
        free(ids);
        n_cases++;
    }
    struct worker w[4];
    pthread_t th[4];
    int started = 0;
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){t, cases, 0, 0};
        started += pthread_create(&th[i], NULL, work, &w[i]) == 0;
    }
    int differ = 0, failed = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        differ += w[i].differ;
        failed += w[i].failed;
    }
    printf("threads: 4 x 5 x %d ja/zh encodes at once: %d failed, %d differ from one thread's\n", n_cases, failed,
           differ);
    CHECK(started == 4 && n_cases >= 30 && failed == 0 && differ == 0, "ja/zh on 4 threads at once");
}

/* every allocation of encode_lang may fail: CBX_ERR_NOMEM, never a crash
 * or wrong ids */
static void test_alloc_failures(const struct text_tokenizer *t)
{
#ifdef HAVE_ALLOC_HOOK
    static const struct { const char *lang, *text; } runs[] = {
        {"ko", "  ΟΔΥΣΣΕΥΣ İstanbul 한국어 ﬁne straße  "},
        {"zh", "你好，世界！我們明天見面。餃子 abc"},
        {"ja", "東京へ行って、ラーメンを食べました。作って"},
    };
    for (int r_i = 0; r_i < 3; r_i++) {
        char err[ERR_MAX] = "";
        const char *text = runs[r_i].text, *lang = runs[r_i].lang;
        int32_t *want = NULL, *ids = NULL;
        int64_t n_want = 0, n = 0;
        cbx_status rc = text_tokenizer_encode_lang(t, text, lang, &want, &n_want, err);
        CHECK(rc == CBX_OK && n_want > 10, "alloc-failure reference (%s): %s", lang, rc == CBX_OK ? "ok" : err);
        long k = 0;
        int bad = 0;
        for (; rc == CBX_OK && k < 10000; k++) {
            alloc_hook_arm(k);
            cbx_status r = text_tokenizer_encode_lang(t, text, lang, &ids, &n, err);
            alloc_hook_disarm();
            bool same = r == CBX_OK && n == n_want && !memcmp(ids, want, (size_t)n * sizeof *ids);
            bool ok = alloc_hook_hit() ? r == CBX_ERR_NOMEM && !ids : same;
            if (!ok && bad++ < 3) printf("  allocation %ld: rc %d: %s\n", k, (int)r, r == CBX_OK ? "" : err);
            free(ids);
            ids = NULL;
            if (!alloc_hook_hit()) break;
            if (r == CBX_ERR_NOMEM && strstr(err, "kakasi_do")) {
                /* libkakasi does not survive its own failed allocation: the
                 * step says so from then on (ja runs last for this) */
                r = text_tokenizer_encode_lang(t, text, lang, &ids, &n, err);
                printf("  after kakasi's failed allocation (%ld): %s\n", k, err);
                CHECK(r == CBX_ERR_INTERNAL && !ids && strstr(err, "cannot be used again"),
                      "ja after kakasi ran out of memory: one clear error");
                k++;
                break;
            }
        }
        printf("  alloc-failure run, multilingual encode (%s): %ld allocations, %d wrong\n", lang, k, bad);
        CHECK(bad == 0 && k > 5, "multilingual encode (%s) fails with out of memory at each of %ld allocations", lang,
              k);
        free(want);
    }
#else
    (void)t;
    printf("  alloc-failure runs skipped (sanitizer build)\n");
#endif
}

int main(void)
{
    size_t n = 0;
    char err[ERR_MAX] = "";
    char *json = test_read_file(test_data("mtl-v2/tokenizer/mtl_cases.json"), &n);
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    CHECK(root && cJSON_GetObjectItem(root, "cases") && cJSON_GetObjectItem(root, "unicode"),
          "mtl_cases.json parses");
    struct text_tokenizer *t = NULL;
    cbx_status rc = text_tokenizer_load_dir(TEXT_TOK_GRAPHEME_MTL, test_data("mtl-v2/tokenizer"), &t, err);
    CHECK(rc == CBX_OK && root &&
              text_tokenizer_vocab_size(t) == cJSON_GetObjectItem(root, "vocab_size")->valueint,
          "load the synthetic multilingual tokenizer: %s", rc == CBX_OK ? "ok" : err);
    struct cangjie *cj = NULL;
    rc = cangjie_load_file(test_data("mtl-v2/tokenizer/Cangjie5_TC.json"), &cj, err);
    CHECK(rc == CBX_OK, "load the synthetic Cangjie table: %s", rc == CBX_OK ? "ok" : err);
    if (root && t && cj) {
        test_cases(root, t, cj);
        test_errors(t);
        test_threads(root, t);
        test_gguf(t);
        test_unicode(cJSON_GetObjectItem(root, "unicode"));
        test_alloc_failures(t);
    }
    text_tokenizer_free(t);
    cangjie_free(cj);
    cJSON_Delete(root);
    free(json);
    return test_summary();
}
