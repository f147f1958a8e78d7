/* torch_pt.c - PyTorch torch.save zip archives of tensor dicts: a strict
 * restricted unpickler (reader) and the value builders; the writer is
 * tools/lib/torch_pt_write.c (not part of the library).
 * Format: spec/checkpoint-format.md §1.2; the opcodes are those of Python's
 * pickle protocols 2-5 (Lib/pickletools.py documents each), the globals
 * those torch.save emits for tensors (torch/_utils.py _rebuild_tensor_v2,
 * torch/serialization.py persistent_id). Limits are in torch_pt.h.
 *
 * Reader invariants:
 *  1. Nothing from the pickle is ever called: REDUCE only knows
 *     OrderedDict(), _rebuild_tensor(_v2)(...); every other global is
 *     refused when it is named (GLOBAL / STACK_GLOBAL).
 *  2. The value graph is acyclic: a value placed into a container becomes
 *     frozen and a frozen container cannot be mutated (the pickler always
 *     fills a container before its parent takes it, so valid pickles never
 *     hit this), and a container cannot take itself.
 *  3. Sharing (BINGET) is by reference count, and every container tracks
 *     its height and its value count with sharing counted, both capped, so
 *     any walk of a returned tree is bounded.
 *  4. Tensor data is read after STOP, storage by storage, each storage
 *     once; a tensor that covers its whole storage contiguously and is its
 *     last user takes the buffer without a copy. */
#include "torch_pt.h"
#include "torch_pt_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>

#define PKL_MAX ((size_t)256 << 20)
#define STR_MAX ((size_t)1 << 20)
#define STACK_MAX ((size_t)1 << 20)
#define MEMO_MAX ((size_t)1 << 20)
#define COUNT_MAX ((int64_t)1 << 24)
#define DIM_MAX ((int64_t)1 << 40)
#define NUMEL_MAX ((int64_t)1 << 50)
#define CHUNK ((size_t)4 << 20)

/* reader-only objects (pt_value.ikind_) */
enum {
    IK_ORDEREDDICT = 1, /* the global collections.OrderedDict */
    IK_REBUILD_V2,      /* torch._utils._rebuild_tensor_v2 */
    IK_REBUILD,         /* torch._utils._rebuild_tensor */
    IK_STORAGE_CLS,     /* torch.<T>Storage; u.i = enum dtype */
    IK_STORAGE,         /* a persistent-id storage; u.i = index in rd.st */
};

static const struct { const char *name; enum dtype type; } storage_classes[PT_N_STORAGE_CLASSES] = {
    {"FloatStorage", TYPE_F32}, {"DoubleStorage", TYPE_F64},
    {"HalfStorage", TYPE_F16},  {"BFloat16Storage", TYPE_BF16},
    {"LongStorage", TYPE_I64},  {"IntStorage", TYPE_I32},
    {"ShortStorage", TYPE_I16}, {"CharStorage", TYPE_I8},
    {"ByteStorage", TYPE_U8},   {"BoolStorage", TYPE_BOOL},
};

size_t pt_elsize(enum dtype t)
{
    switch (t) {
    case TYPE_F64: case TYPE_I64: return 8;
    case TYPE_F32: case TYPE_I32: return 4;
    case TYPE_F16: case TYPE_BF16: case TYPE_I16: return 2;
    case TYPE_I8: case TYPE_U8: case TYPE_BOOL: return 1;
    default: return 0;
    }
}

int pt_storage_class_index(enum dtype t)
{
    for (size_t i = 0; i < sizeof storage_classes / sizeof *storage_classes; i++)
        if (storage_classes[i].type == t) return (int)i;
    return -1;
}

const char *pt_storage_class_name(enum dtype t)
{
    for (size_t i = 0; i < sizeof storage_classes / sizeof *storage_classes; i++)
        if (storage_classes[i].type == t) return storage_classes[i].name;
    return NULL;
}

/* ------------------------------------------------------------------ values */

static struct pt_value *val_new(enum pt_kind k)
{
    struct pt_value *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->kind = k;
    v->refs_ = 1;
    v->count_ = 1;
    return v;
}

static struct pt_value *val_ref(struct pt_value *v)
{
    v->refs_++;
    return v;
}

void pt_value_free(struct pt_value *v)
{
    if (!v || --v->refs_ > 0) return;
    switch (v->kind) {
    case PT_STR: free(v->u.str.s); break;
    case PT_TENSOR: if (v->u.t.owned) free(v->u.t.data); break;
    case PT_LIST: case PT_TUPLE:
        for (size_t i = 0; i < v->u.seq.n; i++) pt_value_free(v->u.seq.v[i]);
        free(v->u.seq.v);
        break;
    case PT_DICT:
        for (size_t i = 0; i < v->u.dict.n; i++) {
            free(v->u.dict.k[i]);
            pt_value_free(v->u.dict.v[i]);
        }
        free(v->u.dict.k);
        free(v->u.dict.v);
        break;
    default: break;
    }
    free(v);
}

/* Account for item joining container c (invariants 2 and 3). Returns a
 * static message on violation, NULL when fine. */
static const char *adopt_check(const struct pt_value *c, const struct pt_value *item)
{
    if (item == c) return "a container cannot contain itself";
    if (item->height_ + 1 > PT_DEPTH_MAX) return "nesting deeper than 64 levels";
    if (c->count_ + item->count_ > COUNT_MAX) return "more than 16M values in one tree";
    return NULL;
}

static void adopt(struct pt_value *c, struct pt_value *item)
{
    item->frozen_ = true;
    c->internal_ |= item->internal_ || item->kind == PT_INTERNAL_;
    if (item->height_ + 1 > c->height_) c->height_ = item->height_ + 1;
    c->count_ += item->count_;
}

bool pt_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap : 8;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

static bool seq_push(struct pt_value *s, struct pt_value *item)
{
    if (!pt_grow((void **)&s->u.seq.v, &s->u.seq.cap, s->u.seq.n + 1, sizeof *s->u.seq.v))
        return false;
    s->u.seq.v[s->u.seq.n++] = item;
    adopt(s, item);
    return true;
}

/* Set key (copied) to val (reference taken over) in d. */
static bool dict_put(struct pt_value *d, const char *key, size_t klen, struct pt_value *val)
{
    for (size_t i = 0; i < d->u.dict.n; i++)
        if (strlen(d->u.dict.k[i]) == klen && memcmp(d->u.dict.k[i], key, klen) == 0) {
            /* counts/heights stay conservative (never decrease): still bounded */
            pt_value_free(d->u.dict.v[i]);
            d->u.dict.v[i] = val;
            adopt(d, val);
            return true;
        }
    size_t cap = d->u.dict.cap;
    if (!pt_grow((void **)&d->u.dict.k, &cap, d->u.dict.n + 1, sizeof *d->u.dict.k)) return false;
    cap = d->u.dict.cap;
    if (!pt_grow((void **)&d->u.dict.v, &cap, d->u.dict.n + 1, sizeof *d->u.dict.v)) return false;
    d->u.dict.cap = cap;
    char *k = malloc(klen + 1);
    if (!k) return false;
    memcpy(k, key, klen);
    k[klen] = 0;
    d->u.dict.k[d->u.dict.n] = k;
    d->u.dict.v[d->u.dict.n++] = val;
    adopt(d, val);
    return true;
}

