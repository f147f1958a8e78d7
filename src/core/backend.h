/* backend.h - what a compute backend provides: memory and kernels.
 *
 * The op layer (ops_*.c) validates operands and allocates results; a
 * kernel only computes `out` from its inputs. Every kernel receives the
 * arena so it can take scratch memory (arena_alloc) and report a failure
 * (arena_fail). A NULL kernel pointer means "not supported by this
 * backend"; the op then fails with CBX_ERR_UNSUPPORTED.
 *
 * Backends here: "cpu" (threaded, SIMD, BLAS) and "ref" (naive scalar
 * loops, single thread: the reference every cpu kernel is tested against,
 * and a second backend proving that model code is backend-agnostic), both
 * holding data in host memory; with -DCBX_CUDA=ON also "cuda"
 * (src/core/cuda/: device memory, host = false). tests/core/
 * test_backend_ops.c runs every kernel of every built backend against ref. */
#ifndef CBX_BACKEND_H
#define CBX_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "ops.h"
#include "weights.h"

struct threadpool;
struct backend_graph;

struct kernels {
    /* ops_shape.c / ops_elementwise.c */
    void (*cpy)(struct arena *a, struct tensor *out, const struct tensor *x);
    /* cpy into out moved by at[0] * nb bytes, skipped unless 0 <= at[0]
     * <= max (op_copy_into_at). Device backends only: on host backends
     * the op reads at and calls cpy. */
    void (*cpy_at)(struct arena *a, struct tensor *out, const struct tensor *x,
                   const struct tensor *at, int64_t nb, int64_t max);
    void (*fill)(struct arena *a, struct tensor *out, float v);
    /* out (contiguous F32) element i = scalar_rng_gaussian(key, c + 2 i) */
    void (*randn)(struct arena *a, struct tensor *out, uint64_t key, uint64_t c);
    void (*binary)(struct arena *a, struct tensor *out, const struct tensor *x,
                   const struct tensor *y, enum binop op);
    void (*unary)(struct arena *a, struct tensor *out, const struct tensor *x,
                  enum unop op, float p0, float p1);
    void (*snake)(struct arena *a, struct tensor *out, const struct tensor *x,
                  const struct tensor *alpha);
    void (*reduce)(struct arena *a, struct tensor *out, const struct tensor *x,
                   enum redop op);
    void (*cumsum)(struct arena *a, struct tensor *out, const struct tensor *x);
    void (*get_rows)(struct arena *a, struct tensor *out, const struct tensor *table,
                     const struct tensor *ids);
    /* ops_linear.c */
    void (*linear)(struct arena *a, struct tensor *out, const struct tensor *x,
                   const struct tensor *w, const struct tensor *b);
    /* op_linear_ex (optional: NULL runs op_linear, op_unary, op_add) */
    void (*linear_ex)(struct arena *a, struct tensor *out, const struct tensor *x,
                      const struct tensor *w, const struct tensor *b, int act,
                      const struct tensor *r);
    /* op_linear_gated (optional: NULL or false runs op_mul, then
     * op_linear_ex; false: these operands are not for it, nothing done) */
    bool (*linear_gated)(struct arena *a, struct tensor *out, const struct tensor *x, const struct tensor *gate,
                         const struct tensor *w, const struct tensor *b, int act, const struct tensor *r);
    /* op_linear_cat (optional: NULL runs the norm, op_linear_ex per weight,
     * op_concat); b and act always arrays of n */
    void (*linear_cat)(struct arena *a, struct tensor *out, const struct tensor *x,
                       const struct linear_norm *norm, int n, const struct tensor *const *w,
                       const struct tensor *const *b, const int *act);
    void (*matmul)(struct arena *a, struct tensor *out, const struct tensor *x,
                   const struct tensor *y);
    /* ops_conv.c */
    void (*conv1d)(struct arena *a, struct tensor *out, const struct tensor *x,
                   const struct tensor *w, const struct tensor *b,
                   const struct conv1d_params *p);
    void (*conv_transpose1d)(struct arena *a, struct tensor *out, const struct tensor *x,
                             const struct tensor *w, const struct tensor *b,
                             const struct conv_transpose1d_params *p);
    void (*pad1d)(struct arena *a, struct tensor *out, const struct tensor *x,
                  int left, int right, enum pad_mode mode, float value);
    void (*upsample_nearest)(struct arena *a, struct tensor *out,
                             const struct tensor *x, int factor);
    void (*lstm)(struct arena *a, struct tensor *out, struct tensor *h_n,
                 struct tensor *c_n, const struct tensor *x,
                 const struct tensor *w_ih, const struct tensor *w_hh,
                 const struct tensor *b_ih, const struct tensor *b_hh,
                 const struct tensor *h0, const struct tensor *c0);
    /* ops_nn.c */
    void (*layer_norm)(struct arena *a, struct tensor *out, const struct tensor *x,
                       const struct tensor *g, const struct tensor *b, float eps);
    void (*add_layer_norm)(struct arena *a, struct tensor *sum, struct tensor *out,
                           const struct tensor *x, const struct tensor *r,
                           const struct tensor *g, const struct tensor *b, float eps);
    void (*rms_norm)(struct arena *a, struct tensor *out, const struct tensor *x,
                     const struct tensor *g, float eps);
    void (*group_norm)(struct arena *a, struct tensor *out, const struct tensor *x,
                       int n_groups, const struct tensor *g, const struct tensor *b,
                       float eps);
    void (*channel_affine)(struct arena *a, struct tensor *out, const struct tensor *x,
                           int dim, const struct tensor *scale,
                           const struct tensor *shift);
    void (*softmax)(struct arena *a, struct tensor *out, const struct tensor *x,
                    float scale);
    void (*attention)(struct arena *a, struct tensor *out, const struct tensor *q,
                      const struct tensor *k, const struct tensor *v,
                      const struct tensor *bias, const struct attn_params *p);
    /* op_attention_group in a few launches, or NULL (the op then runs it
     * per member); false: these operands are not for it (nothing done) */
    bool (*attention_group)(struct arena *a, struct tensor *out, const struct tensor *q,
                            const struct tensor *k, const struct tensor *v, const struct attn_group *g);
    /* op_attention_append in one launch, or NULL (the op then rotates,
     * copies and attends); false: these operands are not for it (nothing
     * done) */
    bool (*attention_append)(struct arena *a, struct tensor *out, const struct tensor *q,
                             const struct tensor *kn, const struct tensor *vn, struct tensor *kc,
                             struct tensor *vc, const struct tensor *at, float scale,
                             const struct rope_params *rope);
    void (*rope)(struct arena *a, struct tensor *out, const struct tensor *x,
                 const struct tensor *pos, const struct rope_params *p);
    /* op_sample (device backends; shapes checked by the op) */
    void (*sample)(struct arena *a, struct tensor *out, const struct tensor *logits,
                   struct tensor *seen, struct tensor *rng, const struct sample_params *p);
    /* ops_spectral.c */
    void (*stft)(struct arena *a, struct tensor *out, const struct tensor *x,
                 const struct tensor *window, const struct stft_params *p);
    void (*istft)(struct arena *a, struct tensor *out, const struct tensor *spec,
                  const struct tensor *window, const struct stft_params *p);
    /* ops_conv2d.c */
    void (*conv2d)(struct arena *a, struct tensor *out, const struct tensor *x,
                   const struct tensor *w, const struct tensor *b,
                   const struct conv2d_params *p);
};

