/* synth.c - synthetic Chatterbox checkpoints (spec/synthetic-weights.md):
 * value generator (§2-3), manifest parsing (§1, §5), directory writer (§6).
 * Matches oracle/synthspec.py and oracle/synth.py bit for bit; the float
 * arithmetic below relies on -ffp-contract=off (set for the whole build). */
#include "synth.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/hash.h"
#include "core/threadpool.h"
#include "io/atomic_file.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "synth_tokenizer.h"
#include "io/torch_pt.h"
#include "torch_pt_write.h"

#define GOLDEN 0x9E3779B97F4A7C15ULL

/* ---- 1. generator ----------------------------------------------------- */

uint64_t synth_fnv1a64(const void *bytes, size_t n) { return hash_fnv1a64(bytes, n); }

uint64_t synth_key(const char *name, uint64_t file_seed)
{
    return synth_fnv1a64(name, strlen(name)) ^ file_seed;
}

static inline uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

uint64_t synth_mix(uint64_t z) { return mix(z); }

uint32_t synth_m(uint64_t key, uint64_t i)
{
    return (uint32_t)(mix(key + (i + 1) * GOLDEN) >> 40);
}

/* The loops are written so the compiler vectorises them: z advances by
 * GOLDEN per element, everything else is per-element. A copy compiled for
 * AVX-512DQ (native 64-bit lane multiply) is picked at run time. */
#define FILL_F32_BODY                                                        \
    uint64_t z0 = key + (start + 1) * GOLDEN;                                \
    float s = scale * 0x1p-23f; /* exact: a power-of-two scaling */          \
    if (offset != 0.0f) {                                                    \
        for (size_t i = 0; i < n; i++) {                                     \
            uint32_t m = (uint32_t)(mix(z0 + (uint64_t)i * GOLDEN) >> 40);   \
            float q = (float)((int32_t)m - 8388608);                         \
            float v = q * s;                                                 \
            dst[i] = v + offset;                                             \
        }                                                                    \
    } else {                                                                 \
        for (size_t i = 0; i < n; i++) {                                     \
            uint32_t m = (uint32_t)(mix(z0 + (uint64_t)i * GOLDEN) >> 40);   \
            float q = (float)((int32_t)m - 8388608);                         \
            dst[i] = q * s;                                                  \
        }                                                                    \
    }

