/* tensor.c - dtype traits, tensor descriptors, half/bfloat16 conversion. */
#include "tensor.h"

#include <stdio.h>
#include <string.h>

#include "scalar.h"

static const struct dtype_traits traits_f32 = {"f32", 1, 4, false};
static const struct dtype_traits traits_f16 = {"f16", 1, 2, false};
static const struct dtype_traits traits_bf16 = {"bf16", 1, 2, false};
static const struct dtype_traits traits_f64 = {"f64", 1, 8, false};
static const struct dtype_traits traits_i8 = {"i8", 1, 1, false};
static const struct dtype_traits traits_i16 = {"i16", 1, 2, false};
static const struct dtype_traits traits_i32 = {"i32", 1, 4, false};
static const struct dtype_traits traits_i64 = {"i64", 1, 8, false};
static const struct dtype_traits traits_u8 = {"u8", 1, 1, false};
static const struct dtype_traits traits_bool = {"bool", 1, 1, false};
/* ggml block layouts: d (and m) as fp16, then packed quants. */
static const struct dtype_traits traits_q4_0 = {"q4_0", QK, 2 + QK / 2, true};
static const struct dtype_traits traits_q4_1 = {"q4_1", QK, 4 + QK / 2, true};
static const struct dtype_traits traits_q5_0 = {"q5_0", QK, 2 + 4 + QK / 2, true};
static const struct dtype_traits traits_q5_1 = {"q5_1", QK, 4 + 4 + QK / 2, true};
static const struct dtype_traits traits_q8_0 = {"q8_0", QK, 2 + QK, true};
static const struct dtype_traits traits_q8_1 = {"q8_1", QK, 4 + QK, true};

const struct dtype_traits *dtype_traits(int t)
{
    switch (t) {
    case TYPE_F32: return &traits_f32;
    case TYPE_F16: return &traits_f16;
    case TYPE_BF16: return &traits_bf16;
    case TYPE_F64: return &traits_f64;
    case TYPE_I8: return &traits_i8;
    case TYPE_I16: return &traits_i16;
    case TYPE_I32: return &traits_i32;
    case TYPE_I64: return &traits_i64;
    case TYPE_U8: return &traits_u8;
    case TYPE_BOOL: return &traits_bool;
    case TYPE_Q4_0: return &traits_q4_0;
    case TYPE_Q4_1: return &traits_q4_1;
    case TYPE_Q5_0: return &traits_q5_0;
    case TYPE_Q5_1: return &traits_q5_1;
    case TYPE_Q8_0: return &traits_q8_0;
    case TYPE_Q8_1: return &traits_q8_1;
    }
    return NULL;
}

const char *dtype_name(enum dtype t)
{
    const struct dtype_traits *tr = dtype_traits(t);
    return tr ? tr->name : "?";
}

int dtype_from_name(const char *name)
{
    static const enum dtype all[] = {
        TYPE_F32, TYPE_F16, TYPE_BF16, TYPE_F64, TYPE_I8, TYPE_I16,
        TYPE_I32, TYPE_I64, TYPE_U8, TYPE_BOOL, TYPE_Q4_0, TYPE_Q4_1,
        TYPE_Q5_0, TYPE_Q5_1, TYPE_Q8_0, TYPE_Q8_1};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(dtype_traits(all[i])->name, name) == 0) return (int)all[i];
    return -1;
}

size_t dtype_row_size(enum dtype t, int64_t n)
{
    const struct dtype_traits *tr = dtype_traits(t);
    if (!tr || n < 0 || n % tr->blck) return 0;
    return (size_t)(n / tr->blck) * tr->size;
}

void tensor_set_contiguous(struct tensor *t)
{
    if (t->ndim == 0) return;
    const struct dtype_traits *tr = dtype_traits(t->type);
    int last = t->ndim - 1;
    t->nb[last] = (int64_t)(tr->size / (size_t)tr->blck);
    int64_t stride = (int64_t)dtype_row_size(t->type, t->ne[last]);
    for (int d = last - 1; d >= 0; d--) {
        t->nb[d] = stride;
        stride *= t->ne[d];
    }
}

struct tensor tensor_make(enum dtype type, int ndim, const int64_t *ne,
                          void *data, const struct backend *be)
{
    struct tensor t;
    memset(&t, 0, sizeof t);
    t.type = type;
    t.ndim = ndim;
    for (int d = 0; d < ndim; d++) t.ne[d] = ne[d];
    t.data = data;
    t.be = be;
    tensor_set_contiguous(&t);
    return t;
}

int64_t tensor_nelements(const struct tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->ne[d];
    return n;
}

int64_t tensor_nrows(const struct tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d + 1 < t->ndim; d++) n *= t->ne[d];
    return n;
}

int64_t tensor_row_offset(const struct tensor *t, int64_t r)
{
    int64_t off = 0;
    for (int d = t->ndim - 2; d >= 0; d--) {
        off += (r % t->ne[d]) * t->nb[d];
        r /= t->ne[d];
    }
    return off;
}

size_t tensor_nbytes(const struct tensor *t)
{
    if (t->ndim == 0) return dtype_traits(t->type)->size;
    return (size_t)tensor_nrows(t) * dtype_row_size(t->type, t->ne[t->ndim - 1]);
}

bool tensor_is_contiguous(const struct tensor *t)
{
    if (t->ndim == 0) return true;
    struct tensor c = *t;
    tensor_set_contiguous(&c);
    for (int d = 0; d < t->ndim; d++)
        if (t->ne[d] > 1 && t->nb[d] != c.nb[d]) return false;
    return true;
}

bool tensor_same_shape(const struct tensor *a, const struct tensor *b)
{
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->ne[d] != b->ne[d]) return false;
    return true;
}

const char *tensor_shape_str(const struct tensor *t, char *buf, size_t n)
{
    size_t off = 0;
    off += (size_t)snprintf(buf + off, n - off, "[");
    for (int d = 0; d < t->ndim && off < n; d++)
        off += (size_t)snprintf(buf + off, n - off, d ? ", %lld" : "%lld",
                                (long long)t->ne[d]);
    if (off < n) snprintf(buf + off, n - off, "]");
    return buf;
}

/* Half precision and bfloat16, bit-exact round to nearest even (as
 * numpy/torch): core/scalar.h, shared with the CUDA kernels. */
float fp16_to_f32(uint16_t h) { return scalar_fp16_to_f32(h); }
uint16_t f32_to_fp16(float f) { return scalar_f32_to_fp16(f); }
float bf16_to_f32(uint16_t h) { return scalar_bf16_to_f32(h); }
uint16_t f32_to_bf16(float f) { return scalar_f32_to_bf16(f); }