struct backend {
    const char *name;
    bool host;                  /* data pointers are host-addressable */
    struct threadpool *tp;      /* cpu backend's pool (NULL otherwise) */
    /* made to share (backend_create's shared): on the cpu, tp is a
     * process-wide pool (tp_shared); on any backend, its T3 sequences may
     * be decoded in one batch with other contexts' (pipeline/scheduler.h) */
    bool shared;
    void *(*buf_alloc)(const struct backend *be, size_t n);
    void (*buf_free)(const struct backend *be, void *p);
    /* explicit transfers, in order with the backend's kernels and waited
     * for; host backends use memcpy. false, with one line on stderr, when
     * the device refuses the copy or a kernel before it failed (a failed
     * download leaves NaN bytes in dst, never stale data). */
    bool (*to_host)(const struct backend *be, void *dst, const void *src, size_t n);
    bool (*from_host)(const struct backend *be, void *dst, const void *src, size_t n);
    /* A copy within this backend's memory, queued in order with its
     * kernels (no synchronisation): height rows of width bytes from src
     * (rows spitch apart) to dst (dpitch apart). false, with one line on
     * stderr, when the device refuses it. Host backends copy host memory
     * (cpu: spread over its pool). */
    bool (*copy_2d)(const struct backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
                    size_t width, size_t height);
    /* Weight placement (core/weights.h): make t (a descriptor owned by
     * set s, data in host memory: s's or borrowed from the weight source)
     * ready for this backend's kernels of role. The backend owns the
     * layout: it may rewrite t->data (into memory of s from
     * weight_set_host, or its own device memory) and attach private
     * layout information in t->extra, released by release_weight when s is
     * freed. NULL prepare_weight: the plain host layout is used (host
     * backends only). Returns CBX_OK or an error with err set. */
    cbx_status (*prepare_weight)(const struct backend *be, struct weight_set *s, struct tensor *t,
                                 enum weight_role role, unsigned flags, char *err);
    void (*release_weight)(const struct backend *be, struct tensor *t);
    /* Graphs: a recorded sequence of kernels, replayed (NULL hooks: the
     * backend has none, e.g. the host backends, or they are switched off).
     * Between graph_begin and graph_end the kernels that ops on this
     * backend's arenas launch (on the calling thread) are recorded instead
     * of run; graph_end hands back the recording and graph_run replays it:
     * the same kernels on the same memory, reading the values there at
     * replay time (so a step's index operands, op_copy_into_at and
     * attn_params.kv_len, move it). The arenas the recording used must not
     * change until it is freed. Recording fails, with one line in err and
     * no graph, when a kernel needs the host in between (a download, a
     * synchronisation, an allocation); the caller then computes without a
     * graph. */
    cbx_status (*graph_begin)(const struct backend *be, char *err);
    cbx_status (*graph_end)(const struct backend *be, struct backend_graph **g, char *err);
    cbx_status (*graph_run)(const struct backend *be, struct backend_graph *g, char *err);
    void (*graph_free)(const struct backend *be, struct backend_graph *g);
    struct kernels k;
};

