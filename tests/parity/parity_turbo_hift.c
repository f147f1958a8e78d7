/* parity_turbo_hift.c - HiFT vocoder (S3Gen mel2wav) vs the Turbo fixtures.
 * Each stage is fed the fixture's own input: f0 from s3gen_mel, the source
 * from s3gen_hift_f0 (seed 42), the decoder from s3gen_mel + s3gen_hift_source;
 * then the whole of HiFTGenerator.inference from s3gen_mel, whose sine source
 * integrates f0 over ~64k samples and so amplifies f0 rounding (fixtures
 * README: about 1e-2 on the waveform across software stacks). s3gen_wav is
 * S3Gen's output after trim_fade (hift.md §9): the test applies the same fade
 * to our waveform and compares every sample. The English/multilingual S3Gen
 * builds the same HiFTGenerator, so one variant covers the module.
 * Prints the real-time factor of hift_inference (informative, not checked). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/backend.h"
#include "io/model_dir.h"
#include "io/npy.h"
#include "s3gen/hift.h"
#include "testutil.h"

#define VARIANT "turbo"

static struct npy load(const char *name) { return test_fixture(VARIANT, name); }

/* The model directory's tensors seen under the legacy weight_norm spelling
 * (weight_g / weight_v instead of parametrizations.weight.original0/1). */
static const struct weights *base_w;
static const struct tensor *legacy_find(const void *ctx, int part, const char *name)
{
    (void)ctx;
    char n[300];
    size_t len = strlen(name);
    if (strstr(name, ".parametrizations.weight.")) return NULL; /* hidden */
    if (len > 9 && len < 250 && (!strcmp(name + len - 9, ".weight_g") || !strcmp(name + len - 9, ".weight_v"))) {
        snprintf(n, sizeof n, "%.*s.parametrizations.weight.original%c", (int)(len - 9), name,
                 name[len - 1] == 'g' ? '0' : '1');
        return base_w->find(base_w->ctx, part, n);
    }
    return base_w->find(base_w->ctx, part, name);
}

/* Everything except one tensor. */
static const char *hidden_name;
static const struct tensor *hiding_find(const void *ctx, int part, const char *name)
{
    (void)ctx;
    if (!strcmp(name, hidden_name)) return NULL;
    return base_w->find(base_w->ctx, part, name);
}

/* S3Gen.trim_fade: 480 zeros, then (cos(linspace(pi, 0, 480)) + 1) / 2. */
static void apply_trim_fade(float *wav, int64_t n)
{
    for (int64_t i = 0; i < 960 && i < n; i++) {
        float f = 0.0f;
        if (i >= 480) {
            float phi = (float)(M_PI - M_PI * (double)(i - 480) / 479.0);
            f = (cosf(phi) + 1.0f) / 2.0f;
        }
        wav[i] *= f;
    }
}

/* Compare a [1, ...] result with a fixture of the same element count. */
static void compare(const char *what, const struct tensor *got, const struct npy *want, bool fade,
                    double rtol)
{
    int64_t n = test_numel(want);
    float *buf = test_tensor_values(what, got, n);
    if (!buf) return;
    if (fade) apply_trim_fade(buf, n);
    check_close(what, buf, want->data, (size_t)n, 0, rtol);
    free(buf);
}

