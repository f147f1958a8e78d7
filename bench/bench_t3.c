/* bench_t3.c - T3 (GPT-2, Turbo or Nano sizes) decode speed with F32, F16,
 * Q8_0 and Q4_0 linear weights, against the copy bandwidth measured in the
 * same run.
 *
 *   t3_prefill  the prompt (conditioning 1 + 375 prompt tokens + 32 text
 *               tokens + start) through the batched path: tokens/s.
 *   t3_decode   one position per step with the KV cache: tokens/s, and the
 *               weight bytes a step reads (every linear weight once, plus
 *               the speech head) per second as GB/s and as a ratio to copy.
 *   (stderr)    seconds and minor page faults of a whole generation with
 *               arenas made per call and with a t3_workspace kept across
 *               calls, and of the batched prefill; decode tokens/s with the
 *               model's KV cache type (Q8_0 for quantised weights, else F32)
 *               and with the other one, same weights, same run.
 *   t3_decode_long  the GPT-2 backbone alone (no head, no sampler) at a
 *               long context: the prompt prefilled (409 positions), then
 *               LONG_STEPS single-position steps (context 409 -> 659), with
 *               an F16, a Q8_0 and an F32 KV cache in turn in every rep:
 *               tokens/s per cache type, and per rep the ratio to F16.
 * Weights are the synthetic checkpoint generated in memory from the
 * manifest (no files); --variant nano selects the small model; --part
 * long runs t3_decode_long alone. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "common.h"
#include "core/backend.h"
#include "core/cpu/linear_kernels.h"
#include "core/threadpool.h"
#include "synth.h"
#include "t3/t3.h"

/* tfmr.wte was deleted upstream and is never read */
static bool keep_t3(const char *name) { return strcmp(name, "tfmr.wte.weight") != 0; }

/* Times of the first and last decode steps (t3_step_cb). */
struct step_clock { double first, last; int n; };
static int on_step(void *user, int step, int32_t token, const float *logits, int n_rows, int64_t n)
{
    (void)step, (void)token, (void)logits, (void)n_rows, (void)n;
    struct step_clock *c = user;
    c->last = bench_now();
    if (c->n++ == 0) c->first = c->last;
    return 0;
}

static long minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* bytes of weights one decode step reads: the linear weights of every
 * block and the speech head, in their held type */
static double step_bytes(const struct t3_model *m)
{
    double b = 0;
    for (int i = 0; i < m->tfmr.n_layer; i++) {
        const struct gpt2_layer *l = &m->tfmr.gpt2[i];
        b += (double)tensor_nbytes(l->c_attn_w) + (double)tensor_nbytes(l->c_proj_w) +
             (double)tensor_nbytes(l->c_fc_w) + (double)tensor_nbytes(l->mlp_proj_w);
    }
    return b + (double)tensor_nbytes(m->speech_head_w);
}

enum { LONG_STEPS = 250 };

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Backbone decode tokens/s of m with a kt KV cache: x (the prompt's input
 * embeddings [1, T, D]) prefilled, then LONG_STEPS steps, each fed one row
 * of x (the values do not change the work). */
static double long_decode(const struct t3_model *m0, struct backend *cpu, enum dtype kt, const struct tensor *x,
                          double *cpu_ms)
{
    struct t3_model m = *m0;
    m.tfmr.kv_type = kt;
    const int64_t T = x->ne[1];
    struct arena *cache = arena_create(cpu, 0), *a = arena_create(cpu, 0);
    struct arena *s0 = arena_create(cpu, 0), *s1 = arena_create(cpu, 0);
    double tps = -1;
    struct kv_cache kv;
    if (cache && a && s0 && s1 && t3_backbone_kv_init(&m.tfmr, &kv, 1, cache, (int)T + LONG_STEPS) == CBX_OK) {
        kv.scratch[0] = s0;
        kv.scratch[1] = s1;
        bool ok = t3_backbone_forward(a, &m.tfmr, &kv, x) != NULL;
        double t0 = bench_now(), c0 = cpu_now();
        for (int i = 0; ok && i < LONG_STEPS; i++) {
            arena_reset(a);
            ok = t3_backbone_forward(a, &m.tfmr, &kv, op_slice(a, x, 1, (i * 7) % T, 1)) != NULL;
        }
        double dt = bench_now() - t0;
        *cpu_ms = (cpu_now() - c0) * 1e3 / LONG_STEPS;
        if (ok) tps = LONG_STEPS / dt;
        else fprintf(stderr, "bench_t3: %s\n", arena_errmsg(a));
    }
    arena_free(cache);
    arena_free(a);
    arena_free(s0);
    arena_free(s1);
    return tps;
}

