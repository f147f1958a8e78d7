/* gguf.c - GGUF v3 reader (mmap, zero-copy tensors) and writer.
 * Spec: ggml docs/gguf.md (version 3). Limits and validation rules are
 * listed in gguf.h. The reader copies metadata into its own memory (keys
 * and strings NUL-terminated, arrays host-aligned), so values never point
 * into the mapping; tensor data does. */
#include "gguf.h"

#include <errno.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "atomic_file.h"
#include "container.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c assumes a little-endian host (GGUF and tensor data are little-endian)"
#endif

#define GGUF_MAGIC "GGUF"
#define GGUF_VERSION 3

static const char *const type_names[] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64",
};

const char *io_gguf_type_name(int type)
{
    return type >= 0 && type <= GGUF_TYPE_FLOAT64 ? type_names[type] : "?";
}

/* Bytes of a scalar of a numeric/bool type; 0 for string, array, unknown. */
static size_t scalar_size(int type)
{
    switch (type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    }
    return 0;
}

/* Fewest file bytes one element of type takes (bounds array counts). */
static size_t min_size(int type)
{
    if (type == GGUF_TYPE_STRING) return 8;
    if (type == GGUF_TYPE_ARRAY) return 12;
    return scalar_size(type);
}

/* Tensor types a GGUF file may hold: enum dtype ids that are ggml ids. */
static bool tensor_type_ok(uint32_t t)
{
    return t < 200 && dtype_traits((int)t) != NULL;
}

/* Alignment the data of a tensor of type t needs to be used in place:
 * the element size for plain types, the fp16 scale for block types. */
static size_t type_align(enum dtype t)
{
    const struct dtype_traits *tr = dtype_traits(t);
    return tr->quantized ? 2 : tr->size;
}

/* Bytes of a contiguous tensor (innermost dim a whole number of blocks);
 * false when its strides would not fit in int64. Zero dims are skipped in
 * that bound, since the strides around them still exist. */
