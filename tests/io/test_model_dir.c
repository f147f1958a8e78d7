/* test_model_dir.c - src/io/model_dir.c on directories written by
 * `chatterbox synth` (turbo: safetensors only; mtl-v2: s3gen.pt and ve.pt):
 * variant detection, every manifest tensor found by name with its shape and
 * type, values spot-checked against the generator, conds.pt compared with
 * the reference file written by oracle/synth.py (tests/data/<variant>/
 * conds.pt), and errors for missing, ambiguous and corrupt files. Writes
 * about 3 GB per variant under the build tree and deletes it afterwards. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/model_dir.h"
#include "synth.h"
#include "io/torch_pt.h"
#include "testutil.h"

static char data_dir[4096];

static void sh(const char *fmt, const char *a, const char *b)
{
    char cmd[10000];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    if (system(cmd) != 0) fprintf(stderr, "command failed: %s\n", cmd);
}

static void write_bytes(const char *dir, const char *file, const char *bytes)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    FILE *f = fopen(p, "wb");
    if (f) {
        fputs(bytes, f);
        fclose(f);
    }
}

static void expect_open_error(const char *dir, cbx_status want, const char *needle1,
                              const char *needle2, const char *what)
{
    struct model_dir *md = (void *)1;
    char err[ERR_MAX] = "";
    cbx_status rc = model_dir_open(dir, &md, err);
    CHECK(rc == want && md == NULL && strstr(err, needle1) && (!needle2 || strstr(err, needle2)),
          "%s: rc %d (want %d): %s", what, (int)rc, (int)want, err);
    if (rc == CBX_OK) model_dir_close(md);
}

static void test_errors(const char *tmp)
{
    char d[4200];
    snprintf(d, sizeof d, "%s/nonexistent", tmp);
    expect_open_error(d, CBX_ERR_IO, "nonexistent", NULL, "missing directory");

    snprintf(d, sizeof d, "%s/empty", tmp);
    mkdir(d, 0777);
    expect_open_error(d, CBX_ERR_NOT_FOUND, "no Chatterbox T3 weights", NULL, "empty directory");

    snprintf(d, sizeof d, "%s/partial", tmp);
    mkdir(d, 0777);
    write_bytes(d, "t3_turbo_v1.safetensors", "x");
    write_bytes(d, "ve.safetensors", "x");
    expect_open_error(d, CBX_ERR_NOT_FOUND, "s3gen_meanflow.safetensors, conds.pt", "turbo",
                      "turbo without s3gen and conds");

    write_bytes(d, "t3_nano_v1.safetensors", "x");
    expect_open_error(d, CBX_ERR_INVALID_ARG, "several variants", "t3_nano_v1.safetensors",
                      "turbo and nano T3 files together");
    struct model_dir *md = NULL;
    char err[ERR_MAX] = "";
    cbx_status rc = model_dir_open_as(d, MODEL_MTL_V2, &md, err);
    CHECK(rc == CBX_ERR_NOT_FOUND && strstr(err, "mtl-v2") && strstr(err, "t3_mtl23ls_v2") &&
              strstr(err, "s3gen.pt"),
          "explicit variant mtl-v2 names its missing files: %s", err);
}

/* Compare elements [start, start + n) of a file tensor with the generator. */
static bool same_values(const struct synth_tensor *st, uint64_t seed, const struct tensor *t,
                        int64_t start, int64_t n, void *scratch)
{
    size_t es = st->type == TYPE_I64 ? 8 : 4;
    synth_tensor_fill(st, seed, start, n, scratch);
    return memcmp((const char *)t->data + (size_t)start * es, scratch, (size_t)n * es) == 0;
}

