/* test_grapheme.c - English text front end (punc_norm + [SPACE] + grapheme
 * BPE) against the Hugging Face tokenizers library's ids on every case of
 * tests/data/english/tokenizer_cases.json (tools/dev/grapheme_cases.py),
 * the pre-tokenizer's character classes on every assigned code point, the
 * synthetic tokenizer.json writer, the text_tokenizer interface, bad files
 * (each unsupported field refused by name) and allocation failures. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "alloc_hook.h"
#include "testutil.h"
#include "io/model_file.h"
#include "synth_tokenizer.h"
#include "text/gpt2_bpe.h"
#include "text/grapheme_bpe.h"
#include "text/punc_norm.h"
#include "text/tokenizer.h"

#include "ids_json.inc"

/* 1. the writer's output is the committed fixture tokenizer.json */
static void test_writer(void)
{
    char err[ERR_MAX] = "";
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    cbx_status rc = synth_english_tokenizer_json(&a, &na, err);
    CHECK(rc == CBX_OK, "synthetic tokenizer.json: %s", err);
    char *again = NULL;
    CHECK(synth_english_tokenizer_json(&again, NULL, err) == CBX_OK && again && a && !strcmp(a, again),
          "writer is deterministic");
    free(again);
    b = test_read_file(test_data("english/tokenizer.json"), &nb);
    bool same = a && b && nb == na + 1 && !memcmp(a, b, na) && b[na] == '\n';
    const char *fresh = test_path(test_tmpdir("grapheme"), "tokenizer.json");
    if (!same && synth_write_english_tokenizer(fresh, err) == CBX_OK)
        printf("  the writer's tokenizer.json differs from the fixture: new file at %s\n"
               "  (copy it to tests/data/english/ and rerun tools/dev/grapheme_cases.py)\n", fresh);
    CHECK(same, "writer output (%zu bytes) == tests/data/english/tokenizer.json (%zu bytes)", na, nb);
    struct grapheme_bpe *g = NULL;
    rc = a ? grapheme_bpe_load_mem(a, na, "synthetic", &g, err) : CBX_ERR_INTERNAL;
    CHECK(rc == CBX_OK && grapheme_bpe_vocab_size(g) == SYNTH_ENGLISH_TEXT_VOCAB, "writer output loads: %lld ids (%s)",
          g ? (long long)grapheme_bpe_vocab_size(g) : -1LL, rc == CBX_OK ? "ok" : err);
    if (g)
        CHECK(grapheme_bpe_token_id(g, "[STOP]") == 0 && grapheme_bpe_token_id(g, "[UNK]") == 1 &&
                  grapheme_bpe_token_id(g, "[SPACE]") == 2 && grapheme_bpe_token_id(g, "[START]") == 255 &&
                  grapheme_bpe_token_id(g, "not a token") == -1,
              "[STOP] 0, [UNK] 1, [SPACE] 2, [START] 255");
    grapheme_bpe_free(g);
    free(a);
    free(b);
}

