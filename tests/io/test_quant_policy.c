/* test_quant_policy.c - src/io/quant_policy.c: each rule on a named case
 * (kept or narrowed, and the reason), then the policy over the shipped
 * manifests: in the Turbo and Nano T3 exactly the tensors the GPT-2 loader
 * passes to op_linear narrow (Conv1D weights as convert stores them,
 * [out, in], the speech and text heads and the speaker projection), and per file the
 * share of parameters that narrows is printed. */
#include <stdio.h>
#include <string.h>

#include "io/quant_policy.h"
#include "synth.h"
#include "testutil.h"

static void expect(const char *name, int ndim, int64_t a, int64_t b, enum dtype stored, enum dtype target,
                   enum dtype want, const char *why_part)
{
    const int64_t ne[2] = {a, b};
    const char *why = NULL;
    enum dtype got = quant_policy_type(name, ndim, ne, stored, target, &why);
    bool ok = got == want && why && strstr(why, why_part);
    printf("%-52s %-5s -> %-5s (%s) %s\n", name, dtype_name(stored), dtype_name(got), why ? why : "?",
           ok ? "PASS" : "FAIL");
    CHECK(ok, "%s: got %s (%s), want %s (%s)", name, dtype_name(got), why ? why : "?", dtype_name(want), why_part);
}

static void rules(void)
{
    const enum dtype Q = TYPE_Q8_0;
    expect("tfmr.h.0.attn.c_attn.weight", 2, 3072, 1024, TYPE_F32, Q, Q, "quantisable");
    expect("tfmr.h.0.mlp.c_proj.weight", 2, 1024, 4096, TYPE_F32, TYPE_Q4_0, TYPE_Q4_0, "quantisable");
    expect("speech_head.weight", 2, 6563, 1024, TYPE_F32, Q, Q, "quantisable");
    expect("exactly.min.weight", 2, 2048, 32, TYPE_F32, Q, Q, "quantisable");           /* 65536 */
    expect("under.min.weight", 2, 2047, 32, TYPE_F32, Q, TYPE_F32, "small");             /* 65504 */
    expect("tfmr.h.0.attn.c_attn.bias", 1, 3072, 0, TYPE_F32, Q, TYPE_F32, "not a .weight");
    expect("tfmr.h.0.ln_1.weight", 1, 1024, 0, TYPE_F32, Q, TYPE_F32, "not a 2-D");
    expect("mel2wav.conv_pre.weight", 3, 512, 80, TYPE_F32, TYPE_F16, TYPE_F32, "not a 2-D");
    expect("lstm.weight_ih_l0", 2, 1024, 64, TYPE_F32, Q, TYPE_F32, "not a .weight");
    expect("x.parametrizations.weight.original1", 2, 512, 512, TYPE_F32, Q, TYPE_F32, "not a .weight");
    expect("mel2wav.stft_window", 1, 16, 0, TYPE_F32, Q, TYPE_F32, "not a .weight");
    expect("some.layer_norm.weight", 2, 512, 512, TYPE_F32, Q, TYPE_F32, "norm");
    expect("blocks.0.ln_f.weight", 2, 512, 512, TYPE_F32, Q, TYPE_F32, "norm");
    expect("text_emb.weight", 2, 50276, 1024, TYPE_F32, Q, TYPE_F32, "embedding");
    expect("speech_emb.weight", 2, 6563, 1024, TYPE_F32, TYPE_F16, TYPE_F32, "embedding");
    expect("tfmr.wpe.weight", 2, 8196, 1024, TYPE_F32, Q, TYPE_F32, "embedding");
    expect("tfmr.embed_tokens.weight", 2, 704, 1024, TYPE_F32, Q, TYPE_F32, "embedding");
    expect("flow.input_embedding.weight", 2, 6561, 512, TYPE_F32, Q, TYPE_F32, "embedding");
    expect("text_pos_emb.emb.weight", 2, 2050, 1024, TYPE_F32, Q, TYPE_F32, "embedding");
    expect("enc.pos_enc.pe.weight", 2, 5000, 512, TYPE_F32, Q, TYPE_F32, "embedding");
    /* inner dim 80: not for blocks, fine for half types */
    expect("flow.decoder.proj.weight", 2, 1024, 80, TYPE_F32, TYPE_Q4_1, TYPE_F32, "multiple of 32");
    expect("flow.decoder.proj.weight", 2, 1024, 80, TYPE_F32, TYPE_BF16, TYPE_BF16, "quantisable");
    /* integers and f64 stay; f32 target widens eligible half weights only */
    expect("conds.t3.cond_prompt_speech_tokens", 2, 1, 65536, TYPE_I64, Q, TYPE_I64, "integer");
    expect("x.weight", 2, 1024, 1024, TYPE_F64, Q, TYPE_F64, "f64");
    expect("y.weight", 2, 1024, 1024, TYPE_F16, TYPE_F32, TYPE_F32, "quantisable");
    expect("y.bias", 1, 1024, 0, TYPE_F16, TYPE_F32, TYPE_F16, "not a .weight");
    /* unsupported targets change nothing */
    expect("y.weight", 2, 1024, 1024, TYPE_F32, TYPE_I32, TYPE_F32, "not supported");
    expect("y.weight", 2, 1024, 1024, TYPE_F32, TYPE_Q8_1, TYPE_F32, "not supported");
    CHECK(quant_policy_target_ok(TYPE_Q5_1) && !quant_policy_target_ok(TYPE_Q8_1) && !quant_policy_target_ok(TYPE_I64),
          "target list");
}

