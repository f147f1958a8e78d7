/* container.h - what the two tensor container readers (gguf.c,
 * safetensors.c) share: mapping a file read-only, and checking that the
 * byte ranges of the tensors in a data section do not overlap.
 *
 * Thread safety: none needed; no state. */
#ifndef CBX_IO_CONTAINER_H
#define CBX_IO_CONTAINER_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"

/* Map the regular file at path read-only (private). On success *map and
 * *len hold the mapping (release with munmap(*map, *len)); an empty file
 * gives *map = NULL, *len = 0, since mmap refuses length 0. Errors:
 * CBX_ERR_NOT_FOUND (no such file), CBX_ERR_IO (cannot open, not a
 * regular file, mmap failed); the message names path. */
cbx_status container_map(const char *path, void **map, size_t *len, char *err);

/* Bytes [begin, end) of a data section that tensor `index` occupies. */
struct container_span {
    uint64_t begin, end;
    int index;
};

/* Sort sp[0, n) by begin and fail with CBX_ERR_FORMAT, naming both tensors
 * (t[index].name) and their ranges, where a non-empty span starts before
 * the previous non-empty one ends. */
cbx_status container_check_overlap(struct container_span *sp, int n, const struct tensor *t, const char *path,
                                   char *err);

#endif