/* 2. every case of the fixture, through text_tokenizer_encode */
static void test_cases(const cJSON *root)
{
    char err[ERR_MAX] = "";
    struct text_tokenizer *t = NULL;
    cbx_status rc = text_tokenizer_load_dir(TEXT_TOK_GRAPHEME, test_data("english"), &t, err);
    CHECK(rc == CBX_OK, "load english/tokenizer.json: %s", err);
    if (!t) return;
    CHECK(text_tokenizer_kind(t) == TEXT_TOK_GRAPHEME && text_tokenizer_vocab_size(t) == 704 &&
              text_tokenizer_max_length(t) == 0 && text_tokenizer_grapheme(t) && !text_tokenizer_gpt2(t),
          "kind, 704 ids, no truncation");
    int n_cases = 0, n_norm = 0, n_ids = 0, n_raw = 0;
    for (const cJSON *c = cJSON_GetObjectItem(root, "cases")->child; c; c = c->next, n_cases++) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        const char *want_norm = cJSON_GetObjectItem(c, "normalized")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(c, "ids");
        char *norm = NULL;
        rc = punc_norm(text, PUNC_ENGLISH, &norm, err);
        bool norm_ok = rc == CBX_OK && !strcmp(norm, want_norm);
        CHECK(norm_ok, "case %d punc_norm: got \"%s\" want \"%s\"", n_cases, norm ? norm : err, want_norm);
        int32_t *ids = NULL;
        int64_t n = 0;
        rc = text_tokenizer_encode(t, text, &ids, &n, err);
        bool ok = rc == CBX_OK && same_ids(ids, n, want);
        CHECK(ok, "case %d ids (\"%.60s\"): %s", n_cases, want_norm, rc == CBX_OK ? "differ" : err);
        if (rc == CBX_OK && !ok) print_ids(ids, n, want);
        free(ids);
        /* the splitter's count: the tokenizer alone on normalised text */
        int64_t cnt = -1;
        rc = text_tokenizer_count(t, want_norm, strlen(want_norm), &cnt, err);
        bool raw_ok = rc == CBX_OK && cnt == cJSON_GetArraySize(want);
        CHECK(raw_ok, "case %d count %lld want %d", n_cases, (long long)cnt, cJSON_GetArraySize(want));
        n_norm += norm_ok;
        n_ids += ok;
        n_raw += raw_ok;
        free(norm);
    }
    printf("grapheme fixture: %d cases, punc_norm identical %d, ids identical %d, counts identical %d\n", n_cases,
           n_norm, n_ids, n_raw);
    CHECK(n_cases >= 30, "fixture has %d cases", n_cases);

    int32_t *ids = NULL;
    int64_t n = -1;
    rc = text_tokenizer_encode(t, "abc\xff", &ids, &n, err);
    CHECK(rc == CBX_ERR_INVALID_ARG && !ids && n == 0, "invalid UTF-8 refused: %s", err);
    rc = text_tokenizer_encode_raw(t, "", &ids, &n, err);
    CHECK(rc == CBX_OK && n == 0, "empty raw text -> no ids");
    free(ids);
    /* count of a sub-range, not NUL-terminated */
    int64_t c1 = 0, c2 = 0;
    CHECK(text_tokenizer_count(t, "Hello world and more", 11, &c1, err) == CBX_OK &&
              text_tokenizer_count(t, "Hello world", 11, &c2, err) == CBX_OK && c1 == c2 && c1 > 0,
          "count of a prefix: %lld == %lld", (long long)c1, (long long)c2);
    /* a 100000-letter word */
    char *longw = malloc(100001);
    for (int i = 0; longw && i < 100000; i++) longw[i] = "theandingion"[(i * 7) % 12];
    if (longw) longw[100000] = 0;
    rc = longw ? text_tokenizer_encode(t, longw, &ids, &n, err) : CBX_ERR_NOMEM;
    CHECK(rc == CBX_OK && n > 1000 && n < 100000, "100000-letter word -> %lld ids", (long long)n);
    for (int64_t i = 0; rc == CBX_OK && i < n; i++)
        if (ids[i] < 0 || ids[i] >= 704) { CHECK(false, "id %d out of range", ids[i]); break; }
    free(ids);
    free(longw);
    text_tokenizer_free(t);
}

/* grapheme_bpe_encode of every {text, ids} in cases against its ids;
 * prints and returns the number of cases, *n_ok the identical ones */
static int encode_cases(const struct grapheme_bpe *g, const cJSON *cases, const char *what, int *n_ok)
{
    char err[ERR_MAX] = "";
    int n_cases = 0;
    *n_ok = 0;
    for (const cJSON *c = g && cases ? cases->child : NULL; c; c = c->next, n_cases++) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(c, "ids");
        int32_t *ids = NULL;
        int64_t n = 0;
        cbx_status rc = grapheme_bpe_encode(g, text, &ids, &n, err);
        bool ok = rc == CBX_OK && same_ids(ids, n, want);
        CHECK(ok, "%s case %d (\"%.60s\"): %s", what, n_cases, text, rc == CBX_OK ? "ids differ" : err);
        if (rc == CBX_OK && !ok) print_ids(ids, n, want);
        *n_ok += ok;
        free(ids);
    }
    printf("grapheme %s fixture: %d cases, ids identical %d\n", what, n_cases, *n_ok);
    return n_cases;
}