static bool shape_nbytes(enum dtype type, int ndim, const int64_t *ne, uint64_t *nbytes)
{
    const struct dtype_traits *tr = dtype_traits(type);
    uint64_t span = tr->size;
    bool empty = false;
    for (int d = ndim - 1; d >= 0; d--) {
        uint64_t n = (uint64_t)(d == ndim - 1 ? ne[d] / tr->blck : ne[d]);
        if (n == 0) empty = true;
        else if (__builtin_mul_overflow(span, n, &span) || span > INT64_MAX) return false;
    }
    *nbytes = empty ? 0 : span;
    return true;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* ---- reader ----------------------------------------------------------- */

struct blk {
    struct blk *next;
    max_align_t data[];
};

struct io_gguf {
    char *path;
    void *map;
    size_t map_len;
    const uint8_t *buf;
    size_t size;
    uint32_t version;
    size_t alignment;
    uint64_t data_off;
    int n_kv;
    char **keys;
    struct io_gguf_value *vals;
    int *kv_slot;
    size_t kv_mask;
    int n_t;
    struct tensor *t;
    uint64_t *t_off;
    int *t_slot;
    size_t t_mask;
    struct blk *mem; /* every allocation above the struct itself */
};

/* Owned by g, freed by io_gguf_close. */
static void *palloc(struct io_gguf *g, size_t n)
{
    if (n > SIZE_MAX - sizeof(struct blk)) return NULL;
    struct blk *b = malloc(sizeof *b + n);
    if (!b) return NULL;
    b->next = g->mem;
    g->mem = b;
    return b->data;
}

void io_gguf_close(struct io_gguf *g)
{
    if (!g) return;
    while (g->mem) {
        struct blk *b = g->mem;
        g->mem = b->next;
        free(b);
    }
    if (g->map) munmap(g->map, g->map_len);
    free(g->path);
    free(g);
}

struct rd {
    struct io_gguf *g;
    size_t pos;
    char *err;
};

static size_t left(const struct rd *r) { return r->g->size - r->pos; }

static cbx_status truncated(struct rd *r, const char *what)
{
    return err_setf(r->err, CBX_ERR_FORMAT, "%s: truncated at byte %zu (of %zu) reading %s", r->g->path, r->pos,
                    r->g->size, what);
}

static cbx_status rd_bytes(struct rd *r, void *dst, size_t n, const char *what)
{
    if (left(r) < n) return truncated(r, what);
    memcpy(dst, r->g->buf + r->pos, n);
    r->pos += n;
    return CBX_OK;
}

static cbx_status rd_u32(struct rd *r, uint32_t *v, const char *what) { return rd_bytes(r, v, 4, what); }
static cbx_status rd_u64(struct rd *r, uint64_t *v, const char *what) { return rd_bytes(r, v, 8, what); }

/* A GGUF string into pool memory, NUL-terminated. */
static cbx_status rd_str(struct rd *r, struct io_gguf_str *s, const char *what)
{
    uint64_t len = 0;
    cbx_status rc = rd_u64(r, &len, what);
    if (rc != CBX_OK) return rc;
    if (len > left(r))
        return err_setf(r->err, CBX_ERR_FORMAT, "%s: %s at byte %zu: length %llu beyond the end of the file (%zu left)",
                        r->g->path, what, r->pos - 8, (unsigned long long)len, left(r));
    char *p = palloc(r->g, (size_t)len + 1);
    if (!p) return err_setf(r->err, CBX_ERR_NOMEM, "%s: out of memory for %s", r->g->path, what);
    memcpy(p, r->g->buf + r->pos, (size_t)len);
    p[len] = 0;
    r->pos += (size_t)len;
    s->s = p;
    s->len = len;
    return CBX_OK;
}

static cbx_status rd_value(struct rd *r, struct io_gguf_value *v, uint32_t type, int depth, const char *key);

static cbx_status rd_array(struct rd *r, struct io_gguf_value *v, int depth, const char *key)
{
    uint32_t et = 0;
    uint64_t n = 0;
    cbx_status rc = rd_u32(r, &et, "array element type");
    if (rc == CBX_OK) rc = rd_u64(r, &n, "array length");
    if (rc != CBX_OK) return rc;
    if (et > GGUF_TYPE_FLOAT64)
        return err_setf(r->err, CBX_ERR_FORMAT, "%s: key '%s': array element type %u unknown (0..12 allowed)",
                        r->g->path, key, et);
    if (et == GGUF_TYPE_ARRAY && depth + 1 >= IO_GGUF_MAX_DEPTH)
        return err_setf(r->err, CBX_ERR_FORMAT, "%s: key '%s': arrays nested deeper than %d", r->g->path, key,
                        IO_GGUF_MAX_DEPTH);
    if (n > left(r) / min_size((int)et))
        return err_setf(r->err, CBX_ERR_FORMAT,
                        "%s: key '%s': array of %llu %s needs more than the %zu bytes left in the file", r->g->path,
                        key, (unsigned long long)n, io_gguf_type_name((int)et), left(r));
    v->v.arr.type = (enum gguf_type)et;
    v->v.arr.n = n;
    size_t es = et == GGUF_TYPE_STRING ? sizeof(struct io_gguf_str)
                : et == GGUF_TYPE_ARRAY ? sizeof(struct io_gguf_value)
                                        : scalar_size((int)et);
    void *data = palloc(r->g, n ? (size_t)n * es : 1);
    if (!data) return err_setf(r->err, CBX_ERR_NOMEM, "%s: key '%s': out of memory for %llu elements", r->g->path,
                               key, (unsigned long long)n);
    v->v.arr.data = data;
    if (et == GGUF_TYPE_STRING) {
        struct io_gguf_str *s = data;
        for (uint64_t i = 0; i < n; i++)
            if ((rc = rd_str(r, &s[i], "array string")) != CBX_OK) return rc;
    } else if (et == GGUF_TYPE_ARRAY) {
        struct io_gguf_value *a = data;
        for (uint64_t i = 0; i < n; i++) {
            a[i].type = GGUF_TYPE_ARRAY;
            if ((rc = rd_array(r, &a[i], depth + 1, key)) != CBX_OK) return rc;
        }
    } else {
        if ((rc = rd_bytes(r, data, (size_t)n * es, "array data")) != CBX_OK) return rc;
        if (et == GGUF_TYPE_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (((uint8_t *)data)[i] > 1)
                    return err_setf(r->err, CBX_ERR_FORMAT, "%s: key '%s': bool element %llu is %u, not 0 or 1",
                                    r->g->path, key, (unsigned long long)i, ((uint8_t *)data)[i]);
    }
    return CBX_OK;
}

static cbx_status rd_value(struct rd *r, struct io_gguf_value *v, uint32_t type, int depth, const char *key)
{
    memset(v, 0, sizeof *v);
    v->type = (enum gguf_type)type;
    if (type == GGUF_TYPE_STRING) return rd_str(r, &v->v.str, "string value");
    if (type == GGUF_TYPE_ARRAY) return rd_array(r, v, depth, key);
    size_t sz = scalar_size((int)type);
    if (!sz)
        return err_setf(r->err, CBX_ERR_FORMAT, "%s: key '%s': value type %u unknown (0..12 allowed)", r->g->path,
                        key, type);
    uint8_t b[8];
    cbx_status rc = rd_bytes(r, b, sz, "value");
    if (rc != CBX_OK) return rc;
    if (type == GGUF_TYPE_BOOL) {
        if (b[0] > 1)
            return err_setf(r->err, CBX_ERR_FORMAT, "%s: key '%s': bool value %u, not 0 or 1", r->g->path, key, b[0]);
        v->v.b = b[0] != 0;
    } else {
        memcpy(&v->v, b, sz); /* every union member starts at offset 0 */
    }
    return CBX_OK;
}

/* Hash table of n names (open addressing); -1 in *dup_at when unique,
 * else the index of the second occurrence. */
static int *build_hash(struct io_gguf *g, int n, const char *(*name)(const struct io_gguf *, int), size_t *mask,
                       int *dup_at)
{
    size_t ns = 16;
    while (ns < 2 * (size_t)n) ns <<= 1;
    int *slot = palloc(g, ns * sizeof *slot);
    *dup_at = -1;
    if (!slot) return NULL;
    memset(slot, 0xff, ns * sizeof *slot);
    *mask = ns - 1;
    for (int i = 0; i < n; i++) {
        const char *s = name(g, i);
        size_t h = (size_t)fnv1a(s) & *mask;
        while (slot[h] >= 0) {
            if (strcmp(name(g, slot[h]), s) == 0) {
                *dup_at = i;
                return slot;
            }
            h = (h + 1) & *mask;
        }
        slot[h] = i;
    }
    return slot;
}

static int hash_find(const struct io_gguf *g, const int *slot, size_t mask,
                     const char *(*name)(const struct io_gguf *, int), const char *s)
{
    size_t h = (size_t)fnv1a(s) & mask;
    while (slot[h] >= 0) {
        if (strcmp(name(g, slot[h]), s) == 0) return slot[h];
        h = (h + 1) & mask;
    }
    return -1;
}

static const char *kv_name(const struct io_gguf *g, int i) { return g->keys[i]; }
static const char *t_name(const struct io_gguf *g, int i) { return g->t[i].name; }

static cbx_status parse(struct io_gguf *g, char *err)
{
    struct rd r = {g, 0, err};
    const char *p = g->path;
    struct container_span *sp = NULL;
    cbx_status rc;
    char magic[4];
    uint64_t n_t = 0, n_kv = 0;

    if ((rc = rd_bytes(&r, magic, 4, "the magic")) != CBX_OK) return rc;
    if (memcmp(magic, GGUF_MAGIC, 4) != 0)
        return err_setf(err, CBX_ERR_FORMAT, "%s: bad magic %02x %02x %02x %02x (want \"GGUF\")", p,
                        (uint8_t)magic[0], (uint8_t)magic[1], (uint8_t)magic[2], (uint8_t)magic[3]);
    if ((rc = rd_u32(&r, &g->version, "the version")) != CBX_OK) return rc;
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffff) == 0 && g->version != 0)
            return err_setf(err, CBX_ERR_FORMAT, "%s: version field 0x%08x looks big-endian; only little-endian GGUF is supported",
                            p, g->version);
        return err_setf(err, CBX_ERR_FORMAT, "%s: GGUF version %u not supported (2 or 3 allowed)", p, g->version);
    }
    if ((rc = rd_u64(&r, &n_t, "the tensor count")) != CBX_OK) return rc;
    if ((rc = rd_u64(&r, &n_kv, "the key/value count")) != CBX_OK) return rc;
    /* A tensor info takes >= 24 bytes (name length, n_dims, type, offset);
     * a key/value >= 13 (key length, type, one byte of value). */
    if (n_t > left(&r) / 24 || n_t > INT32_MAX)
        return err_setf(err, CBX_ERR_FORMAT, "%s: tensor count %llu does not fit in the %zu bytes of the file", p,
                        (unsigned long long)n_t, g->size);
    if (n_kv > left(&r) / 13 || n_kv > INT32_MAX)
        return err_setf(err, CBX_ERR_FORMAT, "%s: key/value count %llu does not fit in the %zu bytes of the file", p,
                        (unsigned long long)n_kv, g->size);

    g->keys = palloc(g, ((size_t)n_kv + 1) * sizeof *g->keys);
    g->vals = palloc(g, ((size_t)n_kv + 1) * sizeof *g->vals);
    if (!g->keys || !g->vals) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", p);
    g->alignment = IO_GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < n_kv; i++) {
        struct io_gguf_str key = {0};
        uint32_t type = 0;
        if ((rc = rd_str(&r, &key, "a key")) != CBX_OK) return rc;
        if (strlen(key.s) != key.len)
            return err_setf(err, CBX_ERR_FORMAT, "%s: key %llu contains a NUL byte", p, (unsigned long long)i);
        if ((rc = rd_u32(&r, &type, "a value type")) != CBX_OK) return rc;
        g->keys[i] = (char *)key.s;
        g->n_kv = (int)i + 1;
        if ((rc = rd_value(&r, &g->vals[i], type, 0, key.s)) != CBX_OK) return rc;
    }
    int dup;
    g->kv_slot = build_hash(g, g->n_kv, kv_name, &g->kv_mask, &dup);
    if (!g->kv_slot) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", p);
    if (dup >= 0) return err_setf(err, CBX_ERR_FORMAT, "%s: key '%s' appears twice", p, g->keys[dup]);
    int ai = hash_find(g, g->kv_slot, g->kv_mask, kv_name, "general.alignment");
    if (ai >= 0) {
        const struct io_gguf_value *v = &g->vals[ai];
        if (v->type != GGUF_TYPE_UINT32)
            return err_setf(err, CBX_ERR_FORMAT, "%s: general.alignment has type %s, want uint32", p,
                            io_gguf_type_name(v->type));
        if (v->v.u32 == 0 || (v->v.u32 & (v->v.u32 - 1)))
            return err_setf(err, CBX_ERR_FORMAT, "%s: general.alignment %u is not a power of two", p, v->v.u32);
        g->alignment = v->v.u32;
    }

    g->t = palloc(g, ((size_t)n_t + 1) * sizeof *g->t);
    g->t_off = palloc(g, ((size_t)n_t + 1) * sizeof *g->t_off);
    if (!g->t || !g->t_off) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", p);
    for (uint64_t i = 0; i < n_t; i++) {
        struct io_gguf_str name = {0};
        uint32_t nd = 0, type = 0;
        uint64_t dims[TENSOR_MAX_DIMS] = {0};
        if ((rc = rd_str(&r, &name, "a tensor name")) != CBX_OK) return rc;
        if (strlen(name.s) != name.len)
            return err_setf(err, CBX_ERR_FORMAT, "%s: tensor %llu: name contains a NUL byte", p, (unsigned long long)i);
        if ((rc = rd_u32(&r, &nd, "a tensor's n_dims")) != CBX_OK) return rc;
        if (nd > TENSOR_MAX_DIMS)
            return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': n_dims %u, at most %d supported", p, name.s, nd,
                            TENSOR_MAX_DIMS);
        for (uint32_t d = 0; d < nd; d++) {
            if ((rc = rd_u64(&r, &dims[d], "a tensor dim")) != CBX_OK) return rc;
            if (dims[d] > INT64_MAX)
                return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': dim %u is %llu, too large", p, name.s, d,
                                (unsigned long long)dims[d]);
        }
        if ((rc = rd_u32(&r, &type, "a tensor type")) != CBX_OK) return rc;
        if ((rc = rd_u64(&r, &g->t_off[i], "a tensor offset")) != CBX_OK) return rc;
        if (!tensor_type_ok(type))
            return err_setf(err, CBX_ERR_FORMAT,
                            "%s: tensor '%s': ggml type id %u not supported (f32, f16, bf16, f64, i8-i64, q4_0, q4_1, q5_0, q5_1, q8_0, q8_1)",
                            p, name.s, type);
        int64_t ne[TENSOR_MAX_DIMS];
        for (uint32_t d = 0; d < nd; d++) ne[d] = (int64_t)dims[nd - 1 - d]; /* innermost first -> last */
        /* strides are set once the shape is known to be sane (below) */
        memset(&g->t[i], 0, sizeof g->t[i]);
        g->t[i].type = (enum dtype)type;
        g->t[i].ndim = (int)nd;
        memcpy(g->t[i].ne, ne, nd * sizeof *ne);
        g->t[i].name = name.s;
        g->n_t = (int)i + 1;
    }
    g->data_off = ((uint64_t)r.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (g->n_t > 0 && g->data_off > g->size)
        return err_setf(err, CBX_ERR_FORMAT, "%s: data section at byte %llu starts past the end of the file (%zu bytes)",
                        p, (unsigned long long)g->data_off, g->size);
    g->t_slot = build_hash(g, g->n_t, t_name, &g->t_mask, &dup);
    if (!g->t_slot) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", p);
    if (dup >= 0) return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s' appears twice", p, g->t[dup].name);

    uint64_t data_size = g->n_t ? g->size - g->data_off : 0;
    sp = calloc((size_t)g->n_t + 1, sizeof *sp);
    if (!sp) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", p);
    rc = CBX_OK;
    for (int i = 0; i < g->n_t; i++) {
        struct tensor *t = &g->t[i];
        char sh[96];
        const struct dtype_traits *tr = dtype_traits(t->type);
        int64_t inner = t->ndim ? t->ne[t->ndim - 1] : 1;
        if (inner % tr->blck) {
            rc = err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': %s row of %lld elements is not a whole number of %d-element blocks",
                          p, t->name, tr->name, (long long)inner, tr->blck);
            goto cleanup;
        }
        uint64_t nbytes = 0;
        bool over = !shape_nbytes(t->type, t->ndim, t->ne, &nbytes);
        uint64_t off = g->t_off[i];
        if (off % g->alignment) {
            rc = err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': offset %llu is not a multiple of the alignment %zu", p,
                          t->name, (unsigned long long)off, g->alignment);
            goto cleanup;
        }
        if (over || off > data_size || nbytes > data_size - off) {
            rc = err_setf(err, CBX_ERR_FORMAT,
                          "%s: tensor '%s' (%s %s) at data offset %llu runs past the end of the file (data section %llu bytes)",
                          p, t->name, tr->name, tensor_shape_str(t, sh, sizeof sh), (unsigned long long)off,
                          (unsigned long long)data_size);
            goto cleanup;
        }
        tensor_set_contiguous(t);
        const uint8_t *src = g->buf + g->data_off + off;
        t->data = (void *)(uintptr_t)src;
        if (nbytes && (uintptr_t)src % type_align(t->type)) {
            void *copy = palloc(g, (size_t)nbytes);
            if (!copy) {
                rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory copying misaligned tensor '%s'", p, t->name);
                goto cleanup;
            }
            memcpy(copy, src, (size_t)nbytes);
            t->data = copy;
        }
        sp[i] = (struct container_span){off, off + nbytes, i};
    }
    rc = container_check_overlap(sp, g->n_t, g->t, p, err);
