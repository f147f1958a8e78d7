/* gpt2_bpe.h - GPT-2 byte-level BPE tokenizer as the Hugging Face
 * tokenizers library runs it for Chatterbox Turbo/Nano (spec/tokenizers.md
 * §1): added tokens split out first (leftmost-longest), the GPT-2
 * pre-tokeniser regex through PCRE2 (UTF + UCP), byte-to-unicode mapping,
 * merges by rank, vocabulary lookup. No BOS/EOS is added.
 * Thread safety: a loaded tokenizer is read-only; encode may run on any
 * number of threads concurrently. */
#ifndef CBX_TEXT_GPT2_BPE_H
#define CBX_TEXT_GPT2_BPE_H

#include <stdint.h>

#include "core/error.h"

struct gpt2_bpe;

/* Load from a model directory: tokenizer.json if present, else vocab.json +
 * merges.txt (+ added_tokens.json, tokenizer_config.json's
 * added_tokens_decoder). */
cbx_status gpt2_bpe_load_dir(const char *dir, struct gpt2_bpe **out, char *err);
/* Load from in-memory file contents (any of the added/config may be NULL). */
cbx_status gpt2_bpe_load_mem(const char *vocab_json, const char *merges_txt,
                             const char *added_tokens_json, const char *tokenizer_config_json,
                             struct gpt2_bpe **out, char *err);
void gpt2_bpe_free(struct gpt2_bpe *t);

/* Encode UTF-8 text. *ids is owned by the caller (free()); *n its length.
 * Invalid UTF-8 is refused with CBX_ERR_INVALID_ARG. */
cbx_status gpt2_bpe_encode(const struct gpt2_bpe *t, const char *text, int32_t **ids,
                           int64_t *n, char *err);
/* Number of ids (base vocabulary plus added tokens), as len(tokenizer). */
int64_t gpt2_bpe_vocab_size(const struct gpt2_bpe *t);
/* model_max_length from tokenizer_config.json (0 when unbounded). */
int64_t gpt2_bpe_max_length(const struct gpt2_bpe *t);

#endif
