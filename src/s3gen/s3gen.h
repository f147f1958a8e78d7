/* s3gen.h - S3Gen (S3Token2Wav) as used for synthesis: speech tokens + a
 * reference dict -> 24 kHz waveform through the flow (tokens -> mel) and
 * HiFT (mel -> wav), with the output fade-in. Ports chatterbox
 * models/s3gen/s3gen.py (S3Token2Wav.flow_inference, inference,
 * trim_fade); spec/s3gen.md §1, hift.md §9, rng.md §3.
 * Thread safety: a loaded s3gen is read-only and may serve any number of
 * concurrent calls, each with its own arena. */
#ifndef CBX_S3GEN_S3GEN_H
#define CBX_S3GEN_S3GEN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/ops.h"
#include "io/weights.h"
#include "s3gen/cfm.h"
#include "s3gen/flow.h"

struct hift;
struct conds;
struct backend;

#define S3GEN_SAMPLE_RATE 24000
#define S3GEN_TRIM_FADE 960 /* 2 * S3GEN_SR / 50 */

struct s3gen {
    bool meanflow;             /* Turbo/Nano checkpoint (s3gen_meanflow) */
    enum dtype wtype;          /* the estimator's weight type, as loaded */
    struct s3gen_flow flow;
    struct hift *mel2wav;      /* owned */
    float trim_fade[S3GEN_TRIM_FADE];
};

/* Load flow.* and mel2wav.* from the MODEL_S3GEN component; wtype holds
 * the CFM estimator's linear/conv weights (F32, F16, BF16, Q8_0, Q4_0...).
 * Every weight is placed on be (core/weights.h), which must outlive the
 * model. On failure *s is zeroed and err names the tensor. */
cbx_status s3gen_load(struct s3gen *s, const struct weights *w, const struct backend *be, enum dtype wtype,
                      char *err);
void s3gen_free(struct s3gen *s); /* no-op on a zeroed s3gen */

struct s3gen_params {
    int n_cfm_steps;          /* <= 0: 2 (meanflow) or 10 (standard) */
    uint64_t seed;            /* every run-time stream (rng.md §3) */
    bool cfg_separate;        /* CFG rows as two batch-1 estimator calls */
    s3gen_cfm_step_cb cb;     /* optional, per Euler step */
    void *user;
    bool bf16;                /* products may round to BF16 (arena_set_bf16) */
    struct arena *ws;         /* s3gen_vocode only: an arena the caller keeps
                               * between calls (reset at the start and the
                               * end of each), so repeated calls reuse its
                               * memory; NULL: one made per call */
};
struct s3gen_params s3gen_default_params(void);

/* Whether products round to BF16 by default for weights of type wtype:
 * yes for quantised weights (Q8_0, Q4_0, ...), which already trade exact
 * F32 arithmetic for speed; F32/F16/BF16 weights keep F32 products. */
bool s3gen_default_bf16(enum dtype wtype);

/* S3Token2Wav.flow_inference (finalize=True): meanflow draws noised_mels
 * (1, 80, 2n) from "s3gen.flow.noised_mels", then the flow with
 * "s3gen.cfm.z". Returns the mel [1, 80, M] (arena-owned) or NULL. */
struct tensor *s3gen_flow_mel(struct arena *a, const struct s3gen *s, const int32_t *tokens,
                              int64_t n, const struct s3gen_ref *ref,
                              const struct s3gen_params *p);

/* S3Gen.inference: flow_inference, mel2wav.inference, then the first 960
 * samples times trim_fade. Returns wav [1, 480 M] (arena-owned) or NULL;
 * *mel (optional) receives the mel. */
struct tensor *s3gen_inference(struct arena *a, const struct s3gen *s, const int32_t *tokens,
                               int64_t n, const struct s3gen_ref *ref,
                               const struct s3gen_params *p, struct tensor **mel);

/* Library entry point: speech tokens (ids below 6561) and a voice's
 * S3Gen part (prompt_token, prompt_feat, embedding of struct conds) ->
 * 24 kHz mono float PCM. *pcm is owned by the caller (free()); on failure
 * it is NULL and err says why. `be` runs the model. */
cbx_status s3gen_vocode(const struct s3gen *s, const struct backend *be, const int32_t *tokens,
                        int64_t n, const struct conds *voice, const struct s3gen_params *p,
                        float **pcm, int64_t *n_pcm, char *err);

#endif
