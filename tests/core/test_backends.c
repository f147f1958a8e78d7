/* test_backends.c - the backend seam: the same model-level code (a GPT-2
 * style transformer block with a KV cache, and a HiFT/CFM style conv stack)
 * runs on the cpu and on the ref backend through ops only, and the two
 * results agree. Model code never touches activation memory, so a third
 * backend (CUDA) needs no change here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/quant.h"
#include "testutil.h"

/* weights are host tensors shared by both backends */
struct block_w {
    struct tensor ln1_g, ln1_b, attn_w, attn_b, proj_w, proj_b;
    struct tensor ln2_g, ln2_b, fc_w, fc_b, fc2_w, fc2_b;
};

struct conv_w {
    struct tensor c1_w, c1_b, gn_g, gn_b, up_w, up_b, alpha, c2_w, c2_b;
};

static float *pool;
static size_t pool_used;

static struct tensor rand_tensor(int ndim, const int64_t *ne, float lo, float hi, uint64_t seed)
{
    struct tensor t = tensor_make(TYPE_F32, ndim, ne, pool + pool_used, NULL);
    int64_t n = tensor_nelements(&t);
    fill_uniform(pool + pool_used, (size_t)n, lo, hi, seed);
    pool_used += (size_t)((n + 15) & ~15);
    return t;
}

/* q4_0 copy of an F32 [N, K] weight (block-quantised weights on both backends) */
static struct tensor to_q4_0(const struct tensor *w, void *buf)
{
    int64_t n = w->ne[0], k = w->ne[1];
    size_t rs = dtype_row_size(TYPE_Q4_0, k);
    for (int64_t r = 0; r < n; r++)
        quantize_row(TYPE_Q4_0, (const float *)w->data + r * k, (char *)buf + r * rs, k);
    return tensor_make(TYPE_Q4_0, 2, w->ne, buf, NULL);
}

/* GPT-2 block (pre-LN), x[1, T, C]; kv cache [1, H, Tmax, D] x2, n_past
 * positions already in it. Returns [1, T, C]. */
static struct tensor *gpt2_block(struct arena *a, const struct tensor *x, const struct block_w *w,
                                 struct tensor *kc, struct tensor *vc, int n_past, int n_head)
{
    int64_t T = x->ne[1], C = x->ne[2], D = C / n_head;
    struct tensor *h = op_layer_norm(a, x, &w->ln1_g, &w->ln1_b, 1e-5f);
    struct tensor *qkv = op_linear(a, h, &w->attn_w, &w->attn_b);        /* [1, T, 3C] */
    const int64_t hd[4] = {1, T, n_head, D};
    const int perm[4] = {0, 2, 1, 3};                                     /* -> [1, H, T, D] */
    struct tensor *q = op_permute(a, op_reshape(a, op_cont(a, op_slice(a, qkv, 2, 0, C)), 4, hd), perm);
    struct tensor *k = op_permute(a, op_reshape(a, op_cont(a, op_slice(a, qkv, 2, C, C)), 4, hd), perm);
    struct tensor *v = op_permute(a, op_reshape(a, op_cont(a, op_slice(a, qkv, 2, 2 * C, C)), 4, hd), perm);
    op_copy_into(a, op_slice(a, kc, 2, n_past, T), k);
    op_copy_into(a, op_slice(a, vc, 2, n_past, T), v);
    struct attn_params ap = {.scale = 1.0f / sqrtf((float)D), .causal = true};
    struct tensor *o = op_attention(a, q, op_slice(a, kc, 2, 0, n_past + T),
                                    op_slice(a, vc, 2, 0, n_past + T), NULL, &ap);
    const int64_t flat[3] = {1, T, C};
    o = op_reshape(a, op_cont(a, op_permute(a, o, perm)), 3, flat);       /* [1, T, C] */
    struct tensor *x1 = op_add(a, x, op_linear(a, o, &w->proj_w, &w->proj_b));
    h = op_layer_norm(a, x1, &w->ln2_g, &w->ln2_b, 1e-5f);
    h = op_unary(a, op_linear(a, h, &w->fc_w, &w->fc_b), UN_GELU_TANH, 0, 0);
    return op_add(a, x1, op_linear(a, h, &w->fc2_w, &w->fc2_b));
}

/* conv stack: conv1d k3 -> group norm -> mish -> conv_transpose x2 -> snake
 * -> causal dilated conv -> tanh. x[1, Cin, T]. */
