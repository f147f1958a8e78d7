/* model_dir.c - open a Chatterbox Hugging Face snapshot directory: variant
 * detection, the three weight files (safetensors or torch .pt) and conds.pt,
 * tensor lookup by upstream name. See model_dir.h for the file table. */
#include "io/model_dir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/safetensors.h"
#include "core/hash.h"
#include "io/torch_pt.h"

const char *model_component_name(enum model_component c)
{
    static const char *names[MODEL_N_COMPONENTS] = {"t3", "s3gen", "ve"};
    return (int)c >= 0 && c < MODEL_N_COMPONENTS ? names[c] : "?";
}

/* ---- a .pt state dict as a name -> tensor table ------------------------ */

struct pt_table {
    struct pt_value *root;  /* owned tree */
    struct tensor *t;       /* descriptors, tree order */
    char **names;           /* owned dotted names */
    int n, cap;
    int *slot;              /* open addressing: index + 1, 0 = empty */
    size_t nslot;           /* power of two */
};

struct component {
    const char *file;
    struct io_safetensors *st; /* safetensors file, or */
    struct pt_table pt;        /* .pt file */
};

struct model_dir {
    char *path;
    enum model_variant variant;
    struct component comp[MODEL_N_COMPONENTS];
    struct pt_table conds;
};

static uint64_t hash_name(const char *s) { return hash_fnv1a64(s, strlen(s)); }

static int collect(void *user, const char *name, const struct pt_value *v)
{
    struct pt_table *tb = user;
    const struct pt_tensor *pt = pt_as_tensor(v);
    if (!pt) return 0;
    if (tb->n == tb->cap) {
        int cap = tb->cap ? 2 * tb->cap : 64;
        struct tensor *t = realloc(tb->t, (size_t)cap * sizeof *t);
        if (!t) return 1;
        tb->t = t;
        char **nm = realloc(tb->names, (size_t)cap * sizeof *nm);
        if (!nm) return 1;
        tb->names = nm;
        tb->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) return 1;
    tb->names[tb->n] = copy;
    tb->t[tb->n] = pt_tensor_view(pt);
    tb->t[tb->n].name = copy;
    tb->n++;
    return 0;
}

static void pt_table_free(struct pt_table *tb)
{
    for (int i = 0; i < tb->n; i++) free(tb->names[i]);
    free(tb->names);
    free(tb->t);
    free(tb->slot);
    pt_value_free(tb->root);
    memset(tb, 0, sizeof *tb);
}

static const struct tensor *pt_table_find(const struct pt_table *tb, const char *name)
{
    if (!tb->nslot) return NULL;
    for (size_t h = hash_name(name) & (tb->nslot - 1);; h = (h + 1) & (tb->nslot - 1)) {
        int s = tb->slot[h];
        if (!s) return NULL;
        if (!strcmp(tb->names[s - 1], name)) return &tb->t[s - 1];
    }
}

/* Read a .pt file and index its tensors (dotted names). */
static cbx_status pt_table_open(const char *path, struct pt_table *tb, char *err)
{
    cbx_status rc = io_pt_read(path, &tb->root, err);
    if (rc != CBX_OK) return rc;
    if (pt_foreach_tensor(tb->root, collect, tb) != 0)
        return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory indexing tensors", path);
    tb->nslot = 16;
    while (tb->nslot < 2 * (size_t)tb->n) tb->nslot *= 2;
    tb->slot = calloc(tb->nslot, sizeof *tb->slot);
    if (!tb->slot) return err_setf(err, CBX_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < tb->n; i++) {
        size_t h = hash_name(tb->names[i]) & (tb->nslot - 1);
        while (tb->slot[h]) {
            if (!strcmp(tb->names[tb->slot[h] - 1], tb->names[i]))
                return err_setf(err, CBX_ERR_FORMAT, "%s: tensor '%s' appears twice", path,
                                tb->names[i]);
            h = (h + 1) & (tb->nslot - 1);
        }
        tb->slot[h] = i + 1;
    }
    return CBX_OK;
}

/* ---- the directory ------------------------------------------------------ */

