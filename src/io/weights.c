/* weights.c - tensor lookup with shape checks (see weights.h). */
#include "weights.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "io/safetensors.h"

static const struct tensor *find_component(const void *ctx, int part, const char *name)
{
    return model_dir_find(ctx, (enum model_component)part, name);
}

struct weights weights_from_model_dir(const struct model_dir *md, enum model_component c)
{
    struct weights w = {find_component, md, (int)c, model_component_name(c), model_dir_mapped(md, c)};
    return w;
}

struct weights_file {
    struct io_safetensors *st;
    struct io_gguf *g;
};

cbx_status weights_file_open(const char *path, struct weights_file **out, char *err)
{
    *out = NULL;
    if (!path || !*path) return err_setf(err, CBX_ERR_INVALID_ARG, "no weight file given");
    char magic[4] = {0};
    FILE *fp = fopen(path, "rb");
    if (!fp) return err_setf(err, CBX_ERR_IO, "%s: %s", path, strerror(errno));
    const size_t got = fread(magic, 1, 4, fp);
    fclose(fp);
    struct weights_file *f = calloc(1, sizeof *f);
    if (!f) return err_setf(err, CBX_ERR_NOMEM, "out of memory");
    cbx_status rc = got == 4 && !memcmp(magic, "GGUF", 4) ? io_gguf_open(path, &f->g, err)
                                                           : io_safetensors_open(path, &f->st, err);
    if (rc != CBX_OK) {
        weights_file_close(f);
        return rc;
    }
    *out = f;
    return CBX_OK;
}

void weights_file_close(struct weights_file *f)
{
    if (!f) return;
    io_safetensors_close(f->st);
    io_gguf_close(f->g);
    free(f);
}

static const struct tensor *find_file(const void *ctx, int part, const char *name)
{
    (void)part;
    const struct weights_file *f = ctx;
    return f->st ? io_safetensors_find(f->st, name) : io_gguf_find_tensor(f->g, name);
}

struct weights weights_from_file(const struct weights_file *f, const char *what)
{
    struct weights w = {find_file, f, 0, what, true};
    return w;
}

int weights_file_wtype(const struct weights_file *f)
{
    const int n = f->st ? io_safetensors_count(f->st) : io_gguf_n_tensors(f->g);
    for (int i = 0; i < n; i++) {
        const struct tensor *t = f->st ? io_safetensors_tensor(f->st, i) : io_gguf_tensor(f->g, i);
        const struct dtype_traits *tr = t ? dtype_traits(t->type) : NULL;
        if (tr && t->ndim >= 2 && (t->type == TYPE_F16 || t->type == TYPE_BF16 || tr->quantized))
            return t->type;
    }
    return TYPE_F32;
}

const struct tensor *weights_get(const struct weights *w, const char *name, int ndim,
                                 const int64_t *ne, cbx_status *rc, char *err)
{
    if (*rc != CBX_OK) return NULL;
    const struct tensor *t = w->find(w->ctx, w->part, name);
    if (!t) {
        *rc = err_setf(err, CBX_ERR_NOT_FOUND, "%s weights: tensor %s is missing", w->what, name);
        return NULL;
    }
    bool ok = t->ndim == ndim && (t->type == TYPE_F32 || t->type == TYPE_F16 ||
                                  t->type == TYPE_BF16 || dtype_traits(t->type)->quantized);
    for (int d = 0; ok && d < ndim; d++) ok = ne[d] < 0 || t->ne[d] == ne[d];
    if (!ok) {
        char s[64];
        *rc = err_setf(err, CBX_ERR_FORMAT, "%s weights: %s has shape %s (%s), expected %d dims", w->what,
                       name, tensor_shape_str(t, s, sizeof s), dtype_name(t->type), ndim);
        return NULL;
    }
    return t;
}

const struct tensor *weights_getf(const struct weights *w, cbx_status *rc, char *err, int ndim,
                                  const int64_t *ne, const char *fmt, ...)
{
    if (*rc != CBX_OK) return NULL;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return weights_get(w, name, ndim, ne, rc, err);
}

int weights_has(const struct weights *w, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return w->find(w->ctx, w->part, name) != NULL;
}
