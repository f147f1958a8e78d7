/* gguf.h - GGUF v3 reader (zero-copy over a read-only mapping) and writer.
 *
 * Format (ggml docs/gguf.md), all little-endian:
 *   "GGUF" magic, u32 version (3; 2 is read too, it differs only in
 *   allowing big-endian files, which are refused), u64 tensor count, u64
 *   key/value count; the key/values (string key, u32 value type, value);
 *   the tensor infos (string name, u32 n_dims, u64 ne[n_dims] innermost
 *   first, u32 ggml type id, u64 offset into the data section); zero padding
 *   to general.alignment (u32, default 32, a power of two); the data
 *   section. A string is a u64 byte count and the bytes (no NUL); an array
 *   is a u32 element type, a u64 count and the elements.
 *
 * Shapes: GGUF lists dims innermost first (ggml ne[0]); this module
 * converts to the project's outermost-first order both ways, so a
 * PyTorch-shaped [out, in] weight is stored as ne = {in, out}, as ggml
 * tools expect. A scalar (ndim 0) is written as n_dims 1, ne {1}, since
 * ggml has no 0-d tensors, and therefore reads back with shape [1].
 *
 * Reader limits (a file outside them is refused with CBX_ERR_FORMAT and a
 * message naming the file, the key or tensor, the value and what is
 * allowed): every count and length must fit in the bytes left in the file;
 * keys unique and free of NUL bytes; arrays nest at most IO_GGUF_MAX_DEPTH
 * deep; n_dims <= TENSOR_MAX_DIMS; type ids among enum dtype's ggml ids
 * (f32 f16 bf16 f64 i8 i16 i32 i64 q4_0 q4_1 q5_0 q5_1 q8_0 q8_1); the
 * innermost dim a whole number of blocks; offsets multiples of the
 * alignment; data inside the file; tensor names unique; no two tensors
 * overlapping. Tensor data whose address is misaligned for its element type
 * (only possible with alignment < 8 or a misaligned open_memory buffer) is
 * copied to an owned buffer, so every tensor can be used in place.
 *
 * Writer: metadata in insertion order (setting a key again replaces its
 * value in place), tensors in add order, each tensor's data at the next
 * multiple of the alignment, the file zero-padded after every tensor (as
 * ggml writes it); written to "<path>.tmp.<pid>" and renamed on success,
 * so a failure never leaves a partial file at path. Names are not limited
 * here, but ggml's own reader refuses tensor names of 64 bytes or more
 * (GGML_MAX_NAME), and upstream state-dict names reach 79 bytes: a file
 * meant for ggml tools must shorten them.
 *
 * Thread safety: a reader is read-only after open; any thread, concurrently.
 * A writer: one thread at a time per writer. */
#ifndef CBX_IO_GGUF_H
#define CBX_IO_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"

#define IO_GGUF_DEFAULT_ALIGNMENT 32
#define IO_GGUF_MAX_DEPTH 8 /* nesting of arrays of arrays */

/* Metadata value types (gguf.md enum gguf_metadata_value_type). */
enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
};

/* "uint8", "string", ... ; "?" for an unknown id. */
const char *io_gguf_type_name(int type);

/* A string: bytes s[0..len) plus a NUL at s[len] (the bytes themselves may
 * contain NULs; len is authoritative). */
struct io_gguf_str {
    const char *s;
    uint64_t len;
};

/* One metadata value. For arrays, arr.data holds arr.n elements:
 * numeric and bool types as a packed C array of the element type (bool as
 * one byte, 0 or 1), GGUF_TYPE_STRING as struct io_gguf_str[n],
 * GGUF_TYPE_ARRAY as struct io_gguf_value[n] (each of type ARRAY). */
struct io_gguf_value {
    enum gguf_type type;
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f32;
        double f64;
        bool b;
        struct io_gguf_str str;
        struct {
            enum gguf_type type;
            uint64_t n;
            const void *data;
        } arr;
    } v;
};

/* ---- reader ----------------------------------------------------------- */

struct io_gguf; /* opaque */