static bool join(char *buf, size_t n, const char *dir, const char *file)
{
    int k = snprintf(buf, n, "%s/%s", dir, file);
    return k > 0 && (size_t)k < n;
}

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool dir_has(const char *dir, const char *file)
{
    char p[4096];
    return join(p, sizeof p, dir, file) && is_file(p);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

void model_dir_close(struct model_dir *md)
{
    if (!md) return;
    for (int c = 0; c < MODEL_N_COMPONENTS; c++) {
        io_safetensors_close(md->comp[c].st);
        pt_table_free(&md->comp[c].pt);
    }
    pt_table_free(&md->conds);
    free(md->path);
    free(md);
}

static cbx_status detect(const char *path, enum model_variant *out, char *err)
{
    int found[MODEL_N_VARIANTS], nfound = 0;
    for (int v = 0; v < MODEL_N_VARIANTS; v++)
        if (dir_has(path, variant_get((enum model_variant)v)->file[MODEL_T3])) found[nfound++] = v;
    if (nfound == 1) {
        *out = (enum model_variant)found[0];
        return CBX_OK;
    }
    char list[512] = "";
    for (int i = 0; i < (nfound ? nfound : MODEL_N_VARIANTS); i++) {
        const struct variant *vr = variant_get((enum model_variant)(nfound ? found[i] : i));
        size_t l = strlen(list);
        if (nfound) snprintf(list + l, sizeof list - l, "%s%s (%s)", i ? ", " : "", vr->file[MODEL_T3], vr->name);
        else snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "", vr->file[MODEL_T3]);
    }
    if (nfound == 0)
        return err_setf(err, CBX_ERR_NOT_FOUND, "%s: no Chatterbox T3 weights (expected one of %s)", path, list);
    return err_setf(err, CBX_ERR_INVALID_ARG,
                    "%s: holds the T3 weights of several variants: %s; choose one explicitly",
                    path, list);
}

