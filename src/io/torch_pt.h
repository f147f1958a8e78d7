/* torch_pt.h - PyTorch `torch.save` zip files holding tensor dictionaries:
 * a strict reader (no code execution) and a writer that torch.load(...,
 * weights_only=True) accepts (tools/lib/torch_pt_write.h). Format:
 * spec/checkpoint-format.md §1.2.
 *
 * Archive: a ZIP whose entries share one top-level directory <dir>/ (any
 * name): <dir>/data.pkl (the pickle), <dir>/data/<key> (one raw
 * little-endian storage per key), <dir>/version, optionally
 * <dir>/byteorder ("little") and <dir>/.data/serialization_id (torch 2.x).
 * Entries may be STORED or deflated.
 *
 * Reader: a restricted unpickler (opcodes of protocols 2..5 that torch
 * emits for tensor dicts) that resolves only these globals:
 * collections.OrderedDict, torch._utils._rebuild_tensor_v2,
 * torch._utils._rebuild_tensor and the typed storage classes
 * torch.{Float,Double,Half,BFloat16,Long,Int,Short,Char,Byte,Bool}Storage.
 * Any other global is refused by name ("refusing global os.system") and
 * nothing is ever called. BUILD is accepted only on an OrderedDict (the
 * `_metadata` attribute dict of a module state_dict) and its state is
 * dropped. Entry CRCs are checked (libzip). Limits: pickle <= 256 MiB, strings <= 1 MiB,
 * stack and memo <= 1M entries, container nesting <= 64, <= 16M values in
 * a tree, tensors <= TENSOR_MAX_DIMS dims. Tensors come back contiguous,
 * copied out of their storage (strided views are gathered), each storage
 * read once. The device location and requires_grad are ignored.
 *
 * Thread safety: independent calls may run concurrently; a value tree is
 * not synchronised (read-only use from many threads is fine). */
#ifndef CBX_IO_TORCH_PT_H
#define CBX_IO_TORCH_PT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"

enum pt_kind {
    PT_NONE,
    PT_BOOL,
    PT_INT,
    PT_FLOAT,
    PT_STR,
    PT_TENSOR,
    PT_LIST,
    PT_TUPLE,
    PT_DICT,
    PT_INTERNAL_, /* reader-only objects (globals, storages); never returned */
};

struct pt_tensor {
    enum dtype type;             /* F32 F64 F16 BF16 I64 I32 I16 I8 U8 BOOL */
    int ndim;                    /* 0 .. TENSOR_MAX_DIMS */
    int64_t ne[TENSOR_MAX_DIMS]; /* shape, outermost first */
    size_t nbytes;               /* contiguous size of the data */
    void *data;                  /* contiguous row-major; see `owned` */
    bool owned;                  /* data freed with the value (else borrowed;
                                    NULL borrowed data = supplied by the
                                    writer's fill callback) */
};

struct pt_value {
    enum pt_kind kind;
    union {
        bool b;                                        /* PT_BOOL */
        int64_t i;                                     /* PT_INT */
        double f;                                      /* PT_FLOAT */
        struct { char *s; size_t len; } str;           /* PT_STR, NUL-terminated UTF-8 */
        struct pt_tensor t;                            /* PT_TENSOR */
        struct { struct pt_value **v; size_t n, cap; } seq;   /* PT_LIST, PT_TUPLE */
        struct { char **k; struct pt_value **v; size_t n, cap;
                 bool ordered; } dict;                 /* PT_DICT; ordered = OrderedDict */
    } u;
    /* bookkeeping (reader and builders); not for callers */
    int refs_;
    bool frozen_;       /* placed in a container: no longer mutable */
    bool internal_;     /* is or contains a reader-only object */
    int height_;        /* nesting depth below this value */
    int64_t count_;     /* values in this (sub)tree, sharing counted */
    int ikind_;         /* which reader-only object */
    void *iptr_;        /* its payload */
};

/* ---- reading ---- */

