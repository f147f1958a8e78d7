/* bench_cuda_ops.c - the CUDA backend's kernels at the models' shapes,
 * against the cpu backend on the same machine as baseline:
 *
 *   linear decode    x [1, 1024] @ w [4096, 1024]^T, w f32/f16/bf16/q8_0/q4_0
 *                    (T3 GPT-2 MLP, one token): the GEMV path.
 *   linear prefill   x [256, 1024], w f32 and q8_0.
 *   attention        decode q [1, 16, 1, 64] on 660 cached keys of a
 *                    [1, 16, 1000, 64] cache; prefill [1, 16, 410, 64] causal.
 *   layer_norm       [1, 1024] and [410, 1024].
 *   conv1d           HiFT [1, 512, 2000] * [512, 512, 7], pad 3.
 *   conv_transpose1d [1, 512, 500] * [512, 256, 16], stride 8.
 *   istft            n_fft 16, hop 4 (HiFT), 60000 frames.
 *   sample           op_sample, the end of a decode step: Turbo's 6563
 *                    logits greedy (top_k 1) and with its defaults
 *                    (temperature 0.8, top_k 1000, top_p 0.95, repetition
 *                    penalty 1.2, 200 ids seen); English's CFG pair of
 *                    8194 (cfg 0.5, temperature 0.8, min_p 0.05, penalty
 *                    1.2). No cpu figure: the host samples in t3/sampler.c.
 *   kernel chain     CHAIN dependent op_adds of [1024] floats (each one a
 *                    kernel reading the one before's output; "wide": of
 *                    400 x 256 floats, a kernel of 400 blocks), launched
 *                    directly and recorded once as a graph and replayed
 *                    (as a decode step is): the floor of a kernel boundary
 *                    in a step, the part of a step that is launch overhead
 *                    whatever the kernels do (op_add's kernel is a plain
 *                    launch). "mlp q4_0": CHAIN / 2 pairs of Turbo's MLP
 *                    decode products, [1, 1024] @ [4096, 1024]^T then @
 *                    [1024, 4096]^T, Q4_0 (programmatic dependent launches
 *                    unless CBX_CUDA_PDL=0), what a real product costs in
 *                    such a chain. Figure: microseconds a kernel; the
 *                    graph's line has the direct launch as its baseline.
 *
 * Figure: microseconds per op call (launch included), the mean of 20 calls
 * issued back to back, then one synchronising download; median over --reps.
 * Without a CUDA build or GPU the program says so and emits nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "core/backend.h"
#include "core/ops.h"
#include "core/quant.h"

#ifndef CBX_HAVE_CUDA
int main(void)
{
    fprintf(stderr, "bench_cuda_ops: this build has no CUDA backend (-DCBX_CUDA=ON)\n");
    return 0;
}
#else

#define CALLS 20

static struct bench_opts opt;

/* a [ne] tensor of type t (uniform [-1, 1) widened/quantised) in a */
static struct tensor *mk(struct arena *a, enum dtype t, int ndim, const int64_t *ne, uint32_t seed)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= ne[d];
    int64_t k = ne[ndim - 1], rows = n / k;
    float *h = malloc((size_t)n * sizeof *h);
    size_t rs = dtype_row_size(t, k);
    char *q = malloc((size_t)rows * rs);
    struct tensor *r = NULL;
    if (h && q) {
        uint32_t s = seed * 2654435761u + 1;
        for (int64_t i = 0; i < n; i++) {
            s = s * 1664525u + 1013904223u;
            h[i] = (float)((int32_t)(s >> 8) - (1 << 23)) * (1.0f / (1 << 23));
        }
        for (int64_t i = 0; i < rows; i++) {
            if (t == TYPE_F32) memcpy(q + i * rs, h + i * k, rs);
            else if (t == TYPE_F16)
                for (int64_t j = 0; j < k; j++) ((uint16_t *)(q + i * rs))[j] = f32_to_fp16(h[i * k + j]);
            else if (t == TYPE_BF16)
                for (int64_t j = 0; j < k; j++) ((uint16_t *)(q + i * rs))[j] = f32_to_bf16(h[i * k + j]);
            else quantize_row(t, h + i * k, q + i * rs, k);
        }
        r = op_from_host(a, t, ndim, ne, q);
    }
    free(h);
    free(q);
    return r;
}

