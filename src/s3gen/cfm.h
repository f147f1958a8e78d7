/* cfm.h - S3Gen flow-matching decoder: the estimator U-Net
 * (ConditionalDecoder) and the Euler solvers of CausalConditionalCFM
 * (meanflow for Turbo/Nano, cosine schedule with classifier-free guidance
 * for the standard checkpoints). spec/s3gen.md §5-§7, spec/rng.md §3.
 * Thread safety: a loaded s3gen_cfm is read-only; any thread,
 * concurrently, each call with its own arena and RNG stream. */
#ifndef CBX_S3GEN_CFM_H
#define CBX_S3GEN_CFM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/ops.h"
#include "core/rng.h"
#include "io/weights.h"

/* CausalConditionalCFM constants (CFM_PARAMS, ConditionalDecoder args). */
#define S3GEN_MEL_CHANNELS 80
#define S3GEN_CFG_RATE 0.7             /* inference_cfg_rate (a Python float) */
#define S3GEN_MEANFLOW_STEPS 2         /* flow_inference default, meanflow */
#define S3GEN_STANDARD_STEPS 10        /* flow_inference default, standard */

struct s3gen_estimator; /* ConditionalDecoder weights (private) */

struct s3gen_cfm {
    bool meanflow;                /* time_embed_mixer present (Turbo, Nano) */
    double cfg_rate;              /* inference_cfg_rate (standard solver) */
    struct s3gen_estimator *est;  /* owned */
};

/* Load flow.decoder.estimator.* from the MODEL_S3GEN component. The
 * variant (meanflow or standard) follows from the presence of
 * time_embed_mixer.weight. Linear and convolution weights are held as wtype
 * (F32 borrows the linear ones in place; conv weights are always
 * re-laid out at load; F16/BF16/Q8_0/Q4_0... are converted copies); norms,
 * biases and the time MLP's small tensors stay as stored. Borrowed tensors
 * must outlive the cfm. Every weight is placed on be (core/weights.h),
 * which must outlive the cfm. On failure *c is zeroed and err names the
 * tensor. */
cbx_status s3gen_cfm_load(struct s3gen_cfm *c, const struct weights *w, const struct backend *be, enum dtype wtype,
                          char *err);
void s3gen_cfm_free(struct s3gen_cfm *c); /* no-op on a zeroed cfm */

/* ConditionalDecoder.forward with the full-length mask (every row of the
 * batch is valid for all T frames, as flow.inference builds it).
 * x, mu, cond [B, 80, T]; spks [B, 80]; t[B], r[B] host floats (r only for
 * meanflow, NULL otherwise). Returns the velocity [B, 80, T] in a (arena-
 * owned) or NULL (see arena_status(a)). Intermediates live in private
 * scratch arenas on a's backend, so the peak memory is a few blocks'
 * activations rather than the whole U-Net's. */
struct tensor *s3gen_estimator_forward(struct arena *a, const struct s3gen_cfm *c,
                                       const struct tensor *x, const struct tensor *mu,
                                       const struct tensor *spks, const struct tensor *cond,
                                       const float *t, const float *r);

/* Observer of each Euler step (tests, progress): step i, the times t and r,
 * the estimator input x and output v ([2, 80, T] rows [cond, uncond] for
 * CFG when batched, else [1, 80, T]); tensors borrowed for the call.
 * Nonzero return cancels. */
typedef int (*s3gen_cfm_step_cb)(void *user, int step, float t, float r,
                                 const struct tensor *x, const struct tensor *v);

struct s3gen_cfm_params {
    int n_steps;            /* <= 0: 2 (meanflow) or 10 (standard) */
    bool cfg_separate;      /* standard: run the cond and uncond rows as two
                             * batch-1 calls instead of one batch of 2 */
    s3gen_cfm_step_cb cb;
    void *user;
};

/* t_span of CausalConditionalCFM.forward: n + 1 float32 points
 * torch.linspace(0, 1, n + 1), then 1 - cos(t * 0.5 * pi) when not
 * meanflow. span has n + 1 entries. */
void s3gen_cfm_t_span(bool meanflow, int n, float *span);

/* CausalConditionalCFM.forward from a given initial noise z [1, 80, T]:
 * basic_euler (meanflow) or solve_euler with CFG (standard; the
 * unconditional row zeroes mu, spks and cond). mu, cond [1, 80, T],
 * spks [1, 80]. Returns x at t = 1, [1, 80, T], in a, or NULL. */
struct tensor *s3gen_cfm_solve(struct arena *a, const struct s3gen_cfm *c,
                               const struct tensor *z, const struct tensor *mu,
                               const struct tensor *spks, const struct tensor *cond,
                               const struct s3gen_cfm_params *p);

/* CausalConditionalCFM.forward: z = randn_like(mu) from `z_stream`
 * ("s3gen.cfm.z"); with noised_mels [1, 80, W] (meanflow) the last W frames
 * of z are replaced by it; then s3gen_cfm_solve. */
struct tensor *s3gen_cfm_forward(struct arena *a, const struct s3gen_cfm *c,
                                 const struct tensor *mu, const struct tensor *spks,
                                 const struct tensor *cond, const struct tensor *noised_mels,
                                 struct rng_stream *z_stream, const struct s3gen_cfm_params *p);

/* Multiply-adds of one estimator call on B rows of T frames, as 2 * MACs
 * (linear/conv products and attention), for GFLOP/s figures. */
double s3gen_estimator_flops(const struct s3gen_cfm *c, int64_t B, int64_t T);

#endif
