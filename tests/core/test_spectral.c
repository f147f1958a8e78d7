/* test_spectral.c - op_stft / op_istft: the ref kernels against DFTs
 * worked by hand, the cpu (FFTW) kernels against the ref kernels on random
 * signals (even and odd n_fft, center on/off, every pad mode, normalized,
 * windows shorter than n_fft, batches, strided views), istft(stft(x)) == x,
 * the torch length rules, and the operand errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/window.h"
#include "testutil.h"

static struct backend *cpu;
static struct arena *acpu, *aref;

/* Host copy of an arena tensor (contiguous); NULL when t is NULL. */
static float *host(const struct tensor *t)
{
    if (!t) return NULL;
    float *h = malloc(tensor_nbytes(t) + 1);
    if (h && tensor_to_host(t, h) != CBX_OK) { free(h); return NULL; }
    return h;
}

/* ---- hand-computed cases ------------------------------------------------ */

static void test_hand(void)
{
    struct arena *a = aref;
    arena_reset(a);
    /* one frame of [1, 2, 3, 4]: X0 = 10, X1 = 1 - 2i - 3 + 4i = -2 + 2i, X2 = -2 */
    const float x4[4] = {1, 2, 3, 4};
    struct stft_params p = {.n_fft = 4, .hop = 1, .win_length = 4, .center = false};
    struct tensor *X = op_stft(a, op_from_host(a, TYPE_F32, 1, (int64_t[]){4}, x4), NULL, &p);
    CHECK(X && X->ndim == 3 && X->ne[0] == 3 && X->ne[1] == 1 && X->ne[2] == 2,
          "stft [4] n_fft 4 shape [3, 1, 2]");
    const float want1[6] = {10, 0, -2, 2, -2, 0};
    float *h = host(X);
    if (h) check_close("ref stft hand [1,2,3,4]", h, want1, 6, 1e-6, 0);
    free(h);

    /* center, reflect: [1..5] -> [3 2 | 1 2 3 4 5 | 4 3]; hop 2 -> frames
     * [3 2 1 2], [1 2 3 4], [3 4 5 4]; DFTs (8, 2, 0), (10, -2+2i, -2), (16, -2, 0).
     * Output layout [k][frame][re, im]. */
    const float x5[5] = {1, 2, 3, 4, 5};
    p = (struct stft_params){.n_fft = 4, .hop = 2, .center = true, .pad_mode = PAD_REFLECT};
    X = op_stft(a, op_from_host(a, TYPE_F32, 1, (int64_t[]){5}, x5), NULL, &p);
    const float want2[18] = {8, 0, 10, 0, 16, 0,     /* k = 0 */
                             2, 0, -2, 2, -2, 0,     /* k = 1 */
                             0, 0, -2, 0, 0, 0};     /* k = 2 */
    h = host(X);
    CHECK(X && X->ne[1] == 3, "center reflect frames = 3");
    if (h) check_close("ref stft hand reflect", h, want2, 18, 1e-6, 0);
    free(h);
    /* replicate: [1 1 | 1 2 3 4 5 | 5 5]: frame 0 [1 1 1 2]: (5, -1i... ) =
     * X0 5, X1 = 1 - i - 1 + 2i = i, X2 = 1 - 1 + 1 - 2 = -1 */
    p.pad_mode = PAD_REPLICATE;
    X = op_stft(a, op_from_host(a, TYPE_F32, 1, (int64_t[]){5}, x5), NULL, &p);
    h = host(X);
    if (h) {
        const float got[6] = {h[0], h[1], h[6], h[7], h[12], h[13]};
        const float want[6] = {5, 0, 0, 1, -1, 0};
        check_close("ref stft hand replicate frame 0", got, want, 6, 1e-6, 0);
    }
    free(h);
    /* window [1, 2] centred in n_fft 4 sits at [0 1 2 0]; normalized halves */
    const float w2[2] = {1, 2};
    p = (struct stft_params){.n_fft = 4, .hop = 4, .win_length = 2, .normalized = true};
    X = op_stft(a, op_from_host(a, TYPE_F32, 1, (int64_t[]){4}, x4),
                op_from_host(a, TYPE_F32, 1, (int64_t[]){2}, w2), &p);
    /* windowed frame [0, 2, 6, 0]: X0 8, X1 = -2i - 6 = -6 - 2i, X2 = -2 + 6 = 4; / 2 */
    const float want3[6] = {4, 0, -3, -1, 2, 0};
    h = host(X);
    if (h) check_close("ref stft hand window+normalized", h, want3, 6, 1e-6, 0);
    free(h);

    /* istft of the first case gives [1 2 3 4] back; the imaginary parts of
     * the DC and Nyquist bins are ignored (irfft) */
    const float spec[6] = {10, 5, -2, 2, -2, -7};
    p = (struct stft_params){.n_fft = 4, .hop = 4, .center = false};
    struct tensor *y = op_istft(a, op_from_host(a, TYPE_F32, 3, (int64_t[]){3, 1, 2}, spec),
                                NULL, &p, 0);
    CHECK(y && y->ndim == 1 && y->ne[0] == 4, "istft natural length 4 (center off)");
    h = host(y);
    if (h) check_close("ref istft hand", h, x4, 4, 1e-6, 0);
    free(h);
    CHECK(arena_status(a) == CBX_OK, "hand cases ok: %s", arena_errmsg(a));

    /* windows */
    float hw[5];
    window_hann(hw, 4, true);
    check_close("hann periodic 4", hw, (const float[]){0, 0.5f, 1, 0.5f}, 4, 1e-7, 0);
    window_hann(hw, 5, false);
    check_close("hann symmetric 5", hw, (const float[]){0, 0.5f, 1, 0.5f, 0}, 5, 1e-7, 0);
}