/* 3. array-form merges, fuse_unk, added tokens in two passes */
static void test_variant(const cJSON *root)
{
    char err[ERR_MAX] = "";
    struct grapheme_bpe *g = NULL;
    cbx_status rc = grapheme_bpe_load_file(test_data("english/tokenizer_variant.json"), &g, err);
    CHECK(rc == CBX_OK, "load tokenizer_variant.json: %s", err);
    if (!g) return;
    int n_ok, n_cases = encode_cases(g, cJSON_GetObjectItem(root, "variant_cases"), "variant", &n_ok);
    CHECK(n_cases >= 8 && grapheme_bpe_vocab_size(g) == 708, "variant: %d cases, %lld ids", n_cases,
          (long long)grapheme_bpe_vocab_size(g));
    grapheme_bpe_free(g);
}

/* 3b. a multilingual-shaped file of the real size (2454 ids, language tags
 * and [cj_*] letters as added tokens), through the multilingual kind's
 * loader; ids of texts as MTLTokenizer hands them to Tokenizer.encode */
static void test_mtl_shape(const cJSON *root)
{
    char err[ERR_MAX] = "";
    size_t len = 0;
    char *json = test_read_file(test_data("english/tokenizer_mtl_shape.json"), &len);
    struct text_tokenizer_file f = {"grapheme_mtl_merged_expanded_v1.json", json};
    struct text_tokenizer *t = NULL;
    cbx_status rc = json ? text_tokenizer_load_mem(TEXT_TOK_GRAPHEME_MTL, &f, 1, &t, err) : CBX_ERR_IO;
    CHECK(rc == CBX_OK && text_tokenizer_vocab_size(t) == cJSON_GetObjectItem(root, "mtl_shape_ids")->valueint,
          "multilingual-shaped file: %lld ids (%s)", t ? (long long)text_tokenizer_vocab_size(t) : -1LL,
          rc == CBX_OK ? "ok" : err);
    const struct grapheme_bpe *g = t ? text_tokenizer_grapheme(t) : NULL;
    int n_ok, n_cases = encode_cases(g, cJSON_GetObjectItem(root, "mtl_shape_cases"), "multilingual-shaped", &n_ok);
    CHECK(n_cases >= 8, "mtl-shape fixture has %d cases", n_cases);
    text_tokenizer_free(t);
    free(json);
}

/* 4. \w and \s as the library's pre-tokenizer sees them, every code point
 * assigned in utf8proc's Unicode version */
static void test_classes(void)
{
    size_t n = 0;
    char *text = test_read_file(test_data("english/pretokenizer_classes.json"), &n);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    CHECK(root != NULL, "pretokenizer_classes.json parses");
    if (!root) { free(text); return; }
    static unsigned char cls[0x110000]; /* 0 other, 1 word, 2 space */
    memset(cls, 0, sizeof cls);
    static const char *const keys[2] = {"word", "space"};
    for (int k = 0; k < 2; k++)
        for (const cJSON *r = cJSON_GetObjectItem(root, keys[k])->child; r; r = r->next)
            for (int c = r->child->valueint; c <= r->child->next->valueint && c < 0x110000; c++)
                cls[c] = (unsigned char)(k + 1);
    long checked = 0, bad = 0, words = 0;
    for (int32_t c = 0; c < 0x110000; c++) {
        if ((c >= 0xd800 && c < 0xe000) || utf8proc_category(c) == UTF8PROC_CATEGORY_CN) continue;
        int got = grapheme_bpe_is_space_char(c) ? 2 : grapheme_bpe_is_word_char(c) ? 1 : 0;
        checked++;
        words += got == 1;
        if (got != cls[c] && bad++ < 10) printf("  U+%04X: class %d, the library %d\n", (unsigned)c, got, cls[c]);
    }
    CHECK(bad == 0 && words > 100000, "pre-tokenizer classes of %ld assigned code points (%ld \\w): %ld differ",
          checked, words, bad);
    cJSON_Delete(root);
    free(text);
}

