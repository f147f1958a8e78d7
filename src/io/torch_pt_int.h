/* torch_pt_int.h - torch_pt.c's helpers shared with the writer
 * (tools/lib/torch_pt_write.c), which lives outside the library; not for
 * other callers (sqlite's btree.h / btreeInt.h split). */
#ifndef CBX_IO_TORCH_PT_INT_H
#define CBX_IO_TORCH_PT_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "io/torch_pt.h"

/* Container nesting limit of a value tree (reader and writer). */
#define PT_DEPTH_MAX 64

/* torch.{Float,Double,Half,BFloat16,Long,Int,Short,Char,Byte,Bool}Storage */
#define PT_N_STORAGE_CLASSES 10

/* Bytes per element of a storable type (0 for others). */
size_t pt_elsize(enum dtype t);
/* "FloatStorage", ... for t, or NULL; its index in that list, or -1. */
const char *pt_storage_class_name(enum dtype t);
int pt_storage_class_index(enum dtype t);
/* Contiguous bytes of a tensor of that type and shape, SIZE_MAX when the
 * shape is invalid or too large. */
size_t pt_shape_bytes(enum dtype type, int ndim, const int64_t *ne);
/* Grow *p (of *cap elements of elem bytes) to hold need; false when out of
 * memory (*p unchanged). */
bool pt_grow(void **p, size_t *cap, size_t need, size_t elem);

/* Dotted names ("t3.speaker_emb") built in a growing buffer. */
struct pt_namebuf { char *s; size_t len, cap; bool oom; };
/* Append ".part" (or "part" at the start); *saved gets the length to
 * restore. False when out of memory (nb->oom set). */
bool pt_name_push(struct pt_namebuf *nb, const char *part, size_t *saved);

#endif