static void fill_f32_generic(float *restrict dst, uint64_t key, uint64_t start,
                             size_t n, float scale, float offset)
{
    FILL_F32_BODY
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx512f,avx512dq,avx512vl")))
static void fill_f32_avx512(float *restrict dst, uint64_t key, uint64_t start,
                            size_t n, float scale, float offset)
{
    FILL_F32_BODY
}
#define HAVE_FILL_AVX512 1
#endif

void synth_fill_f32(float *dst, uint64_t key, uint64_t start, size_t n,
                    float scale, float offset)
{
#ifdef HAVE_FILL_AVX512
    static int avx512 = -1; /* benign race: every thread computes the same */
    if (avx512 < 0) {
        __builtin_cpu_init();
        avx512 = __builtin_cpu_supports("avx512f") &&
                 __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("avx512vl");
    }
    if (avx512) {
        fill_f32_avx512(dst, key, start, n, scale, offset);
        return;
    }
#endif
    fill_f32_generic(dst, key, start, n, scale, offset);
}

void synth_fill_i64(int64_t *dst, uint64_t key, uint64_t start, size_t n,
                    int64_t lo, int64_t hi)
{
    int64_t range = hi - lo; /* < 2^39, so m * range < 2^63 */
    for (size_t i = 0; i < n; i++) {
        int64_t m = (int64_t)synth_m(key, start + i);
        dst[i] = lo + (m * range) / (1LL << 24); /* both >= 0: floor */
    }
}

/* ---- 2. manifests ----------------------------------------------------- */

struct manifest_priv {
    char *strings;   /* all names, back to back */
    void **buffers;  /* recipe data */
    int n_buffers;
};

int64_t synth_tensor_nelements(const struct synth_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->ne[d];
    return n;
}

size_t synth_tensor_nbytes(const struct synth_tensor *t)
{
    return (size_t)synth_tensor_nelements(t) * (t->type == TYPE_I64 ? 8 : 4);
}

void synth_manifest_free(struct synth_manifest *m)
{
    if (!m) return;
    struct manifest_priv *p = m->priv_;
    if (p) {
        for (int i = 0; i < p->n_buffers; i++) free(p->buffers[i]);
        free(p->buffers);
        free(p->strings);
        free(p);
    }
    free(m->t);
    free(m);
}

static bool is_number(const cJSON *j) { return j && cJSON_IsNumber(j); }

/* A JSON number that must be a non-negative integer below 2^53. */
static bool json_uint(const cJSON *j, int64_t *out)
{
    if (!is_number(j)) return false;
    double d = j->valuedouble;
    if (!(d >= 0 && d < 9007199254740992.0) || d != (double)(int64_t)d) return false;
    *out = (int64_t)d;
    return true;
}

/* A JSON number that must be an integer of magnitude below 2^53. */
static bool json_int(const cJSON *j, int64_t *out)
{
    if (!is_number(j)) return false;
    double d = j->valuedouble;
    if (!(d > -9007199254740992.0 && d < 9007199254740992.0) || d != (double)(int64_t)d)
        return false;
    *out = (int64_t)d;
    return true;
}

/* Join data_dir with a recipe's npy path (see synth.h). */
static bool recipe_path(const char *data_dir, const char *npy, char *buf, size_t n)
{
    int k;
    if (!strncmp(npy, "data/", 5))
        k = snprintf(buf, n, "%s/%s", data_dir, npy + 5);
    else
        k = snprintf(buf, n, "%s/%s", data_dir, npy);
    return k > 0 && (size_t)k < n;
}

static cbx_status load_recipe(const char *where, const char *data_dir,
                              const cJSON *recipe, struct synth_tensor *t,
                              struct manifest_priv *p, char *err)
{
    const cJSON *npy = cJSON_GetObjectItemCaseSensitive(recipe, "npy");
    if (!cJSON_IsString(npy) || !npy->valuestring[0])
        return err_setf(err, CBX_ERR_FORMAT,
                        "%s: tensor '%s': recipe without an \"npy\" path (only stored buffers are supported)",
                        where, t->name);
    if (!data_dir)
        return err_setf(err, CBX_ERR_INVALID_ARG,
                        "%s: tensor '%s' needs %s but no data directory was given",
                        where, t->name, npy->valuestring);
    if (t->type != TYPE_F32)
        return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': recipe buffers must be float32",
                        where, t->name);
    char path[4096];
    if (!recipe_path(data_dir, npy->valuestring, path, sizeof path))
        return err_setf(err, CBX_ERR_INVALID_ARG, "%s: path of %s too long", where,
                        npy->valuestring);
    struct npy a = {0};
    cbx_status rc = io_npy_read_f32(path, &a, err);
    if (rc != CBX_OK) return rc;
    bool same = a.ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = a.ne[d] == t->ne[d];
    if (!same || a.nbytes != synth_tensor_nbytes(t)) {
        io_npy_free(&a);
        return err_setf(err, CBX_ERR_FORMAT,
                        "%s: tensor '%s': recipe buffer %s has %d dims / %zu bytes, the manifest wants %zu bytes",
                        where, t->name, path, a.ndim, a.nbytes, synth_tensor_nbytes(t));
    }
    void **nb = realloc(p->buffers, (size_t)(p->n_buffers + 1) * sizeof *nb);
    if (!nb) {
        io_npy_free(&a);
        return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", where);
    }
    p->buffers = nb;
    p->buffers[p->n_buffers++] = a.data; /* ownership moves to the manifest */
    t->data = a.data;
    return CBX_OK;
}

