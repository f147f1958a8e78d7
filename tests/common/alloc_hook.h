/* alloc_hook.h - allocation-failure runs for tests of code that must turn
 * every failed allocation into CBX_ERR_NOMEM, never a crash.
 *
 * Include in exactly one file of a test program. On glibc, outside
 * sanitizer builds (the sanitizers own malloc), malloc/calloc/realloc are
 * interposed and, once armed with alloc_hook_arm(k), fail from call number
 * k on; HAVE_ALLOC_HOOK is then defined. alloc_hook_hit() tells whether a
 * failure was injected since arming. */
#ifndef CBX_ALLOC_HOOK_H
#define CBX_ALLOC_HOOK_H

#include <stdbool.h>
#include <stddef.h>

#if defined(__SANITIZE_ADDRESS__)
#define NO_ALLOC_HOOK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NO_ALLOC_HOOK 1
#endif
#endif

#if defined(__GLIBC__) && !defined(NO_ALLOC_HOOK)
#define HAVE_ALLOC_HOOK 1
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t m);
extern void *__libc_realloc(void *p, size_t n);
static long alloc_fail_at = -1, alloc_n_calls;
static bool alloc_fail_hit;
static bool alloc_fails(void)
{
    if (alloc_fail_at < 0) return false;
    if (alloc_n_calls++ < alloc_fail_at) return false;
    alloc_fail_hit = true;
    return true;
}
void *malloc(size_t n) { return alloc_fails() ? NULL : __libc_malloc(n); }
void *calloc(size_t n, size_t m) { return alloc_fails() ? NULL : __libc_calloc(n, m); }
void *realloc(void *p, size_t n) { return alloc_fails() ? NULL : __libc_realloc(p, n); }
static void alloc_hook_arm(long k)
{
    alloc_fail_at = k;
    alloc_n_calls = 0;
    alloc_fail_hit = false;
}
static void alloc_hook_disarm(void) { alloc_fail_at = -1; }
static bool alloc_hook_hit(void) { return alloc_fail_hit; }
#endif

#endif
