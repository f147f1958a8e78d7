/* model_file.h - THE way to open a Chatterbox model: a Hugging Face
 * snapshot directory (through model_dir.h) or a single GGUF file made by
 * `chatterbox convert`, behind one API: variant, weights per component,
 * the built-in voice (conds.pt entries), tokenizer file contents. Also the
 * converter itself (directory -> GGUF).
 *
 * The GGUF layout (format version 1; GGUF v3 container, gguf.h):
 *   metadata
 *     general.architecture = "chatterbox", general.alignment (64),
 *     general.file_type (llama.cpp's ftype id of the target type),
 *     general.quantization_version = 2 (only when a block type is used)
 *     chatterbox.format_version (u32, 1), chatterbox.variant ("turbo",
 *     "nano", "english", "mtl-v2", "mtl-v3"), chatterbox.source (the
 *     directory converted), chatterbox.quantization ("f32", "q8_0", ...),
 *     chatterbox.{t3,s3gen,ve}.file (the upstream weight file name),
 *     chatterbox.{t3,s3gen,ve,conds}.tensor_count (u32: tensors are stored
 *     in that order, so a lookup per component finds only its own),
 *     chatterbox.t3.conv1d_layout = "out_in" (GPT-2 variants: every
 *     transformers Conv1D weight, upstream [in, out], is stored transposed
 *     under its upstream name so it can be quantised in rows and used in
 *     place; t3_load_gpt2 recognises the layout from the c_attn shape),
 *     hyper-parameters for `info` (chatterbox.t3.n_layer, .d_model,
 *     .text_vocab, .speech_vocab, .n_ctx for GPT-2),
 *     chatterbox.conds.none (array of conds paths that hold None),
 *     tokenizer.<file>: each tokenizer file's text, the file name with a
 *     leading "tokenizer_" dropped and '.' replaced by '_'
 *     (tokenizer.vocab_json, tokenizer.merges_txt,
 *     tokenizer.added_tokens_json, tokenizer.special_tokens_map_json,
 *     tokenizer.config_json, tokenizer.tokenizer_json, ...).
 *   tensors
 *     upstream state_dict names, unchanged (T3, S3Gen and VE names do not
 *     collide), then the conds.pt tensors as "conds." + their dotted path
 *     ("conds.t3.speaker_emb", "conds.gen.prompt_feat", ...). Types follow
 *     quant_policy.h.
 * Tensor names are kept whole: upstream names reach 79 bytes, and ggml's
 * own GGUF reader refuses names of 64 bytes or more (GGML_MAX_NAME), so
 * these files are read by this project's reader (no length limit), not by
 * llama.cpp/ggml tools; `chatterbox info` reports the longest name.
 *
 * Thread safety: a model is read-only after open; any thread,
 * concurrently. model_convert: one call per output path at a time. */
#ifndef CBX_IO_MODEL_FILE_H
#define CBX_IO_MODEL_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"
#include "io/gguf.h"
#include "io/model_dir.h"
#include "io/weights.h"

#define MODEL_FILE_FORMAT_VERSION 1

struct model; /* opaque */

/* Open path: a directory (model_dir_open) or a GGUF file written by
 * model_convert (checked: architecture, format version, variant, the
 * per-component tensor counts). On success *out is owned by the caller,
 * free with model_close(); on failure *out is NULL and err names the path
 * and the problem. */
cbx_status model_open(const char *path, struct model **out, char *err);
/* Same with the variant given (a model_variant; < 0 detects). A GGUF of
 * another variant is refused. */
cbx_status model_open_as(const char *path, int variant, struct model **out, char *err);
/* Free everything; a no-op on NULL. */
void model_close(struct model *m);

enum model_variant model_get_variant(const struct model *m);
/* Path as given (borrowed from m). */
const char *model_path(const struct model *m);
bool model_is_gguf(const struct model *m);
/* The weight type (enum dtype) the model is held in: F32 for a
 * directory, the converted file's chatterbox.quantization for a GGUF. */
int model_stored_wtype(const struct model *m);
/* The underlying reader (borrowed from m); NULL for the other kind. */
const struct model_dir *model_get_dir(const struct model *m);
const struct io_gguf *model_get_gguf(const struct model *m);

/* Tensor `name` (upstream state_dict key) of component c, or NULL.
 * Borrowed from m, valid until model_close(); host memory, read-only. */
const struct tensor *model_find(const struct model *m, enum model_component c, const char *name);
/* The weight source of component c for loaders (weights.h); borrows m. */
struct weights model_weights(const struct model *m, enum model_component c);
/* Tensors of component c in file order (NULL when out of range). */
int model_count(const struct model *m, enum model_component c);
const struct tensor *model_tensor(const struct model *m, enum model_component c, int i);

/* The built-in voice: a conds.pt entry by dotted path ("t3.speaker_emb",
 * "gen.prompt_feat"), or NULL when absent or None; *is_none (optional) is
 * true when the entry exists and holds None. Borrowed from m. */
const struct tensor *model_cond(const struct model *m, const char *path, bool *is_none);

/* Contents of tokenizer file `file` ("vocab.json", "merges.txt", ...):
 * read from the directory, or the string stored in the GGUF. *text is
 * NUL-terminated, owned by the caller (free()); *len (optional) its
 * length. CBX_ERR_NOT_FOUND (err set) when the model has no such file. */
cbx_status model_text_file(const struct model *m, const char *file, char **text, size_t *len,
                           char *err);
/* The GGUF key holding tokenizer file `file` into buf ("merges.txt" ->
 * "tokenizer.merges_txt"); false when buf is too small. */
bool model_text_file_key(const char *file, char *buf, size_t n);

/* ---- convert ----------------------------------------------------------- */

/* Progress: called before tensor i of n (name) and once more at the end
 * with i == n (name NULL); bytes = data bytes written so far of total. */
typedef void (*model_convert_progress_fn)(void *user, int i, int n, const char *name,
                                          uint64_t bytes, uint64_t total);

struct model_convert_params {
    enum dtype type;        /* target: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 */
    int variant;            /* of the source directory; < 0 detects */
    model_convert_progress_fn progress; /* may be NULL */
    void *progress_user;
};

/* Write the model directory src as one GGUF file at dst (layout above).
 * Tensors are streamed one at a time from the mapped source; the file is
 * written to a temporary name and renamed, so a failure leaves nothing at
 * dst. */
cbx_status model_convert(const char *src, const char *dst, const struct model_convert_params *p,
                         char *err);

#endif