/* ---------------------------------------------------------------- builders */

struct pt_value *pt_none(void) { return val_new(PT_NONE); }

struct pt_value *pt_bool(bool b)
{
    struct pt_value *v = val_new(PT_BOOL);
    if (v) v->u.b = b;
    return v;
}

struct pt_value *pt_int(int64_t i)
{
    struct pt_value *v = val_new(PT_INT);
    if (v) v->u.i = i;
    return v;
}

struct pt_value *pt_float(double f)
{
    struct pt_value *v = val_new(PT_FLOAT);
    if (v) v->u.f = f;
    return v;
}

static struct pt_value *str_new(const char *s, size_t len)
{
    struct pt_value *v = val_new(PT_STR);
    if (!v) return NULL;
    v->u.str.s = malloc(len + 1);
    if (!v->u.str.s) { free(v); return NULL; }
    memcpy(v->u.str.s, s, len);
    v->u.str.s[len] = 0;
    v->u.str.len = len;
    return v;
}

struct pt_value *pt_str(const char *s) { return s ? str_new(s, strlen(s)) : NULL; }
struct pt_value *pt_list_new(void) { return val_new(PT_LIST); }
struct pt_value *pt_tuple_new(void) { return val_new(PT_TUPLE); }

struct pt_value *pt_dict_new(bool ordered)
{
    struct pt_value *v = val_new(PT_DICT);
    if (v) v->u.dict.ordered = ordered;
    return v;
}

cbx_status pt_append(struct pt_value *seq, struct pt_value *item)
{
    if (!item) return CBX_ERR_NOMEM;
    if (!seq || (seq->kind != PT_LIST && seq->kind != PT_TUPLE) || item == seq) {
        pt_value_free(item);
        return seq ? CBX_ERR_INVALID_ARG : CBX_ERR_NOMEM;
    }
    if (!seq_push(seq, item)) { pt_value_free(item); return CBX_ERR_NOMEM; }
    return CBX_OK;
}

cbx_status pt_dict_set(struct pt_value *d, const char *key, struct pt_value *val)
{
    if (!val) return CBX_ERR_NOMEM;
    if (!d || d->kind != PT_DICT || !key || val == d) {
        pt_value_free(val);
        return d ? CBX_ERR_INVALID_ARG : CBX_ERR_NOMEM;
    }
    if (!dict_put(d, key, strlen(key), val)) { pt_value_free(val); return CBX_ERR_NOMEM; }
    return CBX_OK;
}

/* Shape checks shared by the builders; returns nbytes or SIZE_MAX. */
size_t pt_shape_bytes(enum dtype type, int ndim, const int64_t *ne)
{
    size_t es = pt_elsize(type);
    if (!es || ndim < 0 || ndim > TENSOR_MAX_DIMS || (ndim && !ne)) return SIZE_MAX;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (ne[i] < 0 || ne[i] > DIM_MAX || __builtin_mul_overflow(n, ne[i], &n) || n > NUMEL_MAX)
            return SIZE_MAX;
    }
    return (size_t)n * es;
}

static struct pt_value *tensor_val(enum dtype type, int ndim, const int64_t *ne, size_t nbytes)
{
    struct pt_value *v = val_new(PT_TENSOR);
    if (!v) return NULL;
    v->u.t.type = type;
    v->u.t.ndim = ndim;
    for (int i = 0; i < ndim; i++) v->u.t.ne[i] = ne[i];
    v->u.t.nbytes = nbytes;
    return v;
}

struct pt_value *pt_tensor_new(enum dtype type, int ndim, const int64_t *ne, const void *data)
{
    size_t nb = pt_shape_bytes(type, ndim, ne);
    if (nb == SIZE_MAX) return NULL;
    struct pt_value *v = tensor_val(type, ndim, ne, nb);
    if (!v) return NULL;
    v->u.t.data = nb ? (data ? malloc(nb) : calloc(1, nb)) : NULL;
    if (nb && !v->u.t.data) { free(v); return NULL; }
    if (nb && data) memcpy(v->u.t.data, data, nb);
    v->u.t.owned = true;
    return v;
}

struct pt_value *pt_tensor_borrow(enum dtype type, int ndim, const int64_t *ne, const void *data)
{
    size_t nb = pt_shape_bytes(type, ndim, ne);
    if (nb == SIZE_MAX) return NULL;
    struct pt_value *v = tensor_val(type, ndim, ne, nb);
    if (v) v->u.t.data = (void *)data;
    return v;
}

/* ------------------------------------------------------------------ lookup */

const struct pt_value *pt_dict_get(const struct pt_value *d, const char *key)
{
    if (!d || d->kind != PT_DICT || !key) return NULL;
    for (size_t i = 0; i < d->u.dict.n; i++)
        if (strcmp(d->u.dict.k[i], key) == 0) return d->u.dict.v[i];
    return NULL;
}

const struct pt_value *pt_get_path(const struct pt_value *root, const char *path)
{
    if (!root || !path) return NULL;
    if (!*path) return root;
    if (root->kind == PT_DICT) {
        const struct pt_value *exact = pt_dict_get(root, path);
        if (exact) return exact;
        for (size_t i = 0; i < root->u.dict.n; i++) {
            size_t kl = strlen(root->u.dict.k[i]);
            if (strncmp(path, root->u.dict.k[i], kl) == 0 && path[kl] == '.') {
                const struct pt_value *r = pt_get_path(root->u.dict.v[i], path + kl + 1);
                if (r) return r;
            }
        }
        return NULL;
    }
    if (root->kind == PT_LIST || root->kind == PT_TUPLE) {
        char *end;
        unsigned long long i = strtoull(path, &end, 10);
        if (end == path || (*end && *end != '.') || i >= root->u.seq.n) return NULL;
        return pt_get_path(root->u.seq.v[i], *end ? end + 1 : end);
    }
    return NULL;
}

size_t pt_len(const struct pt_value *v)
{
    if (!v) return 0;
    if (v->kind == PT_LIST || v->kind == PT_TUPLE) return v->u.seq.n;
    if (v->kind == PT_DICT) return v->u.dict.n;
    return 0;
}

const char *pt_dict_key(const struct pt_value *d, size_t i)
{
    return d && d->kind == PT_DICT && i < d->u.dict.n ? d->u.dict.k[i] : NULL;
}

const struct pt_value *pt_item(const struct pt_value *v, size_t i)
{
    if (!v) return NULL;
    if ((v->kind == PT_LIST || v->kind == PT_TUPLE) && i < v->u.seq.n) return v->u.seq.v[i];
    if (v->kind == PT_DICT && i < v->u.dict.n) return v->u.dict.v[i];
    return NULL;
}

const struct pt_tensor *pt_as_tensor(const struct pt_value *v)
{
    return v && v->kind == PT_TENSOR ? &v->u.t : NULL;
}

struct tensor pt_tensor_view(const struct pt_tensor *t)
{
    return tensor_make(t->type, t->ndim, t->ne, t->data, NULL);
}

void *pt_tensor_take_data(struct pt_value *v)
{
    if (!v || v->kind != PT_TENSOR || !v->u.t.owned) return NULL;
    void *d = v->u.t.data;
    v->u.t.data = NULL;
    v->u.t.owned = false;
    return d;
}

