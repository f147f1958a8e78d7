/* backend.c - the cpu and ref backends: host memory plus kernel tables.
 * The kernels themselves live in src/core/cpu/ and src/core/ref/. */
#include "backend.h"

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

struct backend *backend_cpu_create(int n_threads)
{
    struct backend *be = calloc(1, sizeof *be);
    if (!be) return NULL;
    be->name = "cpu";
    be->host = true;
    be->buf_alloc = host_alloc;
    be->buf_free = host_free;
    be->to_host = host_copy;
    be->from_host = host_copy;
    be->tp = tp_create(n_threads > 0 ? n_threads : tp_default_threads());
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

void backend_cpu_free(struct backend *be)
{
    if (!be) return;
    tp_free(be->tp);
    free(be);
}

static struct backend ref_be;
static int ref_ready;

const struct backend *backend_ref(void)
{
    /* Filled on first use; the table is constant afterwards. Callers that
     * race on the very first call write identical values. */
    if (!ref_ready) {
        struct backend b = {0};
        b.name = "ref";
        b.host = true;
        b.buf_alloc = host_alloc;
        b.buf_free = host_free;
        b.to_host = host_copy;
        b.from_host = host_copy;
        ref_register_elementwise(&b.k);
        ref_register_linear(&b.k);
        ref_register_conv(&b.k);
        ref_register_nn(&b.k);
        ref_register_spectral(&b.k);
        ref_register_conv2d(&b.k);
        ref_be = b;
        ref_ready = 1;
    }
    return &ref_be;
}
