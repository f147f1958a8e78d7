/* safetensors.c - safetensors reader (mmap, zero-copy) and streaming writer.
 * Spec: huggingface/safetensors README "Format" and checkpoint-format.md
 * §1.1; writer layout as synthetic-weights.md §6 (oracle synth.py). Limits
 * and validation rules are listed in safetensors.h. */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "atomic_file.h"
#include "container.h"

/* The largest integer a JSON number (a double in cJSON) holds exactly. */
#define MAX_EXACT_INT 9007199254740992.0 /* 2^53 */

static const struct {
    const char *name;
    enum dtype type;
} st_types[] = {
    {"F64", TYPE_F64}, {"F32", TYPE_F32}, {"F16", TYPE_F16},
    {"BF16", TYPE_BF16}, {"I64", TYPE_I64}, {"I32", TYPE_I32},
    {"I16", TYPE_I16}, {"I8", TYPE_I8}, {"U8", TYPE_U8},
    {"BOOL", TYPE_BOOL},
};

static const char *st_type_name(enum dtype t)
{
    for (size_t i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
        if (st_types[i].type == t) return st_types[i].name;
    return NULL;
}

struct io_safetensors {
    char *path;              /* for messages; "<memory>" for open_memory */
    void *map;               /* mmap base, or NULL for open_memory */
    size_t map_len;
    const uint8_t *buf;      /* whole file */
    size_t size;
    const uint8_t *data;     /* first byte after the header */
    uint64_t data_size;
    int n;
    struct tensor *t;        /* n descriptors, names in names[] */
    char **names;
    void **owned;            /* aligned copies of misaligned tensors, or NULL */
    int *slot;               /* hash table of tensor indices, -1 = empty */
    size_t slot_mask;
    int n_meta;
    char **meta_key, **meta_val;
};

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

void io_safetensors_close(struct io_safetensors *st)
{
    if (!st) return;
    for (int i = 0; i < st->n; i++) {
        if (st->names) free(st->names[i]);
        if (st->owned) free(st->owned[i]);
    }
    for (int i = 0; i < st->n_meta; i++) {
        free(st->meta_key[i]);
        free(st->meta_val[i]);
    }
    free(st->meta_key);
    free(st->meta_val);
    free(st->names);
    free(st->owned);
    free(st->t);
    free(st->slot);
    if (st->map) munmap(st->map, st->map_len);
    free(st->path);
    free(st);
}

/* A JSON number that is a non-negative integer <= 2^53, into *v. */
static bool json_uint(const cJSON *j, uint64_t *v)
{
    if (!cJSON_IsNumber(j)) return false;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= MAX_EXACT_INT) || d != (double)(uint64_t)d) return false;
    *v = (uint64_t)d;
    return true;
}

/* Insert tensor i into the hash table; false when the name is taken. */
static bool hash_insert(struct io_safetensors *st, int i)
{
    size_t h = (size_t)fnv1a(st->names[i]) & st->slot_mask;
    while (st->slot[h] >= 0) {
        if (strcmp(st->names[st->slot[h]], st->names[i]) == 0) return false;
        h = (h + 1) & st->slot_mask;
    }
    st->slot[h] = i;
    return true;
}

