/* bench_cfg.c - the Llama T3's classifier-free-guidance decode step
 * (English, multilingual): one step of the [cond, uncond] pair batched in
 * one forward (what t3_inference does) against the single-row step (the
 * baseline of the same run; two separate single-row steps cost twice it),
 * after a prefill of a 150-token voice prompt (34 conditioning positions),
 * 60 text tokens and the two start tokens; for F32, Q8_0 and Q4_0 weights
 * of the synthetic t3_cfg checkpoint generated in memory. The batched step
 * reads every weight once for both rows, so the ratio shows what the second
 * row costs (target <= 1.3). Also the prefill itself, and t3_seq_start's
 * prefill after a voice prefix (text + start of speech) at 62 and 168
 * text tokens: the CFG pair from a fresh prefix and from one kept across
 * calls (which keeps the unconditional row's text positions, t3.c), one
 * row (cfg_weight 0) as the baseline.
 * Usage: bench_cfg [--threads N] [--reps N] [--filter f32|q8_0|q4_0]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "core/backend.h"
#include "t3/t3.h"

enum { P = 150, L = 62, STEPS = 32 };

/* prefill x ([rows, T, D]) then STEPS decode steps; seconds per step and
 * of the prefill */
static bool run(const struct t3_model *m, struct backend *cpu, const struct tensor *x, int rows, double *step,
                double *prefill)
{
    struct arena *cache = arena_create(cpu, 0), *a = arena_create(cpu, 0);
    struct arena *s0 = arena_create(cpu, 0), *s1 = arena_create(cpu, 0);
    struct kv_cache kv;
    bool ok = cache && a && s0 && s1 && t3_backbone_kv_init(&m->tfmr, &kv, rows, cache, (int)x->ne[1] + STEPS) == CBX_OK;
    if (ok) {
        kv.scratch[0] = s0;
        kv.scratch[1] = s1;
        double t0 = bench_now();
        ok = t3_backbone_forward(a, &m->tfmr, &kv, x) != NULL;
        *prefill = bench_now() - t0;
        const int32_t tok = 1234;
        t0 = bench_now();
        for (int i = 0; ok && i < STEPS; i++) {
            arena_reset(a);
            const int64_t ne[2] = {1, 1};
            struct tensor *e = op_get_rows(a, m->speech_emb, op_from_host(a, TYPE_I32, 2, ne, &tok));
            if (rows == 2) e = op_concat(a, e, e, 0);
            struct tensor *h = t3_backbone_forward(a, &m->tfmr, &kv, e);
            /* the step's logits, as the decode loop reads them */
            ok = h && op_linear(a, h, m->speech_head_w, NULL) != NULL;
        }
        *step = (bench_now() - t0) / STEPS;
    }
    if (!ok) fprintf(stderr, "bench_cfg: %s\n", a ? arena_errmsg(a) : "out of memory");
    arena_free(cache);
    arena_free(a);
    arena_free(s0);
    arena_free(s1);
    return ok;
}

/* t3_seq_start's prefill after the voice prefix pfx (text + start of
 * speech; what a call with a kept prefix pays before its first token), as
 * a CFG pair (cfg_weight 0.5) or one row (cfg_weight 0): seconds */
static bool seq_prefill(const struct t3_model *m, struct backend *cpu, const struct t3_prefix *pfx,
                        const int32_t *text, int n, float cfg_weight, double *t)
{
    char err[ERR_MAX] = "";
    struct t3_gen_params p = t3_gen_default_params(m);
    p.max_gen_len = 1;
    p.cfg_weight = cfg_weight;
    struct t3_seq *s = NULL;
    const double t0 = bench_now();
    cbx_status rc = t3_seq_start(m, cpu, NULL, pfx, text, n, &p, NULL, NULL, &s, err);
    *t = bench_now() - t0;
    t3_seq_free(s);
    if (rc != CBX_OK) fprintf(stderr, "bench_cfg: %s\n", err);
    return rc == CBX_OK;
}