static struct tensor *conv_stack(struct arena *a, const struct tensor *x, const struct conv_w *w)
{
    struct conv1d_params p1 = {.stride = 1, .dilation = 1, .groups = 1, .pad_left = 1,
                               .pad_right = 1, .pad_mode = PAD_REFLECT};
    struct tensor *h = op_conv1d(a, x, &w->c1_w, &w->c1_b, &p1);
    h = op_unary(a, op_group_norm(a, h, 4, &w->gn_g, &w->gn_b, 1e-5f), UN_MISH, 0, 0);
    struct conv_transpose1d_params pt = {.stride = 2, .padding = 1, .output_padding = 0,
                                         .dilation = 1, .groups = 1};
    h = op_snake(a, op_conv_transpose1d(a, h, &w->up_w, &w->up_b, &pt), &w->alpha);
    struct conv1d_params p2 = {.stride = 1, .dilation = 2, .groups = 1, .pad_left = 4,
                               .pad_right = 0, .pad_mode = PAD_ZERO};
    return op_unary(a, op_conv1d(a, h, &w->c2_w, &w->c2_b, &p2), UN_TANH, 0, 0);
}

static void run_block(const struct backend *be, const struct block_w *w, const float *xin,
                      float *out, int T0, int T1, int C, int H)
{
    struct arena *cache = arena_create(be, 1 << 20), *a = arena_create(be, 1 << 20);
    const int64_t cne[4] = {1, H, 32, C / H};
    struct tensor *kc = arena_tensor(cache, TYPE_F32, 4, cne);
    struct tensor *vc = arena_tensor(cache, TYPE_F32, 4, cne);
    /* prefill T0 positions, then T1 single-token decode steps */
    const int64_t ne0[3] = {1, T0, C};
    struct tensor *y = gpt2_block(a, op_from_host(a, TYPE_F32, 3, ne0, xin), w, kc, vc, 0, H);
    CHECK(y != NULL, "%s prefill: %s", be->name, arena_errmsg(a));
    if (y) tensor_to_host(y, out);
    for (int t = 0; t < T1; t++) {
        arena_reset(a);
        const int64_t ne1[3] = {1, 1, C};
        y = gpt2_block(a, op_from_host(a, TYPE_F32, 3, ne1, xin + (size_t)(T0 + t) * C), w, kc,
                       vc, T0 + t, H);
        CHECK(y != NULL, "%s decode %d: %s", be->name, t, arena_errmsg(a));
        if (y) tensor_to_host(y, out + (size_t)(T0 + t) * C);
    }
    arena_free(a);
    arena_free(cache);
}

