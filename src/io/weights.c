/* weights.c - tensor lookup with shape checks (see weights.h). */
#include "weights.h"

#include <stdarg.h>
#include <stdio.h>

static const struct tensor *find_component(const void *ctx, int part, const char *name)
{
    return model_dir_find(ctx, (enum model_component)part, name);
}

struct weights weights_from_model_dir(const struct model_dir *md, enum model_component c)
{
    struct weights w = {find_component, md, (int)c, model_component_name(c)};
    return w;
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
