/* tensor.h - element types and the tensor descriptor.
 *
 * Shapes are row-major and listed outermost first, as in PyTorch: a
 * [B, T, C] activation has ne = {B, T, C} and C is contiguous. Strides are
 * in bytes per dimension. Block-quantised types (ggml layouts) pack the
 * innermost dimension in blocks; for them only whole rows are addressable
 * (nb[ndim-1] is the block size in bytes divided by elements per block and
 * is not used), and a row must be a whole number of blocks.
 *
 * A tensor descriptor never owns its data: data belongs to a mapped file,
 * an arena (see arena.h) or the model that created it. `be` says which
 * backend's memory holds the data (host memory for the cpu and ref
 * backends, device memory for CUDA). */
#ifndef CBX_TENSOR_H
#define CBX_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Type ids equal ggml's (ggml.h enum ggml_type) so GGUF files interoperate.
 * TYPE_U8 and TYPE_BOOL have no ggml id; they only occur in safetensors
 * files and are never written to GGUF. */
enum dtype {
    TYPE_F32 = 0,
    TYPE_F16 = 1,
    TYPE_Q4_0 = 2,
    TYPE_Q4_1 = 3,
    TYPE_Q5_0 = 6,
    TYPE_Q5_1 = 7,
    TYPE_Q8_0 = 8,
    TYPE_Q8_1 = 9, /* activation format for quantised dot products */
    TYPE_I8 = 24,
    TYPE_I16 = 25,
    TYPE_I32 = 26,
    TYPE_I64 = 27,
    TYPE_F64 = 28,
    TYPE_BF16 = 30,
    TYPE_U8 = 200,
    TYPE_BOOL = 201,
};

#define QK 32 /* elements per block of every block type here */

struct dtype_traits {
    const char *name;   /* "f32", "q4_0", ... (ggml spelling) */
    int blck;           /* elements per block (1 for plain types) */
    size_t size;        /* bytes per block */
    bool quantized;     /* a ggml block type */
};

/* Traits of t, or NULL when t is not a known type id. */
const struct dtype_traits *dtype_traits(int t);
const char *dtype_name(enum dtype t);
/* Bytes of a row of n elements; 0 when n is not a multiple of the block. */
size_t dtype_row_size(enum dtype t, int64_t n);
/* Type from its ggml spelling ("q8_0"), or -1. */
int dtype_from_name(const char *name);

#define TENSOR_MAX_DIMS 4

struct backend;

struct tensor {
    enum dtype type;
    int ndim;                    /* 0 (scalar) .. TENSOR_MAX_DIMS */
    int64_t ne[TENSOR_MAX_DIMS]; /* shape, outermost first */
    int64_t nb[TENSOR_MAX_DIMS]; /* stride in bytes of each dimension */
    void *data;                  /* borrowed; see header comment */
    const struct backend *be;    /* memory that holds data (NULL = host) */
    const char *name;            /* upstream name or NULL; borrowed */
    void *extra;                 /* backend-private layout of a placed weight
                                  * (core/weights.h: set by the backend's
                                  * prepare_weight hook, released through
                                  * it); NULL for plain tensors. Only the
                                  * backend that set it may read it. */
};

/* A contiguous descriptor over data (which is borrowed). */
struct tensor tensor_make(enum dtype t, int ndim, const int64_t *ne,
                          void *data, const struct backend *be);
/* Recompute nb[] as the contiguous row-major strides of ne[]. */
void tensor_set_contiguous(struct tensor *t);
int64_t tensor_nelements(const struct tensor *t);
/* Rows = product of all but the innermost dimension (1 for ndim <= 1). */
int64_t tensor_nrows(const struct tensor *t);
/* Byte offset of row r (all dims but the innermost, row-major) of t. */
int64_t tensor_row_offset(const struct tensor *t, int64_t r);
/* Bytes of the contiguous layout of t's shape. */
size_t tensor_nbytes(const struct tensor *t);
bool tensor_is_contiguous(const struct tensor *t);
bool tensor_same_shape(const struct tensor *a, const struct tensor *b);
/* Shape as "[2, 3, 4]" into buf (for messages); returns buf. */
const char *tensor_shape_str(const struct tensor *t, char *buf, size_t n);

/* IEEE half and bfloat16 conversions (round to nearest even). */
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

#endif