/* 5. bad files: a field changed in the fixture is refused, naming it */
struct mutation { const char *what; const char *path; const char *json; const char *needle; cbx_status rc; };

static void set_path(cJSON *root, const char *path, const char *json)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    cJSON *o = root;
    char *key = buf, *dot;
    while ((dot = strchr(key, '.'))) {
        *dot = 0;
        o = strspn(key, "0123456789") == strlen(key) ? cJSON_GetArrayItem(o, atoi(key)) : cJSON_GetObjectItem(o, key);
        key = dot + 1;
    }
    cJSON *v = cJSON_Parse(json);
    if (strspn(key, "0123456789") == strlen(key)) cJSON_ReplaceItemInArray(o, atoi(key), v);
    else if (cJSON_GetObjectItem(o, key)) cJSON_ReplaceItemInObject(o, key, v);
    else cJSON_AddItemToObject(o, key, v);
}

static void test_bad_files(void)
{
    static const struct mutation muts[] = {
        {"normalizer", "normalizer", "{\"type\":\"NFKC\"}", "normalizer", CBX_ERR_UNSUPPORTED},
        {"pre_tokenizer", "pre_tokenizer", "{\"type\":\"ByteLevel\"}", "pre_tokenizer", CBX_ERR_UNSUPPORTED},
        {"no pre_tokenizer", "pre_tokenizer", "null", "pre_tokenizer", CBX_ERR_UNSUPPORTED},
        {"post_processor", "post_processor", "{\"type\":\"TemplateProcessing\"}", "post_processor", CBX_ERR_UNSUPPORTED},
        {"truncation", "truncation", "{\"max_length\":5}", "truncation", CBX_ERR_UNSUPPORTED},
        {"padding", "padding", "{}", "padding", CBX_ERR_UNSUPPORTED},
        {"model type", "model.type", "\"WordPiece\"", "model.type", CBX_ERR_UNSUPPORTED},
        {"dropout", "model.dropout", "0.1", "model.dropout", CBX_ERR_UNSUPPORTED},
        {"byte_fallback", "model.byte_fallback", "true", "byte_fallback", CBX_ERR_UNSUPPORTED},
        {"prefix", "model.continuing_subword_prefix", "\"##\"", "continuing_subword_prefix", CBX_ERR_UNSUPPORTED},
        {"suffix", "model.end_of_word_suffix", "\"</w>\"", "end_of_word_suffix", CBX_ERR_UNSUPPORTED},
        {"fuse_unk type", "model.fuse_unk", "1", "fuse_unk", CBX_ERR_FORMAT},
        {"unk_token", "model.unk_token", "\"[NOPE]\"", "unk_token", CBX_ERR_FORMAT},
        {"vocab", "model.vocab", "[]", "model.vocab", CBX_ERR_FORMAT},
        {"vocab id", "model.vocab.a", "-3", "model.vocab", CBX_ERR_FORMAT},
        {"merges", "model.merges", "{}", "model.merges", CBX_ERR_FORMAT},
        {"merge with two spaces", "model.merges.0", "\"t h e\"", "merges[0]", CBX_ERR_FORMAT},
        {"merge out of vocab", "model.merges.0", "[\"t\", \"\\u0416\"]", "merges[0]", CBX_ERR_FORMAT},
        {"merge result out of vocab", "model.merges.0", "\"q z\"", "\"qz\" is not in model.vocab", CBX_ERR_FORMAT},
        {"added lstrip", "added_tokens.0.lstrip", "true", "lstrip", CBX_ERR_UNSUPPORTED},
        {"added single_word", "added_tokens.1.single_word", "true", "single_word", CBX_ERR_UNSUPPORTED},
        {"added id", "added_tokens.3.id", "300", "gives it id 255", CBX_ERR_FORMAT},
        {"added content", "added_tokens.0.content", "\"\"", "added_tokens[0]", CBX_ERR_FORMAT},
        {"model", "model", "null", "model", CBX_ERR_FORMAT},
        {"added not UTF-8", "added_tokens.1.content", "\"[\x80x]\"", "UTF-8", CBX_ERR_FORMAT},
    };
    char err[ERR_MAX];
    size_t n = 0;
    char *text = test_read_file(test_data("english/tokenizer.json"), &n);
    int refused = 0, total = (int)(sizeof muts / sizeof muts[0]);
    for (int i = 0; text && i < total; i++) {
        cJSON *root = cJSON_Parse(text);
        set_path(root, muts[i].path, muts[i].json);
        char *bad = cJSON_PrintUnformatted(root);
        struct grapheme_bpe *g = NULL;
        err[0] = 0;
        cbx_status rc = grapheme_bpe_load_mem(bad, strlen(bad), "t.json", &g, err);
        bool ok = rc == muts[i].rc && !g && strstr(err, muts[i].needle) && !strchr(err, '\n');
        CHECK(ok, "%s refused: rc %d: %s", muts[i].what, (int)rc, err);
        refused += ok;
        grapheme_bpe_free(g);
        free(bad);
        cJSON_Delete(root);
    }
    printf("bad tokenizer.json files: %d of %d refused with the field named\n", refused, total);
    struct grapheme_bpe *g = NULL;
    CHECK(grapheme_bpe_load_mem("{\"model\":", 9, NULL, &g, err) == CBX_ERR_FORMAT && !g, "truncated JSON: %s", err);
    CHECK(grapheme_bpe_load_mem(text, n, NULL, &g, err) == CBX_OK, "the fixture itself loads: %s", err);
    grapheme_bpe_free(g);
    CHECK(grapheme_bpe_load_file("/nonexistent/tokenizer.json", &g, err) == CBX_ERR_NOT_FOUND && !g,
          "missing file: %s", err);

    /* the front end needs [START] and [STOP]; the multilingual one encodes
     * (tests/text/test_mtl_tokenizer.c): Japanese too, Chinese only with a
     * Cangjie table (none given here) */
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    cJSON_DeleteItemFromArray(cJSON_GetObjectItem(root, "added_tokens"), 3);
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "vocab"), "[START]");
    char *nostart = cJSON_PrintUnformatted(root);
    struct text_tokenizer *t = NULL;
    struct text_tokenizer_file f = {"tokenizer.json", nostart};
    CHECK(nostart && text_tokenizer_load_mem(TEXT_TOK_GRAPHEME, &f, 1, &t, err) == CBX_ERR_FORMAT && !t &&
              strstr(err, "[START]"),
          "no [START]: %s", err);
    CHECK(text_tokenizer_load_mem(TEXT_TOK_GRAPHEME, &f, 0, &t, err) == CBX_ERR_NOT_FOUND && strstr(err, "tokenizer.json"),
          "no file given: %s", err);
    struct text_tokenizer_file fm = {"grapheme_mtl_merged_expanded_v1.json", text};
    cbx_status rc = text_tokenizer_load_mem(TEXT_TOK_GRAPHEME_MTL, &fm, 1, &t, err);
    CHECK(rc == CBX_OK, "multilingual file loads: %s", err);
    int32_t *ids = NULL;
    int64_t ni = 0;
    if (t) {
        rc = text_tokenizer_encode(t, "Bonjour", &ids, &ni, err);
        CHECK(rc == CBX_OK && ni > 0, "multilingual encode: %s", rc == CBX_OK ? "ok" : err);
        free(ids);
        ids = NULL;
        rc = text_tokenizer_encode_lang(t, "Bonjour", "ja", &ids, &ni, err);
        CHECK(rc == CBX_OK && ni > 0, "multilingual ja: %s", rc == CBX_OK ? "ok" : err);
        free(ids);
        ids = NULL;
        rc = text_tokenizer_encode_lang(t, "Bonjour", "zh", &ids, &ni, err);
        CHECK(rc == CBX_ERR_NOT_FOUND && !ids && strstr(err, "Cangjie5_TC.json"), "multilingual zh, no table: %s",
              err);
    }
    text_tokenizer_free(t);
    free(nostart);
    cJSON_Delete(root);
    free(text);
}

