/* fuzz_tokenizer.c - punc_norm + GPT-2 BPE on arbitrary bytes: invalid
 * UTF-8 must be refused cleanly, everything else must encode to ids within
 * the vocabulary. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/gpt2_bpe.h"
#include "text/punc_norm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct gpt2_bpe *t;
    if (!t && gpt2_bpe_load_dir(CBX_SOURCE_DIR "/data/chatterbox-turbo", &t, NULL) != CBX_OK) abort();
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;
    char *norm = NULL;
    if (punc_norm(s, PUNC_TURBO, &norm, NULL) == CBX_OK) {
        int32_t *ids = NULL;
        int64_t n = 0;
        if (gpt2_bpe_encode(t, norm, &ids, &n, NULL) != CBX_OK) abort(); /* valid UTF-8 always encodes */
        for (int64_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= gpt2_bpe_vocab_size(t)) abort();
        free(ids);
    }
    free(norm);
    free(s);
    return 0;
}
