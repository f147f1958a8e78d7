/* synth.h - synthetic Chatterbox checkpoints, bit-exact per
 * spec/synthetic-weights.md (reference: oracle/synthspec.py, synth.py).
 *
 * Three layers:
 *  1. the value generator: FNV-1a-64 keys, the splitmix64 mixer, 24-bit m,
 *     float32 values q * (scale * 2^-23) [+ offset] with one rounding each
 *     (this file is compiled with -ffp-contract=off), int_range integers;
 *  2. manifests (data/manifests/<file>.json, parsed with cJSON): the ordered
 *     tensor list of a checkpoint file with each tensor's rule, recipe
 *     buffers loaded from data/buffers/ (.npy files);
 *  3. the directory writer: every file of a variant (§6) streamed through
 *     the safetensors / torch .pt writers, plus conds.pt and the tokenizer
 *     files.
 *
 * Thread safety: the generator functions are pure; a loaded manifest is
 * read-only and may be shared; synth_write_variant uses the given pool. */
#ifndef CBX_IO_SYNTH_H
#define CBX_IO_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"
#include "io/model_dir.h"

struct threadpool;

/* ---- 1. generator (§2, §3) -------------------------------------------- */

uint64_t synth_fnv1a64(const void *bytes, size_t n);
/* key(name) = FNV-1a-64(name) XOR file_seed. */
uint64_t synth_key(const char *name, uint64_t file_seed);
/* The splitmix64 finaliser. */
uint64_t synth_mix(uint64_t z);
/* m_i = mix(key + (i + 1) * GOLDEN) >> 40, 0 <= m < 2^24. */
uint32_t synth_m(uint64_t key, uint64_t i);
/* Elements [start, start + n) of a float tensor. scale and offset are the
 * float32-rounded JSON numbers (float)scale, (float)offset. */
void synth_fill_f32(float *dst, uint64_t key, uint64_t start, size_t n,
                    float scale, float offset);
/* Elements [start, start + n) of an int_range [lo, hi) tensor:
 * lo + floor(m * (hi - lo) / 2^24). Needs 0 < hi - lo < 2^39. */
void synth_fill_i64(int64_t *dst, uint64_t key, uint64_t start, size_t n,
                    int64_t lo, int64_t hi);

/* ---- 2. manifests ------------------------------------------------------ */

enum synth_rule {
    SYNTH_RANDOM,    /* scale / offset (float32) */
    SYNTH_INT_RANGE, /* int_range [lo, hi) (int64) */
    SYNTH_ZEROS,     /* zeros: true */
    SYNTH_RECIPE,    /* a stored buffer (recipe.npy), copied verbatim */
};

struct synth_tensor {
    const char *name;  /* upstream state_dict key */
    enum dtype type;   /* TYPE_F32 or TYPE_I64 */
    int ndim;
    int64_t ne[TENSOR_MAX_DIMS];
    enum synth_rule rule;
    float scale, offset;   /* SYNTH_RANDOM: float32-rounded */
    int64_t lo, hi;        /* SYNTH_INT_RANGE */
    const void *data;      /* SYNTH_RECIPE: the buffer's bytes (owned by
                              the manifest), little-endian */
};

struct synth_manifest {
    const char *file;          /* "t3_turbo_v1.safetensors" */
    uint64_t seed;             /* manifest seed (not yet XORed) */
    int n;                     /* tensors, in file order */
    struct synth_tensor *t;
    int64_t num_elements;      /* sum over t */
    void *priv_;               /* owned strings and buffers */
};

/* Parse a manifest JSON text of n bytes. Recipe buffers are read from
 * data_dir (the "npy" path of a recipe, "data/buffers/x.npy", is taken
 * relative to data_dir's parent when it starts with "data/", else relative
 * to data_dir); data_dir may be NULL when the manifest has no recipes.
 * `where` names the text in messages. *out is owned by the caller, free
 * with synth_manifest_free(). */
cbx_status synth_manifest_parse(const char *json, size_t n, const char *where,
                                const char *data_dir,
                                struct synth_manifest **out, char *err);
/* Read data_dir/manifests/<file>.json and parse it. */
cbx_status synth_manifest_load(const char *data_dir, const char *file,
                               struct synth_manifest **out, char *err);
void synth_manifest_free(struct synth_manifest *m); /* no-op on NULL */

int64_t synth_tensor_nelements(const struct synth_tensor *t);
size_t synth_tensor_nbytes(const struct synth_tensor *t);
/* Bytes [elements start .. start + n) of t, little-endian, into dst, with
 * file_seed = manifest seed XOR global seed (the caller XORs). */
void synth_tensor_fill(const struct synth_tensor *t, uint64_t file_seed,
                       int64_t start, int64_t n, void *dst);
/* The same split over the pool's threads (tp may be NULL). */
void synth_tensor_fill_parallel(struct threadpool *tp,
                                const struct synth_tensor *t,
                                uint64_t file_seed, int64_t start, int64_t n,
                                void *dst);

/* The five generated tensors of a variant's conds.pt (§6), in save order:
 * conds.t3.speaker_emb, conds.t3.cond_prompt_speech_tokens,
 * conds.gen.prompt_token, conds.gen.prompt_feat, conds.gen.embedding.
 * Static descriptors (data NULL); generated with the global seed. */
#define SYNTH_N_CONDS 5
void synth_conds_tensors(enum model_variant v,
                         struct synth_tensor out[SYNTH_N_CONDS]);

/* ---- 3. directory writer (§6) ----------------------------------------- */

/* Where the runtime data (manifests/, buffers/, chatterbox-turbo/) lives:
 * $CBX_DATA_DIR, else <executable dir>/../share/chatterbox, else the
 * source tree's data/ recorded at build time. The first holding
 * manifests/ wins. Returns false (err set) when none does. */
bool synth_data_dir(char *buf, size_t n, char *err);

/* Progress callback: called before each file ("t3_turbo_v1.safetensors")
 * with done == 0, during it with bytes written so far, and once at its end
 * with done == total. NULL for none. */
typedef void (*synth_progress_fn)(void *user, const char *file,
                                  uint64_t done, uint64_t total);

struct synth_options {
    uint64_t global_seed;          /* 0 for the shipped fixtures */
    struct threadpool *tp;         /* may be NULL (single thread) */
    const char *data_dir;          /* NULL: synth_data_dir() */
    synth_progress_fn progress;
    void *progress_user;
};

/* Write the complete directory of variant v into dir (created if needed;
 * existing files of the same names are replaced, each through a temp file
 * and rename). Tokenizer files are copied from the data directory when it
 * has them; English without one gets the synthetic tokenizer.json of
 * synth_tokenizer.h. */
cbx_status synth_write_variant(enum model_variant v, const char *dir,
                               const struct synth_options *opt, char *err);
/* Write one weight file (a manifest) into dir/<m->file>. */
cbx_status synth_write_file(const struct synth_manifest *m, const char *dir,
                            const struct synth_options *opt, char *err);
/* Write dir/conds.pt of variant v. */
cbx_status synth_write_conds(enum model_variant v, const char *dir,
                             const struct synth_options *opt, char *err);

#endif