/* The pair's prefill from a fresh prefix each time (*fresh: the prefix
 * built outside the timing, nothing computed after it) and from one prefix
 * kept across calls (*kept, after a warm-up call on it), and one row's
 * (*one): milliseconds, medians over reps */
static bool pair_prefill(const struct t3_model *m, struct backend *cpu, const struct t3_cond *c,
                         const int32_t *text, int n, int reps, struct bench_stats *fresh, struct bench_stats *kept,
                         struct bench_stats *one)
{
    char err[ERR_MAX] = "";
    double *tf = calloc((size_t)reps, sizeof *tf), *tk = calloc((size_t)reps, sizeof *tk),
           *t1 = calloc((size_t)reps, sizeof *t1);
    struct t3_prefix *keep = NULL;
    bool ok = tf && tk && t1 && t3_prefix_build(m, cpu, c, &keep, err) == CBX_OK;
    double t;
    ok = ok && seq_prefill(m, cpu, keep, text, n, 0.5f, &t); /* warm-up */
    for (int r = 0; ok && r < reps; r++) {
        struct t3_prefix *fp = NULL;
        ok = t3_prefix_build(m, cpu, c, &fp, err) == CBX_OK && seq_prefill(m, cpu, fp, text, n, 0.5f, &t);
        tf[r] = t * 1e3;
        t3_prefix_free(fp);
        ok = ok && seq_prefill(m, cpu, keep, text, n, 0.5f, &t);
        tk[r] = t * 1e3;
        ok = ok && seq_prefill(m, cpu, keep, text, n, 0.0f, &t);
        t1[r] = t * 1e3;
    }
    if (!ok && err[0]) fprintf(stderr, "bench_cfg: %s\n", err);
    if (ok) {
        *fresh = bench_stats(tf, reps);
        *kept = bench_stats(tk, reps);
        *one = bench_stats(t1, reps);
    }
    t3_prefix_free(keep);
    free(tf);
    free(tk);
    free(t1);
    return ok;
}