cleanup:
    free(sp);
    return rc;
}

/* A reader over buf[0, n), named name in messages; map and map_len: the
 * mapping it then owns and releases (NULL, 0 for none), also on failure. */
static cbx_status open_buf(const char *name, const void *buf, size_t n, void *map, size_t map_len,
                           struct io_gguf **out, char *err)
{
    *out = NULL;
    struct io_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(name))) {
        free(g);
        if (map) munmap(map, map_len);
        return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", name);
    }
    g->map = map;
    g->map_len = map_len;
    g->buf = buf;
    g->size = n;
    cbx_status rc = parse(g, err);
    if (rc != CBX_OK) {
        io_gguf_close(g);
        return rc;
    }
    *out = g;
    return CBX_OK;
}

cbx_status io_gguf_open_memory(const void *buf, size_t n, struct io_gguf **out, char *err)
{
    return open_buf("<memory>", buf, n, NULL, 0, out, err);
}

cbx_status io_gguf_open(const char *path, struct io_gguf **out, char *err)
{
    *out = NULL;
    void *m;
    size_t len;
    cbx_status rc = container_map(path, &m, &len, err);
    if (rc != CBX_OK) return rc;
    return open_buf(path, m ? m : "", len, m, len, out, err); /* "": an empty file, which parse reports */
}

