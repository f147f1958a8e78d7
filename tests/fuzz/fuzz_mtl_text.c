/* fuzz_mtl_text.c - the multilingual front end (punc_norm, str.lower,
 * NFKD, language step, tag, [SPACE], grapheme BPE) on arbitrary bytes: the
 * first byte picks the language (one of the 23 codes, an unknown one, or
 * none); invalid UTF-8 must be refused cleanly, an unknown code refused,
 * everything else (ja through kakasi, zh through the synthetic Cangjie
 * table) must encode to ids within the vocabulary. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const langs[] = {"ar", "da", "de", "el", "en", "es", "fi", "fr", "he", "hi", "it", "ja",
                                        "ko", "ms", "nl", "no", "pl", "pt", "ru", "sv", "sw", "tr", "zh", "KO",
                                        "xx", NULL};
    static struct text_tokenizer *t;
    if (!t && text_tokenizer_load_dir(TEXT_TOK_GRAPHEME_MTL, CBX_SOURCE_DIR "/tests/data/mtl-v2/tokenizer", &t,
                                      NULL) != CBX_OK)
        abort();
    if (size == 0) return 0;
    const char *lang = langs[data[0] % (sizeof langs / sizeof langs[0])];
    char *s = malloc(size);
    if (!s) return 0;
    memcpy(s, data + 1, size - 1);
    s[size - 1] = 0;
    int32_t *ids = NULL;
    int64_t n = 0;
    char err[ERR_MAX];
    cbx_status rc = text_tokenizer_encode_lang(t, s, lang, &ids, &n, err);
    bool refused = lang && !strcmp(lang, "xx");
    if (refused && rc == CBX_OK) abort();
    if (rc != CBX_OK && rc != CBX_ERR_INVALID_ARG) abort();
    if (rc == CBX_OK && (n <= 0 || !ids)) abort(); /* at least the "." punc_norm guarantees */
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= text_tokenizer_vocab_size(t)) abort();
    free(ids);
    free(s);
    return 0;
}
