/* test_model_file.c - src/io/model_file.c: one API over a model directory
 * and a converted GGUF.
 * A small Turbo-layout directory is written here (a 2-layer, width-256
 * GPT-2 T3 the real loader accepts, a few S3Gen and VE tensors covering
 * the quantisation rules and a 79-byte name, conds.pt with None entries,
 * the shipped Turbo tokenizer files), then:
 *  1. convert to F32: every tensor found in its own component only, same
 *     shape (Conv1D transposed to [out, in]) and bit-identical values;
 *  2. convert to Q8_0: the expected tensors quantised, within the Q8_0
 *     bound (|x - y| <= 0.6 * amax(block) / 127: half a step plus the fp16
 *     scale rounding), the rest bit-identical;
 *  3. conds (values and None entries) and tokenizer files (bytes, and the
 *     BPE ids of a sentence) equal through both sources;
 *  4. T3 loaded from the directory, the F32 file and the Q8_0 file: the F32
 *     file gives the directory's greedy tokens and logits exactly, with its
 *     Conv1D weights used in place from the mapping; Q8_0 logits close;
 *  5. corrupt, truncated, foreign and inconsistent GGUF files and failed
 *     conversions give clear errors and leave no file behind. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/backend.h"
#include "core/cpu/linear_kernels.h"
#include "core/quant.h"
#include "io/model_file.h"
#include "io/quant_policy.h"
#include "io/safetensors.h"
#include "synth.h"
#include "io/torch_pt.h"
#include "torch_pt_write.h"
#include "t3/t3.h"
#include "text/gpt2_bpe.h"
#include "voice/conds.h"
#include "testutil.h"

#define D 256
#define L 2
#define V_TEXT 100
#define V_SPEECH 6564
#define N_PROMPT 12

static const char *const LONG_NAME =
    "flow.decoder.estimator.mid_blocks.11.0.transformer_blocks.3.attn1.to_out.0.weight";

struct spec {
    const char *name;
    enum dtype type;
    int ndim;
    int64_t ne[3];
    float lo, hi;
};

/* ---- writing the source directory -------------------------------------- */

static cbx_status write_st(const char *dir, const char *file, const struct spec *s, int n, uint64_t seed, char *err)
{
    struct tensor *t = calloc((size_t)n, sizeof *t);
    const struct tensor **tp = calloc((size_t)n, sizeof *tp);
    for (int i = 0; i < n; i++) {
        t[i] = tensor_make(s[i].type, s[i].ndim, s[i].ne, NULL, NULL);
        size_t k = (size_t)tensor_nelements(&t[i]);
        float *d = malloc(k * sizeof *d);
        fill_uniform(d, k, s[i].lo, s[i].hi, seed + (uint64_t)i);
        t[i].data = d;
        t[i].name = s[i].name;
        tp[i] = &t[i];
    }
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    cbx_status rc = io_safetensors_write(path, n, tp, 0, NULL, err);
    for (int i = 0; i < n; i++) free(t[i].data);
    free(t);
    free(tp);
    return rc;
}

static cbx_status write_t3(const char *dir, char *err)
{
    struct spec s[64];
    char names[L][12][64];
    int n = 0;
    const float w = 0.06f;
    s[n++] = (struct spec){"tfmr.wte.weight", TYPE_F32, 2, {50, D}, -w, w};
    s[n++] = (struct spec){"tfmr.wpe.weight", TYPE_F32, 2, {64, D}, -0.1f, 0.1f};
    for (int l = 0; l < L; l++) {
        static const char *const suf[12] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                            "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                            "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
        const int64_t shp[12][2] = {{D, 0}, {D, 0}, {D, 3 * D}, {3 * D, 0}, {D, D}, {D, 0},
                                    {D, 0}, {D, 0}, {D, 4 * D}, {4 * D, 0}, {4 * D, D}, {D, 0}};
        for (int j = 0; j < 12; j++) {
            snprintf(names[l][j], sizeof names[l][j], "tfmr.h.%d.%s", l, suf[j]);
            bool ln_w = strstr(suf[j], "ln_") && strstr(suf[j], "weight");
            s[n++] = (struct spec){names[l][j], TYPE_F32, shp[j][1] ? 2 : 1, {shp[j][0], shp[j][1]},
                                   ln_w ? 0.9f : -w, ln_w ? 1.1f : w};
        }
    }
    s[n++] = (struct spec){"tfmr.ln_f.weight", TYPE_F32, 1, {D}, 0.9f, 1.1f};
    s[n++] = (struct spec){"tfmr.ln_f.bias", TYPE_F32, 1, {D}, -w, w};
    s[n++] = (struct spec){"cond_enc.spkr_enc.weight", TYPE_F32, 2, {D, 256}, -w, w};
    s[n++] = (struct spec){"cond_enc.spkr_enc.bias", TYPE_F32, 1, {D}, -w, w};
    s[n++] = (struct spec){"text_emb.weight", TYPE_F32, 2, {V_TEXT, D}, -0.5f, 0.5f};
    s[n++] = (struct spec){"speech_emb.weight", TYPE_F32, 2, {V_SPEECH, D}, -0.5f, 0.5f};
    s[n++] = (struct spec){"speech_head.weight", TYPE_F32, 2, {V_SPEECH, D}, -0.2f, 0.2f};
    s[n++] = (struct spec){"speech_head.bias", TYPE_F32, 1, {V_SPEECH}, -0.1f, 0.1f};
    return write_st(dir, "t3_turbo_v1.safetensors", s, n, 1000, err);
}

