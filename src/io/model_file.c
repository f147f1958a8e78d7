/* model_file.c - one model API over a Hugging Face directory or a
 * Chatterbox GGUF file, and the directory -> GGUF converter. The GGUF
 * layout and its metadata keys are documented in model_file.h. */
#include "io/model_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/quant.h"
#include "io/quant_policy.h"
#include "core/hash.h"

#define N_PARTS (MODEL_N_COMPONENTS + 1) /* t3, s3gen, ve, conds */
static const char *const part_names[N_PARTS] = {"t3", "s3gen", "ve", "conds"};

struct model {
    char *path;
    enum model_variant variant;
    struct model_dir *md;       /* a directory, or */
    struct io_gguf *g;          /* a GGUF file */
    int begin[N_PARTS + 1];     /* tensor index range of each part */
    int *slot;                  /* name -> index + 1, open addressing */
    size_t mask;
    const struct io_gguf_str *none; /* chatterbox.conds.none */
    uint64_t n_none;
};

/* ---- opening ------------------------------------------------------------ */

void model_close(struct model *m)
{
    if (!m) return;
    model_dir_close(m->md);
    io_gguf_close(m->g);
    free(m->slot);
    free(m->path);
    free(m);
}

static uint64_t hash_name(const char *s) { return hash_fnv1a64(s, strlen(s)); }

static int gguf_index(const struct model *m, const char *name)
{
    for (size_t h = hash_name(name) & m->mask;; h = (h + 1) & m->mask) {
        int s = m->slot[h];
        if (!s) return -1;
        if (!strcmp(io_gguf_tensor(m->g, s - 1)->name, name)) return s - 1;
    }
}

static cbx_status get_u32_key(const struct io_gguf *g, const char *path, const char *key, uint32_t *v,
                              char *err)
{
    cbx_status rc = io_gguf_get_u32(g, key, v, err);
    if (rc == CBX_ERR_NOT_FOUND)
        return err_setf(err, CBX_ERR_FORMAT, "%s: metadata key %s is missing (not a file written by 'chatterbox convert')",
                        path, key);
    return rc;
}

