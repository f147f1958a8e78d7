/* test_arena.c - the arena's scratch children and precision hint
 * (core/arena.h invariant 4): a child given back and taken again is the
 * same arena with the same memory (no new pages on repeated calls), busy
 * children are distinct, children inherit the backend and the BF16 hint,
 * arena_reset of the parent gives every child back, running out of
 * children is reported in the parent, and freeing the parent frees them
 * (LeakSanitizer in the sanitizer build).
 * Pools (invariant 5): a released arena's blocks go to its pool and the
 * next arena of the pool takes them (same memory), the smallest block
 * that fits first, of equal ones the most touched that covers the
 * request; an arena without a pool keeps its blocks; scratch
 * children inherit the pool, arena_release_idle hands over only the
 * children not in use; two threads sharing a pool keep their data; idle
 * blocks are freed with the pool. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/arena.h"
#include "core/backend.h"
#include "testutil.h"

#define MIB ((size_t)1 << 20)

struct worker {
    struct arena_pool *pool;
    const struct backend *be;
    unsigned char tag;
    int bad;
};

/* Takes, fills, checks and releases arena memory 100 times. */
static void *work(void *arg)
{
    struct worker *w = arg;
    struct arena *a = arena_create(w->be, 0);
    if (!a) {
        w->bad = -1;
        return NULL;
    }
    arena_set_pool(a, w->pool);
    for (int i = 0; i < 100; i++) {
        const size_t n = (size_t)(1 + (i * 7 + w->tag) % 20) * MIB;
        unsigned char *p = arena_alloc(a, n);
        if (!p) {
            w->bad = -1;
            break;
        }
        memset(p, w->tag, n);
        for (size_t k = 0; k < n; k += 4093) w->bad += p[k] != w->tag;
        arena_release(a);
    }
    arena_free(a);
    return NULL;
}

static void pools(const struct backend *cpu)
{
    struct arena_pool *pool = arena_pool_create(cpu);
    struct arena *a = arena_create(cpu, 16 * MIB), *b = arena_create(cpu, 16 * MIB), *c = arena_create(cpu, 0);
    CHECK(pool && a && b && c && arena_pool_idle_bytes(pool) == 0, "a new pool is empty");
    if (!pool || !a || !b || !c) goto done;
    arena_set_pool(a, pool);
    arena_set_pool(b, pool);

    /* a's block to the pool, then to b */
    char *pa = arena_alloc(a, 8 * MIB);
    memset(pa, 3, 8 * MIB);
    arena_release(a);
    const size_t idle = arena_pool_idle_bytes(pool);
    char *pb = arena_alloc(b, 8 * MIB);
    printf("pool: %zu MiB idle after a's release; b takes %p (a had %p), %zu idle after\n", idle / MIB,
           (void *)pb, (void *)pa, arena_pool_idle_bytes(pool));
    CHECK(idle >= 8 * MIB && pb == pa && arena_pool_idle_bytes(pool) == 0,
          "a released block is the next arena's memory");
    CHECK(arena_used(a) == 0 && arena_status(a) == CBX_OK, "a released arena is reset");

    /* without a pool, release keeps the blocks */
    char *pc = arena_alloc(c, 8 * MIB);
    arena_release(c);
    CHECK(arena_alloc(c, 8 * MIB) == pc, "an arena without a pool keeps its block");

    /* the smallest block that fits: b holds one 16 MiB block, a takes one
     * for 40 MiB of its own (the block size doubled until it fits: 64
     * MiB); both released; 10 MiB takes the small one, 50 the large one */
    char *big = arena_alloc(a, 40 * MIB);
    arena_release(a);
    arena_release(b);
    CHECK(arena_pool_idle_bytes(pool) == 80 * MIB, "16 + 64 MiB idle (%zu MiB)", arena_pool_idle_bytes(pool) / MIB);
    CHECK(arena_alloc(a, 10 * MIB) == pb, "10 MiB: the smallest idle block that fits");
    CHECK(arena_alloc(b, 50 * MIB) == big, "50 MiB: the block that holds it");
    arena_release(a);
    arena_release(b);

    /* children inherit the pool; only idle ones are handed over */
    struct arena *s = arena_scratch(a), *busy = arena_scratch(a);
    char *ps = s ? arena_alloc(s, 50 * MIB) : NULL;
    char *pbusy = busy ? arena_alloc(busy, 60 * MIB) : NULL;
    arena_scratch_done(a, s);
    const size_t before = arena_pool_idle_bytes(pool);
    arena_release_idle(a);
    const size_t after = arena_pool_idle_bytes(pool);
    printf("release_idle: %zu -> %zu MiB idle\n", before / MIB, after / MIB);
    CHECK(ps && pbusy && after >= before + 50 * MIB && after < before + 110 * MIB,
          "the idle child's block is handed over, the busy child's is not");
    CHECK(arena_alloc(b, 45 * MIB) == ps, "and taken by another arena of the pool");
    arena_scratch_done(a, busy);
    arena_release(a);
    arena_release(b);

    /* of equal blocks, the one whose touched pages cover the request: x
     * touched 12 MiB of its block, y 2 MiB of its own and went to the
     * pool last; a 4 MiB request takes x's block, so y's untouched pages
     * stay untouched (taking the last given would touch 2 MiB more) */
    {
        struct arena_pool *q = arena_pool_create(cpu);
        struct arena *x = arena_create(cpu, 16 * MIB), *y = arena_create(cpu, 16 * MIB);
        if (q && x && y) {
            arena_set_pool(x, q);
            arena_set_pool(y, q);
            char *px = arena_alloc(x, 12 * MIB), *py = arena_alloc(y, 2 * MIB);
            if (px) memset(px, 1, 12 * MIB);
            if (py) memset(py, 1, 2 * MIB);
            arena_release(x);
            arena_release(y);
            char *p4 = arena_alloc(y, 4 * MIB), *p1 = arena_alloc(x, 1 * MIB);
            printf("touched: 4 MiB takes %p (12 MiB touched: %p, 2 MiB: %p), then 1 MiB takes %p\n", (void *)p4,
                   (void *)px, (void *)py, (void *)p1);
            CHECK(px && py && p4 == px && p1 == py, "of equal idle blocks, the most touched that covers the request");
        } else {
            CHECK(0, "out of memory");
        }
        arena_free(x);
        arena_free(y);
        arena_pool_free(q);
    }

    /* two threads on one pool */
    struct worker w[2] = {{pool, cpu, 0x5a, 0}, {pool, cpu, 0xa5, 0}};
    pthread_t th[2];
    int started = 0;
    for (int i = 0; i < 2; i++) started += pthread_create(&th[i], NULL, work, &w[i]) == 0;
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    printf("threads: %d started, bad bytes %d and %d, %zu MiB idle\n", started, w[0].bad, w[1].bad,
           arena_pool_idle_bytes(pool) / MIB);
    CHECK(started == 2 && w[0].bad == 0 && w[1].bad == 0, "two threads sharing a pool keep their data");
done:
    arena_free(a);
    arena_free(b);
    arena_free(c);
    arena_pool_free(pool); /* the idle blocks (LeakSanitizer) */
    arena_pool_free(NULL);
}