static const struct spec s3gen_spec[] = {
    {"flow.input_embedding.weight", TYPE_F32, 2, {100, 512}, -1, 1},
    {"flow.encoder.encoders.0.self_attn.linear_q.weight", TYPE_F32, 2, {512, 512}, -0.1f, 0.1f},
    {"flow.encoder.encoders.0.self_attn.linear_q.bias", TYPE_F32, 1, {512}, -0.1f, 0.1f},
    {"flow.encoder.encoders.0.norm_ff.weight", TYPE_F32, 1, {512}, 0.9f, 1.1f},
    {"mel2wav.conv_pre.weight", TYPE_F32, 3, {512, 80, 7}, -0.1f, 0.1f},
    {"flow.decoder.estimator.proj_out.weight", TYPE_F32, 2, {1024, 80}, -0.1f, 0.1f},
    {"flow.decoder.estimator.mid_blocks.11.0.transformer_blocks.3.attn1.to_out.0.weight", TYPE_F32, 2, {256, 256},
     -0.1f, 0.1f},
};
static const struct spec ve_spec[] = {
    {"lstm.weight_ih_l0", TYPE_F32, 2, {1024, 40}, -0.1f, 0.1f},
    {"lstm.bias_ih_l0", TYPE_F32, 1, {1024}, -0.1f, 0.1f},
    {"proj.weight", TYPE_F32, 2, {256, 256}, -0.1f, 0.1f},
    {"proj.bias", TYPE_F32, 1, {256}, -0.1f, 0.1f},
};

static cbx_status write_conds(const char *dir, char *err)
{
    float spk[256], feat[40 * 80], emb[192], half = 0.5f;
    int64_t prompt[N_PROMPT], ptok[20], plen = 20;
    fill_uniform(spk, 256, -0.1f, 0.1f, 7);
    fill_uniform(feat, 40 * 80, -9, -3, 8);
    fill_uniform(emb, 192, -1, 1, 9);
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = (i * 997) % 6561;
    for (int i = 0; i < 20; i++) ptok[i] = (i * 131 + 5) % 6561;
    const int64_t s_spk[2] = {1, 256}, s_prompt[2] = {1, N_PROMPT}, s_one3[3] = {1, 1, 1}, s_ptok[2] = {1, 20},
                  s_one[1] = {1}, s_feat[3] = {1, 40, 80}, s_emb[2] = {1, 192};
    struct pt_value *root = pt_dict_new(false), *t3 = pt_dict_new(false), *gen = pt_dict_new(false);
    cbx_status rc = pt_dict_set(t3, "speaker_emb", pt_tensor_new(TYPE_F32, 2, s_spk, spk));
    if (!rc) rc = pt_dict_set(t3, "clap_emb", pt_none());
    if (!rc) rc = pt_dict_set(t3, "cond_prompt_speech_tokens", pt_tensor_new(TYPE_I64, 2, s_prompt, prompt));
    if (!rc) rc = pt_dict_set(t3, "cond_prompt_speech_emb", pt_none());
    if (!rc) rc = pt_dict_set(t3, "emotion_adv", pt_tensor_new(TYPE_F32, 3, s_one3, &half));
    if (!rc) rc = pt_dict_set(gen, "prompt_token", pt_tensor_new(TYPE_I64, 2, s_ptok, ptok));
    if (!rc) rc = pt_dict_set(gen, "prompt_token_len", pt_tensor_new(TYPE_I64, 1, s_one, &plen));
    if (!rc) rc = pt_dict_set(gen, "prompt_feat", pt_tensor_new(TYPE_F32, 3, s_feat, feat));
    if (!rc) rc = pt_dict_set(gen, "prompt_feat_len", pt_none());
    if (!rc) rc = pt_dict_set(gen, "embedding", pt_tensor_new(TYPE_F32, 2, s_emb, emb));
    if (!rc) rc = pt_dict_set(root, "t3", t3);
    else pt_value_free(t3);
    if (!rc) rc = pt_dict_set(root, "gen", gen);
    else pt_value_free(gen);
    char path[8192];
    snprintf(path, sizeof path, "%s/conds.pt", dir);
    if (!rc) rc = io_pt_write(path, root, err);
    pt_value_free(root);
    return rc;
}

