/* bench_s3gen.c - S3Gen speed: encoder, one CFM estimator call, HiFT and
 * the whole S3Gen.inference, per second of generated audio, with the
 * estimator's linear/conv weights held as F32, F16, Q8_0 and Q4_0.
 *
 *   sgemm             an F32 GEMM of the estimator's typical shape
 *                     (T x 256 @ 256 x 1024, op_linear) in GFLOP/s: the
 *                     baseline of this run
 *   s3gen_encoder     prompt + speech tokens -> mu: x realtime
 *   s3gen_estimator   one estimator call (B = 1, or B = 2 for the CFG
 *                     batch of the standard model): ms, and GFLOP/s
 *                     (s3gen_estimator_flops) with its ratio to sgemm
 *   s3gen_cfg_step    standard model only: one CFG step as one batch of 2
 *                     vs two batch-1 calls (ms, ratio separate / batched)
 *   s3gen_hift        mel -> waveform: x realtime
 *   s3gen_inference   tokens -> waveform end to end: x realtime
 * Weights are the synthetic checkpoint generated in memory from the
 * manifest (flow.* and mel2wav.* only). The utterance is a 250-token
 * (10 s) prompt plus --tokens N speech tokens (default 100 = 4 s).
 * Options: --variant turbo|english, --tokens N, and bench_parse's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "core/backend.h"
#include "core/threadpool.h"
#include "io/synth.h"
#include "s3gen/cfm.h"
#include "s3gen/encoder.h"
#include "s3gen/hift.h"
#include "s3gen/s3gen.h"

struct synth_weights { struct synth_manifest *m; struct tensor *t; int n; };

static const struct tensor *find(const void *ctx, int part, const char *name)
{
    (void)part;
    const struct synth_weights *w = ctx;
    for (int i = 0; i < w->n; i++)
        if (w->t[i].data && !strcmp(w->t[i].name, name)) return &w->t[i];
    return NULL;
}

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_s3gen: %s: %s\n", what, msg);
    exit(1);
}

/* strip "--name VALUE" from argv; returns VALUE or def */
static const char *take_opt(int *argc, char **argv, const char *name, const char *def)
{
    for (int i = 1; i + 1 < *argc; i++)
        if (!strcmp(argv[i], name)) {
            const char *v = argv[i + 1];
            memmove(argv + i, argv + i + 2, sizeof *argv * (size_t)(*argc - i - 2));
            *argc -= 2;
            return v;
        }
    return def;
}