/* The t3_decode_long figures of m (weights of type wt): long_decode with
 * each cache type in turn in every rep (the first rep untimed); wall-clock
 * tokens/s and, per rep, the ratio to F16; and CPU seconds per step (the
 * process's: spinning pool threads count, so with --threads 1 it is the
 * work itself, which other processes taking the cores do not inflate).
 * False after a message when a run failed. */
static bool long_context(const struct t3_model *m, struct backend *cpu, const struct t3_cond *cond,
                         const int32_t *text, int64_t L, const struct bench_opts *o, const char *variant,
                         enum dtype wt)
{
    static const enum dtype kvt[3] = {TYPE_F16, TYPE_Q8_0, TYPE_F32};
    double *lt[3], *lr[3], *lc[3], *lcr[3];
    struct arena *xa = arena_create(cpu, 0);
    struct tensor *x = xa ? t3_prepare_input_embeds(xa, m, cond, text, L, 1) : NULL;
    bool ok = x != NULL;
    for (int k = 0; k < 3; k++) {
        lt[k] = calloc((size_t)o->reps, sizeof *lt[k]);
        lr[k] = calloc((size_t)o->reps, sizeof *lr[k]);
        lc[k] = calloc((size_t)o->reps, sizeof *lc[k]);
        lcr[k] = calloc((size_t)o->reps, sizeof *lcr[k]);
        ok = ok && lt[k] && lr[k] && lc[k] && lcr[k];
    }
    for (int r = -1; ok && r < o->reps; r++)
        for (int k = 0; ok && k < 3; k++) {
            double c = 0, v = long_decode(m, cpu, kvt[k], x, &c);
            ok = v > 0;
            if (r >= 0) lt[k][r] = v, lc[k][r] = c;
        }
    if (ok) {
        for (int r = 0; r < o->reps; r++)
            for (int k = 0; k < 3; k++) lr[k][r] = lt[k][r] / lt[0][r], lcr[k][r] = lc[k][r] / lc[0][r];
        const int64_t shape[3] = {m->tfmr.n_layer, m->tfmr.d_model, x->ne[1] + LONG_STEPS};
        struct bench_stats st[3], sr[3], sc[3], scr[3];
        for (int k = 0; k < 3; k++) {
            st[k] = bench_stats(lt[k], o->reps);
            sr[k] = bench_stats(lr[k], o->reps);
            sc[k] = bench_stats(lc[k], o->reps);
            scr[k] = bench_stats(lcr[k], o->reps);
            char name[64];
            snprintf(name, sizeof name, "%s_kv_%s", dtype_name(wt), dtype_name(kvt[k]));
            bench_emit("t3_decode_long", name, shape, 3, o->threads, o->reps, "tokens/s", st[k],
                       k ? "kv_f16" : NULL, st[0].median);
            bench_emit("t3_decode_long_cpu", name, shape, 3, o->threads, o->reps, "ms/step", sc[k],
                       k ? "kv_f16" : NULL, sc[0].median);
        }
        fprintf(stderr, "%s %-5s backbone decode at context %lld-%lld: f16 KV %6.1f tok/s, q8_0 %6.1f "
                "(x%.3f, p10-p90 x%.3f-x%.3f), f32 %6.1f (x%.3f, p10-p90 x%.3f-x%.3f); ratios per rep\n",
                variant, dtype_name(wt), (long long)x->ne[1], (long long)(x->ne[1] + LONG_STEPS), st[0].median,
                st[1].median, sr[1].median, sr[1].p10, sr[1].p90, st[2].median, sr[2].median, sr[2].p10, sr[2].p90);
        fprintf(stderr, "%s %-5s   CPU time per step: f16 KV %.2f ms, q8_0 %.2f ms (x%.3f, p10-p90 x%.3f-x%.3f), "
                "f32 %.2f ms (x%.3f, p10-p90 x%.3f-x%.3f); ratios per rep\n",
                variant, dtype_name(wt), sc[0].median, sc[1].median, scr[1].median, scr[1].p10, scr[1].p90,
                sc[2].median, scr[2].median, scr[2].p10, scr[2].p90);
    } else {
        fprintf(stderr, "bench_t3: long-context decode failed\n");
    }
    for (int k = 0; k < 3; k++) free(lt[k]), free(lr[k]), free(lc[k]), free(lcr[k]);
    arena_free(xa);
    return ok;
}

