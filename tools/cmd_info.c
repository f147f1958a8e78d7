/* cmd_info.c - `chatterbox info FILE|DIR [--tensors]`: what a model holds,
 * for a converted GGUF (src/io/model_file.h) or a Hugging Face directory:
 * variant, per-component tensor counts, types and sizes, the built-in
 * voice, tokenizer files, and for GGUF the metadata and the tensor-name
 * length note (ggml's reader refuses names of 64 bytes or more). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/backend.h"
#include "io/model_file.h"

#define GGML_MAX_NAME 64 /* ggml.h: names must be shorter than this */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chatterbox info FILE|DIR [--tensors]\n"
            "       chatterbox info --backends\n"
            "\n"
            "Describe a model: a GGUF file written by 'chatterbox convert' or a\n"
            "Hugging Face model directory; or list the compute backends this\n"
            "build has and whether each can run here (--backend NAME of say,\n"
            "serve, vc, vocode, voice and tokens).\n"
            "\n"
            "  --tensors   also list every tensor (name, type, shape)\n"
            "  --backends  list the backends (and what 'auto' picks) and exit\n"
            "  -h, --help  this text\n");
}

#define usage_error(...) cli_usage_error("info", __VA_ARGS__)

static uint64_t tensor_bytes(const struct tensor *t)
{
    if (t->ndim == 0) return dtype_traits(t->type)->size;
    uint64_t n = dtype_row_size(t->type, t->ne[t->ndim - 1]);
    for (int d = 0; d < t->ndim - 1; d++) n *= (uint64_t)t->ne[d];
    return n;
}

static void print_value(const struct io_gguf_value *v)
{
    switch (v->type) {
    case GGUF_TYPE_UINT8: printf("%u", v->v.u8); break;
    case GGUF_TYPE_INT8: printf("%d", v->v.i8); break;
    case GGUF_TYPE_UINT16: printf("%u", v->v.u16); break;
    case GGUF_TYPE_INT16: printf("%d", v->v.i16); break;
    case GGUF_TYPE_UINT32: printf("%" PRIu32, v->v.u32); break;
    case GGUF_TYPE_INT32: printf("%" PRId32, v->v.i32); break;
    case GGUF_TYPE_UINT64: printf("%" PRIu64, v->v.u64); break;
    case GGUF_TYPE_INT64: printf("%" PRId64, v->v.i64); break;
    case GGUF_TYPE_FLOAT32: printf("%g", v->v.f32); break;
    case GGUF_TYPE_FLOAT64: printf("%g", v->v.f64); break;
    case GGUF_TYPE_BOOL: printf("%s", v->v.b ? "true" : "false"); break;
    case GGUF_TYPE_STRING:
        if (v->v.str.len <= 60 && !memchr(v->v.str.s, '\n', (size_t)v->v.str.len))
            printf("\"%s\"", v->v.str.s);
        else
            printf("<string, %" PRIu64 " bytes>", v->v.str.len);
        break;
    case GGUF_TYPE_ARRAY:
        if (v->v.arr.type == GGUF_TYPE_STRING && v->v.arr.n <= 8) {
            const struct io_gguf_str *s = v->v.arr.data;
            printf("[");
            for (uint64_t i = 0; i < v->v.arr.n; i++) printf("%s\"%s\"", i ? ", " : "", s[i].s);
            printf("]");
        } else {
            printf("<array of %" PRIu64 " %s>", v->v.arr.n, io_gguf_type_name(v->v.arr.type));
        }
        break;
    }
}

