/* common.h - shared helpers of the benchmark programs: options, timing,
 * statistics and the JSON-lines output of STYLE.md "Benchmark output"
 * (one object per line on stdout, human summary on stderr). */
#ifndef CBX_BENCH_COMMON_H
#define CBX_BENCH_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bench_opts {
    int threads;         /* --threads N (default: online CPUs) */
    int reps;            /* --reps N: timed repetitions after one warm-up */
    const char *filter;  /* --filter S: run cases whose name contains S */
    size_t mem_mib;      /* --mem MiB: working set of bandwidth-bound cases */
};

/* Parse argv; prints usage and returns false on a bad option or --help. */
bool bench_parse(int argc, char **argv, struct bench_opts *o, int default_reps);
bool bench_selected(const struct bench_opts *o, const char *name);
/* A program's own "NAME VALUE" option: its value (the last one given), or
 * NULL; every occurrence is taken out of argv so that bench_parse sees only
 * the common options. */
const char *bench_take_opt(int *argc, char **argv, const char *name);
/* The same, with def when the option is absent. */
const char *bench_take_opt_or(int *argc, char **argv, const char *name, const char *def);

/* The end-to-end benchmarks' model: "--model DIR|GGUF" taken out of argv,
 * else $CHATTERBOX_MODEL, else NULL. */
const char *bench_take_model(int *argc, char **argv);
/* 1 when path opens as a .gguf model, 0 as a directory; -1 after one line
 * on stderr naming prog and why it cannot be opened. */
int bench_model_is_gguf(const char *prog, const char *path);
/* The end-to-end benchmarks' backend: name (their --backend, taken out of
 * argv before bench_parse; NULL: cpu) made with threads; NULL after one
 * line on stderr naming prog. Free with backend_free. */
struct backend;
struct backend *bench_backend(const char *prog, const char *name, int threads);
/* A record's type: type on the cpu, "type@backend" on any other. */
const char *bench_type_on(const struct backend *be, const char *type, char *buf, size_t n);
/* The weight types a model bench runs in turn: a gguf's own once (*wt -1,
 * *tname "gguf"), else F32, Q8_0 and Q4_0 (quantised at load) as o's
 * --filter selects them. *i: the caller's position, 0 at first; false
 * when there is no next one. */
bool bench_next_type(const struct bench_opts *o, int gguf, size_t *i, int *wt, const char **tname);

double bench_now(void); /* monotonic seconds */

struct bench_stats { double median, p10, p90; };
/* Order statistics of v[0..n) (sorted in place). */
struct bench_stats bench_stats(double *v, int n);

/* One JSON line; baseline may be NULL (then no ratio). */
void bench_emit(const char *bench, const char *type, const int64_t *shape, int ndim,
                int threads, int reps, const char *unit, struct bench_stats s,
                const char *baseline, double baseline_median);

/* One JSON line for a single figure v of a run shaped [N] (median, p10
 * and p90 all v). */
void bench_emit1(const char *bench, const char *type, int N, const struct bench_opts *o, const char *unit,
                 double v, const char *baseline, double baseline_median);

/* Short commit id: cbx_build_commit (core/build_id.h), else $CBX_COMMIT, else
 * "unknown". */
const char *bench_commit(void);

struct threadpool;

/* One synthetic checkpoint file (spec/synthetic-weights.md: the manifest's
 * recipe, as `chatterbox synth` writes it) generated in memory: the
 * tensors whose names keep(name) accepts (NULL: all) get their values, the
 * others stay without data and are not found. */
struct bench_synth {
    struct synth_manifest *m;
    struct tensor *t;
    int n;
};
/* Fills w from the manifest of file (e.g. "t3_turbo_v1.safetensors") on
 * the pool's threads; false after one line on stderr naming prog. */
bool bench_synth_load(const char *prog, const char *file, bool (*keep)(const char *name),
                      struct threadpool *tp, struct bench_synth *w);
/* Its tensors as the weights of component what ("t3", "s3gen"). */
struct weights bench_synth_weights(const struct bench_synth *w, const char *what);

/* STREAM-like copy of two o->mem_mib MiB buffers over the pool's threads;
 * emits its JSON line and returns the median GB/s (bytes read + written). */
double bench_copy_baseline(struct threadpool *tp, const struct bench_opts *o);
/* Reading one o->mem_mib MiB buffer over the pool's threads (every byte
 * loaded once, folded so the loads stay); emits its JSON line and returns
 * the median GB/s read: the limit of a decode step, which streams its
 * weights and writes next to nothing. */
double bench_read_baseline(struct threadpool *tp, const struct bench_opts *o);

#endif
