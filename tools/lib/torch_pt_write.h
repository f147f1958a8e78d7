/* torch_pt_write.h - write PyTorch `torch.save` zip files of tensor
 * dictionaries that torch.load(..., weights_only=True) accepts; the values
 * are built with torch_pt.h's constructors (pt_dict_new, pt_tensor_new,
 * ...). Part of the tools library (cbx_tools), not of libchatterbox.
 * Thread safety: independent calls may run concurrently. */
#ifndef CBX_TOOLS_TORCH_PT_WRITE_H
#define CBX_TOOLS_TORCH_PT_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "io/torch_pt.h"

/* ---- writing ---- */

/* Write root as a torch.save zip (torch 2.x layout, pickle protocol 2,
 * STORED entries with data aligned to 64 bytes, archive dir "archive",
 * storage keys "0", "1", ... in pt_foreach_tensor order) through a
 * temporary file renamed over path. Every tensor must have data. Checked
 * against torch 2.11: torch.load(weights_only=True), also with mmap=True.
 * Limits: 4 GiB and 65531 tensors (no zip64). */
cbx_status io_pt_write(const char *path, const struct pt_value *root, char *err);

/* Streaming writer: like io_pt_write, but a tensor whose data is NULL gets
 * its bytes from fill, called in tree order (index = 0, 1, ... over all
 * tensors in pt_foreach_tensor order) with consecutive chunks: byte offset
 * `off` into the tensor's contiguous data, `n` bytes to write into buf
 * (n <= 4 MiB, a whole number of elements). Only one chunk is in memory at
 * a time. A nonzero status from fill aborts the write (its err is kept). */
typedef cbx_status (*pt_fill_fn)(void *user, size_t index, const char *name,
                                 const struct pt_tensor *t, uint64_t off,
                                 void *buf, size_t n, char *err);
cbx_status io_pt_write_stream(const char *path, const struct pt_value *root,
                              pt_fill_fn fill, void *user, char *err);

#endif