/* GPT-2 Conv1D names (convert stores them transposed, [out, in]). */
static bool is_conv1d(const char *n)
{
    return !strncmp(n, "tfmr.h.", 7) &&
           (strstr(n, ".attn.c_attn.weight") || strstr(n, ".attn.c_proj.weight") ||
            strstr(n, ".mlp.c_fc.weight") || strstr(n, ".mlp.c_proj.weight"));
}

static void manifests(void)
{
    char data[4096], err[ERR_MAX] = "";
    if (!synth_data_dir(data, sizeof data, err)) {
        CHECK(false, "data dir: %s", err);
        return;
    }
    static const char *const files[] = {"t3_turbo_v1.safetensors", "t3_nano_v1.safetensors", "t3_cfg.safetensors",
                                        "t3_mtl23ls_v2.safetensors", "s3gen_meanflow.safetensors",
                                        "s3gen.safetensors", "ve.safetensors"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        struct synth_manifest *m = NULL;
        cbx_status rc = synth_manifest_load(data, files[f], &m, err);
        CHECK(rc == CBX_OK, "manifest %s: %s", files[f], err);
        if (rc != CBX_OK) continue;
        bool gpt2 = strstr(files[f], "turbo") || strstr(files[f], "nano");
        int n_q = 0, wrong = 0;
        int64_t el_q = 0;
        for (int i = 0; i < m->n; i++) {
            const struct synth_tensor *t = &m->t[i];
            int64_t ne[TENSOR_MAX_DIMS];
            memcpy(ne, t->ne, sizeof ne);
            if (gpt2 && is_conv1d(t->name)) { /* [in, out] -> [out, in] */
                ne[0] = t->ne[1];
                ne[1] = t->ne[0];
            }
            enum dtype got = quant_policy_type(t->name, t->ndim, ne, t->type, TYPE_Q4_0, NULL);
            if (got == TYPE_Q4_0) {
                n_q++;
                el_q += synth_tensor_nelements(t);
            }
            if (gpt2) {
                /* text_head is a Linear too (unused at inference) */
                bool want = is_conv1d(t->name) || !strcmp(t->name, "speech_head.weight") ||
                            !strcmp(t->name, "text_head.weight") || !strcmp(t->name, "cond_enc.spkr_enc.weight");
                if (want != (got == TYPE_Q4_0)) {
                    if (!wrong) fprintf(stderr, "%s: %s %s\n", files[f], t->name, want ? "not narrowed" : "narrowed");
                    wrong++;
                }
            }
        }
        printf("%-28s %4d of %4d tensors, %5.1f%% of %lld parameters narrow to q4_0\n", files[f], n_q, m->n,
               100.0 * (double)el_q / (double)m->num_elements, (long long)m->num_elements);
        if (gpt2) CHECK(wrong == 0 && n_q > 0, "%s: %d tensors narrowed against the GPT-2 loader's linear set", files[f], wrong);
        synth_manifest_free(m);
    }
}

int main(void)
{
    rules();
    manifests();
    return test_summary();
}