/* Validate the metadata of a converted file and index its tensors. */
static cbx_status open_gguf(struct model *m, int variant, char *err)
{
    const struct io_gguf *g = m->g;
    const char *p = m->path, *s = NULL;
    cbx_status rc = io_gguf_get_str(g, "general.architecture", &s, NULL, err);
    if (rc == CBX_ERR_NOT_FOUND)
        return err_setf(err, CBX_ERR_FORMAT, "%s: no general.architecture: not a Chatterbox model file", p);
    if (rc != CBX_OK) return rc;
    if (strcmp(s, "chatterbox") != 0)
        return err_setf(err, CBX_ERR_FORMAT, "%s: general.architecture is '%s', not 'chatterbox'", p, s);
    uint32_t fv = 0;
    if ((rc = get_u32_key(g, p, "chatterbox.format_version", &fv, err)) != CBX_OK) return rc;
    if (fv < 1 || fv > MODEL_FILE_FORMAT_VERSION)
        return err_setf(err, CBX_ERR_UNSUPPORTED, "%s: chatterbox.format_version %u (this build reads 1..%d)", p, fv,
                        MODEL_FILE_FORMAT_VERSION);
    rc = io_gguf_get_str(g, "chatterbox.variant", &s, NULL, err);
    if (rc == CBX_ERR_NOT_FOUND) return err_setf(err, CBX_ERR_FORMAT, "%s: chatterbox.variant is missing", p);
    if (rc != CBX_OK) return rc;
    const struct variant *row = variant_by_name(s);
    if (!row)
        return err_setf(err, CBX_ERR_FORMAT, "%s: chatterbox.variant '%s' unknown (%s)", p, s, variant_names());
    int v = (int)row->id;
    if (variant >= 0 && v != variant)
        return err_setf(err, CBX_ERR_INVALID_ARG, "%s: holds the %s model, not %s", p, s,
                        variant_get((enum model_variant)variant) ? variant_get((enum model_variant)variant)->name : "?");
    m->variant = (enum model_variant)v;
    rc = io_gguf_get_str(g, "chatterbox.t3.conv1d_layout", &s, NULL, err);
    if (rc == CBX_OK && strcmp(s, "out_in") != 0)
        return err_setf(err, CBX_ERR_UNSUPPORTED, "%s: chatterbox.t3.conv1d_layout '%s' unknown (out_in)", p, s);
    if (rc != CBX_OK && rc != CBX_ERR_NOT_FOUND) return rc;

    uint64_t total = 0;
    for (int i = 0; i < N_PARTS; i++) {
        char key[64];
        uint32_t n = 0;
        snprintf(key, sizeof key, "chatterbox.%s.tensor_count", part_names[i]);
        if ((rc = get_u32_key(g, p, key, &n, err)) != CBX_OK) return rc;
        m->begin[i] = (int)total;
        total += n;
    }
    int nt = io_gguf_n_tensors(g);
    if (total != (uint64_t)nt)
        return err_setf(err, CBX_ERR_FORMAT, "%s: the tensor counts of t3, s3gen, ve and conds add up to %llu, the file holds %d",
                        p, (unsigned long long)total, nt);
    m->begin[N_PARTS] = nt;
    for (int i = m->begin[MODEL_N_COMPONENTS]; i < nt; i++)
        if (strncmp(io_gguf_tensor(g, i)->name, "conds.", 6) != 0)
            return err_setf(err, CBX_ERR_FORMAT, "%s: tensor %d '%s' in the conds range is not named conds.*", p, i,
                            io_gguf_tensor(g, i)->name);
    const void *data = NULL;
    rc = io_gguf_get_arr(g, "chatterbox.conds.none", GGUF_TYPE_STRING, &data, &m->n_none, err);
    if (rc == CBX_OK) m->none = data;
    else if (rc != CBX_ERR_NOT_FOUND) return rc;

    size_t ns = 16;
    while (ns < 2 * (size_t)nt) ns <<= 1;
    if (!(m->slot = calloc(ns, sizeof *m->slot))) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", p);
    m->mask = ns - 1;
    for (int i = 0; i < nt; i++) { /* names are unique: the reader checked */
        size_t h = hash_name(io_gguf_tensor(g, i)->name) & m->mask;
        while (m->slot[h]) h = (h + 1) & m->mask;
        m->slot[h] = i + 1;
    }
    return CBX_OK;
}

cbx_status model_open_as(const char *path, int variant, struct model **out, char *err)
{
    *out = NULL;
    if (!path || !*path) return err_setf(err, CBX_ERR_INVALID_ARG, "model: empty path");
    struct stat st;
    if (stat(path, &st) != 0) return err_setf(err, CBX_ERR_IO, "%s: %s", path, strerror(errno));
    struct model *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        return err_setf(err, CBX_ERR_NOMEM, "model: out of memory");
    }
    cbx_status rc;
    if (S_ISDIR(st.st_mode)) {
        rc = model_dir_open_as(path, variant, &m->md, err);
        if (rc == CBX_OK) m->variant = model_dir_variant(m->md);
    } else {
        rc = io_gguf_open(path, &m->g, err);
        if (rc == CBX_OK) rc = open_gguf(m, variant, err);
    }
    if (rc != CBX_OK) {
        model_close(m);
        return rc;
    }
    *out = m;
    return CBX_OK;
}

cbx_status model_open(const char *path, struct model **out, char *err)
{
    return model_open_as(path, -1, out, err);
}

enum model_variant model_get_variant(const struct model *m) { return m->variant; }
const char *model_path(const struct model *m) { return m->path; }
bool model_is_gguf(const struct model *m) { return m->g != NULL; }
const struct model_dir *model_get_dir(const struct model *m) { return m->md; }
const struct io_gguf *model_get_gguf(const struct model *m) { return m->g; }

/* ---- lookup ------------------------------------------------------------- */

static bool part_ok(int c) { return c >= 0 && c < N_PARTS; }

static const struct tensor *gguf_find(const struct model *m, int part, const char *name)
{
    int i = gguf_index(m, name);
    if (i < m->begin[part] || i >= m->begin[part + 1]) return NULL;
    return io_gguf_tensor(m->g, i);
}