/* 6. the GPT-2 kind wraps gpt2_bpe: same ids as punc_norm + gpt2_bpe_encode */
static void test_gpt2_kind(void)
{
    char err[ERR_MAX] = "";
    struct text_tokenizer *t = NULL;
    struct gpt2_bpe *g = NULL;
    const char *dir = CBX_SOURCE_DIR "/data/chatterbox-turbo";
    cbx_status rc = text_tokenizer_load_dir(TEXT_TOK_GPT2, dir, &t, err);
    if (rc == CBX_OK) rc = gpt2_bpe_load_dir(dir, &g, err);
    CHECK(rc == CBX_OK, "turbo tokenizer: %s", err);
    if (rc != CBX_OK) { text_tokenizer_free(t); return; }
    CHECK(text_tokenizer_kind_for(MODEL_TURBO) == TEXT_TOK_GPT2 && text_tokenizer_kind_for(MODEL_NANO) == TEXT_TOK_GPT2 &&
              text_tokenizer_kind_for(MODEL_ENGLISH) == TEXT_TOK_GRAPHEME &&
              text_tokenizer_kind_for(MODEL_MTL_V2) == TEXT_TOK_GRAPHEME_MTL && text_tokenizer_kind_for(MODEL_N_VARIANTS) < 0,
          "kind per variant");
    CHECK(text_tokenizer_vocab_size(t) == 50276 && text_tokenizer_max_length(t) == 1024 && text_tokenizer_gpt2(t),
          "turbo: 50276 ids, max length 1024");
    const char *text = "hello   world; it\xe2\x80\x99s [laugh] fine\xe2\x80\xa6 ok";
    char *norm = NULL;
    int32_t *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0, nc = 0;
    rc = text_tokenizer_encode(t, text, &a, &na, err);
    if (rc == CBX_OK) rc = punc_norm(text, PUNC_TURBO, &norm, err);
    if (rc == CBX_OK) rc = gpt2_bpe_encode(g, norm, &b, &nb, err);
    if (rc == CBX_OK) rc = text_tokenizer_count(t, norm, strlen(norm), &nc, err);
    CHECK(rc == CBX_OK && na == nb && nc == nb && na > 0 && !memcmp(a, b, (size_t)na * sizeof *a),
          "gpt2 kind == punc_norm + gpt2_bpe_encode (%lld ids)", (long long)na);
    free(a);
    free(b);
    free(norm);
    /* in memory, as from a GGUF */
    size_t n = 0;
    char *vocab = test_read_file(test_path(dir, "vocab.json"), &n);
    char *merges = test_read_file(test_path(dir, "merges.txt"), &n);
    struct text_tokenizer_file files[2] = {{"merges.txt", merges}, {"vocab.json", vocab}};
    struct text_tokenizer *tm = NULL;
    rc = text_tokenizer_load_mem(TEXT_TOK_GPT2, files, 2, &tm, err);
    CHECK(rc == CBX_OK && text_tokenizer_vocab_size(tm) == 50257, "gpt2 from memory without added tokens: %s",
          rc == CBX_OK ? "50257 ids" : err);
    text_tokenizer_free(tm);
    rc = text_tokenizer_load_mem(TEXT_TOK_GPT2, files + 1, 1, &tm, err);
    CHECK(rc == CBX_ERR_NOT_FOUND && strstr(err, "merges.txt"), "gpt2 without merges.txt: %s", err);
    free(vocab);
    free(merges);
    gpt2_bpe_free(g);
    text_tokenizer_free(t);
}

