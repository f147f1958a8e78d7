/* fuzz_grapheme_json.c - grapheme_bpe_load_mem (tokenizer.json) and encode
 * on arbitrary bytes. The input is the JSON, optionally followed by a NUL
 * and a text to encode (a few fixed texts otherwise). A file is refused
 * with a one-line message, or it loads and then valid UTF-8 always encodes
 * to ids below the vocabulary size, invalid UTF-8 is refused; the English
 * front end (text_tokenizer) agrees with the tokenizer on the same text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/grapheme_bpe.h"
#include "text/tokenizer.h"

static void encode(const struct grapheme_bpe *g, const char *text)
{
    char err[ERR_MAX] = "";
    int32_t *ids = NULL;
    int64_t n = -1;
    cbx_status rc = grapheme_bpe_encode(g, text, &ids, &n, err);
    if (rc == CBX_ERR_INVALID_ARG) {
        if (ids || n != 0 || !err[0]) __builtin_trap();
        return;
    }
    if (rc != CBX_OK || n < 0 || (n > 0 && !ids)) __builtin_trap();
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= grapheme_bpe_vocab_size(g)) __builtin_trap();
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *json = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t jn = nul ? (size_t)(nul - data) : size;
    char *text = NULL;
    if (nul) {
        size_t tn = size - jn - 1;
        if (!(text = malloc(tn + 1))) return 0;
        memcpy(text, nul + 1, tn);
        text[tn] = 0;
    }
    struct grapheme_bpe *g = NULL;
    char err[ERR_MAX] = "";
    if (grapheme_bpe_load_mem(json, jn, "fuzz", &g, err) != CBX_OK) {
        if (g || !memchr(err, 0, sizeof err) || !err[0] || strchr(err, '\n')) __builtin_trap();
        free(text);
        return 0;
    }
    if (!g || grapheme_bpe_vocab_size(g) <= 0) __builtin_trap();
    static const char *const texts[] = {"Hello[SPACE]world.", "", "ab ab\tab\xc2\xa0_a_b!!", "\xe2\x80\x8d\xf0\x9f\x98\x80x",
                                        "\xff"};
    if (text) encode(g, text);
    else
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) encode(g, texts[i]);
    grapheme_bpe_free(g);

    /* the front end over the same file, when it has [START] and [STOP] */
    char *copy = malloc(jn + 1);
    if (copy) {
        memcpy(copy, json, jn);
        copy[jn] = 0;
        struct text_tokenizer_file f = {"tokenizer.json", copy};
        struct text_tokenizer *t = NULL;
        if (strlen(copy) == jn && text_tokenizer_load_mem(TEXT_TOK_GRAPHEME, &f, 1, &t, err) == CBX_OK) {
            int32_t *ids = NULL;
            int64_t n = 0, c = -1;
            const char *s = text ? text : texts[0];
            cbx_status rc = text_tokenizer_encode(t, s, &ids, &n, err);
            if (rc != CBX_OK && rc != CBX_ERR_INVALID_ARG) __builtin_trap();
            free(ids);
            rc = text_tokenizer_count(t, s, strlen(s), &c, err);
            if (rc != CBX_OK && rc != CBX_ERR_INVALID_ARG) __builtin_trap();
        }
        text_tokenizer_free(t);
        free(copy);
    }
    free(text);
    return 0;
}
