/* test_synth.c - the synthetic-weight generator (tools/lib/synth.c) against
 * spec/synthetic-weights.md: the §3 test vectors, manifest parsing (good
 * and bad input), and every tensor of every manifest plus every variant's
 * conds.pt tensors regenerated in memory and compared with checksums made
 * by the reference Python generator (tools/dev/synth_checksums.py ->
 * tests/data/synth/checksums.json, "mixsum64"). */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/threadpool.h"
#include "synth.h"
#include "testutil.h"

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- §3 test vectors --------------------------------------------------- */

static void test_vectors(void)
{
    CHECK(synth_fnv1a64("", 0) == 0xcbf29ce484222325ULL, "FNV-1a-64(\"\") = %016" PRIx64,
          synth_fnv1a64("", 0));
    CHECK(synth_fnv1a64("a", 1) == 0xaf63dc4c8601ec8cULL, "FNV-1a-64(\"a\") = %016" PRIx64,
          synth_fnv1a64("a", 1));
    static const struct {
        const char *name;
        double scale, offset;
        uint64_t key;
        uint32_t m[4], v[4];
    } tv[] = {
        {"speech_head.weight", 0.05412658676505089, 0, 0x9147e3129ed14edcULL,
         {12209353, 2158336, 7160375, 15046929},
         {0x3cc9f4f9, 0xbd24a8eb, 0xbc01d808, 0x3d2ff906}},
        {"mel2wav.conv_post.parametrizations.weight.original0", 0.03, 0.3, 0x63b56a1a4d889ee0ULL,
         {13505410, 16520444, 16437408, 8626722},
         {0x3ea2f81a, 0x3ea87d66, 0x3ea8567a, 0x3e9a0938}},
        {"tfmr.ln_f.weight", 0.1, 1.0, 0x0ffdd0178af65671ULL,
         {13393578, 6034200, 9817957, 6388940},
         {0x3f87a311, 0x3f78d09e, 0x3f822e57, 0x3f79e5c2}},
    };
    for (size_t k = 0; k < sizeof tv / sizeof tv[0]; k++) {
        uint64_t key = synth_key(tv[k].name, 0);
        CHECK(key == tv[k].key, "key(%s) = %016" PRIx64 " (want %016" PRIx64 ")", tv[k].name, key,
              tv[k].key);
        float v[4];
        synth_fill_f32(v, key, 0, 4, (float)tv[k].scale, (float)tv[k].offset);
        for (int i = 0; i < 4; i++) {
            CHECK(synth_m(key, (uint64_t)i) == tv[k].m[i], "%s m[%d] = %u (want %u)", tv[k].name,
                  i, synth_m(key, (uint64_t)i), tv[k].m[i]);
            CHECK(fbits(v[i]) == tv[k].v[i], "%s v[%d] bits %08x (want %08x)", tv[k].name, i,
                  fbits(v[i]), tv[k].v[i]);
        }
    }
}

/* Per-element formula written out directly (spec §3), against the filler at
 * odd starts and lengths (vector bodies and tails). */
static void test_fill_vs_formula(void)
{
    const float scales[3] = {0.0883883461356163f, 0.1f, 0.0f};
    const float offsets[3] = {0.0f, 1.0f, -5.0f};
    float *got = malloc(1000 * sizeof *got);
    int64_t *gi = malloc(1000 * sizeof *gi);
    int bad = 0, bad_i = 0;
    for (int c = 0; c < 3; c++) {
        uint64_t key = synth_key("some.tensor", (uint64_t)c * 77);
        const uint64_t starts[4] = {0, 1, 12345, 1ULL << 33};
        const size_t lens[4] = {1, 7, 999, 1000};
        for (int s = 0; s < 4; s++) {
            synth_fill_f32(got, key, starts[s], lens[s], scales[c], offsets[c]);
            synth_fill_i64(gi, key, starts[s], lens[s], 3, 6561);
            for (size_t i = 0; i < lens[s]; i++) {
                uint64_t z = key + (starts[s] + i + 1) * 0x9E3779B97F4A7C15ULL;
                z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
                z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
                z ^= z >> 31;
                int64_t m = (int64_t)(z >> 40);
                float v = (float)(m - 8388608) * ldexpf(scales[c], -23);
                if (offsets[c] != 0.0f) v = v + offsets[c];
                if (fbits(v) != fbits(got[i])) bad++;
                if (gi[i] != 3 + (int64_t)floor((double)m * 6558.0 / 16777216.0)) bad_i++;
            }
        }
    }
    CHECK(bad == 0, "synth_fill_f32 vs per-element formula: %d mismatches", bad);
    CHECK(bad_i == 0, "synth_fill_i64 vs per-element formula: %d mismatches", bad_i);
    free(got);
    free(gi);
}