static cbx_status parse_tensor(const char *where, const char *data_dir, const cJSON *e,
                               int idx, struct synth_tensor *t, char **names,
                               struct manifest_priv *p, char *err)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsObject(e) || !cJSON_IsString(name) || !name->valuestring[0])
        return err_setf(err, CBX_ERR_FORMAT, "%s: tensors[%d]: missing \"name\"", where, idx);
    size_t len = strlen(name->valuestring) + 1;
    memcpy(*names, name->valuestring, len);
    t->name = *names;
    *names += len;

    if (!cJSON_IsString(dtype))
        return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': missing \"dtype\"", where, t->name);
    if (!strcmp(dtype->valuestring, "float32"))
        t->type = TYPE_F32;
    else if (!strcmp(dtype->valuestring, "int64"))
        t->type = TYPE_I64;
    else
        return err_setf(err, CBX_ERR_FORMAT,
                        "%s: tensor '%s': dtype \"%s\" (allowed: float32, int64)", where,
                        t->name, dtype->valuestring);

    if (!cJSON_IsArray(shape))
        return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': missing \"shape\"", where, t->name);
    int nd = cJSON_GetArraySize(shape);
    if (nd > TENSOR_MAX_DIMS)
        return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': %d dims (at most %d)", where,
                        t->name, nd, TENSOR_MAX_DIMS);
    t->ndim = nd;
    int64_t numel = 1;
    for (int d = 0; d < nd; d++) {
        if (!json_uint(cJSON_GetArrayItem(shape, d), &t->ne[d]) || t->ne[d] > ((int64_t)1 << 40))
            return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': bad shape[%d]", where,
                            t->name, d);
        if (t->ne[d] && numel > ((int64_t)1 << 40) / t->ne[d])
            return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': too many elements", where,
                            t->name);
        numel *= t->ne[d];
    }

    const cJSON *scale = cJSON_GetObjectItemCaseSensitive(e, "scale");
    const cJSON *offset = cJSON_GetObjectItemCaseSensitive(e, "offset");
    const cJSON *zeros = cJSON_GetObjectItemCaseSensitive(e, "zeros");
    const cJSON *recipe = cJSON_GetObjectItemCaseSensitive(e, "recipe");
    const cJSON *range = cJSON_GetObjectItemCaseSensitive(e, "int_range");
    int rules = (scale != NULL) + cJSON_IsTrue(zeros) + (recipe != NULL) + (range != NULL);
    if (rules != 1)
        return err_setf(err, CBX_ERR_FORMAT,
                        "%s: tensor '%s': needs exactly one of scale/offset, zeros, recipe, int_range",
                        where, t->name);
    if (scale) {
        if (!is_number(scale) || !is_number(offset))
            return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': scale/offset must be numbers",
                            where, t->name);
        if (t->type != TYPE_F32)
            return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': scale/offset needs float32",
                            where, t->name);
        t->rule = SYNTH_RANDOM;
        /* (float) of the parsed double: round to nearest, as np.float32(). */
        t->scale = (float)scale->valuedouble;
        t->offset = (float)offset->valuedouble;
    } else if (zeros) {
        t->rule = SYNTH_ZEROS;
    } else if (range) {
        int64_t lo, hi;
        const cJSON *jl = cJSON_GetArrayItem(range, 0), *jh = cJSON_GetArrayItem(range, 1);
        if (!cJSON_IsArray(range) || cJSON_GetArraySize(range) != 2 || !json_int(jl, &lo) ||
            !json_int(jh, &hi))
            return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s': int_range must be [lo, hi]",
                            where, t->name);
        if (hi <= lo || hi - lo >= ((int64_t)1 << 39) || t->type != TYPE_I64)
            return err_setf(err, CBX_ERR_FORMAT,
                            "%s: tensor '%s': int_range [%lld, %lld) (needs int64, lo < hi, hi - lo < 2^39)",
                            where, t->name, (long long)lo, (long long)hi);
        t->rule = SYNTH_INT_RANGE;
        t->lo = lo;
        t->hi = hi;
    } else {
        t->rule = SYNTH_RECIPE;
        return load_recipe(where, data_dir, recipe, t, p, err);
    }
    return CBX_OK;
}

cbx_status synth_manifest_parse(const char *json, size_t n, const char *where,
                                const char *data_dir, struct synth_manifest **out,
                                char *err)
{
    cbx_status rc = CBX_OK;
    struct synth_manifest *m = NULL;
    struct manifest_priv *p = NULL;
    cJSON *root = NULL;
    *out = NULL;

    root = cJSON_ParseWithLength(json, n);
    if (!root || !cJSON_IsObject(root)) {
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: not a JSON object", where);
        goto cleanup;
    }
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(root, "file");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(root, "seed");
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    int64_t seed_v = 0;
    if (!cJSON_IsString(file) || !file->valuestring[0] || strchr(file->valuestring, '/')) {
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: missing or bad \"file\"", where);
        goto cleanup;
    }
    if (seed && !json_uint(seed, &seed_v)) {
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: \"seed\" must be a non-negative integer", where);
        goto cleanup;
    }
    if (!cJSON_IsArray(tensors)) {
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: missing \"tensors\" array", where);
        goto cleanup;
    }
    int count = cJSON_GetArraySize(tensors);
    size_t strbytes = strlen(file->valuestring) + 1;
    const cJSON *e;
    cJSON_ArrayForEach(e, tensors) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        if (cJSON_IsString(nm)) strbytes += strlen(nm->valuestring) + 1;
    }

    m = calloc(1, sizeof *m);
    p = calloc(1, sizeof *p);
    if (!m || !p) {
        free(p);
        rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", where);
        goto cleanup;
    }
    m->priv_ = p;
    p->strings = malloc(strbytes);
    m->t = calloc(count ? (size_t)count : 1, sizeof *m->t);
    if (!p->strings || !m->t) {
        rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", where);
        goto cleanup;
    }
    char *names = p->strings;
    memcpy(names, file->valuestring, strlen(file->valuestring) + 1);
    m->file = names;
    names += strlen(file->valuestring) + 1;
    m->seed = (uint64_t)seed_v;

    int i = 0;
    cJSON_ArrayForEach(e, tensors) {
        rc = parse_tensor(where, data_dir, e, i, &m->t[i], &names, p, err);
        if (rc != CBX_OK) goto cleanup;
        m->num_elements += synth_tensor_nelements(&m->t[i]);
        m->n = ++i;
    }

