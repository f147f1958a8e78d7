/* sample.cu - op_sample on the device: T3's logits processors and the
 * categorical draw (t3/sampler.c, core/rng.c) in one block, so a recorded
 * decode step ends in its sampled id.
 *
 * One block of SMP_THREADS threads per call. The processed row l[V] and
 * the sort keys live in dynamic shared memory. Each pass is the host
 * code's loop over the row, split into contiguous chunks (thread t owns
 * [t * per, (t + 1) * per)); the host's sums (float softmax sums, double
 * cumulative sums) become per-chunk sums combined in thread order, so the
 * results equal the host's up to rounding of the sums; exponentials are
 * evaluated in double and rounded once. Top-k's threshold is found by a
 * radix select on the order-preserving bit pattern (exactly the value
 * the host's radix select returns; for top_k 1 that is the row's largest
 * value, taken by one max reduction instead); top-p sorts the survivors
 * by (value, id) with a bitonic sort (bitonic_sort). */
#include <limits.h>
#include <math.h>

#include "cuda_common.h"

#define SMP_THREADS 1024
#define SMP_WARPS (SMP_THREADS / 32)

struct smp_shared {
    double d[SMP_WARPS + 1];
    float f[SMP_WARPS];
    int i[SMP_WARPS];
    unsigned hist[256];
    int n;
    unsigned pick, above;
};

/* block-wide reductions, every thread gets the result; warp results are
 * combined in warp order (the same on every run) */
__device__ static double smp_sum(double v, struct smp_shared *sh)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) sh->d[threadIdx.x >> 5] = v;
    __syncthreads();
    double r = 0;
    for (int w = 0; w < SMP_WARPS; w++) r += sh->d[w];
    __syncthreads();
    return r;
}

struct smp_fmax {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct smp_imin {
    __device__ int operator()(int a, int b) const { return min(a, b); }
};

/* f over the block, warp results combined in warp order (sh: SMP_WARPS) */
template <typename T, typename F>
__device__ static T smp_reduce(T v, T *sh, F f)
{
    for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    T r = sh[0];
    for (int w = 1; w < SMP_WARPS; w++) r = f(r, sh[w]);
    __syncthreads();
    return r;
}

__device__ static float smp_max(float v, struct smp_shared *sh) { return smp_reduce(v, sh->f, smp_fmax()); }
__device__ static int smp_min_int(int v, struct smp_shared *sh) { return smp_reduce(v, sh->i, smp_imin()); }

/* exclusive prefix of v over threads in thread order; *total the sum */
__device__ static double smp_scan(double v, double *total, struct smp_shared *sh)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    double x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const double y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    double ex = __shfl_up_sync(0xffffffffu, x, 1);
    if (lane == 0) ex = 0;
    if (lane == 31) sh->d[w] = x;
    __syncthreads();
    if (threadIdx.x == 0) {
        double c = 0;
        for (int i = 0; i < SMP_WARPS; i++) {
            const double t = sh->d[i];
            sh->d[i] = c;
            c += t;
        }
        sh->d[SMP_WARPS] = c;
    }
    __syncthreads();
    const double r = sh->d[w] + ex;
    *total = sh->d[SMP_WARPS];
    __syncthreads();
    return r;
}

/* order-preserving bits of a float (larger value, larger key) and back */
__device__ static inline unsigned okey(float v)
{
    const unsigned u = __float_as_uint(v);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}
__device__ static inline float okey_value(unsigned k)
{
    return __uint_as_float(k & 0x80000000u ? k & 0x7fffffffu : ~k);
}

__device__ static inline float exp_f(float x) { return (float)exp((double)x); }

/* thread's chunk [*lo, *hi) of n elements */
__device__ static inline void chunk(int n, int *lo, int *hi)
{
    const int per = (n + SMP_THREADS - 1) / SMP_THREADS;
    *lo = min(n, (int)threadIdx.x * per);
    *hi = min(n, *lo + per);
}

/* softmax statistics of l[V] as sampler_softmax: the max and the float
 * sum of exp(l - max), each exp(l[i] - max) kept in ex[i] (each thread
 * reads back only its own chunk) */
