/* test_variant.c - src/io/variant.c: every row complete and consistent with
 * itself and with the others (files, download lists, tokenizer, T3 policy,
 * sampler defaults, post-filter, solver, voice rules), the values upstream
 * sets (spec/overview.md §3-§7, t3.md §2, §7-§9), lookup by name, alias and
 * T3 file, unknown names refused, and the speech-token post-filter. */
#include <stdio.h>
#include <string.h>

#include "io/variant.h"
#include "testutil.h"

static bool in_list(const char *const *list, const char *s)
{
    for (int i = 0; list && list[i]; i++)
        if (!strcmp(list[i], s)) return true;
    return false;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static int n_items(const char *const *list)
{
    int n = 0;
    while (list && list[n]) n++;
    return n;
}

static void check_row(const struct variant *v)
{
    const char *n = v->name;
    /* names and files */
    CHECK(n && *n && v->description && *v->description, "%s: name and description", n);
    for (int c = 0; c < MODEL_N_COMPONENTS; c++)
        CHECK(v->file[c] && (ends_with(v->file[c], ".safetensors") || ends_with(v->file[c], ".pt")),
              "%s: weight file %d is %s", n, c, v->file[c] ? v->file[c] : "(null)");
    CHECK(v->conds_file && !strcmp(v->conds_file, "conds.pt"), "%s: built-in voice %s", n, v->conds_file);
    CHECK(n_items(v->conds_keys) >= 1 && n_items(v->conds_keys) <= VARIANT_MAX_CONDS_KEYS &&
              in_list(v->conds_keys, "t3.speaker_emb") && in_list(v->conds_keys, "t3.cond_prompt_speech_tokens") &&
              in_list(v->conds_keys, "gen.prompt_feat") && in_list(v->conds_keys, "gen.embedding"),
          "%s: %d built-in voice keys", n, n_items(v->conds_keys));
    CHECK(v->hf_repo && !strncmp(v->hf_repo, "ResembleAI/", 11) && v->hf_cache_subdir && *v->hf_cache_subdir,
          "%s: repo %s, cache dir %s", n, v->hf_repo, v->hf_cache_subdir);

    /* the download brings every file a loader needs, each once */
    for (int c = 0; c < MODEL_N_COMPONENTS; c++)
        CHECK(in_list(v->download_required, v->file[c]), "%s: download requires %s", n, v->file[c]);
    CHECK(in_list(v->download_required, v->conds_file), "%s: download requires %s", n, v->conds_file);
    for (int i = 0; v->download_optional[i]; i++)
        CHECK(!in_list(v->download_required, v->download_optional[i]), "%s: %s both required and optional", n,
              v->download_optional[i]);
    CHECK(n_items(v->download_required) <= VARIANT_MAX_DOWNLOAD_FILES &&
              n_items(v->download_optional) <= VARIANT_MAX_DOWNLOAD_FILES,
          "%s: download lists fit", n);
    CHECK(n_items(v->tokenizer_files) >= 1 && n_items(v->tokenizer_files) <= VARIANT_MAX_TOKENIZER_FILES,
          "%s: %d tokenizer files", n, n_items(v->tokenizer_files));
    for (int i = 0; v->tokenizer_files[i]; i++)
        CHECK(in_list(v->download_required, v->tokenizer_files[i]) ||
                  in_list(v->download_optional, v->tokenizer_files[i]),
              "%s: tokenizer file %s is downloaded", n, v->tokenizer_files[i]);
    /* the grapheme front ends' files are all in the repository and all
     * read (the multilingual one reads Cangjie5_TC.json for zh): a
     * download without one of them is not a usable model */
    for (int i = 0; v->tokenizer == VARIANT_TOK_GRAPHEME && v->tokenizer_files[i]; i++)
        CHECK(in_list(v->download_required, v->tokenizer_files[i]), "%s: download requires %s", n,
              v->tokenizer_files[i]);

    /* front end and T3 policy follow the backbone */
    const bool gpt2 = v->backbone == VARIANT_T3_GPT2;
    CHECK(gpt2 == (v->tokenizer == VARIANT_TOK_GPT2_BPE), "%s: GPT-2 T3 iff GPT-2 BPE", n);
    CHECK(gpt2 == (v->text_rules == VARIANT_TEXT_TURBO), "%s: GPT-2 T3 iff Turbo punc_norm", n);
    /* long text: a GPT-2 token covers more speech than a grapheme token */
    CHECK(v->segment.max_tokens == (gpt2 ? 60 : 150) && v->segment.min_speech_per_text == (gpt2 ? 2.0 : 0.5),
          "%s: segment budget %d, early-stop floor %.2f", n, v->segment.max_tokens, v->segment.min_speech_per_text);
    CHECK(v->text_vocab == (gpt2 ? 50276 : v->languages ? 2454 : 704), "%s: text vocabulary %d", n, v->text_vocab);
    CHECK(gpt2 ? v->start_text == -1 && v->stop_text == -1 : v->start_text == 255 && v->stop_text == 0,
          "%s: text start/stop %d/%d", n, v->start_text, v->stop_text);
    CHECK(v->speech_dict_size == (gpt2 ? 6563 : 8194), "%s: speech_tokens_dict_size %d", n, v->speech_dict_size);
    static const enum variant_processor turbo_order[VARIANT_MAX_PROCESSORS + 1] = {VARIANT_PROC_TEMPERATURE, VARIANT_PROC_TOP_K,
                                                         VARIANT_PROC_TOP_P, VARIANT_PROC_REPETITION,
                                                         VARIANT_PROC_END};
    static const enum variant_processor llama_order[VARIANT_MAX_PROCESSORS + 1] = {VARIANT_PROC_CFG, VARIANT_PROC_REPETITION,
                                                         VARIANT_PROC_TEMPERATURE, VARIANT_PROC_MIN_P,
                                                         VARIANT_PROC_TOP_P, VARIANT_PROC_END};
    const enum variant_processor *want = gpt2 ? turbo_order : llama_order;
    bool same = true, has_cfg = false;
    for (int i = 0; i <= VARIANT_MAX_PROCESSORS; i++) {
        same = same && v->processors[i] == want[i];
        has_cfg = has_cfg || v->processors[i] == VARIANT_PROC_CFG;
        if (want[i] == VARIANT_PROC_END) break;
    }
    CHECK(same, "%s: processor order (t3.md §8)", n);
    CHECK(v->cfg == !gpt2 && has_cfg == v->cfg, "%s: CFG %d, CFG processor %d", n, v->cfg, has_cfg);
    CHECK(v->stop_on_first == !gpt2 && v->keep_stop == !gpt2, "%s: stop rule", n);
    CHECK(!v->keep_stop || v->drop_invalid, "%s: a kept stop token is dropped later", n);

    /* sampler defaults (overview.md §4) */
    const struct variant_sampling *s = &v->sampling;
    CHECK(s->temperature == 0.8 && s->repetition_penalty == 1.2, "%s: temperature %g, repetition %g", n,
          s->temperature, s->repetition_penalty);
    if (gpt2)
        CHECK(s->top_k == 1000 && s->top_p == 0.95 && s->min_p == 0 && s->cfg_weight == 0 && s->exaggeration == 0 &&
                  s->max_tokens == 1001,
              "%s: Turbo defaults (top_k %d, top_p %g, min_p %g, cfg %g, exaggeration %g, max %d)", n, s->top_k,
              s->top_p, s->min_p, s->cfg_weight, s->exaggeration, s->max_tokens);
    else
        CHECK(s->top_k == 0 && s->top_p == 1.0 && s->min_p == 0.05 && s->cfg_weight == 0.5 && s->exaggeration == 0.5 &&
                  s->max_tokens == 1000,
              "%s: Llama defaults (top_k %d, top_p %g, min_p %g, cfg %g, exaggeration %g, max %d)", n, s->top_k,
              s->top_p, s->min_p, s->cfg_weight, s->exaggeration, s->max_tokens);

    /* speech tokens -> audio (overview.md §7) */
    CHECK(v->keep_below == VARIANT_SPEECH_VOCAB, "%s: keep ids < %d", n, v->keep_below);
    CHECK(v->drop_invalid == !gpt2, "%s: drop_invalid_tokens %d", n, v->drop_invalid);
    CHECK(v->n_silence == (gpt2 ? 3 : 0), "%s: %d silence tokens", n, v->n_silence);
    for (int i = 0; i < v->n_silence; i++)
        CHECK(v->silence[i] == 4299, "%s: silence token %d is %d (S3GEN_SIL 4299)", n, i, v->silence[i]);
    CHECK(v->trim_last_token == (v->languages != NULL), "%s: trim the last token's audio %d", n,
          v->trim_last_token);
    const bool meanflow = v->solver == VARIANT_CFM_MEANFLOW;
    CHECK(meanflow == !strcmp(v->file[MODEL_S3GEN], "s3gen_meanflow.safetensors"), "%s: solver follows %s", n,
          v->file[MODEL_S3GEN]);
    CHECK(meanflow ? v->cfm_steps == 2 && v->cfm_cfg_rate == 0 : v->cfm_steps == 10 && v->cfm_cfg_rate == 0.7,
          "%s: %d CFM steps, CFG rate %g", n, v->cfm_steps, v->cfm_cfg_rate);
    CHECK(meanflow == gpt2, "%s: meanflow S3Gen iff GPT-2 T3", n);

    /* voice rules (overview.md §5) */
    const struct variant_voice *vr = &v->voice;
    CHECK(gpt2 ? vr->enc_cond_seconds == 15 && vr->prompt_len == 375 && vr->min_seconds == 5.0 && vr->min_exclusive &&
                     vr->loudness && vr->target_lufs == -27.0
               : vr->enc_cond_seconds == 6 && vr->prompt_len == 150 && vr->min_seconds > 0 && !vr->loudness,
          "%s: voice rules %d s, %lld tokens, min %g s, loudness %d at %g", n, vr->enc_cond_seconds,
          (long long)vr->prompt_len, vr->min_seconds, vr->loudness, vr->target_lufs);

    /* languages */
    if (v->languages) {
        CHECK(n_items(v->languages) == VARIANT_N_LANGUAGES, "%s: %d languages", n, n_items(v->languages));
        CHECK(variant_has_language(v, "en") && variant_has_language(v, "ZH") && !variant_has_language(v, "xx") &&
                  !variant_has_language(v, ""),
              "%s: language lookup", n);
    } else {
        CHECK(!variant_has_language(v, "en"), "%s: no language ids", n);
    }
}

static void check_table(void)
{
    const struct variant *all[MODEL_N_VARIANTS];
    for (int i = 0; i < MODEL_N_VARIANTS; i++) {
        all[i] = variant_get((enum model_variant)i);
        CHECK(all[i] && all[i]->id == (enum model_variant)i, "row %d present with its id", i);
        if (!all[i]) return;
        check_row(all[i]);
        CHECK(model_variant_info((enum model_variant)i) == all[i], "%s: the former name reads the same row",
              all[i]->name);
        CHECK(strstr(variant_names(), all[i]->name) != NULL, "variant_names() lists %s", all[i]->name);
    }
    CHECK(variant_get((enum model_variant)-1) == NULL && variant_get(MODEL_N_VARIANTS) == NULL,
          "out-of-range ids give NULL");

    /* names, aliases, T3 files and cache directories are unique */
    for (int i = 0; i < MODEL_N_VARIANTS; i++)
        for (int j = i + 1; j < MODEL_N_VARIANTS; j++) {
            const struct variant *a = all[i], *b = all[j];
            CHECK(strcmp(a->name, b->name) && strcmp(a->file[MODEL_T3], b->file[MODEL_T3]) &&
                      strcmp(a->hf_cache_subdir, b->hf_cache_subdir),
                  "%s and %s: distinct name, T3 file and cache directory", a->name, b->name);
            for (int k = 0; a->aliases[k]; k++)
                CHECK(strcmp(a->aliases[k], b->name) && !in_list(b->aliases, a->aliases[k]),
                      "alias %s of %s is not also %s's", a->aliases[k], a->name, b->name);
        }

    /* v2 and v3 differ only in the T3 weight file (overview.md §2) */
    const struct variant *v2 = all[MODEL_MTL_V2], *v3 = all[MODEL_MTL_V3];
    CHECK(!strcmp(v2->file[MODEL_S3GEN], v3->file[MODEL_S3GEN]) && !strcmp(v2->file[MODEL_VE], v3->file[MODEL_VE]) &&
              !strcmp(v2->hf_repo, v3->hf_repo) && v2->languages == v3->languages,
          "mtl-v2 and mtl-v3 share everything but T3");
}

static void check_lookup(void)
{
    static const struct {
        const char *name;
        int want; /* -1: refused */
    } cases[] = {
        {"turbo", MODEL_TURBO},   {"nano", MODEL_NANO},       {"english", MODEL_ENGLISH},
        {"mtl-v2", MODEL_MTL_V2}, {"multilingual", MODEL_MTL_V2}, {"mtl", MODEL_MTL_V2},
        {"mtl-v3", MODEL_MTL_V3}, {"chatterbox-turbo", MODEL_TURBO},
        {"", -1}, {"Turbo", -1}, {"bogus", -1}, {"turbo ", -1}, {"t3_cfg.safetensors", -1}, {"all", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct variant *v = variant_by_name(cases[i].name);
        CHECK(cases[i].want < 0 ? v == NULL : v && v->id == (enum model_variant)cases[i].want,
              "by name '%s': %s", cases[i].name, v ? v->name : "refused");
    }
    CHECK(variant_by_name(NULL) == NULL && variant_by_t3_file(NULL) == NULL, "NULL names refused");
    for (int i = 0; i < MODEL_N_VARIANTS; i++) {
        const struct variant *v = variant_get((enum model_variant)i);
        CHECK(variant_by_t3_file(v->file[MODEL_T3]) == v, "by T3 file %s", v->file[MODEL_T3]);
        CHECK(variant_by_t3_file(v->file[MODEL_S3GEN]) == NULL, "%s is no T3 file", v->file[MODEL_S3GEN]);
    }
}

static bool same(const int32_t *a, int64_t na, const int32_t *b, int64_t nb)
{
    return na == nb && (na == 0 || !memcmp(a, b, sizeof *a * (size_t)na));
}

static void check_filter(void)
{
    const struct variant *turbo = variant_get(MODEL_TURBO), *en = variant_get(MODEL_ENGLISH),
                         *mtl = variant_get(MODEL_MTL_V2);
    /* Turbo: keep ids < 6561 anywhere (a leading stop survives inference_turbo) */
    int32_t a[] = {6562, 5, 6561, 7, 8000, -1, 6560};
    const int32_t a_want[] = {5, 7, 6560};
    int64_t n = variant_filter_speech(turbo, a, 7);
    CHECK(same(a, n, a_want, 3), "turbo: < 6561 filter keeps %lld of 7", (long long)n);
    /* English: after the first 6561, before the first 6562, then < 6561 */
    int32_t b[] = {3, 6561, 5, 7000, 9, 6562, 11};
    const int32_t b_want[] = {5, 9};
    n = variant_filter_speech(en, b, 7);
    CHECK(same(b, n, b_want, 2), "english: drop_invalid_tokens then < 6561 keeps %lld", (long long)n);
    /* multilingual: the same (ours adds < 6561, overview.md §9) */
    int32_t c[] = {1, 2, 8000, 6562};
    const int32_t c_want[] = {1, 2};
    n = variant_filter_speech(mtl, c, 4);
    CHECK(same(c, n, c_want, 2), "mtl-v2: stop cut and >= 6561 dropped, %lld left", (long long)n);
    /* a stop before the start: empty, as x[s:e] with e < s */
    int32_t d[] = {6562, 4, 6561, 5};
    n = variant_filter_speech(en, d, 4);
    CHECK(n == 0, "english: stop before start leaves %lld", (long long)n);
    n = variant_filter_speech(turbo, NULL, 0);
    CHECK(n == 0, "empty input");
}

int main(void)
{
    check_table();
    check_lookup();
    check_filter();
    return test_summary();
}
