/* backend.c - the cpu and ref backends: host memory plus kernel tables.
 * The kernels themselves live in src/core/cpu/ and src/core/ref/. */
#include "backend.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cpu/blas.h"
#include "cpu_features.h"
#include "error.h"
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
static bool host_copy(const struct backend *be, void *dst, const void *src, size_t n)
{
    (void)be;
    memcpy(dst, src, n);
    return true;
}

/* copy_2d of the cpu backend: rows spread over its pool, so a large copy
 * (a voice prefix restored into a KV cache) uses every core and takes its
 * turn with other threads' jobs (threadpool.h invariant 4) */
struct copy_rows { char *dst; const char *src; size_t dpitch, spitch, width; };

static void copy_rows(void *ctx, int64_t b, int64_t e, int ith)
{
    const struct copy_rows *c = ctx;
    (void)ith;
    for (int64_t r = b; r < e; r++) memcpy(c->dst + (size_t)r * c->dpitch, c->src + (size_t)r * c->spitch, c->width);
}

static bool host_copy_2d(const struct backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
                         size_t width, size_t height)
{
    struct copy_rows c = {dst, src, dpitch, spitch, width};
    /* rows of 64 KiB or more go to the pool one by one, smaller in groups */
    const int64_t grain = width >= 65536 ? 1 : (int64_t)(65536 / (width ? width : 1));
    tp_parallel_for(be->tp, (int64_t)height, grain, copy_rows, &c);
    return true;
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
    be->copy_2d = host_copy_2d;
    be->prepare_weight = cpu_prepare_weight;
    be->release_weight = cpu_release_weight;
    n_threads = n_threads > 0 ? n_threads : tp_default_threads();
    be->tp = shared ? tp_shared(n_threads) : tp_create(n_threads);
    be->shared = shared;
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
    if (be->shared)
        tp_shared_release(be->tp);
    else
        tp_free(be->tp);
    free(be);
}

/* copy_2d of the reference: byte by byte */
static bool ref_copy_2d(const struct backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
                        size_t width, size_t height)
{
    (void)be;
    for (size_t r = 0; r < height; r++)
        for (size_t i = 0; i < width; i++) ((char *)dst)[r * dpitch + i] = ((const char *)src)[r * spitch + i];
    return true;
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
    b.copy_2d = ref_copy_2d;
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

/* ---- choosing a backend by name ------------------------------------------ */

const char *backend_auto_name(void)
{
#ifdef CBX_HAVE_CUDA
    if (backend_cuda_device_count() > 0) return "cuda";
#endif
    return "cpu";
}

/* "cuda" or "cuda:N" -> device N (0 when absent); -1 when name is not one */
static int cuda_device_of(const char *name)
{
    if (strncmp(name, "cuda", 4) != 0) return -1;
    if (!name[4]) return 0;
    if (name[4] != ':' || !name[5] || strlen(name + 5) > 4) return -1;
    int d = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        d = d * 10 + (*p - '0');
    }
    return d;
}

cbx_status backend_check_name(const char *name, char *err)
{
    if (!name || !*name || strcmp(name, "auto") == 0 || strcmp(name, "cpu") == 0) return CBX_OK;
#ifdef CBX_HAVE_CUDA
    if (cuda_device_of(name) >= 0) return CBX_OK;
    return err_setf(err, CBX_ERR_INVALID_ARG, "unknown backend '%s' (this build has: cpu, cuda, cuda:N, auto)",
                    name);
#else
    if (cuda_device_of(name) >= 0)
        return err_setf(err, CBX_ERR_UNSUPPORTED,
                        "backend '%s': this build has no CUDA backend (build with -DCBX_CUDA=ON); it has: cpu",
                        name);
    return err_setf(err, CBX_ERR_INVALID_ARG, "unknown backend '%s' (this build has: cpu, auto)", name);
#endif
}

struct backend *backend_create(const char *name, int n_threads, bool shared, char *err)
{
    if (!name || !*name || strcmp(name, "auto") == 0) name = backend_auto_name();
    if (strcmp(name, "cpu") == 0) {
        struct backend *be = cpu_create(n_threads, shared);
        if (!be) err_setf(err, CBX_ERR_NOMEM, "cpu backend: cannot start %d threads", n_threads);
        return be;
    }
    if (backend_check_name(name, err) != CBX_OK) return NULL;
#ifdef CBX_HAVE_CUDA
    struct backend *be = backend_cuda_create(cuda_device_of(name), err);
    if (be) be->shared = shared;
    return be;
#else
    return NULL;
#endif
}

struct backend *backend_create_like(const struct backend *like, int n_threads, bool shared, char *err)
{
    if (!like || like->host) return backend_create("cpu", n_threads, shared, err);
#ifdef CBX_HAVE_CUDA
    char name[32];
    snprintf(name, sizeof name, "cuda:%d", backend_cuda_device(like));
    return backend_create(name, n_threads, shared, err);
#else
    err_setf(err, CBX_ERR_INTERNAL, "backend %s: this build cannot compute with it", like->name);
    return NULL;
#endif
}

void backend_free(struct backend *be)
{
    if (!be || be == &ref_be) return;
#ifdef CBX_HAVE_CUDA
    if (!be->host) {
        backend_cuda_free(be);
        return;
    }
#endif
    backend_cpu_free(be);
}

bool backend_compatible(const struct backend *be, const struct backend *other)
{
    if (!be || !other) return be == other || (be ? be->host : other->host);
    if (be->host || other->host) return be->host && other->host;
#ifdef CBX_HAVE_CUDA
    return backend_cuda_device(be) == backend_cuda_device(other);
#else
    return false;
#endif
}

void backend_describe(char *buf, size_t n)
{
    size_t k = 0;
    const char *bf16 = cpu_amx_bf16_ready() ? "AMX-BF16"
                       : cpu_avx512_bf16_ready()                      ? "AVX512-BF16"
                                                                      : "none (F32)";
    int w = snprintf(buf, n, "cpu   yes  %d threads, %s%s, f32 products: %s, bf16 products: %s\n",
                     tp_default_threads(), cpu_level_name(cpu_level()), cpu_amx_ready() ? " + AMX" : "",
                     cpu_sgemm_name(), bf16);
    if (w > 0) k = (size_t)w < n ? (size_t)w : n;
#ifdef CBX_HAVE_CUDA
    const int nd = backend_cuda_device_count();
    if (nd == 0 && k < n) snprintf(buf + k, n - k, "cuda  no   built, but no CUDA device or driver here\n");
    for (int d = 0; d < nd && k < n; d++) {
        char dn[256];
        if (!backend_cuda_device_name(d, dn, sizeof dn)) snprintf(dn, sizeof dn, "unreadable");
        w = snprintf(buf + k, n - k, "cuda:%d yes  %s%s\n", d, dn, d == 0 ? " (\"cuda\")" : "");
        if (w > 0) k += (size_t)w < n - k ? (size_t)w : n - k;
    }
#else
    if (k < n) snprintf(buf + k, n - k, "cuda  no   not built (cmake -DCBX_CUDA=ON)\n");
#endif
}
