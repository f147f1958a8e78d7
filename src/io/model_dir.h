/* model_dir.h - a Chatterbox model directory in the Hugging Face snapshot
 * layout (spec/synthetic-weights.md §6): detect the variant from the files
 * present, open every weight file and look tensors up by their upstream
 * names, per component.
 *
 * The files of each variant are its row's (io/variant.h; the T3 file
 * decides, the others must match), plus conds.pt (built-in voice) and
 * tokenizer files. A missing weight file or conds.pt is an error naming
 * the file and the variant; tokenizer files are only reported
 * (model_dir_file_path), their users check them.
 *
 * Thread safety: a model_dir is read-only after open; any thread,
 * concurrently. */
#ifndef CBX_IO_MODEL_DIR_H
#define CBX_IO_MODEL_DIR_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"
#include "core/tensor.h"
#include "io/variant.h"

/* "t3", "s3gen", "ve". */
const char *model_component_name(enum model_component c);

struct model_dir; /* opaque */

/* Open the directory at path: detect the variant (a directory holding the
 * T3 files of two variants is refused as ambiguous), open its three weight
 * files (safetensors mapped, .pt read) and conds.pt. On success *out is
 * owned by the caller, free with model_dir_close(). On failure *out is NULL
 * and err names the directory, the missing or bad file and the variant. */
cbx_status model_dir_open(const char *path, struct model_dir **out, char *err);
/* Same with the variant given (a model_variant), for a snapshot holding
 * several (ResembleAI/chatterbox has English and multilingual files);
 * variant < 0 detects as model_dir_open does. */
cbx_status model_dir_open_as(const char *path, int variant, struct model_dir **out,
                             char *err);
/* Free everything; a no-op on NULL. Every pointer obtained from md becomes
 * invalid. */
void model_dir_close(struct model_dir *md);

enum model_variant model_dir_variant(const struct model_dir *md);
/* Directory path as given (borrowed from md). */
const char *model_dir_path(const struct model_dir *md);

/* Tensor `name` (the exact upstream state_dict key, e.g.
 * "tfmr.layers.0.self_attn.q_proj.weight") of component c, or NULL.
 * Borrowed from md, valid until model_dir_close(); host memory; do not write
 * through data. */
const struct tensor *model_dir_find(const struct model_dir *md,
                                    enum model_component c, const char *name);
/* Whether component c's tensors lie in a read-only file mapping (a
 * safetensors file) rather than memory (a .pt read in). */
bool model_dir_mapped(const struct model_dir *md, enum model_component c);
/* Same, but a missing tensor is an error naming file and tensor
 * (CBX_ERR_NOT_FOUND); with want_type >= 0 a different type is an error
 * too (CBX_ERR_FORMAT). */
cbx_status model_dir_get(const struct model_dir *md, enum model_component c,
                         const char *name, int want_type,
                         const struct tensor **out, char *err);
/* Number of tensors in component c's file, and tensor i in file order
 * (NULL when out of range); borrowed as above. */
int model_dir_count(const struct model_dir *md, enum model_component c);
const struct tensor *model_dir_tensor(const struct model_dir *md,
                                      enum model_component c, int i);

/* conds.pt: a tensor by its path in the saved tree, dotted:
 * "t3.speaker_emb", "gen.prompt_feat", ... NULL when absent or when the
 * entry is None. *is_none (optional) tells the two apart: true when the key
 * exists and holds None. Borrowed from md. */
const struct tensor *model_dir_cond(const struct model_dir *md,
                                    const char *path, bool *is_none);

/* Full path of a file of the directory ("vocab.json") into buf; returns
 * false when buf is too small. exists (optional) says whether it is a
 * readable regular file. */
bool model_dir_file_path(const struct model_dir *md, const char *file,
                         char *buf, size_t n, bool *exists);

#endif