/* ---- cpu vs ref ---------------------------------------------------------- */

struct scase {
    const char *name;
    int n_fft, hop, win_length; /* win_length 0: no window (ones) */
    bool center, normalized, strided;
    enum pad_mode mode;
    int64_t B, L;               /* B 0: 1-D input */
    float win_floor;            /* window = hann + floor (keeps NOLA for center off) */
};

static struct tensor *make_x(struct arena *a, const float *xs, const struct scase *c)
{
    int64_t B = c->B ? c->B : 1;
    if (c->strided) {
        /* x stored as [L, B] and viewed as [B, L]: rows with stride B floats */
        float *t = malloc((size_t)(B * c->L) * sizeof *t);
        if (!t) return NULL;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < c->L; i++) t[i * B + b] = xs[b * c->L + i];
        struct tensor *s = op_from_host(a, TYPE_F32, 2, (int64_t[]){c->L, B}, t);
        free(t);
        struct tensor *v = op_transpose(a, s, 0, 1);
        if (c->B || !v) return v;
        struct tensor r = *v; /* 1-D: row 0 of the view, stride B floats */
        r.ndim = 1;
        r.ne[0] = c->L;
        r.nb[0] = v->nb[1];
        return arena_desc(a, &r);
    }
    return c->B ? op_from_host(a, TYPE_F32, 2, (int64_t[]){B, c->L}, xs)
                : op_from_host(a, TYPE_F32, 1, (int64_t[]){c->L}, xs);
}

