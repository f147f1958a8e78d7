/* bench_batch.c - aggregate T3 decode throughput of sequences decoded
 * together (t3_batch_step: one forward for all rows) against the same
 * sequences decoded one after another (t3_seq_step), Turbo sizes.
 *
 *   t3_batch_decode  [B]  tokens/s of B sequences stepped as one batch
 *                         (every token sampled counts; sequences that end
 *                         early leave the batch), ratio to t3_solo_decode
 *   t3_solo_decode   [B]  tokens/s of the same B sequences decoded alone,
 *                         one after another (the speed of one request)
 *   t3_batch_decode_gemm [B]  the batch without row-exact products
 *                         (t3_batch_set_row_exact false: multi-row kernels,
 *                         tokens no longer bit-identical to solo), ratio
 *                         to t3_batch_decode
 *   (stderr)              both, rows per step, and the speed-up; where a
 *                         row-exact step goes (t3_batch_stats: the draws,
 *                         issuing the forward, waiting for its logits)
 * B = 1, 2, 4, 8 (--min-batch M, --max-batch N: from M up to N, doubling). --backend cpu|cuda
 * (default: the cpu over its shared pool). Each sequence: the
 * voice prefix (375 prompt tokens) restored, its own 24-token text
 * prefilled (not timed), then up to STEPS tokens with upstream's sampling
 * and its own seed. Weights: the synthetic Turbo checkpoint generated in
 * memory (as bench_t3), Q4_0 by default (--type f32|f16|q8_0|q4_0). Both
 * paths give the same tokens (tests/t3/test_batch.c); this reports only
 * the speed. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "core/backend.h"
#include "synth.h"
#include "t3/t3.h"

enum { P = 375, L = 24, STEPS = 64, MAX_B = 64 };

static bool keep_t3(const char *name) { return strcmp(name, "tfmr.wte.weight") != 0; }

/* Start b sequences (texts and seeds by index) after prefix pfx. */
static bool start(const struct t3_model *m, const struct backend *be, const struct t3_prefix *pfx, int b,
                  struct t3_seq **s, char *err)
{
    for (int i = 0; i < b; i++) {
        int32_t text[L];
        for (int j = 0; j < L; j++) text[j] = (int32_t)(100 + (j * 13 + i * 101) % 5000);
        struct t3_gen_params gp = t3_gen_default_params(m);
        gp.seed = 1000 + (uint64_t)i;
        gp.max_gen_len = STEPS - 1;
        if (t3_seq_start(m, be, NULL, pfx, text, L, &gp, NULL, NULL, &s[i], err) != CBX_OK) return false;
    }
    return true;
}

static void free_all(struct t3_seq **s, int b)
{
    for (int i = 0; i < b; i++) {
        t3_seq_free(s[i]);
        s[i] = NULL;
    }
}

/* b sequences (start) stepped as one batch to their ends, row-exact or
 * not: seconds (-1 on failure); *toks tokens sampled, *steps, *rows. */
static double batched(const struct t3_model *m, const struct backend *be, const struct t3_prefix *pfx,
                      struct t3_batch *batch, bool exact, int b, struct t3_seq **s, int64_t *toks, int64_t *steps,
                      int64_t *rows, char *err)
{
    *toks = *steps = *rows = 0;
    t3_batch_set_row_exact(batch, exact);
    if (!start(m, be, pfx, b, s, err)) return -1;
    const double t0 = bench_now();
    for (;;) {
        struct t3_seq *act[MAX_B];
        int n = 0, nr = 0;
        for (int i = 0; i < b; i++)
            if (!t3_seq_done(s[i])) {
                nr += t3_seq_rows(s[i]);
                act[n++] = s[i];
            }
        if (n == 0) break;
        int32_t tok[MAX_B];
        cbx_status rcs[MAX_B];
        if (t3_batch_step(batch, act, n, tok, rcs, err) != CBX_OK) {
            free_all(s, b);
            return -1;
        }
        for (int i = 0; i < n; i++) *toks += tok[i] >= 0;
        (*steps)++;
        *rows += nr;
    }
    const double t = bench_now() - t0;
    free_all(s, b);
    t3_batch_set_row_exact(batch, true);
    return t;
}

