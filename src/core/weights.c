/* weights.c - the weight set: host memory, descriptors, placement (see
 * weights.h). */
#include "weights.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>

#include "backend.h"
#include "quant.h"

#define HUGE_PAGE ((size_t)2 << 20)
#define BLOCK_BYTES ((size_t)32 << 20)       /* plain blocks shared by smaller requests */
#define HUGE_BLOCK_BYTES ((size_t)128 << 20) /* huge-page blocks: few, so few partly
                                              * used huge pages at their ends */
#define DESC_PER_CHUNK 256

struct host_block {
    struct host_block *next;
    char *base;
    size_t size, used;
    bool huge;
};

struct desc_chunk {
    struct desc_chunk *next;
    int n;
    struct tensor t[DESC_PER_CHUNK];
};

struct weight_set {
    const struct backend *be;
    struct host_block *blocks; /* newest first */
    struct desc_chunk *descs;  /* newest first */
    size_t host_bytes;
};

struct weight_set *weight_set_create(const struct backend *be)
{
    if (!be) return NULL;
    struct weight_set *s = calloc(1, sizeof *s);
    if (s) s->be = be;
    return s;
}

void weight_set_free(struct weight_set *s)
{
    if (!s) return;
    for (struct desc_chunk *c = s->descs; c;) {
        for (int i = 0; i < c->n; i++)
            if (c->t[i].extra && s->be->release_weight) s->be->release_weight(s->be, &c->t[i]);
        struct desc_chunk *n = c->next;
        free(c);
        c = n;
    }
    for (struct host_block *b = s->blocks; b;) {
        struct host_block *n = b->next;
        free(b->base);
        free(b);
        b = n;
    }
    free(s);
}

const struct backend *weight_set_backend(const struct weight_set *s) { return s->be; }

size_t weight_set_host_bytes(const struct weight_set *s) { return s ? s->host_bytes : 0; }

void weight_drop_source(const struct tensor *src)
{
    if (!src || !src->data) return;
    const uintptr_t p = (uintptr_t)src->data, nb = tensor_nbytes(src);
    const uintptr_t a = (p + 4095) & ~(uintptr_t)4095, e = (p + nb) & ~(uintptr_t)4095;
    if (e > a) (void)madvise((void *)a, e - a, MADV_DONTNEED);
}