static cbx_status parse_entry(struct io_safetensors *st, int i, const cJSON *e,
                              struct container_span *sp, char *err)
{
    const char *p = st->path, *name = e->string;
    if (!cJSON_IsObject(e))
        return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", p, name);
    const cJSON *jt = NULL, *js = NULL, *jo = NULL;
    for (const cJSON *k = e->child; k; k = k->next) {
        const cJSON **dst = strcmp(k->string, "dtype") == 0          ? &jt
                            : strcmp(k->string, "shape") == 0        ? &js
                            : strcmp(k->string, "data_offsets") == 0 ? &jo
                                                                     : NULL;
        if (!dst)
            return err_setf(err, CBX_ERR_FORMAT,
                            "%s: tensor '%s': unknown key '%.64s' (allowed: dtype, shape, data_offsets)",
                            p, name, k->string);
        if (*dst)
            return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': duplicate key '%s'", p, name, k->string);
        *dst = k;
    }
    if (!jt || !js || !jo)
        return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': missing '%s'", p, name,
                        !jt ? "dtype" : !js ? "shape" : "data_offsets");

    int type = -1;
    if (cJSON_IsString(jt))
        for (size_t k = 0; k < sizeof st_types / sizeof st_types[0]; k++)
            if (strcmp(jt->valuestring, st_types[k].name) == 0) type = (int)st_types[k].type;
    if (type < 0)
        return err_setf(err, CBX_ERR_FORMAT,
                        "%s: tensor '%s': dtype %s%.32s%s not supported (need F64, F32, F16, BF16, I64, I32, I16, I8, U8 or BOOL)",
                        p, name, cJSON_IsString(jt) ? "'" : "", cJSON_IsString(jt) ? jt->valuestring : "(not a string)",
                        cJSON_IsString(jt) ? "'" : "");
    size_t esize = dtype_traits(type)->size;

    if (!cJSON_IsArray(js))
        return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': shape is not an array", p, name);
    int ndim = cJSON_GetArraySize(js);
    if (ndim > TENSOR_MAX_DIMS)
        return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': %d dimensions, at most %d supported",
                        p, name, ndim, TENSOR_MAX_DIMS);
    int64_t ne[TENSOR_MAX_DIMS] = {0};
    /* span: bytes of the shape with zero dims skipped; it bounds every
     * stride, which must fit in int64 even when a zero dim makes the
     * tensor empty. */
    uint64_t span = esize;
    bool overflow = false, empty = false;
    int d = 0;
    for (const cJSON *k = js->child; k; k = k->next, d++) {
        uint64_t v;
        if (!json_uint(k, &v))
            return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer",
                            p, name, d);
        ne[d] = (int64_t)v;
        if (v == 0) empty = true;
        else if (__builtin_mul_overflow(span, v, &span) || span > INT64_MAX) overflow = true;
    }
    uint64_t nbytes = empty ? 0 : span;

    uint64_t off[2];
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 || !json_uint(jo->child, &off[0]) ||
        !json_uint(jo->child->next, &off[1]))
        return err_setf(err, CBX_ERR_FORMAT,
                        "%s: tensor '%s': data_offsets must be [begin, end], two non-negative integers", p, name);
    if (off[0] > off[1] || off[1] > st->data_size)
        return err_setf(err, CBX_ERR_FORMAT,
                        "%s: tensor '%s': data_offsets [%llu, %llu] outside the data section of %llu bytes",
                        p, name, (unsigned long long)off[0], (unsigned long long)off[1],
                        (unsigned long long)st->data_size);
    if (overflow || nbytes != off[1] - off[0]) {
        char sh[96], need[32];
        struct tensor tmp = {.ndim = ndim}; /* for the shape text only */
        memcpy(tmp.ne, ne, sizeof ne);
        if (overflow) snprintf(need, sizeof need, "more than 2^63");
        else snprintf(need, sizeof need, "%llu", (unsigned long long)nbytes);
        return err_setf(err, CBX_ERR_FORMAT,
                        "%s: tensor '%s': %s %s needs %s bytes but data_offsets [%llu, %llu] hold %llu", p,
                        name, st_type_name((enum dtype)type), tensor_shape_str(&tmp, sh, sizeof sh), need,
                        (unsigned long long)off[0], (unsigned long long)off[1],
                        (unsigned long long)(off[1] - off[0]));
    }

    st->names[i] = strdup(name);
    if (!st->names[i]) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", p);
    const uint8_t *src = st->data + off[0];
    void *ptr = (void *)(uintptr_t)src;
    if (nbytes && (uintptr_t)src % esize != 0) {
        /* Misaligned for its type: copy, so every tensor is usable in place. */
        st->owned[i] = malloc(nbytes);
        if (!st->owned[i])
            return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory copying misaligned tensor '%s' (%llu bytes)",
                            p, name, (unsigned long long)nbytes);
        memcpy(st->owned[i], src, nbytes);
        ptr = st->owned[i];
    }
    st->t[i] = tensor_make((enum dtype)type, ndim, ne, ptr, NULL);
    st->t[i].name = st->names[i];
    sp->begin = off[0];
    sp->end = off[1];
    sp->index = i;
    return CBX_OK;
}