int main(int argc, char **argv)
{
    const char *tname = bench_take_opt_or(&argc, argv, "--type", "q4_0");
    const int max_b = atoi(bench_take_opt_or(&argc, argv, "--max-batch", "8"));
    const char *bname = bench_take_opt_or(&argc, argv, "--backend", NULL);
    const int min_b = atoi(bench_take_opt_or(&argc, argv, "--min-batch", "1"));
    struct bench_opts opt;
    if (!bench_parse(argc, argv, &opt, 1)) return 2;
    const int wt = dtype_from_name(tname);
    if (wt < 0 || max_b < 1 || max_b > MAX_B || min_b < 1 || min_b > max_b) {
        fprintf(stderr, "bench_batch: --type f32|f16|q8_0|q4_0, --min-batch 1..N, --max-batch N..%d\n", MAX_B);
        return 2;
    }
    char err[ERR_MAX];
    /* the weights are made on the cpu pool, then placed by the backend */
    struct backend *cpu = backend_cpu_create_shared(opt.threads);
    struct backend *be = bname ? bench_backend("bench_batch", bname, opt.threads) : cpu;
    struct t3_batch *batch = be ? t3_batch_create(be) : NULL;
    if (!cpu || !be || !batch) {
        fprintf(stderr, "bench_batch: cannot start the backend (%d threads)\n", opt.threads);
        return 1;
    }
    struct bench_synth w;
    if (!bench_synth_load("bench_batch", "t3_turbo_v1.safetensors", keep_t3, cpu->tp, &w)) return 1;
    struct t3_model m;
    struct weights src = bench_synth_weights(&w, "t3");
    if (t3_load(&m, &src, be, (enum dtype)wt, err) != CBX_OK) {
        fprintf(stderr, "bench_batch: %s\n", err);
        return 1;
    }
    float spk[256];
    int32_t prompt[P];
    for (int i = 0; i < 256; i++) spk[i] = 0.01f * (float)(i % 17);
    for (int i = 0; i < P; i++) prompt[i] = (i * 37) % 6561;
    const struct t3_cond cond = {spk, prompt, P, 0.0f};
    struct t3_prefix *pfx = NULL;
    if (t3_prefix_build(&m, be, &cond, &pfx, err) != CBX_OK) {
        fprintf(stderr, "bench_batch: %s\n", err);
        return 1;
    }
    char tb_[64];
    const char *ty = bench_type_on(be, tname, tb_, sizeof tb_);
    struct t3_seq *s[MAX_B] = {0};
    double *vb = calloc((size_t)opt.reps, sizeof *vb), *vs = calloc((size_t)opt.reps, sizeof *vs);
    double *vg = calloc((size_t)opt.reps, sizeof *vg);
    if (!vb || !vs || !vg) {
        fprintf(stderr, "bench_batch: out of memory\n");
        return 1;
    }
    for (int b = min_b; b <= max_b; b *= 2) {
        double rows_per_step = 0;
        struct t3_batch_stats st0, st1, st = {0};
        for (int r = -1; r < opt.reps; r++) { /* r = -1: warm-up, not kept */
            /* batched: row-exact, then with the multi-row kernels */
            int64_t toks = 0, toks_g = 0, steps = 0, rows = 0, steps_g, rows_g;
            t3_batch_get_stats(batch, &st0);
            const double tb = batched(&m, be, pfx, batch, true, b, s, &toks, &steps, &rows, err);
            t3_batch_get_stats(batch, &st1);
            const double tg =
                tb < 0 ? -1 : batched(&m, be, pfx, batch, false, b, s, &toks_g, &steps_g, &rows_g, err);
            if (tb < 0 || tg < 0) goto fail;
            /* the same sequences alone, one after another */
            if (!start(&m, be, pfx, b, s, err)) goto fail;
            int64_t toks_solo = 0;
            double t0 = bench_now();
            for (int i = 0; i < b; i++)
                while (!t3_seq_done(s[i])) {
                    int32_t tok;
                    if (t3_seq_step(s[i], &tok, err) != CBX_OK) goto fail;
                    toks_solo += tok >= 0;
                }
            const double ts = bench_now() - t0;
            free_all(s, b);
            if (r < 0) continue;
            vb[r] = (double)toks / tb;
            vs[r] = (double)toks_solo / ts;
            vg[r] = (double)toks_g / tg;
            rows_per_step = steps ? (double)rows / (double)steps : 0;
            st.draw += st1.draw - st0.draw;
            st.issue += st1.issue - st0.issue;
            st.wait += st1.wait - st0.wait;
            st.steps += st1.steps - st0.steps;
        }
        const int64_t shape[1] = {b};
        struct bench_stats sb = bench_stats(vb, opt.reps), ss = bench_stats(vs, opt.reps);
        struct bench_stats sg = bench_stats(vg, opt.reps);
        bench_emit("t3_solo_decode", ty, shape, 1, opt.threads, opt.reps, "tokens/s", ss, NULL, 0);
        bench_emit("t3_batch_decode", ty, shape, 1, opt.threads, opt.reps, "tokens/s", sb, "t3_solo_decode",
                   ss.median);
        bench_emit("t3_batch_decode_gemm", ty, shape, 1, opt.threads, opt.reps, "tokens/s", sg,
                   "t3_batch_decode", sb.median);
        fprintf(stderr, "B=%d %s: batched %.1f tok/s (%.2f rows/step), alone %.1f tok/s: %.2fx; multi-row "
                "kernels %.1f tok/s (%.2fx)\n", b, ty, sb.median, rows_per_step, ss.median,
                ss.median > 0 ? sb.median / ss.median : 0, sg.median, ss.median > 0 ? sg.median / ss.median : 0);
        const double ns = st.steps > 0 ? 1e3 / (double)st.steps : 0;
        fprintf(stderr, "B=%d %s: a row-exact step: draws %.3f ms, issuing the forward %.3f ms, waiting for "
                "its logits %.3f ms\n", b, ty, st.draw * ns, st.issue * ns, st.wait * ns);
    }
    t3_prefix_free(pfx);
    t3_free(&m);
    t3_batch_free(batch);
    if (be != cpu) backend_free(be);
    backend_cpu_free(cpu);
    free(vb);
    free(vs);
    free(vg);
    return 0;
fail:
    fprintf(stderr, "bench_batch: %s\n", err);
    return 1;
}