/* ---- manifests ---------------------------------------------------------- */

static char data_dir[4096];

static void expect_parse_error(const char *json, const char *want_in_msg)
{
    struct synth_manifest *m = (void *)1;
    char err[ERR_MAX] = "";
    cbx_status rc = synth_manifest_parse(json, strlen(json), "bad.json", data_dir, &m, err);
    CHECK(rc != CBX_OK && m == NULL && strstr(err, want_in_msg) != NULL,
          "bad manifest refused (rc %d): %s", (int)rc, err);
}

static void test_manifest_parse(void)
{
    const char *ok = "{\"file\":\"x.safetensors\",\"seed\":3,\"tensors\":["
                     "{\"name\":\"a.weight\",\"shape\":[2,3],\"dtype\":\"float32\",\"scale\":0.5,\"offset\":1},"
                     "{\"name\":\"bn.num_batches_tracked\",\"shape\":[],\"dtype\":\"int64\",\"zeros\":true},"
                     "{\"name\":\"tok\",\"shape\":[5],\"dtype\":\"int64\",\"int_range\":[0,6561]},"
                     "{\"name\":\"tokenizer.window\",\"shape\":[400],\"dtype\":\"float32\","
                     "\"recipe\":{\"kind\":\"hann_window_periodic\",\"n\":400,\"npy\":\"data/buffers/hann_window_400.npy\"}}]}";
    struct synth_manifest *m = NULL;
    char err[ERR_MAX] = "";
    cbx_status rc = synth_manifest_parse(ok, strlen(ok), "ok.json", data_dir, &m, err);
    CHECK(rc == CBX_OK, "small manifest parses: %s", err);
    if (rc == CBX_OK) {
        CHECK(m->n == 4 && m->seed == 3 && !strcmp(m->file, "x.safetensors") &&
                  m->num_elements == 6 + 1 + 5 + 400,
              "small manifest: n %d seed %" PRIu64 " elements %" PRId64, m->n, m->seed,
              m->num_elements);
        CHECK(m->t[0].rule == SYNTH_RANDOM && m->t[0].scale == 0.5f && m->t[0].offset == 1.0f &&
                  m->t[0].ndim == 2 && m->t[0].ne[1] == 3,
              "tensor 0: random [2, 3] scale 0.5 offset 1");
        CHECK(m->t[1].rule == SYNTH_ZEROS && m->t[1].type == TYPE_I64 && m->t[1].ndim == 0,
              "tensor 1: int64 scalar zeros");
        CHECK(m->t[2].rule == SYNTH_INT_RANGE && m->t[2].lo == 0 && m->t[2].hi == 6561,
              "tensor 2: int_range [0, 6561)");
        const float *w = m->t[3].data;
        /* torch.hann_window(400)[100] = sin^2(pi * 100 / 400) = 0.5 */
        CHECK(m->t[3].rule == SYNTH_RECIPE && w && w[0] == 0.0f && fabsf(w[100] - 0.5f) < 1e-6f,
              "tensor 3: hann window from the .npy (w[100] = %g)", w ? w[100] : -1.0);
        synth_manifest_free(m);
    }

    expect_parse_error("{", "not a JSON object");
    expect_parse_error("{\"file\":\"x\",\"tensors\":[{\"name\":\"a\",\"shape\":[2],\"dtype\":\"float16\",\"scale\":1,\"offset\":0}]}",
                       "float16");
    expect_parse_error("{\"file\":\"x\",\"tensors\":[{\"name\":\"a\",\"shape\":[2],\"dtype\":\"float32\",\"scale\":1,\"offset\":0,\"zeros\":true}]}",
                       "exactly one");
    expect_parse_error("{\"file\":\"x\",\"tensors\":[{\"name\":\"a\",\"shape\":[-2],\"dtype\":\"float32\",\"scale\":1,\"offset\":0}]}",
                       "shape[0]");
    expect_parse_error("{\"file\":\"x\",\"tensors\":[{\"name\":\"a\",\"shape\":[1,1,1,1,1],\"dtype\":\"float32\",\"scale\":1,\"offset\":0}]}",
                       "dims");
    expect_parse_error("{\"file\":\"x\",\"tensors\":[{\"name\":\"a\",\"shape\":[2],\"dtype\":\"int64\",\"int_range\":[5,5]}]}",
                       "int_range");
    expect_parse_error("{\"file\":\"x\",\"tensors\":[{\"name\":\"a\",\"shape\":[3],\"dtype\":\"float32\","
                       "\"recipe\":{\"npy\":\"data/buffers/hann_window_400.npy\"}}]}",
                       "manifest wants");
    expect_parse_error("{\"file\":\"x\",\"tensors\":[{\"name\":\"a\",\"shape\":[3],\"dtype\":\"float32\","
                       "\"recipe\":{\"npy\":\"data/buffers/nonexistent.npy\"}}]}",
                       "nonexistent");
    expect_parse_error("{\"file\":\"x\",\"tensors\":[{\"name\":\"a\",\"shape\":[2],\"dtype\":\"int64\",\"int_range\":[-1e300,5]}]}",
                       "int_range");
    expect_parse_error("{\"file\":\"x\",\"tensors\":[{\"name\":\"a\",\"shape\":[2],\"dtype\":\"int64\",\"int_range\":[0,1e15]}]}",
                       "2^39");
    expect_parse_error("{\"tensors\":[]}", "\"file\"");
    expect_parse_error("{\"file\":\"x\",\"seed\":-1,\"tensors\":[]}", "seed");
}

