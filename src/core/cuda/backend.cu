/* backend.cu - the CUDA backend: device memory (cudaMalloc), explicit
 * transfers on the backend's stream, the cuBLAS handle, the checked-call
 * helpers of cuda_common.h and the kernel table (one register function
 * per kernel group, src/core/cuda/<group>.cu).
 *
 * Precision: F32 GEMMs run in full F32 (cuBLAS default math, no TF32)
 * unless CBX_CUDA_TF32=1; CBX_CUDA_SYNC=1 synchronises after every kernel
 * so an execution fault is reported by the op that caused it.
 * CBX_CUDA_PDL=0 turns programmatic dependent launch off (cuda_common.h,
 * invariant 5; on by default from compute capability 9.0). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_common.h"

bool cu_ok(struct arena *a, cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return true;
    cudaGetLastError(); /* clear a non-sticky error */
    arena_fail(a, e == cudaErrorMemoryAllocation ? CBX_ERR_NOMEM : CBX_ERR_INTERNAL,
               "cuda: %s: %s", what, cudaGetErrorString(e));
    return false;
}

bool cublas_ok(struct arena *a, cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    arena_fail(a, s == CUBLAS_STATUS_ALLOC_FAILED ? CBX_ERR_NOMEM : CBX_ERR_INTERNAL,
               "cuda: %s: cuBLAS status %d", what, (int)s);
    return false;
}

/* ---- profile (CBX_CUDA_PROFILE=1) ---------------------------------------
 * Every kernel step is followed by a stream synchronisation; the wall time
 * since the previous one (the op layer's host work, the launch and the
 * kernel) is charged to the step's name. Compared with an unprofiled run
 * of the same work, it says which kernels matter and how much of a step is
 * host time. Printed to stderr when the backend is freed. */
#define PROF_MAX 64
struct cuda_prof {
    struct timespec last;
    int n;
    struct { const char *what; double s; long calls; } e[PROF_MAX];
};

static double ts_diff(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) + 1e-9 * (double)(b->tv_nsec - a->tv_nsec);
}

static void prof_charge(struct cuda_prof *p, const char *what)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const double dt = ts_diff(&p->last, &now);
    p->last = now;
    int i = 0;
    while (i < p->n && strcmp(p->e[i].what, what) != 0) i++;
    if (i == p->n) {
        if (p->n == PROF_MAX) return;
        p->e[p->n++].what = what;
        p->e[i].s = 0;
        p->e[i].calls = 0;
    }
    p->e[i].s += dt;
    p->e[i].calls++;
}

static void prof_print(const struct cuda_prof *p)
{
    double tot = 0;
    for (int i = 0; i < p->n; i++) tot += p->e[i].s;
    fprintf(stderr, "cuda profile: %.3f s over %d kernel steps (synchronised after each)\n", tot, p->n);
    bool done[PROF_MAX] = {false};
    for (int k = 0; k < p->n; k++) {
        int b = -1;
        for (int i = 0; i < p->n; i++)
            if (!done[i] && (b < 0 || p->e[i].s > p->e[b].s)) b = i;
        done[b] = true;
        fprintf(stderr, "  %-28s %9.2f ms %8ld calls %8.1f us/call %5.1f%%\n", p->e[b].what, 1e3 * p->e[b].s,
                p->e[b].calls, 1e6 * p->e[b].s / (double)p->e[b].calls, tot > 0 ? 100 * p->e[b].s / tot : 0.0);
    }
}

bool cu_launched(struct arena *a, const char *what)
{
    if (!cu_ok(a, cudaGetLastError(), what)) return false;
    const struct cuda_backend *cb = cuda_of(a);
    if (cb->sync_check) {
        if (!cu_ok(a, cudaStreamSynchronize(cb->st), what)) return false;
        if (cb->prof) prof_charge(cb->prof, what);
    }
    return true;
}

