/* synth_tokenizer.h - synthetic text front-end files for synthetic
 * checkpoints, whose real files are not available, in the real files'
 * formats (spec/tokenizers.md §2, §3).
 *
 * Both grapheme tokenizers are Hugging Face tokenizers json files:
 * normalizer null, pre_tokenizer Whitespace, model BPE with unk_token
 * [UNK], fuse_unk false, merges as "a b" strings; [STOP] 0, [UNK] 1,
 * [SPACE] 2, [START] 255 (T3Config's stop/start text ids) and the tags
 * [laughter] 256, [sigh] 257 are special added tokens (also in the
 * vocabulary); the other ids are single characters and BPE merges learnt
 * from a small built-in text (most frequent pair first, ties by the
 * pair's strings), so encoding exercises merging.
 *
 *   tokenizer.json (English, 704 ids): characters ASCII '!'..'~', the
 *     Latin-1 letters, a few Latin-1 / currency signs, Greek lower case;
 *     merges from English text.
 *   grapheme_mtl_merged_expanded_v1.json (multilingual, n_ids ids: the
 *     model's text_emb rows): the last 60 ids are the added tokens of the
 *     real file's layout: the 23 language tags [ar] .. [zh] of mtl_tts.py,
 *     then [cj_a] .. [cj_z], [cj_0] .. [cj_9], [cj_.]; characters as the
 *     front end leaves them after str.lower() and NFKD: ASCII, the Latin
 *     letters NFKD keeps whole (ß æ ø ł ı ...) and the combining marks
 *     U+0300..U+036F, Greek, Cyrillic, Hebrew letters and points, Arabic
 *     letters, marks and digits, Devanagari, the Hangul conjoining jamo,
 *     hiragana, katakana and the combining (semi-)voiced marks, CJK
 *     punctuation and the glyphs of the Cangjie table below; merges from
 *     sentences in the 23 languages (NFKD-decomposed) and the English
 *     text; should those run out of pairs, further CJK ideographs from
 *     U+4E00 fill the remaining ids.
 *   Cangjie5_TC.json: a JSON list of "glyph\tcode" strings (the format
 *     ChineseCangjieConverter reads, tokenizers.md §3.1) for about 150
 *     common CJK characters: the 26 key radicals with their own key
 *     (日 a ... 重 z), the others synthetic 2-4 letter codes, some shared
 *     by several glyphs (told apart by their index in file order).
 *
 * The output is deterministic (byte-identical on every run).
 *
 * Thread safety: any thread, concurrently. */
#ifndef CBX_IO_SYNTH_TOKENIZER_H
#define CBX_IO_SYNTH_TOKENIZER_H

#include <stddef.h>

#include "core/error.h"

#define SYNTH_ENGLISH_TEXT_VOCAB 704

/* The JSON texts; *out owned by the caller (free()), *n its length
 * (optional). n_ids: the vocabulary size, at least 1024. */
cbx_status synth_english_tokenizer_json(char **out, size_t *n, char *err);
cbx_status synth_mtl_tokenizer_json(int n_ids, char **out, size_t *n, char *err);
cbx_status synth_cangjie_json(char **out, size_t *n, char *err);
/* Write them to path (through a temporary file and rename). */
cbx_status synth_write_english_tokenizer(const char *path, char *err);
cbx_status synth_write_mtl_tokenizer(const char *path, int n_ids, char *err);
cbx_status synth_write_cangjie(const char *path, char *err);

#endif