/* Depth-first walk with dotted names built in a growing buffer. */
bool pt_name_push(struct pt_namebuf *nb, const char *part, size_t *saved)
{
    *saved = nb->len;
    size_t pl = strlen(part), need = nb->len + (nb->len ? 1 : 0) + pl + 1;
    if (!pt_grow((void **)&nb->s, &nb->cap, need, 1)) { nb->oom = true; return false; }
    if (nb->len) nb->s[nb->len++] = '.';
    memcpy(nb->s + nb->len, part, pl + 1);
    nb->len += pl;
    return true;
}

static int walk(const struct pt_value *v, struct pt_namebuf *nb, pt_tensor_fn fn, void *user)
{
    if (v->kind == PT_TENSOR) return fn(user, nb->s ? nb->s : "", v);
    size_t n = pt_len(v);
    for (size_t i = 0; i < n; i++) {
        char idx[24];
        const char *part = v->kind == PT_DICT ? v->u.dict.k[i] : idx;
        if (v->kind != PT_DICT) snprintf(idx, sizeof idx, "%zu", i);
        size_t saved;
        if (!pt_name_push(nb, part, &saved)) return -1;
        int r = walk(pt_item(v, i), nb, fn, user);
        nb->len = saved;
        nb->s[saved] = 0;
        if (r) return r;
    }
    return 0;
}

int pt_foreach_tensor(const struct pt_value *root, pt_tensor_fn fn, void *user)
{
    if (!root || !fn) return 0;
    struct pt_namebuf nb = {0};
    int r = walk(root, &nb, fn, user);
    free(nb.s);
    return r;
}

/* ------------------------------------------------------------------ reader */

struct storage {
    char *key;
    enum dtype type;
    int64_t numel;
    int64_t uses;
};

struct pending {
    struct pt_value *v; /* the tensor value (one reference held) */
    size_t st;          /* storage index */
    size_t seq;         /* creation order, for a stable sort */
    int64_t off;        /* storage offset in elements */
    int64_t stride[TENSOR_MAX_DIMS]; /* element strides */
};

struct rd {
    const char *name;
    char *err;
    zip_t *za;
    char *dir;                  /* "<dir>/" */
    const uint8_t *p;           /* the pickle */
    size_t n, pos, at;          /* size, cursor, offset of the current opcode */
    struct pt_value **stack;
    size_t sp, scap;
    size_t *marks;
    size_t nmarks, mcap;
    struct pt_value **memo;
    size_t memo_cap, memo_len;
    struct storage *st;
    size_t nst, stcap;
    struct pending *pend;
    size_t npend, pcap;
};

static cbx_status fail(struct rd *r, cbx_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "<file>: data.pkl offset N: <what>" while unpickling, else "<file>: <what>". */
static cbx_status fail(struct rd *r, cbx_status s, const char *fmt, ...)
{
    char msg[ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->p) return err_setf(r->err, s, "%s: data.pkl offset %zu: %s", r->name, r->at, msg);
    return err_setf(r->err, s, "%s: %s", r->name, msg);
}

/* Copy s into out as printable ASCII (for messages about untrusted names). */
static const char *printable(const char *s, size_t n, char *out, size_t cap)
{
    size_t j = 0;
    for (size_t i = 0; i < n && j + 4 < cap; i++)
        out[j++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    if (n && j + 4 >= cap) { memcpy(out + j, "...", 3); j += 3; }
    out[j] = 0;
    return out;
}

static bool utf8_ok(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp;
        if (c == 0) return false; /* keys are C strings */
        if (c < 0x80) { i++; continue; }
        if ((c & 0xe0) == 0xc0) { k = 1; cp = c & 0x1f; }
        else if ((c & 0xf0) == 0xe0) { k = 2; cp = c & 0x0f; }
        else if ((c & 0xf8) == 0xf0) { k = 3; cp = c & 0x07; }
        else return false;
        if (n - i <= k) return false;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000))
            return false;
        i += k + 1;
    }
    return true;
}

static size_t base(const struct rd *r) { return r->nmarks ? r->marks[r->nmarks - 1] : 0; }

static cbx_status need(struct rd *r, size_t k)
{
    if (r->n - r->pos < k) return fail(r, CBX_ERR_FORMAT, "pickle truncated");
    return CBX_OK;
}