uint32_t io_gguf_version(const struct io_gguf *g) { return g->version; }
size_t io_gguf_alignment(const struct io_gguf *g) { return g->alignment; }
uint64_t io_gguf_data_offset(const struct io_gguf *g) { return g->data_off; }
int io_gguf_n_tensors(const struct io_gguf *g) { return g->n_t; }

const struct tensor *io_gguf_tensor(const struct io_gguf *g, int i)
{
    return i >= 0 && i < g->n_t ? &g->t[i] : NULL;
}

const struct tensor *io_gguf_find_tensor(const struct io_gguf *g, const char *name)
{
    int i = hash_find(g, g->t_slot, g->t_mask, t_name, name);
    return i >= 0 ? &g->t[i] : NULL;
}

uint64_t io_gguf_tensor_offset(const struct io_gguf *g, int i)
{
    return i >= 0 && i < g->n_t ? g->t_off[i] : 0;
}

int io_gguf_n_kv(const struct io_gguf *g) { return g->n_kv; }

const char *io_gguf_kv_key(const struct io_gguf *g, int i) { return i >= 0 && i < g->n_kv ? g->keys[i] : NULL; }

const struct io_gguf_value *io_gguf_kv_value(const struct io_gguf *g, int i)
{
    return i >= 0 && i < g->n_kv ? &g->vals[i] : NULL;
}

int io_gguf_find_kv(const struct io_gguf *g, const char *key)
{
    return hash_find(g, g->kv_slot, g->kv_mask, kv_name, key);
}

const struct io_gguf_value *io_gguf_get(const struct io_gguf *g, const char *key)
{
    int i = io_gguf_find_kv(g, key);
    return i >= 0 ? &g->vals[i] : NULL;
}

