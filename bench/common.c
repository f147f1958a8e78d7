/* common.c - shared helpers of the benchmark programs (see common.h). */
#include "common.h"

#include "core/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/build_id.h"
#include "core/tensor.h"
#include "core/threadpool.h"
#include "io/model_file.h"
#include "synth.h"
#include "io/weights.h"

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [--threads N] [--reps N] [--filter SUBSTR] [--mem MiB]\n"
            "  JSON lines on stdout, summary on stderr\n", prog);
}

bool bench_parse(int argc, char **argv, struct bench_opts *o, int default_reps)
{
    o->threads = tp_default_threads();
    o->reps = default_reps;
    o->filter = NULL;
    o->mem_mib = 256;
    for (int i = 1; i < argc; i += 2) { /* options come as pairs */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(argv[0]); return false; }
        if (!v) { fprintf(stderr, "%s: %s needs a value\n", argv[0], a); usage(argv[0]); return false; }
        char *end;
        long n = strtol(v, &end, 10);
        bool num = *v && !*end && n > 0 && n < 1 << 20;
        if (strcmp(a, "--threads") == 0 && num) o->threads = (int)n;
        else if (strcmp(a, "--reps") == 0 && num) o->reps = (int)n;
        else if (strcmp(a, "--mem") == 0 && num) o->mem_mib = (size_t)n;
        else if (strcmp(a, "--filter") == 0) o->filter = v;
        else {
            fprintf(stderr, "%s: bad option %s %s\n", argv[0], a, v);
            usage(argv[0]);
            return false;
        }
    }
    return true;
}

void bench_emit1(const char *bench, const char *type, int N, const struct bench_opts *o, const char *unit,
                 double v, const char *baseline, double baseline_median)
{
    const int64_t shape[1] = {N};
    struct bench_stats s = {v, v, v};
    bench_emit(bench, type, shape, 1, o->threads, o->reps, unit, s, baseline, baseline_median);
}

const char *bench_take_opt(int *argc, char **argv, const char *name)
{
    const char *val = NULL;
    for (int i = 1; i + 1 < *argc;) {
        if (strcmp(argv[i], name)) {
            i++;
            continue;
        }
        val = argv[i + 1];
        memmove(argv + i, argv + i + 2, sizeof *argv * (size_t)(*argc - i - 2));
        *argc -= 2;
    }
    return val;
}

bool bench_selected(const struct bench_opts *o, const char *name)
{
    return !o->filter || strstr(name, o->filter);
}

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct bench_stats bench_stats(double *v, int n)
{
    struct bench_stats s = {0, 0, 0};
    if (n <= 0) return s;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    /* nearest-rank percentiles; the median averages the middle pair */
    s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    s.p10 = v[(int)(0.1 * (n - 1) + 0.5)];
    s.p90 = v[(int)(0.9 * (n - 1) + 0.5)];
    return s;
}

const char *bench_commit(void)
{
    if (cbx_build_commit[0]) return cbx_build_commit;
    const char *e = getenv("CBX_COMMIT");
    return e && *e ? e : "unknown";
}

void bench_emit(const char *bench, const char *type, const int64_t *shape, int ndim,
                int threads, int reps, const char *unit, struct bench_stats s,
                const char *baseline, double baseline_median)
{
    printf("{\"bench\":\"%s\",\"type\":\"%s\",\"shape\":[", bench, type);
    for (int i = 0; i < ndim; i++) printf(i ? ",%lld" : "%lld", (long long)shape[i]);
    printf("],\"threads\":%d,\"reps\":%d,\"unit\":\"%s\",\"median\":%.4g,\"p10\":%.4g,"
           "\"p90\":%.4g,",
           threads, reps, unit, s.median, s.p10, s.p90);
    if (baseline)
        printf("\"baseline\":\"%s\",\"baseline_median\":%.4g,\"ratio\":%.3f,", baseline,
               baseline_median, baseline_median > 0 ? s.median / baseline_median : 0.0);
    else
        printf("\"baseline\":null,\"baseline_median\":null,\"ratio\":null,");
    printf("\"commit\":\"%s\"}\n", bench_commit());
    fflush(stdout);
}

