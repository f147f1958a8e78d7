/* npy.h - NumPy .npy files (format versions 1.0-3.0), C order,
 * little-endian f2/f4/f8/i4/i8/u1/b1; used for conditioning tensors
 * (--voice DIR) and test fixtures.
 * Thread safety: independent calls may run concurrently. */
#ifndef CBX_IO_NPY_H
#define CBX_IO_NPY_H

#include "core/error.h"
#include "core/tensor.h"

struct npy {
    enum dtype type;
    int ndim;
    int64_t ne[TENSOR_MAX_DIMS];
    void *data;      /* owned; free with npy_free */
    size_t nbytes;
};

cbx_status io_npy_read(const char *path, struct npy *out, char *err);
/* Parse from memory (used by the reader and the fuzz target). */
cbx_status io_npy_parse(const void *buf, size_t n, struct npy *out, char *err);
/* Read and convert to float32 (from f2/f4/f8/i4/i8). */
cbx_status io_npy_read_f32(const char *path, struct npy *out, char *err);
cbx_status io_npy_write(const char *path, enum dtype type, int ndim,
                        const int64_t *ne, const void *data, char *err);
void io_npy_free(struct npy *n);
/* A descriptor over the npy's data (borrowed from n). */
struct tensor io_npy_tensor(const struct npy *n);

#endif
