/* encoder.h - S3Gen flow front end: token embedding, conformer encoder and
 * projection to mel channels (chatterbox models/s3gen/flow.py
 * CausalMaskedDiffWithXvec.inference steps 3-7: flow.input_embedding,
 * flow.encoder = UpsampleConformerEncoder, flow.encoder_proj).
 * spec/s3gen.md §2-§4. The same weights layout serves every variant
 * (meanflow and standard S3Gen checkpoints).
 * Thread safety: a loaded encoder is read-only; any thread, concurrently,
 * each call with its own arena. */
#ifndef CBX_S3GEN_ENCODER_H
#define CBX_S3GEN_ENCODER_H

#include <stdint.h>

#include "core/ops.h"
#include "io/weights.h"

/* Weights of flow.input_embedding, flow.encoder.*, flow.encoder_proj. */
struct s3gen_encoder;

/* Load from the MODEL_S3GEN component, every weight placed on be
 * (core/weights.h). Tensors are borrowed from w's source, which must
 * outlive the encoder, as must be. *out: owned by the caller, free with
 * s3gen_encoder_free(). On failure *out is NULL and err names the tensor. */
cbx_status s3gen_encoder_load(struct s3gen_encoder **out, const struct weights *w, const struct backend *be,
                              char *err);
void s3gen_encoder_free(struct s3gen_encoder *e); /* no-op on NULL */

/* tokens[n]: prompt tokens followed by speech tokens (int32, host memory),
 * ids < vocabulary size (6561); negative ids read row 0, as upstream's
 * clamp(token, min=0). Returns mu [1, 80, 2n] = encoder_proj(h)
 * transposed as upstream ((1, 80, Tm)), arena-owned, or NULL (see
 * arena_status(a)). Per-layer intermediates (O(n^2) position scores) go
 * to a private scratch arena on a's backend, so a grows only O(n). */
struct tensor *s3gen_encoder_forward(struct arena *a, const struct s3gen_encoder *e,
                                     const int32_t *tokens, int64_t n);

#endif