/* 7. text_tokenizer_load_model on the synthetic English model directory,
 * when the synth_english_model fixture has written it (not required: the
 * directory weighs gigabytes) */
static void test_english_model(void)
{
    const char *dir = test_model_dir("english");
    if (!test_exists(test_path(dir, "t3_cfg.safetensors"))) {
        printf("  %s not written (synth_english_model): load_model check skipped\n", dir);
        return;
    }
    struct model *m = test_open_model(dir);
    if (!m) return;
    char err[ERR_MAX] = "";
    struct text_tokenizer *t = NULL;
    int32_t *ids = NULL;
    int64_t n = 0;
    cbx_status rc = text_tokenizer_load_model(m, &t, err);
    if (rc == CBX_OK) rc = text_tokenizer_encode(t, "Hello world", &ids, &n, err);
    CHECK(rc == CBX_OK && text_tokenizer_kind(t) == TEXT_TOK_GRAPHEME && n == 5,
          "english model directory: grapheme tokenizer, \"Hello world\" -> %lld ids (%s)", (long long)n,
          rc == CBX_OK ? "ok" : err);
    if (rc == CBX_OK) printf("english model directory %s: tokenizer.json loads, %lld ids\n", dir, (long long)n);
    free(ids);
    text_tokenizer_free(t);
    model_close(m);
}

