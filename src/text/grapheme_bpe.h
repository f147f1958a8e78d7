/* grapheme_bpe.h - the grapheme BPE tokenizer of Chatterbox English and
 * Multilingual (spec/tokenizers.md §2, §3): a Hugging Face `tokenizers`
 * tokenizer.json with no normalizer, the `Whitespace` pre-tokenizer and a
 * character-level BPE model, encoded exactly as the tokenizers library
 * (0.23) encodes it:
 *   1. added tokens split out, first those with "normalized": false, then,
 *      in the remaining pieces, those with "normalized": true (each pass an
 *      exact, leftmost-longest match; special or not does not matter);
 *   2. every other piece cut into maximal runs of \w or of [^\w\s]
 *      (Oniguruma's Unicode \w: alphabetic, marks, decimal digits,
 *      connector punctuation, ZWNJ/ZWJ; \s is White_Space, dropped);
 *   3. BPE per run: one symbol per code point (vocabulary id, or the
 *      unk_token's id, fused with a preceding unknown when fuse_unk, or
 *      dropped when there is no unk_token), then merges by rank (lowest
 *      first, leftmost on ties) as the library's priority queue runs them.
 * No post-processor, no truncation, no padding.
 *
 * The loader is strict: a normalizer, pre-tokenizer, post-processor, model
 * type or option this file does not implement (dropout, byte_fallback,
 * continuing_subword_prefix, end_of_word_suffix, added-token lstrip /
 * rstrip / single_word, truncation, padding) is refused with a message
 * naming the field, never silently encoded differently. Merges may be
 * "a b" strings or ["a", "b"] arrays; each side and their concatenation
 * must be in the vocabulary, as the library requires. Added-token ids must
 * be the ids the library would give them (it ignores the file's ids).
 *
 * Thread safety: a loaded tokenizer is read-only; encode may run on any
 * number of threads concurrently. */
#ifndef CBX_TEXT_GRAPHEME_BPE_H
#define CBX_TEXT_GRAPHEME_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

struct grapheme_bpe;

/* Parse the tokenizer.json text json[0..len) (need not be NUL-terminated).
 * `where` names it in messages ("DIR/tokenizer.json"). On success *out is
 * owned by the caller, free with grapheme_bpe_free(); on failure *out is
 * NULL and err says which field is wrong. */
cbx_status grapheme_bpe_load_mem(const char *json, size_t len, const char *where,
                                 struct grapheme_bpe **out, char *err);
/* Read and parse the file at path. */
cbx_status grapheme_bpe_load_file(const char *path, struct grapheme_bpe **out, char *err);
void grapheme_bpe_free(struct grapheme_bpe *t); /* no-op on NULL */

/* Encode UTF-8 text as Tokenizer.encode(text).ids. *ids is owned by the
 * caller (free()), NULL when *n is 0. Invalid UTF-8 is refused with
 * CBX_ERR_INVALID_ARG. */
cbx_status grapheme_bpe_encode(const struct grapheme_bpe *t, const char *text, int32_t **ids,
                               int64_t *n, char *err);
/* Number of ids the tokenizer can produce: largest id + 1 over the
 * vocabulary and the added tokens (the T3 text embedding's rows). */
int64_t grapheme_bpe_vocab_size(const struct grapheme_bpe *t);
/* Id of token s (an added token or a vocabulary entry), or -1. */
int32_t grapheme_bpe_token_id(const struct grapheme_bpe *t, const char *s);

/* The pre-tokenizer's character classes (exposed for tests): c is in \w,
 * c is in \s. Unicode 15 (utf8proc); code points assigned later count as
 * neither. */
bool grapheme_bpe_is_word_char(int32_t c);
bool grapheme_bpe_is_space_char(int32_t c);

#endif
