/* testutil.h - shared helpers for the test programs.
 *
 * Checks print one line each (what, measured error, tolerance, verdict) and
 * count failures; main() ends with `return test_summary();`, which prints a
 * total and returns non-zero when any check failed. */
#ifndef CBX_TESTUTIL_H
#define CBX_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"
#include "io/npy.h"

extern int test_failures, test_checks;

#define CHECK(cond, ...) test_check((cond), __FILE__, __LINE__, __VA_ARGS__)
void test_check(bool ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Compare n floats: max abs error, and rel = max abs error / max |want|.
 * Passes when rel <= rtol or max abs <= atol. Prints one line. */
bool check_close(const char *what, const float *got, const float *want, size_t n,
                 double atol, double rtol);
/* Same, but only reports (returns the rel error) without counting. */
double rel_error(const float *got, const float *want, size_t n, double *max_abs);

/* Cosine similarity of each of `rows` rows of length d; prints the worst
 * and the max abs error, passes when every cosine >= min_cos. */
void check_cosine_rows(const char *what, const float *got, const float *want, int64_t rows, int64_t d,
                  double min_cos);

/* Deterministic uniform values in [lo, hi) (shared RNG, stream "test"). */
void fill_uniform(float *dst, size_t n, float lo, float hi, uint64_t seed);

/* Path into tests/data (static buffer per call: copy if kept). */
const char *test_data(const char *rel);
/* A fresh empty directory under the build tree; static buffer. */
const char *test_tmpdir(const char *tag);
/* The backend the model-level tests run on: $CBX_TEST_BACKEND ("cpu",
 * the default; "cuda" on the GPU machine: ctest -L parity there runs
 * every parity test on the GPU). */
const char *test_backend_name(void);
/* A process-wide backend of that name (made on the first call, never
 * freed) that tests place model weights on when the model outlives, or
 * is loaded before, the backend the test computes with (cpu layouts: the
 * cpu and ref backends can both run such a model but for WEIGHT_DECODE
 * linears, core/weights.h). Exits with status 2 when it cannot be made. */
struct backend;
const struct backend *test_backend(void);
/* A backend to compute with on test_backend()'s weights (cpu: n_threads,
 * 0 = all; cuda: a stream of its own). Exits with status 2 on failure.
 * Free with backend_free. */
struct backend *test_compute_backend(int n_threads);

/* The whole file at path, NUL-terminated (not counted in *n); NULL when it
 * cannot be read. Caller frees. */
void *test_read_file(const char *path, size_t *n);
/* The fixture tests/data/<variant>/<name>.npy; exits with status 2 (a test
 * error, not a pass) when it cannot be read. */
struct npy test_fixture(const char *variant, const char *name);
/* Elements of an .npy array. */
int64_t test_numel(const struct npy *n);
/* Threads of this process (entries of /proc/self/task). */
int test_n_threads(void);
/* Monotonic wall-clock seconds, and this process's CPU seconds. */
double test_now(void);
double test_cpu_seconds(void);

/* The start of the file at path as a string in buf[n] ("" when it cannot
 * be read), and the number of newlines in a string. */
void test_slurp(const char *path, char *buf, size_t n);
/* Copy file from to file to; 1 on success. */
int test_copy_file(const char *from, const char *to);
/* A --voice directory dir (made) of the fixture's conditioning of variant
 * (tests/data/<variant>): speaker_emb = ve_embedding,
 * cond_prompt_speech_tokens = t3_cond_prompt_tokens, prompt_token =
 * s3gen_prompt_tokens, prompt_feat = s3gen_prompt_mel, embedding =
 * campplus_embedding. Counts a failed check per file that cannot be
 * copied. */
void test_fixture_voice_dir(const char *variant, const char *dir);
int test_count_lines(const char *s);
/* Run `<build>/chatterbox CMD ARGS` with its stdout (and stderr when err2,
 * else stderr discarded) in out (n bytes, NUL-terminated); returns its exit
 * status, -1 when it could not run or was killed. */
int test_run_cli(const char *cmd, const char *args, bool err2, char *out, size_t n);
/* path names an existing file or directory. */
bool test_exists(const char *path);

/* Number of entries of dir whose names end with suffix; *first (when not
 * NULL) receives the path of one of them. -1 when dir cannot be read. */
int test_count_files(const char *dir, const char *suffix, char *first, size_t n);
/* dir/name in one of 4 static buffers used in turn (so up to 4 such paths
 * can be held at once). */
const char *test_path(const char *dir, const char *name);

/* The synthetic model directory that the synth_<variant>_model fixture
 * writes, CBX_BINARY_DIR/models/<variant>; static buffer. */
const char *test_model_dir(const char *variant);
/* model_dir_open of test_model_dir(variant), and model_open of path, each
 * counted as a check ("open PATH: message"); NULL when it fails. */
struct model_dir *test_open_model_dir(const char *variant);
struct model *test_open_model(const char *path);
/* test_open_model of the path in environment variable env when set and
 * not empty (another model to run a test on), else of
 * test_model_dir(variant). */
struct model *test_open_model_env(const char *env, const char *variant);
/* The T3 (GPT-2) weights of md loaded twice, as f32 and as q4_0, each
 * counted as a check; true when both loaded. */
struct t3_model;
bool test_load_t3_f32_q4(const struct model *md, struct t3_model *m, struct t3_model *mq);
/* Frees what test_load_t3_f32_q4 loaded and closes md. */
void test_free_t3_f32_q4(struct model *md, struct t3_model *m, struct t3_model *mq);
/* The T3 half of the model in dir (engine_load_params.t3_only) on backend
 * (a name, NULL for test_backend_name()) with weight type wtype (-1: as
 * stored), counted as a check under label; NULL when it did not load. */
struct engine_model;
struct engine_model *test_load_engine_t3(const char *dir, const char *backend, int wtype, const char *label);
/* tests/data/<name> read into *a, counted as a check that it reads and is
 * at rate Hz. */
struct audio;
bool test_read_audio(const char *name, int rate, struct audio *a);
/* The n values of got, read back to the host (malloc'd, caller frees);
 * NULL, with a failed check naming what, when got is NULL, holds another
 * number of values or cannot be read back. */
float *test_tensor_values(const char *what, const struct tensor *got, int64_t n);

/* A contiguous host copy of t (malloc'd), or NULL: when t is NULL (an op
 * failed: prints the arena's message) or on failure. Counts no check. */
struct arena;
float *test_host_copy(struct arena *a, const struct tensor *t);
/* The bytes of contiguous t (tensor_nbytes) copied to the host through its
 * backend (malloc'd; NULL on failure). */
void *test_host_bytes(const struct tensor *t);
/* Host tensor h (contiguous; a fixture, io_npy_tensor) on arena a's
 * backend: a copy made with op_from_host, or NULL (a failure recorded in
 * a). Model code takes inputs on the backend it computes with. */
struct tensor *test_upload(struct arena *a, const struct tensor *h);

/* The BF16 kernels' engines, for tests that check each one this machine
 * has: e = 0 AMX-BF16 tiles, e = 1 VDPBF16PS with AMX forbidden. Sets
 * cpu_set_amx(e == 0) and prints "engine NAME", or "NAME: not on this
 * machine, not checked" and returns false. cpu_set_amx(true) afterwards
 * restores the default. */
bool test_bf16_engine(int e);
/* Whether AVX512-BF16 is usable (the BF16 kernels need it with or without
 * AMX); if not, prints that the BF16 path of what is not taken. */
bool test_bf16_usable(const char *what);

int test_summary(void);

#endif