static void test_case(const struct scase *c, uint64_t seed)
{
    int64_t B = c->B ? c->B : 1;
    float *xs = malloc((size_t)(B * c->L) * sizeof *xs);
    float *win = malloc((size_t)(c->win_length + 1) * sizeof *win);
    float *hs[2] = {0}, *hi[2] = {0}, *hr[2] = {0};
    if (!xs || !win) { CHECK(0, "malloc"); goto cleanup; }
    fill_uniform(xs, (size_t)(B * c->L), -1, 1, seed);
    window_hann(win, c->win_length, true);
    for (int i = 0; i < c->win_length; i++) win[i] += c->win_floor;
    struct stft_params p = {.n_fft = c->n_fft, .hop = c->hop, .win_length = c->win_length,
                            .center = c->center, .pad_mode = c->mode,
                            .normalized = c->normalized};
    int64_t nspec = 0;
    struct arena *as[2] = {acpu, aref};
    for (int k = 0; k < 2; k++) {
        struct arena *a = as[k];
        arena_reset(a);
        struct tensor *x = make_x(a, xs, c);
        struct tensor *w = c->win_length
            ? op_from_host(a, TYPE_F32, 1, (int64_t[]){c->win_length}, win) : NULL;
        struct tensor *X = op_stft(a, x, w, &p);
        if (X) nspec = tensor_nelements(X);
        hs[k] = host(X);
        /* istft of the stft (reconstruction) ... */
        hr[k] = host(op_istft(a, X, w, &p, c->L));
        /* ... and of a random spectrum seen through a strided view
         * ([B, 2, frames, F] stored, [B, F, frames, 2] viewed: no dim is
         * contiguous but the bins), which also has non-zero imaginary
         * DC / Nyquist parts for irfft to drop */
        if (X) {
            int nd = X->ndim;
            int64_t F = X->ne[nd - 3], T = X->ne[nd - 2];
            float *r = malloc((size_t)nspec * sizeof *r);
            if (r) {
                fill_uniform(r, (size_t)nspec, -1, 1, seed + 7);
                struct tensor *s = c->B
                    ? op_permute(a, op_from_host(a, TYPE_F32, 4, (int64_t[]){B, 2, T, F}, r),
                                 (const int[]){0, 3, 2, 1})
                    : op_permute(a, op_from_host(a, TYPE_F32, 3, (int64_t[]){2, T, F}, r),
                                 (const int[]){2, 1, 0});
                hi[k] = host(op_istft(a, s, w, &p, 0));
                free(r);
            }
        }
        CHECK(arena_status(a) == CBX_OK, "%s on %s: %s", c->name, k ? "ref" : "cpu",
              arena_errmsg(a));
    }
    char what[96];
    if (hs[0] && hs[1]) {
        snprintf(what, sizeof what, "stft cpu vs ref %s", c->name);
        check_close(what, hs[0], hs[1], (size_t)nspec, 0, 2e-6);
    }
    int64_t frames = 1 + (c->L + (c->center ? 2 * (c->n_fft / 2) : 0) - c->n_fft) / c->hop;
    int64_t nat = c->n_fft + c->hop * (frames - 1) - (c->center ? 2 * (c->n_fft / 2) : 0);
    if (hi[0] && hi[1]) {
        snprintf(what, sizeof what, "istft cpu vs ref %s", c->name);
        check_close(what, hi[0], hi[1], (size_t)(B * nat), 0, 2e-6);
    }
    /* the signal is reconstructed wherever the frames cover it */
    for (int k = 0; k < 2; k++) {
        if (!hr[k]) continue;
        int64_t cover = c->center ? c->L : c->n_fft + c->hop * (frames - 1);
        for (int64_t b = 0; b < B; b++) {
            snprintf(what, sizeof what, "istft(stft) %s %s b%lld", k ? "ref" : "cpu", c->name,
                     (long long)b);
            check_close(what, hr[k] + b * c->L, xs + b * c->L, (size_t)cover, 1e-5, 0);
            for (int64_t t = cover; t < c->L; t++)
                if (hr[k][b * c->L + t] != 0.0f) {
                    CHECK(0, "%s: uncovered tail sample %lld not zero", what, (long long)t);
                    break;
                }
        }
    }
cleanup:
    for (int k = 0; k < 2; k++) { free(hs[k]); free(hi[k]); free(hr[k]); }
    free(xs);
    free(win);
}