/* ---- checksums ("mixsum64", tools/dev/synth_checksums.py) --------------- */

#define WORD_MUL 0xD1B54A32D192ED03ULL
#define CHUNK_ELEMS ((int64_t)1 << 20) /* even: chunks stay 8-byte aligned */

struct work {
    const struct synth_tensor *t;
    uint64_t seed;
    int64_t start, n; /* elements */
    uint64_t partial; /* sum of mixed words of this chunk */
};

struct job {
    struct work *w;
    char **scratch; /* per thread, CHUNK_ELEMS * 8 bytes */
};

static void run_work(void *ctx, int64_t b, int64_t e, int ith)
{
    struct job *j = ctx;
    for (int64_t k = b; k < e; k++) {
        struct work *w = &j->w[k];
        size_t es = w->t->type == TYPE_I64 ? 8 : 4;
        char *buf = j->scratch[ith];
        size_t nb = (size_t)w->n * es;
        synth_tensor_fill(w->t, w->seed, w->start, w->n, buf);
        memset(buf + nb, 0, 8); /* zero padding of a last partial word */
        uint64_t word0 = (uint64_t)w->start * es / 8, h = 0;
        for (size_t i = 0; i < (nb + 7) / 8; i++) {
            uint64_t x;
            memcpy(&x, buf + 8 * i, 8); /* little-endian host */
            h += synth_mix(x ^ ((word0 + i) * WORD_MUL));
        }
        w->partial = h;
    }
}

/* Checksums of n tensors (file_seed each) into sums[]; threaded. */
static int checksum_tensors(struct threadpool *tp, char **scratch, const struct synth_tensor *t,
                            int n, uint64_t seed, uint64_t *sums)
{
    int64_t nw = 0;
    for (int i = 0; i < n; i++) nw += (synth_tensor_nelements(&t[i]) + CHUNK_ELEMS - 1) / CHUNK_ELEMS + 1;
    struct work *w = calloc((size_t)nw, sizeof *w);
    if (!w) return -1;
    int64_t k = 0;
    for (int i = 0; i < n; i++) {
        int64_t ne = synth_tensor_nelements(&t[i]);
        for (int64_t s = 0; s < ne || (ne == 0 && s == 0); s += CHUNK_ELEMS) {
            w[k++] = (struct work){&t[i], seed, s, ne - s < CHUNK_ELEMS ? ne - s : CHUNK_ELEMS, 0};
            if (ne == 0) break;
        }
    }
    struct job j = {w, scratch};
    tp_parallel_for(tp, k, 1, run_work, &j);
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        uint64_t h = 0;
        while (at < k && w[at].t == &t[i]) h += w[at++].partial;
        sums[i] = synth_mix(h + synth_tensor_nbytes(&t[i]));
    }
    free(w);
    return 0;
}

static uint64_t parse_hex(const cJSON *j)
{
    return cJSON_IsString(j) ? strtoull(j->valuestring, NULL, 16) : 0;
}