/* Read a .pt file. On success *out is a tree owned by the caller, free with
 * pt_value_free(). On failure *out is NULL and err (ERR_MAX bytes or NULL)
 * holds one line naming the file and the problem. */
cbx_status io_pt_read(const char *path, struct pt_value **out, char *err);
/* Same from memory (buf is only read during the call); `name` is used in
 * messages (may be NULL). Used by the fuzz target. */
cbx_status io_pt_read_mem(const void *buf, size_t n, const char *name,
                          struct pt_value **out, char *err);
/* Free a tree (NULL is a no-op). */
void pt_value_free(struct pt_value *v);

/* ---- lookup (all results borrowed from the tree) ---- */

/* Value of key in dict d, or NULL (also when d is NULL or not a dict). */
const struct pt_value *pt_dict_get(const struct pt_value *d, const char *key);
/* Follow a dotted path through dicts ("t3.speaker_emb"); at each level an
 * exact key wins over a split at a dot, so flat state-dict keys such as
 * "flow.encoder.x" also resolve. List/tuple items are addressed by index
 * ("items.0"). NULL when absent. */
const struct pt_value *pt_get_path(const struct pt_value *root, const char *path);
/* Number of items of a list/tuple/dict (0 otherwise). */
size_t pt_len(const struct pt_value *v);
/* i-th key/value of a dict, i-th item of a list/tuple, or NULL. */
const char *pt_dict_key(const struct pt_value *d, size_t i);
const struct pt_value *pt_item(const struct pt_value *v, size_t i);
/* The tensor of v when v is a PT_TENSOR, else NULL. */
const struct pt_tensor *pt_as_tensor(const struct pt_value *v);
/* A descriptor over a tensor value's data (borrowed from v). */
struct tensor pt_tensor_view(const struct pt_tensor *t);
/* Take the owned data out of a tensor value (the caller then frees it with
 * free()); the value keeps its shape with data NULL. NULL if not owned. */
void *pt_tensor_take_data(struct pt_value *v);

/* Visit every tensor reachable through dicts, lists and tuples, in order,
 * with its dotted name ("t3.speaker_emb"; flat state dicts give their keys
 * unchanged). A nonzero return from fn stops the walk and is returned. */
typedef int (*pt_tensor_fn)(void *user, const char *name, const struct pt_value *v);
int pt_foreach_tensor(const struct pt_value *root, pt_tensor_fn fn, void *user);

/* ---- building (for the writer and tests) ----
 * Constructors return NULL when out of memory (tensors also for a type
 * without a torch storage class, ndim > TENSOR_MAX_DIMS or a negative
 * dimension). The insert functions take
 * ownership of `item`/`val` in all cases (freed on failure) and return
 * CBX_ERR_NOMEM when it is NULL, so calls can be chained:
 *     rc = pt_dict_set(d, "clap_emb", pt_none()); */
struct pt_value *pt_none(void);
struct pt_value *pt_bool(bool b);
struct pt_value *pt_int(int64_t i);
struct pt_value *pt_float(double f);
struct pt_value *pt_str(const char *s);
struct pt_value *pt_list_new(void);
struct pt_value *pt_tuple_new(void);
/* ordered: written as collections.OrderedDict (state dicts) vs a plain dict. */
struct pt_value *pt_dict_new(bool ordered);
cbx_status pt_append(struct pt_value *seq, struct pt_value *item);
/* Insert or replace (a replaced key keeps its position, as in Python). */
cbx_status pt_dict_set(struct pt_value *d, const char *key, struct pt_value *val);
/* A tensor owning a copy of data (zero-filled when data is NULL). */
struct pt_value *pt_tensor_new(enum dtype type, int ndim, const int64_t *ne,
                               const void *data);
/* A tensor borrowing data, which must outlive the value; data NULL means the
 * bytes come from the writer's fill callback (streaming). */
struct pt_value *pt_tensor_borrow(enum dtype type, int ndim, const int64_t *ne,
                                  const void *data);

/* Writing: io_pt_write / io_pt_write_stream in tools/lib/torch_pt_write.h
 * (the tools and tests write .pt files; the library only reads them). */

#endif