int main(void)
{
    char err[ERR_MAX] = "";
    struct model_dir *md = test_open_model_dir(VARIANT);
    if (!md) return test_summary();
    struct weights sw = weights_from_model_dir(md, MODEL_S3GEN);
    struct hift *h = NULL;
    cbx_status rc = hift_load(&h, &sw, test_backend(), err);
    CHECK(rc == CBX_OK, "hift_load: %s", err);
    if (rc != CBX_OK) return test_summary();

    struct npy mel = load("s3gen_mel"), f0 = load("s3gen_hift_f0"),
               src = load("s3gen_hift_source"), wav = load("s3gen_wav");
    struct backend *cpu = test_compute_backend(0);
    struct arena *a = arena_create(cpu, 0);
    struct tensor mel_t = io_npy_tensor(&mel), f0_t = io_npy_tensor(&f0), src_t = io_npy_tensor(&src);
    int64_t T = mel.ne[2];
    printf("%s HiFT: %lld mel frames -> %lld samples\n", VARIANT, (long long)T,
           (long long)(T * HIFT_SAMPLES_PER_FRAME));

    /* ConvRNNF0Predictor from the fixture mel */
    struct tensor *g = hift_f0(a, h, test_upload(a, &mel_t));
    CHECK(g != NULL, "hift_f0: %s", arena_errmsg(a));
    compare("parity_" VARIANT "_hift_f0 (from s3gen_mel)", g, &f0, false, 1e-4);

    /* f0_upsamp + SourceModuleHnNSF from the fixture f0, seed 42 */
    g = hift_source(a, h, test_upload(a, &f0_t), 42);
    CHECK(g != NULL, "hift_source: %s", arena_errmsg(a));
    compare("parity_" VARIANT "_hift_source (from s3gen_hift_f0)", g, &src, false, 1e-4);

    /* decode from the fixture mel and source; trim_fade applied here */
    g = hift_decode(a, h, test_upload(a, &mel_t), test_upload(a, &src_t));
    CHECK(g != NULL, "hift_decode: %s", arena_errmsg(a));
    compare("parity_" VARIANT "_hift_decode (faded, vs s3gen_wav)", g, &wav, true, 1e-4);
    arena_reset(a);

    /* the whole HiFTGenerator.inference from the mel, seed 42; timed on a
     * second call so the arena's blocks are already mapped (as in a
     * pipeline that reuses its arena) */
    struct tensor *s = NULL, *f = NULL;
    g = hift_inference(a, h, test_upload(a, &mel_t), 42, &s, &f);
    arena_reset(a);
    double t0 = test_now(), c0 = test_cpu_seconds();
    g = hift_inference(a, h, test_upload(a, &mel_t), 42, &s, &f);
    double dt = test_now() - t0, dc = test_cpu_seconds() - c0;
    printf("hift_inference: caller arena peak %.1f MiB\n", (double)arena_peak(a) / (1 << 20));
    CHECK(g != NULL, "hift_inference: %s", arena_errmsg(a));
    compare("parity_" VARIANT "_hift_inference f0", f, &f0, false, 1e-4);
    compare("parity_" VARIANT "_hift_inference source", s, &src, false, 1e-2);
    compare("parity_" VARIANT "_hift_inference wav (faded)", g, &wav, true, 1e-2);
    double audio_s = (double)(T * HIFT_SAMPLES_PER_FRAME) / HIFT_SAMPLE_RATE;
    printf("hift_inference: %.3f s wall (%.3f s cpu, all threads) for %.3f s of audio, "
           "real-time factor %.3f\n", dt, dc, audio_s, dt / audio_s);

    /* the same per stage (cpu seconds) */
    {
        arena_reset(a);
        double c1 = test_cpu_seconds();
        struct tensor *ff = hift_f0(a, h, test_upload(a, &mel_t));
        double c2 = test_cpu_seconds();
        struct tensor *ss = hift_source(a, h, ff, 42);
        double c3 = test_cpu_seconds();
        CHECK(hift_decode(a, h, test_upload(a, &mel_t), ss) != NULL, "timed decode: %s", arena_errmsg(a));
        double c4 = test_cpu_seconds();
        printf("hift stages (cpu s): f0 %.3f, source %.3f, decode %.3f\n", c2 - c1, c3 - c2, c4 - c3);
    }

    /* legacy weight_g / weight_v names load to the same weights */
    {
        arena_reset(a);
        struct tensor *want = hift_decode(a, h, test_upload(a, &mel_t), test_upload(a, &src_t));
        base_w = &sw;
        struct weights lw = sw;
        lw.find = legacy_find;
        struct hift *h2 = NULL;
        rc = hift_load(&h2, &lw, test_backend(), err);
        CHECK(rc == CBX_OK, "hift_load (weight_g/weight_v): %s", err);
        struct tensor *got = h2 ? hift_decode(a, h2, test_upload(a, &mel_t), test_upload(a, &src_t)) : NULL;
        CHECK(want && got, "decode with legacy names: %s", arena_errmsg(a));
        float *gh = want && got ? test_host_copy(a, got) : NULL, *wh = gh ? test_host_copy(a, want) : NULL;
        if (gh && wh)
            check_close("hift_decode, weight_g/weight_v spelling", gh, wh, (size_t)tensor_nelements(want), 0, 0);
        free(gh);
        free(wh);
        hift_free(h2);
        /* a missing tensor is reported by name */
        hidden_name = "mel2wav.resblocks.4.convs2.1.parametrizations.weight.original1";
        lw.find = hiding_find;
        h2 = NULL;
        rc = hift_load(&h2, &lw, test_backend(), err);
        CHECK(rc != CBX_OK && h2 == NULL && strstr(err, "resblocks.4.convs2.1"),
              "hift_load without %s: rc %d, '%s'", hidden_name, (int)rc, err);
        printf("missing tensor: %s\n", err);
    }

    /* a mel of the wrong shape is refused with a message, not a crash */
    arena_reset(a);
    struct tensor bad = src_t;
    CHECK(hift_decode(a, h, test_upload(a, &bad), test_upload(a, &src_t)) == NULL && arena_status(a) != CBX_OK,
          "hift_decode accepts a [1, 1, S] mel");
    arena_reset(a);

    arena_free(a);
    backend_free(cpu);
    hift_free(h);
    io_npy_free(&mel);
    io_npy_free(&f0);
    io_npy_free(&src);
    io_npy_free(&wav);
    model_dir_close(md);
    return test_summary();
}