static void check_component(const struct model_dir *md, enum model_component c,
                            const char *file, void *scratch)
{
    struct synth_manifest *m = NULL;
    char err[ERR_MAX] = "";
    cbx_status rc = synth_manifest_load(data_dir, file, &m, err);
    CHECK(rc == CBX_OK, "manifest %s: %s", file, err);
    if (rc != CBX_OK) return;
    int missing = 0, bad_shape = 0, bad_values = 0, order = 0;
    int64_t checked = 0;
    for (int i = 0; i < m->n; i++) {
        const struct synth_tensor *st = &m->t[i];
        const struct tensor *t = model_dir_find(md, c, st->name);
        if (!t) {
            if (!missing) fprintf(stderr, "missing: %s\n", st->name);
            missing++;
            continue;
        }
        bool same = t->type == st->type && t->ndim == st->ndim;
        for (int d = 0; same && d < st->ndim; d++) same = t->ne[d] == st->ne[d];
        if (!same) {
            bad_shape++;
            continue;
        }
        const struct tensor *ti = model_dir_tensor(md, c, i);
        if (!ti || strcmp(ti->name, st->name) != 0) order++;
        /* Small tensors whole; big ones: head, tail and a middle window. */
        int64_t ne = synth_tensor_nelements(st), w = 4096;
        bool ok;
        if (ne <= 3 * w) {
            ok = same_values(st, m->seed, t, 0, ne, scratch);
            checked += ne;
        } else {
            int64_t mid = (int64_t)((uint64_t)(i * 2654435761u) % (uint64_t)(ne - w));
            ok = same_values(st, m->seed, t, 0, w, scratch) &&
                 same_values(st, m->seed, t, ne - w, w, scratch) &&
                 same_values(st, m->seed, t, mid, w, scratch);
            checked += 3 * w;
        }
        if (!ok) {
            if (!bad_values) fprintf(stderr, "values differ: %s\n", st->name);
            bad_values++;
        }
    }
    int count = model_dir_count(md, c);
    printf("%-28s %4d tensors: %d missing, %d bad shape/type, %d out of order, %d bad values "
           "(%" PRId64 " elements compared) %s\n",
           file, m->n, missing, bad_shape, order, bad_values, checked,
           missing + bad_shape + order + bad_values == 0 && count == m->n ? "PASS" : "FAIL");
    CHECK(count == m->n, "%s: %d tensors in the file, manifest has %d", file, count, m->n);
    CHECK(missing + bad_shape + order + bad_values == 0,
          "%s: %d missing, %d bad shape/type, %d out of order, %d bad values", file, missing,
          bad_shape, order, bad_values);
    const struct tensor *got = NULL;
    rc = model_dir_get(md, c, "no.such.tensor", -1, &got, err);
    CHECK(rc == CBX_ERR_NOT_FOUND && got == NULL && strstr(err, file) && strstr(err, "no.such.tensor"),
          "model_dir_get of a missing name: %s", err);
    rc = model_dir_get(md, c, m->t[0].name, m->t[0].type == TYPE_F32 ? TYPE_F16 : TYPE_F32, &got,
                       err);
    CHECK(rc == CBX_ERR_FORMAT && strstr(err, m->t[0].name), "model_dir_get, wrong type: %s", err);
    rc = model_dir_get(md, c, m->t[0].name, m->t[0].type, &got, err);
    CHECK(rc == CBX_OK && got, "model_dir_get, right type: %s", err);
    synth_manifest_free(m);
}

/* conds.pt: structure, generated values, and equality with the reference
 * file written by oracle/synth.py (torch.save). */
static void check_conds(const struct model_dir *md, enum model_variant v, void *scratch)
{
    struct synth_tensor ct[SYNTH_N_CONDS];
    synth_conds_tensors(v, ct);
    int bad = 0;
    for (int i = 0; i < SYNTH_N_CONDS; i++) {
        const char *path = ct[i].name + strlen("conds.");
        const struct tensor *t = model_dir_cond(md, path, NULL);
        bool ok = t && t->type == ct[i].type && t->ndim == ct[i].ndim;
        for (int d = 0; ok && d < t->ndim; d++) ok = t->ne[d] == ct[i].ne[d];
        ok = ok && same_values(&ct[i], 0, t, 0, synth_tensor_nelements(&ct[i]), scratch);
        if (!ok) {
            fprintf(stderr, "conds %s differs\n", path);
            bad++;
        }
    }
    CHECK(bad == 0, "%s conds.pt: %d of %d generated tensors differ", variant_get(v)->name,
          bad, SYNTH_N_CONDS);
    const char *nones[] = {"t3.clap_emb", "t3.cond_prompt_speech_emb", "gen.prompt_feat_len"};
    for (int i = 0; i < 3; i++) {
        bool is_none = false;
        const struct tensor *t = model_dir_cond(md, nones[i], &is_none);
        CHECK(t == NULL && is_none, "conds %s is None", nones[i]);
    }
    bool is_none = true;
    CHECK(model_dir_cond(md, "t3.nonexistent", &is_none) == NULL && !is_none,
          "conds t3.nonexistent is absent (not None)");
    const struct tensor *ea = model_dir_cond(md, "t3.emotion_adv", NULL);
    CHECK(ea && ea->type == TYPE_F32 && ea->ndim == 3 && ea->ne[0] == 1 && ea->ne[1] == 1 &&
              ea->ne[2] == 1 && *(const float *)ea->data == 0.5f,
          "conds t3.emotion_adv = 0.5 * ones(1, 1, 1)");
    const struct tensor *pl = model_dir_cond(md, "gen.prompt_token_len", NULL);
    CHECK(pl && pl->type == TYPE_I64 && pl->ndim == 1 && pl->ne[0] == 1 &&
              *(const int64_t *)pl->data == 250,
          "conds gen.prompt_token_len = tensor([250])");

    /* The reference conds.pt of this variant, when the test data has it. */
    char ref_path[4096];
    snprintf(ref_path, sizeof ref_path, "%s", test_data(variant_get(v)->name));
    strncat(ref_path, "/conds.pt", sizeof ref_path - strlen(ref_path) - 1);
    if (access(ref_path, R_OK) != 0) return;
    struct pt_value *ref = NULL;
    char err[ERR_MAX] = "";
    cbx_status rc = io_pt_read(ref_path, &ref, err);
    CHECK(rc == CBX_OK, "read reference %s: %s", ref_path, err);
    if (rc != CBX_OK) return;
    const char *groups[2] = {"t3", "gen"};
    int diffs = 0, keys = 0;
    for (int g = 0; g < 2; g++) {
        const struct pt_value *d = pt_dict_get(ref, groups[g]);
        for (size_t k = 0; k < pt_len(d); k++) {
            char path[256];
            snprintf(path, sizeof path, "%s.%s", groups[g], pt_dict_key(d, k));
            const struct pt_value *rv = pt_item(d, k);
            bool is_none_mine = false;
            const struct tensor *mine = model_dir_cond(md, path, &is_none_mine);
            keys++;
            if (rv->kind == PT_NONE) {
                if (!is_none_mine) diffs++;
                continue;
            }
            const struct pt_tensor *rt = pt_as_tensor(rv);
            bool ok = rt && mine && (int)mine->type == (int)rt->type && mine->ndim == rt->ndim &&
                      tensor_nbytes(mine) == rt->nbytes;
            for (int dd = 0; ok && dd < rt->ndim; dd++) ok = mine->ne[dd] == rt->ne[dd];
            ok = ok && memcmp(mine->data, rt->data, rt->nbytes) == 0;
            if (!ok) {
                fprintf(stderr, "conds %s differs from the reference\n", path);
                diffs++;
            }
        }
    }
    printf("%-28s %d entries compared with %s: %d differ %s\n", "conds.pt", keys, ref_path, diffs,
           diffs == 0 && keys == 10 ? "PASS" : "FAIL");
    CHECK(keys == 10 && diffs == 0, "conds.pt vs reference: %d entries, %d differ", keys, diffs);
    pt_value_free(ref);
}

