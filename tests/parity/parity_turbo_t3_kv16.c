/* parity_turbo_t3_kv16.c - the F16 KV cache of a quantised T3 (gpt2.h,
 * gpt2_kv_type) and the reusable workspace (t3.h, t3_workspace).
 *
 * With the fixture's conditioning and text, Q4_0 weights, greedy, 64
 * sampled tokens:
 *   - a Q4_0 model holds a Q8_0 cache by default (set to F16 here), an F32
 *     model an F32 one;
 *   - F16 cache vs F32 cache (the same Q4_0 weights): tokens matching
 *     (printed, at least MIN_MATCH of the first 64, in order), and the max
 *     abs difference of the raw logits over the steps whose histories agree
 *     (printed, at most MAX_DLOGIT; it must be nonzero, or the F16 cache
 *     was not used); for scale, the step-0 logit difference between the
 *     Q4_0 and the F32 weights (both F32 caches) is printed too;
 *   - reduced-precision products in the prefill (t3_model.bf16, set for
 *     quantised weights) vs without: on CPUs with AVX512-BF16 (BF16
 *     operands in the attention, and in the linears too with AMX-BF16)
 *     and on the cuda backend (TF32 tensor-core GEMMs) the step-0 logits
 *     differ (the path is used) by at most MAX_BF16_SHARE of the
 *     difference the Q4_0 weights themselves make (printed); elsewhere
 *     they are identical (the flag is inert);
 *   - the same run three times through one t3_workspace (arenas kept
 *     across calls) gives the tokens and logits of the run without one, bit
 *     for bit.
 * CBX_KV16_MODEL=<dir or .gguf> runs the same on another Turbo model (the
 * real weights) in place of the synthetic one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/cpu_features.h"
#include "io/model_file.h"
#include "io/npy.h"
#include "t3/t3.h"
#include "testutil.h"

enum { STEPS = 64, MIN_MATCH = 16 };
#define MAX_DLOGIT 0.25
#define MAX_BF16_SHARE 0.25

static struct npy load(const char *name) { return test_fixture("turbo", name); }

#include "t3_greedy_run.inc"

int main(void)
{
    struct model *md = test_open_model_env("CBX_KV16_MODEL", "turbo");
    struct t3_model m, mq;
    if (!md || !test_load_t3_f32_q4(md, &m, &mq)) return test_summary();
    CHECK(m.tfmr.kv_type == TYPE_F32, "f32 weights: cache %s, want f32", dtype_name(m.tfmr.kv_type));
    CHECK(mq.tfmr.kv_type == TYPE_Q8_0, "q4_0 weights: cache %s, want q8_0", dtype_name(mq.tfmr.kv_type));
    CHECK(mq.bf16 && !m.bf16, "BF16 prefill products for q4_0 weights only (%d, %d)", mq.bf16, m.bf16);
    mq.tfmr.kv_type = TYPE_F16;

    struct npy spk = load("ve_embedding"), prompt = load("t3_cond_prompt_tokens"), text = load("text_tokens");
    struct t3_cond cond = {spk.data, prompt.data, test_numel(&prompt), 0.0f};
    struct backend *cpu = test_compute_backend(0);
    struct t3_workspace *ws = t3_workspace_create(cpu);
    CHECK(cpu && ws, "backend / workspace");

    struct run r16 = {0}, r32 = {0}, rw = {0}, rf = {0}, rq = {0};
    bool ok = cpu && ws && run(&mq, cpu, &cond, NULL, &text, NULL, &r16);
    mq.tfmr.kv_type = TYPE_F32;
    ok = ok && run(&mq, cpu, &cond, NULL, &text, NULL, &r32);
    mq.tfmr.kv_type = TYPE_F16;
    ok = ok && run(&m, cpu, &cond, NULL, &text, NULL, &rf);
    mq.tfmr.kv_type = TYPE_F32;
    mq.bf16 = false;
    ok = ok && run(&mq, cpu, &cond, NULL, &text, NULL, &rq);
    mq.bf16 = true;
    mq.tfmr.kv_type = TYPE_F16;
    if (ok) {
        double d0 = 0, d0w = 0, d0b = 0;
        for (int64_t j = 0; j < r16.V; j++) {
            double a = r16.logits[j], b = r32.logits[j], c = rf.logits[j], q = rq.logits[j];
            if (fabs(a - b) > d0) d0 = fabs(a - b);
            if (fabs(b - c) > d0w) d0w = fabs(b - c);
            if (fabs(b - q) > d0b) d0b = fabs(b - q);
        }
        printf("step 0 (after the prefill): max |dlogit| F16 vs F32 cache %.3g; BF16 vs quantised-dot prefill "
               "%.3g; Q4_0 vs F32 weights %.3g\n", d0, d0b, d0w);
        /* reduced-precision products: BF16 attention with AVX512-BF16
         * (BF16 linears too with AMX-BF16) on the cpu backend, TF32 on
         * cuda; elsewhere the flag must change nothing */
        const bool bf16 = cpu->host ? cpu_avx512_bf16_ready() : true;
        if (bf16)
            CHECK(d0b > 0 && d0b <= MAX_BF16_SHARE * d0w, "BF16 prefill moves the logits by %.3g (Q4_0: %.3g)", d0b,
                  d0w);
        else
            CHECK(d0b == 0, "no AVX512-BF16 on this CPU, yet the BF16 flag moves the logits by %.3g", d0b);
        printf("BF16 prefill products: %s\n", !bf16     ? "not available on this CPU (flag inert: checked)"
                                             : cpu->host ? (cpu_amx_ready() ? "AMX-BF16 (checked above)"
                                                                            : "AVX512-BF16 (checked above)")
                                                         : "TF32 on the GPU (checked above)");
    }
    if (ok) {
        int64_t n = r16.rows < r32.rows ? r16.rows : r32.rows, match = 0, agree = 0;
        while (match < n && r16.tok[match] == r32.tok[match]) match++;
        int64_t same = 0;
        for (int64_t i = 0; i < n; i++) same += r16.tok[i] == r32.tok[i];
        /* logits of step i depend on tokens < i: compare while they agree */
        double dmax = 0, lmax = 0;
        for (int64_t i = 0; i < n && i <= match; i++, agree++)
            for (int64_t j = 0; j < r16.V; j++) {
                double a = r16.logits[i * r16.V + j], b = r32.logits[i * r32.V + j];
                if (fabs(a - b) > dmax) dmax = fabs(a - b);
                if (fabs(b) > lmax) lmax = fabs(b);
            }
        printf("q4_0 greedy, F16 vs F32 cache: %lld of %lld tokens equal, first %lld in order; "
               "max |dlogit| %.3g over %lld steps (max |logit| %.3g)\n",
               (long long)same, (long long)n, (long long)match, dmax, (long long)agree, lmax);
        CHECK(n == STEPS, "%lld steps, want %d", (long long)n, STEPS);
        CHECK(match >= MIN_MATCH, "only the first %lld tokens match", (long long)match);
        CHECK(dmax > 0, "F16 and F32 caches give identical logits: F16 cache not used?");
        CHECK(dmax <= MAX_DLOGIT, "max |dlogit| %.3g > %.3g", dmax, MAX_DLOGIT);
    }
    /* the workspace, three times in a row: bit for bit the run without */
    for (int rep = 0; ok && rep < 3; rep++) {
        free(rw.logits);
        rw.logits = NULL;
        ok = run(&mq, cpu, &cond, NULL, &text, ws, &rw);
        if (!ok) break;
        bool same = rw.rows == r16.rows && !memcmp(rw.tok, r16.tok, sizeof(int32_t) * (size_t)rw.rows) &&
                    !memcmp(rw.logits, r16.logits, sizeof(float) * (size_t)rw.rows * (size_t)rw.V);
        CHECK(same, "workspace run %d differs from the run without a workspace", rep);
    }
    printf("workspace: 3 runs %s\n", ok ? "done" : "failed");
    free(r16.logits);
    free(r32.logits);
    free(rw.logits);
    free(rf.logits);
    free(rq.logits);
    t3_workspace_free(ws);
    io_npy_free(&spk); io_npy_free(&prompt); io_npy_free(&text);
    backend_free(cpu);
    test_free_t3_f32_q4(md, &m, &mq);
    return test_summary();
}