/* For the op layer (ops_*.c): take the arena backend's kernel `kname`
 * into scope as be_->k.kname, or fail the arena and return NULL from the
 * calling op when the backend lacks it. */
#define KERNEL(a, kname)                                                       \
    const struct backend *be_ = arena_backend(a);                              \
    if (!be_->k.kname) {                                                       \
        arena_fail(a, CBX_ERR_UNSUPPORTED, "%s: backend %s has no kernel",     \
                   #kname, be_->name);                                         \
        return NULL;                                                           \
    }

/* For the op layer: an index operand (op_copy_into_at, attn_params.kv_len)
 * is one I32 element; on a host backend its value goes to *v, on a device
 * backend the kernel reads it. false with the arena failed otherwise. */
bool op_index_operand(struct arena *a, const char *op, const struct tensor *t, int32_t *v);

static inline void *backend_buf_alloc(const struct backend *be, size_t n)
{
    return be->buf_alloc(be, n);
}
static inline void backend_buf_free(const struct backend *be, void *p)
{
    if (p) be->buf_free(be, p);
}

/* The cpu backend with n_threads (0 = all online CPUs); NULL on failure.
 * Free with backend_cpu_free. */
struct backend *backend_cpu_create(int n_threads);
/* The same over the process-wide pool of n_threads (tp_shared): backends
 * with the same count share their workers; their ops take turns. */
struct backend *backend_cpu_create_shared(int n_threads);
void backend_cpu_free(struct backend *be);
/* The reference backend (static, single-threaded, never freed; any thread
 * may call this, the first call fills it). */
const struct backend *backend_ref(void);

#ifdef CBX_HAVE_CUDA
/* The CUDA backend (built with -DCBX_CUDA=ON; src/core/cuda/): device
 * memory, one stream, cuBLAS. NULL when there is no such device or the
 * driver fails; the one-line reason goes to err (ERR_MAX bytes, or NULL).
 * Free with backend_cuda_free (after every arena on it). */
struct backend *backend_cuda_create(int device, char *err);
void backend_cuda_free(struct backend *be);
/* CUDA devices present (0 when none or no driver). */
int backend_cuda_device_count(void);
/* Device number of a cuda backend; "name, N MiB, compute capability X.Y"
 * of device d into buf (false when d does not exist). */
int backend_cuda_device(const struct backend *be);
bool backend_cuda_device_name(int d, char *buf, size_t n);
#endif

/* ---- choosing a backend by name (what --backend and the C API take) ----
 * "cpu"; "cuda" or "cuda:N" (device N, default 0; only in a build with
 * -DCBX_CUDA=ON); "auto" or NULL: cuda when this build has it and a device
 * is present, else cpu. n_threads: the cpu backend's workers (0 = all
 * online CPUs; ignored by cuda); shared: over the process-wide pool of that
 * count (backend_cpu_create_shared), and on any backend, its T3 decode
 * batched with other shared contexts' (backend.shared). NULL on failure with one line in err
 * (ERR_MAX bytes, or NULL): an unknown name (listing the names this build
 * has), a backend not built, no device, a driver error, out of memory.
 * Free with backend_free. */
struct backend *backend_create(const char *name, int n_threads, bool shared, char *err);
/* A backend to compute with on weights placed by `like`: of its kind (cpu
 * with n_threads workers, over the shared pool when shared; or cuda on
 * its device, with a stream of its own). NULL with one line in err. */
struct backend *backend_create_like(const struct backend *like, int n_threads, bool shared, char *err);
/* Free a backend made by any *_create here (after every arena and weight
 * set on it); no-op on NULL and on backend_ref(). */
void backend_free(struct backend *be);
/* CBX_OK when name is one backend_create knows in this build (a name
 * only: no device is looked for); else one line in err and
 * CBX_ERR_INVALID_ARG (no such backend) or CBX_ERR_UNSUPPORTED (a backend
 * this build lacks: cuda without -DCBX_CUDA=ON). */
cbx_status backend_check_name(const char *name, char *err);
/* What "auto" means in this process: "cuda" or "cpu" (static text). */
const char *backend_auto_name(void);
/* Whether be computes with the same kind of memory and weight layout as
 * other: weights placed by one may be used by arenas of the other (both
 * host, or both cuda on the same device). */
bool backend_compatible(const struct backend *be, const struct backend *other);
/* One line per backend this build has, for `info --backends`: name,
 * whether usable here, and what (threads and SIMD level, or the GPU);
 * written into buf (n bytes). */
void backend_describe(char *buf, size_t n);

/* Registration of each kernel group, one function per source file pair
 * (src/core/cpu/<group>.c, src/core/ref/<group>.c). */
void cpu_register_elementwise(struct kernels *k);
void cpu_register_linear(struct kernels *k);
void cpu_register_conv(struct kernels *k);
void cpu_register_nn(struct kernels *k);
void cpu_register_spectral(struct kernels *k);
void ref_register_elementwise(struct kernels *k);
void ref_register_linear(struct kernels *k);
void ref_register_conv(struct kernels *k);
void ref_register_nn(struct kernels *k);
void ref_register_spectral(struct kernels *k);
void cpu_register_conv2d(struct kernels *k);
/* The cpu backend's weight placement hooks (src/core/cpu/weights.c). */
cbx_status cpu_prepare_weight(const struct backend *be, struct weight_set *s, struct tensor *t,
                              enum weight_role role, unsigned flags, char *err);
void cpu_release_weight(const struct backend *be, struct tensor *t);
void ref_register_conv2d(struct kernels *k);

#endif
