/* quant_policy.h - which tensors `chatterbox convert --quant T` stores as T.
 *
 * One rule for every variant and component, decided per tensor from its
 * upstream name, its shape (as it will be stored: linear weights [out, in])
 * and its stored type. Only linear/projection weights may narrow, because
 * they are the only tensors every loader hands to op_linear, which takes
 * any weight type; everything else stays as stored:
 *   1. integer tensors (token ids, lengths);
 *   2. anything not named "*.weight": biases, norm statistics, buffers
 *      (windows, filterbanks, mel bases), LSTM "weight_ih_l0" style names,
 *      weight-norm "parametrizations.weight.original0/1" (folded on the host
 *      at load);
 *   3. weights that are not 2-D: convolutions (op_conv1d takes float
 *      weights only) and 1-D norm/affine weights;
 *   4. norms ("norm", "ln_" in a name segment);
 *   5. tables read by row rather than multiplied: embeddings ("emb" in a
 *      segment: text_emb, speech_emb, embed_tokens, input_embedding, ...),
 *      "wpe"/"wte" and position tables ("pos_enc", "position");
 *   6. for block types: an inner dim that is not a multiple of 32 (QK);
 *   7. small tensors, under QUANT_POLICY_MIN_ELEMENTS elements: they cost
 *      little and are where rounding hurts most.
 * Target F32 widens eligible F16/BF16 weights; F16/BF16 targets apply rules
 * 1-5 and 7. Thread safety: pure; any thread. */
#ifndef CBX_IO_QUANT_POLICY_H
#define CBX_IO_QUANT_POLICY_H

#include <stdint.h>

#include "core/tensor.h"

#define QUANT_POLICY_MIN_ELEMENTS 65536

/* True when t is a type convert can target: f32 f16 bf16 q8_0 q4_0 q4_1
 * q5_0 q5_1. */
int quant_policy_target_ok(enum dtype t);

/* The type tensor `name` ([ne] as stored, of type `stored`) gets when the
 * target is `target`: target itself, or `stored` when a rule above keeps
 * it. *why (optional) gets a static phrase naming the rule that kept it
 * ("integer tensor", "embedding or position table", ...) or "quantisable". */
enum dtype quant_policy_type(const char *name, int ndim, const int64_t *ne, enum dtype stored,
                             enum dtype target, const char **why);

#endif
