/* npy.c - NumPy .npy reader/writer (NEP 1 format, versions 1-3).
 * Limits: little-endian or byte-order-free dtypes only, C order, at most
 * TENSOR_MAX_DIMS dimensions, header below 64 KiB. */
#include "npy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *skip_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n')) p++;
    return p;
}

/* Find the value text after 'key': in the header dict. */
static const char *find_key(const char *h, const char *e, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = h; p + kl + 2 < e; p++)
        if (*p == '\'' && memcmp(p + 1, key, kl) == 0 && p[kl + 1] == '\'') {
            const char *q = skip_ws(p + kl + 2, e);
            if (q < e && *q == ':') return skip_ws(q + 1, e);
            return NULL;
        }
    return NULL;
}

cbx_status io_npy_parse(const void *buf, size_t n, struct npy *out, char *err)
{
    const unsigned char *b = buf;
    memset(out, 0, sizeof *out);
    if (n < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return err_setf(err, CBX_ERR_FORMAT, "npy: missing magic \\x93NUMPY");
    int major = b[6];
    size_t hl, off;
    if (major == 1) {
        hl = (size_t)b[8] | ((size_t)b[9] << 8);
        off = 10;
    } else if (major == 2 || major == 3) {
        if (n < 12) return err_setf(err, CBX_ERR_FORMAT, "npy: truncated header");
        hl = (size_t)b[8] | ((size_t)b[9] << 8) | ((size_t)b[10] << 16) | ((size_t)b[11] << 24);
        off = 12;
    } else {
        return err_setf(err, CBX_ERR_FORMAT, "npy: unsupported format version %d", major);
    }
    if (hl > 65536 || off + hl > n)
        return err_setf(err, CBX_ERR_FORMAT, "npy: header length %zu out of range", hl);
    const char *h = (const char *)b + off, *e = h + hl;

    const char *d = find_key(h, e, "descr");
    if (!d || d >= e || *d != '\'') return err_setf(err, CBX_ERR_FORMAT, "npy: no 'descr'");
    d++;
    const char *dend = memchr(d, '\'', (size_t)(e - d));
    if (!dend) return err_setf(err, CBX_ERR_FORMAT, "npy: bad 'descr'");
    size_t dl = (size_t)(dend - d);
    static const struct { const char *s; enum dtype t; } types[] = {
        {"<f4", TYPE_F32}, {"<f2", TYPE_F16}, {"<f8", TYPE_F64}, {"<i4", TYPE_I32},
        {"<i8", TYPE_I64}, {"<i2", TYPE_I16}, {"|i1", TYPE_I8}, {"|u1", TYPE_U8},
        {"|b1", TYPE_BOOL}};
    int found = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (dl == 3 && memcmp(d, types[i].s, 3) == 0) { out->type = types[i].t; found = 1; }
    if (!found)
        return err_setf(err, CBX_ERR_FORMAT, "npy: dtype '%.*s' not supported (need <f4, <f2, <f8, <i4, <i8, <i2, |i1, |u1, |b1)",
                        (int)(dl > 16 ? 16 : dl), d);

    const char *fo = find_key(h, e, "fortran_order");
    if (!fo || (size_t)(e - fo) < 4) return err_setf(err, CBX_ERR_FORMAT, "npy: no 'fortran_order'");
    if (memcmp(fo, "True", 4) == 0)
        return err_setf(err, CBX_ERR_FORMAT, "npy: Fortran-order arrays are not supported");
    if ((size_t)(e - fo) < 5 || memcmp(fo, "False", 5) != 0)
        return err_setf(err, CBX_ERR_FORMAT, "npy: bad 'fortran_order'");

    const char *s = find_key(h, e, "shape");
    if (!s || *s != '(') return err_setf(err, CBX_ERR_FORMAT, "npy: no 'shape'");
    s++;
    int64_t count = 1;
    for (;;) {
        s = skip_ws(s, e);
        if (s >= e) return err_setf(err, CBX_ERR_FORMAT, "npy: unterminated shape");
        if (*s == ')') break;
        if (*s < '0' || *s > '9') return err_setf(err, CBX_ERR_FORMAT, "npy: bad shape");
        int64_t v = 0;
        while (s < e && *s >= '0' && *s <= '9') {
            if (v > ((int64_t)1 << 40)) return err_setf(err, CBX_ERR_FORMAT, "npy: dimension too large");
            v = v * 10 + (*s++ - '0');
        }
        if (out->ndim == TENSOR_MAX_DIMS)
            return err_setf(err, CBX_ERR_FORMAT, "npy: more than %d dimensions", TENSOR_MAX_DIMS);
        out->ne[out->ndim++] = v;
        if (v != 0 && count > ((int64_t)1 << 40) / v)
            return err_setf(err, CBX_ERR_FORMAT, "npy: array too large");
        count *= v;
        s = skip_ws(s, e);
        if (s < e && *s == ',') s++;
    }
    size_t esz = dtype_traits(out->type)->size;
    size_t need = (size_t)count * esz;
    if (n - off - hl < need)
        return err_setf(err, CBX_ERR_FORMAT, "npy: data has %zu bytes, shape needs %zu",
                        n - off - hl, need);
    out->nbytes = need;
    out->data = malloc(need ? need : 1);
    if (!out->data) return err_setf(err, CBX_ERR_NOMEM, "npy: out of memory (%zu bytes)", need);
    memcpy(out->data, b + off + hl, need);
    return CBX_OK;
}

cbx_status io_npy_read(const char *path, struct npy *out, char *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return err_setf(err, CBX_ERR_IO, "%s: %s", path, strerror(errno));
    unsigned char *buf = NULL;
    cbx_status rc = CBX_OK;
    long len;
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        rc = err_setf(err, CBX_ERR_IO, "%s: cannot seek", path);
        goto cleanup;
    }
    buf = malloc((size_t)len + 1);
    if (!buf) { rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", path); goto cleanup; }
    if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
        rc = err_setf(err, CBX_ERR_IO, "%s: read failed", path);
        goto cleanup;
    }
    rc = io_npy_parse(buf, (size_t)len, out, err);
    if (rc != CBX_OK && err) {
        char tmp[ERR_MAX];
        snprintf(tmp, sizeof tmp, "%s: %s", path, err);
        memcpy(err, tmp, ERR_MAX);
    }
cleanup:
    free(buf);
    fclose(f);
    return rc;
}

