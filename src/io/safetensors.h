/* safetensors.h - safetensors reader (zero-copy over a read-only mapping)
 * and streaming writer.
 *
 * Format (huggingface/safetensors, checkpoint-format.md §1.1): an 8-byte
 * little-endian header length H, H bytes of UTF-8 JSON mapping each tensor
 * name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative
 * to the first byte after the header) plus an optional "__metadata__"
 * string -> string map, then the raw little-endian row-major data.
 *
 * Reader limits (a file outside them is refused with CBX_ERR_FORMAT and a
 * message naming the tensor, field and value):
 *   - H <= IO_ST_MAX_HEADER and 8 + H <= file size;
 *   - dtype one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL;
 *   - shape of 0..TENSOR_MAX_DIMS non-negative dims (shape [] = scalar);
 *   - 0 <= begin <= end <= data size, end - begin == elements * elemsize,
 *     no two tensors overlapping (upstream also refuses gaps and trailing
 *     bytes; we accept them, they cannot make a read go out of bounds);
 *   - no keys besides dtype/shape/data_offsets in an entry, no duplicate
 *     names, metadata values must be strings.
 * A tensor whose data is not aligned to its element size in the mapping (a
 * hostile or odd writer; our writer pads the header to 8) is copied into an
 * owned aligned buffer, so every returned tensor can be used in place.
 * An allocation failure inside the JSON parser (cJSON) cannot be told from
 * bad JSON and is reported as CBX_ERR_FORMAT "not valid JSON"; every other
 * one as CBX_ERR_NOMEM.
 *
 * Writer byte layout matches the oracle's synth.py (and the Python package
 * for one tensor order): compact JSON with tensors in the caller's order, each
 * {"dtype":..,"shape":[..],"data_offsets":[b,e]}, then "__metadata__" last;
 * non-ASCII escaped as \uXXXX (Python json.dumps ensure_ascii); header padded
 * with spaces to a multiple of 8; data back to back in the same order.
 *
 * Thread safety: a reader is read-only after open; any thread, concurrently.
 * A writer: one thread at a time per writer. */
#ifndef CBX_IO_SAFETENSORS_H
#define CBX_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"

#define IO_ST_MAX_HEADER ((uint64_t)100 * 1024 * 1024)

struct io_safetensors; /* opaque reader */

/* Map path read-only (MAP_PRIVATE) and validate its header. On success *out
 * is owned by the caller, free with io_safetensors_close(). On failure *out
 * is NULL and err holds one line naming path and problem. */
cbx_status io_safetensors_open(const char *path, struct io_safetensors **out,
                               char *err);
/* Same over n bytes at buf, which is borrowed: it must stay valid and
 * unchanged until io_safetensors_close(). (Used by tests and the fuzzer.) */
cbx_status io_safetensors_open_memory(const void *buf, size_t n,
                                      struct io_safetensors **out, char *err);
/* Unmap and free; a no-op on NULL. Every tensor/name/metadata pointer
 * obtained from st becomes invalid. */
void io_safetensors_close(struct io_safetensors *st);

/* Number of tensors (the order of the header's JSON object). */
int io_safetensors_count(const struct io_safetensors *st);
/* Tensor i (0 <= i < count), or NULL when out of range. The descriptor,
 * its name and its data are borrowed from st, valid until close; data
 * points into the mapping (or an owned copy when misaligned), be = NULL
 * (host), contiguous strides. Do not write through data. */
const struct tensor *io_safetensors_tensor(const struct io_safetensors *st,
                                           int i);
/* Tensor by exact name (hashed lookup), or NULL. Borrowed as above. */
const struct tensor *io_safetensors_find(const struct io_safetensors *st,
                                         const char *name);
/* "__metadata__" value of key, or NULL when absent. Borrowed from st. */
const char *io_safetensors_metadata(const struct io_safetensors *st,
                                    const char *key);
/* Number of metadata entries, and entry i's key and value (borrowed);
 * returns false when i is out of range. */
int io_safetensors_metadata_count(const struct io_safetensors *st);
bool io_safetensors_metadata_at(const struct io_safetensors *st, int i,
                                const char **key, const char **value);
/* Total bytes of the data section (after the header). */
uint64_t io_safetensors_data_size(const struct io_safetensors *st);

/* ---- writer ----------------------------------------------------------- */

/* One tensor of the header: name (borrowed during writer_open only), type
 * (F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL), shape outermost first. */
struct io_st_entry {
    const char *name;
    enum dtype type;
    int ndim;
    int64_t ne[TENSOR_MAX_DIMS];
};

/* One "__metadata__" entry (both strings borrowed during writer_open). */
struct io_st_kv {
    const char *key;
    const char *value;
};

struct io_safetensors_writer; /* opaque */

/* Start writing path: creates "<path>.tmp.<pid>", writes the header with the
 * n entries in the given order and the metadata (n_meta entries; when
 * n_meta == 0 the default {"format": "pt"} is written, as torch's
 * save_file does), and expects the data of every tensor next, in order,
 * back to back, through io_safetensors_writer_write. *out is owned by the
 * caller and must be finished with io_safetensors_writer_close (even after
 * a failed write). Refuses bad names (empty, duplicates, "__metadata__"),
 * unsupported types and bad shapes with CBX_ERR_INVALID_ARG. */
cbx_status io_safetensors_writer_open(const char *path, int n,
                                      const struct io_st_entry *entries,
                                      int n_meta, const struct io_st_kv *meta,
                                      struct io_safetensors_writer **out,
                                      char *err);
/* Append n bytes of tensor data (any split of the stream is fine). Writing
 * past the total the header announced fails with CBX_ERR_INVALID_ARG. A
 * failed write makes the writer failed: close then removes the temp file. */
cbx_status io_safetensors_writer_write(struct io_safetensors_writer *w,
                                       const void *bytes, size_t n, char *err);
/* Bytes of data still expected. */
uint64_t io_safetensors_writer_remaining(const struct io_safetensors_writer *w);
/* Finish: checks every announced byte was written, flushes, and renames the
 * temp file onto path; on any failure (or an earlier one) removes the temp
 * file and leaves path untouched. Frees w in every case; a no-op on NULL. */
cbx_status io_safetensors_writer_close(struct io_safetensors_writer *w,
                                       char *err);
/* Give up: remove the temp file and free w; a no-op on NULL. */
void io_safetensors_writer_abort(struct io_safetensors_writer *w);

/* Convenience: write a whole file from tensors in memory (contiguous host
 * data; names from t[i].name, which must be set). */
cbx_status io_safetensors_write(const char *path, int n,
                                const struct tensor *const *t, int n_meta,
                                const struct io_st_kv *meta, char *err);

#endif
