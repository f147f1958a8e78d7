/* test_tokenizer.c - Turbo text front end: punc_norm + GPT-2 BPE against the
 * Hugging Face tokenizer's output on every case of the fixture
 * (tests/data/turbo/tokenizer_cases.json), plus edge cases. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "text/gpt2_bpe.h"
#include "text/punc_norm.h"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) == (size_t)n) b[n] = 0;
    fclose(f);
    return b;
}

static int encode(const struct gpt2_bpe *t, const char *s, int32_t **ids, int64_t *n)
{
    char err[ERR_MAX] = "";
    cbx_status rc = gpt2_bpe_encode(t, s, ids, n, err);
    if (rc != CBX_OK) printf("encode error: %s\n", err);
    return rc == CBX_OK;
}

int main(void)
{
    char err[ERR_MAX] = "";
    struct gpt2_bpe *t = NULL;
    cbx_status rc = gpt2_bpe_load_dir(CBX_SOURCE_DIR "/data/chatterbox-turbo", &t, err);
    CHECK(rc == CBX_OK, "load: %s", err);
    if (!t) return test_summary();
    CHECK(gpt2_bpe_vocab_size(t) == 50276, "len(tokenizer) %lld", (long long)gpt2_bpe_vocab_size(t));
    CHECK(gpt2_bpe_max_length(t) == 1024, "model_max_length");

    char *json = slurp(test_data("turbo/tokenizer_cases.json"));
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    CHECK(root != NULL, "fixture parses");
    const cJSON *cases = cJSON_GetObjectItem(root, "cases");
    int n_cases = 0, n_norm_ok = 0, n_ids_ok = 0;
    for (const cJSON *c = cases ? cases->child : NULL; c; c = c->next) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        const char *want_norm = cJSON_GetObjectItem(c, "normalized")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(c, "ids");
        char *norm = NULL;
        rc = punc_norm(text, PUNC_TURBO, &norm, err);
        bool norm_ok = rc == CBX_OK && !strcmp(norm, want_norm);
        CHECK(norm_ok, "case %d punc_norm: got \"%s\" want \"%s\"", n_cases, norm ? norm : err, want_norm);
        int32_t *ids = NULL;
        int64_t n = 0;
        bool ids_ok = false;
        if (encode(t, want_norm, &ids, &n)) {
            ids_ok = n == cJSON_GetArraySize(want);
            for (int64_t i = 0; ids_ok && i < n; i++)
                ids_ok = ids[i] == cJSON_GetArrayItem(want, (int)i)->valueint;
        }
        CHECK(ids_ok, "case %d ids differ (text \"%s\")", n_cases, want_norm);
        if (!ids_ok) {
            printf("  got :");
            for (int64_t i = 0; i < n; i++) printf(" %d", ids[i]);
            printf("\n  want:");
            for (const cJSON *e = want->child; e; e = e->next) printf(" %d", e->valueint);
            printf("\n");
        }
        n_norm_ok += norm_ok;
        n_ids_ok += ids_ok;
        n_cases++;
        free(norm);
        free(ids);
    }
    printf("tokenizer fixture: %d cases, punc_norm identical %d, ids identical %d\n", n_cases,
           n_norm_ok, n_ids_ok);
    CHECK(n_cases >= 20, "fixture has %d cases", n_cases);

    /* edge cases */
    int32_t *ids = NULL;
    int64_t n = -1;
    CHECK(encode(t, "", &ids, &n) && n == 0, "empty string -> no ids");
    free(ids);
    CHECK(encode(t, "[laugh][cough]", &ids, &n) && n == 2 && ids[0] == 50257 && ids[1] == 50261,
          "only tags");
    free(ids);
    CHECK(encode(t, "<|endoftext|>", &ids, &n) && n == 1 && ids[0] == 50256, "special token");
    free(ids);
    CHECK(encode(t, "Hello world", &ids, &n) && n == 2 && ids[0] == 15496 && ids[1] == 995,
          "plain words");
    free(ids);
    /* emoji: 4 UTF-8 bytes, byte-level so always encodable */
    CHECK(encode(t, "\xf0\x9f\x98\x80", &ids, &n) && n >= 1, "emoji encodes");
    free(ids);
    /* a 20000-letter word */
    char *longw = malloc(20001);
    for (int i = 0; i < 20000; i++) longw[i] = (char)('a' + (i * 7) % 26);
    longw[20000] = 0;
    CHECK(encode(t, longw, &ids, &n) && n > 1000, "long word -> %lld ids", (long long)n);
    free(ids);
    free(longw);
    /* invalid UTF-8 is refused with a message */
    rc = gpt2_bpe_encode(t, "abc\xff\xfe", &ids, &n, err);
    CHECK(rc == CBX_ERR_INVALID_ARG && strstr(err, "UTF-8"), "invalid UTF-8 refused: %s", err);
    char *norm = NULL;
    rc = punc_norm("\xc3\x28", PUNC_TURBO, &norm, err);
    CHECK(rc == CBX_ERR_INVALID_ARG && norm == NULL, "punc_norm refuses invalid UTF-8");
    rc = punc_norm("", PUNC_TURBO, &norm, err);
    CHECK(rc == CBX_OK && !strcmp(norm, "You need to add some text for me to talk."), "empty text message");
    free(norm);
    rc = punc_norm("stra\xc3\x9f" "e", PUNC_TURBO, &norm, err);
    CHECK(rc == CBX_OK && !strcmp(norm, "Stra\xc3\x9f" "e."), "first letter upper-cased only");
    free(norm);
    rc = punc_norm("\xc3\x9f" "x", PUNC_TURBO, &norm, err);
    CHECK(rc == CBX_OK && !strcmp(norm, "SSx."), "full upper-case mapping of a first ß: %s", norm);
    free(norm);
    rc = punc_norm("a...b; c - d", PUNC_ENGLISH, &norm, err);
    CHECK(rc == CBX_OK && !strcmp(norm, "A, b,  c, d."), "english replacements: \"%s\"", norm);
    free(norm);
    rc = punc_norm("\xe4\xbd\xa0\xe5\xa5\xbd\xe3\x80\x82", PUNC_MULTILINGUAL, &norm, err);
    CHECK(rc == CBX_OK && !strcmp(norm, "\xe4\xbd\xa0\xe5\xa5\xbd\xe3\x80\x82"), "CJK ender kept");
    free(norm);

    /* malformed tokenizer files */
    struct gpt2_bpe *bad = NULL;
    CHECK(gpt2_bpe_load_mem("{", "", NULL, NULL, &bad, err) == CBX_ERR_FORMAT && !bad, "bad vocab JSON");
    CHECK(gpt2_bpe_load_mem("{\"a\": 0}", "#version: 0.2\nab\n", NULL, NULL, &bad, err) == CBX_ERR_FORMAT,
          "merge line without a space: %s", err);
    CHECK(gpt2_bpe_load_dir("/nonexistent-dir", &bad, err) == CBX_ERR_IO, "missing dir: %s", err);

    cJSON_Delete(root);
    free(json);
    gpt2_bpe_free(t);
    return test_summary();
}
