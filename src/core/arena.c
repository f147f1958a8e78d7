/* arena.c - bump allocator; see arena.h for the invariants. */
#include "arena.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#define ALIGN 64

struct block {
    struct block *next;
    char *mem;        /* backend memory (or host for host blocks) */
    size_t size, used;
    size_t touched;   /* the most of it ever used: pages already faulted in */
    bool be_mem;      /* mem is from backend_buf_alloc (may go to a pool) */
};

struct arena_pool {
    const struct backend *be;
    pthread_mutex_t lock;
    struct block *idle;
    size_t idle_bytes;
};

#define MAX_SCRATCH 8

struct arena {
    const struct backend *be;
    bool bf16;                        /* precision hint (arena_set_bf16) */
    bool row_exact;                   /* arena_set_row_exact */
    struct arena *child[MAX_SCRATCH]; /* scratch arenas, owned */
    bool child_busy[MAX_SCRATCH];
    size_t block_size;
    struct block *data;   /* backend blocks, first is current */
    struct block *host;   /* host blocks for descriptors and scratch */
    struct arena_pool *pool;  /* invariant 5; NULL: none */
    size_t used, peak;
    cbx_status status;
    char msg[ERR_MAX];
};

static void free_blocks(struct block *b, const struct backend *be)
{
    while (b) {
        struct block *n = b->next;
        if (be && b->be_mem) backend_buf_free(be, b->mem); else free(b->mem);
        free(b);
        b = n;
    }
}

struct arena_pool *arena_pool_create(const struct backend *be)
{
    struct arena_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    if (pthread_mutex_init(&p->lock, NULL)) {
        free(p);
        return NULL;
    }
    p->be = be;
    return p;
}

