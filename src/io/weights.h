/* weights.h - how model code finds its tensors: a lookup by upstream
 * state_dict name over any source (a model directory component, a GGUF
 * file, tensors made in memory), with shape checks that name the tensor.
 * Thread safety: read-only; any thread, concurrently. */
#ifndef CBX_IO_WEIGHTS_H
#define CBX_IO_WEIGHTS_H

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
};

/* The tensors of one component of a model directory. */
struct weights weights_from_model_dir(const struct model_dir *md, enum model_component c);

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