static cbx_status get_typed(const struct io_gguf *g, const char *key, enum gguf_type want,
                            const struct io_gguf_value **v, char *err)
{
    *v = io_gguf_get(g, key);
    if (!*v) return err_setf(err, CBX_ERR_NOT_FOUND, "%s: no key '%s'", g->path, key);
    if ((*v)->type != want)
        return err_setf(err, CBX_ERR_FORMAT, "%s: key '%s' has type %s, want %s", g->path, key,
                        io_gguf_type_name((*v)->type), io_gguf_type_name(want));
    return CBX_OK;
}

#define GETTER(fn, ctype, gtype, member)                                                      \
    cbx_status fn(const struct io_gguf *g, const char *key, ctype *out, char *err)             \
    {                                                                                         \
        const struct io_gguf_value *v;                                                        \
        cbx_status rc = get_typed(g, key, gtype, &v, err);                                    \
        if (rc == CBX_OK) *out = v->v.member;                                                 \
        return rc;                                                                            \
    }
GETTER(io_gguf_get_u8, uint8_t, GGUF_TYPE_UINT8, u8)
GETTER(io_gguf_get_i8, int8_t, GGUF_TYPE_INT8, i8)
GETTER(io_gguf_get_u16, uint16_t, GGUF_TYPE_UINT16, u16)
GETTER(io_gguf_get_i16, int16_t, GGUF_TYPE_INT16, i16)
GETTER(io_gguf_get_u32, uint32_t, GGUF_TYPE_UINT32, u32)
GETTER(io_gguf_get_i32, int32_t, GGUF_TYPE_INT32, i32)
GETTER(io_gguf_get_u64, uint64_t, GGUF_TYPE_UINT64, u64)
GETTER(io_gguf_get_i64, int64_t, GGUF_TYPE_INT64, i64)
GETTER(io_gguf_get_f32, float, GGUF_TYPE_FLOAT32, f32)
GETTER(io_gguf_get_f64, double, GGUF_TYPE_FLOAT64, f64)
GETTER(io_gguf_get_bool, bool, GGUF_TYPE_BOOL, b)
#undef GETTER

cbx_status io_gguf_get_str(const struct io_gguf *g, const char *key, const char **out, uint64_t *len, char *err)
{
    const struct io_gguf_value *v;
    cbx_status rc = get_typed(g, key, GGUF_TYPE_STRING, &v, err);
    if (rc != CBX_OK) return rc;
    *out = v->v.str.s;
    if (len) *len = v->v.str.len;
    return CBX_OK;
}

cbx_status io_gguf_get_arr(const struct io_gguf *g, const char *key, enum gguf_type elem_type, const void **data,
                           uint64_t *n, char *err)
{
    const struct io_gguf_value *v;
    cbx_status rc = get_typed(g, key, GGUF_TYPE_ARRAY, &v, err);
    if (rc != CBX_OK) return rc;
    if (v->v.arr.type != elem_type)
        return err_setf(err, CBX_ERR_FORMAT, "%s: key '%s' is an array of %s, want %s", g->path, key,
                        io_gguf_type_name(v->v.arr.type), io_gguf_type_name(elem_type));
    *data = v->v.arr.data;
    *n = v->v.arr.n;
    return CBX_OK;
}

/* ---- writer ----------------------------------------------------------- */

struct wkv {
    char *key;
    struct io_gguf_value v; /* deep copy, owned */
};

struct wtensor {
    char *name;
    enum dtype type;
    int ndim;
    int64_t ne[TENSOR_MAX_DIMS];
    const void *data;
    uint64_t size, offset;
};

struct io_gguf_writer {
    struct wkv *kv;
    int n_kv, cap_kv;
    struct wtensor *t;
    int n_t, cap_t;
    size_t alignment;
    /* streaming state */
    struct atomic_file out;
    uint64_t pos;        /* bytes written to f */
    uint64_t data_off;   /* file offset of the data section */
    int cur;             /* tensor being streamed */
    uint64_t cur_done;   /* its bytes written */
    bool failed;
};

static void free_value(struct io_gguf_value *v)
{
    if (v->type == GGUF_TYPE_STRING) {
        free((void *)v->v.str.s);
    } else if (v->type == GGUF_TYPE_ARRAY) {
        if (v->v.arr.type == GGUF_TYPE_STRING) {
            struct io_gguf_str *s = (struct io_gguf_str *)v->v.arr.data;
            for (uint64_t i = 0; s && i < v->v.arr.n; i++) free((void *)s[i].s);
        } else if (v->v.arr.type == GGUF_TYPE_ARRAY) {
            struct io_gguf_value *a = (struct io_gguf_value *)v->v.arr.data;
            for (uint64_t i = 0; a && i < v->v.arr.n; i++) free_value(&a[i]);
        }
        free((void *)v->v.arr.data);
    }
    memset(v, 0, sizeof *v);
}

static char *dup_bytes(const char *s, uint64_t len)
{
    if (len >= SIZE_MAX) return NULL;
    char *p = malloc((size_t)len + 1);
    if (!p) return NULL;
    if (len) memcpy(p, s, (size_t)len);
    p[len] = 0;
    return p;
}

