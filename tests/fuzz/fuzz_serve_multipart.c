/* fuzz_serve_multipart.c - the multipart/form-data parser of POST
 * /v1/audio/voices (tools/serve/multipart.c) on arbitrary bytes: the first
 * line of the input is the Content-Type header, the rest the body. It
 * must either fail with a NUL-terminated message, or return parts whose
 * names are NUL-terminated and non-empty and whose data lie inside the
 * body, in order, without overlap. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/multipart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    const size_t hl = nl ? (size_t)(nl - data) : size;
    char *ct = malloc(hl + 1);
    if (!ct) return 0;
    memcpy(ct, data, hl);
    ct[hl] = 0;
    const uint8_t *body = nl ? nl + 1 : data + size;
    const size_t n = (size_t)(data + size - body);
    char boundary[80], err[256];
    err[0] = 0;
    if (multipart_boundary(ct, boundary, sizeof boundary, err, sizeof err)) {
        if (!memchr(err, 0, sizeof err) || !err[0]) __builtin_trap();
        free(ct);
        return 0;
    }
    if (!boundary[0] || strlen(boundary) > 70) __builtin_trap();
    free(ct);
    /* a copy of exactly n bytes, so reads past the body are caught */
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return 0;
    memcpy(b, body, n);
    struct mp_part parts[MULTIPART_MAX_PARTS];
    int np = -1;
    if (multipart_parse(b, n, boundary, parts, &np, err, sizeof err)) {
        if (!memchr(err, 0, sizeof err) || !err[0]) __builtin_trap();
        free(b);
        return 0;
    }
    if (np < 1 || np > MULTIPART_MAX_PARTS) __builtin_trap();
    const uint8_t *prev_end = b;
    for (int i = 0; i < np; i++) {
        const struct mp_part *p = &parts[i];
        if (!memchr(p->name, 0, sizeof p->name) || !p->name[0] || !memchr(p->filename, 0, sizeof p->filename) ||
            !memchr(p->ctype, 0, sizeof p->ctype))
            __builtin_trap();
        if (p->data < prev_end || p->data > b + n || p->len > (size_t)(b + n - p->data)) __builtin_trap();
        prev_end = p->data + p->len;
        if (multipart_find(parts, np, p->name) == NULL) __builtin_trap();
    }
    free(b);
    return 0;
}
