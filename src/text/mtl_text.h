/* mtl_text.h - the multilingual tokenizer's own text steps (MTLTokenizer
 * .encode, spec/tokenizers.md §3), between punc_norm and the grapheme BPE:
 *
 *   1. lower-case as Python str.lower(): the full mapping ("İ" -> "i̇",
 *      i + U+0307) and the Final_Sigma rule for "Σ"
 *   2. NFKD (utf8proc)
 *   3. the language step: "ko": any Hangul syllable U+AC00..U+D7AF left is
 *      split into conjoining jamo (korean_normalize), then leading and
 *      trailing whitespace (Python str.strip) is stripped; "zh": every
 *      character of category Lo with a Cangjie code becomes "[cj_x]" for
 *      each character x of code + (its index when above 0), then "[cj_.]"
 *      (ChineseCangjieConverter, cangjie.h), on unsegmented text: upstream's
 *      behaviour when spacy_pkuseg is not installed (its default install),
 *      so no word spaces are inserted; "ja": kanji words to hiragana with
 *      kakasi (hiragana_normalize, japanese.h), then NFKD again; "he" and
 *      "ru" (optional upstream packages, absent by default) and all other
 *      codes: unchanged
 *   4. "[" + code + "]" prepended when a language is given
 *   5. every ASCII space -> "[SPACE]"
 *
 * Language codes are compared case-insensitively and must be one of the 23
 * of mtl_tts.py SUPPORTED_LANGUAGES; the tag is the lower-cased code. */
#ifndef CBX_TEXT_MTL_TEXT_H
#define CBX_TEXT_MTL_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

struct cangjie;

/* Steps 1-5 on UTF-8 text[0..len); language NULL: no language step and no
 * tag. cj: the Cangjie table (borrowed; only "zh" reads it, and refuses
 * with CBX_ERR_NOT_FOUND when it is NULL). *out (NUL-terminated) is owned
 * by the caller (free()). Errors: CBX_ERR_INVALID_ARG (invalid UTF-8,
 * unknown language: the message names the valid codes), CBX_ERR_NOT_FOUND
 * ("zh" without a table, "ja" without kakasi's dictionary), CBX_ERR_NOMEM,
 * the errors of japanese_hiragana. */
cbx_status mtl_text_prepare(const char *text, size_t len, const char *language, const struct cangjie *cj,
                            char **out, char *err);

/* Python str.lower() of UTF-8 text[0..len) (step 1 alone). */
cbx_status mtl_text_lower(const char *text, size_t len, char **out, char *err);

/* Python's Cased and Case_Ignorable properties as str.lower() uses them
 * for the Final_Sigma rule (exposed for the tests). */
int mtl_text_is_cased(int32_t c);
int mtl_text_is_case_ignorable(int32_t c);

#endif