static void test_cpu_vs_ref(void)
{
    static const struct scase cases[] = {
        /* HiFT: n_fft 16, hop 4, periodic hann, center reflect */
        {"hift n16 h4 reflect B2", 16, 4, 16, true, false, false, PAD_REFLECT, 2, 1001, 0},
        /* S3Tokenizer / VoiceEncoder: n_fft 400 hop 160 */
        {"s3tok n400 h160 reflect", 400, 160, 400, true, false, false, PAD_REFLECT, 0, 8000, 0},
        /* S3Gen mel: n_fft 1920, hop 480, center off (rectangle-safe window) */
        {"mel n1920 h480 nocenter", 1920, 480, 1920, false, false, false, PAD_REFLECT, 0, 24011,
         0.05f},
        {"odd n15 h5 w12 constant norm", 15, 5, 12, true, true, false, PAD_ZERO, 2, 503, 0.1f},
        {"n64 h16 w50 replicate norm strided", 64, 16, 50, true, true, true, PAD_REPLICATE, 2,
         777, 0.05f},
        {"odd n33 h8 ones reflect strided", 33, 8, 0, true, false, true, PAD_REFLECT, 2, 300, 0},
        {"odd n401 h100 reflect 1-D strided", 401, 100, 401, true, false, true, PAD_REFLECT, 0, 4000, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_case(&cases[i], 100 + i);
}

/* ---- length rules and errors --------------------------------------------- */

static void test_lengths_and_errors(void)
{
    float x[64], w[16];
    fill_uniform(x, 64, -1, 1, 5);
    window_hann(w, 16, true);
    struct arena *as[2] = {acpu, aref};
    float *got[2] = {0};
    for (int k = 0; k < 2; k++) {
        struct arena *a = as[k];
        arena_reset(a);
        struct stft_params p = {.n_fft = 16, .hop = 4, .center = true, .pad_mode = PAD_REFLECT};
        struct tensor *wt = op_from_host(a, TYPE_F32, 1, (int64_t[]){16}, w);
        struct tensor *X = op_stft(a, op_from_host(a, TYPE_F32, 1, (int64_t[]){64}, x), wt, &p);
        CHECK(X && X->ne[1] == 17, "frames 1 + 64/4 = 17");
        struct tensor *y = op_istft(a, X, wt, &p, 0);
        CHECK(y && y->ne[0] == 64, "natural length (17-1)*4 = 64, got %lld",
              y ? (long long)y->ne[0] : -1LL);
        /* longer than the overlap-added signal: torch pads zeros at the end */
        y = op_istft(a, X, wt, &p, 80);
        got[k] = host(y);
        CHECK(y && y->ne[0] == 80, "requested length 80");
        if (got[k]) {
            check_close(k ? "ref istft length 80 head" : "cpu istft length 80 head", got[k], x,
                        64, 1e-5, 0);
            bool zero = true;
            for (int t = 72; t < 80; t++) zero &= got[k][t] == 0.0f;
            CHECK(zero, "samples past n_fft/2 + full are zero");
        }
        /* odd n_fft natural length keeps the extra sample: 15 + 5*(f-1) - 14 */
        struct stft_params po = {.n_fft = 15, .hop = 5, .center = true, .pad_mode = PAD_REFLECT};
        X = op_stft(a, op_from_host(a, TYPE_F32, 1, (int64_t[]){40}, x), NULL, &po);
        y = op_istft(a, X, NULL, &po, 0);
        CHECK(X && y && y->ne[0] == 15 + 5 * (X->ne[1] - 1) - 14, "odd natural length");
        CHECK(arena_status(a) == CBX_OK, "length cases: %s", arena_errmsg(a));

        /* errors: each leaves a message and returns NULL */
        struct { const char *what; struct tensor *r; } bad[5];
        arena_reset(a);
        p.n_fft = 128; /* reflect pad 64 >= 64 samples */
        bad[0].what = "reflect pad >= length";
        bad[0].r = op_stft(a, op_from_host(a, TYPE_F32, 1, (int64_t[]){64}, x), NULL, &p);
        CHECK(!bad[0].r && strstr(arena_errmsg(a), "reflect"), "%s: %s", bad[0].what,
              arena_errmsg(a));
        arena_reset(a);
        p.n_fft = 16;
        bad[1].r = op_stft(a, op_from_host(a, TYPE_F32, 1, (int64_t[]){64}, x),
                           op_from_host(a, TYPE_F32, 1, (int64_t[]){8}, w), &p);
        CHECK(!bad[1].r && strstr(arena_errmsg(a), "window"), "window length: %s",
              arena_errmsg(a));
        arena_reset(a);
        bad[2].r = op_istft(a, op_from_host(a, TYPE_F32, 3, (int64_t[]){8, 4, 2}, x), NULL, &p, 0);
        CHECK(!bad[2].r && strstr(arena_errmsg(a), "spec"), "istft bins: %s", arena_errmsg(a));
        arena_reset(a);
        /* center off with a periodic hann: the envelope is 0 at sample 0 */
        struct stft_params pn = {.n_fft = 16, .hop = 4, .center = false};
        wt = op_from_host(a, TYPE_F32, 1, (int64_t[]){16}, w);
        X = op_stft(a, op_from_host(a, TYPE_F32, 1, (int64_t[]){64}, x), wt, &pn);
        bad[3].r = op_istft(a, X, wt, &pn, 0);
        CHECK(X && !bad[3].r && strstr(arena_errmsg(a), "NOLA"), "NOLA: %s", arena_errmsg(a));
        arena_reset(a);
        pn.hop = 0; /* torch default n_fft / 4 */
        pn.n_fft = 1;
        bad[4].r = op_stft(a, op_from_host(a, TYPE_F32, 1, (int64_t[]){64}, x), NULL, &pn);
        CHECK(!bad[4].r && arena_status(a) != CBX_OK, "n_fft 1: %s", arena_errmsg(a));
        arena_reset(a);
    }
    if (got[0] && got[1]) check_close("istft length 80 cpu vs ref", got[0], got[1], 80, 0, 2e-6);
    free(got[0]);
    free(got[1]);
}

/* A long signal through the cpu kernels only (many blocks and threads):
 * 60 s at 24 kHz, HiFT's sizes, reconstruction checked against the input. */
static void test_long(void)
{
    const int64_t L = 24000 * 60;
    float *x = malloc((size_t)L * sizeof *x), *y = NULL, w[16];
    if (!x) { CHECK(0, "malloc"); return; }
    fill_uniform(x, (size_t)L, -1, 1, 9);
    window_hann(w, 16, true);
    arena_reset(acpu);
    struct stft_params p = {.n_fft = 16, .hop = 4, .center = true, .pad_mode = PAD_REFLECT};
    struct tensor *wt = op_from_host(acpu, TYPE_F32, 1, (int64_t[]){16}, w);
    struct tensor *X = op_stft(acpu, op_from_host(acpu, TYPE_F32, 1, &L, x), wt, &p);
    y = host(op_istft(acpu, X, wt, &p, L));
    CHECK(y != NULL, "long istft: %s", arena_errmsg(acpu));
    if (y) check_close("cpu istft(stft) 60 s n16", y, x, (size_t)L, 1e-5, 0);
    free(y);
    free(x);
}

int main(void)
{
    cpu = backend_cpu_create(0);
    acpu = arena_create(cpu, 64u << 20);
    aref = arena_create(backend_ref(), 64u << 20);
    if (!cpu || !acpu || !aref) { fprintf(stderr, "setup failed\n"); return 1; }
    test_hand();
    test_cpu_vs_ref();
    test_lengths_and_errors();
    test_long();
    arena_free(acpu);
    arena_free(aref);
    backend_cpu_free(cpu);
    return test_summary();
}