/* Deep copy src into dst (zeroed on failure, nothing leaked). */
static cbx_status copy_value(struct io_gguf_value *dst, const struct io_gguf_value *src, int depth, const char *key,
                             char *err)
{
    memset(dst, 0, sizeof *dst);
    dst->type = src->type;
    if (src->type == GGUF_TYPE_STRING) {
        if (!src->v.str.s && src->v.str.len)
            return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: key '%s': NULL string", key);
        dst->v.str.len = src->v.str.len;
        if (!(dst->v.str.s = dup_bytes(src->v.str.s, src->v.str.len))) goto nomem;
        return CBX_OK;
    }
    if (src->type != GGUF_TYPE_ARRAY) {
        if (!scalar_size(src->type))
            return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: key '%s': value type %d unknown", key,
                            (int)src->type);
        dst->v = src->v;
        if (src->type == GGUF_TYPE_BOOL) dst->v.u8 = src->v.b ? 1 : 0;
        return CBX_OK;
    }
    enum gguf_type et = src->v.arr.type;
    uint64_t n = src->v.arr.n;
    if ((int)et < 0 || et > GGUF_TYPE_FLOAT64)
        return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: key '%s': array element type %d unknown", key,
                        (int)et);
    if (et == GGUF_TYPE_ARRAY && depth + 1 >= IO_GGUF_MAX_DEPTH)
        return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: key '%s': arrays nested deeper than %d", key,
                        IO_GGUF_MAX_DEPTH);
    if (n && !src->v.arr.data)
        return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: key '%s': NULL array data", key);
    size_t es = et == GGUF_TYPE_STRING ? sizeof(struct io_gguf_str)
                : et == GGUF_TYPE_ARRAY ? sizeof(struct io_gguf_value)
                                        : scalar_size(et);
    if (n > SIZE_MAX / es) goto nomem;
    void *data = calloc(n ? (size_t)n : 1, es);
    if (!data) goto nomem;
    dst->v.arr.type = et;
    dst->v.arr.data = data;
    if (et == GGUF_TYPE_STRING) {
        const struct io_gguf_str *s = src->v.arr.data;
        struct io_gguf_str *d = data;
        for (uint64_t i = 0; i < n; i++, dst->v.arr.n++) {
            if (!s[i].s && s[i].len) {
                free_value(dst);
                return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: key '%s': NULL string in array", key);
            }
            d[i].len = s[i].len;
            if (!(d[i].s = dup_bytes(s[i].s, s[i].len))) { free_value(dst); goto nomem; }
        }
    } else if (et == GGUF_TYPE_ARRAY) {
        const struct io_gguf_value *s = src->v.arr.data;
        struct io_gguf_value *d = data;
        for (uint64_t i = 0; i < n; i++) {
            if (s[i].type != GGUF_TYPE_ARRAY) {
                free_value(dst);
                return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: key '%s': element %llu of an array of arrays is a %s",
                                key, (unsigned long long)i, io_gguf_type_name(s[i].type));
            }
            cbx_status rc = copy_value(&d[i], &s[i], depth + 1, key, err);
            dst->v.arr.n = i + 1; /* d[i] is zeroed on failure: safe to free */
            if (rc != CBX_OK) { free_value(dst); return rc; }
        }
    } else {
        if (n) memcpy(data, src->v.arr.data, (size_t)n * es);
        if (et == GGUF_TYPE_BOOL)
            for (uint64_t i = 0; i < n; i++) ((uint8_t *)data)[i] = ((const uint8_t *)data)[i] != 0;
    }
    dst->v.arr.n = n;
    return CBX_OK;
nomem:
    return err_setf(err, CBX_ERR_NOMEM, "gguf writer: key '%s': out of memory", key);
}

cbx_status io_gguf_writer_create(struct io_gguf_writer **out, char *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return err_setf(err, CBX_ERR_NOMEM, "gguf writer: out of memory");
    (*out)->alignment = IO_GGUF_DEFAULT_ALIGNMENT;
    return CBX_OK;
}

static void stream_abort(struct io_gguf_writer *w)
{
    atomic_file_abort(&w->out);
    w->failed = false;
}