static cbx_status parse_metadata(struct io_safetensors *st, const cJSON *m, char *err)
{
    if (cJSON_IsNull(m)) return CBX_OK;
    if (!cJSON_IsObject(m))
        return err_setf(err, CBX_ERR_FORMAT, "%s: __metadata__ is not a JSON object", st->path);
    int n = cJSON_GetArraySize(m);
    st->meta_key = calloc((size_t)n + 1, sizeof *st->meta_key);
    st->meta_val = calloc((size_t)n + 1, sizeof *st->meta_val);
    if (!st->meta_key || !st->meta_val) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", st->path);
    for (const cJSON *k = m->child; k; k = k->next) {
        if (!cJSON_IsString(k))
            return err_setf(err, CBX_ERR_FORMAT, "%s: __metadata__ '%.64s' is not a string", st->path, k->string);
        for (int j = 0; j < st->n_meta; j++)
            if (strcmp(st->meta_key[j], k->string) == 0)
                return err_setf(err, CBX_ERR_FORMAT, "%s: __metadata__ key '%.64s' appears twice", st->path,
                                k->string);
        st->meta_key[st->n_meta] = strdup(k->string);
        st->meta_val[st->n_meta] = strdup(k->valuestring);
        st->n_meta++;
        if (!st->meta_key[st->n_meta - 1] || !st->meta_val[st->n_meta - 1])
            return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", st->path);
    }
    return CBX_OK;
}

/* Validate the header of st->buf[0, st->size) and build the index. */
static cbx_status parse(struct io_safetensors *st, char *err)
{
    const char *p = st->path;
    char *hdr = NULL;
    cJSON *root = NULL;
    struct container_span *sp = NULL;
    cbx_status rc = CBX_OK;

    if (st->size < 8)
        return err_setf(err, CBX_ERR_FORMAT, "%s: %zu bytes, too short for the 8-byte header length", p,
                        st->size);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | st->buf[i];
    if (hl > IO_ST_MAX_HEADER || hl > st->size - 8)
        return err_setf(err, CBX_ERR_FORMAT,
                        "%s: header length %llu exceeds the file (%zu bytes) or the %llu-byte limit", p,
                        (unsigned long long)hl, st->size, (unsigned long long)IO_ST_MAX_HEADER);
    if (hl < 2)
        return err_setf(err, CBX_ERR_FORMAT, "%s: header length %llu, too short for a JSON object", p,
                        (unsigned long long)hl);
    st->data = st->buf + 8 + hl;
    st->data_size = st->size - 8 - hl;

    /* cJSON wants a NUL-terminated string; the header is small next to
     * the data, so copy it. */
    hdr = malloc((size_t)hl + 1);
    if (!hdr) { rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory for the header", p); goto cleanup; }
    memcpy(hdr, st->buf + 8, (size_t)hl);
    hdr[hl] = 0;
    if (memchr(hdr, 0, (size_t)hl)) {
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: header contains a NUL byte", p);
        goto cleanup;
    }
    const char *end = NULL;
    root = cJSON_ParseWithOpts(hdr, &end, 0);
    if (!root) {
        /* cJSON sets end to the error position too (GetErrorPtr is a
         * global, racy between threads) */
        size_t pos = end && end >= hdr && end <= hdr + hl ? (size_t)(end - hdr) : 0;
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: header is not valid JSON (near byte %zu of %llu)", p, pos,
                      (unsigned long long)hl);
        goto cleanup;
    }
    for (; end && *end; end++)
        if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
            rc = err_setf(err, CBX_ERR_FORMAT, "%s: trailing bytes after the header JSON at byte %zu", p,
                          (size_t)(end - hdr));
            goto cleanup;
        }
    if (!cJSON_IsObject(root)) {
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: header JSON is not an object", p);
        goto cleanup;
    }

    int total = cJSON_GetArraySize(root), n = 0;
    const cJSON *meta = NULL;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (meta) { rc = err_setf(err, CBX_ERR_FORMAT, "%s: __metadata__ appears twice", p); goto cleanup; }
            meta = e;
        } else {
            n++;
        }
    }
    (void)total;
    st->t = calloc((size_t)n + 1, sizeof *st->t);
    st->names = calloc((size_t)n + 1, sizeof *st->names);
    st->owned = calloc((size_t)n + 1, sizeof *st->owned);
    sp = calloc((size_t)n + 1, sizeof *sp);
    size_t ns = 16;
    while (ns < 2 * (size_t)n) ns <<= 1;
    st->slot = malloc(ns * sizeof *st->slot);
    if (!st->t || !st->names || !st->owned || !sp || !st->slot) {
        rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory for %d tensors", p, n);
        goto cleanup;
    }
    memset(st->slot, 0xff, ns * sizeof *st->slot);
    st->slot_mask = ns - 1;

    int i = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (e == meta) continue;
        st->n = i + 1; /* so close() frees what this entry allocates */
        rc = parse_entry(st, i, e, &sp[i], err);
        if (rc != CBX_OK) goto cleanup;
        if (!hash_insert(st, i)) {
            rc = err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s' appears twice", p, st->names[i]);
            goto cleanup;
        }
        i++;
    }
    if (meta) {
        rc = parse_metadata(st, meta, err);
        if (rc != CBX_OK) goto cleanup;
    }

    rc = container_check_overlap(sp, n, st->t, p, err);