static const char *const tok_files[] = {"vocab.json", "merges.txt", "added_tokens.json", "special_tokens_map.json",
                                        "tokenizer_config.json"};

static void write_all(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(b, 1, n, f);
        fclose(f);
    }
}

static bool make_dir(const char *dir)
{
    char err[ERR_MAX] = "", data[4096], p[4300];
    cbx_status rc = write_t3(dir, err);
    if (!rc) rc = write_st(dir, "s3gen_meanflow.safetensors", s3gen_spec, (int)(sizeof s3gen_spec / sizeof *s3gen_spec), 2000, err);
    if (!rc) rc = write_st(dir, "ve.safetensors", ve_spec, (int)(sizeof ve_spec / sizeof *ve_spec), 3000, err);
    if (!rc) rc = write_conds(dir, err);
    CHECK(rc == CBX_OK, "writing the source directory: %s", err);
    bool ok = synth_data_dir(data, sizeof data, err);
    CHECK(ok, "data dir: %s", err);
    for (size_t i = 0; ok && i < sizeof tok_files / sizeof *tok_files; i++) {
        size_t n = 0;
        snprintf(p, sizeof p, "%s/chatterbox-turbo/%s", data, tok_files[i]);
        char *b = test_read_file(p, &n);
        CHECK(b != NULL, "read %s", p);
        if (!b) return false;
        snprintf(p, sizeof p, "%s/%s", dir, tok_files[i]);
        write_all(p, b, n);
        free(b);
    }
    return rc == CBX_OK && ok;
}

/* ---- checks -------------------------------------------------------------- */

static bool is_conv1d(const char *n)
{
    return !strncmp(n, "tfmr.h.", 7) && (strstr(n, "c_attn.weight") || strstr(n, "c_proj.weight") ||
                                         strstr(n, "c_fc.weight"));
}

/* Every tensor of the directory in the converted file: own component only,
 * shape (transposed Conv1D), type (want_type: the target for the tensors
 * listed in `narrow`, else as stored), values exact or within the Q8_0
 * bound. */
