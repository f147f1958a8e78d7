/* fuzz_gguf.c - the GGUF parser on arbitrary bytes. Any input must be
 * refused with CBX_ERR_FORMAT (or accepted) without a crash; an accepted
 * one must have tensors inside the input, aligned, and metadata whose
 * every string and array element can be walked (the sanitizers see any
 * overrun). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"

static volatile uint8_t sink;

static void walk(const struct io_gguf_value *v, int depth)
{
    if (depth > IO_GGUF_MAX_DEPTH) abort();
    if (v->type == GGUF_TYPE_STRING) {
        if (v->v.str.s[v->v.str.len] != 0) abort();
        for (uint64_t i = 0; i < v->v.str.len; i++) sink ^= (uint8_t)v->v.str.s[i];
    } else if (v->type == GGUF_TYPE_ARRAY) {
        const struct io_gguf_value *a = v->v.arr.data;
        const struct io_gguf_str *s = v->v.arr.data;
        const uint8_t *b = v->v.arr.data;
        for (uint64_t i = 0; i < v->v.arr.n; i++) {
            if (v->v.arr.type == GGUF_TYPE_ARRAY) walk(&a[i], depth + 1);
            else if (v->v.arr.type == GGUF_TYPE_STRING) sink ^= (uint8_t)s[i].s[s[i].len];
            else sink ^= b[i];
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct io_gguf *g = NULL;
    char err[ERR_MAX];
    cbx_status rc = io_gguf_open_memory(data, size, &g, err);
    if (rc != CBX_OK) {
        if (rc != CBX_ERR_FORMAT && rc != CBX_ERR_NOMEM) abort();
        if (g || !err[0]) abort();
        return 0;
    }
    for (int i = 0; i < io_gguf_n_kv(g); i++) {
        if (io_gguf_find_kv(g, io_gguf_kv_key(g, i)) != i) abort();
        walk(io_gguf_kv_value(g, i), 0);
    }
    for (int i = 0; i < io_gguf_n_tensors(g); i++) {
        const struct tensor *t = io_gguf_tensor(g, i);
        size_t nb = tensor_nelements(t) ? tensor_nbytes(t) : 0;
        const uint8_t *p = t->data;
        if (io_gguf_find_tensor(g, t->name) != t) abort();
        if (nb && (uintptr_t)p % (dtype_traits(t->type)->quantized ? 2 : dtype_traits(t->type)->size)) abort();
        for (size_t k = 0; k < nb; k++) sink ^= p[k];
    }
    io_gguf_close(g);
    return 0;
}
