/* fuzz_safetensors.c - the safetensors header parser on arbitrary bytes.
 * Any input must be refused with CBX_ERR_FORMAT (or accepted) without a
 * crash; an accepted one must describe tensors whose bytes all lie inside
 * the input (or an aligned copy) and are aligned for their type: every
 * byte is read so the sanitizers see any overrun. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct io_safetensors *st = NULL;
    char err[ERR_MAX];
    cbx_status rc = io_safetensors_open_memory(data, size, &st, err);
    if (rc != CBX_OK) {
        if (rc != CBX_ERR_FORMAT && rc != CBX_ERR_NOMEM) abort();
        if (st || !err[0]) abort();
        return 0;
    }
    volatile uint8_t sink = 0;
    uint64_t total = 0;
    for (int i = 0; i < io_safetensors_count(st); i++) {
        const struct tensor *t = io_safetensors_tensor(st, i);
        size_t nb = tensor_nbytes(t);
        if (tensor_nelements(t) == 0) nb = 0;
        if (nb && (uintptr_t)t->data % dtype_traits(t->type)->size) abort();
        const uint8_t *p = t->data;
        for (size_t k = 0; k < nb; k++) sink ^= p[k];
        if (io_safetensors_find(st, t->name) != t) abort();
        total += nb;
    }
    if (total > io_safetensors_data_size(st)) abort(); /* no overlap => fits */
    for (int i = 0; i < io_safetensors_metadata_count(st); i++) {
        const char *k, *v;
        if (!io_safetensors_metadata_at(st, i, &k, &v)) abort();
        if (io_safetensors_metadata(st, k) == NULL) abort();
        sink ^= (uint8_t)strlen(v);
    }
    (void)sink;
    io_safetensors_close(st);
    return 0;
}