struct bcase {
    const char *name;
    int kind, v;
};

/* operands live in `in` (kept); results go to `a` (reset per call) */
struct operands {
    struct tensor *x, *w, *b, *k, *v;
    struct tensor *seen, *rng; /* op_sample's */
};

/* op_sample's history and RNG state (I32), the ids below `seen` marked */
static void sample_state(struct arena *in, int64_t V, int seen, struct operands *o)
{
    int32_t *h = calloc((size_t)V, sizeof *h);
    if (!h) return;
    for (int i = 0; i < seen && i < V; i++) h[(i * 37) % V] = 1;
    o->seen = op_from_host(in, TYPE_I32, 1, (int64_t[]){V}, h);
    o->rng = op_from_host(in, TYPE_I32, 1, (int64_t[]){4}, (int32_t[]){42, 0, 0, 0});
    free(h);
}

static void setup(struct arena *in, const struct bcase *c, struct operands *o)
{
    static const enum dtype lt[] = {TYPE_F32, TYPE_F16, TYPE_BF16, TYPE_Q8_0, TYPE_Q4_0};
    memset(o, 0, sizeof *o);
    switch (c->kind) {
    case 0: o->x = mk(in, TYPE_F32, 2, (int64_t[]){1, 1024}, 1); o->w = mk(in, lt[c->v], 2, (int64_t[]){4096, 1024}, 2); break;
    case 1: o->x = mk(in, TYPE_F32, 2, (int64_t[]){256, 1024}, 3); o->w = mk(in, lt[c->v], 2, (int64_t[]){4096, 1024}, 4); break;
    case 2:
        o->x = mk(in, TYPE_F32, 4, (int64_t[]){1, 16, c->v ? 410 : 1, 64}, 5);
        o->k = mk(in, TYPE_F32, 4, (int64_t[]){1, 16, c->v ? 410 : 1000, 64}, 6);
        o->v = mk(in, TYPE_F32, 4, (int64_t[]){1, 16, c->v ? 410 : 1000, 64}, 7);
        break;
    case 3: o->x = mk(in, TYPE_F32, 2, (int64_t[]){c->v ? 410 : 1, 1024}, 8); o->w = mk(in, TYPE_F32, 1, (int64_t[]){1024}, 9); o->b = mk(in, TYPE_F32, 1, (int64_t[]){1024}, 10); break;
    case 4: o->x = mk(in, TYPE_F32, 3, (int64_t[]){1, 512, 2000}, 11); o->w = mk(in, TYPE_F32, 3, (int64_t[]){512, 512, 7}, 12); o->b = mk(in, TYPE_F32, 1, (int64_t[]){512}, 13); break;
    case 5: o->x = mk(in, TYPE_F32, 3, (int64_t[]){1, 512, 500}, 14); o->w = mk(in, TYPE_F32, 3, (int64_t[]){512, 256, 16}, 15); o->b = mk(in, TYPE_F32, 1, (int64_t[]){256}, 16); break;
    case 6: o->x = mk(in, TYPE_F32, 4, (int64_t[]){1, 9, 60000, 2}, 17); o->w = op_fill(in, 1, (int64_t[]){16}, 1.0f); break;
    default:
        o->x = mk(in, TYPE_F32, 2, c->v == 2 ? (int64_t[]){2, 8194} : (int64_t[]){1, 6563}, 18);
        sample_state(in, c->v == 2 ? 8194 : 6563, 200, o);
        break;
    }
}

static struct tensor *call(struct arena *a, const struct bcase *c, const struct operands *o)
{
    switch (c->kind) {
    case 0: case 1: return op_linear(a, o->x, o->w, NULL);
    case 2: {
        struct attn_params p = {.scale = 0.125f, .causal = true};
        struct tensor *k = c->v ? o->k : op_slice(a, o->k, 2, 0, 660);
        struct tensor *v = c->v ? o->v : op_slice(a, o->v, 2, 0, 660);
        return op_attention(a, o->x, k, v, NULL, &p);
    }
    case 3: return op_layer_norm(a, o->x, o->w, o->b, 1e-5f);
    case 4: {
        struct conv1d_params p = {1, 1, 1, 3, 3, PAD_ZERO};
        return op_conv1d(a, o->x, o->w, o->b, &p);
    }
    case 5: {
        struct conv_transpose1d_params p = {8, 4, 0, 1, 1};
        return op_conv_transpose1d(a, o->x, o->w, o->b, &p);
    }
    case 6: {
        struct stft_params p = {16, 4, 16, true, PAD_REFLECT, false};
        return op_istft(a, o->x, o->w, &p, 0);
    }
    default: {
        const struct sample_params turbo = {SAMPLE_TURBO, 0, 0.8f, c->v == 0 ? 1 : 1000, true, 0.05f, 0, 1.2f};
        const struct sample_params english = {SAMPLE_LLAMA, 0.5f, 0.8f, 0, false, 0, 0.05f, 1.2f};
        struct tensor *y = arena_tensor(a, TYPE_I32, 1, (int64_t[]){1});
        if (y && op_sample(a, y, o->x, o->seen, o->rng, c->v == 2 ? &english : &turbo) != CBX_OK) return NULL;
        return y;
    }
    }
}

