/* cangjie.h - the Cangjie table of the multilingual tokenizer's Chinese
 * step (ChineseCangjieConverter, chatterbox mtl_tts tokenizer, spec
 * tokenizers.md §3.1): `Cangjie5_TC.json`, a JSON list of strings
 * "glyph\tcode[\t...]", read as upstream's _load_cangjie_mapping reads it:
 *
 *   word2cj[glyph] = code        the last entry of a glyph wins
 *   cj2word[code] += [glyph]     every entry, in file order
 *
 * and looked up as _cangjie_encode does: the code of a glyph and the
 * position of the glyph's first entry in cj2word[code] (its index; the
 * converter appends it in decimal when it is above 0).
 *
 * Strict where upstream would throw: a file that is not a JSON list of
 * strings, or an entry without a tab, is refused with a message naming the
 * entry (upstream logs a warning and keeps a partial table). Entries whose
 * glyph is not exactly one code point are kept in cj2word (they shift the
 * indices of later glyphs, as upstream's list does) but never looked up,
 * as the converter only looks up single characters.
 *
 * Thread safety: a loaded table is read-only; lookups may run on any
 * number of threads concurrently. */
#ifndef CBX_TEXT_CANGJIE_H
#define CBX_TEXT_CANGJIE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

struct cangjie;

/* Parse the JSON text json[0..len) (need not be NUL-terminated); `where`
 * names it in messages. On success *out is owned by the caller, free with
 * cangjie_free(); on failure *out is NULL and err names the entry. */
cbx_status cangjie_load_mem(const char *json, size_t len, const char *where, struct cangjie **out, char *err);
/* Read and parse the file at path (CBX_ERR_NOT_FOUND when it is absent). */
cbx_status cangjie_load_file(const char *path, struct cangjie **out, char *err);
void cangjie_free(struct cangjie *t); /* no-op on NULL */

/* The code of glyph c (UTF-8, borrowed from t, valid until cangjie_free;
 * *len its bytes) and its index in cj2word[code]; NULL when c has none. */
const char *cangjie_code(const struct cangjie *t, int32_t c, size_t *len, int *index);
/* Entries read and distinct single-code-point glyphs with a code. */
size_t cangjie_n_entries(const struct cangjie *t);
size_t cangjie_n_glyphs(const struct cangjie *t);

#endif