/* One component: count, elements, bytes, and how many tensors per type. */
static void summarise(const struct model *m, enum model_component c, bool list, size_t *longest, int *n_long)
{
    int n = model_count(m, c);
    int per_type[256] = {0};
    uint64_t bytes = 0, elems = 0;
    for (int i = 0; i < n; i++) {
        const struct tensor *t = model_tensor(m, c, i);
        per_type[(unsigned)t->type & 255]++;
        bytes += tensor_bytes(t);
        elems += (uint64_t)tensor_nelements(t);
        size_t len = strlen(t->name);
        if (len > *longest) *longest = len;
        if (len >= GGML_MAX_NAME) (*n_long)++;
    }
    const char *file = variant_get(model_get_variant(m))->file[c];
    printf("  %-6s %-28s %5d tensors %12.3f M params %10.1f MB  ", model_component_name(c), file, n,
           (double)elems / 1e6, (double)bytes / 1e6);
    bool first = true;
    for (int t = 0; t < 256; t++) {
        if (!per_type[t]) continue;
        printf("%s%s %d", first ? "" : ", ", dtype_name((enum dtype)t), per_type[t]);
        first = false;
    }
    printf("\n");
    if (!list) return;
    for (int i = 0; i < n; i++) {
        const struct tensor *t = model_tensor(m, c, i);
        char shape[96];
        printf("    %-80s %-5s %s\n", t->name, dtype_name(t->type), tensor_shape_str(t, shape, sizeof shape));
    }
}

int cmd_model_info(int argc, char **argv)
{
    const char *path = NULL;
    bool list = false;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(o, "--tensors")) { list = true; continue; }
        if (!strcmp(o, "--backends")) {
            char buf[2048];
            backend_describe(buf, sizeof buf);
            printf("%sauto: %s\n", buf, backend_auto_name());
            return 0;
        }
        if (o[0] == '-') return usage_error("unknown option '%s'", o);
        if (path) return usage_error("more than one model ('%s', '%s')", path, o);
        path = o;
    }
    if (!path) return usage_error("a model file or directory is required");

    char err[ERR_MAX] = "";
    struct model *m = NULL;
    cbx_status rc = model_open(path, &m, err);
    if (rc != CBX_OK) {
        fprintf(stderr, "chatterbox info: %s\n", err);
        return 1;
    }
    const struct io_gguf *g = model_get_gguf(m);
    enum model_variant v = model_get_variant(m);
    printf("model:     %s\n", path);
    if (g)
        printf("format:    GGUF v%u, alignment %zu, %d tensors, %d metadata keys\n", io_gguf_version(g),
               io_gguf_alignment(g), io_gguf_n_tensors(g), io_gguf_n_kv(g));
    else
        printf("format:    Hugging Face model directory\n");
    printf("variant:   %s (%s)\n", variant_get(v)->name, variant_get(v)->description);

    printf("weights:\n");
    size_t longest = 0;
    int n_long = 0;
    for (int c = 0; c < MODEL_N_COMPONENTS; c++) summarise(m, (enum model_component)c, list, &longest, &n_long);

    printf("voice:     built-in (%s)\n", variant_get(v)->conds_file);
    const char *const *keys = variant_get(v)->conds_keys;
    for (int i = 0; keys[i]; i++) {
        bool none = false;
        const struct tensor *t = model_cond(m, keys[i], &none);
        if (!t && !none) continue;
        char shape[96];
        if (t) printf("  %-30s %-5s %s\n", keys[i], dtype_name(t->type), tensor_shape_str(t, shape, sizeof shape));
        else printf("  %-30s None\n", keys[i]);
    }

    printf("tokenizer:");
    const char *const *files = variant_get(v)->tokenizer_files;
    int shown = 0;
    for (int i = 0; files[i]; i++) {
        const char *f = files[i];
        char *text = NULL;
        size_t len = 0;
        if (model_text_file(m, f, &text, &len, NULL) != CBX_OK) continue;
        printf("%s %s (%zu bytes)", shown++ ? "," : "", f, len);
        free(text);
    }
    printf("%s\n", shown ? "" : " none");

    if (g) {
        printf("metadata:\n");
        for (int i = 0; i < io_gguf_n_kv(g); i++) {
            printf("  %-40s ", io_gguf_kv_key(g, i));
            print_value(io_gguf_kv_value(g, i));
            printf("\n");
        }
        printf("names:     longest tensor name %zu bytes; %d of %d are %d bytes or longer, which ggml's own\n"
               "           GGUF reader refuses (GGML_MAX_NAME): upstream names are kept, so this file\n"
               "           is read by chatterbox, not by llama.cpp/ggml tools\n",
               longest, n_long, io_gguf_n_tensors(g), GGML_MAX_NAME);
    }
    model_close(m);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "chatterbox info: cannot write to stdout\n");
        return 1;
    }
    return 0;
}