int main(int argc, char **argv)
{
    const char *variant = "turbo";
    /* --variant is ours; the rest goes to bench_parse */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--variant")) {
            variant = argv[i + 1];
            memmove(argv + i, argv + i + 2, sizeof *argv * (size_t)(argc - i - 2));
            argc -= 2;
            break;
        }
    const bool long_only = !strcmp(bench_take_opt_or(&argc, argv, "--part", "all"), "long");
    struct bench_opts opt;
    if (!bench_parse(argc, argv, &opt, 3)) return 2;
    const char *file = !strcmp(variant, "nano") ? "t3_nano_v1.safetensors" : "t3_turbo_v1.safetensors";
    char err[ERR_MAX];
    struct bench_synth w;
    struct backend *cpu = backend_cpu_create(opt.threads);
    if (!cpu) {
        fprintf(stderr, "bench_t3: cannot start %d threads\n", opt.threads);
        return 1;
    }
    double copy_gbs = bench_copy_baseline(cpu->tp, &opt), read_gbs = bench_read_baseline(cpu->tp, &opt);
    if (!bench_synth_load("bench_t3", file, keep_t3, cpu->tp, &w)) return 1;

    enum { P = 375, L = 32, STEPS = 96 };
    float spk[256];
    int32_t prompt[P], text[L];
    for (int i = 0; i < 256; i++) spk[i] = 0.01f * (float)(i % 17);
    for (int i = 0; i < P; i++) prompt[i] = (i * 37) % 6561;
    for (int i = 0; i < L; i++) text[i] = 100 + i * 13;
    struct t3_cond cond = {spk, prompt, P, 0.0f};

    static const enum dtype types[] = {TYPE_F32, TYPE_F16, TYPE_Q8_0, TYPE_Q4_0};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        if (!bench_selected(&opt, dtype_name(types[ti]))) continue;
        struct t3_model m;
        struct weights src = bench_synth_weights(&w, "t3");
        if (t3_load(&m, &src, cpu, types[ti], err) != CBX_OK) {
            fprintf(stderr, "bench_t3: %s\n", err);
            return 1;
        }
        if (long_only) {
            bool ok = long_context(&m, cpu, &cond, text, L, &opt, variant, types[ti]);
            t3_free(&m);
            if (!ok) return 1;
            continue;
        }
        /* the same weights not packed (linear_pack), decoded in the same
         * reps, when packing applies */
        struct t3_model mu;
        bool ab = false;
        if (linear_pack_supported(m.tfmr.gpt2[0].c_attn_w) || m.tfmr.gpt2[0].c_attn_w->extra) {
            linear_pack_enable = 0;
            if (t3_load(&mu, &src, cpu, types[ti], err) != CBX_OK) {
                fprintf(stderr, "bench_t3: %s\n", err);
                return 1;
            }
            linear_pack_enable = 1;
            ab = true;
        }
        double *decu = calloc((size_t)opt.reps, sizeof *decu);
        double *pre = calloc((size_t)opt.reps, sizeof *pre), *dec = calloc((size_t)opt.reps, sizeof *dec);
        double *gbs = calloc((size_t)opt.reps, sizeof *gbs);
        double *gen = calloc((size_t)opt.reps, sizeof *gen), *genw = calloc((size_t)opt.reps, sizeof *genw);
        double *flt = calloc((size_t)opt.reps, sizeof *flt), *fltw = calloc((size_t)opt.reps, sizeof *fltw);
        double *fltp = calloc((size_t)opt.reps, sizeof *fltp), *deco = calloc((size_t)opt.reps, sizeof *deco);
        const enum dtype kv_own = m.tfmr.kv_type, kv_other = kv_own == TYPE_F16 ? TYPE_F32 : TYPE_F16;
        struct t3_workspace *ws = t3_workspace_create(cpu);
        if (!decu || !pre || !dec || !gbs || !gen || !genw || !flt || !fltw || !fltp || !deco || !ws) {
            fprintf(stderr, "bench_t3: out of memory\n");
            return 1;
        }
        /* greedy decoding of STEPS tokens; the warm-up run is not timed */
        struct t3_gen_params gp = t3_gen_default_params(NULL);
        gp.s.top_k = 1;
        gp.max_gen_len = STEPS - 1;
        struct arena *a = arena_create(cpu, 0);
        for (int r = -1; r < opt.reps; r++) {
            /* prefill alone */
            struct kv_cache kv;
            arena_reset(a);
            struct arena *cache = arena_create(cpu, 0);
            t3_backbone_kv_init(&m.tfmr, &kv, 1, cache, 1 + P + L + 1);
            struct arena *s0 = arena_create(cpu, 0), *s1 = arena_create(cpu, 0);
            kv.scratch[0] = s0;
            kv.scratch[1] = s1;
            long f0 = minflt();
            double t0 = bench_now();
            struct tensor *h = t3_backbone_forward(a, &m.tfmr, &kv, t3_prepare_input_embeds(a, &m, &cond, text, L, 1));
            double tp = bench_now() - t0;
            long fp = minflt() - f0;
            arena_free(cache);
            arena_free(s0);
            arena_free(s1);
            if (!h) { fprintf(stderr, "bench_t3: %s\n", arena_errmsg(a)); return 1; }
            /* whole generation; decode = the steps between the first and
             * the last sampled token (each step: forward + head + sampler);
             * then the same with the workspace of the earlier runs */
            double tg[3];
            long fg[3];
            struct step_clock sc = {0}, sco = {0};
            for (int w = 0; w < 3; w++) {
                int32_t *tok = NULL;
                int64_t n = 0;
                struct step_clock scw = {0};
                gp.ws = w == 1 ? ws : NULL;
                m.tfmr.kv_type = w == 2 ? kv_other : kv_own;
                f0 = minflt();
                t0 = bench_now();
                if (t3_inference(&m, cpu, &cond, text, L, &gp, on_step, w == 0 ? &sc : w == 1 ? &scw : &sco, &tok, &n, err) != CBX_OK) {
                    fprintf(stderr, "bench_t3: %s\n", err);
                    return 1;
                }
                tg[w] = bench_now() - t0;
                fg[w] = minflt() - f0;
                free(tok);
            }
            m.tfmr.kv_type = kv_own;
            struct step_clock scu = {0};
            if (ab) {
                int32_t *tok = NULL;
                int64_t n = 0;
                gp.ws = ws;
                cbx_status rcu = t3_inference(&mu, cpu, &cond, text, L, &gp, on_step, &scu, &tok, &n, err);
                free(tok);
                if (rcu != CBX_OK) {
                    fprintf(stderr, "bench_t3: %s\n", err);
                    return 1;
                }
            }
            if (r < 0) continue;
            decu[r] = scu.n > 1 ? (double)(scu.n - 1) / (scu.last - scu.first) : 0;
            deco[r] = sco.n > 1 ? (double)(sco.n - 1) / (sco.last - sco.first) : 0;
            gen[r] = tg[0];
            genw[r] = tg[1];
            flt[r] = (double)fg[0];
            fltw[r] = (double)fg[1];
            fltp[r] = (double)fp;
            pre[r] = (1 + P + L + 1) / tp;
            dec[r] = sc.n > 1 ? (double)(sc.n - 1) / (sc.last - sc.first) : 0;
            gbs[r] = dec[r] * step_bytes(&m) * 1e-9;
        }
        const int64_t shape[3] = {m.tfmr.n_layer, m.tfmr.d_model, 1 + P + L + 1};
        struct bench_stats sp = bench_stats(pre, opt.reps), sd = bench_stats(dec, opt.reps);
        struct bench_stats sg = bench_stats(gbs, opt.reps);
        bench_emit("t3_prefill", dtype_name(types[ti]), shape, 3, opt.threads, opt.reps, "tokens/s", sp, NULL, 0);
        bench_emit("t3_decode", dtype_name(types[ti]), shape, 3, opt.threads, opt.reps, "tokens/s", sd, NULL, 0);
        bench_emit("t3_decode_weights", dtype_name(types[ti]), shape, 3, opt.threads, opt.reps, "GB/s", sg,
                   "read", read_gbs);
        fprintf(stderr, "%s %-5s prefill %7.1f tok/s  decode %6.1f tok/s  %.0f MB/step  %5.1f GB/s  %3.0f%% of read, "
                "%3.0f%% of copy\n", variant, dtype_name(types[ti]), sp.median, sd.median, step_bytes(&m) * 1e-6,
                sg.median, read_gbs > 0 ? 100 * sg.median / read_gbs : 0, copy_gbs > 0 ? 100 * sg.median / copy_gbs : 0);
        struct bench_stats g0 = bench_stats(gen, opt.reps), g1 = bench_stats(genw, opt.reps);
        struct bench_stats f0 = bench_stats(flt, opt.reps), f1 = bench_stats(fltw, opt.reps);
        struct bench_stats fp = bench_stats(fltp, opt.reps), so = bench_stats(deco, opt.reps);
        fprintf(stderr, "%s %-5s generation %.3f s, %.0f minor faults (arenas per call); %.3f s, %.0f faults "
                "(workspace); prefill %.0f faults\n",
                variant, dtype_name(types[ti]), g0.median, f0.median, g1.median, f1.median, fp.median);
        fprintf(stderr, "%s %-5s decode %6.1f tok/s with a %s KV cache, %6.1f tok/s with %s (p10-p90 %.1f-%.1f, %.1f-%.1f)\n",
                variant, dtype_name(types[ti]), sd.median, dtype_name(kv_own), so.median, dtype_name(kv_other),
                sd.p10, sd.p90, so.p10, so.p90);
        if (!long_context(&m, cpu, &cond, text, L, &opt, variant, types[ti])) return 1;
        if (ab) {
            /* per rep: packed / plain, the two decodes of that rep */
            double *ratio = calloc((size_t)opt.reps, sizeof *ratio);
            for (int r = 0; ratio && r < opt.reps; r++) ratio[r] = decu[r] > 0 ? dec[r] / decu[r] : 0;
            struct bench_stats su = bench_stats(decu, opt.reps), sr = bench_stats(ratio ? ratio : decu, opt.reps);
            bench_emit("t3_decode_plain", dtype_name(types[ti]), shape, 3, opt.threads, opt.reps, "tokens/s", su,
                       NULL, 0);
            fprintf(stderr, "%s %-5s decode %6.1f tok/s packed weights, %6.1f tok/s plain (same reps): "
                    "x%.3f (p10-p90 x%.3f-x%.3f)\n",
                    variant, dtype_name(types[ti]), sd.median, su.median, sr.median, sr.p10, sr.p90);
            free(ratio);
            t3_free(&mu);
        }
        free(decu);
        arena_free(a);
        t3_workspace_free(ws);
        free(pre); free(dec); free(gbs);
        free(gen); free(genw); free(flt); free(fltw); free(fltp); free(deco);
        t3_free(&m);
    }
    for (int i = 0; i < w.n; i++) free(w.t[i].data);
    free(w.t);
    synth_manifest_free(w.m);
    backend_cpu_free(cpu);
    return 0;
}