cbx_status model_dir_open_as(const char *path, int variant, struct model_dir **out,
                             char *err)
{
    cbx_status rc = CBX_OK;
    struct model_dir *md = NULL;
    char p[4096];
    *out = NULL;

    if (!path || !*path) return err_setf(err, CBX_ERR_INVALID_ARG, "model directory: empty path");
    struct stat st;
    if (stat(path, &st) != 0)
        return err_setf(err, CBX_ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return err_setf(err, CBX_ERR_INVALID_ARG, "%s: not a directory", path);

    enum model_variant v = MODEL_TURBO;
    if (variant < 0) {
        rc = detect(path, &v, err);
        if (rc != CBX_OK) return rc;
    } else if (variant >= MODEL_N_VARIANTS) {
        return err_setf(err, CBX_ERR_INVALID_ARG, "model directory: bad variant %d", variant);
    } else {
        v = (enum model_variant)variant;
    }
    const struct variant *vi = variant_get(v);

    /* Every file first, so one message can name all that are missing. */
    char missing[1024] = "";
    const char *need[MODEL_N_COMPONENTS + 1] = {vi->file[MODEL_T3], vi->file[MODEL_S3GEN],
                                                vi->file[MODEL_VE], vi->conds_file};
    for (int i = 0; i <= MODEL_N_COMPONENTS; i++) {
        if (dir_has(path, need[i])) continue;
        size_t l = strlen(missing);
        snprintf(missing + l, sizeof missing - l, "%s%s", l ? ", " : "", need[i]);
    }
    if (missing[0])
        return err_setf(err, CBX_ERR_NOT_FOUND, "%s: %s model directory lacks %s", path,
                        vi->name, missing);

    md = calloc(1, sizeof *md);
    if (!md || !(md->path = strdup(path))) {
        rc = err_setf(err, CBX_ERR_NOMEM, "model directory: out of memory");
        goto cleanup;
    }
    md->variant = v;
    for (int c = 0; c < MODEL_N_COMPONENTS; c++) {
        struct component *cp = &md->comp[c];
        cp->file = vi->file[c];
        if (!join(p, sizeof p, path, cp->file)) {
            rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: path too long", path);
            goto cleanup;
        }
        if (ends_with(cp->file, ".safetensors"))
            rc = io_safetensors_open(p, &cp->st, err);
        else
            rc = pt_table_open(p, &cp->pt, err);
        if (rc != CBX_OK) goto cleanup;
    }
    if (!join(p, sizeof p, path, vi->conds_file)) {
        rc = err_setf(err, CBX_ERR_INVALID_ARG, "%s: path too long", path);
        goto cleanup;
    }
    rc = pt_table_open(p, &md->conds, err);
    if (rc != CBX_OK) goto cleanup;
    if (pt_dict_get(md->conds.root, "t3") == NULL || pt_dict_get(md->conds.root, "gen") == NULL) {
        rc = err_setf(err, CBX_ERR_FORMAT, "%s: expected a dict with keys \"t3\" and \"gen\"", p);
        goto cleanup;
    }

cleanup:
    if (rc != CBX_OK) {
        model_dir_close(md);
        md = NULL;
    }
    *out = md;
    return rc;
}

cbx_status model_dir_open(const char *path, struct model_dir **out, char *err)
{
    return model_dir_open_as(path, -1, out, err);
}

enum model_variant model_dir_variant(const struct model_dir *md) { return md->variant; }

const char *model_dir_path(const struct model_dir *md) { return md->path; }

static const struct component *comp_of(const struct model_dir *md, enum model_component c)
{
    return md && (int)c >= 0 && c < MODEL_N_COMPONENTS ? &md->comp[c] : NULL;
}

const struct tensor *model_dir_find(const struct model_dir *md, enum model_component c,
                                    const char *name)
{
    const struct component *cp = comp_of(md, c);
    if (!cp || !name) return NULL;
    return cp->st ? io_safetensors_find(cp->st, name) : pt_table_find(&cp->pt, name);
}

bool model_dir_mapped(const struct model_dir *md, enum model_component c)
{
    const struct component *cp = comp_of(md, c);
    return cp && cp->st;
}

cbx_status model_dir_get(const struct model_dir *md, enum model_component c, const char *name,
                         int want_type, const struct tensor **out, char *err)
{
    const struct tensor *t = model_dir_find(md, c, name);
    *out = NULL;
    if (!t)
        return err_setf(err, CBX_ERR_NOT_FOUND, "%s/%s: no tensor '%s'", md ? md->path : "?",
                        comp_of(md, c) ? comp_of(md, c)->file : "?", name ? name : "(null)");
    if (want_type >= 0 && (int)t->type != want_type)
        return err_setf(err, CBX_ERR_FORMAT, "%s/%s: tensor '%s' is %s, expected %s", md->path,
                        comp_of(md, c)->file, name, dtype_name(t->type),
                        dtype_name((enum dtype)want_type));
    *out = t;
    return CBX_OK;
}

int model_dir_count(const struct model_dir *md, enum model_component c)
{
    const struct component *cp = comp_of(md, c);
    if (!cp) return 0;
    return cp->st ? io_safetensors_count(cp->st) : cp->pt.n;
}

const struct tensor *model_dir_tensor(const struct model_dir *md, enum model_component c,
                                      int i)
{
    const struct component *cp = comp_of(md, c);
    if (!cp || i < 0) return NULL;
    if (cp->st) return io_safetensors_tensor(cp->st, i);
    return i < cp->pt.n ? &cp->pt.t[i] : NULL;
}

const struct tensor *model_dir_cond(const struct model_dir *md, const char *path, bool *is_none)
{
    if (is_none) *is_none = false;
    if (!md || !path) return NULL;
    const struct pt_value *v = pt_get_path(md->conds.root, path);
    if (!v) return NULL;
    if (v->kind == PT_NONE) {
        if (is_none) *is_none = true;
        return NULL;
    }
    return pt_table_find(&md->conds, path);
}

bool model_dir_file_path(const struct model_dir *md, const char *file, char *buf, size_t n,
                         bool *exists)
{
    if (exists) *exists = false;
    if (!md || !file || !join(buf, n, md->path, file)) return false;
    if (exists) *exists = is_file(buf);
    return true;
}