void arena_pool_free(struct arena_pool *p)
{
    if (!p) return;
    free_blocks(p->idle, p->be);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

size_t arena_pool_idle_bytes(const struct arena_pool *p)
{
    if (!p) return 0;
    pthread_mutex_lock((pthread_mutex_t *)&p->lock);
    const size_t n = p->idle_bytes;
    pthread_mutex_unlock((pthread_mutex_t *)&p->lock);
    return n;
}

/* Bytes of a request of need bytes at the start of b that fall on pages
 * not yet touched. */
static size_t untouched(const struct block *b, size_t need) { return need > b->touched ? need - b->touched : 0; }

/* The smallest idle block of p holding need bytes (big blocks stay for
 * big requests), taken out; among blocks of that size, the one where the
 * request touches the fewest new pages, then the most touched. NULL: none.
 * (Taking equal blocks in any other order lets every block of the pool
 * become touched to its end over time, so a process would come to hold
 * all of its blocks' memory instead of its largest need's.) */
static struct block *pool_take(struct arena_pool *p, size_t need)
{
    pthread_mutex_lock(&p->lock);
    struct block **best = NULL;
    for (struct block **b = &p->idle; *b; b = &(*b)->next) {
        const struct block *c = *b, *o = best ? *best : NULL;
        if (c->size < need) continue;
        if (!o || c->size < o->size ||
            (c->size == o->size && (untouched(c, need) < untouched(o, need) ||
                                    (untouched(c, need) == untouched(o, need) && c->touched > o->touched))))
            best = b;
    }
    struct block *r = NULL;
    if (best) {
        r = *best;
        *best = r->next;
        p->idle_bytes -= r->size;
    }
    pthread_mutex_unlock(&p->lock);
    return r;
}

/* Moves the backend blocks of *list to p (the rest stay, emptied). */
static void pool_give(struct arena_pool *p, struct block **list)
{
    pthread_mutex_lock(&p->lock);
    for (struct block **b = list; *b;) {
        struct block *c = *b;
        c->used = 0;
        if (!c->be_mem) {
            b = &c->next;
            continue;
        }
        *b = c->next;
        c->next = p->idle;
        p->idle = c;
        p->idle_bytes += c->size;
    }
    pthread_mutex_unlock(&p->lock);
}

struct arena *arena_create(const struct backend *be, size_t block_size)
{
    struct arena *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->be = be;
    a->block_size = block_size ? block_size : (size_t)64 << 20;
    return a;
}

void arena_free(struct arena *a)
{
    if (!a) return;
    for (int i = 0; i < MAX_SCRATCH; i++) arena_free(a->child[i]);
    free_blocks(a->data, a->be);
    free_blocks(a->host, a->be);
    free(a);
}

void arena_reset(struct arena *a)
{
    for (int i = 0; i < MAX_SCRATCH; i++)
        if (a->child_busy[i]) {
            arena_reset(a->child[i]);
            a->child_busy[i] = false;
        }
    for (struct block *b = a->data; b; b = b->next) b->used = 0;
    for (struct block *b = a->host; b; b = b->next) b->used = 0;
    a->used = 0;
    a->status = CBX_OK;
    a->msg[0] = 0;
}

void arena_set_pool(struct arena *a, struct arena_pool *p)
{
    a->pool = p;
    for (int i = 0; i < MAX_SCRATCH; i++)
        if (a->child[i]) arena_set_pool(a->child[i], p);
}

void arena_release(struct arena *a)
{
    arena_reset(a);
    for (int i = 0; i < MAX_SCRATCH; i++)
        if (a->child[i]) arena_release(a->child[i]);
    if (!a->pool) return;
    pool_give(a->pool, &a->data);
    pool_give(a->pool, &a->host);
}

void arena_release_idle(struct arena *a)
{
    for (int i = 0; i < MAX_SCRATCH; i++)
        if (a->child[i] && !a->child_busy[i]) arena_release(a->child[i]);
}

const struct backend *arena_backend(const struct arena *a) { return a->be; }

void arena_set_bf16(struct arena *a, bool on) { a->bf16 = on; }
bool arena_bf16(const struct arena *a) { return a->bf16; }
void arena_set_row_exact(struct arena *a, bool on) { a->row_exact = on; }
bool arena_row_exact(const struct arena *a) { return a->row_exact; }

struct arena *arena_scratch(struct arena *parent)
{
    for (int i = 0; i < MAX_SCRATCH; i++) {
        if (parent->child_busy[i]) continue;
        if (!parent->child[i] && !(parent->child[i] = arena_create(parent->be, 0))) break;
        struct arena *c = parent->child[i];
        c->pool = parent->pool;
        arena_reset(c);
        c->bf16 = parent->bf16;
        c->row_exact = parent->row_exact;
        parent->child_busy[i] = true;
        return c;
    }
    arena_fail(parent, CBX_ERR_NOMEM, "out of memory (or more than %d scratch arenas in use)",
               MAX_SCRATCH);
    return NULL;
}

void arena_scratch_done(struct arena *parent, struct arena *child)
{
    if (!child) return;
    for (int i = 0; i < MAX_SCRATCH; i++)
        if (parent->child[i] == child) {
            arena_reset(child);
            parent->child_busy[i] = false;
        }
}

cbx_status arena_fail(struct arena *a, cbx_status s, const char *fmt, ...)
{
    if (a->status == CBX_OK) {
        a->status = s;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(a->msg, sizeof a->msg, fmt, ap);
        va_end(ap);
    }
    return s;
}

cbx_status arena_status(const struct arena *a) { return a->status; }
const char *arena_errmsg(const struct arena *a) { return a->msg; }
size_t arena_used(const struct arena *a) { return a->used; }
size_t arena_peak(const struct arena *a) { return a->peak; }

/* First fit over the block list; a new block when none has room. */
static void *bump(struct arena *a, struct block **list, size_t n, bool host)
{
    if (a->status != CBX_OK) return NULL;
    size_t need = (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    if (need == 0) need = ALIGN;
    for (struct block *b = *list; b; b = b->next) {
        if (b->size - b->used >= need) {
            void *p = b->mem + b->used;
            b->used += need;
            if (b->used > b->touched) b->touched = b->used;
            if (!host) {
                a->used += need;
                if (a->used > a->peak) a->peak = a->used;
            }
            return p;
        }
    }
    size_t bs = host ? ((size_t)1 << 20) : a->block_size;
    if (bs < need && host) bs = need;
    /* backend blocks: the block size doubled until the request fits, so
     * requests that grow from call to call (a stream's chunks) find room
     * in a block made for an earlier one */
    while (bs < need) bs = bs > SIZE_MAX / 2 ? need : 2 * bs;
    const bool be_mem = !host && a->be;
    struct block *b = be_mem && a->pool ? pool_take(a->pool, need) : NULL;
    if (b) {
        bs = b->size;
    } else if ((b = calloc(1, sizeof *b))) {
        b->be_mem = be_mem;
        b->mem = be_mem ? backend_buf_alloc(a->be, bs) : aligned_alloc(ALIGN, bs);
    }
    if (!b || !b->mem) {
        free(b);
        arena_fail(a, CBX_ERR_NOMEM, "out of memory allocating %zu bytes of %s arena memory",
                   bs, host ? "host" : "backend");
        return NULL;
    }
    b->size = bs;
    b->used = need;
    if (b->used > b->touched) b->touched = b->used;
    b->next = *list;
    *list = b;
    if (!host) {
        a->used += need;
        if (a->used > a->peak) a->peak = a->used;
    }
    return b->mem;
}

void *arena_alloc(struct arena *a, size_t n)
{
    if (!a->be || a->be->host) return bump(a, &a->host, n, false);
    return bump(a, &a->data, n, false);
}

void *arena_alloc_host(struct arena *a, size_t n) { return bump(a, &a->host, n, true); }

struct tensor *arena_desc(struct arena *a, const struct tensor *t)
{
    struct tensor *d = bump(a, &a->host, sizeof *d, true);
    if (d) *d = *t;
    return d;
}

struct tensor *arena_tensor(struct arena *a, enum dtype type, int ndim, const int64_t *ne)
{
    if (a->status != CBX_OK) return NULL;
    if (ndim < 0 || ndim > TENSOR_MAX_DIMS || !dtype_traits(type)) {
        arena_fail(a, CBX_ERR_INTERNAL, "arena_tensor: bad ndim %d or type %d", ndim, (int)type);
        return NULL;
    }
    for (int d = 0; d < ndim; d++)
        if (ne[d] < 0) {
            arena_fail(a, CBX_ERR_INTERNAL, "arena_tensor: negative dimension %lld",
                       (long long)ne[d]);
            return NULL;
        }
    struct tensor t = tensor_make(type, ndim, ne, NULL, a->be);
    if (ndim > 0 && dtype_row_size(type, ne[ndim - 1]) == 0 && ne[ndim - 1] != 0) {
        arena_fail(a, CBX_ERR_INTERNAL, "arena_tensor: row of %lld is not whole %s blocks",
                   (long long)ne[ndim - 1], dtype_name(type));
        return NULL;
    }
    t.data = arena_alloc(a, tensor_nbytes(&t));
    if (!t.data) return NULL;
    return arena_desc(a, &t);
}