cbx_status io_npy_read_f32(const char *path, struct npy *out, char *err)
{
    cbx_status rc = io_npy_read(path, out, err);
    if (rc != CBX_OK || out->type == TYPE_F32) return rc;
    int64_t n = out->nbytes / dtype_traits(out->type)->size;
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    if (!f) { io_npy_free(out); return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", path); }
    for (int64_t i = 0; i < n; i++) {
        switch (out->type) {
        case TYPE_F16: f[i] = fp16_to_f32(((uint16_t *)out->data)[i]); break;
        case TYPE_F64: f[i] = (float)((double *)out->data)[i]; break;
        case TYPE_I32: f[i] = (float)((int32_t *)out->data)[i]; break;
        case TYPE_I64: f[i] = (float)((int64_t *)out->data)[i]; break;
        default:
            free(f);
            io_npy_free(out);
            return err_setf(err, CBX_ERR_FORMAT, "%s: dtype cannot be read as float32", path);
        }
    }
    free(out->data);
    out->data = f;
    out->type = TYPE_F32;
    out->nbytes = (size_t)n * 4;
    return CBX_OK;
}

cbx_status io_npy_write(const char *path, enum dtype type, int ndim, const int64_t *ne,
                        const void *data, char *err)
{
    const char *descr;
    switch (type) {
    case TYPE_F32: descr = "<f4"; break;
    case TYPE_F16: descr = "<f2"; break;
    case TYPE_F64: descr = "<f8"; break;
    case TYPE_I32: descr = "<i4"; break;
    case TYPE_I64: descr = "<i8"; break;
    default: return err_setf(err, CBX_ERR_INVALID_ARG, "npy: cannot write dtype %s", dtype_name(type));
    }
    char hdr[256];
    int hn = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    int64_t count = 1;
    for (int d = 0; d < ndim; d++) {
        hn += snprintf(hdr + hn, sizeof hdr - (size_t)hn, ndim == 1 ? "%lld," : (d ? ", %lld" : "%lld"),
                       (long long)ne[d]);
        count *= ne[d];
    }
    hn += snprintf(hdr + hn, sizeof hdr - (size_t)hn, "), }");
    int total = 10 + hn + 1;
    int pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) return err_setf(err, CBX_ERR_IO, "%s: %s", path, strerror(errno));
    unsigned short hl = (unsigned short)(hn + pad + 1);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                             (unsigned char)(hl & 0xff), (unsigned char)(hl >> 8)};
    size_t nbytes = (size_t)count * dtype_traits(type)->size;
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)hn, f) == (size_t)hn;
    for (int i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && (nbytes == 0 || fwrite(data, 1, nbytes, f) == nbytes);
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        remove(path);
        return err_setf(err, CBX_ERR_IO, "%s: write failed", path);
    }
    return CBX_OK;
}

void io_npy_free(struct npy *n)
{
    if (!n) return;
    free(n->data);
    n->data = NULL;
}

struct tensor io_npy_tensor(const struct npy *n)
{
    return tensor_make(n->type, n->ndim, n->ne, n->data, NULL);
}