/* microseconds per call on backend be over reps; median -1 on failure */
static struct bench_stats time_case(const struct backend *be, const struct bcase *c, int calls)
{
    struct arena *in = arena_create(be, 0), *a = arena_create(be, 0);
    struct bench_stats st = {-1, -1, -1};
    double *t = malloc((size_t)opt.reps * sizeof *t);
    if (!in || !a || !t) goto done;
    struct operands o;
    setup(in, c, &o);
    if (arena_status(in) != CBX_OK) {
        fprintf(stderr, "bench_cuda_ops: %s on %s: %s\n", c->name, be->name, arena_errmsg(in));
        goto done;
    }
    float probe;
    for (int r = -1; r < opt.reps; r++) { /* rep -1: warm-up */
        double t0 = bench_now();
        struct tensor *y = NULL;
        for (int i = 0; i < calls; i++) {
            arena_reset(a);
            y = call(a, c, &o);
        }
        /* one element back: waits for every call issued */
        if (!y || tensor_to_host(y->type == TYPE_I32 ? y /* op_sample's id */
                                 : op_cont(a, op_slice(a, op_reshape(a, y, 1, (int64_t[]){tensor_nelements(y)}), 0, 0, 1)),
                                 &probe) != CBX_OK) {
            fprintf(stderr, "bench_cuda_ops: %s on %s: %s\n", c->name, be->name, arena_errmsg(a));
            goto done;
        }
        if (r >= 0) t[r] = (bench_now() - t0) / calls * 1e6;
    }
    st = bench_stats(t, opt.reps);
done:
    free(t);
    arena_free(a);
    arena_free(in);
    return st;
}

#define CHAIN 64

/* microseconds a kernel of the chain (see the top), launched directly
 * (graph false) or replayed from one recording; median -1 on failure */
static struct bench_stats time_chain(const struct backend *be, bool graph, int64_t n, bool mlp)
{
    struct arena *in = arena_create(be, 0), *a = arena_create(be, 0);
    struct bench_stats st = {-1, -1, -1};
    struct backend_graph *g = NULL;
    char err[ERR_MAX] = "";
    double *t = malloc((size_t)opt.reps * sizeof *t);
    if (!in || !a || !t) goto done;
    struct tensor *x = mk(in, TYPE_F32, mlp ? 2 : 1, mlp ? (int64_t[]){1, n} : (int64_t[]){n}, 19);
    struct tensor *c = mlp ? mk(in, TYPE_Q4_0, 2, (int64_t[]){4 * n, n}, 20) : mk(in, TYPE_F32, 1, (int64_t[]){n}, 20);
    struct tensor *c2 = mlp ? mk(in, TYPE_Q4_0, 2, (int64_t[]){n, 4 * n}, 21) : NULL;
    if (arena_status(in) != CBX_OK || (graph && !be->graph_begin)) {
        fprintf(stderr, "bench_cuda_ops: kernel chain on %s: %s\n", be->name,
                graph ? "no graphs" : arena_errmsg(in));
        goto done;
    }
    float probe;
    struct tensor *y = NULL;
    for (int r = -1; r < opt.reps; r++) { /* rep -1: warm-up (and the recording) */
        double t0 = bench_now();
        if (!graph || r < 0) {
            /* the graph's: a direct run first, so the arena has grown
             * (no allocation may happen while recording) */
            for (int pass = graph ? 0 : 1; pass < 2; pass++) {
                if (pass && graph && be->graph_begin(be, err) != CBX_OK) goto fail;
                arena_reset(a);
                y = x;
                for (int i = 0; i < CHAIN && y; i++)
                    y = !mlp ? op_add(a, y, c) : i % 2 ? op_linear(a, y, c2, NULL) : op_linear(a, y, c, NULL);
            }
            if (graph && be->graph_end(be, &g, err) != CBX_OK) goto fail;
        }
        if (graph && be->graph_run(be, g, err) != CBX_OK) goto fail;
        if (!y ||
            tensor_to_host(op_cont(a, op_slice(a, op_reshape(a, y, 1, (int64_t[]){tensor_nelements(y)}), 0, 0, 1)),
                           &probe) != CBX_OK)
            goto fail;
        if (r >= 0) t[r] = (bench_now() - t0) / CHAIN * 1e6;
    }
    st = bench_stats(t, opt.reps);
    goto done;
fail:
    fprintf(stderr, "bench_cuda_ops: kernel chain on %s: %s\n", be->name, err[0] ? err : arena_errmsg(a));
done:
    if (g) be->graph_free(be, g);
    free(t);
    arena_free(a);
    arena_free(in);
    return st;
}