static void test_checksums(void)
{
    char *text = NULL;
    cJSON *root = NULL;
    struct threadpool *tp = tp_create(tp_default_threads());
    char **scratch = calloc((size_t)tp_n_threads(tp), sizeof *scratch);
    for (int i = 0; i < tp_n_threads(tp); i++) scratch[i] = malloc((size_t)CHUNK_ELEMS * 8 + 8);

    FILE *f = fopen(test_data("synth/checksums.json"), "rb");
    CHECK(f != NULL, "open %s", test_data("synth/checksums.json"));
    if (!f) goto cleanup;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = malloc((size_t)len + 1);
    size_t got = fread(text, 1, (size_t)len, f);
    fclose(f);
    text[got] = 0;
    root = cJSON_Parse(text);
    const cJSON *files = cJSON_GetObjectItem(root, "files");
    CHECK(cJSON_GetObjectItem(root, "global_seed") &&
              cJSON_GetObjectItem(root, "global_seed")->valuedouble == 0,
          "checksums made with global seed 0");
    CHECK(cJSON_GetArraySize(files) == 10, "checksums for %d manifest files (want 10)",
          cJSON_GetArraySize(files));

    double t0 = (double)clock();
    struct timespec w0, w1;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    int64_t total_elems = 0;
    const cJSON *fe;
    cJSON_ArrayForEach(fe, files) {
        struct synth_manifest *m = NULL;
        char err[ERR_MAX] = "";
        cbx_status rc = synth_manifest_load(data_dir, fe->string, &m, err);
        CHECK(rc == CBX_OK, "load manifest %s: %s", fe->string, err);
        if (rc != CBX_OK) continue;
        const cJSON *sums = cJSON_GetObjectItem(fe, "checksums");
        uint64_t want_seed = (uint64_t)cJSON_GetObjectItem(fe, "seed")->valuedouble;
        CHECK(cJSON_GetArraySize(sums) == m->n && want_seed == m->seed,
              "%s: %d tensors, seed %" PRIu64 " (reference: %d, %" PRIu64 ")", m->file, m->n,
              m->seed, cJSON_GetArraySize(sums), want_seed);
        uint64_t *mine = calloc((size_t)m->n, sizeof *mine);
        checksum_tensors(tp, scratch, m->t, m->n, m->seed /* ^ global seed 0 */, mine);
        int bad = 0, first_bad = -1;
        for (int i = 0; i < m->n && i < cJSON_GetArraySize(sums); i++) {
            if (mine[i] != parse_hex(cJSON_GetArrayItem(sums, i))) {
                if (first_bad < 0) first_bad = i;
                bad++;
            }
        }
        printf("%-28s %4d tensors %10" PRId64 " elements: %d checksum mismatches %s\n", m->file,
               m->n, m->num_elements, bad, bad ? "FAIL" : "PASS");
        CHECK(bad == 0, "%-28s %4d tensors %10" PRId64 " elements: %d checksum mismatches%s%s",
              m->file, m->n, m->num_elements, bad, first_bad >= 0 ? ", first " : "",
              first_bad >= 0 ? m->t[first_bad].name : "");
        total_elems += m->num_elements;
        free(mine);
        synth_manifest_free(m);
    }
    clock_gettime(CLOCK_MONOTONIC, &w1);
    double wall = (double)(w1.tv_sec - w0.tv_sec) + 1e-9 * (double)(w1.tv_nsec - w0.tv_nsec);
    printf("generated and summed %.2fe9 elements in %.1f s wall (%.1f s cpu, %d threads): %.0f MB/s\n",
           (double)total_elems / 1e9, wall, ((double)clock() - t0) / CLOCKS_PER_SEC,
           tp_n_threads(tp), (double)total_elems * 4 / 1e6 / wall);

    const cJSON *conds = cJSON_GetObjectItem(root, "conds");
    CHECK(cJSON_GetArraySize(conds) == MODEL_N_VARIANTS, "conds checksums for %d variants",
          cJSON_GetArraySize(conds));
    for (int v = 0; v < MODEL_N_VARIANTS; v++) {
        const char *name = variant_get((enum model_variant)v)->name;
        const cJSON *cv = cJSON_GetObjectItem(conds, name);
        struct synth_tensor ct[SYNTH_N_CONDS];
        uint64_t mine[SYNTH_N_CONDS];
        synth_conds_tensors((enum model_variant)v, ct);
        checksum_tensors(tp, scratch, ct, SYNTH_N_CONDS, 0, mine);
        int bad = 0;
        for (int i = 0; i < SYNTH_N_CONDS; i++)
            if (mine[i] != parse_hex(cJSON_GetObjectItem(cv, ct[i].name))) bad++;
        printf("%-28s %4d tensors: %d checksum mismatches %s\n", name, SYNTH_N_CONDS, bad,
               bad ? "FAIL" : "PASS");
        CHECK(cv && cJSON_GetArraySize(cv) == SYNTH_N_CONDS && bad == 0,
              "%s conds.pt: %d of %d generated tensors differ", name, bad, SYNTH_N_CONDS);
    }

cleanup:
    cJSON_Delete(root);
    free(text);
    for (int i = 0; i < tp_n_threads(tp); i++) free(scratch[i]);
    free(scratch);
    tp_free(tp);
}

int main(void)
{
    char err[ERR_MAX] = "";
    snprintf(data_dir, sizeof data_dir, "%s/data", CBX_SOURCE_DIR);
    test_vectors();
    test_fill_vs_formula();
    test_manifest_parse();
    CHECK(synth_data_dir((char[4096]){0}, 4096, err), "synth_data_dir finds a data directory: %s",
          err);
    test_checksums();
    return test_summary();
}
