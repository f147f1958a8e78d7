/* arena.h - per-stage bump allocator for activations, with a sticky error.
 *
 * Invariants:
 *  1. Memory comes in blocks obtained from the arena's backend; allocation
 *     bumps a pointer (64-byte aligned) and never moves earlier tensors.
 *  2. Nothing is freed one by one: arena_reset() makes every tensor of the
 *     arena invalid at once and keeps the blocks for reuse.
 *  3. The first failure (out of memory, a shape error reported by an op)
 *     is kept with its message; every later allocation returns NULL, so a
 *     chain of ops can be checked once at its end (arena_status()).
 *  4. Scratch arenas (arena_scratch) are children owned by their parent:
 *     they keep their memory until the parent is freed, so a parent kept
 *     across calls lets repeated calls run without touching new pages.
 *  5. An arena given a pool (arena_set_pool; children inherit it) hands
 *     its blocks of backend memory to the pool on arena_release() and
 *     takes blocks from there before asking the backend for new ones. So
 *     stages that run one after another (T3, then S3Gen) share memory
 *     whose pages are already touched, and the process holds the larger
 *     stage's memory, not the sum. An arena takes the smallest idle
 *     block that fits and, of blocks that size, the one whose touched
 *     pages cover most of the request, so the touched memory follows the
 *     largest need, not the blocks' sum.
 * Tensor descriptors themselves live in host memory owned by the arena,
 * even when the data lives on a device.
 * Thread safety: one thread at a time per arena (children included). */
#ifndef CBX_ARENA_H
#define CBX_ARENA_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "tensor.h"

struct arena;
struct arena_pool;
struct backend;

/* A pool of idle blocks of backend be for arenas of be (invariant 5).
 * NULL when out of memory. Freed after every arena using it; frees the
 * idle blocks. Thread safety: arenas of different threads may share a
 * pool (its list is locked). */
struct arena_pool *arena_pool_create(const struct backend *be);
void arena_pool_free(struct arena_pool *p); /* no-op on NULL */
/* Bytes of backend memory idle in p. */
size_t arena_pool_idle_bytes(const struct arena_pool *p);

/* block_size: bytes per data block (grown when a request is larger).
 * NULL on allocation failure. */
struct arena *arena_create(const struct backend *be, size_t block_size);
void arena_free(struct arena *a); /* no-op on NULL */
void arena_reset(struct arena *a);  /* also clears the sticky error */
/* Use pool p (of a's backend; NULL: none) for a and its scratch arenas
 * from now on. */
void arena_set_pool(struct arena *a, struct arena_pool *p);
/* arena_reset, then a's blocks of backend memory and those of its scratch
 * arenas go to its pool (none: kept, as arena_reset). No scratch arena
 * may be in use. */
void arena_release(struct arena *a);
/* The blocks of a's scratch arenas not in use (and of theirs) to a's pool:
 * for a stage whose intermediates are dead to leave them to the next. */
void arena_release_idle(struct arena *a);
const struct backend *arena_backend(const struct arena *a);

/* A new contiguous tensor of the arena's backend; NULL after a failure.
 * Arena-owned. Contents are uninitialised. */
struct tensor *arena_tensor(struct arena *a, enum dtype type, int ndim,
                            const int64_t *ne);
/* A descriptor only (for views); copies *t. Arena-owned. */
struct tensor *arena_desc(struct arena *a, const struct tensor *t);
/* Raw backend memory (scratch for kernels); NULL after a failure. */
void *arena_alloc(struct arena *a, size_t nbytes);
/* Host memory (for kernels' host-side scratch and descriptors). */
void *arena_alloc_host(struct arena *a, size_t nbytes);

/* A scratch arena for intermediate results: the parent's first child not
 * in use (created on first need), reset, with the parent's backend and
 * BF16 hint. Give it back with arena_scratch_done(), which resets it.
 * Children are freed with the parent. NULL (and a failure recorded in the
 * parent) when out of memory. */
struct arena *arena_scratch(struct arena *parent);
void arena_scratch_done(struct arena *parent, struct arena *child); /* no-op on NULL */

/* Precision hint for kernels: when set, products may round their operands
 * to BF16 (accumulating in F32) where the CPU makes that faster. Off by
 * default; F32 parity paths never set it. */
void arena_set_bf16(struct arena *a, bool on);
bool arena_bf16(const struct arena *a);
/* Row-exact products: when set, each row of a linear product is computed
 * as it would be alone, so a row gives the same bits whatever the number
 * of rows beside it (batched decoding of independent sequences, T3's
 * t3_batch_step, relies on it); kernels then keep their per-row path
 * (cpu: the dot products; cuda: the decode GEMVs, a few rows a launch)
 * at any row count. Off by default. */
void arena_set_row_exact(struct arena *a, bool on);
bool arena_row_exact(const struct arena *a);

/* Record a failure (the first one wins); returns s. */
cbx_status arena_fail(struct arena *a, cbx_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
cbx_status arena_status(const struct arena *a);
const char *arena_errmsg(const struct arena *a); /* "" when none */
/* Bytes handed out since the last reset, and the high-water mark. */
size_t arena_used(const struct arena *a);
size_t arena_peak(const struct arena *a);

#endif