void io_gguf_writer_free(struct io_gguf_writer *w)
{
    if (!w) return;
    stream_abort(w);
    for (int i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free_value(&w->kv[i].v);
    }
    for (int i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

cbx_status io_gguf_writer_set(struct io_gguf_writer *w, const char *key, const struct io_gguf_value *v, char *err)
{
    if (w->out.f) return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: metadata cannot change while streaming");
    if (!key || !key[0]) return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: empty key");
    if (strcmp(key, "general.alignment") == 0) {
        if (v->type != GGUF_TYPE_UINT32 || v->v.u32 == 0 || (v->v.u32 & (v->v.u32 - 1)))
            return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: general.alignment must be a uint32 power of two");
    }
    struct io_gguf_value copy;
    cbx_status rc = copy_value(&copy, v, 0, key, err);
    if (rc != CBX_OK) return rc;
    for (int i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) {
            free_value(&w->kv[i].v);
            w->kv[i].v = copy;
            if (strcmp(key, "general.alignment") == 0) w->alignment = copy.v.u32;
            return CBX_OK;
        }
    if (w->n_kv == w->cap_kv) {
        int cap = w->cap_kv ? 2 * w->cap_kv : 16;
        struct wkv *kv = realloc(w->kv, (size_t)cap * sizeof *kv);
        if (!kv) { free_value(&copy); return err_setf(err, CBX_ERR_NOMEM, "gguf writer: out of memory"); }
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) { free_value(&copy); return err_setf(err, CBX_ERR_NOMEM, "gguf writer: out of memory"); }
    w->kv[w->n_kv].key = k;
    w->kv[w->n_kv].v = copy;
    w->n_kv++;
    if (strcmp(key, "general.alignment") == 0) w->alignment = copy.v.u32;
    return CBX_OK;
}

#define SETTER(fn, ctype, gtype, member)                                                      \
    cbx_status fn(struct io_gguf_writer *w, const char *key, ctype x, char *err)              \
    {                                                                                         \
        struct io_gguf_value v;                                                               \
        memset(&v, 0, sizeof v);                                                              \
        v.type = gtype;                                                                       \
        v.v.member = x;                                                                       \
        return io_gguf_writer_set(w, key, &v, err);                                           \
    }
SETTER(io_gguf_writer_set_u8, uint8_t, GGUF_TYPE_UINT8, u8)
SETTER(io_gguf_writer_set_i8, int8_t, GGUF_TYPE_INT8, i8)
SETTER(io_gguf_writer_set_u16, uint16_t, GGUF_TYPE_UINT16, u16)
SETTER(io_gguf_writer_set_i16, int16_t, GGUF_TYPE_INT16, i16)
SETTER(io_gguf_writer_set_u32, uint32_t, GGUF_TYPE_UINT32, u32)
SETTER(io_gguf_writer_set_i32, int32_t, GGUF_TYPE_INT32, i32)
SETTER(io_gguf_writer_set_u64, uint64_t, GGUF_TYPE_UINT64, u64)
SETTER(io_gguf_writer_set_i64, int64_t, GGUF_TYPE_INT64, i64)
SETTER(io_gguf_writer_set_f32, float, GGUF_TYPE_FLOAT32, f32)
SETTER(io_gguf_writer_set_f64, double, GGUF_TYPE_FLOAT64, f64)
SETTER(io_gguf_writer_set_bool, bool, GGUF_TYPE_BOOL, b)
#undef SETTER

cbx_status io_gguf_writer_set_str(struct io_gguf_writer *w, const char *key, const char *s, char *err)
{
    if (!s) return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: key '%s': NULL string", key ? key : "?");
    struct io_gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = GGUF_TYPE_STRING;
    v.v.str.s = s;
    v.v.str.len = strlen(s);
    return io_gguf_writer_set(w, key, &v, err);
}

cbx_status io_gguf_writer_set_arr(struct io_gguf_writer *w, const char *key, enum gguf_type et, const void *data,
                                  uint64_t n, char *err)
{
    struct io_gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = GGUF_TYPE_ARRAY;
    v.v.arr.type = et;
    v.v.arr.n = n;
    v.v.arr.data = data;
    if (et == GGUF_TYPE_ARRAY)
        return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: key '%s': nested arrays go through io_gguf_writer_set",
                        key ? key : "?");
    if (et != GGUF_TYPE_STRING) return io_gguf_writer_set(w, key, &v, err);
    /* const char *const * -> struct io_gguf_str[] */
    if (n && !data) return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: key '%s': NULL array data", key ? key : "?");
    if (n > SIZE_MAX / sizeof(struct io_gguf_str)) return err_setf(err, CBX_ERR_NOMEM, "gguf writer: out of memory");
    struct io_gguf_str *s = malloc((n ? (size_t)n : 1) * sizeof *s);
    if (!s) return err_setf(err, CBX_ERR_NOMEM, "gguf writer: out of memory");
    const char *const *src = data;
    for (uint64_t i = 0; i < n; i++) {
        if (!src[i]) {
            free(s);
            return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: key '%s': NULL string at %llu", key ? key : "?",
                            (unsigned long long)i);
        }
        s[i].s = src[i];
        s[i].len = strlen(src[i]);
    }
    v.v.arr.data = s;
    cbx_status rc = io_gguf_writer_set(w, key, &v, err);
    free(s);
    return rc;
}

cbx_status io_gguf_writer_add_tensor(struct io_gguf_writer *w, const char *name, enum dtype type, int ndim,
                                     const int64_t *ne, const void *data, char *err)
{
    if (w->out.f) return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: tensors cannot change while streaming");
    if (!name || !name[0]) return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: empty tensor name");
    if (!tensor_type_ok((uint32_t)type))
        return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: tensor '%s': type %s has no ggml id", name,
                        dtype_name(type));
    if (ndim < 0 || ndim > TENSOR_MAX_DIMS)
        return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: tensor '%s': ndim %d not in 0..%d", name, ndim,
                        TENSOR_MAX_DIMS);
    const struct dtype_traits *tr = dtype_traits(type);
    int64_t inner = ndim ? ne[ndim - 1] : 1;
    uint64_t size = 0;
    bool bad = inner % tr->blck != 0;
    for (int d = 0; d < ndim; d++) bad = bad || ne[d] < 0;
    bad = bad || !shape_nbytes(type, ndim, ne, &size);
    if (bad)
        return err_setf(err, CBX_ERR_INVALID_ARG,
                        "gguf writer: tensor '%s': bad shape for %s (negative, overflowing, or innermost dim %lld not a multiple of %d)",
                        name, tr->name, (long long)inner, tr->blck);
    for (int i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: tensor '%s' added twice", name);
    if (w->n_t == w->cap_t) {
        int cap = w->cap_t ? 2 * w->cap_t : 64;
        struct wtensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) return err_setf(err, CBX_ERR_NOMEM, "gguf writer: out of memory");
        w->t = t;
        w->cap_t = cap;
    }
    struct wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return err_setf(err, CBX_ERR_NOMEM, "gguf writer: out of memory");
    t->type = type;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->ne[d] = ne[d];
    t->data = data;
    t->size = size;
    w->n_t++;
    return CBX_OK;
}

static void put(struct io_gguf_writer *w, const void *p, size_t n)
{
    if (w->failed || !n) return;
    if (fwrite(p, 1, n, w->out.f) != n) {
        w->failed = true;
        return;
    }
    w->pos += n;
}