static uint64_t rd_le(const uint8_t *p, int k)
{
    uint64_t v = 0;
    for (int i = k - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Push v (reference taken over; NULL = out of memory). */
static cbx_status push(struct rd *r, struct pt_value *v)
{
    if (!v) return fail(r, CBX_ERR_NOMEM, "out of memory");
    if (r->sp + r->nmarks >= STACK_MAX) {
        pt_value_free(v);
        return fail(r, CBX_ERR_FORMAT, "pickle stack deeper than %zu", STACK_MAX);
    }
    if (!pt_grow((void **)&r->stack, &r->scap, r->sp + 1, sizeof *r->stack)) {
        pt_value_free(v);
        return fail(r, CBX_ERR_NOMEM, "out of memory");
    }
    r->stack[r->sp++] = v;
    return CBX_OK;
}

/* Ensure k values above the current mark. */
static cbx_status avail(struct rd *r, size_t k, const char *op)
{
    if (r->sp - base(r) < k) return fail(r, CBX_ERR_FORMAT, "stack underflow in %s", op);
    return CBX_OK;
}

static cbx_status pop_mark(struct rd *r, size_t *k, const char *op)
{
    if (!r->nmarks) return fail(r, CBX_ERR_FORMAT, "%s without MARK", op);
    *k = r->marks[--r->nmarks];
    return CBX_OK;
}

static struct pt_value *internal_new(int ikind, int64_t payload)
{
    struct pt_value *v = val_new(PT_INTERNAL_);
    if (v) {
        v->ikind_ = ikind;
        v->internal_ = true;
        v->u.i = payload;
    }
    return v;
}

/* Build a tuple or list from stack[from..sp) and push it. */
static cbx_status collect(struct rd *r, size_t from, enum pt_kind kind)
{
    struct pt_value *t = val_new(kind);
    if (!t) return fail(r, CBX_ERR_NOMEM, "out of memory");
    for (size_t i = from; i < r->sp; i++) {
        const char *why = adopt_check(t, r->stack[i]);
        if (why) { pt_value_free(t); return fail(r, CBX_ERR_FORMAT, "%s", why); }
        if (!seq_push(t, r->stack[i])) {
            pt_value_free(t);
            return fail(r, CBX_ERR_NOMEM, "out of memory");
        }
        r->stack[i] = NULL;
    }
    /* the taken items now belong to t */
    r->sp = from;
    return push(r, t);
}

static cbx_status setitems(struct rd *r, struct pt_value *d, size_t from)
{
    if (d->kind != PT_DICT) return fail(r, CBX_ERR_FORMAT, "SETITEM(S) on a non-dict");
    if (d->frozen_) return fail(r, CBX_ERR_FORMAT, "SETITEM(S) on a dict already inside a container");
    if ((r->sp - from) % 2) return fail(r, CBX_ERR_FORMAT, "SETITEMS with an odd number of values");
    for (size_t i = from; i < r->sp; i += 2) {
        struct pt_value *k = r->stack[i], *v = r->stack[i + 1];
        if (k->kind != PT_STR) return fail(r, CBX_ERR_FORMAT, "dict key is not a string");
        const char *why = adopt_check(d, v);
        if (why) return fail(r, CBX_ERR_FORMAT, "%s", why);
        if (!dict_put(d, k->u.str.s, k->u.str.len, v)) return fail(r, CBX_ERR_NOMEM, "out of memory");
        r->stack[i + 1] = NULL;
        pt_value_free(k);
        r->stack[i] = NULL;
    }
    r->sp = from;
    return CBX_OK;
}

static cbx_status appends(struct rd *r, struct pt_value *l, size_t from)
{
    if (l->kind != PT_LIST) return fail(r, CBX_ERR_FORMAT, "APPEND(S) on a non-list");
    if (l->frozen_) return fail(r, CBX_ERR_FORMAT, "APPEND(S) on a list already inside a container");
    for (size_t i = from; i < r->sp; i++) {
        const char *why = adopt_check(l, r->stack[i]);
        if (why) return fail(r, CBX_ERR_FORMAT, "%s", why);
        if (!seq_push(l, r->stack[i])) return fail(r, CBX_ERR_NOMEM, "out of memory");
        r->stack[i] = NULL;
    }
    r->sp = from;
    return CBX_OK;
}

static cbx_status do_global(struct rd *r, const char *mod, size_t ml, const char *name, size_t nl)
{
    int ik = 0;
    int64_t payload = 0;
#define IS(s, l, lit) ((l) == sizeof(lit) - 1 && memcmp((s), (lit), (l)) == 0)
    if (IS(mod, ml, "collections") && IS(name, nl, "OrderedDict")) ik = IK_ORDEREDDICT;
    else if (IS(mod, ml, "torch._utils") && IS(name, nl, "_rebuild_tensor_v2")) ik = IK_REBUILD_V2;
    else if (IS(mod, ml, "torch._utils") && IS(name, nl, "_rebuild_tensor")) ik = IK_REBUILD;
    else if (IS(mod, ml, "torch")) {
        for (size_t i = 0; i < sizeof storage_classes / sizeof *storage_classes; i++)
            if (nl == strlen(storage_classes[i].name) && memcmp(name, storage_classes[i].name, nl) == 0) {
                ik = IK_STORAGE_CLS;
                payload = storage_classes[i].type;
            }
    }
#undef IS
    if (!ik) {
        char a[96], b[96];
        return fail(r, CBX_ERR_FORMAT, "refusing global %s.%s (only tensors, dicts and "
                    "OrderedDict are allowed)", printable(mod, ml, a, sizeof a),
                    printable(name, nl, b, sizeof b));
    }
    return push(r, internal_new(ik, payload));
}

static bool valid_key(const char *s, size_t n)
{
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= 'A' && s[i] <= 'Z') || s[i] == '_'))
            return false;
    return true;
}

/* Stat entry `name` (relative to the archive dir); -1 when absent. */
static zip_int64_t locate(struct rd *r, const char *rel, zip_stat_t *stt)
{
    size_t dl = strlen(r->dir), rl = strlen(rel);
    char *full = malloc(dl + rl + 1);
    if (!full) return -2;
    memcpy(full, r->dir, dl);
    memcpy(full + dl, rel, rl + 1);
    zip_int64_t idx = zip_name_locate(r->za, full, 0);
    free(full);
    if (idx < 0) return -1;
    zip_stat_init(stt);
    if (zip_stat_index(r->za, (zip_uint64_t)idx, 0, stt) != 0) return -1;
    return idx;
}

/* Check an entry is readable by us and its size plausible for its
 * compressed size (bounds memory to ~1000x the archive for deflate). */
static cbx_status check_entry(struct rd *r, const zip_stat_t *stt)
{
    if (!(stt->valid & ZIP_STAT_SIZE) || !(stt->valid & ZIP_STAT_COMP_SIZE) ||
        !(stt->valid & ZIP_STAT_COMP_METHOD))
        return fail(r, CBX_ERR_FORMAT, "entry %s: incomplete zip metadata", stt->name);
    if ((stt->valid & ZIP_STAT_ENCRYPTION_METHOD) && stt->encryption_method != ZIP_EM_NONE)
        return fail(r, CBX_ERR_FORMAT, "entry %s: encrypted entries are not supported", stt->name);
    if (stt->comp_method == ZIP_CM_STORE) {
        if (stt->comp_size != stt->size)
            return fail(r, CBX_ERR_FORMAT, "entry %s: stored with sizes %llu != %llu", stt->name,
                        (unsigned long long)stt->comp_size, (unsigned long long)stt->size);
    } else if (stt->comp_method == ZIP_CM_DEFLATE) {
        if (stt->size / 1100 > stt->comp_size + 4)
            return fail(r, CBX_ERR_FORMAT, "entry %s: size %llu impossible for %llu deflated bytes",
                        stt->name, (unsigned long long)stt->size,
                        (unsigned long long)stt->comp_size);
    } else {
        return fail(r, CBX_ERR_FORMAT, "entry %s: compression method %d (only stored or deflated)",
                    stt->name, (int)stt->comp_method);
    }
    return CBX_OK;
}

/* Read a whole entry into a fresh buffer of exactly stt->size bytes. */
static cbx_status read_entry(struct rd *r, zip_int64_t idx, const zip_stat_t *stt, void **out)
{
    *out = NULL;
    cbx_status rc = check_entry(r, stt);
    if (rc) return rc;
    if (stt->size > (zip_uint64_t)SIZE_MAX / 2) return fail(r, CBX_ERR_FORMAT, "entry %s too large", stt->name);
    size_t n = (size_t)stt->size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return fail(r, CBX_ERR_NOMEM, "entry %s: out of memory (%zu bytes)", stt->name, n);
    zip_file_t *zf = zip_fopen_index(r->za, (zip_uint64_t)idx, 0);
    if (!zf) {
        free(buf);
        return fail(r, CBX_ERR_FORMAT, "entry %s: %s", stt->name, zip_strerror(r->za));
    }
    size_t got = 0;
    while (got < n) {
        zip_int64_t k = zip_fread(zf, buf + got, n - got);
        if (k <= 0) break;
        got += (size_t)k;
    }
    /* a read past the end confirms the length and lets libzip check the CRC */
    uint8_t extra;
    zip_int64_t tail = got == n ? zip_fread(zf, &extra, 1) : 0;
    if (got != n || tail != 0) {
        rc = fail(r, CBX_ERR_FORMAT, "entry %s: %s (read %zu of %zu bytes)", stt->name,
                  tail < 0 || got != n ? zip_file_strerror(zf) : "longer than declared", got, n);
        zip_fclose(zf);
        free(buf);
        return rc;
    }
    zip_fclose(zf);
    *out = buf;
    return CBX_OK;
}

