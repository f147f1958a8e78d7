/* torch_pt_write.c - the torch.save writer (tools/lib/torch_pt_write.h):
 * a pickle of protocol 2 over tensor dicts and a STORED zip written by
 * hand. Used by the tools (synthetic checkpoints) and tests; the library
 * only reads .pt files (src/io/torch_pt.c). */
#include "torch_pt_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/atomic_file.h"
#include "io/torch_pt_int.h"

#define CHUNK ((size_t)4 << 20)

struct buf { uint8_t *p; size_t n, cap; bool oom; };

static void put(struct buf *b, const void *d, size_t n)
{
    if (b->oom) return;
    if (!pt_grow((void **)&b->p, &b->cap, b->n + n, 1)) { b->oom = true; return; }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void put1(struct buf *b, uint8_t c) { put(b, &c, 1); }

static void put_le(struct buf *b, uint64_t v, int k)
{
    uint8_t t[8];
    for (int i = 0; i < k; i++) t[i] = (uint8_t)(v >> (8 * i));
    put(b, t, (size_t)k);
}

struct wtensor { const struct pt_value *v; char *name; };

struct wr {
    struct buf pk;                /* the pickle */
    uint32_t memo_next;
    int64_t memo_global[4 + PT_N_STORAGE_CLASSES];
    struct wtensor *ts;
    size_t nts, tcap;
    struct pt_namebuf nb;
    char *err;
    const char *path;
};

static void p_int(struct buf *b, int64_t v)
{
    if (v >= 0 && v < 256) { put1(b, 'K'); put1(b, (uint8_t)v); }
    else if (v >= 0 && v < 65536) { put1(b, 'M'); put_le(b, (uint64_t)v, 2); }
    else if (v >= INT32_MIN && v <= INT32_MAX) { put1(b, 'J'); put_le(b, (uint64_t)v, 4); }
    else {
        /* LONG1: shortest little-endian two's complement */
        int n = 8;
        while (n > 1) {
            int64_t hi = v >> (8 * (n - 1) - 1); /* the top byte plus the sign bit below it */
            if (hi != 0 && hi != -1) break;
            n--;
        }
        put1(b, 0x8a);
        put1(b, (uint8_t)n);
        put_le(b, (uint64_t)v, n);
    }
}

static void p_str(struct buf *b, const char *s, size_t n)
{
    put1(b, 'X');
    put_le(b, n, 4);
    put(b, s, n);
}

/* A GLOBAL, memoised after its first use as torch's pickler does. */
static void p_global(struct wr *w, int slot, const char *mod, const char *name)
{
    if (w->memo_global[slot] >= 0) {
        int64_t m = w->memo_global[slot];
        if (m < 256) { put1(&w->pk, 'h'); put1(&w->pk, (uint8_t)m); }
        else { put1(&w->pk, 'j'); put_le(&w->pk, (uint64_t)m, 4); }
        return;
    }
    put1(&w->pk, 'c');
    put(&w->pk, mod, strlen(mod));
    put1(&w->pk, '\n');
    put(&w->pk, name, strlen(name));
    put1(&w->pk, '\n');
    uint32_t m = w->memo_next++;
    if (m < 256) { put1(&w->pk, 'q'); put1(&w->pk, (uint8_t)m); }
    else { put1(&w->pk, 'r'); put_le(&w->pk, m, 4); }
    w->memo_global[slot] = m;
}

static void p_tuple_ints(struct buf *b, const int64_t *v, int n)
{
    if (n == 0) { put1(b, ')'); return; }
    if (n > 3) put1(b, '(');
    for (int i = 0; i < n; i++) p_int(b, v[i]);
    put1(b, n == 1 ? 0x85 : n == 2 ? 0x86 : n == 3 ? 0x87 : 't');
}

static void p_ordereddict(struct wr *w)
{
    p_global(w, 0, "collections", "OrderedDict");
    put1(&w->pk, ')');
    put1(&w->pk, 'R');
}

static cbx_status emit(struct wr *w, const struct pt_value *v, int depth)
{
    struct buf *b = &w->pk;
    if (depth > PT_DEPTH_MAX) return err_setf(w->err, CBX_ERR_INVALID_ARG, "%s: value tree deeper than %d", w->path, PT_DEPTH_MAX);
    switch (v->kind) {
    case PT_NONE: put1(b, 'N'); break;
    case PT_BOOL: put1(b, v->u.b ? 0x88 : 0x89); break;
    case PT_INT: p_int(b, v->u.i); break;
    case PT_FLOAT: {
        uint64_t u;
        memcpy(&u, &v->u.f, 8);
        put1(b, 'G');
        for (int i = 7; i >= 0; i--) put1(b, (uint8_t)(u >> (8 * i)));
        break;
    }
    case PT_STR:
        if (v->u.str.len > 0xffffffffu) return err_setf(w->err, CBX_ERR_INVALID_ARG, "%s: string too long", w->path);
        p_str(b, v->u.str.s, v->u.str.len);
        break;
    case PT_TUPLE: case PT_LIST: {
        size_t n = v->u.seq.n;
        if (v->kind == PT_LIST) { put1(b, ']'); if (n) put1(b, '('); }
        else if (n == 0) { put1(b, ')'); break; }
        else if (n > 3) put1(b, '(');
        for (size_t i = 0; i < n; i++) {
            char idx[24];
            size_t saved;
            snprintf(idx, sizeof idx, "%zu", i);
            if (!pt_name_push(&w->nb, idx, &saved)) return err_setf(w->err, CBX_ERR_NOMEM, "%s: out of memory", w->path);
            cbx_status rc = emit(w, v->u.seq.v[i], depth + 1);
            w->nb.len = saved;
            w->nb.s[saved] = 0;
            if (rc) return rc;
        }
        if (v->kind == PT_LIST) { if (n) put1(b, 'e'); }
        else put1(b, n == 1 ? 0x85 : n == 2 ? 0x86 : n == 3 ? 0x87 : 't');
        break;
    }
    case PT_DICT: {
        if (v->u.dict.ordered) p_ordereddict(w);
        else put1(b, '}');
        for (size_t i = 0; i < v->u.dict.n; i++) {
            if (i % 1000 == 0) put1(b, '('); /* SETITEMS batches as pickle.py writes them */
            const char *k = v->u.dict.k[i];
            p_str(b, k, strlen(k));
            size_t saved;
            if (!pt_name_push(&w->nb, k, &saved)) return err_setf(w->err, CBX_ERR_NOMEM, "%s: out of memory", w->path);
            cbx_status rc = emit(w, v->u.dict.v[i], depth + 1);
            w->nb.len = saved;
            w->nb.s[saved] = 0;
            if (rc) return rc;
            if (i % 1000 == 999 || i + 1 == v->u.dict.n) put1(b, 'u');
        }
        break;
    }
    case PT_TENSOR: {
        const struct pt_tensor *t = &v->u.t;
        const char *cls = pt_storage_class_name(t->type);
        size_t nb = pt_shape_bytes(t->type, t->ndim, t->ne);
        if (!cls || nb == SIZE_MAX || nb != t->nbytes)
            return err_setf(w->err, CBX_ERR_INVALID_ARG, "%s: tensor '%s' has type %s or a shape "
                            "that cannot be written", w->path, w->nb.s ? w->nb.s : "",
                            dtype_name(t->type));
        if (!pt_grow((void **)&w->ts, &w->tcap, w->nts + 1, sizeof *w->ts))
            return err_setf(w->err, CBX_ERR_NOMEM, "%s: out of memory", w->path);
        char *name = strdup(w->nb.s ? w->nb.s : "");
        if (!name) return err_setf(w->err, CBX_ERR_NOMEM, "%s: out of memory", w->path);
        w->ts[w->nts] = (struct wtensor){v, name};
        char key[24];
        snprintf(key, sizeof key, "%zu", w->nts++);
        int64_t numel = (int64_t)(t->nbytes / pt_elsize(t->type)), st[TENSOR_MAX_DIMS], s = 1;
        for (int i = t->ndim - 1; i >= 0; i--) { st[i] = s; s *= t->ne[i]; }
        int slot = 3 + pt_storage_class_index(t->type);
        p_global(w, 1, "torch._utils", "_rebuild_tensor_v2");
        put1(b, '(');
        put1(b, '(');
        p_str(b, "storage", 7);
        p_global(w, slot, "torch", cls);
        p_str(b, key, strlen(key));
        p_str(b, "cpu", 3);
        p_int(b, numel);
        put1(b, 't');
        put1(b, 'Q');
        p_int(b, 0);
        p_tuple_ints(b, t->ne, t->ndim);
        p_tuple_ints(b, st, t->ndim);
        put1(b, 0x89);
        p_ordereddict(w);
        put1(b, 't');
        put1(b, 'R');
        break;
    }
    default:
        return err_setf(w->err, CBX_ERR_INVALID_ARG, "%s: value of kind %d cannot be written", w->path, (int)v->kind);
    }
    return CBX_OK;
}

/* zip output with CRC-32 (IEEE, reflected 0xEDB88320) */
struct zentry { char *name; uint32_t crc; uint64_t size, off; };

struct zw {
    FILE *f;
    uint64_t pos;
    struct zentry *e;
    size_t n, cap;
    uint32_t crctab[256];
    bool ioerr;
};

static void z_write(struct zw *z, const void *d, size_t n)
{
    if (n && fwrite(d, 1, n, z->f) != n) z->ioerr = true;
    z->pos += n;
}

static void z_le(struct zw *z, uint64_t v, int k)
{
    uint8_t t[8];
    for (int i = 0; i < k; i++) t[i] = (uint8_t)(v >> (8 * i));
    z_write(z, t, (size_t)k);
}

static uint32_t crc_update(const struct zw *z, uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = z->crctab[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#define ZIP32_MAX 0xfffffffeu

/* Local header; the data that follows starts on a 64-byte boundary
 * (an "FB" extra field pads, as torch's writer does). */
static bool z_begin(struct zw *z, const char *name, uint64_t size)
{
    if (!pt_grow((void **)&z->e, &z->cap, z->n + 1, sizeof *z->e)) return false;
    char *nm = strdup(name);
    if (!nm) return false;
    size_t nl = strlen(name);
    z->e[z->n++] = (struct zentry){nm, 0, size, z->pos};
    size_t pad = (size_t)((64 - (z->pos + 30 + nl + 4) % 64) % 64);
    z_le(z, 0x04034b50, 4);
    z_le(z, 20, 2);          /* version needed */
    z_le(z, 0, 2);           /* flags */
    z_le(z, 0, 2);           /* stored */
    z_le(z, 0, 2);           /* time */
    z_le(z, 0x21, 2);        /* date 1980-01-01 */
    z_le(z, 0, 4);           /* crc, patched by z_end */
    z_le(z, size, 4);
    z_le(z, size, 4);
    z_le(z, nl, 2);
    z_le(z, 4 + pad, 2);
    z_write(z, name, nl);
    z_write(z, "FB", 2);
    z_le(z, pad, 2);
    static const uint8_t zeros[64];
    z_write(z, zeros, pad);
    return true;
}

static void z_end(struct zw *z, uint32_t crc)
{
    struct zentry *e = &z->e[z->n - 1];
    e->crc = crc;
    uint8_t t[4] = {(uint8_t)crc, (uint8_t)(crc >> 8), (uint8_t)(crc >> 16), (uint8_t)(crc >> 24)};
    if (fseeko(z->f, (off_t)(e->off + 14), SEEK_SET) != 0 || fwrite(t, 1, 4, z->f) != 4 ||
        fseeko(z->f, (off_t)z->pos, SEEK_SET) != 0)
        z->ioerr = true;
}

static void z_finish(struct zw *z)
{
    uint64_t cd = z->pos;
    for (size_t i = 0; i < z->n; i++) {
        const struct zentry *e = &z->e[i];
        size_t nl = strlen(e->name);
        z_le(z, 0x02014b50, 4);
        z_le(z, 20, 2);   /* made by */
        z_le(z, 20, 2);   /* needed */
        z_le(z, 0, 2);
        z_le(z, 0, 2);
        z_le(z, 0, 2);
        z_le(z, 0x21, 2);
        z_le(z, e->crc, 4);
        z_le(z, e->size, 4);
        z_le(z, e->size, 4);
        z_le(z, nl, 2);
        z_le(z, 0, 2);    /* extra */
        z_le(z, 0, 2);    /* comment */
        z_le(z, 0, 2);    /* disk */
        z_le(z, 0, 2);    /* internal attributes */
        z_le(z, 0, 4);    /* external attributes */
        z_le(z, e->off, 4);
        z_write(z, e->name, nl);
    }
    uint64_t cdn = z->pos - cd;
    z_le(z, 0x06054b50, 4);
    z_le(z, 0, 2);
    z_le(z, 0, 2);
    z_le(z, z->n, 2);
    z_le(z, z->n, 2);
    z_le(z, cdn, 4);
    z_le(z, cd, 4);
    z_le(z, 0, 2);
}

static cbx_status z_small(struct zw *z, const char *name, const void *d, size_t n)
{
    if (!z_begin(z, name, n)) return CBX_ERR_NOMEM;
    z_write(z, d, n);
    z_end(z, crc_update(z, 0, d, n));
    return CBX_OK;
}

cbx_status io_pt_write_stream(const char *path, const struct pt_value *root, pt_fill_fn fill,
                              void *user, char *err)
{
    if (!path || !root) return err_setf(err, CBX_ERR_INVALID_ARG, "io_pt_write: path or root is NULL");
    struct wr w = {.err = err, .path = path};
    struct zw z = {0};
    struct atomic_file out = {0};
    uint8_t *chunk = NULL;
    cbx_status rc = CBX_OK;
    for (size_t i = 0; i < sizeof w.memo_global / sizeof *w.memo_global; i++) w.memo_global[i] = -1;
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        z.crctab[i] = c;
    }

    put1(&w.pk, 0x80);
    put1(&w.pk, 2);
    if ((rc = emit(&w, root, 0))) goto cleanup;
    put1(&w.pk, '.');
    if (w.pk.oom) { rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", path); goto cleanup; }

    /* size check before touching the disk: classic zip has 32-bit offsets */
    uint64_t total = w.pk.n + 4096;
    for (size_t i = 0; i < w.nts; i++) total += w.ts[i].v->u.t.nbytes + 128 + strlen("archive/data/") + 24;
    if (total > ZIP32_MAX || w.nts + 4 > 0xffff) {
        rc = err_setf(err, CBX_ERR_UNSUPPORTED, "%s: %llu bytes in %zu tensors needs zip64, which "
                      "this writer does not produce (limit 4 GiB, 65531 tensors)", path,
                      (unsigned long long)total, w.nts);
        goto cleanup;
    }
    for (size_t i = 0; i < w.nts; i++)
        if (!w.ts[i].v->u.t.data && w.ts[i].v->u.t.nbytes && !fill) {
            rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: tensor '%s' has no data and no fill callback",
                          path, w.ts[i].name);
            goto cleanup;
        }

    if ((rc = atomic_file_open(&out, path, err)) != CBX_OK) goto cleanup;
    z.f = out.f;

    if ((rc = z_small(&z, "archive/data.pkl", w.pk.p, w.pk.n))) goto nomem;
    if ((rc = z_small(&z, "archive/byteorder", "little", 6))) goto nomem;
    for (size_t i = 0; i < w.nts && !z.ioerr; i++) {
        const struct pt_tensor *t = &w.ts[i].v->u.t;
        char name[48];
        snprintf(name, sizeof name, "archive/data/%zu", i);
        if (!z_begin(&z, name, t->nbytes)) goto nomem;
        uint32_t crc = 0;
        if (t->data || !t->nbytes) {
            z_write(&z, t->data, t->nbytes);
            crc = crc_update(&z, 0, t->data, t->nbytes);
        } else {
            size_t es = pt_elsize(t->type), step = CHUNK / es * es;
            if (!chunk && !(chunk = malloc(CHUNK))) goto nomem;
            for (uint64_t off = 0; off < t->nbytes && !z.ioerr; off += step) {
                size_t n = t->nbytes - off < step ? (size_t)(t->nbytes - off) : step;
                rc = fill(user, i, w.ts[i].name, t, off, chunk, n, err);
                if (rc) goto cleanup;
                z_write(&z, chunk, n);
                crc = crc_update(&z, crc, chunk, n);
            }
        }
        z_end(&z, crc);
    }
    if ((rc = z_small(&z, "archive/version", "3\n", 2))) goto nomem;
    if ((rc = z_small(&z, "archive/.data/serialization_id", "0000000000000000000000000000000000000000", 40))) goto nomem;
    z_finish(&z);
    if (z.ioerr) {
        rc = err_setf(err, CBX_ERR_IO, "%s: write failed: %s", out.tmp, strerror(errno));
        goto cleanup;
    }
    rc = atomic_file_commit(&out, err);
    goto cleanup;
nomem:
    rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", path);
cleanup:
    atomic_file_abort(&out);
    free(chunk);
    for (size_t i = 0; i < z.n; i++) free(z.e[i].name);
    free(z.e);
    for (size_t i = 0; i < w.nts; i++) free(w.ts[i].name);
    free(w.ts);
    free(w.nb.s);
    free(w.pk.p);
    return rc;
}

cbx_status io_pt_write(const char *path, const struct pt_value *root, char *err)
{
    return io_pt_write_stream(path, root, NULL, NULL, err);
}