int model_stored_wtype(const struct model *m)
{
    if (!model_is_gguf(m)) return TYPE_F32;
    const char *q = NULL;
    if (io_gguf_get_str(model_get_gguf(m), "chatterbox.quantization", &q, NULL, NULL) != CBX_OK || !q)
        return TYPE_F32;
    int t = dtype_from_name(q);
    return t < 0 ? TYPE_F32 : t;
}

const struct tensor *model_find(const struct model *m, enum model_component c, const char *name)
{
    if (!m || !name || !part_ok((int)c) || c == MODEL_N_COMPONENTS) return NULL;
    return m->md ? model_dir_find(m->md, c, name) : gguf_find(m, (int)c, name);
}

static const struct tensor *find_fn(const void *ctx, int part, const char *name)
{
    return model_find(ctx, (enum model_component)part, name);
}

struct weights model_weights(const struct model *m, enum model_component c)
{
    struct weights w = {find_fn, m, (int)c, model_component_name(c), !m->md || model_dir_mapped(m->md, c)};
    return w;
}

int model_count(const struct model *m, enum model_component c)
{
    if (!m || !part_ok((int)c) || c == MODEL_N_COMPONENTS) return 0;
    return m->md ? model_dir_count(m->md, c) : m->begin[c + 1] - m->begin[c];
}

const struct tensor *model_tensor(const struct model *m, enum model_component c, int i)
{
    if (!m || i < 0 || i >= model_count(m, c)) return NULL;
    return m->md ? model_dir_tensor(m->md, c, i) : io_gguf_tensor(m->g, m->begin[c] + i);
}

const struct tensor *model_cond(const struct model *m, const char *path, bool *is_none)
{
    if (is_none) *is_none = false;
    if (!m || !path) return NULL;
    if (m->md) return model_dir_cond(m->md, path, is_none);
    char name[256];
    int k = snprintf(name, sizeof name, "conds.%s", path);
    if (k < 0 || (size_t)k >= sizeof name) return NULL;
    const struct tensor *t = gguf_find(m, MODEL_N_COMPONENTS, name);
    if (!t && is_none)
        for (uint64_t i = 0; i < m->n_none; i++)
            if (!strcmp(m->none[i].s, path)) *is_none = true;
    return t;
}

/* ---- tokenizer files ---------------------------------------------------- */

bool model_text_file_key(const char *file, char *buf, size_t n)
{
    if (!strncmp(file, "tokenizer_", 10)) file += 10;
    int k = snprintf(buf, n, "tokenizer.%s", file);
    if (k < 0 || (size_t)k >= n) return false;
    for (char *s = buf + 10; *s; s++)
        if (*s == '.') *s = '_';
    return true;
}

static cbx_status read_file(const char *path, char **text, size_t *len, char *err)
{
    cbx_status rc = CBX_OK;
    char *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return err_setf(err, errno == ENOENT ? CBX_ERR_NOT_FOUND : CBX_ERR_IO, "%s: %s", path, strerror(errno));
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
        rc = err_setf(err, CBX_ERR_IO, "%s: cannot determine its size", path);
        goto cleanup;
    }
    if (!(buf = malloc((size_t)n + 1))) {
        rc = err_setf(err, CBX_ERR_NOMEM, "%s: out of memory for %ld bytes", path, n);
        goto cleanup;
    }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        rc = err_setf(err, CBX_ERR_IO, "%s: read failed", path);
        goto cleanup;
    }
    buf[n] = 0;
    *text = buf;
    if (len) *len = (size_t)n;
    buf = NULL;
cleanup:
    free(buf);
    fclose(f);
    return rc;
}

cbx_status model_text_file(const struct model *m, const char *file, char **text, size_t *len, char *err)
{
    *text = NULL;
    if (len) *len = 0;
    if (m->md) {
        char path[4096];
        bool exists = false;
        if (!model_dir_file_path(m->md, file, path, sizeof path, &exists))
            return err_setf(err, CBX_ERR_INVALID_ARG, "%s: path of %s too long", m->path, file);
        if (!exists) return err_setf(err, CBX_ERR_NOT_FOUND, "%s: no tokenizer file %s", m->path, file);
        return read_file(path, text, len, err);
    }
    char key[256];
    const char *s = NULL;
    uint64_t n = 0;
    if (!model_text_file_key(file, key, sizeof key))
        return err_setf(err, CBX_ERR_INVALID_ARG, "%s: tokenizer file name %s too long", m->path, file);
    cbx_status rc = io_gguf_get_str(m->g, key, &s, &n, err);
    if (rc == CBX_ERR_NOT_FOUND)
        return err_setf(err, CBX_ERR_NOT_FOUND, "%s: no tokenizer file %s (metadata key %s)", m->path, file, key);
    if (rc != CBX_OK) return rc;
    if (!(*text = malloc((size_t)n + 1))) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", m->path);
    memcpy(*text, s, (size_t)n + 1);
    if (len) *len = (size_t)n;
    return CBX_OK;
}