/* BINPERSID: ('storage', <storage class>, key, location, numel). */
static cbx_status persid(struct rd *r, struct pt_value *pid, struct pt_value **out)
{
    *out = NULL;
    if (pid->kind != PT_TUPLE || pid->u.seq.n != 5)
        return fail(r, CBX_ERR_FORMAT, "persistent id is not a 5-tuple ('storage', class, key, "
                    "location, numel)");
    struct pt_value **e = pid->u.seq.v;
    if (e[0]->kind != PT_STR || strcmp(e[0]->u.str.s, "storage") != 0)
        return fail(r, CBX_ERR_FORMAT, "persistent id does not start with 'storage'");
    if (e[1]->kind != PT_INTERNAL_ || e[1]->ikind_ != IK_STORAGE_CLS)
        return fail(r, CBX_ERR_FORMAT, "persistent id has no torch storage class");
    if (e[2]->kind != PT_STR || !valid_key(e[2]->u.str.s, e[2]->u.str.len)) {
        char b[96];
        return fail(r, CBX_ERR_FORMAT, "bad storage key '%s'", e[2]->kind == PT_STR ?
                    printable(e[2]->u.str.s, e[2]->u.str.len, b, sizeof b) : "(not a string)");
    }
    if (e[3]->kind != PT_STR) return fail(r, CBX_ERR_FORMAT, "storage location is not a string");
    if (e[4]->kind != PT_INT || e[4]->u.i < 0 || e[4]->u.i > NUMEL_MAX)
        return fail(r, CBX_ERR_FORMAT, "bad storage size for key '%s'", e[2]->u.str.s);
    enum dtype type = (enum dtype)e[1]->u.i;
    const char *key = e[2]->u.str.s;
    int64_t numel = e[4]->u.i;
    size_t i;
    for (i = 0; i < r->nst; i++)
        if (strcmp(r->st[i].key, key) == 0) break;
    if (i < r->nst) {
        if (r->st[i].type != type || r->st[i].numel != numel)
            return fail(r, CBX_ERR_FORMAT, "storage '%s' declared twice with different type or size", key);
    } else {
        char rel[80];
        snprintf(rel, sizeof rel, "data/%s", key);
        zip_stat_t stt;
        zip_int64_t idx = locate(r, rel, &stt);
        if (idx == -2) return fail(r, CBX_ERR_NOMEM, "out of memory");
        if (idx < 0) return fail(r, CBX_ERR_FORMAT, "storage entry %s%s is missing", r->dir, rel);
        uint64_t want = (uint64_t)numel * pt_elsize(type);
        if (stt.size != want)
            return fail(r, CBX_ERR_FORMAT, "storage entry %s%s has %llu bytes, expected %llu "
                        "(%lld x %s)", r->dir, rel, (unsigned long long)stt.size,
                        (unsigned long long)want, (long long)numel, dtype_name(type));
        if (!pt_grow((void **)&r->st, &r->stcap, r->nst + 1, sizeof *r->st))
            return fail(r, CBX_ERR_NOMEM, "out of memory");
        char *k = strdup(key);
        if (!k) return fail(r, CBX_ERR_NOMEM, "out of memory");
        r->st[r->nst] = (struct storage){k, type, numel, 0};
        i = r->nst++;
    }
    *out = internal_new(IK_STORAGE, (int64_t)i);
    if (!*out) return fail(r, CBX_ERR_NOMEM, "out of memory");
    return CBX_OK;
}

static cbx_status int_tuple(struct rd *r, const struct pt_value *t, const char *what,
                            int64_t *out, int *n)
{
    if (t->kind != PT_TUPLE) return fail(r, CBX_ERR_FORMAT, "tensor %s is not a tuple", what);
    if (t->u.seq.n > TENSOR_MAX_DIMS)
        return fail(r, CBX_ERR_UNSUPPORTED, "tensor with %zu dimensions (at most %d supported)",
                    t->u.seq.n, TENSOR_MAX_DIMS);
    for (size_t i = 0; i < t->u.seq.n; i++) {
        const struct pt_value *e = t->u.seq.v[i];
        if (e->kind != PT_INT || e->u.i < 0 || e->u.i > DIM_MAX)
            return fail(r, CBX_ERR_FORMAT, "tensor %s[%zu] is not an integer in [0, 2^40]", what, i);
        out[i] = e->u.i;
    }
    *n = (int)t->u.seq.n;
    return CBX_OK;
}

static bool empty_dict(const struct pt_value *v)
{
    return v->kind == PT_DICT && v->u.dict.n == 0;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])
 * or _rebuild_tensor(storage, offset, size, stride). */