static void compare_all(const struct model *dir, const struct model *gg, enum dtype target, const char *what)
{
    int missing = 0, misplaced = 0, bad_shape = 0, bad_type = 0, bad_value = 0, n_narrow = 0;
    double worst = 0; /* max over blocks of error / bound */
    for (int c = 0; c < MODEL_N_COMPONENTS; c++) {
        int n = model_count(dir, (enum model_component)c);
        if (model_count(gg, (enum model_component)c) != n) misplaced++;
        for (int i = 0; i < n; i++) {
            const struct tensor *s = model_tensor(dir, (enum model_component)c, i);
            const struct tensor *t = model_find(gg, (enum model_component)c, s->name);
            if (!t) {
                missing++;
                continue;
            }
            for (int o = 0; o < MODEL_N_COMPONENTS; o++)
                if (o != c && model_find(gg, (enum model_component)o, s->name)) misplaced++;
            bool tr = c == MODEL_T3 && is_conv1d(s->name);
            int64_t ne[TENSOR_MAX_DIMS];
            memcpy(ne, s->ne, sizeof ne);
            if (tr) {
                ne[0] = s->ne[1];
                ne[1] = s->ne[0];
            }
            bool shape_ok = t->ndim == s->ndim;
            for (int d = 0; shape_ok && d < s->ndim; d++) shape_ok = t->ne[d] == ne[d];
            if (!shape_ok) {
                bad_shape++;
                continue;
            }
            enum dtype want = quant_policy_type(s->name, s->ndim, ne, s->type, target, NULL);
            if (t->type != want) {
                if (!bad_type) fprintf(stderr, "%s: %s is %s, want %s\n", what, s->name, dtype_name(t->type), dtype_name(want));
                bad_type++;
                continue;
            }
            n_narrow += want != s->type;
            int64_t inner = s->ndim ? ne[s->ndim - 1] : 1, rows = tensor_nelements(s) / (inner ? inner : 1);
            float *row = malloc(sizeof(float) * (size_t)(inner ? inner : 1));
            bool same = true;
            for (int64_t r = 0; r < rows; r++) {
                dequantize_row(t->type, (const char *)t->data + (size_t)r * dtype_row_size(t->type, inner), row, inner);
                for (int64_t j0 = 0; j0 < inner; j0 += QK) {
                    int64_t j1 = j0 + QK < inner ? j0 + QK : inner;
                    float amax = 0, err = 0;
                    for (int64_t j = j0; j < j1; j++) {
                        /* source element (r, j) of the stored orientation */
                        const float *src = s->data;
                        float x = tr ? src[j * rows + r] : src[r * inner + j];
                        amax = fmaxf(amax, fabsf(x));
                        err = fmaxf(err, fabsf(x - row[j]));
                    }
                    if (t->type == s->type) {
                        same = same && err == 0;
                    } else if (amax > 0) {
                        double ratio = err / (0.6 * amax / 127);
                        if (ratio > worst) worst = ratio;
                    }
                }
            }
            free(row);
            if (!same) bad_value++;
        }
    }
    printf("%-8s %d narrowed; missing %d, misplaced %d, shape %d, type %d, values %d; worst q8_0 error / bound %.3f\n",
           what, n_narrow, missing, misplaced, bad_shape, bad_type, bad_value, worst);
    CHECK(!missing && !misplaced && !bad_shape && !bad_type && !bad_value, "%s: tensors differ", what);
    CHECK(worst <= 1.0, "%s: q8_0 error %.3f x the bound", what, worst);
    /* t3: 4 Conv1D per layer, spkr_enc, speech_head; s3gen: linear_q and
     * the long-named to_out; ve: proj */
    const int want_narrow = target == TYPE_F32 ? 0 : 4 * L + 2 + 2 + 1;
    CHECK(n_narrow == want_narrow, "%s: %d tensors narrowed, want %d", what, n_narrow, want_narrow);
}

/* Specific expectations that do not go through the policy code. */
static void expect_types(const struct model *gg)
{
    struct { enum model_component c; const char *name; enum dtype t; } want[] = {
        {MODEL_T3, "tfmr.h.1.attn.c_attn.weight", TYPE_Q8_0},
        {MODEL_T3, "tfmr.h.0.mlp.c_proj.weight", TYPE_Q8_0},
        {MODEL_T3, "speech_head.weight", TYPE_Q8_0},
        {MODEL_T3, "speech_head.bias", TYPE_F32},
        {MODEL_T3, "text_emb.weight", TYPE_F32},
        {MODEL_T3, "tfmr.wpe.weight", TYPE_F32},
        {MODEL_T3, "tfmr.h.0.ln_1.weight", TYPE_F32},
        {MODEL_S3GEN, "flow.input_embedding.weight", TYPE_F32},
        {MODEL_S3GEN, "mel2wav.conv_pre.weight", TYPE_F32},
        {MODEL_S3GEN, "flow.decoder.estimator.proj_out.weight", TYPE_F32},
        {MODEL_S3GEN, "flow.encoder.encoders.0.self_attn.linear_q.weight", TYPE_Q8_0},
        {MODEL_S3GEN, LONG_NAME, TYPE_Q8_0},
        {MODEL_VE, "lstm.weight_ih_l0", TYPE_F32},
        {MODEL_VE, "proj.weight", TYPE_Q8_0},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const struct tensor *t = model_find(gg, want[i].c, want[i].name);
        if (!t || t->type != want[i].t) {
            fprintf(stderr, "%s: %s, want %s\n", want[i].name, t ? dtype_name(t->type) : "missing", dtype_name(want[i].t));
            bad++;
        }
    }
    CHECK(bad == 0, "q8_0 file: %d tensors of unexpected type", bad);
}

