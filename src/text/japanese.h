/* japanese.h - the multilingual tokenizer's Japanese step
 * (hiragana_normalize, chatterbox mtl_tts tokenizer, spec tokenizers.md
 * §3.2) on libkakasi instead of pykakasi 2.3.0:
 *
 *   pykakasi cuts the text into segments; a segment whose original text
 *   holds a kanji (U+4E00..U+9FFF) becomes its hiragana reading, with one
 *   space in front when the reading starts with "は" or "へ"; every other
 *   segment (kana, Latin, digits, punctuation) stays as it is.
 *
 * Emulation: each maximal run that starts with a kanji and goes on over
 * kanji, "々", "ヶ"/"ヵ" between kanji, and hiragana (its okurigana and
 * particles; a combining voicing mark U+3099/U+309A ends it, as pykakasi's
 * segments end there on NFKD text) goes through kakasi -JH -f once: its
 * "orig[reading]" output gives kakasi's own dictionary segmentation (the
 * longest-match dictionary pykakasi's segments come from) and the
 * readings together. Each word holding a kanji becomes its reading with
 * the "は"/"へ" rule; a word with a small "っ" before its end is read in
 * parts cut after it, as pykakasi cuts it (and as kakasi reads it right);
 * the rest of the text is copied. Readings come from kakasi's dictionary,
 * so a word may read differently from pykakasi's
 * (tests/text/test_mtl_tokenizer.c measures the agreement). The caller
 * applies NFKD afterwards (upstream does it inside hiragana_normalize).
 *
 * libkakasi keeps global state and is not thread-safe: every call into it
 * is made under one process-wide mutex; text goes to it in EUC-JP (iconv)
 * and a character EUC-JP cannot hold ends a run and stays unchanged.
 *
 * Thread safety: any thread, concurrently (serialised inside). */
#ifndef CBX_TEXT_JAPANESE_H
#define CBX_TEXT_JAPANESE_H

#include <stddef.h>

#include "core/error.h"

/* The step on UTF-8 text[0..len). *out (NUL-terminated) is owned by the
 * caller (free()). Errors: CBX_ERR_INVALID_ARG (invalid UTF-8),
 * CBX_ERR_NOT_FOUND (kakasi's dictionary is not installed),
 * CBX_ERR_NOMEM, CBX_ERR_INTERNAL (kakasi rejected its options, or it ran
 * out of memory earlier: libkakasi does not recover from a failed
 * allocation of its own, so the step then stays off for the process). */
cbx_status japanese_hiragana(const char *text, size_t len, char **out, char *err);

#endif