static void put_u32(struct io_gguf_writer *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(struct io_gguf_writer *w, uint64_t v) { put(w, &v, 8); }

static void put_str(struct io_gguf_writer *w, const char *s, uint64_t len)
{
    put_u64(w, len);
    put(w, s, (size_t)len);
}

static void put_zeros(struct io_gguf_writer *w, uint64_t n)
{
    static const uint8_t z[64];
    while (n) {
        size_t k = n < sizeof z ? (size_t)n : sizeof z;
        put(w, z, k);
        n -= k;
    }
}

static void put_pad(struct io_gguf_writer *w)
{
    put_zeros(w, (w->alignment - w->pos % w->alignment) % w->alignment);
}

static void put_array_body(struct io_gguf_writer *w, const struct io_gguf_value *v)
{
    put_u32(w, (uint32_t)v->v.arr.type);
    put_u64(w, v->v.arr.n);
    if (v->v.arr.type == GGUF_TYPE_STRING) {
        const struct io_gguf_str *s = v->v.arr.data;
        for (uint64_t i = 0; i < v->v.arr.n; i++) put_str(w, s[i].s, s[i].len);
    } else if (v->v.arr.type == GGUF_TYPE_ARRAY) {
        const struct io_gguf_value *a = v->v.arr.data;
        for (uint64_t i = 0; i < v->v.arr.n; i++) put_array_body(w, &a[i]);
    } else {
        put(w, v->v.arr.data, (size_t)v->v.arr.n * scalar_size(v->v.arr.type));
    }
}

/* Advance past finished (and empty) tensors, padding after each one. */
static void stream_next(struct io_gguf_writer *w)
{
    while (w->cur < w->n_t && w->cur_done == w->t[w->cur].size) {
        put_pad(w);
        w->cur++;
        w->cur_done = 0;
    }
}

cbx_status io_gguf_writer_begin(struct io_gguf_writer *w, const char *path, char *err)
{
    if (w->out.f) return err_setf(err, CBX_ERR_INVALID_ARG, "%s: gguf writer already streaming to %s", path, w->out.path);
    cbx_status orc = atomic_file_open(&w->out, path, err);
    if (orc != CBX_OK) {
        stream_abort(w);
        return orc;
    }
    w->pos = 0;
    w->failed = false;

    /* Tensor offsets: each at the next multiple of the alignment. */
    uint64_t off = 0;
    for (int i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        off += (w->t[i].size + w->alignment - 1) / w->alignment * w->alignment;
    }

    put(w, GGUF_MAGIC, 4);
    put_u32(w, GGUF_VERSION);
    put_u64(w, (uint64_t)w->n_t);
    put_u64(w, (uint64_t)w->n_kv);
    for (int i = 0; i < w->n_kv; i++) {
        const struct io_gguf_value *v = &w->kv[i].v;
        put_str(w, w->kv[i].key, strlen(w->kv[i].key));
        put_u32(w, (uint32_t)v->type);
        if (v->type == GGUF_TYPE_STRING) put_str(w, v->v.str.s, v->v.str.len);
        else if (v->type == GGUF_TYPE_ARRAY) put_array_body(w, v);
        else put(w, &v->v, scalar_size(v->type));
    }
    for (int i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        put_str(w, t->name, strlen(t->name));
        if (t->ndim == 0) {
            put_u32(w, 1);
            put_u64(w, 1);
        } else {
            put_u32(w, (uint32_t)t->ndim);
            for (int d = t->ndim - 1; d >= 0; d--) put_u64(w, (uint64_t)t->ne[d]); /* innermost first */
        }
        put_u32(w, (uint32_t)t->type);
        put_u64(w, t->offset);
    }
    put_pad(w);
    w->data_off = w->pos;
    w->cur = 0;
    w->cur_done = 0;
    stream_next(w);
    if (w->failed) {
        cbx_status rc = err_setf(err, CBX_ERR_IO, "%s: write failed: %s", w->out.tmp, strerror(errno));
        stream_abort(w);
        return rc;
    }
    return CBX_OK;
}

cbx_status io_gguf_writer_append(struct io_gguf_writer *w, const void *bytes, size_t n, char *err)
{
    if (!w->out.f) return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: append without begin");
    if (w->failed) return err_setf(err, CBX_ERR_IO, "%s: writer already failed", w->out.path);
    const uint8_t *p = bytes;
    while (n) {
        if (w->cur >= w->n_t) {
            w->failed = true;
            return err_setf(err, CBX_ERR_INVALID_ARG, "%s: %zu bytes appended past the last tensor", w->out.path, n);
        }
        uint64_t room = w->t[w->cur].size - w->cur_done;
        size_t k = n < room ? n : (size_t)room;
        put(w, p, k);
        w->cur_done += k;
        p += k;
        n -= k;
        stream_next(w);
        if (w->failed) return err_setf(err, CBX_ERR_IO, "%s: write failed: %s", w->out.tmp, strerror(errno));
    }
    return CBX_OK;
}

cbx_status io_gguf_writer_finish(struct io_gguf_writer *w, char *err)
{
    if (!w->out.f) return err_setf(err, CBX_ERR_INVALID_ARG, "gguf writer: finish without begin");
    cbx_status rc = CBX_OK;
    if (w->failed) {
        rc = err_setf(err, CBX_ERR_IO, "%s: not written (an earlier write failed)", w->out.path);
    } else if (w->cur < w->n_t) {
        rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: data of tensor '%s' (%d of %d) incomplete: %llu of %llu bytes",
                      w->out.path, w->t[w->cur].name, w->cur + 1, w->n_t, (unsigned long long)w->cur_done,
                      (unsigned long long)w->t[w->cur].size);
    } else {
        rc = atomic_file_commit(&w->out, err);
    }
    stream_abort(w);
    return rc;
}

cbx_status io_gguf_writer_write(struct io_gguf_writer *w, const char *path, char *err)
{
    for (int i = 0; i < w->n_t; i++)
        if (!w->t[i].data && w->t[i].size)
            return err_setf(err, CBX_ERR_INVALID_ARG, "%s: tensor '%s' has no data (use the streaming calls)", path,
                            w->t[i].name);
    cbx_status rc = io_gguf_writer_begin(w, path, err);
    for (int i = 0; rc == CBX_OK && i < w->n_t; i++)
        rc = io_gguf_writer_append(w, w->t[i].data, (size_t)w->t[i].size, err);
    if (rc != CBX_OK) {
        stream_abort(w);
        return rc;
    }
    return io_gguf_writer_finish(w, err);
}