bool cublas_launched(struct arena *a, cublasStatus_t s, const char *what)
{
    return cublas_ok(a, s, what) && cu_launched(a, what);
}

void *cu_upload(struct arena *a, const void *host, size_t n)
{
    void *d = arena_alloc(a, n);
    if (!d) return NULL;
    if (!cu_ok(a, cudaMemcpyAsync(d, host, n, cudaMemcpyHostToDevice, cuda_of(a)->st),
               "upload"))
        return NULL;
    return d;
}

bool cu_download(struct arena *a, void *host, const void *dev, size_t n)
{
    const struct cuda_backend *cb = cuda_of(a);
    return cu_ok(a, cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, cb->st), "download") &&
           cu_ok(a, cudaStreamSynchronize(cb->st), "download");
}

/* ---- memory and transfers (struct backend) ----------------------------- */

static void *dev_alloc(const struct backend *be, size_t n)
{
    const struct cuda_backend *cb = (const struct cuda_backend *)be;
    void *p = NULL;
    if (cudaSetDevice(cb->device) != cudaSuccess || cudaMalloc(&p, n ? n : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL; /* the arena reports "out of memory allocating N bytes" */
    }
    return p;
}

static void dev_free(const struct backend *be, void *p)
{
    (void)be;
    cudaFree(p);
}

/* Transfers have no arena to fail: a failure prints one line, poisons
 * the destination (NaN bytes on the host), so no stale data passes for a
 * result, and returns false for the caller to stop on. */
static bool transfer(const struct backend *be, void *dst, const void *src, size_t n,
                     cudaMemcpyKind kind)
{
    const struct cuda_backend *cb = (const struct cuda_backend *)be;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, cb->st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cb->st);
    if (e == cudaSuccess) {
        if (cb->prof) prof_charge(cb->prof, kind == cudaMemcpyDeviceToHost ? "(to host)" : "(from host)");
        return true;
    }
    fprintf(stderr, "cuda: %s of %zu bytes failed: %s\n",
            kind == cudaMemcpyDeviceToHost ? "device->host copy" : "host->device copy", n,
            cudaGetErrorString(e));
    cudaGetLastError();
    if (kind == cudaMemcpyDeviceToHost) memset(dst, 0xff, n);
    return false;
}

static bool copy_2d(const struct backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
                    size_t width, size_t height)
{
    const struct cuda_backend *cb = (const struct cuda_backend *)be;
    cudaError_t e = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice, cb->st);
    if (e == cudaSuccess && cb->sync_check) e = cudaStreamSynchronize(cb->st);
    if (e == cudaSuccess) return true;
    fprintf(stderr, "cuda: device copy of %zu x %zu bytes failed: %s\n", height, width, cudaGetErrorString(e));
    cudaGetLastError();
    return false;
}

static bool to_host(const struct backend *be, void *dst, const void *src, size_t n)
{
    return transfer(be, dst, src, n, cudaMemcpyDeviceToHost);
}

static bool from_host(const struct backend *be, void *dst, const void *src, size_t n)
{
    return transfer(be, dst, src, n, cudaMemcpyHostToDevice);
}

/* ---- weights (core/weights.h) -------------------------------------------
 * Every weight goes to device memory as it is laid out on the host (the
 * kernels read the plain layouts, whatever the role); t->extra tags it as
 * ours so release_weight frees it with its set. */
static const char cuda_weight_tag = 0;