static void compare_conds(const struct model *dir, const struct model *gg)
{
    struct conds a, b;
    char err[ERR_MAX] = "";
    cbx_status ra = conds_from_model(dir, &a, err);
    CHECK(ra == CBX_OK, "conds from dir: %s", err);
    cbx_status rb = conds_from_model(gg, &b, err);
    CHECK(rb == CBX_OK, "conds from gguf: %s", err);
    if (ra || rb) return;
    bool same = a.n_speaker == 256 && a.n_speaker == b.n_speaker && !memcmp(a.speaker_emb, b.speaker_emb, 256 * 4) &&
                a.n_cond_prompt == N_PROMPT && a.n_cond_prompt == b.n_cond_prompt &&
                !memcmp(a.cond_prompt_tokens, b.cond_prompt_tokens, N_PROMPT * 4) && a.emotion_adv == 0.5f &&
                b.emotion_adv == 0.5f && b.has_emotion_adv && a.n_prompt_token == 20 &&
                b.n_prompt_token == 20 && !memcmp(a.prompt_token, b.prompt_token, 20 * 4) && b.n_prompt_feat == 40 &&
                !memcmp(a.prompt_feat, b.prompt_feat, 40 * 80 * 4) && b.n_embedding == 192 &&
                !memcmp(a.embedding, b.embedding, 192 * 4);
    CHECK(same, "conds: directory and GGUF give the same voice");
    bool none_a = false, none_b = false, none_c = true;
    model_cond(dir, "t3.clap_emb", &none_a);
    model_cond(gg, "t3.clap_emb", &none_b);
    const struct tensor *pl = model_cond(gg, "gen.prompt_token_len", &none_c);
    CHECK(none_a && none_b && pl && !none_c && pl->type == TYPE_I64 && ((const int64_t *)pl->data)[0] == 20 &&
              !model_cond(gg, "t3.no_such_entry", NULL),
          "conds: None entries and prompt_token_len kept");
    conds_free(&a);
    conds_free(&b);
}

static void compare_tokenizer(const struct model *dir, const struct model *gg)
{
    char err[ERR_MAX] = "";
    int bad = 0;
    char *t[2][4] = {{NULL}};
    for (size_t i = 0; i < sizeof tok_files / sizeof *tok_files; i++) {
        char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        cbx_status ra = model_text_file(dir, tok_files[i], &a, &na, err);
        cbx_status rb = model_text_file(gg, tok_files[i], &b, &nb, err);
        if (ra || rb || na != nb || na == 0 || memcmp(a, b, na)) {
            fprintf(stderr, "tokenizer file %s differs (%zu vs %zu bytes)\n", tok_files[i], na, nb);
            bad++;
        }
        if (i < 3) {
            t[0][i] = a;
            t[1][i] = b;
        } else if (i == 4) {
            t[0][3] = a;
            t[1][3] = b;
        } else {
            free(a);
            free(b);
        }
    }
    CHECK(bad == 0, "tokenizer files: same bytes from both sources");
    char *x = (char *)1;
    cbx_status rc = model_text_file(gg, "tokenizer.json", &x, NULL, err);
    CHECK(rc == CBX_ERR_NOT_FOUND && x == NULL && strstr(err, "tokenizer.tokenizer_json"),
          "absent tokenizer file: %s", err);
    char key[64];
    CHECK(model_text_file_key("tokenizer_config.json", key, sizeof key) && !strcmp(key, "tokenizer.config_json") &&
              model_text_file_key("merges.txt", key, sizeof key) && !strcmp(key, "tokenizer.merges_txt"),
          "tokenizer keys");

    struct gpt2_bpe *ta = NULL, *tb = NULL;
    cbx_status ra = gpt2_bpe_load_dir(model_path(dir), &ta, err);
    cbx_status rb = ra ? ra : gpt2_bpe_load_mem(t[1][0], t[1][1], t[1][2], t[1][3], &tb, err);
    CHECK(ra == CBX_OK && rb == CBX_OK, "tokenizers: %s", err);
    if (ta && tb) {
        const char *text = "Hello there [chuckle], it's 3:45 - isn't that nice? Ünïcödé too.";
        int32_t *ia = NULL, *ib = NULL;
        int64_t na = 0, nb = 0;
        gpt2_bpe_encode(ta, text, &ia, &na, err);
        gpt2_bpe_encode(tb, text, &ib, &nb, err);
        CHECK(na > 5 && na == nb && !memcmp(ia, ib, (size_t)na * 4) && gpt2_bpe_vocab_size(ta) == gpt2_bpe_vocab_size(tb) &&
                  gpt2_bpe_max_length(ta) == gpt2_bpe_max_length(tb),
              "tokenizer from GGUF strings encodes as the directory's (%lld ids)", (long long)na);
        free(ia);
        free(ib);
    }
    gpt2_bpe_free(ta);
    gpt2_bpe_free(tb);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 4; i++) free(t[s][i]);
}

