/* common.c - shared helpers of the benchmark programs (see common.h). */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/threadpool.h"

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
    for (int i = 1; i < argc; i++) {
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
        i++;
    }
    return true;
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
#ifdef CBX_GIT_COMMIT
    if (CBX_GIT_COMMIT[0]) return CBX_GIT_COMMIT;
#endif
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