int main(int argc, char **argv)
{
    if (!bench_parse(argc, argv, &opt, 10)) return 2;
    char err[ERR_MAX] = "";
    struct backend *cu = backend_cuda_create(0, err);
    if (!cu) {
        fprintf(stderr, "bench_cuda_ops: %s\n", err);
        return 0;
    }
    struct backend *cpu = backend_cpu_create(opt.threads);
    static const struct bcase cases[] = {
        {"linear decode f32", 0, 0}, {"linear decode f16", 0, 1}, {"linear decode bf16", 0, 2},
        {"linear decode q8_0", 0, 3}, {"linear decode q4_0", 0, 4},
        {"linear prefill f32", 1, 0}, {"linear prefill q8_0", 1, 3},
        {"attention decode", 2, 0}, {"attention prefill", 2, 1},
        {"layer_norm 1x1024", 3, 0}, {"layer_norm 410x1024", 3, 1},
        {"conv1d hift", 4, 0}, {"conv_transpose1d hift", 5, 0}, {"istft hift", 6, 0},
        {"sample turbo greedy", 7, 0}, {"sample turbo defaults", 7, 1}, {"sample english cfg", 7, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct bcase *c = &cases[i];
        if (!bench_selected(&opt, c->name)) continue;
        struct bench_stats g = time_case(cu, c, CALLS);
        double base = cpu ? time_case(cpu, c, 3).median : -1;
        if (g.median < 0) continue;
        bench_emit("cuda_ops", c->name, (const int64_t[]){1}, 1, opt.threads, opt.reps, "us/call",
                   g, base > 0 ? "cpu" : NULL, base);
        fprintf(stderr, "%-26s cuda %10.1f us   cpu %10.1f us\n", c->name, g.median, base);
    }
    static const struct { const char *name; int64_t n; bool mlp; } chains[] = {
        {"kernel chain", 1024, false}, {"kernel chain wide", 400 * 256, false}, {"kernel chain mlp q4_0", 1024, true}};
    for (size_t i = 0; i < sizeof chains / sizeof chains[0]; i++) {
        if (!bench_selected(&opt, chains[i].name)) continue;
        char dn[64], gn[64];
        snprintf(dn, sizeof dn, "%s direct", chains[i].name);
        snprintf(gn, sizeof gn, "%s graph", chains[i].name);
        const bool mlp = chains[i].mlp;
        struct bench_stats d = time_chain(cu, false, chains[i].n, mlp), g = time_chain(cu, true, chains[i].n, mlp);
        const int64_t shape[2] = {CHAIN, chains[i].n};
        if (d.median >= 0) bench_emit("cuda_ops", dn, shape, 2, opt.threads, opt.reps, "us/kernel", d, NULL, -1);
        if (g.median >= 0)
            bench_emit("cuda_ops", gn, shape, 2, opt.threads, opt.reps, "us/kernel", g, d.median > 0 ? "direct" : NULL,
                       d.median);
        fprintf(stderr, "%-26s direct %8.2f us   graph %8.2f us a kernel\n", chains[i].name, d.median, g.median);
    }
    backend_cpu_free(cpu);
    backend_cuda_free(cu);
    return 0;
}
#endif