static cbx_status prepare_weight(const struct backend *be, struct weight_set *s, struct tensor *t,
                                 enum weight_role role, unsigned flags, char *err)
{
    (void)s, (void)role, (void)flags;
    const struct cuda_backend *cb = (const struct cuda_backend *)be;
    const char *name = t->name ? t->name : "a weight";
    if (!tensor_is_contiguous(t))
        return err_setf(err, CBX_ERR_UNSUPPORTED, "cuda: weight %s is not contiguous", name);
    const size_t n = tensor_nbytes(t);
    void *d = NULL;
    cudaError_t e = cudaSetDevice(cb->device);
    if (e == cudaSuccess) e = cudaMalloc(&d, n ? n : 1);
    if (e == cudaSuccess) e = cudaMemcpyAsync(d, t->data, n, cudaMemcpyHostToDevice, cb->st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cb->st); /* the host copy may go after this */
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (d) cudaFree(d);
        return err_setf(err, e == cudaErrorMemoryAllocation ? CBX_ERR_NOMEM : CBX_ERR_INTERNAL,
                        "cuda: placing %s (%zu bytes): %s", name, n, cudaGetErrorString(e));
    }
    t->data = d;
    t->be = be;
    t->extra = (void *)&cuda_weight_tag;
    return CBX_OK;
}

bool cuda_weight_placed(const struct tensor *t)
{
    return t->extra == (const void *)&cuda_weight_tag;
}

static void release_weight(const struct backend *be, struct tensor *t)
{
    (void)be;
    if (t->extra != &cuda_weight_tag) return;
    cudaFree(t->data);
    t->data = NULL;
    t->extra = NULL;
}

/* ---- graphs (struct backend) ---------------------------------------------
 * Stream capture in thread-local mode: other threads' contexts, on their
 * own streams, go on while one records. Off with CBX_CUDA_SYNC and
 * CBX_CUDA_PROFILE (they synchronise after each kernel) and with
 * CBX_CUDA_GRAPH=0 (the hooks stay NULL). */
struct backend_graph {
    cudaGraphExec_t x; /* the instantiated recording (the graph itself is not kept) */
};

static cbx_status graph_fail(char *err, cudaError_t e, const char *what)
{
    cudaGetLastError();
    return err_setf(err, e == cudaErrorMemoryAllocation ? CBX_ERR_NOMEM : CBX_ERR_INTERNAL, "cuda: %s: %s", what,
                    cudaGetErrorString(e));
}

static cbx_status graph_begin(const struct backend *be, char *err)
{
    const struct cuda_backend *cb = (const struct cuda_backend *)be;
    if (cb->sync_check)
        return err_setf(err, CBX_ERR_UNSUPPORTED, "cuda: no graphs while every kernel is synchronised");
    cudaError_t e = cudaStreamBeginCapture(cb->st, cudaStreamCaptureModeThreadLocal);
    return e == cudaSuccess ? CBX_OK : graph_fail(err, e, "starting a graph");
}

static cbx_status graph_end(const struct backend *be, struct backend_graph **out, char *err)
{
    const struct cuda_backend *cb = (const struct cuda_backend *)be;
    *out = NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(cb->st, &g);
    if (e != cudaSuccess || !g) {
        if (g) cudaGraphDestroy(g);
        return graph_fail(err, e != cudaSuccess ? e : cudaErrorStreamCaptureInvalidated, "recording a graph");
    }
    struct backend_graph *r = (struct backend_graph *)calloc(1, sizeof *r);
    if (!r) {
        cudaGraphDestroy(g);
        return err_setf(err, CBX_ERR_NOMEM, "cuda: out of memory");
    }
    e = cudaGraphInstantiate(&r->x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        free(r);
        return graph_fail(err, e, "instantiating a graph");
    }
    *out = r;
    return CBX_OK;
}

static cbx_status graph_run(const struct backend *be, struct backend_graph *g, char *err)
{
    const struct cuda_backend *cb = (const struct cuda_backend *)be;
    cudaError_t e = cudaGraphLaunch(g->x, cb->st);
    return e == cudaSuccess ? CBX_OK : graph_fail(err, e, "replaying a graph");
}

static void graph_free(const struct backend *be, struct backend_graph *g)
{
    (void)be;
    if (!g) return;
    cudaGraphExecDestroy(g->x);
    free(g);
}

/* ---- create / free ------------------------------------------------------ */

extern "C" int backend_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

static bool env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