/* ---- the copy baseline --------------------------------------------- */

struct copy_job { char *dst; const char *src; size_t n; int parts; };

static void copy_part(void *ctx, int64_t b, int64_t e, int ith)
{
    (void)ith;
    const struct copy_job *j = ctx;
    size_t per = j->n / (size_t)j->parts;
    for (int64_t p = b; p < e; p++) {
        size_t off = (size_t)p * per, len = p == j->parts - 1 ? j->n - off : per;
        memcpy(j->dst + off, j->src + off, len);
    }
}

double bench_copy_baseline(struct threadpool *tp, const struct bench_opts *o)
{
    double gbs = 0;
    size_t n = o->mem_mib << 20;
    char *src = aligned_alloc(64, n), *dst = aligned_alloc(64, n);
    double *v = calloc((size_t)o->reps, sizeof *v);
    if (!src || !dst || !v) { fprintf(stderr, "copy: out of memory\n"); goto cleanup; }
    memset(src, 1, n);
    memset(dst, 2, n); /* fault every page in before timing */
    struct copy_job j = {dst, src, n, o->threads};
    for (int r = -1; r < o->reps; r++) {
        double t0 = bench_now();
        tp_parallel_for(tp, o->threads, 1, copy_part, &j);
        double t = bench_now() - t0;
        if (r >= 0) v[r] = 2.0 * (double)n / t * 1e-9;
    }
    struct bench_stats s = bench_stats(v, o->reps);
    gbs = s.median;
    int64_t shape[1] = {(int64_t)n};
    bench_emit("copy", "u8", shape, 1, o->threads, o->reps, "GB/s", s, NULL, 0);
    fprintf(stderr, "copy %zu MiB: %.1f GB/s (read+write), p10 %.1f p90 %.1f\n", o->mem_mib,
            s.median, s.p10, s.p90);
cleanup:
    free(src);
    free(dst);
    free(v);
    return gbs;
}

/* ---- the read baseline --------------------------------------------- */

struct read_job { const char *src; size_t n; int parts; uint64_t sink[64]; };

/* the part's bytes xor-folded through two 64-byte accumulators (vector
 * extension: as wide as the baseline ISA), prefetched 4 KiB ahead as the
 * decode kernels do */
typedef uint64_t u64x8 __attribute__((vector_size(64)));
static void read_part(void *ctx, int64_t b, int64_t e, int ith)
{
    struct read_job *j = ctx;
    size_t per = j->n / (size_t)j->parts / 512 * 512;
    for (int64_t p = b; p < e; p++) {
        const size_t off = (size_t)p * per, len = p == j->parts - 1 ? j->n - off : per;
        const u64x8 *v = (const u64x8 *)(j->src + off);
        u64x8 a[2] = {{0}};
        for (size_t i = 0; i + 8 <= len / 64; i += 8) {
            __builtin_prefetch(v + i + 64);
            for (int u = 0; u < 8; u += 2) {
                a[0] ^= v[i + u];
                a[1] ^= v[i + u + 1];
            }
        }
        a[0] ^= a[1];
        j->sink[ith % 64] ^= a[0][0] ^ a[0][7];
    }
}

double bench_read_baseline(struct threadpool *tp, const struct bench_opts *o)
{
    double gbs = 0;
    size_t n = o->mem_mib << 20;
    char *src = aligned_alloc(64, n);
    double *v = calloc((size_t)o->reps, sizeof *v);
    struct read_job *j = calloc(1, sizeof *j);
    if (!src || !v || !j) { fprintf(stderr, "read: out of memory\n"); goto cleanup; }
    memset(src, 1, n); /* fault every page in before timing */
    *j = (struct read_job){src, n, o->threads, {0}};
    for (int r = -1; r < o->reps; r++) {
        double t0 = bench_now();
        tp_parallel_for(tp, o->threads, 1, read_part, j);
        double t = bench_now() - t0;
        if (r >= 0) v[r] = (double)n / t * 1e-9;
    }
    struct bench_stats s = bench_stats(v, o->reps);
    gbs = s.median;
    int64_t shape[1] = {(int64_t)n};
    bench_emit("read", "u8", shape, 1, o->threads, o->reps, "GB/s", s, NULL, 0);
    fprintf(stderr, "read %zu MiB: %.1f GB/s, p10 %.1f p90 %.1f (sink %llx)\n", o->mem_mib, s.median, s.p10, s.p90,
            (unsigned long long)j->sink[0]);
cleanup:
    free(src);
    free(v);
    free(j);
    return gbs;
}