cleanup:
    cJSON_Delete(root);
    if (rc != CBX_OK) {
        synth_manifest_free(m);
        m = NULL;
    }
    *out = m;
    return rc;
}

static cbx_status read_file(const char *path, char **out, size_t *n, char *err)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    *out = NULL;
    if (!f) return err_setf(err, CBX_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return err_setf(err, CBX_ERR_IO, "%s: not a regular file", path);
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        fclose(f);
        return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory (%lld bytes)", path,
                        (long long)st.st_size);
    }
    size_t got = fread(buf, 1, (size_t)st.st_size, f);
    int bad = ferror(f) || got != (size_t)st.st_size;
    fclose(f);
    if (bad) {
        free(buf);
        return err_setf(err, CBX_ERR_IO, "%s: read error", path);
    }
    buf[got] = 0;
    *out = buf;
    *n = got;
    return CBX_OK;
}

cbx_status synth_manifest_load(const char *data_dir, const char *file,
                               struct synth_manifest **out, char *err)
{
    char path[4096];
    char *text = NULL;
    size_t n = 0;
    *out = NULL;
    int k = snprintf(path, sizeof path, "%s/manifests/%s.json", data_dir, file);
    if (k < 0 || (size_t)k >= sizeof path)
        return err_setf(err, CBX_ERR_INVALID_ARG, "data directory path too long");
    cbx_status rc = read_file(path, &text, &n, err);
    if (rc != CBX_OK) return rc;
    rc = synth_manifest_parse(text, n, path, data_dir, out, err);
    free(text);
    if (rc == CBX_OK && strcmp((*out)->file, file) != 0) {
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: \"file\" is \"%s\", expected \"%s\"", path,
                      (*out)->file, file);
        synth_manifest_free(*out);
        *out = NULL;
    }
    return rc;
}

void synth_tensor_fill(const struct synth_tensor *t, uint64_t file_seed, int64_t start,
                       int64_t n, void *dst)
{
    if (n <= 0) return;
    size_t es = t->type == TYPE_I64 ? 8 : 4;
    switch (t->rule) {
    case SYNTH_RANDOM:
        synth_fill_f32(dst, synth_key(t->name, file_seed), (uint64_t)start, (size_t)n,
                       t->scale, t->offset);
        break;
    case SYNTH_INT_RANGE:
        synth_fill_i64(dst, synth_key(t->name, file_seed), (uint64_t)start, (size_t)n, t->lo,
                       t->hi);
        break;
    case SYNTH_ZEROS:
        memset(dst, 0, (size_t)n * es);
        break;
    case SYNTH_RECIPE:
        memcpy(dst, (const char *)t->data + (size_t)start * es, (size_t)n * es);
        break;
    }
}

struct fill_job {
    const struct synth_tensor *t;
    uint64_t seed;
    int64_t start;
    char *dst;
    size_t es;
};

static void fill_range(void *ctx, int64_t b, int64_t e, int ith)
{
    (void)ith;
    const struct fill_job *j = ctx;
    synth_tensor_fill(j->t, j->seed, j->start + b, e - b, j->dst + (size_t)b * j->es);
}

void synth_tensor_fill_parallel(struct threadpool *tp, const struct synth_tensor *t,
                                uint64_t file_seed, int64_t start, int64_t n, void *dst)
{
    struct fill_job j = {t, file_seed, start, dst, t->type == TYPE_I64 ? 8 : 4};
    if (!tp || n < (1 << 16))
        fill_range(&j, 0, n, 0);
    else
        tp_parallel_for(tp, n, 1 << 15, fill_range, &j);
}

