/* tokenizer.h - the text front end of a model variant behind one handle:
 * text in, T3 text ids out (spec/tokenizers.md).
 *
 *   kind               front end (text_tokenizer_encode)                 files
 *   TEXT_TOK_GPT2      punc_norm (Turbo rules) -> GPT-2 byte BPE         vocab.json, merges.txt,
 *                      (Turbo, Nano; gpt2_bpe.h)                         [added_tokens.json,
 *                                                                        tokenizer_config.json]
 *   TEXT_TOK_GRAPHEME  punc_norm (English rules) -> every " " becomes   tokenizer.json
 *                      "[SPACE]" -> grapheme BPE (English; grapheme_bpe.h)
 *   TEXT_TOK_GRAPHEME_MTL  punc_norm (multilingual rules) -> lower-case   grapheme_mtl_merged_
 *                      (Python str.lower) -> NFKD -> language step ->    expanded_v1.json,
 *                      "[xx]" tag -> "[SPACE]" -> grapheme BPE           [Cangjie5_TC.json]
 *                      (mtl_text.h; "zh": Cangjie, unsegmented, from
 *                      Cangjie5_TC.json: without that file the tokenizer
 *                      loads and only "zh" fails; "ja": kakasi).
 *
 * No start/stop ids are added (T3 wraps the grapheme ids itself) and
 * nothing is truncated: text_tokenizer_max_length says where Turbo's
 * `truncation=True` cuts, the caller cuts.
 *
 * Thread safety: a loaded tokenizer is read-only; every function may run
 * on any number of threads concurrently. */
#ifndef CBX_TEXT_TOKENIZER_H
#define CBX_TEXT_TOKENIZER_H

#include <stdint.h>

#include "core/error.h"
#include "io/model_dir.h"

enum text_tokenizer_kind {
    TEXT_TOK_GPT2,
    TEXT_TOK_GRAPHEME,
    TEXT_TOK_GRAPHEME_MTL,
};

struct text_tokenizer; /* opaque */
struct model;
struct gpt2_bpe;
struct grapheme_bpe;

/* The front end of variant v (Turbo, Nano: GPT-2; English: grapheme;
 * multilingual: grapheme MTL); -1 when v is out of range. */
int text_tokenizer_kind_for(enum model_variant v);
/* "gpt2-bpe", "grapheme-bpe", "grapheme-bpe-mtl". */
const char *text_tokenizer_kind_name(enum text_tokenizer_kind kind);

/* One tokenizer file's contents, by its upstream file name. */
struct text_tokenizer_file {
    const char *name; /* "vocab.json", "tokenizer.json", ... */
    const char *text; /* NUL-terminated contents */
};

/* Load from files held in memory (a GGUF's blobs): files[0..n) must hold
 * the kind's required files (table above); the optional ones may be
 * missing, others are ignored. On success *out is owned by the caller,
 * free with text_tokenizer_free(); on failure *out is NULL and err names
 * the file and the problem. */
cbx_status text_tokenizer_load_mem(enum text_tokenizer_kind kind, const struct text_tokenizer_file *files,
                                   int n, struct text_tokenizer **out, char *err);
/* Load the kind's files from directory dir (GPT-2: as gpt2_bpe_load_dir,
 * which prefers a tokenizer.json when there is one). */
cbx_status text_tokenizer_load_dir(enum text_tokenizer_kind kind, const char *dir,
                                   struct text_tokenizer **out, char *err);
/* Load the tokenizer of an open model: its variant's kind, from the
 * directory or from the files stored in the GGUF (model_text_file). */
cbx_status text_tokenizer_load_model(const struct model *m, struct text_tokenizer **out, char *err);
void text_tokenizer_free(struct text_tokenizer *t); /* no-op on NULL */

/* The whole front end on UTF-8 text: punc_norm, the kind's own steps, the
 * tokenizer. *ids owned by the caller (free()), *n its length (not
 * truncated). Invalid UTF-8: CBX_ERR_INVALID_ARG. */
cbx_status text_tokenizer_encode(const struct text_tokenizer *t, const char *text, int32_t **ids,
                                 int64_t *n, char *err);
/* As text_tokenizer_encode, with a language: one of the 23 codes of the
 * multilingual model (case-insensitive; "[xx]" with the lower-cased code
 * is prepended), or NULL for none (upstream's language_id=None). A
 * non-NULL language for the other kinds, or an unknown code (the message
 * lists the valid ones): CBX_ERR_INVALID_ARG; "zh" when the model has no
 * Cangjie5_TC.json: CBX_ERR_NOT_FOUND, naming the file.
 * text_tokenizer_encode(t, text, ...) is this with language NULL. */
cbx_status text_tokenizer_encode_lang(const struct text_tokenizer *t, const char *text, const char *language,
                                      int32_t **ids, int64_t *n, char *err);
/* Without punc_norm: what upstream's tokenizer object does with text as
 * given (AutoTokenizer for GPT-2; EnTokenizer.text_to_tokens for English:
 * " " -> "[SPACE]", then Tokenizer.encode; MTLTokenizer.text_to_tokens
 * with language_id=None for the multilingual kind). */
cbx_status text_tokenizer_encode_raw(const struct text_tokenizer *t, const char *text, int32_t **ids,
                                     int64_t *n, char *err);
/* text_tokenizer_encode_raw with a language (as text_tokenizer_encode_lang). */
cbx_status text_tokenizer_encode_raw_lang(const struct text_tokenizer *t, const char *text, const char *language,
                                          int32_t **ids, int64_t *n, char *err);
/* Number of ids text_tokenizer_encode_raw gives for text[0..len) (need not
 * be NUL-terminated): what the long-text splitter budgets with. For the
 * multilingual kind: with no language, so no tag and no language step (one
 * id fewer than with a tag; a budget, not the exact count). */
cbx_status text_tokenizer_count(const struct text_tokenizer *t, const char *text, size_t len,
                                int64_t *n, char *err);
/* As text_tokenizer_count with a language (multilingual kind: its tag and
 * language step are counted, so "zh" counts the Cangjie groups). */
cbx_status text_tokenizer_count_lang(const struct text_tokenizer *t, const char *text, size_t len,
                                     const char *language, int64_t *n, char *err);

enum text_tokenizer_kind text_tokenizer_kind(const struct text_tokenizer *t);
/* Ids the tokenizer can produce (largest + 1): T3's text vocabulary. */
int64_t text_tokenizer_vocab_size(const struct text_tokenizer *t);
/* Where Turbo's tokenizer(..., truncation=True) cuts (model_max_length);
 * 0 when nothing is cut (grapheme kinds, or no limit configured). */
int64_t text_tokenizer_max_length(const struct text_tokenizer *t);
/* The underlying tokenizer, or NULL for the other kind; borrowed from t. */
const struct gpt2_bpe *text_tokenizer_gpt2(const struct text_tokenizer *t);
const struct grapheme_bpe *text_tokenizer_grapheme(const struct text_tokenizer *t);

#endif
