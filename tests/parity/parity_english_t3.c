/* parity_english_t3.c - English (Llama, CFG) T3 vs upstream fixtures: the
 * conditioning with the Perceiver and the emotion token, the [cond,
 * uncond] input embeddings, the raw logits of both rows at every recorded
 * step, greedy and seeded sampled tokens (see t3_parity.inc). */
#define VARIANT "english"
#include "t3_parity.inc"