void synth_conds_tensors(enum model_variant v, struct synth_tensor out[SYNTH_N_CONDS])
{
    const struct variant *vi = variant_get(v);
    int64_t plen = vi ? vi->voice.prompt_len : 150;
    const int64_t tp = 250; /* 10 s decoder prompt: 250 tokens -> 500 mel frames */
    memset(out, 0, SYNTH_N_CONDS * sizeof *out);
    out[0] = (struct synth_tensor){.name = "conds.t3.speaker_emb", .type = TYPE_F32, .ndim = 2,
                                   .ne = {1, 256}, .rule = SYNTH_RANDOM, .scale = 0.1f};
    out[1] = (struct synth_tensor){.name = "conds.t3.cond_prompt_speech_tokens", .type = TYPE_I64,
                                   .ndim = 2, .ne = {1, plen}, .rule = SYNTH_INT_RANGE,
                                   .lo = 0, .hi = 6561};
    out[2] = (struct synth_tensor){.name = "conds.gen.prompt_token", .type = TYPE_I64, .ndim = 2,
                                   .ne = {1, tp}, .rule = SYNTH_INT_RANGE, .lo = 0, .hi = 6561};
    out[3] = (struct synth_tensor){.name = "conds.gen.prompt_feat", .type = TYPE_F32, .ndim = 3,
                                   .ne = {1, 2 * tp, 80}, .rule = SYNTH_RANDOM, .scale = 3.0f,
                                   .offset = -6.0f};
    out[4] = (struct synth_tensor){.name = "conds.gen.embedding", .type = TYPE_F32, .ndim = 2,
                                   .ne = {1, 192}, .rule = SYNTH_RANDOM, .scale = 1.0f};
}

/* ---- 3. directory writer ---------------------------------------------- */

#ifndef CBX_DEFAULT_DATA_DIR
#define CBX_DEFAULT_DATA_DIR "data"
#endif

static bool has_manifests(const char *dir)
{
    char p[4096];
    struct stat st;
    int k = snprintf(p, sizeof p, "%s/manifests", dir);
    return k > 0 && (size_t)k < sizeof p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool set_dir(char *buf, size_t n, const char *dir)
{
    int k = snprintf(buf, n, "%s", dir);
    return k > 0 && (size_t)k < n;
}

bool synth_data_dir(char *buf, size_t n, char *err)
{
    const char *env = getenv("CBX_DATA_DIR");
    if (env && *env) {
        if (has_manifests(env) && set_dir(buf, n, env)) return true;
        err_setf(err, CBX_ERR_NOT_FOUND, "CBX_DATA_DIR=%s has no manifests/ folder", env);
        return false;
    }
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            char cand[4096 + 32];
            snprintf(cand, sizeof cand, "%s/../share/chatterbox", exe);
            if (has_manifests(cand) && set_dir(buf, n, cand)) return true;
        }
    }
    if (has_manifests(CBX_DEFAULT_DATA_DIR) && set_dir(buf, n, CBX_DEFAULT_DATA_DIR)) return true;
    err_setf(err, CBX_ERR_NOT_FOUND,
             "no data directory with manifests/ found (set CBX_DATA_DIR; looked in "
             "<executable>/../share/chatterbox and %s)",
             CBX_DEFAULT_DATA_DIR);
    return false;
}

static const char *resolve_data_dir(const struct synth_options *opt, char *buf, size_t n,
                                    char *err)
{
    if (opt && opt->data_dir) return opt->data_dir;
    return synth_data_dir(buf, n, err) ? buf : NULL;
}

static void progress(const struct synth_options *opt, const char *file, uint64_t done,
                     uint64_t total)
{
    if (opt && opt->progress) opt->progress(opt->progress_user, file, done, total);
}

#define WRITE_BUF (8u << 20) /* bytes generated per write call */