int main(void)
{
    pool = malloc(sizeof(float) << 22);
    void *qbuf = malloc((size_t)1 << 22);
    struct backend *cpu = backend_cpu_create(2);
    const struct backend *ref = backend_ref();
    if (!pool || !qbuf || !cpu) return 2;

    enum { C = 64, H = 4, T0 = 9, T1 = 3, F = 4 * C };
    const int64_t c1[1] = {C}, c3[1] = {3 * C}, cf[1] = {F};
    const int64_t w_attn[2] = {3 * C, C}, w_proj[2] = {C, C}, w_fc[2] = {F, C}, w_fc2[2] = {C, F};
    struct block_w bw = {
        rand_tensor(1, c1, 0.9f, 1.1f, 1), rand_tensor(1, c1, -0.1f, 0.1f, 2),
        rand_tensor(2, w_attn, -0.2f, 0.2f, 3), rand_tensor(1, c3, -0.1f, 0.1f, 4),
        rand_tensor(2, w_proj, -0.2f, 0.2f, 5), rand_tensor(1, c1, -0.1f, 0.1f, 6),
        rand_tensor(1, c1, 0.9f, 1.1f, 7), rand_tensor(1, c1, -0.1f, 0.1f, 8),
        rand_tensor(2, w_fc, -0.2f, 0.2f, 9), rand_tensor(1, cf, -0.1f, 0.1f, 10),
        rand_tensor(2, w_fc2, -0.1f, 0.1f, 11), rand_tensor(1, c1, -0.1f, 0.1f, 12)};
    const int64_t xne[2] = {T0 + T1, C};
    struct tensor x = rand_tensor(2, xne, -1, 1, 13);
    float *y_cpu = calloc((T0 + T1) * C, sizeof(float)), *y_ref = calloc((T0 + T1) * C, sizeof(float));

    run_block(cpu, &bw, x.data, y_cpu, T0, T1, C, H);
    run_block(ref, &bw, x.data, y_ref, T0, T1, C, H);
    check_close("gpt2 block f32 (prefill + kv decode) cpu vs ref", y_cpu, y_ref,
                (size_t)(T0 + T1) * C, 0, 1e-5);

    /* the decode steps reproduce the full-sequence prefill */
    float *y_full = calloc((T0 + T1) * C, sizeof(float));
    run_block(cpu, &bw, x.data, y_full, T0 + T1, 0, C, H);
    check_close("gpt2 block kv-cache decode vs full prefill", y_cpu, y_full,
                (size_t)(T0 + T1) * C, 0, 1e-5);

    /* same code with q4_0 weights on both backends */
    struct block_w qw = bw;
    char *qp = qbuf;
    qw.attn_w = to_q4_0(&bw.attn_w, qp); qp += 1 << 20;
    qw.fc_w = to_q4_0(&bw.fc_w, qp); qp += 1 << 20;
    qw.fc2_w = to_q4_0(&bw.fc2_w, qp);
    run_block(cpu, &qw, x.data, y_cpu, T0, T1, C, H);
    run_block(ref, &qw, x.data, y_ref, T0, T1, C, H);
    /* the cpu kernel quantises activations to q8_0 for the integer dot
     * product (as ggml does); ref multiplies float activations with the
     * dequantised weights, so the two differ by the activation rounding */
    check_close("gpt2 block q4_0 cpu vs ref", y_cpu, y_ref, (size_t)(T0 + T1) * C, 0, 1.5e-2);

    enum { CIN = 16, CH = 32, T = 37 };
    const int64_t w1[3] = {CH, CIN, 3}, ch[1] = {CH}, wu[3] = {CH, CH / 2, 4}, ch2[1] = {CH / 2};
    const int64_t w2[3] = {8, CH / 2, 3}, c8[1] = {8};
    struct conv_w cw = {rand_tensor(3, w1, -0.3f, 0.3f, 20), rand_tensor(1, ch, -0.1f, 0.1f, 21),
                        rand_tensor(1, ch, 0.9f, 1.1f, 22), rand_tensor(1, ch, -0.1f, 0.1f, 23),
                        rand_tensor(3, wu, -0.3f, 0.3f, 24), rand_tensor(1, ch2, -0.1f, 0.1f, 25),
                        rand_tensor(1, ch2, 0.9f, 1.1f, 26), rand_tensor(3, w2, -0.3f, 0.3f, 27),
                        rand_tensor(1, c8, -0.1f, 0.1f, 28)};
    const int64_t xin[3] = {1, CIN, T};
    struct tensor cx = rand_tensor(3, xin, -1, 1, 29);
    float out[2][8 * 2 * T];
    const struct backend *bes[2] = {cpu, ref};
    for (int i = 0; i < 2; i++) {
        struct arena *a = arena_create(bes[i], 1 << 20);
        struct tensor *y = conv_stack(a, op_from_host(a, TYPE_F32, 3, xin, cx.data), &cw);
        CHECK(y && y->ne[1] == 8 && y->ne[2] == 2 * T, "%s conv stack: %s", bes[i]->name,
              arena_errmsg(a));
        if (y) tensor_to_host(y, out[i]);
        arena_free(a);
    }
    check_close("conv stack cpu vs ref", out[0], out[1], 8 * 2 * T, 0, 1e-5);

    free(y_full); free(y_cpu); free(y_ref);
    backend_cpu_free(cpu);
    free(qbuf); free(pool);

    /* backends by name (--backend, cbx_model_params.backend) */
    char err[ERR_MAX] = "";
    static const char *const bad[] = {"tpu", "cuda:", "cuda:x", "cuda:-1", "cuda:123456", "CPU", "cuda0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECK(backend_check_name(bad[i], err) == CBX_ERR_INVALID_ARG && backend_create(bad[i], 1, false, err) == NULL && err[0],
              "backend '%s' refused with a message: '%s'", bad[i], err);
    }
    printf("backend 'tpu': %s\n", (backend_check_name("tpu", err), err));
    static const char *const good[] = {NULL, "", "auto", "cpu"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        struct backend *b = backend_create(good[i], 1, true, err);
        CHECK(backend_check_name(good[i], err) == CBX_OK && b && b->host == !strcmp(backend_auto_name(), "cpu"),
              "backend '%s': %s", good[i] ? good[i] : "(null)", b ? b->name : err);
        struct backend *like = b ? backend_create_like(b, 1, false, err) : NULL;
        CHECK(like && backend_compatible(like, b), "a backend like '%s'", b ? b->name : "?");
        backend_free(like);
        backend_free(b);
    }
    CHECK(backend_compatible(backend_ref(), test_backend()) == test_backend()->host, "ref and host backends");
    backend_free((struct backend *)backend_ref()); /* a no-op */
    char desc[1024];
    backend_describe(desc, sizeof desc);
    printf("%s", desc);
    CHECK(strncmp(desc, "cpu   yes", 9) == 0 && strstr(desc, "\ncuda"), "backend_describe lists cpu and cuda");
#ifndef CBX_HAVE_CUDA
    CHECK(backend_check_name("cuda:1", err) == CBX_ERR_UNSUPPORTED && backend_create("cuda", 1, false, err) == NULL &&
          strstr(err, "-DCBX_CUDA=ON"), "cuda without the CUDA build: '%s'", err);
#endif
    return test_summary();
}