/* ---- convert ------------------------------------------------------------ */

/* One output tensor. */
struct plan {
    const struct tensor *src;
    char name[256];
    enum dtype type;
    int ndim;
    int64_t ne[TENSOR_MAX_DIMS];
    bool transpose; /* GPT-2 Conv1D [in, out] -> [out, in] */
};

#define TILE 32 /* output rows per transpose tile */

/* transformers Conv1D weights of the GPT-2 T3 (upstream [in, out]). */
static bool is_conv1d(enum model_variant v, enum model_component c, const struct tensor *t)
{
    static const char *const suffix[] = {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight",
                                         ".mlp.c_proj.weight"};
    if (variant_get(v)->backbone != VARIANT_T3_GPT2 || c != MODEL_T3 || t->ndim != 2 || strncmp(t->name, "tfmr.h.", 7))
        return false;
    size_t n = strlen(t->name);
    for (int i = 0; i < 4; i++) {
        size_t k = strlen(suffix[i]);
        if (n > k && !strcmp(t->name + n - k, suffix[i])) return true;
    }
    return false;
}

/* llama.cpp's general.file_type (enum llama_ftype) of a target type. */
static uint32_t file_type(enum dtype t)
{
    switch (t) {
    case TYPE_F16: return 1;
    case TYPE_Q4_0: return 2;
    case TYPE_Q4_1: return 3;
    case TYPE_Q8_0: return 7;
    case TYPE_Q5_0: return 8;
    case TYPE_Q5_1: return 9;
    case TYPE_BF16: return 32;
    default: return 0;
    }
}

static uint64_t plan_bytes(const struct plan *p)
{
    if (p->ndim == 0) return dtype_traits(p->type)->size;
    uint64_t n = dtype_row_size(p->type, p->ne[p->ndim - 1]);
    for (int d = 0; d < p->ndim - 1; d++) n *= (uint64_t)p->ne[d];
    return n;
}

static int64_t plan_inner(const struct plan *p) { return p->ndim ? p->ne[p->ndim - 1] : 1; }

/* Hyper-parameters worth showing in `info`, read off the T3 shapes. */
static cbx_status set_hparams(struct io_gguf_writer *w, const struct model_dir *md, char *err)
{
    cbx_status rc = CBX_OK;
    const struct tensor *t;
    char name[96];
    int n_layer = 0;
    for (;; n_layer++) {
        snprintf(name, sizeof name, "tfmr.h.%d.ln_1.weight", n_layer);
        if (model_dir_find(md, MODEL_T3, name)) continue;
        snprintf(name, sizeof name, "tfmr.layers.%d.input_layernorm.weight", n_layer);
        if (!model_dir_find(md, MODEL_T3, name)) break;
    }
    if (n_layer) rc = io_gguf_writer_set_u32(w, "chatterbox.t3.n_layer", (uint32_t)n_layer, err);
    if (rc == CBX_OK && (t = model_dir_find(md, MODEL_T3, "text_emb.weight")) && t->ndim == 2) {
        rc = io_gguf_writer_set_u32(w, "chatterbox.t3.d_model", (uint32_t)t->ne[1], err);
        if (rc == CBX_OK) rc = io_gguf_writer_set_u32(w, "chatterbox.t3.text_vocab", (uint32_t)t->ne[0], err);
    }
    if (rc == CBX_OK && (t = model_dir_find(md, MODEL_T3, "speech_emb.weight")) && t->ndim == 2)
        rc = io_gguf_writer_set_u32(w, "chatterbox.t3.speech_vocab", (uint32_t)t->ne[0], err);
    if (rc == CBX_OK && (t = model_dir_find(md, MODEL_T3, "tfmr.wpe.weight")) && t->ndim == 2)
        rc = io_gguf_writer_set_u32(w, "chatterbox.t3.n_ctx", (uint32_t)t->ne[0], err);
    return rc;
}