static cbx_status write_safetensors(const struct synth_manifest *m, const char *path,
                                    uint64_t seed, const struct synth_options *opt, char *err)
{
    cbx_status rc = CBX_OK;
    struct io_st_entry *ent = NULL;
    struct io_safetensors_writer *w = NULL;
    char *buf = NULL;
    struct threadpool *tp = opt ? opt->tp : NULL;

    ent = calloc(m->n ? (size_t)m->n : 1, sizeof *ent);
    buf = malloc(WRITE_BUF);
    if (!ent || !buf) {
        rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", path);
        goto cleanup;
    }
    uint64_t total = 0;
    for (int i = 0; i < m->n; i++) {
        ent[i].name = m->t[i].name;
        ent[i].type = m->t[i].type;
        ent[i].ndim = m->t[i].ndim;
        memcpy(ent[i].ne, m->t[i].ne, sizeof ent[i].ne);
        total += synth_tensor_nbytes(&m->t[i]);
    }
    rc = io_safetensors_writer_open(path, m->n, ent, 0, NULL, &w, err);
    if (rc != CBX_OK) goto cleanup;

    /* Tensors are packed back to back into buf, which is written when full
     * (small tensors share a write; big ones span several). */
    size_t pos = 0;
    uint64_t done = 0;
    for (int i = 0; i < m->n && rc == CBX_OK; i++) {
        const struct synth_tensor *t = &m->t[i];
        size_t es = t->type == TYPE_I64 ? 8 : 4;
        int64_t left = synth_tensor_nelements(t), at = 0;
        while (left > 0) {
            int64_t take = (int64_t)((WRITE_BUF - pos) / es);
            if (take > left) take = left;
            if (take > 0) {
                synth_tensor_fill_parallel(tp, t, seed, at, take, buf + pos);
                pos += (size_t)take * es;
                at += take;
                left -= take;
            }
            if (WRITE_BUF - pos < 8) {
                rc = io_safetensors_writer_write(w, buf, pos, err);
                if (rc != CBX_OK) break;
                done += pos;
                pos = 0;
                progress(opt, m->file, done, total);
            }
        }
    }
    if (rc == CBX_OK && pos) {
        rc = io_safetensors_writer_write(w, buf, pos, err);
        done += pos;
    }
    if (rc == CBX_OK) {
        rc = io_safetensors_writer_close(w, err);
        w = NULL;
    }
    if (rc == CBX_OK) progress(opt, m->file, total, total);

cleanup:
    io_safetensors_writer_abort(w);
    free(buf);
    free(ent);
    return rc;
}

struct pt_fill_ctx {
    const struct synth_manifest *m;
    uint64_t seed;
    const struct synth_options *opt;
    uint64_t done, total;
};

static cbx_status pt_fill(void *user, size_t index, const char *name, const struct pt_tensor *t,
                          uint64_t off, void *buf, size_t n, char *err)
{
    struct pt_fill_ctx *c = user;
    (void)t;
    if (index >= (size_t)c->m->n || strcmp(name, c->m->t[index].name) != 0)
        return err_setf(err, CBX_ERR_INTERNAL, "%s: writer asked for tensor %zu '%s' out of order",
                        c->m->file, index, name);
    const struct synth_tensor *st = &c->m->t[index];
    size_t es = st->type == TYPE_I64 ? 8 : 4;
    synth_tensor_fill_parallel(c->opt ? c->opt->tp : NULL, st, c->seed, (int64_t)(off / es),
                               (int64_t)(n / es), buf);
    c->done += n;
    if (c->done >> 23 != (c->done - n) >> 23) progress(c->opt, c->m->file, c->done, c->total);
    return CBX_OK;
}

static cbx_status write_pt(const struct synth_manifest *m, const char *path, uint64_t seed,
                           const struct synth_options *opt, char *err)
{
    cbx_status rc = CBX_OK;
    struct pt_value *root = pt_dict_new(true); /* OrderedDict, as torch.save(sd) */
    if (!root) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", path);
    struct pt_fill_ctx c = {m, seed, opt, 0, 0};
    for (int i = 0; i < m->n && rc == CBX_OK; i++) {
        const struct synth_tensor *t = &m->t[i];
        c.total += synth_tensor_nbytes(t);
        rc = pt_dict_set(root, t->name, pt_tensor_borrow(t->type, t->ndim, t->ne, NULL));
        if (rc != CBX_OK) err_setf(err, rc, "%s: out of memory building the state dict", path);
    }
    if (rc == CBX_OK) rc = io_pt_write_stream(path, root, pt_fill, &c, err);
    if (rc == CBX_OK) progress(opt, m->file, c.total, c.total);
    pt_value_free(root);
    return rc;
}

cbx_status synth_write_file(const struct synth_manifest *m, const char *dir,
                            const struct synth_options *opt, char *err)
{
    char path[4096];
    int k = snprintf(path, sizeof path, "%s/%s", dir, m->file);
    if (k < 0 || (size_t)k >= sizeof path)
        return err_setf(err, CBX_ERR_INVALID_ARG, "%s: path too long", dir);
    uint64_t seed = m->seed ^ (opt ? opt->global_seed : 0);
    progress(opt, m->file, 0, 0);
    size_t l = strlen(m->file);
    if (l > 12 && !strcmp(m->file + l - 12, ".safetensors"))
        return write_safetensors(m, path, seed, opt, err);
    if (l > 3 && !strcmp(m->file + l - 3, ".pt")) return write_pt(m, path, seed, opt, err);
    return err_setf(err, CBX_ERR_UNSUPPORTED, "%s: unknown file type (.safetensors or .pt)",
                    m->file);
}