struct run {
    int32_t *tok;
    int64_t n;
    float *logits; /* [steps, V] */
    int64_t rows;
};

static int record(void *user, int step, int32_t token, const float *logits, int n_rows, int64_t V)
{
    (void)n_rows;
    (void)token;
    struct run *r = user;
    if (step < 16) {
        memcpy(r->logits + (size_t)step * (size_t)V, logits, sizeof(float) * (size_t)V);
        r->rows = step + 1;
    }
    return 0;
}

static bool run_t3(const struct model *m, struct backend *be, struct run *r, struct t3_model *t3)
{
    char err[ERR_MAX] = "";
    struct weights w = model_weights(m, MODEL_T3);
    cbx_status rc = t3_load(t3, &w, test_backend(), TYPE_F32, err);
    CHECK(rc == CBX_OK, "t3_load_gpt2 from %s: %s", model_path(m), err);
    if (rc) return false;
    struct conds c;
    if ((rc = conds_from_model(m, &c, err)) != CBX_OK) return false;
    struct t3_cond cond = {c.speaker_emb, c.cond_prompt_tokens, c.n_cond_prompt, c.emotion_adv};
    const int32_t text[5] = {3, 14, 15, 92, 65};
    struct t3_gen_params p = t3_gen_default_params(NULL);
    p.host_logits = true; /* record() keeps them */
    p.s.top_k = 1;
    p.max_gen_len = 15;
    memset(r, 0, sizeof *r);
    r->logits = calloc((size_t)16 * V_SPEECH, sizeof(float));
    rc = t3_inference(t3, be, &cond, text, 5, &p, record, r, &r->tok, &r->n, err);
    CHECK(rc == CBX_OK, "t3 greedy from %s: %s", model_path(m), err);
    conds_free(&c);
    return rc == CBX_OK;
}

static void compare_t3(const struct model *dir, const struct model *f32, const struct model *q8)
{
    struct backend *be = backend_cpu_create(1);
    struct t3_model a, b, q;
    struct run ra, rb, rq;
    bool ok = run_t3(dir, be, &ra, &a) && run_t3(f32, be, &rb, &b) && run_t3(q8, be, &rq, &q);
    if (ok) {
        /* in place: the loaded Conv1D weights and head are the mapping's
         * (q4_0 / q8_0 ones: or their copy packed for the cpu GEMV, the
         * mapping's pages then dropped, see t3.c pack_weights) */
        const struct tensor *ca = model_find(f32, MODEL_T3, "tfmr.h.1.attn.c_attn.weight");
        const struct tensor *hq = model_find(q8, MODEL_T3, "speech_head.weight");
        const struct tensor *fq = model_find(q8, MODEL_T3, "tfmr.h.0.mlp.c_fc.weight");
        const struct tensor *hw = q.speech_head_w, *fw = q.tfmr.gpt2[0].c_fc_w;
        CHECK(b.tfmr.gpt2[1].c_attn_w->data == ca->data && (hw->data == hq->data || hw->extra) &&
                  (fw->data == fq->data || fw->extra) && fw->type == TYPE_Q8_0,
              "GGUF Conv1D weights and head used in place or packed (no other copy, q8_0 kept)");
        CHECK(a.tfmr.gpt2[1].c_attn_w->data != model_find(dir, MODEL_T3, "tfmr.h.1.attn.c_attn.weight")->data,
              "directory Conv1D weights transposed into owned memory");
        bool same_tok = ra.n == rb.n && !memcmp(ra.tok, rb.tok, (size_t)ra.n * 4);
        printf("t3 greedy: dir %lld tokens, f32 gguf %lld, q8_0 gguf %lld\n", (long long)ra.n, (long long)rb.n,
               (long long)rq.n);
        CHECK(same_tok && ra.n > 0, "F32 GGUF gives the directory's greedy tokens");
        CHECK(ra.rows == rb.rows && ra.rows > 0, "same number of logit rows");
        check_close("t3 logits: f32 gguf vs directory (exact)", rb.logits, ra.logits, (size_t)(ra.rows * V_SPEECH), 0, 0);
        check_close("t3 logits step 0: q8_0 gguf vs directory", rq.logits, ra.logits, V_SPEECH, 0, 2e-2);
    }
    if (ok) {
        free(ra.tok); free(rb.tok); free(rq.tok);
        free(ra.logits); free(rb.logits); free(rq.logits);
        t3_free(&a); t3_free(&b); t3_free(&q);
    }
    backend_cpu_free(be);
}

/* ---- errors -------------------------------------------------------------- */