int main(int argc, char **argv)
{
    const char *variant = take_opt(&argc, argv, "--variant", "turbo");
    int n_tok = atoi(take_opt(&argc, argv, "--tokens", "100"));
    struct bench_opts opt;
    if (!bench_parse(argc, argv, &opt, 2)) return 2;
    if (n_tok < 1 || n_tok > 4000) die("--tokens", "needs 1..4000");
    bool english = !strcmp(variant, "english");
    const char *file = english ? "s3gen.safetensors" : "s3gen_meanflow.safetensors";
    char err[ERR_MAX], data[4096];
    struct synth_weights w = {0};
    struct backend *cpu = backend_cpu_create(opt.threads);
    if (!cpu || !synth_data_dir(data, sizeof data, err) ||
        synth_manifest_load(data, file, &w.m, err) != CBX_OK)
        die("setup", err);
    w.n = w.m->n;
    w.t = calloc((size_t)w.n, sizeof *w.t);
    for (int i = 0; i < w.n && w.t; i++) {
        const struct synth_tensor *st = &w.m->t[i];
        w.t[i] = tensor_make(st->type, st->ndim, st->ne, NULL, NULL);
        w.t[i].name = st->name;
        if (strncmp(st->name, "flow.", 5) && strncmp(st->name, "mel2wav.", 8)) continue;
        w.t[i].data = aligned_alloc(64, (synth_tensor_nbytes(st) + 63) & ~(size_t)63);
        if (!w.t[i].data) die("weights", "out of memory");
        if (st->rule == SYNTH_RECIPE) memcpy(w.t[i].data, st->data, synth_tensor_nbytes(st));
        else synth_tensor_fill_parallel(cpu->tp, st, w.m->seed, 0, synth_tensor_nelements(st), w.t[i].data);
    }
    struct weights src = {find, &w, 0, "s3gen"};

    /* the utterance: 250 prompt tokens (500 mel frames), n_tok tokens */
    enum { NP = 250 };
    int64_t T = 2 * (NP + n_tok);
    double audio_s = (double)n_tok * 2 * HIFT_SAMPLES_PER_FRAME / HIFT_SAMPLE_RATE;
    int32_t *toks = malloc(sizeof *toks * (size_t)(NP + n_tok));
    float *feat = malloc(sizeof *feat * 2 * NP * 80), emb[192];
    for (int i = 0; i < NP + n_tok; i++) toks[i] = (i * 37 + 11) % 6561;
    for (int i = 0; i < 2 * NP * 80; i++) feat[i] = -4.0f + 0.001f * (float)(i % 3001);
    for (int i = 0; i < 192; i++) emb[i] = 0.01f * (float)(i % 23) - 0.1f;
    struct s3gen_ref ref = {toks, NP, feat, 2 * NP, emb};
    const int64_t shape[2] = {n_tok, T};
    double *v = calloc((size_t)opt.reps, sizeof *v), *v2 = calloc((size_t)opt.reps, sizeof *v2);
    struct arena *a = arena_create(cpu, 0);
    fprintf(stderr, "bench_s3gen: %s, %d prompt + %d speech tokens (%.1f s audio, %lld mel frames), %d threads\n",
            variant, NP, n_tok, audio_s, (long long)T, opt.threads);

    /* sgemm baseline: [T, 256] @ [1024, 256]^T through op_linear */
    double sgemm = 0;
    {
        const int64_t xne[2] = {T, 256}, wne[2] = {1024, 256};
        float *xh = malloc(sizeof *xh * (size_t)(T * 256)), *wh = malloc(sizeof *wh * 1024 * 256);
        for (int64_t i = 0; i < T * 256; i++) xh[i] = 0.001f * (float)(i % 1000);
        for (int64_t i = 0; i < 1024 * 256; i++) wh[i] = 0.002f * (float)(i % 777) - 0.5f;
        struct tensor wt = tensor_make(TYPE_F32, 2, wne, wh, NULL);
        int reps = 10 * opt.reps;
        double *g = calloc((size_t)reps, sizeof *g);
        for (int r = -2; r < reps; r++) {
            arena_reset(a);
            struct tensor *x = op_from_host(a, TYPE_F32, 2, xne, xh);
            double t0 = bench_now();
            if (!op_linear(a, x, &wt, NULL)) die("sgemm", arena_errmsg(a));
            double dt = bench_now() - t0;
            if (r >= 0) g[r] = 2.0 * (double)T * 256 * 1024 / dt * 1e-9;
        }
        struct bench_stats s = bench_stats(g, reps);
        const int64_t sh[3] = {T, 256, 1024};
        bench_emit("sgemm", "f32", sh, 3, opt.threads, reps, "GFLOP/s", s, NULL, 0);
        sgemm = s.median;
        fprintf(stderr, "sgemm            %8.1f GFLOP/s  (baseline)\n", sgemm);
        free(g); free(xh); free(wh);
    }

    struct s3gen s3;
    if (s3gen_load(&s3, &src, TYPE_F32, err) != CBX_OK) die("s3gen_load", err);

    /* encoder */
    for (int r = -1; r < opt.reps; r++) {
        arena_reset(a);
        double t0 = bench_now();
        if (!s3gen_encoder_forward(a, s3.flow.encoder, toks, NP + n_tok)) die("encoder", arena_errmsg(a));
        if (r >= 0) v[r] = audio_s / (bench_now() - t0);
    }
    struct bench_stats s = bench_stats(v, opt.reps);
    bench_emit("s3gen_encoder", "f32", shape, 2, opt.threads, opt.reps, "x realtime", s, NULL, 0);
    fprintf(stderr, "encoder          %8.2f x realtime\n", s.median);

    /* estimator, per weight type */
    int64_t B = english ? 2 : 1;
    const int64_t xne[3] = {B, 80, T}, sne[2] = {B, 80};
    static const enum dtype types[] = {TYPE_F32, TYPE_F16, TYPE_Q8_0, TYPE_Q4_0};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        if (!bench_selected(&opt, dtype_name(types[ti]))) continue;
        struct s3gen_cfm cfm;
        if (s3gen_cfm_load(&cfm, &src, types[ti], err) != CBX_OK) die("cfm", err);
        double flops = s3gen_estimator_flops(&cfm, B, T);
        float t[2] = {0.25f, 0.25f}, rr[2] = {0.5f, 0.5f};
        for (int r = -1; r < opt.reps; r++) {
            arena_reset(a);
            struct tensor *x = op_fill(a, 3, xne, 0.1f), *mu = op_fill(a, 3, xne, -0.2f);
            struct tensor *cond = op_fill(a, 3, xne, 0.3f), *sp = op_fill(a, 2, sne, 0.05f);
            double t0 = bench_now();
            if (!s3gen_estimator_forward(a, &cfm, x, mu, sp, cond, t, cfm.meanflow ? rr : NULL))
                die("estimator", arena_errmsg(a));
            double dt = bench_now() - t0;
            if (r >= 0) {
                v[r] = dt * 1e3;
                v2[r] = flops / dt * 1e-9;
            }
        }
        const int64_t esh[3] = {B, 80, T};
        struct bench_stats sm = bench_stats(v, opt.reps), sg = bench_stats(v2, opt.reps);
        bench_emit("s3gen_estimator", dtype_name(types[ti]), esh, 3, opt.threads, opt.reps, "ms", sm, NULL, 0);
        bench_emit("s3gen_estimator_flops", dtype_name(types[ti]), esh, 3, opt.threads, opt.reps, "GFLOP/s", sg,
                   "sgemm", sgemm);
        fprintf(stderr, "estimator %-5s  %8.1f ms (B=%lld, %.0f GFLOP)  %6.1f GFLOP/s  %3.0f%% of sgemm\n",
                dtype_name(types[ti]), sm.median, (long long)B, flops * 1e-9, sg.median,
                sgemm > 0 ? 100 * sg.median / sgemm : 0);

        /* CFG: one batch of 2 vs two batch-1 calls (one solver step each) */
        if (english && types[ti] == TYPE_F32) {
            struct s3gen_cfm_params cp = {1, false, NULL, NULL};
            const int64_t one[3] = {1, 80, T}, s1[2] = {1, 80};
            for (int mode = 0; mode < 2; mode++) {
                cp.cfg_separate = mode == 1;
                for (int r = -1; r < opt.reps; r++) {
                    arena_reset(a);
                    struct tensor *z = op_fill(a, 3, one, 0.1f), *mu = op_fill(a, 3, one, -0.2f);
                    struct tensor *cond = op_fill(a, 3, one, 0.3f), *sp = op_fill(a, 2, s1, 0.05f);
                    double t0 = bench_now();
                    if (!s3gen_cfm_solve(a, &cfm, z, mu, sp, cond, &cp)) die("cfm step", arena_errmsg(a));
                    if (r >= 0) (mode ? v2 : v)[r] = (bench_now() - t0) * 1e3;
                }
            }
            struct bench_stats sb = bench_stats(v, opt.reps), ss = bench_stats(v2, opt.reps);
            bench_emit("s3gen_cfg_step_batched", "f32", esh, 3, opt.threads, opt.reps, "ms", sb, NULL, 0);
            bench_emit("s3gen_cfg_step_separate", "f32", esh, 3, opt.threads, opt.reps, "ms", ss,
                       "s3gen_cfg_step_batched", sb.median);
            fprintf(stderr, "cfg step         %8.1f ms batched, %8.1f ms as two calls (x%.2f)\n", sb.median,
                    ss.median, sb.median > 0 ? ss.median / sb.median : 0);
        }
        s3gen_cfm_free(&cfm);
    }

    /* HiFT on a mel of the generated length */
    {
        const int64_t mne[3] = {1, 80, 2 * n_tok};
        for (int r = -1; r < opt.reps; r++) {
            arena_reset(a);
            struct tensor *mel = op_fill(a, 3, mne, -3.0f);
            double t0 = bench_now();
            if (!hift_inference(a, s3.mel2wav, mel, 0, NULL, NULL)) die("hift", arena_errmsg(a));
            if (r >= 0) v[r] = audio_s / (bench_now() - t0);
        }
        s = bench_stats(v, opt.reps);
        bench_emit("s3gen_hift", "f32", shape, 2, opt.threads, opt.reps, "x realtime", s, NULL, 0);
        fprintf(stderr, "hift             %8.2f x realtime\n", s.median);
    }

    /* the whole S3Gen.inference (default steps) */
    {
        struct s3gen_params p = s3gen_default_params();
        for (int r = -1; r < opt.reps; r++) {
            arena_reset(a);
            double t0 = bench_now();
            if (!s3gen_inference(a, &s3, toks + NP, n_tok, &ref, &p, NULL)) die("inference", arena_errmsg(a));
            if (r >= 0) v[r] = audio_s / (bench_now() - t0);
        }
        s = bench_stats(v, opt.reps);
        bench_emit("s3gen_inference", "f32", shape, 2, opt.threads, opt.reps, "x realtime", s, NULL, 0);
        fprintf(stderr, "s3gen.inference  %8.2f x realtime (%d steps)\n", s.median, s3.meanflow ? 2 : 10);
    }

    s3gen_free(&s3);
    arena_free(a);
    free(v); free(v2); free(toks); free(feat);
    for (int i = 0; i < w.n; i++) free(w.t[i].data);
    free(w.t);
    synth_manifest_free(w.m);
    backend_cpu_free(cpu);
    return 0;
}