static struct pt_value *gen_tensor(const struct synth_tensor *t, uint64_t seed)
{
    struct pt_value *v = pt_tensor_new(t->type, t->ndim, t->ne, NULL);
    if (v) synth_tensor_fill(t, seed, 0, synth_tensor_nelements(t), v->u.t.data);
    return v;
}

cbx_status synth_write_conds(enum model_variant v, const char *dir,
                             const struct synth_options *opt, char *err)
{
    struct synth_tensor ct[SYNTH_N_CONDS];
    uint64_t seed = opt ? opt->global_seed : 0;
    char path[4096];
    cbx_status rc = CBX_OK;
    struct pt_value *root = NULL, *t3 = NULL, *gen = NULL;
    const struct variant *vi = variant_get(v);
    if (!vi) return err_setf(err, CBX_ERR_INVALID_ARG, "bad variant %d", (int)v);
    int k = snprintf(path, sizeof path, "%s/%s", dir, vi->conds_file);
    if (k < 0 || (size_t)k >= sizeof path)
        return err_setf(err, CBX_ERR_INVALID_ARG, "%s: path too long", dir);
    synth_conds_tensors(v, ct);
    progress(opt, vi->conds_file, 0, 0);

    /* torch.save(dict(t3=dict(...), gen=dict(...))): plain dicts, upstream
     * T3Cond / S3Gen ref_dict field order. */
    root = pt_dict_new(false);
    t3 = pt_dict_new(false);
    gen = pt_dict_new(false);
    if (!root || !t3 || !gen) {
        pt_value_free(t3);
        pt_value_free(gen);
        rc = CBX_ERR_NOMEM;
        goto cleanup;
    }
    const float half = 0.5f;
    const int64_t one3[3] = {1, 1, 1}, one1[1] = {1};
    const int64_t tp_len = ct[2].ne[1];
    if (rc == CBX_OK) rc = pt_dict_set(t3, "speaker_emb", gen_tensor(&ct[0], seed));
    if (rc == CBX_OK) rc = pt_dict_set(t3, "clap_emb", pt_none());
    if (rc == CBX_OK) rc = pt_dict_set(t3, "cond_prompt_speech_tokens", gen_tensor(&ct[1], seed));
    if (rc == CBX_OK) rc = pt_dict_set(t3, "cond_prompt_speech_emb", pt_none());
    if (rc == CBX_OK) rc = pt_dict_set(t3, "emotion_adv", pt_tensor_new(TYPE_F32, 3, one3, &half));
    if (rc == CBX_OK) rc = pt_dict_set(gen, "prompt_token", gen_tensor(&ct[2], seed));
    if (rc == CBX_OK) rc = pt_dict_set(gen, "prompt_token_len", pt_tensor_new(TYPE_I64, 1, one1, &tp_len));
    if (rc == CBX_OK) rc = pt_dict_set(gen, "prompt_feat", gen_tensor(&ct[3], seed));
    if (rc == CBX_OK) rc = pt_dict_set(gen, "prompt_feat_len", pt_none());
    if (rc == CBX_OK) rc = pt_dict_set(gen, "embedding", gen_tensor(&ct[4], seed));
    if (rc != CBX_OK) {
        pt_value_free(t3);
        pt_value_free(gen);
        goto cleanup;
    }
    rc = pt_dict_set(root, "t3", t3);
    if (rc == CBX_OK) rc = pt_dict_set(root, "gen", gen);
    else pt_value_free(gen);
    if (rc == CBX_OK) rc = io_pt_write(path, root, err);
    if (rc == CBX_OK) progress(opt, vi->conds_file, 1, 1);

cleanup:
    if (rc == CBX_ERR_NOMEM) err_setf(err, rc, "%s: out of memory", path);
    pt_value_free(root);
    return rc;
}

/* Copy src to dst through a temp file and rename. */
static cbx_status copy_file(const char *src, const char *dst, char *err)
{
    struct atomic_file out;
    char *buf = NULL;
    FILE *in = fopen(src, "rb");
    if (!in) return err_setf(err, CBX_ERR_IO, "%s: %s", src, strerror(errno));
    cbx_status rc = atomic_file_open(&out, dst, err);
    if (rc == CBX_OK && !(buf = malloc(1 << 16))) rc = err_setf(err, CBX_ERR_NOMEM, "out of memory");
    if (rc == CBX_OK) {
        size_t n;
        while ((n = fread(buf, 1, 1 << 16, in)) > 0)
            if (fwrite(buf, 1, n, out.f) != n) break;
        if (ferror(in) || ferror(out.f)) rc = err_setf(err, CBX_ERR_IO, "copying %s to %s failed", src, out.tmp);
    }
    if (rc == CBX_OK) rc = atomic_file_commit(&out, err);
    atomic_file_abort(&out);
    free(buf);
    fclose(in);
    return rc;
}