static void expect_open_error(const char *path, cbx_status want, const char *needle, const char *what)
{
    struct model *m = (struct model *)1;
    char err[ERR_MAX] = "";
    cbx_status rc = model_open(path, &m, err);
    printf("%-36s -> %s\n", what, err);
    CHECK(rc == want && m == NULL && strstr(err, needle) && strstr(err, path), "%s: rc %d (want %d): %s", what,
          (int)rc, (int)want, err);
    if (rc == CBX_OK) model_close(m);
}

/* A small GGUF with the given metadata tweak. */
static void write_meta_gguf(const char *path, const char *arch, uint32_t version, uint32_t t3_count)
{
    char err[ERR_MAX];
    struct io_gguf_writer *w = NULL;
    io_gguf_writer_create(&w, err);
    io_gguf_writer_set_str(w, "general.architecture", arch, err);
    io_gguf_writer_set_u32(w, "chatterbox.format_version", version, err);
    io_gguf_writer_set_str(w, "chatterbox.variant", "turbo", err);
    io_gguf_writer_set_u32(w, "chatterbox.t3.tensor_count", t3_count, err);
    io_gguf_writer_set_u32(w, "chatterbox.s3gen.tensor_count", 0, err);
    io_gguf_writer_set_u32(w, "chatterbox.ve.tensor_count", 0, err);
    io_gguf_writer_set_u32(w, "chatterbox.conds.tensor_count", 0, err);
    float x[2] = {1, 2};
    const int64_t ne[1] = {2};
    io_gguf_writer_add_tensor(w, "speech_head.bias", TYPE_F32, 1, ne, x, err);
    if (io_gguf_writer_write(w, path, err) != CBX_OK) fprintf(stderr, "%s\n", err);
    io_gguf_writer_free(w);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static void errors(const char *tmp, const char *src, const char *f32)
{
    char p[4400], q[8192], err[ERR_MAX] = "";
    size_t n = 0;
    char *bytes = test_read_file(f32, &n);
    snprintf(p, sizeof p, "%s/truncated-head.gguf", tmp);
    write_all(p, bytes, 4000);
    expect_open_error(p, CBX_ERR_FORMAT, "beyond the end of the file", "GGUF cut inside the metadata");
    snprintf(p, sizeof p, "%s/truncated-data.gguf", tmp);
    write_all(p, bytes, n - 4096);
    expect_open_error(p, CBX_ERR_FORMAT, "past the end of the file", "GGUF cut inside the tensor data");
    bytes[1] = 'X';
    snprintf(p, sizeof p, "%s/bad-magic.gguf", tmp);
    write_all(p, bytes, n);
    expect_open_error(p, CBX_ERR_FORMAT, "magic", "bad magic");
    free(bytes);
    snprintf(p, sizeof p, "%s/llama.gguf", tmp);
    write_meta_gguf(p, "llama", 1, 1);
    expect_open_error(p, CBX_ERR_FORMAT, "not 'chatterbox'", "foreign architecture");
    snprintf(p, sizeof p, "%s/future.gguf", tmp);
    write_meta_gguf(p, "chatterbox", 99, 1);
    expect_open_error(p, CBX_ERR_UNSUPPORTED, "format_version 99", "newer format version");
    snprintf(p, sizeof p, "%s/counts.gguf", tmp);
    write_meta_gguf(p, "chatterbox", 1, 2);
    expect_open_error(p, CBX_ERR_FORMAT, "add up to 2", "inconsistent tensor counts");
    snprintf(p, sizeof p, "%s/nonexistent.gguf", tmp);
    expect_open_error(p, CBX_ERR_IO, "No such file", "missing file");

    struct model *m = (struct model *)1;
    cbx_status rc = model_open_as(f32, MODEL_NANO, &m, err);
    CHECK(rc == CBX_ERR_INVALID_ARG && !m && strstr(err, "turbo") && strstr(err, "nano"),
          "GGUF opened as another variant: %s", err);

    /* failed conversions leave nothing behind */
    struct model_convert_params prm = {TYPE_Q8_0, -1, NULL, NULL};
    snprintf(p, sizeof p, "%s/out", tmp);
    mkdir(p, 0777);
    snprintf(q, sizeof q, "%s/out/x.gguf", tmp);
    rc = model_convert(f32, q, &prm, err);
    CHECK(rc == CBX_ERR_INVALID_ARG && strstr(err, "directory"), "convert from a file: %s", err);
    snprintf(q, sizeof q, "%s/no/such/dir/x.gguf", tmp);
    rc = model_convert(src, q, &prm, err);
    CHECK(rc == CBX_ERR_IO && strstr(err, "x.gguf"), "convert into a missing directory: %s", err);
    prm.type = TYPE_I32;
    snprintf(q, sizeof q, "%s/out/x.gguf", tmp);
    rc = model_convert(src, q, &prm, err);
    CHECK(rc == CBX_ERR_INVALID_ARG && strstr(err, "i32"), "convert to i32: %s", err);
    /* a BOOL tensor in ve.safetensors: refused while planning */
    snprintf(p, sizeof p, "%s/bad-src", tmp);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", src, p);
    CHECK(system(cmd) == 0, "copy source");
    uint8_t flag[4] = {1, 0, 1, 1};
    const int64_t ne[1] = {4};
    struct tensor bt = tensor_make(TYPE_BOOL, 1, ne, flag, NULL);
    bt.name = "mask";
    const struct tensor *btp = &bt;
    snprintf(q, sizeof q, "%s/ve.safetensors", p);
    rc = io_safetensors_write(q, 1, &btp, 0, NULL, err);
    prm.type = TYPE_Q8_0;
    snprintf(q, sizeof q, "%s/out/x.gguf", tmp);
    rc = model_convert(p, q, &prm, err);
    CHECK(rc == CBX_ERR_UNSUPPORTED && strstr(err, "mask") && strstr(err, "bool"), "convert with a bool tensor: %s", err);
    snprintf(p, sizeof p, "%s/out", tmp);
    CHECK(count_entries(p) == 0, "no file left after failed conversions (%d entries)", count_entries(p));
}

int main(void)
{
    char err[ERR_MAX] = "", src[4200], f32[4200], q8[4200];
    const char *tmp = test_tmpdir("model_file");
    snprintf(src, sizeof src, "%s/turbo", tmp);
    mkdir(src, 0777);
    if (!make_dir(src)) return test_summary();
    snprintf(f32, sizeof f32, "%s/turbo-f32.gguf", tmp);
    snprintf(q8, sizeof q8, "%s/turbo-q8_0.gguf", tmp);

    struct model_convert_params prm = {TYPE_F32, -1, NULL, NULL};
    cbx_status rc = model_convert(src, f32, &prm, err);
    CHECK(rc == CBX_OK, "convert f32: %s", err);
    prm.type = TYPE_Q8_0;
    if (!rc) rc = model_convert(src, q8, &prm, err);
    CHECK(rc == CBX_OK, "convert q8_0: %s", err);
    struct model *dir = NULL, *gf = NULL, *gq = NULL;
    if (!rc) rc = model_open(src, &dir, err);
    if (!rc) rc = model_open(f32, &gf, err);
    if (!rc) rc = model_open(q8, &gq, err);
    CHECK(rc == CBX_OK, "open: %s", err);
    if (rc) return test_summary();
    CHECK(!model_is_gguf(dir) && model_is_gguf(gf) && model_get_dir(dir) && model_get_gguf(gq) &&
              model_get_variant(dir) == MODEL_TURBO && model_get_variant(gf) == MODEL_TURBO &&
              model_get_variant(gq) == MODEL_TURBO,
          "kinds and variants");
    const char *s = NULL;
    CHECK(io_gguf_get_str(model_get_gguf(gq), "chatterbox.quantization", &s, NULL, err) == CBX_OK && !strcmp(s, "q8_0") &&
              io_gguf_get_str(model_get_gguf(gq), "chatterbox.t3.conv1d_layout", &s, NULL, err) == CBX_OK &&
              !strcmp(s, "out_in") && io_gguf_find_tensor(model_get_gguf(gq), LONG_NAME) && strlen(LONG_NAME) >= 64,
          "metadata and a name of %zu bytes", strlen(LONG_NAME));
    uint32_t nl = 0;
    CHECK(io_gguf_get_u32(model_get_gguf(gf), "chatterbox.t3.n_layer", &nl, err) == CBX_OK && nl == L, "n_layer %u", nl);

    compare_all(dir, gf, TYPE_F32, "f32");
    compare_all(dir, gq, TYPE_Q8_0, "q8_0");
    expect_types(gq);
    compare_conds(dir, gf);
    compare_conds(dir, gq);
    compare_tokenizer(dir, gf);
    compare_t3(dir, gf, gq);
    errors(tmp, src, f32);

    model_close(dir);
    model_close(gf);
    model_close(gq);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (!test_failures && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmp);
    return test_summary();
}