static struct host_block *new_block(struct weight_set *s, size_t size, bool huge)
{
    struct host_block *b = malloc(sizeof *b);
    if (!b) return NULL;
    b->base = huge ? aligned_alloc(HUGE_PAGE, size) : aligned_alloc(64, size);
    if (!b->base) {
        free(b);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    /* transparent huge pages for decode weights: the decode streams them
     * once per token, and with 4 KiB pages every 4 KiB costs a TLB miss
     * (bench_e2e, Q4_0 Turbo GGUF: T3 250 tokens 3.00 / 2.96 s with,
     * 3.96 / 3.78 s without; a fresh load 0.34-0.36 s with, 0.37-0.45 s
     * without). Not for the rest: a partly used huge page would count
     * whole in resident memory. Advisory only. */
    if (huge) (void)madvise(b->base, size, MADV_HUGEPAGE);
#endif
    b->size = size;
    b->used = 0;
    b->huge = huge;
    b->next = s->blocks;
    s->blocks = b;
    return b;
}

void *weight_set_host(struct weight_set *s, size_t n, bool huge)
{
    n = (n + 63) & ~(size_t)63;
    if (!n) n = 64;
    /* a fit in a block of the kind asked for (requests are few: a linear scan) */
    for (struct host_block *b = s->blocks; b; b = b->next)
        if (b->huge == huge && b->size - b->used >= n) {
            void *p = b->base + b->used;
            b->used += n;
            s->host_bytes += n;
            return p;
        }
    /* large requests get their own block (whole huge pages when huge) */
    const size_t bs = huge ? HUGE_BLOCK_BYTES : BLOCK_BYTES;
    const size_t size = n >= bs / 2 ? (huge ? (n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE : n) : bs;
    struct host_block *b = new_block(s, size, huge);
    if (!b) return NULL;
    b->used = n;
    s->host_bytes += n;
    return b->base;
}

bool weight_set_owns(const struct weight_set *s, const void *p)
{
    const char *c = p;
    for (const struct host_block *b = s->blocks; b; b = b->next)
        if (c >= b->base && c < b->base + b->used) return true;
    return false;
}

static struct tensor *new_desc(struct weight_set *s)
{
    if (!s->descs || s->descs->n == DESC_PER_CHUNK) {
        struct desc_chunk *c = malloc(sizeof *c);
        if (!c) return NULL;
        c->n = 0;
        c->next = s->descs;
        s->descs = c;
    }
    struct tensor *t = &s->descs->t[s->descs->n++];
    memset(t, 0, sizeof *t);
    return t;
}

static bool convertible(int t)
{
    const struct dtype_traits *tr = dtype_traits(t);
    return tr && (t == TYPE_F32 || t == TYPE_F16 || t == TYPE_BF16 || tr->quantized);
}

/* element (i) of a plain F32/F16/BF16 tensor at p */
static float plain_at(enum dtype t, const char *p)
{
    if (t == TYPE_F32) {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return t == TYPE_F16 ? fp16_to_f32(h) : bf16_to_f32(h);
}

/* src [in, out] (F32/F16/BF16) -> dst [out, in] rows of wtype */
static void transpose_rows(const struct tensor *src, enum dtype wtype, char *dst, float *row)
{
    const int64_t in = src->ne[0], out = src->ne[1];
    const size_t rs = dtype_row_size(wtype, in);
    for (int64_t o = 0; o < out; o++) {
        for (int64_t i = 0; i < in; i++)
            row[i] = plain_at(src->type, (const char *)src->data + i * src->nb[0] + o * src->nb[1]);
        quantize_row(wtype, row, dst + (size_t)o * rs, in);
    }
}

/* src (contiguous rows) -> dst rows of wtype, through floats */
static void convert_rows(const struct tensor *src, enum dtype wtype, char *dst, float *row)
{
    const int64_t in = src->ndim ? src->ne[src->ndim - 1] : 1, rows = tensor_nrows(src);
    const size_t rs = dtype_row_size(wtype, in);
    const int64_t sstride = src->ndim >= 2 ? src->nb[src->ndim - 2] : 0;
    for (int64_t r = 0; r < rows; r++) {
        dequantize_row(src->type, (const char *)src->data + r * sstride, row, in);
        quantize_row(wtype, row, dst + (size_t)r * rs, in);
    }
}

/* Rows inside a tensor must be contiguous and rows evenly spaced (what
 * every weight source gives; a view would need a gather). */
static bool rows_regular(const struct tensor *t)
{
    if (t->ndim <= 1) return tensor_is_contiguous(t);
    const struct dtype_traits *tr = dtype_traits(t->type);
    if (!tr->quantized && t->nb[t->ndim - 1] != (int64_t)tr->size) return false;
    for (int d = 0; d + 2 < t->ndim; d++)
        if (t->nb[d] != t->nb[d + 1] * t->ne[d + 1]) return false;
    return true;
}

const struct tensor *weight_place(struct weight_set *s, const struct tensor *src, enum weight_role role,
                                  int wtype, unsigned flags, cbx_status *rc, char *err)
{
    if (!src || *rc != CBX_OK) return NULL;
    const bool tr = flags & WEIGHT_TRANSPOSE;
    const int want = wtype == WEIGHT_AS_STORED ? (int)src->type : wtype;
    if (!convertible(src->type) || !convertible(want) || (tr && (src->ndim != 2 || dtype_traits(src->type)->quantized))) {
        *rc = err_setf(err, CBX_ERR_INVALID_ARG, "weights: cannot place %s (%s%s) as %s", src->name ? src->name : "tensor",
                       dtype_name(src->type), tr ? ", transposed" : "", dtype_name(want));
        return NULL;
    }
    struct tensor *t = new_desc(s);
    if (!t) goto nomem;
    *t = *src;
    t->extra = NULL;
    if (tr || want != (int)src->type) {
        int64_t ne[TENSOR_MAX_DIMS];
        memcpy(ne, src->ne, sizeof ne);
        if (tr) ne[0] = src->ne[1], ne[1] = src->ne[0];
        const int64_t in = src->ndim ? ne[src->ndim - 1] : 1;
        if (in % dtype_traits(want)->blck || (!tr && !rows_regular(src))) {
            *rc = err_setf(err, CBX_ERR_INVALID_ARG, "weights: %s rows of %lld cannot be held as %s",
                           src->name ? src->name : "tensor", (long long)in, dtype_name(want));
            s->descs->n--;
            return NULL;
        }
        *t = tensor_make((enum dtype)want, src->ndim, ne, NULL, NULL);
        t->name = src->name;
        char *dst = weight_set_host(s, tensor_nbytes(t), flags & WEIGHT_DECODE);
        float *row = malloc(sizeof(float) * (size_t)(in > 0 ? in : 1));
        if (!dst || !row) {
            free(row);
            s->descs->n--;
            goto nomem;
        }
        if (tr) transpose_rows(src, (enum dtype)want, dst, row);
        else convert_rows(src, (enum dtype)want, dst, row);
        free(row);
        t->data = dst;
    }
    const struct backend *be = s->be;
    if (be->prepare_weight) {
        cbx_status r = be->prepare_weight(be, s, t, role, flags, err);
        if (r != CBX_OK) {
            *rc = r;
            return NULL;
        }
    } else if (!be->host) {
        *rc = err_setf(err, CBX_ERR_UNSUPPORTED, "weights: backend %s cannot hold weights", be->name);
        return NULL;
    }
    return t;
nomem:
    *rc = err_setf(err, CBX_ERR_NOMEM, "weights: out of memory placing %s", src->name ? src->name : "a tensor");
    return NULL;
}

struct tensor *weight_new(struct weight_set *s, enum dtype type, int ndim, const int64_t *ne, const char *name,
                          cbx_status *rc, char *err)
{
    if (*rc != CBX_OK) return NULL;
    struct tensor t = tensor_make(type, ndim, ne, NULL, NULL);
    void *p = weight_set_host(s, tensor_nbytes(&t), false);
    struct tensor *d = p ? new_desc(s) : NULL;
    if (!d) {
        *rc = err_setf(err, CBX_ERR_NOMEM, "weights: out of memory for %s", name ? name : "a derived weight");
        return NULL;
    }
    t.data = p;
    t.name = name;
    *d = t;
    return d;
}
