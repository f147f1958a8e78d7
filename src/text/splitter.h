/* splitter.h - long text cut into segments the model was trained on (the
 * engine's engine_split, pipeline/engine.h), on raw text before punc_norm:
 *
 *   1. sentences: after a sentence end followed by white space or the end
 *      of the text: . ! ? … ‼ ⁇ ⁈ ⁉, Devanagari danda । and double danda ॥,
 *      Arabic ؟ and ۔, the Greek question mark U+037E and a ";" after a
 *      Greek letter (Greek's question mark as typed); and, with no space
 *      needed (CJK writes none), after 。！？｡ and a fullwidth ． not followed
 *      by a digit. Runs of enders and closing quotes/brackets (" ' ) ] ” ’
 *      » › 」 』 ） 】 》 〉) stay with their sentence. Line breaks end a
 *      piece too. A '.' after a single letter or a common abbreviation
 *      ("Mr.", "e.g.") does not end a sentence;
 *   2. a sentence over the token budget is cut after , ; : (followed by
 *      a space), the Arabic comma ، and semicolon ؛ (followed by a space),
 *      the CJK ，、；： (no space needed), or before a dash; a piece still
 *      over budget is cut between words: at white space, and (multilingual
 *      tokenizer only: the English-only models keep such a run whole)
 *      between two characters of a script written without spaces (Han,
 *      kana) at a grapheme-cluster boundary, so a combining mark never
 *      leaves its base;
 *   3. consecutive pieces are packed greedily into segments of at most
 *      `budget` tokens; a last segment under 1/8 of the budget joins the
 *      previous one (up to 1.5x); pieces are joined with one space where
 *      the text had white space between them, with nothing where it had
 *      none (CJK sentences);
 *   4. a segment without any letter or digit is dropped.
 * Cuts fall on code-point (grapheme) boundaries of the raw text, so the
 * multilingual front end's per-character steps (a Cangjie [cj_*] group,
 * a kana's voicing mark) never straddle two segments.
 *
 * Thread safety: any thread, concurrently (tok is read-only). */
#ifndef CBX_TEXT_SPLITTER_H
#define CBX_TEXT_SPLITTER_H

#include <stdbool.h>

#include "core/error.h"

struct text_tokenizer;

/* Split UTF-8 text; tokens are counted with tok (text_tokenizer_count_lang
 * with `language`, NULL for none). *segments ([*n] strings, each owned)
 * are owned by the caller: text_split_free(*segments, *n). */
cbx_status text_split(const struct text_tokenizer *tok, const char *text, const char *language, int budget,
                      char ***segments, int *n, char *err);
void text_split_free(char **segments, int n);
/* True when s (UTF-8) has a letter or digit (Unicode L*, N*). */
bool text_split_has_word(const char *s);

#endif