/* Map path read-only (MAP_PRIVATE) and validate it. On success *out is owned
 * by the caller, free with io_gguf_close(); on failure *out is NULL and err
 * holds one line naming the path and the problem. */
cbx_status io_gguf_open(const char *path, struct io_gguf **out, char *err);
/* Same over n bytes at buf, borrowed until io_gguf_close(). */
cbx_status io_gguf_open_memory(const void *buf, size_t n, struct io_gguf **out,
                               char *err);
/* Unmap and free; a no-op on NULL. Every pointer obtained from g becomes
 * invalid. */
void io_gguf_close(struct io_gguf *g);

uint32_t io_gguf_version(const struct io_gguf *g);
size_t io_gguf_alignment(const struct io_gguf *g);
/* File offset of the data section (a multiple of the alignment). */
uint64_t io_gguf_data_offset(const struct io_gguf *g);

int io_gguf_n_tensors(const struct io_gguf *g);
/* Tensor i in file order, or NULL when out of range. Descriptor, name and
 * data are borrowed from g until io_gguf_close(); data points into the
 * mapping (or an owned copy, see above); be = NULL (host); contiguous.
 * Do not write through data. */
const struct tensor *io_gguf_tensor(const struct io_gguf *g, int i);
/* Tensor by exact name (hashed), or NULL. Borrowed as above. */
const struct tensor *io_gguf_find_tensor(const struct io_gguf *g,
                                         const char *name);
/* Offset of tensor i's data relative to the data section. */
uint64_t io_gguf_tensor_offset(const struct io_gguf *g, int i);

int io_gguf_n_kv(const struct io_gguf *g);
/* Key i (NUL-terminated, borrowed from g), or NULL when out of range. */
const char *io_gguf_kv_key(const struct io_gguf *g, int i);
/* Value i (borrowed from g, deep), or NULL when out of range. */
const struct io_gguf_value *io_gguf_kv_value(const struct io_gguf *g, int i);
/* Index of key (hashed), or -1. */
int io_gguf_find_kv(const struct io_gguf *g, const char *key);
/* Value of key, or NULL when absent. Borrowed from g. */
const struct io_gguf_value *io_gguf_get(const struct io_gguf *g,
                                        const char *key);

/* Typed getters: CBX_ERR_NOT_FOUND when the key is absent,
 * CBX_ERR_FORMAT when its type differs (the message names key, stored type
 * and wanted type); *v is written only on success. Strings and arrays are
 * borrowed from g. */
cbx_status io_gguf_get_u8(const struct io_gguf *g, const char *key, uint8_t *v, char *err);
cbx_status io_gguf_get_i8(const struct io_gguf *g, const char *key, int8_t *v, char *err);
cbx_status io_gguf_get_u16(const struct io_gguf *g, const char *key, uint16_t *v, char *err);
cbx_status io_gguf_get_i16(const struct io_gguf *g, const char *key, int16_t *v, char *err);
cbx_status io_gguf_get_u32(const struct io_gguf *g, const char *key, uint32_t *v, char *err);
cbx_status io_gguf_get_i32(const struct io_gguf *g, const char *key, int32_t *v, char *err);
cbx_status io_gguf_get_u64(const struct io_gguf *g, const char *key, uint64_t *v, char *err);
cbx_status io_gguf_get_i64(const struct io_gguf *g, const char *key, int64_t *v, char *err);
cbx_status io_gguf_get_f32(const struct io_gguf *g, const char *key, float *v, char *err);
cbx_status io_gguf_get_f64(const struct io_gguf *g, const char *key, double *v, char *err);
cbx_status io_gguf_get_bool(const struct io_gguf *g, const char *key, bool *v, char *err);
/* NUL-terminated string (len, if not NULL, gets its byte count). */
cbx_status io_gguf_get_str(const struct io_gguf *g, const char *key, const char **v,
                           uint64_t *len, char *err);
/* Array of elem_type (GGUF_TYPE_*): *n elements at *data, laid out as in
 * struct io_gguf_value. */
cbx_status io_gguf_get_arr(const struct io_gguf *g, const char *key, enum gguf_type elem_type,
                           const void **data, uint64_t *n, char *err);