/* Every tokenizer file of the directory as a string. */
static cbx_status set_tokenizer(struct io_gguf_writer *w, const struct model_dir *md, char *err)
{
    const char *const *files = variant_get(model_dir_variant(md))->tokenizer_files;
    for (int i = 0; files[i]; i++) {
        char path[4096], key[256];
        bool exists = false;
        if (!model_dir_file_path(md, files[i], path, sizeof path, &exists) || !exists) continue;
        char *text = NULL;
        size_t len = 0;
        cbx_status rc = read_file(path, &text, &len, err);
        if (rc != CBX_OK) return rc;
        struct io_gguf_value v;
        memset(&v, 0, sizeof v);
        v.type = GGUF_TYPE_STRING;
        v.v.str.s = text;
        v.v.str.len = len;
        model_text_file_key(files[i], key, sizeof key);
        rc = io_gguf_writer_set(w, key, &v, err);
        free(text);
        if (rc != CBX_OK) return rc;
    }
    return CBX_OK;
}

/* Stream one tensor's data into the writer. fbuf holds TILE * inner
 * floats, obuf obuf_cap bytes (at least TILE output rows). */
static cbx_status emit(struct io_gguf_writer *w, const struct plan *p, float *fbuf, char *obuf, size_t obuf_cap,
                       char *err)
{
    const struct tensor *s = p->src;
    if (!p->transpose && s->type == p->type) /* as stored: straight from the mapping */
        return io_gguf_writer_append(w, s->data, (size_t)plan_bytes(p), err);
    cbx_status rc = CBX_OK;
    size_t used = 0;
    if (!p->transpose) { /* convert row by row */
        int64_t inner = plan_inner(p), rows = tensor_nrows(s);
        size_t in_rs = dtype_row_size(s->type, inner), out_rs = dtype_row_size(p->type, inner);
        for (int64_t r = 0; r < rows && rc == CBX_OK; r++) {
            dequantize_row(s->type, (const char *)s->data + (size_t)r * in_rs, fbuf, inner);
            quantize_row(p->type, fbuf, obuf + used, inner);
            used += out_rs;
            if (used + out_rs > obuf_cap || r + 1 == rows) {
                rc = io_gguf_writer_append(w, obuf, used, err);
                used = 0;
            }
        }
        return rc;
    }
    /* src [in, out] -> rows of [out, in], TILE output rows at a time so each
     * source row is read in contiguous runs */
    int64_t in = s->ne[0], out = s->ne[1];
    size_t es = dtype_traits(s->type)->size, out_rs = dtype_row_size(p->type, in);
    float seg[TILE];
    for (int64_t o0 = 0; o0 < out && rc == CBX_OK; o0 += TILE) {
        int64_t nb = out - o0 < TILE ? out - o0 : TILE;
        for (int64_t i = 0; i < in; i++) {
            dequantize_row(s->type, (const char *)s->data + (size_t)i * (size_t)s->nb[0] + (size_t)o0 * es, seg, nb);
            for (int64_t j = 0; j < nb; j++) fbuf[j * in + i] = seg[j];
        }
        for (int64_t j = 0; j < nb; j++) quantize_row(p->type, fbuf + j * in, obuf + (size_t)j * out_rs, in);
        rc = io_gguf_writer_append(w, obuf, (size_t)nb * out_rs, err);
    }
    return rc;
}

