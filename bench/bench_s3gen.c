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
 * Options: --variant turbo|english, --tokens N, and bench_parse's.
 *
 * --model DIR|GGUF [--wtype T]: instead, the real checkpoint with its
 * built-in voice, S3Gen loaded with weight type T (default the stored
 * type of its linears, f32 when unsure), and the time of each stage of
 * s3gen_inference (encoder, each CFM step, HiFT f0 / source / decode) for
 * --tokens N speech tokens (default 253, 10 s), median of the reps, with
 * --precision f32 (default), bf16 (arena_set_bf16) or both (f32 first),
 * on --backend NAME (default cpu; on a device each stage is waited for);
 * --prompt-tokens N: the reference prompt cut to its last N tokens and 2N
 * mel frames, as a stream's chunks are (engine_params.stream_prompt_tokens). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common.h"
#include "core/backend.h"
#include "core/threadpool.h"
#include "io/model_file.h"
#include "synth.h"
#include "s3gen/cfm.h"
#include "s3gen/encoder.h"
#include "s3gen/hift.h"
#include "s3gen/s3gen.h"
#include "voice/conds.h"

/* the flow and HiFT (not the tokenizer and speaker encoder) */
static bool keep_s3gen(const char *name) { return !strncmp(name, "flow.", 5) || !strncmp(name, "mel2wav.", 8); }

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_s3gen: %s: %s\n", what, msg);
    exit(1);
}

/* ---- stage profile of the real model ----------------------------------- */

struct step_clock { double t[64]; int n; const struct backend *be; };

/* On a device backend the ops only queue kernels: wait for those that
 * made t (a one-float download), so a stage's clock holds its work. */
static void stage_wait(const struct backend *be, const struct tensor *t)
{
    float f;
    if (!be->host && t && t->data && !be->to_host(be, &f, t->data, sizeof f)) die("stage", "the device failed");
}

static long minflt(void)
{
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_minflt : 0;
}

/* CPU seconds (user + system) of the process so far: less sensitive to
 * other load on the machine than wall time */