const char *bench_take_model(int *argc, char **argv)
{
    const char *m = bench_take_opt(argc, argv, "--model");
    return m ? m : getenv("CHATTERBOX_MODEL");
}

int bench_model_is_gguf(const char *prog, const char *path)
{
    struct model *m = NULL;
    char err[ERR_MAX];
    if (model_open(path, &m, err) != CBX_OK) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return -1;
    }
    int g = model_is_gguf(m);
    model_close(m);
    return g;
}

bool bench_next_type(const struct bench_opts *o, int gguf, size_t *i, int *wt, const char **tname)
{
    static const enum dtype types[] = {TYPE_F32, TYPE_Q8_0, TYPE_Q4_0};
    if (gguf) {
        *wt = -1;
        *tname = "gguf";
        return (*i)++ == 0;
    }
    for (; *i < sizeof types / sizeof types[0]; (*i)++) {
        *wt = (int)types[*i];
        *tname = dtype_name(types[*i]);
        if (bench_selected(o, *tname)) {
            (*i)++;
            return true;
        }
    }
    return false;
}

const char *bench_take_opt_or(int *argc, char **argv, const char *name, const char *def)
{
    const char *v = bench_take_opt(argc, argv, name);
    return v ? v : def;
}

/* ---- synthetic weights in memory ---------------------------------------- */

static const struct tensor *synth_find(const void *ctx, int part, const char *name)
{
    (void)part;
    const struct bench_synth *w = ctx;
    for (int i = 0; i < w->n; i++)
        if (w->t[i].data && !strcmp(w->t[i].name, name)) return &w->t[i];
    return NULL;
}

bool bench_synth_load(const char *prog, const char *file, bool (*keep)(const char *name),
                      struct threadpool *tp, struct bench_synth *w)
{
    char err[ERR_MAX], data[4096];
    memset(w, 0, sizeof *w);
    if (!synth_data_dir(data, sizeof data, err) || synth_manifest_load(data, file, &w->m, err) != CBX_OK) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return false;
    }
    w->n = w->m->n;
    if (!(w->t = calloc((size_t)w->n, sizeof *w->t))) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return false;
    }
    for (int i = 0; i < w->n; i++) {
        const struct synth_tensor *st = &w->m->t[i];
        w->t[i] = tensor_make(st->type, st->ndim, st->ne, NULL, NULL);
        w->t[i].name = st->name;
        if (keep && !keep(st->name)) continue;
        if (!(w->t[i].data = aligned_alloc(64, (synth_tensor_nbytes(st) + 63) & ~(size_t)63))) {
            fprintf(stderr, "%s: out of memory for the synthetic weights\n", prog);
            return false;
        }
        if (st->rule == SYNTH_RECIPE) memcpy(w->t[i].data, st->data, synth_tensor_nbytes(st));
        else synth_tensor_fill_parallel(tp, st, w->m->seed, 0, synth_tensor_nelements(st), w->t[i].data);
    }
    return true;
}

struct weights bench_synth_weights(const struct bench_synth *w, const char *what)
{
    struct weights s = {synth_find, w, 0, what, false};
    return s;
}

struct backend *bench_backend(const char *prog, const char *name, int threads)
{
    if (!name) name = "cpu";
    char err[ERR_MAX] = "";
    struct backend *be = backend_create(name, threads, false, err);
    if (!be) fprintf(stderr, "%s: %s\n", prog, err);
    return be;
}

const char *bench_type_on(const struct backend *be, const char *type, char *buf, size_t n)
{
    snprintf(buf, n, be->host ? "%s" : "%s@%s", type, be->name);
    return buf;
}
