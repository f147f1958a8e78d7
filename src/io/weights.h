/* weights.h - how model code finds its tensors: a lookup by upstream
 * state_dict name over any source (a model directory component, a GGUF
 * file, tensors made in memory), with shape checks that name the tensor.
 * Thread safety: read-only; any thread, concurrently. */
#ifndef CBX_IO_WEIGHTS_H
#define CBX_IO_WEIGHTS_H

#include <stdbool.h>

#include "core/error.h"
#include "core/tensor.h"
#include "io/model_dir.h"

/* Tensor by exact upstream name in part `part` of the source (a model
 * component for model directories), or NULL. Returned tensors are borrowed
 * from the source and must outlive every model that uses them. */
typedef const struct tensor *(*weight_find_fn)(const void *ctx, int part, const char *name);

struct weights {
    weight_find_fn find;
    const void *ctx;
    int part;
    const char *what; /* for messages: "t3", "s3gen", "ve" */
    bool mapped;      /* the tensors' bytes lie in read-only file mappings
                       * (GGUF, safetensors), so a loader may drop the pages
                       * of a tensor it has made its own copy of
                       * (core/weights.h weight_drop_source); false for a
                       * .pt read into memory and tensors made in memory */
};

/* The tensors of one component of a model directory. */
struct weights weights_from_model_dir(const struct model_dir *md, enum model_component c);

/* One weight file on its own (a T3 loaded in place of a model's, say
 * --t3): a safetensors file or a GGUF (told apart by the GGUF magic), its
 * tensors looked up by upstream name whatever the part asked for. Open:
 * *out owned by the caller, weights_file_close() (a no-op on NULL); err
 * names the path. The weights borrow f; the tensors live until the close. */
struct weights_file;
cbx_status weights_file_open(const char *path, struct weights_file **out, char *err);
void weights_file_close(struct weights_file *f);
struct weights weights_from_file(const struct weights_file *f, const char *what);
/* The type most of f's matrices are stored in (its first tensor of two or
 * more dims in a block type, F16 or BF16), else F32: a GGUF's
 * quantisation. */
int weights_file_wtype(const struct weights_file *f);

/* Tensor `name` with ndim dims equal to ne (an entry -1 matches any size)
 * in F32/F16/BF16 or a block type. Missing or misshapen: sets *rc and err
 * (the first problem wins) and returns NULL. Does nothing and returns NULL
 * once *rc != CBX_OK, so a loader can chain many calls and check once. */
const struct tensor *weights_get(const struct weights *w, const char *name, int ndim,
                                 const int64_t *ne, cbx_status *rc, char *err);
/* Same with a printf-style name ("flow.encoder.encoders.%d.norm_ff.weight"). */
const struct tensor *weights_getf(const struct weights *w, cbx_status *rc, char *err, int ndim,
                                  const int64_t *ne, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* True when a tensor of that name exists (printf-style). */
int weights_has(const struct weights *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