static double cpu_s(void)
{
    struct rusage u;
    if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

static int on_step(void *user, int step, float t, float r, const struct tensor *x,
                   const struct tensor *v)
{
    (void)step, (void)t, (void)r, (void)v;
    struct step_clock *c = user;
    stage_wait(c->be, x);
    if (c->n < 64) c->t[c->n++] = bench_now();
    return 0;
}

static void run_stages(const char *path, const char *wname, int n_tok, int n_prompt, const struct bench_opts *opt,
                       struct backend *be, bool bf16)
{
    char err[ERR_MAX];
    struct model *md = NULL;
    struct conds vc = {0};
    struct s3gen s3;
    if (model_open(path, &md, err) != CBX_OK) die("model", err);
    if (conds_from_model(md, &vc, err) != CBX_OK) die("voice", err);
    int wt = dtype_from_name(wname);
    if (wt < 0) die("--wtype", "unknown type");
    struct weights w = model_weights(md, MODEL_S3GEN);
    if (s3gen_load(&s3, &w, be, (enum dtype)wt, err) != CBX_OK) die("s3gen_load", err);
    int64_t np = vc.n_prompt_token, pfo = 0;
    if (n_prompt > 0 && n_prompt < np) { /* the last n_prompt tokens and 2 n_prompt frames, as streaming cuts */
        int64_t nf = 2 * (int64_t)n_prompt < vc.n_prompt_feat ? 2 * (int64_t)n_prompt : vc.n_prompt_feat;
        memmove(vc.prompt_token, vc.prompt_token + (np - n_prompt), sizeof *vc.prompt_token * (size_t)n_prompt);
        pfo = (vc.n_prompt_feat - nf) * 80;
        np = vc.n_prompt_token = n_prompt;
        vc.n_prompt_feat = nf;
    }
    int64_t all = np + n_tok;
    int32_t *ids = malloc(sizeof *ids * (size_t)all);
    if (!ids) die("tokens", "out of memory");
    for (int64_t i = 0; i < all; i++) ids[i] = i < np ? vc.prompt_token[i] : (int32_t)((i * 2731 + 17) % 6561);
    struct s3gen_ref ref = {vc.prompt_token, np, vc.prompt_feat + pfo, vc.n_prompt_feat, vc.embedding};
    int n_steps = s3.meanflow ? S3GEN_MEANFLOW_STEPS : S3GEN_STANDARD_STEPS;
    enum { N_ST = 6 };
    const char *names[N_ST] = {"encoder", "cfm_step0", "cfm_step_rest", "hift_f0", "hift_source", "hift_decode"};
    double *v[N_ST + 1];
    for (int k = 0; k <= N_ST; k++)
        if (!(v[k] = calloc((size_t)opt->reps, sizeof(double)))) die("stages", "out of memory");
    struct arena *a = arena_create(be, 0);
    if (!a) die("arena", "out of memory");
    arena_set_bf16(a, bf16);
    fprintf(stderr, "bench_s3gen stages: %s (S3Gen %s, %s products) on %s, %lld prompt + %d speech tokens, "
            "%d threads\n", path, wname, bf16 ? "bf16" : "f32", be->name, (long long)np, n_tok, opt->threads);
    for (int r = -1; r < opt->reps; r++) {
        arena_reset(a);
        struct step_clock sc = {{0}, 0, be};
        struct s3gen_cfm_params cp = {0, false, on_step, &sc};
        struct rng_stream zs;
        rng_stream_init(&zs, "s3gen.cfm.z", 0);
        long f0c = minflt();
        double c0 = cpu_s();
        double t0 = bench_now();
        /* s3gen_flow_inference, stage by stage */
        struct tensor *spks = s3gen_flow_spks(a, &s3.flow, ref.embedding);
        struct tensor *mu = s3gen_encoder_forward(a, s3.flow.encoder, ids, all);
        if (!mu) die("encoder", arena_errmsg(a));
        stage_wait(be, mu);
        double t1 = bench_now();
        long f1c = minflt();
        double c1 = cpu_s();
        int64_t tm = mu->ne[2], tp = ref.n_prompt_feat;
        const int64_t rest[3] = {1, 80, tm - tp}, pf[3] = {1, tp, 80}, nne[3] = {1, 80, 2 * n_tok};
        struct tensor *cond = op_concat(a, op_transpose(a, op_from_host(a, TYPE_F32, 3, pf, ref.prompt_feat), 1, 2),
                                        op_fill(a, 3, rest, 0.0f), 2);
        struct tensor *noised = s3.meanflow ? op_fill(a, 3, nne, 0.5f) : NULL;
        struct tensor *x = s3gen_cfm_forward(a, &s3.flow.cfm, mu, spks, cond, noised, &zs, &cp);
        struct tensor *mel = op_cont(a, op_slice(a, x, 2, tp, tm - tp));
        if (!mel) die("cfm", arena_errmsg(a));
        stage_wait(be, mel);
        double t2 = bench_now();
        long f2c = minflt();
        double c2 = cpu_s();
        struct tensor *f0 = hift_f0(a, s3.mel2wav, mel);
        stage_wait(be, f0);
        double t3 = bench_now();
        struct tensor *src = hift_source(a, s3.mel2wav, f0, 0);
        stage_wait(be, src);
        double t4 = bench_now();
        struct tensor *wav = hift_decode(a, s3.mel2wav, mel, src);
        if (!wav) die("hift", arena_errmsg(a));
        stage_wait(be, wav);
        double t5 = bench_now();
        long f5c = minflt();
        double c5 = cpu_s();
        if (r < 0) continue;
        fprintf(stderr, "rep %d: page faults encoder %ld, cfm %ld, hift %ld; CPU s encoder %.2f, "
                "cfm %.2f, hift %.2f\n", r, f1c - f0c, f2c - f1c, f5c - f2c, c1 - c0, c2 - c1, c5 - c2);
        v[0][r] = t1 - t0;
        v[1][r] = sc.n > 0 ? sc.t[0] - t1 : 0;
        v[2][r] = sc.n > 1 ? (sc.t[sc.n - 1] - sc.t[0]) / (sc.n - 1) : 0;
        v[3][r] = t3 - t2;
        v[4][r] = t4 - t3;
        v[5][r] = t5 - t4;
        v[N_ST][r] = t5 - t0;
    }
    const int64_t shape[2] = {n_tok, np};
    for (int k = 0; k <= N_ST; k++) {
        struct bench_stats s = bench_stats(v[k], opt->reps);
        const char *nm = k < N_ST ? names[k] : "total";
        char bn[64];
        snprintf(bn, sizeof bn, "s3gen_stage_%s%s", nm, bf16 ? "_bf16" : "");
        bench_emit(bn, wname, shape, 2, opt->threads, opt->reps, "s", s, NULL, 0);
        fprintf(stderr, "%-14s %8.3f s  (p10 %.3f, p90 %.3f)%s\n", nm, s.median, s.p10, s.p90,
                k == 2 ? " per step after the first" : "");
        free(v[k]);
    }
    fprintf(stderr, "(%d CFM steps)\n", n_steps);
    arena_free(a);
    free(ids);
    s3gen_free(&s3);
    conds_free(&vc);
    model_close(md);
}

int main(int argc, char **argv)
{
    const char *model = bench_take_opt(&argc, argv, "--model");
    const char *wname = bench_take_opt_or(&argc, argv, "--wtype", "f32");
    if (model) {
        int n = atoi(bench_take_opt_or(&argc, argv, "--tokens", "253"));
        int npr = atoi(bench_take_opt_or(&argc, argv, "--prompt-tokens", "0"));
        const char *prec = bench_take_opt_or(&argc, argv, "--precision", "f32");
        const char *bname = bench_take_opt_or(&argc, argv, "--backend", "cpu");
        struct bench_opts o;
        if (!bench_parse(argc, argv, &o, 3)) return 2;
        if (n < 1 || n > 4000) die("--tokens", "needs 1..4000");
        struct backend *be = bench_backend("bench_s3gen", bname, o.threads);
        if (!be) return 1;
        if (strcmp(prec, "f32") && strcmp(prec, "bf16") && strcmp(prec, "both"))
            die("--precision", "f32, bf16 or both");
        if (strcmp(prec, "bf16")) run_stages(model, wname, n, npr, &o, be, false);
        if (strcmp(prec, "f32")) run_stages(model, wname, n, npr, &o, be, true);
        backend_free(be);
        return 0;
    }
    const char *variant = bench_take_opt_or(&argc, argv, "--variant", "turbo");
    int n_tok = atoi(bench_take_opt_or(&argc, argv, "--tokens", "100"));
    struct bench_opts opt;
    if (!bench_parse(argc, argv, &opt, 2)) return 2;
    if (n_tok < 1 || n_tok > 4000) die("--tokens", "needs 1..4000");
    bool english = !strcmp(variant, "english");
    const char *file = english ? "s3gen.safetensors" : "s3gen_meanflow.safetensors";
    char err[ERR_MAX];
    struct bench_synth w;
    struct backend *cpu = backend_cpu_create(opt.threads);
    if (!cpu) die("setup", "cannot start the threads");
    if (!bench_synth_load("bench_s3gen", file, keep_s3gen, cpu->tp, &w)) return 1;
    struct weights src = bench_synth_weights(&w, "s3gen");

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
    if (s3gen_load(&s3, &src, cpu, TYPE_F32, err) != CBX_OK) die("s3gen_load", err);

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
        if (s3gen_cfm_load(&cfm, &src, cpu, types[ti], err) != CBX_OK) die("cfm", err);
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