cleanup:
    free(sp);
    cJSON_Delete(root);
    free(hdr);
    return rc;
}

/* A reader over buf[0, n), named name in messages; map and map_len: the
 * mapping it then owns and releases (NULL, 0 for none), also on failure. */
static cbx_status open_buf(const char *name, const void *buf, size_t n, void *map, size_t map_len,
                           struct io_safetensors **out, char *err)
{
    *out = NULL;
    struct io_safetensors *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(name))) {
        free(st);
        if (map) munmap(map, map_len);
        return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", name);
    }
    st->map = map;
    st->map_len = map_len;
    st->buf = buf;
    st->size = n;
    cbx_status rc = parse(st, err);
    if (rc != CBX_OK) {
        io_safetensors_close(st);
        return rc;
    }
    *out = st;
    return CBX_OK;
}

cbx_status io_safetensors_open_memory(const void *buf, size_t n, struct io_safetensors **out, char *err)
{
    return open_buf("<memory>", buf, n, NULL, 0, out, err);
}

cbx_status io_safetensors_open(const char *path, struct io_safetensors **out, char *err)
{
    *out = NULL;
    void *m;
    size_t len;
    cbx_status rc = container_map(path, &m, &len, err);
    if (rc != CBX_OK) return rc;
    return open_buf(path, m ? m : "", len, m, len, out, err); /* "": an empty file, which parse reports */
}

int io_safetensors_count(const struct io_safetensors *st) { return st->n; }

const struct tensor *io_safetensors_tensor(const struct io_safetensors *st, int i)
{
    return i >= 0 && i < st->n ? &st->t[i] : NULL;
}

const struct tensor *io_safetensors_find(const struct io_safetensors *st, const char *name)
{
    size_t h = (size_t)fnv1a(name) & st->slot_mask;
    while (st->slot[h] >= 0) {
        if (strcmp(st->names[st->slot[h]], name) == 0) return &st->t[st->slot[h]];
        h = (h + 1) & st->slot_mask;
    }
    return NULL;
}

const char *io_safetensors_metadata(const struct io_safetensors *st, const char *key)
{
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_key[i], key) == 0) return st->meta_val[i];
    return NULL;
}

int io_safetensors_metadata_count(const struct io_safetensors *st) { return st->n_meta; }

bool io_safetensors_metadata_at(const struct io_safetensors *st, int i, const char **key, const char **value)
{
    if (i < 0 || i >= st->n_meta) return false;
    if (key) *key = st->meta_key[i];
    if (value) *value = st->meta_val[i];
    return true;
}

uint64_t io_safetensors_data_size(const struct io_safetensors *st) { return st->data_size; }

/* ---- writer ----------------------------------------------------------- */

struct io_safetensors_writer {
    struct atomic_file out;
    uint64_t remaining;
    bool failed;
};

struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
};

