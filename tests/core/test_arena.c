/* test_arena.c - the arena's scratch children and precision hint
 * (core/arena.h invariant 4): a child given back and taken again is the
 * same arena with the same memory (no new pages on repeated calls), busy
 * children are distinct, children inherit the backend and the BF16 hint,
 * arena_reset of the parent gives every child back, running out of
 * children is reported in the parent, and freeing the parent frees them
 * (LeakSanitizer in the sanitizer build). */
#include <stdio.h>
#include <string.h>

#include "core/arena.h"
#include "core/backend.h"
#include "testutil.h"

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
    backend_cpu_free(cpu);
    return test_summary();
}