static cbx_status rebuild(struct rd *r, bool v2, const struct pt_value *args, struct pt_value **out)
{
    *out = NULL;
    size_t na = args->u.seq.n;
    if (v2 ? (na != 6 && na != 7) : na != 4)
        return fail(r, CBX_ERR_FORMAT, "%s takes %s arguments, got %zu",
                    v2 ? "_rebuild_tensor_v2" : "_rebuild_tensor", v2 ? "6 or 7" : "4", na);
    struct pt_value *const *a = args->u.seq.v;
    if (a[0]->kind != PT_INTERNAL_ || a[0]->ikind_ != IK_STORAGE)
        return fail(r, CBX_ERR_FORMAT, "tensor storage argument is not a persistent storage");
    if (a[1]->kind != PT_INT || a[1]->u.i < 0 || a[1]->u.i > NUMEL_MAX)
        return fail(r, CBX_ERR_FORMAT, "tensor storage offset is not a non-negative integer");
    int64_t ne[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
    int nd, ns;
    cbx_status rc = int_tuple(r, a[2], "size", ne, &nd);
    if (!rc) rc = int_tuple(r, a[3], "stride", st, &ns);
    if (rc) return rc;
    if (nd != ns) return fail(r, CBX_ERR_FORMAT, "tensor size has %d dims but stride %d", nd, ns);
    if (v2) {
        if (a[4]->kind != PT_BOOL) return fail(r, CBX_ERR_FORMAT, "requires_grad is not a bool");
        if (!empty_dict(a[5]))
            return fail(r, CBX_ERR_FORMAT, "tensor backward_hooks must be an empty OrderedDict");
        if (na == 7 && a[6]->kind != PT_NONE && !empty_dict(a[6]))
            return fail(r, CBX_ERR_FORMAT, "tensor metadata must be None or empty");
    }
    size_t si = (size_t)a[0]->u.i;
    const struct storage *s = &r->st[si];
    int64_t off = a[1]->u.i, numel = 1, last = off;
    for (int i = 0; i < nd; i++) {
        if (__builtin_mul_overflow(numel, ne[i], &numel) || numel > NUMEL_MAX)
            return fail(r, CBX_ERR_FORMAT, "tensor has too many elements");
    }
    if (numel > 0) {
        for (int i = 0; i < nd; i++) {
            int64_t span;
            if (__builtin_mul_overflow(ne[i] - 1, st[i], &span) ||
                __builtin_add_overflow(last, span, &last))
                return fail(r, CBX_ERR_FORMAT, "tensor strides overflow");
        }
        if (last >= s->numel)
            return fail(r, CBX_ERR_FORMAT, "tensor (offset %lld, last element %lld) lies beyond "
                        "storage '%s' of %lld elements", (long long)off, (long long)last,
                        s->key, (long long)s->numel);
    }
    if (!pt_grow((void **)&r->pend, &r->pcap, r->npend + 1, sizeof *r->pend))
        return fail(r, CBX_ERR_NOMEM, "out of memory");
    struct pt_value *v = tensor_val(s->type, nd, ne, (size_t)numel * pt_elsize(s->type));
    if (!v) return fail(r, CBX_ERR_NOMEM, "out of memory");
    v->u.t.owned = true;
    struct pending *p = &r->pend[r->npend];
    memset(p, 0, sizeof *p);
    p->v = val_ref(v);
    p->st = si;
    p->seq = r->npend++;
    p->off = off;
    for (int i = 0; i < nd; i++) p->stride[i] = st[i];
    *out = v;
    return CBX_OK;
}

static cbx_status reduce(struct rd *r)
{
    cbx_status rc = avail(r, 2, "REDUCE");
    if (rc) return rc;
    struct pt_value *fn = r->stack[r->sp - 2], *args = r->stack[r->sp - 1], *res = NULL;
    if (fn->kind != PT_INTERNAL_ || fn->ikind_ == IK_STORAGE || fn->ikind_ == IK_STORAGE_CLS)
        return fail(r, CBX_ERR_FORMAT, "REDUCE on something that is not an allowed callable");
    if (args->kind != PT_TUPLE) return fail(r, CBX_ERR_FORMAT, "REDUCE arguments are not a tuple");
    if (fn->ikind_ == IK_ORDEREDDICT) {
        if (args->u.seq.n) return fail(r, CBX_ERR_FORMAT, "OrderedDict() called with arguments");
        res = pt_dict_new(true);
        if (!res) return fail(r, CBX_ERR_NOMEM, "out of memory");
    } else {
        rc = rebuild(r, fn->ikind_ == IK_REBUILD_V2, args, &res);
        if (rc) return rc;
    }
    r->sp -= 2;
    pt_value_free(fn);
    pt_value_free(args);
    return push(r, res);
}

static cbx_status memo_put(struct rd *r, uint64_t idx)
{
    if (r->sp == base(r)) return fail(r, CBX_ERR_FORMAT, "memo put with an empty stack");
    if (idx >= MEMO_MAX) return fail(r, CBX_ERR_FORMAT, "memo index %llu beyond %zu",
                                     (unsigned long long)idx, MEMO_MAX);
    size_t old = r->memo_cap;
    if (!pt_grow((void **)&r->memo, &r->memo_cap, (size_t)idx + 1, sizeof *r->memo))
        return fail(r, CBX_ERR_NOMEM, "out of memory");
    for (size_t i = old; i < r->memo_cap; i++) r->memo[i] = NULL;
    if (r->memo[idx]) pt_value_free(r->memo[idx]);
    else r->memo_len++;
    r->memo[idx] = val_ref(r->stack[r->sp - 1]);
    return CBX_OK;
}

static cbx_status memo_get(struct rd *r, uint64_t idx)
{
    if (idx >= r->memo_cap || !r->memo[idx])
        return fail(r, CBX_ERR_FORMAT, "memo index %llu was never stored", (unsigned long long)idx);
    return push(r, val_ref(r->memo[idx]));
}

static cbx_status unpickle(struct rd *r, struct pt_value **out)
{
    cbx_status rc = CBX_OK;
    for (;;) {
        if (r->pos >= r->n) return fail(r, CBX_ERR_FORMAT, "pickle ends without STOP");
        r->at = r->pos;
        uint8_t op = r->p[r->pos++];
        const uint8_t *a = r->p + r->pos;
        size_t k = 0, len;
        switch (op) {
        case 0x80: /* PROTO */
            if ((rc = need(r, 1))) return rc;
            if (a[0] < 2 || a[0] > 5) return fail(r, CBX_ERR_FORMAT, "pickle protocol %d (2..5 supported)", a[0]);
            r->pos++;
            break;
        case 0x95: /* FRAME: a length hint only */
            if ((rc = need(r, 8))) return rc;
            r->pos += 8;
            break;
        case '.': /* STOP */
            if (r->nmarks || r->sp != 1)
                return fail(r, CBX_ERR_FORMAT, "STOP with %zu values and %zu marks on the stack",
                            r->sp, r->nmarks);
            if (r->stack[0]->kind == PT_INTERNAL_ || r->stack[0]->internal_)
                return fail(r, CBX_ERR_FORMAT, "result holds a bare global or storage");
            *out = r->stack[0];
            r->sp = 0;
            return CBX_OK;
        case '(': /* MARK */
            if (r->sp + r->nmarks >= STACK_MAX) return fail(r, CBX_ERR_FORMAT, "too many marks");
            if (!pt_grow((void **)&r->marks, &r->mcap, r->nmarks + 1, sizeof *r->marks))
                return fail(r, CBX_ERR_NOMEM, "out of memory");
            r->marks[r->nmarks++] = r->sp;
            break;
        case '}': rc = push(r, pt_dict_new(false)); break;    /* EMPTY_DICT */
        case ']': rc = push(r, val_new(PT_LIST)); break;      /* EMPTY_LIST */
        case ')': rc = push(r, val_new(PT_TUPLE)); break;     /* EMPTY_TUPLE */
        case 't': /* TUPLE */
            if ((rc = pop_mark(r, &k, "TUPLE"))) return rc;
            rc = collect(r, k, PT_TUPLE);
            break;
        case 'l': /* LIST */
            if ((rc = pop_mark(r, &k, "LIST"))) return rc;
            rc = collect(r, k, PT_LIST);
            break;
        case 0x85: case 0x86: case 0x87: /* TUPLE1..3 */
            if ((rc = avail(r, (size_t)(op - 0x84), "TUPLEn"))) return rc;
            rc = collect(r, r->sp - (size_t)(op - 0x84), PT_TUPLE);
            break;
        case 'd': { /* DICT */
            if ((rc = pop_mark(r, &k, "DICT"))) return rc;
            struct pt_value *d = pt_dict_new(false);
            if (!d) return fail(r, CBX_ERR_NOMEM, "out of memory");
            rc = setitems(r, d, k);
            if (rc) { pt_value_free(d); return rc; }
            rc = push(r, d);
            break;
        }
        case 's': /* SETITEM */
            if ((rc = avail(r, 3, "SETITEM"))) return rc;
            rc = setitems(r, r->stack[r->sp - 3], r->sp - 2);
            break;
        case 'u': /* SETITEMS */
            if ((rc = pop_mark(r, &k, "SETITEMS"))) return rc;
            if (k == 0 || k - 1 < base(r)) return fail(r, CBX_ERR_FORMAT, "stack underflow in SETITEMS");
            rc = setitems(r, r->stack[k - 1], k);
            break;
        case 'a': /* APPEND */
            if ((rc = avail(r, 2, "APPEND"))) return rc;
            rc = appends(r, r->stack[r->sp - 2], r->sp - 1);
            break;
        case 'e': /* APPENDS */
            if ((rc = pop_mark(r, &k, "APPENDS"))) return rc;
            if (k == 0 || k - 1 < base(r)) return fail(r, CBX_ERR_FORMAT, "stack underflow in APPENDS");
            rc = appends(r, r->stack[k - 1], k);
            break;
        case 'X': case 0x8c: case 0x8d: { /* BINUNICODE, SHORT_BINUNICODE, BINUNICODE8 */
            int w = op == 'X' ? 4 : op == 0x8c ? 1 : 8;
            if ((rc = need(r, (size_t)w))) return rc;
            uint64_t l = rd_le(a, w);
            r->pos += (size_t)w;
            if (l > STR_MAX) return fail(r, CBX_ERR_FORMAT, "string of %llu bytes (limit %zu)",
                                         (unsigned long long)l, STR_MAX);
            len = (size_t)l;
            if ((rc = need(r, len))) return rc;
            if (!utf8_ok(r->p + r->pos, len)) return fail(r, CBX_ERR_FORMAT, "string is not valid UTF-8 (or holds NUL)");
            rc = push(r, str_new((const char *)r->p + r->pos, len));
            r->pos += len;
            break;
        }
        case 'J': /* BININT */
            if ((rc = need(r, 4))) return rc;
            r->pos += 4;
            rc = push(r, pt_int((int32_t)(uint32_t)rd_le(a, 4)));
            break;
        case 'K': /* BININT1 */
            if ((rc = need(r, 1))) return rc;
            r->pos += 1;
            rc = push(r, pt_int(a[0]));
            break;
        case 'M': /* BININT2 */
            if ((rc = need(r, 2))) return rc;
            r->pos += 2;
            rc = push(r, pt_int((int64_t)rd_le(a, 2)));
            break;
        case 0x8a: { /* LONG1: little-endian two's complement */
            if ((rc = need(r, 1))) return rc;
            len = a[0];
            if (len > 8) return fail(r, CBX_ERR_FORMAT, "integer of %zu bytes (at most 8)", len);
            if ((rc = need(r, 1 + len))) return rc;
            uint64_t u = len ? rd_le(a + 1, (int)len) : 0;
            if (len && len < 8 && (a[len] & 0x80)) u |= ~(uint64_t)0 << (8 * len);
            r->pos += 1 + len;
            rc = push(r, pt_int((int64_t)u));
            break;
        }
        case 'G': { /* BINFLOAT: big-endian double */
            if ((rc = need(r, 8))) return rc;
            uint64_t u = 0;
            for (int i = 0; i < 8; i++) u = u << 8 | a[i];
            double d;
            memcpy(&d, &u, 8);
            r->pos += 8;
            rc = push(r, pt_float(d));
            break;
        }
        case 0x88: rc = push(r, pt_bool(true)); break;  /* NEWTRUE */
        case 0x89: rc = push(r, pt_bool(false)); break; /* NEWFALSE */
        case 'N': rc = push(r, pt_none()); break;       /* NONE */
        case 'q': case 'r': { /* BINPUT, LONG_BINPUT */
            int w = op == 'q' ? 1 : 4;
            if ((rc = need(r, (size_t)w))) return rc;
            r->pos += (size_t)w;
            rc = memo_put(r, rd_le(a, w));
            break;
        }
        case 0x94: rc = memo_put(r, r->memo_len); break; /* MEMOIZE */
        case 'h': case 'j': { /* BINGET, LONG_BINGET */
            int w = op == 'h' ? 1 : 4;
            if ((rc = need(r, (size_t)w))) return rc;
            r->pos += (size_t)w;
            rc = memo_get(r, rd_le(a, w));
            break;
        }
        case 'c': { /* GLOBAL "module\nname\n" */
            const uint8_t *e1 = memchr(a, '\n', r->n - r->pos < 256 ? r->n - r->pos : 256);
            if (!e1) return fail(r, CBX_ERR_FORMAT, "GLOBAL module name unterminated or too long");
            const uint8_t *b2 = e1 + 1;
            size_t rest = r->n - (size_t)(b2 - r->p);
            const uint8_t *e2 = memchr(b2, '\n', rest < 256 ? rest : 256);
            if (!e2) return fail(r, CBX_ERR_FORMAT, "GLOBAL name unterminated or too long");
            r->pos = (size_t)(e2 + 1 - r->p);
            rc = do_global(r, (const char *)a, (size_t)(e1 - a), (const char *)b2, (size_t)(e2 - b2));
            break;
        }
        case 0x93: { /* STACK_GLOBAL */
            if ((rc = avail(r, 2, "STACK_GLOBAL"))) return rc;
            struct pt_value *m = r->stack[r->sp - 2], *nm = r->stack[r->sp - 1];
            if (m->kind != PT_STR || nm->kind != PT_STR)
                return fail(r, CBX_ERR_FORMAT, "STACK_GLOBAL operands are not strings");
            r->sp -= 2;
            rc = do_global(r, m->u.str.s, m->u.str.len, nm->u.str.s, nm->u.str.len);
            pt_value_free(m);
            pt_value_free(nm);
            break;
        }
        case 'R': rc = reduce(r); break; /* REDUCE */
        case 'Q': { /* BINPERSID */
            if ((rc = avail(r, 1, "BINPERSID"))) return rc;
            struct pt_value *res;
            if ((rc = persid(r, r->stack[r->sp - 1], &res))) return rc;
            pt_value_free(r->stack[--r->sp]);
            rc = push(r, res);
            break;
        }
        case 'b': { /* BUILD: only an OrderedDict's attribute dict, dropped */
            if ((rc = avail(r, 2, "BUILD"))) return rc;
            struct pt_value *obj = r->stack[r->sp - 2], *state = r->stack[r->sp - 1];
            if (obj->kind != PT_DICT || !obj->u.dict.ordered)
                return fail(r, CBX_ERR_FORMAT, "BUILD on something other than an OrderedDict");
            if (state->kind != PT_NONE && (state->kind != PT_DICT || state->internal_))
                return fail(r, CBX_ERR_FORMAT, "OrderedDict BUILD state is not a plain dict");
            pt_value_free(state);
            r->sp--;
            break;
        }
        default:
            return fail(r, CBX_ERR_FORMAT, "unsupported pickle opcode 0x%02x", op);
        }
        if (rc) return rc;
    }
}

static int pend_cmp(const void *x, const void *y)
{
    const struct pending *a = x, *b = y;
    if (a->st != b->st) return a->st < b->st ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Gather the elements of p's view from storage bytes src into dst. */
static void gather(const struct pending *p, const uint8_t *src, uint8_t *dst, size_t es)
{
    const struct pt_tensor *t = &p->v->u.t;
    int64_t ne[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
    int nd = t->ndim, pad = TENSOR_MAX_DIMS - nd;
    for (int i = 0; i < TENSOR_MAX_DIMS; i++) {
        ne[i] = i < pad ? 1 : t->ne[i - pad];
        st[i] = i < pad ? 0 : p->stride[i - pad];
    }
    size_t o = 0;
    for (int64_t i0 = 0; i0 < ne[0]; i0++)
        for (int64_t i1 = 0; i1 < ne[1]; i1++)
            for (int64_t i2 = 0; i2 < ne[2]; i2++) {
                int64_t e = p->off + i0 * st[0] + i1 * st[1] + i2 * st[2];
                if (st[3] == 1) {
                    memcpy(dst + o, src + (size_t)e * es, (size_t)ne[3] * es);
                    o += (size_t)ne[3] * es;
                } else {
                    for (int64_t i3 = 0; i3 < ne[3]; i3++, o += es)
                        memcpy(dst + o, src + (size_t)(e + i3 * st[3]) * es, es);
                }
            }
}

static bool is_contiguous(const struct pending *p)
{
    const struct pt_tensor *t = &p->v->u.t;
    int64_t want = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->ne[i] != 1 && p->stride[i] != want) return false;
        want *= t->ne[i];
    }
    return true;
}

static cbx_status materialize(struct rd *r)
{
    qsort(r->pend, r->npend, sizeof *r->pend, pend_cmp);
    for (size_t i = 0; i < r->npend; i++) r->st[r->pend[i].st].uses++;
    uint8_t *buf = NULL;
    size_t cur = SIZE_MAX;
    cbx_status rc = CBX_OK;
    for (size_t i = 0; i < r->npend; i++) {
        struct pending *p = &r->pend[i];
        struct storage *s = &r->st[p->st];
        struct pt_tensor *t = &p->v->u.t;
        size_t es = pt_elsize(s->type);
        if (p->st != cur) {
            free(buf);
            buf = NULL;
            cur = p->st;
            char rel[80];
            snprintf(rel, sizeof rel, "data/%s", s->key);
            zip_stat_t stt;
            zip_int64_t idx = locate(r, rel, &stt);
            if (idx < 0) { rc = fail(r, CBX_ERR_FORMAT, "storage entry %s%s vanished", r->dir, rel); break; }
            if ((rc = read_entry(r, idx, &stt, (void **)&buf))) break;
        }
        s->uses--;
        if (t->nbytes == 0) {
            t->data = NULL;
        } else if (s->uses == 0 && p->off == 0 && t->nbytes == (size_t)s->numel * es && is_contiguous(p)) {
            t->data = buf; /* invariant 4: last user takes the storage */
            buf = NULL;
            cur = SIZE_MAX;
        } else {
            t->data = malloc(t->nbytes);
            if (!t->data) { rc = fail(r, CBX_ERR_NOMEM, "out of memory (%zu bytes)", t->nbytes); break; }
            gather(p, buf, t->data, es);
        }
    }
    free(buf);
    return rc;
}

/* Find "<dir>/data.pkl" (dir without '/'), check byteorder, read the pickle. */
static cbx_status open_archive(struct rd *r, void **pkl, size_t *pkl_n)
{
    zip_int64_t ne = zip_get_num_entries(r->za, 0);
    zip_int64_t found = -1;
    for (zip_int64_t i = 0; i < ne; i++) {
        const char *nm = zip_get_name(r->za, (zip_uint64_t)i, 0);
        if (!nm) continue;
        const char *sl = strchr(nm, '/');
        if (!sl || sl == nm || strcmp(sl, "/data.pkl") != 0) continue;
        if (found >= 0) return fail(r, CBX_ERR_FORMAT, "more than one top-level data.pkl");
        found = i;
        r->dir = strndup(nm, (size_t)(sl - nm) + 1);
        if (!r->dir) return fail(r, CBX_ERR_NOMEM, "out of memory");
    }
    if (found < 0) return fail(r, CBX_ERR_FORMAT, "no <dir>/data.pkl entry: not a torch.save zip archive");
    zip_stat_t stt;
    void *b = NULL;
    zip_int64_t idx = locate(r, "byteorder", &stt);
    if (idx == -2) return fail(r, CBX_ERR_NOMEM, "out of memory");
    if (idx >= 0) {
        if (stt.size > 16) return fail(r, CBX_ERR_FORMAT, "byteorder entry too long");
        cbx_status rc = read_entry(r, idx, &stt, &b);
        if (rc) return rc;
        bool little = stt.size == 6 && memcmp(b, "little", 6) == 0;
        free(b);
        if (!little) return fail(r, CBX_ERR_UNSUPPORTED, "byteorder is not 'little'");
    }
    idx = locate(r, "data.pkl", &stt);
    if (idx < 0) return fail(r, CBX_ERR_FORMAT, "cannot stat %sdata.pkl", r->dir);
    if (stt.size > PKL_MAX) return fail(r, CBX_ERR_FORMAT, "data.pkl of %llu bytes (limit %zu)",
                                        (unsigned long long)stt.size, PKL_MAX);
    cbx_status rc = read_entry(r, idx, &stt, pkl);
    *pkl_n = (size_t)stt.size;
    return rc;
}

static cbx_status read_za(struct rd *r, struct pt_value **out)
{
    void *pkl = NULL;
    size_t pn = 0;
    struct pt_value *root = NULL;
    cbx_status rc = open_archive(r, &pkl, &pn);
    if (rc) goto cleanup;
    r->p = pkl;
    r->n = pn;
    rc = unpickle(r, &root);
    r->p = NULL;
    if (rc) goto cleanup;
    rc = materialize(r);
    if (rc) goto cleanup;
    *out = root;
    root = NULL;
cleanup:
    pt_value_free(root);
    for (size_t i = 0; i < r->sp; i++) pt_value_free(r->stack[i]);
    free(r->stack);
    free(r->marks);
    for (size_t i = 0; i < r->memo_cap; i++) pt_value_free(r->memo[i]);
    free(r->memo);
    for (size_t i = 0; i < r->npend; i++) pt_value_free(r->pend[i].v);
    free(r->pend);
    for (size_t i = 0; i < r->nst; i++) free(r->st[i].key);
    free(r->st);
    free(r->dir);
    free(pkl);
    return rc;
}

cbx_status io_pt_read(const char *path, struct pt_value **out, char *err)
{
    if (!out) return err_setf(err, CBX_ERR_INVALID_ARG, "io_pt_read: out is NULL");
    *out = NULL;
    if (!path) return err_setf(err, CBX_ERR_INVALID_ARG, "io_pt_read: path is NULL");
    int ze = 0;
    zip_t *za = zip_open(path, ZIP_RDONLY, &ze);
    if (!za) {
        zip_error_t e;
        zip_error_init_with_code(&e, ze);
        cbx_status s = err_setf(err, ze == ZIP_ER_NOENT || ze == ZIP_ER_OPEN || ze == ZIP_ER_READ
                                ? CBX_ERR_IO : CBX_ERR_FORMAT, "%s: %s", path, zip_error_strerror(&e));
        zip_error_fini(&e);
        return s;
    }
    struct rd r = {.name = path, .err = err, .za = za};
    cbx_status rc = read_za(&r, out);
    zip_discard(za);
    return rc;
}

cbx_status io_pt_read_mem(const void *buf, size_t n, const char *name, struct pt_value **out,
                          char *err)
{
    if (!out) return err_setf(err, CBX_ERR_INVALID_ARG, "io_pt_read_mem: out is NULL");
    *out = NULL;
    if (!name) name = "<memory>";
    if (!buf || n < 22) return err_setf(err, CBX_ERR_FORMAT, "%s: too short for a zip archive", name);
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(buf, n, 0, &ze);
    zip_t *za = src ? zip_open_from_source(src, ZIP_RDONLY, &ze) : NULL;
    if (!za) {
        cbx_status s = err_setf(err, src ? CBX_ERR_FORMAT : CBX_ERR_NOMEM, "%s: %s", name,
                                zip_error_strerror(&ze));
        zip_source_free(src);
        zip_error_fini(&ze);
        return s;
    }
    zip_error_fini(&ze);
    struct rd r = {.name = name, .err = err, .za = za};
    cbx_status rc = read_za(&r, out);
    zip_discard(za);
    return rc;
}