static void sb_putn(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1) cap *= 2;
        char *s2 = realloc(b->s, cap);
        if (!s2) { b->oom = true; return; }
        b->s = s2;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_puts(struct sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

static void sb_printf(struct sbuf *b, const char *fmt, unsigned long long v)
{
    char tmp[32];
    int k = snprintf(tmp, sizeof tmp, fmt, v);
    sb_putn(b, tmp, (size_t)k);
}

/* A JSON string as Python's json.dumps (ensure_ascii=True) writes it: the
 * short escapes for " \ \n \r \t \b \f, \u00XX for other controls, and
 * \uXXXX (lowercase hex, surrogate pairs above U+FFFF) for non-ASCII.
 * Returns false on invalid UTF-8. */
static bool sb_json_string(struct sbuf *b, const char *s)
{
    const uint8_t *p = (const uint8_t *)s;
    sb_putn(b, "\"", 1);
    while (*p) {
        uint32_t c = *p;
        int len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (!len) return false;
        if (len > 1) {
            c &= 0x3fu >> (len - 1);
            for (int k = 1; k < len; k++) {
                if ((p[k] & 0xc0) != 0x80) return false;
                c = (c << 6) | (p[k] & 0x3fu);
            }
            static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
            if (c < min[len] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return false;
        }
        p += len;
        char tmp[16];
        switch (c) {
        case '"': sb_puts(b, "\\\""); break;
        case '\\': sb_puts(b, "\\\\"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\r': sb_puts(b, "\\r"); break;
        case '\t': sb_puts(b, "\\t"); break;
        case '\b': sb_puts(b, "\\b"); break;
        case '\f': sb_puts(b, "\\f"); break;
        default:
            if (c < 0x20 || c >= 0x80) {
                if (c >= 0x10000) {
                    uint32_t v = c - 0x10000;
                    snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
                } else {
                    snprintf(tmp, sizeof tmp, "\\u%04x", c);
                }
                sb_puts(b, tmp);
            } else {
                char ch = (char)c;
                sb_putn(b, &ch, 1);
            }
        }
    }
    sb_putn(b, "\"", 1);
    return true;
}

void io_safetensors_writer_abort(struct io_safetensors_writer *w)
{
    if (!w) return;
    atomic_file_abort(&w->out);
    free(w);
}

cbx_status io_safetensors_writer_open(const char *path, int n, const struct io_st_entry *entries, int n_meta,
                                      const struct io_st_kv *meta, struct io_safetensors_writer **out,
                                      char *err)
{
    struct sbuf b = {0};
    struct io_safetensors_writer *w = NULL;
    cbx_status rc = CBX_OK;
    *out = NULL;
    if (n < 0 || n_meta < 0 || (n > 0 && !entries) || (n_meta > 0 && !meta))
        return err_setf(err, CBX_ERR_INVALID_ARG, "%s: bad tensor or metadata count", path);

    uint64_t off = 0;
    sb_putn(&b, "{", 1);
    for (int i = 0; i < n; i++) {
        const struct io_st_entry *e = &entries[i];
        const char *tn = st_type_name(e->type);
        if (!e->name || !e->name[0] || strcmp(e->name, "__metadata__") == 0) {
            rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: tensor %d: name '%s' not allowed", path, i,
                          e->name ? e->name : "(null)");
            goto cleanup;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(entries[j].name, e->name) == 0) {
                rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: tensor '%s' given twice", path, e->name);
                goto cleanup;
            }
        if (!tn) {
            rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: tensor '%s': type %s cannot be stored in safetensors",
                          path, e->name, dtype_name(e->type));
            goto cleanup;
        }
        if (e->ndim < 0 || e->ndim > TENSOR_MAX_DIMS) {
            rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: tensor '%s': ndim %d not in 0..%d", path, e->name,
                          e->ndim, TENSOR_MAX_DIMS);
            goto cleanup;
        }
        uint64_t nb = dtype_traits(e->type)->size, span = nb;
        for (int d = 0; d < e->ndim; d++)
            if (e->ne[d] < 0 || (e->ne[d] && (__builtin_mul_overflow(span, (uint64_t)e->ne[d], &span) ||
                                              span > INT64_MAX))) {
                rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: tensor '%s': bad shape", path, e->name);
                goto cleanup;
            } else {
                nb *= (uint64_t)e->ne[d]; /* <= span, or 0 */
            }
        if (i) sb_putn(&b, ",", 1);
        if (!sb_json_string(&b, e->name)) {
            rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: tensor %d: name is not valid UTF-8", path, i);
            goto cleanup;
        }
        sb_puts(&b, ":{\"dtype\":\"");
        sb_puts(&b, tn);
        sb_puts(&b, "\",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) sb_printf(&b, d ? ",%llu" : "%llu", (unsigned long long)e->ne[d]);
        sb_printf(&b, "],\"data_offsets\":[%llu,", off);
        if (__builtin_add_overflow(off, nb, &off)) {
            rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: total data size overflows", path);
            goto cleanup;
        }
        sb_printf(&b, "%llu]}", off);
    }
    sb_puts(&b, n ? ",\"__metadata__\":{" : "\"__metadata__\":{");
    if (n_meta == 0) {
        sb_puts(&b, "\"format\":\"pt\"");
    }
    for (int i = 0; i < n_meta; i++) {
        if (i) sb_putn(&b, ",", 1);
        if (!meta[i].key || !meta[i].value || !sb_json_string(&b, meta[i].key)) goto bad_meta;
        sb_putn(&b, ":", 1);
        if (!sb_json_string(&b, meta[i].value)) goto bad_meta;
        for (int j = 0; j < i; j++)
            if (strcmp(meta[j].key, meta[i].key) == 0) goto bad_meta;
    }
    sb_puts(&b, "}}");
    while (!b.oom && b.n % 8) sb_putn(&b, " ", 1);
    if (b.oom) { rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory for the header", path); goto cleanup; }

    w = calloc(1, sizeof *w);
    if (!w) {
        rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", path);
        goto cleanup;
    }
    if ((rc = atomic_file_open(&w->out, path, err)) != CBX_OK) goto cleanup;
    uint8_t len8[8];
    for (int k = 0; k < 8; k++) len8[k] = (uint8_t)((uint64_t)b.n >> (8 * k));
    if (fwrite(len8, 1, 8, w->out.f) != 8 || fwrite(b.s, 1, b.n, w->out.f) != b.n) {
        rc = err_setf(err, CBX_ERR_IO, "%s: write failed: %s", w->out.tmp, strerror(errno));
        goto cleanup;
    }
    w->remaining = off;
    *out = w;
    w = NULL;
    goto cleanup;

bad_meta:
    rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: metadata entry has a NULL, duplicate or non-UTF-8 key/value",
                  path);
cleanup:
    io_safetensors_writer_abort(w);
    free(b.s);
    return rc;
}

cbx_status io_safetensors_writer_write(struct io_safetensors_writer *w, const void *bytes, size_t n, char *err)
{
    if (w->failed) return err_setf(err, CBX_ERR_IO, "%s: writer already failed", w->out.path);
    if (n > w->remaining) {
        w->failed = true;
        return err_setf(err, CBX_ERR_INVALID_ARG, "%s: %zu bytes written past the announced data (%llu left)",
                        w->out.path, n, (unsigned long long)w->remaining);
    }
    if (n && fwrite(bytes, 1, n, w->out.f) != n) {
        w->failed = true;
        return err_setf(err, CBX_ERR_IO, "%s: write failed: %s", w->out.tmp, strerror(errno));
    }
    w->remaining -= n;
    return CBX_OK;
}

uint64_t io_safetensors_writer_remaining(const struct io_safetensors_writer *w) { return w->remaining; }

cbx_status io_safetensors_writer_close(struct io_safetensors_writer *w, char *err)
{
    if (!w) return CBX_OK;
    cbx_status rc = CBX_OK;
    if (w->failed) {
        rc = err_setf(err, CBX_ERR_IO, "%s: not written (an earlier write failed)", w->out.path);
    } else if (w->remaining) {
        rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: %llu bytes of tensor data missing", w->out.path,
                      (unsigned long long)w->remaining);
    } else {
        rc = atomic_file_commit(&w->out, err);
    }
    io_safetensors_writer_abort(w);
    return rc;
}

cbx_status io_safetensors_write(const char *path, int n, const struct tensor *const *t, int n_meta,
                                const struct io_st_kv *meta, char *err)
{
    struct io_st_entry *e = calloc((size_t)n + 1, sizeof *e);
    struct io_safetensors_writer *w = NULL;
    cbx_status rc = CBX_OK;
    if (!e) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < n; i++) {
        if (!tensor_is_contiguous(t[i]) || t[i]->be) {
            rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: tensor '%s' is not contiguous host memory", path,
                          t[i]->name ? t[i]->name : "?");
            goto cleanup;
        }
        e[i].name = t[i]->name;
        e[i].type = t[i]->type;
        e[i].ndim = t[i]->ndim;
        memcpy(e[i].ne, t[i]->ne, sizeof e[i].ne);
    }
    rc = io_safetensors_writer_open(path, n, e, n_meta, meta, &w, err);
    for (int i = 0; rc == CBX_OK && i < n; i++)
        rc = io_safetensors_writer_write(w, t[i]->data, tensor_nbytes(t[i]), err);
    if (rc == CBX_OK) {
        rc = io_safetensors_writer_close(w, err);
    } else {
        io_safetensors_writer_abort(w);
    }
cleanup:
    free(e);
    return rc;
}
