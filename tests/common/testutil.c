/* testutil.c - see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/rng.h"

int test_failures, test_checks;

void test_check(bool ok, const char *file, int line, const char *fmt, ...)
{
    test_checks++;
    if (ok) return;
    test_failures++;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

double rel_error(const float *got, const float *want, size_t n, double *max_abs)
{
    double ma = 0, mw = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= ma)) ma = d; /* NaN propagates */
        double w = fabs((double)want[i]);
        if (w > mw) mw = w;
    }
    if (max_abs) *max_abs = ma;
    return mw > 0 ? ma / mw : ma;
}

bool check_close(const char *what, const float *got, const float *want, size_t n,
                 double atol, double rtol)
{
    double ma, rel = rel_error(got, want, n, &ma);
    bool ok = (rel <= rtol) || (ma <= atol);
    printf("%-48s n=%-9zu max_abs=%.3e rel=%.3e tol(abs %.1e, rel %.1e) %s\n", what, n,
           ma, rel, atol, rtol, ok ? "PASS" : "FAIL");
    test_check(ok, __FILE__, __LINE__, "%s: max_abs %.3e rel %.3e", what, ma, rel);
    return ok;
}

void fill_uniform(float *dst, size_t n, float lo, float hi, uint64_t seed)
{
    struct rng_stream s;
    rng_stream_init(&s, "test", seed);
    for (size_t i = 0; i < n; i++) dst[i] = lo + (hi - lo) * rng_uniform(&s);
}

const char *test_data(const char *rel)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", CBX_TEST_DATA, rel);
    return buf;
}

const char *test_tmpdir(const char *tag)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/test-tmp/%s-%d", CBX_BINARY_DIR, tag, (int)getpid());
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", buf, buf);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot create %s\n", buf);
        exit(2);
    }
    return buf;
}

void *test_read_file(const char *path, size_t *n)
{
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (len >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)len + 1))) {
        *n = fread(b, 1, (size_t)len, f);
        b[*n] = 0;
    }
    fclose(f);
    return b;
}

void test_slurp(const char *path, char *buf, size_t n)
{
    buf[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t k = fread(buf, 1, n - 1, f);
    buf[k] = 0;
    fclose(f);
}

int test_count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

bool test_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

void check_cosine_rows(const char *what, const float *got, const float *want, int64_t rows, int64_t d,
                  double min_cos)
{
    double worst = 1.0, max_abs = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        double gw = 0, gg = 0, ww = 0;
        for (int64_t i = 0; i < d; i++) {
            double g = got[r * d + i], w = want[r * d + i];
            gw += g * w, gg += g * g, ww += w * w;
            if (fabs(g - w) > max_abs) max_abs = fabs(g - w);
        }
        double c = gw / (sqrt(gg) * sqrt(ww) + 1e-30);
        if (!(c >= worst)) worst = c;
    }
    bool ok = worst >= min_cos;
    printf("%-48s rows=%-4lld min_cos=%.8f max_abs=%.3e tol(cos >= %.5f) %s\n", what,
           (long long)rows, worst, max_abs, min_cos, ok ? "PASS" : "FAIL");
    CHECK(ok, "%s: cosine %.8f < %.5f", what, worst, min_cos);
}

struct npy test_fixture(const char *variant, const char *name)
{
    char rel[512], err[ERR_MAX];
    snprintf(rel, sizeof rel, "%s/%s.npy", variant, name);
    const char *path = test_data(rel);
    struct npy n;
    if (io_npy_read(path, &n, err) != CBX_OK) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
    return n;
}

int64_t test_numel(const struct npy *n)
{
    int64_t k = 1;
    for (int d = 0; d < n->ndim; d++) k *= n->ne[d];
    return k;
}

static double clock_seconds(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double test_now(void) { return clock_seconds(CLOCK_MONOTONIC); }
double test_cpu_seconds(void) { return clock_seconds(CLOCK_PROCESS_CPUTIME_ID); }

int test_summary(void)
{
    printf("%d checks, %d failed\n", test_checks, test_failures);
    return test_failures ? 1 : 0;
}
