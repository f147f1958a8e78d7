/* backend.c - the cpu and ref backends: host memory plus kernel tables.
 * The kernels themselves live in src/core/cpu/ and src/core/ref/. */
#include "backend.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cpu/blas.h"
#include "threadpool.h"

#define HUGE_PAGE ((size_t)2 << 20)

static void *host_alloc(const struct backend *be, size_t n)
{
    (void)be;
    if (n < 4 * HUGE_PAGE) /* 64-byte aligned for AVX-512 loads */
        return aligned_alloc(64, (n + 63) & ~(size_t)63);
    /* Large arena blocks: 2 MiB aligned and marked for transparent huge
     * pages, so first-touch page faults (a quarter of the CPU time of some
     * stages with 4 KiB pages) drop by a factor of 512. Advisory only. */
    size_t sz = (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    void *p = aligned_alloc(HUGE_PAGE, sz);
#ifdef MADV_HUGEPAGE
    if (p) madvise(p, sz, MADV_HUGEPAGE);
#endif
    return p;
}
static void host_free(const struct backend *be, void *p) { (void)be; free(p); }
static void host_copy(const struct backend *be, void *dst, const void *src, size_t n)
{
    (void)be;
    memcpy(dst, src, n);
}

static struct backend *cpu_create(int n_threads, bool shared)
{
    struct backend *be = calloc(1, sizeof *be);
    if (!be) return NULL;
    be->name = "cpu";
    be->host = true;
    be->buf_alloc = host_alloc;
    be->buf_free = host_free;
    be->to_host = host_copy;
    be->from_host = host_copy;
    be->prepare_weight = cpu_prepare_weight;
    be->release_weight = cpu_release_weight;
    n_threads = n_threads > 0 ? n_threads : tp_default_threads();
    be->tp = shared ? tp_shared(n_threads) : tp_create(n_threads);
    be->shared_tp = shared;
    if (!be->tp) { free(be); return NULL; }
    cpu_blas_init();
    cpu_register_elementwise(&be->k);
    cpu_register_linear(&be->k);
    cpu_register_conv(&be->k);
    cpu_register_nn(&be->k);
    cpu_register_spectral(&be->k);
    cpu_register_conv2d(&be->k);
    return be;
}

struct backend *backend_cpu_create(int n_threads) { return cpu_create(n_threads, false); }
struct backend *backend_cpu_create_shared(int n_threads) { return cpu_create(n_threads, true); }

void backend_cpu_free(struct backend *be)
{
    if (!be) return;
    if (be->shared_tp)
        tp_shared_release(be->tp);
    else
        tp_free(be->tp);
    free(be);
}

static struct backend ref_be;
static pthread_once_t ref_once = PTHREAD_ONCE_INIT;

static void ref_init(void)
{
    struct backend b = {0};
    b.name = "ref";
    b.host = true;
    b.buf_alloc = host_alloc;
    b.buf_free = host_free;
    b.to_host = host_copy;
    b.from_host = host_copy;
    /* no prepare_weight: ref reads every weight in its plain layout */
    ref_register_elementwise(&b.k);
    ref_register_linear(&b.k);
    ref_register_conv(&b.k);
    ref_register_nn(&b.k);
    ref_register_spectral(&b.k);
    ref_register_conv2d(&b.k);
    ref_be = b;
}

const struct backend *backend_ref(void)
{
    /* filled once, by the first caller (others wait); constant afterwards */
    pthread_once(&ref_once, ref_init);
    return &ref_be;
}