cbx_status model_convert(const char *src, const char *dst, const struct model_convert_params *prm, char *err)
{
    cbx_status rc = CBX_OK;
    struct model_dir *md = NULL;
    struct io_gguf_writer *w = NULL;
    struct plan *plan = NULL;
    float *fbuf = NULL;
    char *obuf = NULL;
    bool streaming = false;
    int n = 0, count[N_PARTS] = {0};
    const char *none[VARIANT_MAX_CONDS_KEYS];
    const char *const *cond_paths = NULL; /* the row's conds.pt entries */
    int n_cond_paths = 0;
    int n_none = 0;

    if (!quant_policy_target_ok(prm->type))
        return err_setf(err, CBX_ERR_INVALID_ARG, "convert: cannot write weights as %s (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1)",
                        dtype_name(prm->type));
    struct stat st;
    if (stat(src, &st) != 0) return err_setf(err, CBX_ERR_IO, "%s: %s", src, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return err_setf(err, CBX_ERR_INVALID_ARG, "%s: convert reads a Hugging Face model directory, not a file", src);
    if ((rc = model_dir_open_as(src, prm->variant, &md, err)) != CBX_OK) return rc;
    enum model_variant v = model_dir_variant(md);
    cond_paths = variant_get(v)->conds_keys;
    while (cond_paths[n_cond_paths]) n_cond_paths++;

    /* the plan: every tensor of t3, s3gen, ve, then the conds */
    int total = n_cond_paths;
    for (int c = 0; c < MODEL_N_COMPONENTS; c++) total += model_dir_count(md, (enum model_component)c);
    if (!(plan = calloc((size_t)total, sizeof *plan))) {
        rc = err_setf(err, CBX_ERR_NOMEM, "convert: out of memory");
        goto cleanup;
    }
    int64_t max_f = 1;
    size_t max_tile = 1;
    for (int c = 0; c < N_PARTS && rc == CBX_OK; c++) {
        int k = c < MODEL_N_COMPONENTS ? model_dir_count(md, (enum model_component)c) : n_cond_paths;
        for (int i = 0; i < k; i++) {
            struct plan *p = &plan[n];
            bool is_none = false;
            if (c < MODEL_N_COMPONENTS) {
                p->src = model_dir_tensor(md, (enum model_component)c, i);
                snprintf(p->name, sizeof p->name, "%s", p->src->name);
            } else {
                p->src = model_dir_cond(md, cond_paths[i], &is_none);
                if (is_none) none[n_none++] = cond_paths[i];
                if (!p->src) continue;
                snprintf(p->name, sizeof p->name, "conds.%s", cond_paths[i]);
            }
            const struct tensor *s = p->src;
            const char *file = c < MODEL_N_COMPONENTS ? variant_get(v)->file[c] : variant_get(v)->conds_file;
            if (s->type == TYPE_U8 || s->type == TYPE_BOOL) {
                rc = err_setf(err, CBX_ERR_UNSUPPORTED, "%s/%s: tensor %s has type %s, which GGUF cannot hold", src,
                              file, p->name, dtype_name(s->type));
                break;
            }
            if (!tensor_is_contiguous(s)) {
                rc = err_setf(err, CBX_ERR_FORMAT, "%s/%s: tensor %s is not contiguous", src, file, p->name);
                break;
            }
            p->ndim = s->ndim;
            memcpy(p->ne, s->ne, sizeof p->ne);
            p->transpose = c < MODEL_N_COMPONENTS && is_conv1d(v, (enum model_component)c, s);
            if (p->transpose) {
                p->ne[0] = s->ne[1];
                p->ne[1] = s->ne[0];
            }
            p->type = c < MODEL_N_COMPONENTS ? quant_policy_type(p->name, p->ndim, p->ne, s->type, prm->type, NULL)
                                             : s->type;
            if (p->transpose && p->type == s->type && s->type != TYPE_F32 && s->type != TYPE_F16 &&
                s->type != TYPE_BF16) {
                rc = err_setf(err, CBX_ERR_UNSUPPORTED, "%s/%s: cannot transpose %s tensor %s", src, file,
                              dtype_name(s->type), p->name);
                break;
            }
            if (p->transpose || p->type != s->type) {
                int64_t in = plan_inner(p), rows = p->transpose ? TILE : 1;
                size_t tile = (size_t)rows * dtype_row_size(p->type, in);
                if (in * rows > max_f) max_f = in * rows;
                if (tile > max_tile) max_tile = tile;
            }
            count[c]++;
            n++;
        }
    }
    if (rc != CBX_OK) goto cleanup;

    /* metadata */
    const enum dtype T = prm->type;
    const struct variant *vi = variant_get(v);
    if ((rc = io_gguf_writer_create(&w, err)) != CBX_OK) goto cleanup;
    rc = io_gguf_writer_set_str(w, "general.architecture", "chatterbox", err);
    if (rc == CBX_OK) rc = io_gguf_writer_set_u32(w, "general.alignment", 64, err);
    if (rc == CBX_OK) rc = io_gguf_writer_set_u32(w, "general.file_type", file_type(T), err);
    if (rc == CBX_OK && dtype_traits(T)->quantized)
        rc = io_gguf_writer_set_u32(w, "general.quantization_version", 2, err);
    if (rc == CBX_OK) rc = io_gguf_writer_set_u32(w, "chatterbox.format_version", MODEL_FILE_FORMAT_VERSION, err);
    if (rc == CBX_OK) rc = io_gguf_writer_set_str(w, "chatterbox.variant", vi->name, err);
    if (rc == CBX_OK) rc = io_gguf_writer_set_str(w, "chatterbox.source", src, err);
    if (rc == CBX_OK) rc = io_gguf_writer_set_str(w, "chatterbox.quantization", dtype_name(T), err);
    for (int c = 0; c < N_PARTS && rc == CBX_OK; c++) {
        char key[64];
        if (c < MODEL_N_COMPONENTS) {
            snprintf(key, sizeof key, "chatterbox.%s.file", part_names[c]);
            rc = io_gguf_writer_set_str(w, key, vi->file[c], err);
        }
        snprintf(key, sizeof key, "chatterbox.%s.tensor_count", part_names[c]);
        if (rc == CBX_OK) rc = io_gguf_writer_set_u32(w, key, (uint32_t)count[c], err);
    }
    if (rc == CBX_OK && vi->backbone == VARIANT_T3_GPT2)
        rc = io_gguf_writer_set_str(w, "chatterbox.t3.conv1d_layout", "out_in", err);
    if (rc == CBX_OK) rc = set_hparams(w, md, err);
    if (rc == CBX_OK) rc = io_gguf_writer_set_u32(w, "chatterbox.conds.cond_prompt_len", (uint32_t)vi->voice.prompt_len, err);
    if (rc == CBX_OK) rc = io_gguf_writer_set_arr(w, "chatterbox.conds.none", GGUF_TYPE_STRING, none, (uint64_t)n_none, err);
    if (rc == CBX_OK) rc = set_tokenizer(w, md, err);
    uint64_t bytes_total = 0;
    for (int i = 0; i < n && rc == CBX_OK; i++) {
        rc = io_gguf_writer_add_tensor(w, plan[i].name, plan[i].type, plan[i].ndim, plan[i].ne, NULL, err);
        bytes_total += plan_bytes(&plan[i]);
    }
    if (rc != CBX_OK) goto cleanup;

    /* data, one tensor at a time */
    size_t obuf_cap = max_tile > ((size_t)4 << 20) ? max_tile : (size_t)4 << 20;
    fbuf = malloc(sizeof(float) * (size_t)max_f);
    obuf = malloc(obuf_cap);
    if (!fbuf || !obuf) {
        rc = err_setf(err, CBX_ERR_NOMEM, "convert: out of memory for %zu bytes of buffers", obuf_cap + 4 * (size_t)max_f);
        goto cleanup;
    }
    if ((rc = io_gguf_writer_begin(w, dst, err)) != CBX_OK) goto cleanup;
    streaming = true;
    uint64_t bytes = 0;
    for (int i = 0; i < n && rc == CBX_OK; i++) {
        if (prm->progress) prm->progress(prm->progress_user, i, n, plan[i].name, bytes, bytes_total);
        rc = emit(w, &plan[i], fbuf, obuf, obuf_cap, err);
        bytes += plan_bytes(&plan[i]);
    }
    if (rc == CBX_OK) {
        streaming = false;
        rc = io_gguf_writer_finish(w, err);
        if (rc == CBX_OK && prm->progress) prm->progress(prm->progress_user, n, n, NULL, bytes, bytes_total);
    }

cleanup:
    if (streaming) io_gguf_writer_finish(w, NULL); /* removes the temp file */
    io_gguf_writer_free(w);
    free(obuf);
    free(fbuf);
    free(plan);
    model_dir_close(md);
    return rc;
}