extern "C" struct backend *backend_cuda_create(int device, char *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        err_setf(err, CBX_ERR_UNSUPPORTED, "cuda: no CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
        cudaGetLastError();
        return NULL;
    }
    if (device < 0 || device >= n) {
        err_setf(err, CBX_ERR_INVALID_ARG, "cuda: device %d does not exist (%d device%s)",
                 device, n, n == 1 ? "" : "s");
        return NULL;
    }
    struct cuda_backend *cb = (struct cuda_backend *)calloc(1, sizeof *cb);
    if (!cb) {
        err_setf(err, CBX_ERR_NOMEM, "cuda: out of memory");
        return NULL;
    }
    cb->device = device;
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(device)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&cb->st, cudaStreamNonBlocking)) != cudaSuccess) {
        err_setf(err, CBX_ERR_INTERNAL, "cuda: device %d: %s", device, cudaGetErrorString(e));
        cudaGetLastError();
        free(cb);
        return NULL;
    }
    cb->sms = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
    cublasStatus_t s = cublasCreate(&cb->blas);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(cb->blas, cb->st);
    cb->tf32 = env_on("CBX_CUDA_TF32");
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetMathMode(cb->blas, cb->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
    if (s != CUBLAS_STATUS_SUCCESS) {
        err_setf(err, CBX_ERR_INTERNAL, "cuda: cuBLAS initialisation failed (status %d)", (int)s);
        if (cb->blas) cublasDestroy(cb->blas);
        cudaStreamDestroy(cb->st);
        free(cb);
        return NULL;
    }
    cb->sync_check = env_on("CBX_CUDA_SYNC");
    const char *pdl = getenv("CBX_CUDA_PDL");
    cb->mma = prop.major >= 8;
    cb->pdl = prop.major >= 9 && !(pdl && strcmp(pdl, "0") == 0);
    if (env_on("CBX_CUDA_PROFILE") && (cb->prof = (struct cuda_prof *)calloc(1, sizeof *cb->prof))) {
        cb->sync_check = true;
        clock_gettime(CLOCK_MONOTONIC, &cb->prof->last);
    }
    snprintf(cb->name, sizeof cb->name, "cuda");
    struct backend *be = &cb->be;
    be->name = cb->name;
    be->host = false;
    be->buf_alloc = dev_alloc;
    be->buf_free = dev_free;
    be->to_host = to_host;
    be->from_host = from_host;
    be->copy_2d = copy_2d;
    be->prepare_weight = prepare_weight;
    be->release_weight = release_weight;
    const char *gv = getenv("CBX_CUDA_GRAPH");
    if (!(gv && strcmp(gv, "0") == 0)) {
        be->graph_begin = graph_begin;
        be->graph_end = graph_end;
        be->graph_run = graph_run;
        be->graph_free = graph_free;
    }
    cuda_register_elementwise(&be->k);
    cuda_register_linear(&be->k);
    cuda_register_nn(&be->k);
    cuda_register_conv(&be->k);
    cuda_register_spectral(&be->k);
    cuda_register_sample(&be->k);
    return be;
}

extern "C" int backend_cuda_device(const struct backend *be)
{
    return ((const struct cuda_backend *)be)->device;
}

extern "C" bool backend_cuda_device_name(int d, char *buf, size_t n)
{
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    snprintf(buf, n, "%s, %zu MiB, compute capability %d.%d", prop.name,
             (size_t)(prop.totalGlobalMem >> 20), prop.major, prop.minor);
    return true;
}

extern "C" void backend_cuda_free(struct backend *be)
{
    if (!be) return;
    struct cuda_backend *cb = (struct cuda_backend *)be;
    cudaStreamSynchronize(cb->st);
    if (cb->prof) {
        if (cb->prof->n) prof_print(cb->prof);
        free(cb->prof);
    }
    cublasDestroy(cb->blas);
    cudaStreamDestroy(cb->st);
    free(cb);
}