int main(void)
{
    struct backend *cpu = backend_cpu_create(1);
    CHECK(cpu != NULL, "backend");
    if (!cpu) return test_summary();
    struct arena *a = arena_create(cpu, 0);
    CHECK(a != NULL && !arena_bf16(a), "a new arena has the F32 hint");
    if (!a) return test_summary();

    /* same child, same memory, after it is given back */
    struct arena *s = arena_scratch(a);
    CHECK(s != NULL && s != a && arena_backend(s) == cpu, "scratch on the parent's backend");
    void *p1 = arena_alloc(s, (size_t)8 << 20);
    memset(p1, 1, (size_t)8 << 20);
    arena_scratch_done(a, s);
    struct arena *s2 = arena_scratch(a);
    void *p2 = arena_alloc(s2, (size_t)8 << 20);
    printf("scratch reuse: child %p -> %p, block %p -> %p\n", (void *)s, (void *)s2, p1, p2);
    CHECK(s2 == s && p2 == p1, "a child given back is reused with its memory");
    CHECK(arena_used(s2) >= (size_t)8 << 20, "a reused child starts reset (used %zu)", arena_used(s2));

    /* busy children are distinct; the hint is inherited when taken */
    arena_set_bf16(a, true);
    struct arena *t = arena_scratch(a);
    CHECK(t != NULL && t != s2 && arena_bf16(t), "second child distinct, with the BF16 hint");
    CHECK(!arena_bf16(s2), "a child keeps the hint it was taken with");
    arena_scratch_done(a, t);
    arena_scratch_done(a, NULL); /* no-op */

    /* the parent's reset gives every child back */
    arena_reset(a);
    struct arena *u = arena_scratch(a);
    CHECK(u == s, "after the parent's reset the first child is free again");

    /* too many at once: NULL, and the parent records why */
    int got = 1;
    struct arena *many[16];
    for (int i = 0; i < 16; i++)
        if ((many[i] = arena_scratch(a))) got++;
    printf("children in use at once: %d; parent status %s: %s\n", got,
           cbx_status_str(arena_status(a)), arena_errmsg(a));
    CHECK(got == 8 && arena_status(a) == CBX_ERR_NOMEM && strstr(arena_errmsg(a), "scratch"),
          "the ninth child is refused with a message in the parent");
    arena_reset(a);
    CHECK(arena_status(a) == CBX_OK && arena_scratch(a) != NULL, "usable again after reset");

    arena_free(a); /* frees the children too */
    pools(cpu);
    backend_cpu_free(cpu);
    return test_summary();
}
