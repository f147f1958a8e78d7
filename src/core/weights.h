/* weights.h - placing a model's weights on its backend.
 *
 * Every loader hands each weight it keeps to weight_place: the tensor as a
 * weight source stores it (io/weights.h; host memory, borrowed), the role
 * the model gives it and the type the model wants it in. Placement
 *   1. converts it to the wanted type (and, for WEIGHT_TRANSPOSE, from
 *      [in, out] to [out, in]) in host memory owned by the weight set, or
 *      borrows the source's bytes when nothing changes;
 *   2. makes a descriptor owned by the set and hands it to the backend's
 *      prepare_weight hook (backend.h), which owns the layout: the cpu
 *      backend repacks q4_0 / q8_0 decode linears for its GEMV and gives
 *      convolutions a packed-panel slot, ref keeps the plain layout, a
 *      device backend uploads. What the backend attaches (tensor.extra) is
 *      released through its release_weight hook when the set is freed.
 * Weights a model derives at load (folded norms, weight norm, fused
 * projections) are made with weight_new in set memory, filled on the host,
 * then placed like the others (no copy: the bytes are the set's already).
 *
 * The set must be freed before the backend it was made for, and the
 * weight source must outlive the set (borrowed bytes). Thread safety: one
 * loader per set; placed weights are read-only and any thread may use
 * them. */
#ifndef CBX_CORE_WEIGHTS_H
#define CBX_CORE_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "tensor.h"

struct backend;

/* How the model uses a weight (what the backend may lay it out for). */
enum weight_role {
    WEIGHT_PLAIN,            /* read by ordinary ops (biases, scales, tables of values) */
    WEIGHT_NORM,             /* a norm's gain or shift */
    WEIGHT_EMBEDDING,        /* rows gathered by op_get_rows */
    WEIGHT_LINEAR,           /* op_linear's w, [out, in] */
    WEIGHT_CONV1D,           /* op_conv1d's w, [Cout, Cin/groups, K] */
    WEIGHT_CONV_TRANSPOSE1D, /* op_conv_transpose1d's w, [Cin, Cout/groups, K] */
    WEIGHT_CONV2D,           /* op_conv2d's w */
};

/* Flags for weight_place. */
enum {
    WEIGHT_TRANSPOSE = 1u << 0, /* src is a 2-D [in, out] (GPT-2 Conv1D): held [out, in] */
    WEIGHT_DECODE = 1u << 1,    /* a linear streamed once per decode step (one or two
                                 * rows of x): the backend may choose a layout for that.
                                 * The cpu backend may then copy a borrowed weight
                                 * and drop the source's pages from this process
                                 * (MADV_DONTNEED): the source must be a file
                                 * mapping (a weight file), not memory read again */
};

/* Keep the stored type (weight_place's wtype). */
#define WEIGHT_AS_STORED (-1)

struct weight_set;

/* A new, empty set for backend be; NULL when out of memory. */
struct weight_set *weight_set_create(const struct backend *be);
/* Releases every placed weight (through the backend) and the set's memory;
 * no-op on NULL. */
void weight_set_free(struct weight_set *s);
const struct backend *weight_set_backend(const struct weight_set *s);

/* n bytes of host memory owned by s (64-byte aligned), NULL when out of
 * memory. huge: from 2 MiB-aligned blocks marked for transparent huge
 * pages (weights streamed every decode step). For the backends' prepare
 * hooks, weight_new and conversions. */
void *weight_set_host(struct weight_set *s, size_t n, bool huge);
/* Whether p lies in host memory of s (so may be rewritten in place). */
bool weight_set_owns(const struct weight_set *s, const void *p);

/* Place src (see the header comment) as wtype (F32, F16, BF16 or a block
 * type; WEIGHT_AS_STORED keeps src's type) with flags. Returns the placed
 * descriptor (owned by s; name borrowed from src). Does nothing and
 * returns NULL when src is NULL or *rc != CBX_OK (so loaders chain it
 * after weights_get and check once); sets *rc and err on failure (a type
 * src cannot be converted to, rows not a whole number of blocks, no
 * memory, the backend's refusal). */
const struct tensor *weight_place(struct weight_set *s, const struct tensor *src, enum weight_role role,
                                  int wtype, unsigned flags, cbx_status *rc, char *err);
/* A new contiguous host tensor of s (data uninitialised) for a weight the
 * model derives; fill it, then weight_place it. NULL (with *rc, err) on
 * failure or when *rc != CBX_OK already. */
struct tensor *weight_new(struct weight_set *s, enum dtype t, int ndim, const int64_t *ne, const char *name,
                          cbx_status *rc, char *err);

/* Drops the whole pages inside src's bytes from this process
 * (MADV_DONTNEED) once a loader holds its own copy (converted, derived,
 * repacked): resident memory does not keep both, while the pages stay in
 * the page cache, so a later read or load still finds them (MADV_PAGEOUT
 * would evict them and make that read go to the disk). src must lie in a
 * read-only file mapping (io/weights.h, weights.mapped): in other memory
 * the bytes would read back as zeros. */
void weight_drop_source(const struct tensor *src);

/* Bytes of host memory the set holds (converted and repacked weights). */
size_t weight_set_host_bytes(const struct weight_set *s);

#endif
