/* synth_tokenizer.h - a synthetic English tokenizer.json (Hugging Face
 * tokenizers format, as the real one: spec/tokenizers.md §2) for synthetic
 * checkpoints, whose real tokenizer file is not available.
 *
 * 704 ids (text_tokens_dict_size): [STOP] 0, [UNK] 1, [SPACE] 2, [START]
 * 255 and the tags [laughter] 256, [sigh] 257 (special added tokens, also
 * in the vocabulary); single characters: ASCII '!'..'~', the Latin-1
 * letters, a few Latin-1 / currency signs, Greek lower case; the other
 * ids are BPE merges learnt from a small built-in English text (most
 * frequent pair first, ties by the pair's strings), so encoding exercises
 * merging. normalizer null, pre_tokenizer Whitespace, model BPE with
 * unk_token [UNK], fuse_unk false, merges as "a b" strings. The output is
 * deterministic (byte-identical on every run).
 *
 * Thread safety: any thread, concurrently. */
#ifndef CBX_IO_SYNTH_TOKENIZER_H
#define CBX_IO_SYNTH_TOKENIZER_H

#include <stddef.h>

#include "core/error.h"

#define SYNTH_ENGLISH_TEXT_VOCAB 704

/* The JSON text; *out owned by the caller (free()), *n its length
 * (optional). */
cbx_status synth_english_tokenizer_json(char **out, size_t *n, char *err);
/* Write it to path (through a temporary file and rename). */
cbx_status synth_write_english_tokenizer(const char *path, char *err);

#endif