__device__ static void softmax_stats(const float *l, int V, float *mx, float *sum, float *ex, struct smp_shared *sh)
{
    int lo, hi;
    chunk(V, &lo, &hi);
    float m = -INFINITY;
    for (int i = lo; i < hi; i++) m = fmaxf(m, l[i]);
    m = smp_max(m, sh);
    double s = 0;
    for (int i = lo; i < hi; i++) s += ex[i] = exp_f(l[i] - m);
    *mx = m;
    *sum = (float)smp_sum(s, sh);
}

__device__ static void rep_penalty(float *l, int V, const int32_t *seen, float theta)
{
    for (int i = threadIdx.x; i < V; i += SMP_THREADS)
        if (seen[i]) {
            const float z = l[i];
            l[i] = z < 0 ? z * theta : z / theta;
        }
    __syncthreads();
}

__device__ static void temperature(float *l, int V, float t)
{
    for (int i = threadIdx.x; i < V; i += SMP_THREADS) l[i] = l[i] / t;
    __syncthreads();
}

/* sampler_top_k: entries below the k'-th largest become -inf; the
 * threshold by a radix select, 8 bits a pass from the top */
__device__ static void top_k(float *l, int V, int k, struct smp_shared *sh)
{
    const int kk = k < 1 ? 1 : k;
    if (kk >= V) return;
    if (kk == 1) { /* greedy: the largest value is the threshold the select finds */
        int lo, hi;
        chunk(V, &lo, &hi);
        float m = -INFINITY;
        for (int i = lo; i < hi; i++) m = fmaxf(m, l[i]);
        m = smp_max(m, sh);
        for (int i = threadIdx.x; i < V; i += SMP_THREADS)
            if (l[i] < m) l[i] = -INFINITY;
        __syncthreads();
        return;
    }
    unsigned prefix = 0, mask = 0, r = (unsigned)(kk - 1);
    for (int shift = 24; shift >= 0; shift -= 8) {
        if (threadIdx.x < 256) sh->hist[threadIdx.x] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < V; i += SMP_THREADS) {
            const unsigned u = okey(l[i]);
            if ((u & mask) == prefix) atomicAdd(&sh->hist[(u >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x < 32) { /* lane L: digits 255 - 8L down to 248 - 8L */
            const int lane = threadIdx.x;
            unsigned c = 0;
            for (int j = 0; j < 8; j++) c += sh->hist[255 - 8 * lane - j];
            unsigned x = c;
            for (int o = 1; o < 32; o <<= 1) {
                const unsigned y = __shfl_up_sync(0xffffffffu, x, o);
                if (lane >= o) x += y;
            }
            unsigned run = x - c; /* entries with larger digits */
            for (int j = 0; j < 8; j++) {
                const unsigned d = 255u - 8u * (unsigned)lane - (unsigned)j, h = sh->hist[d];
                if (run <= r && r < run + h) {
                    sh->pick = d;
                    sh->above = run;
                }
                run += h;
            }
        }
        __syncthreads();
        r -= sh->above;
        prefix |= sh->pick << shift;
        mask |= 255u << shift;
        __syncthreads();
    }
    const float thr = okey_value(prefix);
    for (int i = threadIdx.x; i < V; i += SMP_THREADS)
        if (l[i] < thr) l[i] = -INFINITY;
    __syncthreads();
}

/* bitonic_sort's passes of partners fewer than 32 apart, in registers:
 * element i = threadIdx.x + SMP_THREADS m (each m in turn) and its
 * partner i ^ j sit on lanes of one warp, so a compare-exchange is a
 * shuffle. Stages k from k0 to k1 (doubling), of each its passes j from
 * min(k / 2, 16) down to 1; a lane keeps the smaller of its key and its
 * partner's where it is the lower of the pair ((i & j) == 0) and the stage
 * sorts ascending ((i & k) == 0), or the upper and it sorts descending,
 * else the larger: the pair the shared-memory pass would swap. Lanes past
 * P hold ~0 (never stored); every lane of a warp runs every shuffle. */
__device__ static void bitonic_lanes(unsigned long long *key, int P, int k0, int k1)
{
    for (int m = 0; m < (P + SMP_THREADS - 1) / SMP_THREADS; m++) {
        const int i = (int)threadIdx.x + SMP_THREADS * m;
        unsigned long long x = i < P ? key[i] : ~0ull;
        for (int k = k0; k <= k1; k <<= 1)
            for (int j = (k >> 1) < 16 ? k >> 1 : 16; j > 0; j >>= 1) {
                const unsigned long long y = __shfl_xor_sync(0xffffffffu, x, j);
                const bool keep_min = ((i & j) == 0) == ((i & k) == 0);
                x = keep_min ? (y < x ? y : x) : (y > x ? y : x);
            }
        if (i < P) key[i] = x;
    }
    __syncthreads();
}

/* key[0, P) (P a power of two) sorted ascending by a bitonic network:
 * passes of partners 32 or more apart in shared memory (a pair a thread,
 * a block barrier each), the rest in registers (bitonic_lanes), so a sort
 * of 1024 keys takes 21 barriers instead of 55. */
__device__ static void bitonic_sort(unsigned long long *key, int P)
{
    bitonic_lanes(key, P, 2, P < 32 ? P : 32);
    for (int k = 64; k <= P; k <<= 1) {
        for (int j = k >> 1; j >= 32; j >>= 1) {
            for (int p = threadIdx.x; p < P / 2; p += SMP_THREADS) {
                const int i = (p & ~(j - 1)) << 1 | (p & (j - 1)), o = i | j; /* i: a 0 at bit j */
                const unsigned long long x = key[i], y = key[o];
                if ((x > y) == ((i & k) == 0)) {
                    key[i] = y;
                    key[o] = x;
                }
            }
            __syncthreads();
        }
        bitonic_lanes(key, P, k, k);
    }
}

/* sampler_top_p: the finite entries sorted ascending by (value, id) in
 * key[], softmax over them, entries whose cumulative probability is <=
 * cut become -inf (the largest always stays) */
__device__ static void top_p(float *l, int V, float cut, unsigned long long *key, struct smp_shared *sh)
{
    if (threadIdx.x == 0) sh->n = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < V; i += SMP_THREADS) {
        const float v = l[i];
        if (v != -INFINITY) {
            const int at = atomicAdd(&sh->n, 1);
            key[at] = (unsigned long long)okey(v == 0.0f ? 0.0f : v) << 32 | (unsigned)i;
        }
    }
    __syncthreads();
    const int n = sh->n;
    if (n == 0) return;
    int P = 1;
    while (P < n) P <<= 1;
    for (int i = n + threadIdx.x; i < P; i += SMP_THREADS) key[i] = ~0ull;
    __syncthreads();
    bitonic_sort(key, P);
    const float mx = okey_value((unsigned)(key[n - 1] >> 32));
    int lo, hi;
    chunk(n, &lo, &hi);
    double s = 0;
    for (int j = lo; j < hi; j++) s += exp_f(okey_value((unsigned)(key[j] >> 32)) - mx);
    const float sum = (float)smp_sum(s, sh);
    double part = 0, total;
    for (int j = lo; j < hi; j++) part += (double)(exp_f(okey_value((unsigned)(key[j] >> 32)) - mx) / sum);
    double c = smp_scan(part, &total, sh);
    for (int j = lo; j < hi && j < n - 1; j++) {
        c += (double)(exp_f(okey_value((unsigned)(key[j] >> 32)) - mx) / sum);
        if ((float)c <= cut) l[(unsigned)key[j]] = -INFINITY;
    }
    __syncthreads();
}

/* sampler_min_p: probabilities below min_p times the largest become -inf,
 * except the first largest */
__device__ static void min_p(float *l, int V, float m, float *ex, struct smp_shared *sh)
{
    float mx, sum;
    softmax_stats(l, V, &mx, &sum, ex, sh);
    int lo, hi;
    chunk(V, &lo, &hi);
    float top = 0;
    for (int i = lo; i < hi; i++) top = fmaxf(top, ex[i] / sum);
    top = smp_max(top, sh);
    int arg = INT_MAX;
    for (int i = lo; i < hi && arg == INT_MAX; i++)
        if (ex[i] / sum == top) arg = i;
    arg = smp_min_int(arg, sh);
    const float thr = m * top;
    for (int i = lo; i < hi; i++)
        if (ex[i] / sum < thr && i != arg) l[i] = -INFINITY;
    __syncthreads();
}

__global__ static void k_sample(int32_t *out, const float *logits, int rows, int V, int32_t *seen,
                                uint32_t *rng, struct sample_params p, int key_slots)
{
    extern __shared__ unsigned long long smem[];
    __shared__ struct smp_shared sh;
    unsigned long long *key = smem;
    float *l = (float *)(smem + key_slots);
    float *ex = (float *)smem; /* the exponentials, over the keys once top-p is done with them */
    cu_pdl_next();
    cu_pdl_wait();
    for (int i = threadIdx.x; i < V; i += SMP_THREADS) {
        const float c = logits[i];
        l[i] = rows == 2 ? c + p.cfg_weight * (c - logits[V + i]) : c;
    }
    __syncthreads();
    const bool greedy = p.top_k == 1;
    if (p.order == SAMPLE_TURBO) {
        if (p.temperature > 0) temperature(l, V, p.temperature);
        if (p.top_k > 0) top_k(l, V, p.top_k, &sh);
        if (p.top_p) top_p(l, V, p.top_p_cut, key, &sh);
        if (p.repetition_penalty != 1.0f) rep_penalty(l, V, seen, p.repetition_penalty);
    } else {
        if (p.repetition_penalty != 1.0f) rep_penalty(l, V, seen, p.repetition_penalty);
        if (!greedy) {
            if (p.temperature > 0) temperature(l, V, p.temperature);
            if (p.min_p > 0) min_p(l, V, p.min_p, ex, &sh);
            if (p.top_p) top_p(l, V, p.top_p_cut, key, &sh);
        }
    }
    float mx, sum;
    softmax_stats(l, V, &mx, &sum, ex, &sh);
    int lo, hi;
    chunk(V, &lo, &hi);
    int tok = INT_MAX;
    if (mx == -INFINITY) {
        tok = -1; /* every logit -inf: nothing to draw */
    } else if (greedy) {
        for (int i = lo; i < hi && tok == INT_MAX; i++)
            if (l[i] == mx) tok = i;
        tok = smp_min_int(tok, &sh);
    } else { /* rng_categorical over the softmax */
        const uint64_t k64 = (uint64_t)rng[0] | (uint64_t)rng[1] << 32;
        const uint64_t idx = (uint64_t)rng[2] | (uint64_t)rng[3] << 32;
        const float u = (float)scalar_rng_m24(k64, idx) * 0x1p-24f;
        double part = 0, total;
        int last = -1;
        for (int i = lo; i < hi; i++) {
            const float pi = ex[i] / sum;
            part += (double)pi;
            if (pi > 0) last = i;
        }
        double c = smp_scan(part, &total, &sh);
        const double target = (double)u * total;
        for (int i = lo; i < hi && tok == INT_MAX; i++) {
            c += (double)(ex[i] / sum);
            if (c > target) tok = i;
        }
        tok = smp_min_int(tok, &sh);
        if (tok == INT_MAX) tok = -smp_min_int(-last, &sh); /* the last positive */
        if (threadIdx.x == 0) {
            rng[2] = (uint32_t)(idx + 1);
            rng[3] = (uint32_t)((idx + 1) >> 32);
        }
    }
    if (threadIdx.x == 0) {
        *out = tok;
        if (tok >= 0) seen[tok] = 1;
    }
}

static void cuda_sample(struct arena *a, struct tensor *out, const struct tensor *logits, struct tensor *seen,
                        struct tensor *rng, const struct sample_params *p)
{
    const int V = (int)logits->ne[logits->ndim - 1];
    const int rows = (int)(tensor_nelements(logits) / V);
    int slots = 1;
    while (slots < V) slots <<= 1;
    const size_t smem = (size_t)slots * 8 + (size_t)V * 4;
    if (smem > 48 * 1024 &&
        !cu_ok(a, cudaFuncSetAttribute(k_sample, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
               "sample shared memory"))
        return;
    cu_launch(cuda_of(a)->st, cuda_of(a)->pdl, k_sample, 1, SMP_THREADS, smem, (int32_t *)out->data,
              (const float *)logits->data, rows, V, (int32_t *)seen->data, (uint32_t *)rng->data, *p, slots);
    cu_launched(a, "sample");
}

void cuda_register_sample(struct kernels *k) { k->sample = cuda_sample; }