/* 8. every allocation of load, encode and the writer may fail */
static void test_alloc_failures(void)
{
#ifdef HAVE_ALLOC_HOOK
    static const char small[] =
        "{\"added_tokens\":[{\"id\":0,\"content\":\"[STOP]\",\"special\":true},"
        "{\"id\":6,\"content\":\"[X]\",\"normalized\":true}],"
        "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Whitespace\"},"
        "\"model\":{\"type\":\"BPE\",\"unk_token\":\"[U]\",\"vocab\":{\"[STOP]\":0,\"[U]\":1,\"a\":2,\"b\":3,\"ab\":4,\"abab\":5},"
        "\"merges\":[\"a b\",[\"ab\",\"ab\"]]}}";
    char err[ERR_MAX];
    int bad = 0;
    long k = 0;
    for (; k < 100000; k++) {
        struct grapheme_bpe *g = NULL;
        int32_t *ids = NULL;
        int64_t n = 0;
        alloc_hook_arm(k);
        cbx_status rc = grapheme_bpe_load_mem(small, sizeof small - 1, NULL, &g, err);
        if (rc == CBX_OK) rc = grapheme_bpe_encode(g, "ab[X]ba zz ab!", &ids, &n, err);
        alloc_hook_disarm();
        bool nomem = rc == CBX_ERR_NOMEM || (rc == CBX_ERR_FORMAT && strstr(err, "out of memory"));
        if (alloc_hook_hit() ? !nomem : rc != CBX_OK || n != 8) {
            bad++;
            printf("  allocation %ld: rc %d, %lld ids: %s\n", k, (int)rc, (long long)n, rc == CBX_OK ? "" : err);
        }
        free(ids);
        grapheme_bpe_free(g);
        if (!alloc_hook_hit()) break;
    }
    printf("  alloc-failure run, load + encode: %ld allocations, %d wrong\n", k, bad);
    CHECK(bad == 0 && k > 10, "grapheme load + encode fail with out of memory at each of %ld allocations", k);
    bad = 0;
    for (k = 0; k < 1000000; k += 13) {
        char *s = NULL;
        alloc_hook_arm(k);
        cbx_status rc = synth_english_tokenizer_json(&s, NULL, err);
        alloc_hook_disarm();
        if (alloc_hook_hit() ? rc != CBX_ERR_NOMEM || s : rc != CBX_OK) bad++;
        free(s);
        if (!alloc_hook_hit()) break;
    }
    printf("  alloc-failure run, writer: %ld allocations (every 13th failed), %d wrong\n", k, bad);
    CHECK(bad == 0 && k > 100, "writer fails with CBX_ERR_NOMEM (%d wrong)", bad);
#else
    printf("  alloc-failure runs skipped (sanitizer build)\n");
#endif
}

int main(void)
{
    test_writer();
    size_t n = 0;
    char *json = test_read_file(test_data("english/tokenizer_cases.json"), &n);
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    CHECK(root && cJSON_GetObjectItem(root, "cases") && cJSON_GetObjectItem(root, "variant_cases"),
          "tokenizer_cases.json parses");
    if (root) {
        test_cases(root);
        test_variant(root);
        test_mtl_shape(root);
    }
    test_classes();
    test_bad_files();
    test_gpt2_kind();
    test_english_model();
    test_alloc_failures();
    cJSON_Delete(root);
    free(json);
    return test_summary();
}