/* ---- writer ----------------------------------------------------------- */

struct io_gguf_writer; /* opaque */

/* An empty writer; owned by the caller, free with io_gguf_writer_free(). */
cbx_status io_gguf_writer_create(struct io_gguf_writer **out, char *err);
void io_gguf_writer_free(struct io_gguf_writer *w);

/* Set key to a deep copy of v (strings and arrays are copied; nothing
 * stays borrowed). Setting "general.alignment" (uint32, a power of two)
 * changes the data alignment. Refuses a NULL or empty key, a bad
 * type, or arrays nested deeper than IO_GGUF_MAX_DEPTH. */
cbx_status io_gguf_writer_set(struct io_gguf_writer *w, const char *key,
                              const struct io_gguf_value *v, char *err);
cbx_status io_gguf_writer_set_u8(struct io_gguf_writer *w, const char *key, uint8_t v, char *err);
cbx_status io_gguf_writer_set_i8(struct io_gguf_writer *w, const char *key, int8_t v, char *err);
cbx_status io_gguf_writer_set_u16(struct io_gguf_writer *w, const char *key, uint16_t v, char *err);
cbx_status io_gguf_writer_set_i16(struct io_gguf_writer *w, const char *key, int16_t v, char *err);
cbx_status io_gguf_writer_set_u32(struct io_gguf_writer *w, const char *key, uint32_t v, char *err);
cbx_status io_gguf_writer_set_i32(struct io_gguf_writer *w, const char *key, int32_t v, char *err);
cbx_status io_gguf_writer_set_u64(struct io_gguf_writer *w, const char *key, uint64_t v, char *err);
cbx_status io_gguf_writer_set_i64(struct io_gguf_writer *w, const char *key, int64_t v, char *err);
cbx_status io_gguf_writer_set_f32(struct io_gguf_writer *w, const char *key, float v, char *err);
cbx_status io_gguf_writer_set_f64(struct io_gguf_writer *w, const char *key, double v, char *err);
cbx_status io_gguf_writer_set_bool(struct io_gguf_writer *w, const char *key, bool v, char *err);
/* NUL-terminated string value. */
cbx_status io_gguf_writer_set_str(struct io_gguf_writer *w, const char *key, const char *v, char *err);
/* Array of n elements of a numeric/bool type (packed C array; bool as one
 * byte each) or of GGUF_TYPE_STRING (data = const char *const *,
 * NUL-terminated). Nested arrays: use io_gguf_writer_set. */
cbx_status io_gguf_writer_set_arr(struct io_gguf_writer *w, const char *key, enum gguf_type elem_type,
                                  const void *data, uint64_t n, char *err);

/* Append a tensor: name (copied), type (a ggml id of enum dtype: not U8 or
 * BOOL), shape outermost first (innermost dim a multiple of the block size
 * for block types), data of tensor_nbytes bytes, borrowed until the file is
 * written; data may be NULL when the file is written with the streaming
 * calls below. Duplicate names are refused. */
cbx_status io_gguf_writer_add_tensor(struct io_gguf_writer *w, const char *name, enum dtype type,
                                     int ndim, const int64_t *ne, const void *data, char *err);

/* Write the whole file from the data pointers given to add_tensor (all
 * must be non-NULL). The writer stays usable (it can be written again). */
cbx_status io_gguf_writer_write(struct io_gguf_writer *w, const char *path, char *err);

/* Streaming: begin writes the header and tensor infos to a temp file; then
 * append the data of every tensor in add order, back to back, in any
 * split (the writer inserts the alignment padding itself); finish checks
 * every byte arrived and renames the temp file onto path. After any
 * failure finish removes the temp file; call finish (or free) in every
 * case. Metadata and tensors cannot change between begin and finish. */
cbx_status io_gguf_writer_begin(struct io_gguf_writer *w, const char *path, char *err);
cbx_status io_gguf_writer_append(struct io_gguf_writer *w, const void *bytes, size_t n, char *err);
cbx_status io_gguf_writer_finish(struct io_gguf_writer *w, char *err);

#endif