/* Corrupt one file of a good directory (through symlinks to the others):
 * the error must name that file. */
static void check_corrupt(const char *good, const char *tmp, const char *victim)
{
    char d[4200];
    snprintf(d, sizeof d, "%s/corrupt", tmp);
    sh("rm -rf '%s' && mkdir -p '%s'", d, d);
    sh("for f in '%s'/*; do ln -s \"$f\" '%s'/; done", good, d);
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", d, victim);
    unlink(p);
    write_bytes(d, victim, "this is not a checkpoint");
    expect_open_error(d, CBX_ERR_FORMAT, victim, NULL, "corrupt file named in the error");
    sh("rm -rf '%s'%s", d, "");
}

static void check_variant(enum model_variant v, const char *tmp, void *scratch)
{
    const struct variant *vi = variant_get(v);
    char dir[4200], cmd[9000];
    snprintf(dir, sizeof dir, "%s/%s", tmp, vi->name);
    snprintf(cmd, sizeof cmd, "'%s/chatterbox' synth %s -o '%s' --quiet", CBX_BINARY_DIR,
             vi->name, dir);
    int st = system(cmd);
    CHECK(st == 0, "chatterbox synth %s -o DIR: status %d", vi->name, st);
    if (st != 0) return;

    struct model_dir *md = NULL;
    char err[ERR_MAX] = "";
    cbx_status rc = model_dir_open(dir, &md, err);
    CHECK(rc == CBX_OK, "open %s: %s", dir, err);
    if (rc == CBX_OK) {
        CHECK(model_dir_variant(md) == v, "%s detected as %s", vi->name,
              variant_get(model_dir_variant(md))->name);
        for (int c = 0; c < MODEL_N_COMPONENTS; c++)
            check_component(md, (enum model_component)c, vi->file[c], scratch);
        check_conds(md, v, scratch);
        for (int i = 0; vi->tokenizer_files[i]; i++) {
            char p[4096], src[8400];
            bool here = false;
            snprintf(src, sizeof src, "%s/%s/%s", data_dir,
                     vi->tokenizer_data_dir ? vi->tokenizer_data_dir : "-", vi->tokenizer_files[i]);
            /* the grapheme models get synthetic tokenizer files (English's
             * tokenizer.json, multilingual's vocabulary and Cangjie table)
             * when the real ones are not available */
            bool available = (vi->tokenizer_data_dir && access(src, R_OK) == 0) ||
                             (v == MODEL_ENGLISH && !strcmp(vi->tokenizer_files[i], "tokenizer.json")) ||
                             v == MODEL_MTL_V2 || v == MODEL_MTL_V3;
            CHECK(model_dir_file_path(md, vi->tokenizer_files[i], p, sizeof p, &here) &&
                      here == available,
                  "%s: tokenizer file %s present %d (available %d)", vi->name,
                  vi->tokenizer_files[i], here, available);
        }
        model_dir_close(md);
    }
    check_corrupt(dir, tmp, vi->file[MODEL_S3GEN]);
    sh("rm -rf '%s'%s", dir, "");
}

int main(void)
{
    snprintf(data_dir, sizeof data_dir, "%s/data", CBX_SOURCE_DIR);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", test_tmpdir("model_dir"));
    void *scratch = malloc(((size_t)1 << 22) + 3 * 4096 * 8);
    test_errors(tmp);
    check_variant(MODEL_TURBO, tmp, scratch);
    check_variant(MODEL_MTL_V2, tmp, scratch);
    free(scratch);
    sh("rm -rf '%s'%s", tmp, "");
    return test_summary();
}