int main(int argc, char **argv)
{
    struct bench_opts opt;
    if (!bench_parse(argc, argv, &opt, 3)) return 2;
    struct backend *cpu = backend_cpu_create(opt.threads);
    if (!cpu) {
        fprintf(stderr, "bench_cfg: cannot start %d threads\n", opt.threads);
        return 1;
    }
    struct bench_synth w;
    if (!bench_synth_load("bench_cfg", "t3_cfg.safetensors", NULL, cpu->tp, &w)) return 1;
    float spk[256];
    int32_t prompt[P], text[L];
    for (int i = 0; i < 256; i++) spk[i] = 0.01f * (float)(i % 17);
    for (int i = 0; i < P; i++) prompt[i] = (i * 37) % 6561;
    text[0] = 255;
    for (int i = 1; i < L - 1; i++) text[i] = 3 + (i * 13) % 250;
    text[L - 1] = 0;
    const struct t3_cond cond = {spk, prompt, P, 0.5f};
    static const enum dtype types[] = {TYPE_F32, TYPE_Q8_0, TYPE_Q4_0};
    int status = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0] && !status; ti++) {
        if (!bench_selected(&opt, dtype_name(types[ti]))) continue;
        char err[ERR_MAX];
        struct t3_model m;
        struct weights src = bench_synth_weights(&w, "t3");
        if (t3_load(&m, &src, cpu, types[ti], err) != CBX_OK) {
            fprintf(stderr, "bench_cfg: %s\n", err);
            return 1;
        }
        struct arena *xa = arena_create(cpu, 0);
        struct tensor *x2 = xa ? t3_prepare_input_embeds(xa, &m, &cond, text, L, 2) : NULL;
        struct tensor *x1 = xa ? t3_prepare_input_embeds(xa, &m, &cond, text, L, 1) : NULL;
        double *s2 = calloc((size_t)opt.reps, sizeof *s2), *s1 = calloc((size_t)opt.reps, sizeof *s1);
        double *p2 = calloc((size_t)opt.reps, sizeof *p2), *p1 = calloc((size_t)opt.reps, sizeof *p1);
        if (!x1 || !x2 || !s2 || !s1 || !p2 || !p1) {
            fprintf(stderr, "bench_cfg: %s\n", xa ? arena_errmsg(xa) : "out of memory");
            status = 1;
        }
        for (int r = -1; r < opt.reps && !status; r++) { /* r = -1: warm-up */
            double a2, b2, a1, b1;
            if (!run(&m, cpu, x2, 2, &a2, &b2) || !run(&m, cpu, x1, 1, &a1, &b1)) {
                status = 1;
                break;
            }
            if (r < 0) continue;
            s2[r] = a2 * 1e3;
            p2[r] = b2 * 1e3;
            s1[r] = a1 * 1e3;
            p1[r] = b1 * 1e3;
        }
        if (!status) {
            const int64_t shape[2] = {(int64_t)x1->ne[1], STEPS};
            struct bench_stats st1 = bench_stats(s1, opt.reps), st2 = bench_stats(s2, opt.reps);
            struct bench_stats pp1 = bench_stats(p1, opt.reps), pp2 = bench_stats(p2, opt.reps);
            const char *type = dtype_name(types[ti]);
            bench_emit("t3_step_1row", type, shape, 2, opt.threads, opt.reps, "ms", st1, NULL, 0);
            bench_emit("t3_cfg_step_2rows", type, shape, 2, opt.threads, opt.reps, "ms", st2, "t3_step_1row",
                       st1.median);
            bench_emit("t3_prefill_1row", type, shape, 2, opt.threads, opt.reps, "ms", pp1, NULL, 0);
            bench_emit("t3_cfg_prefill_2rows", type, shape, 2, opt.threads, opt.reps, "ms", pp2, "t3_prefill_1row",
                       pp1.median);
            fprintf(stderr,
                    "bench_cfg %-5s decode step: 1 row %.2f ms, CFG pair batched %.2f ms (x%.2f; two single-row "
                    "steps x2.00) | prefill of %lld positions: %.0f / %.0f ms\n",
                    type, st1.median, st2.median, st2.median / st1.median, (long long)x1->ne[1], pp1.median,
                    pp2.median);
        }
        /* the prefill a call pays after a kept voice prefix, at the
         * bench's text and at a long sentence's (168 tokens) */
        static const int lens[] = {L, 168};
        for (size_t li = 0; li < sizeof lens / sizeof lens[0] && !status; li++) {
            const int n = lens[li];
            int32_t *tt = malloc(sizeof(int32_t) * (size_t)n);
            struct bench_stats fr, kp, on;
            if (!tt) {
                status = 1;
                break;
            }
            tt[0] = 255;
            for (int i = 1; i < n - 1; i++) tt[i] = 3 + (i * 13) % 250;
            tt[n - 1] = 0;
            if (!pair_prefill(&m, cpu, &cond, tt, n, opt.reps, &fr, &kp, &on)) status = 1;
            free(tt);
            if (status) break;
            const int64_t shape[1] = {n};
            const char *type = dtype_name(types[ti]);
            bench_emit("t3_seq_prefill_1row", type, shape, 1, opt.threads, opt.reps, "ms", on, NULL, 0);
            bench_emit("t3_cfg_seq_prefill_fresh", type, shape, 1, opt.threads, opt.reps, "ms", fr,
                       "t3_seq_prefill_1row", on.median);
            bench_emit("t3_cfg_seq_prefill_kept", type, shape, 1, opt.threads, opt.reps, "ms", kp,
                       "t3_seq_prefill_1row", on.median);
            fprintf(stderr,
                    "bench_cfg %-5s prefill after the voice prefix, %d text tokens: 1 row %.0f ms, CFG pair from "
                    "a fresh prefix %.0f ms (x%.2f), from a kept one %.0f ms (x%.2f)\n",
                    type, n, on.median, fr.median, fr.median / on.median, kp.median, kp.median / on.median);
        }
        free(s1);
        free(s2);
        free(p1);
        free(p2);
        arena_free(xa);
        t3_free(&m);
    }
    backend_cpu_free(cpu);
    return status;
}