cbx_status synth_write_variant(enum model_variant v, const char *dir,
                               const struct synth_options *opt, char *err)
{
    const struct variant *vi = variant_get(v);
    char dbuf[4096];
    struct synth_manifest *m = NULL;
    struct synth_options o = opt ? *opt : (struct synth_options){0};
    if (!vi) return err_setf(err, CBX_ERR_INVALID_ARG, "bad variant %d", (int)v);
    const char *data = resolve_data_dir(&o, dbuf, sizeof dbuf, err);
    if (!data) return CBX_ERR_NOT_FOUND;
    o.data_dir = data;
    cbx_status rc = io_mkdir_p(dir, err);
    if (rc != CBX_OK) return rc;

    /* synth.py order: voice encoder, T3, S3Gen. */
    const enum model_component order[MODEL_N_COMPONENTS] = {MODEL_VE, MODEL_T3, MODEL_S3GEN};
    int64_t text_vocab = 0; /* text_emb rows: the tokenizer's size */
    for (int i = 0; i < MODEL_N_COMPONENTS; i++) {
        rc = synth_manifest_load(data, vi->file[order[i]], &m, err);
        for (int t = 0; rc == CBX_OK && order[i] == MODEL_T3 && t < m->n; t++)
            if (!strcmp(m->t[t].name, "text_emb.weight") && m->t[t].ndim == 2) text_vocab = m->t[t].ne[0];
        if (rc == CBX_OK) rc = synth_write_file(m, dir, &o, err);
        synth_manifest_free(m);
        m = NULL;
        if (rc != CBX_OK) return rc;
    }
    rc = synth_write_conds(v, dir, &o, err);
    if (rc != CBX_OK) return rc;

    /* Tokenizer files: copied when the data directory has them (the
     * English and multilingual ones are not available, as in synth.py);
     * the grapheme front ends then get synthetic ones (synth_tokenizer.h)
     * of the T3's text vocabulary. */
    bool have[VARIANT_MAX_TOKENIZER_FILES] = {false};
    for (int i = 0; vi->tokenizer_data_dir && vi->tokenizer_files[i]; i++) {
        char src[4096], dst[4096];
        int a = snprintf(src, sizeof src, "%s/%s/%s", data, vi->tokenizer_data_dir,
                         vi->tokenizer_files[i]);
        int b = snprintf(dst, sizeof dst, "%s/%s", dir, vi->tokenizer_files[i]);
        if (a < 0 || b < 0 || (size_t)a >= sizeof src || (size_t)b >= sizeof dst)
            return err_setf(err, CBX_ERR_INVALID_ARG, "%s: path too long", dir);
        struct stat st;
        if (stat(src, &st) != 0) continue;
        rc = copy_file(src, dst, err);
        if (rc != CBX_OK) return rc;
        have[i] = true;
        progress(&o, vi->tokenizer_files[i], 1, 1);
    }
    for (int i = 0; vi->tokenizer == VARIANT_TOK_GRAPHEME && vi->tokenizer_files[i]; i++) {
        const char *f = vi->tokenizer_files[i];
        char dst[4096];
        int b = snprintf(dst, sizeof dst, "%s/%s", dir, f);
        if (b < 0 || (size_t)b >= sizeof dst) return err_setf(err, CBX_ERR_INVALID_ARG, "%s: path too long", dir);
        if (have[i]) continue;
        if (!strcmp(f, "tokenizer.json")) {
            if (text_vocab != SYNTH_ENGLISH_TEXT_VOCAB)
                return err_setf(err, CBX_ERR_FORMAT, "%s: text_emb has %lld rows, the synthetic tokenizer.json %d",
                                vi->file[MODEL_T3], (long long)text_vocab, SYNTH_ENGLISH_TEXT_VOCAB);
            rc = synth_write_english_tokenizer(dst, err);
        } else if (!strcmp(f, "grapheme_mtl_merged_expanded_v1.json")) {
            rc = synth_write_mtl_tokenizer(dst, (int)text_vocab, err);
        } else if (!strcmp(f, "Cangjie5_TC.json")) {
            rc = synth_write_cangjie(dst, err);
        } else {
            continue;
        }
        if (rc != CBX_OK) return rc;
        progress(&o, f, 1, 1);
    }
    return CBX_OK;
}
