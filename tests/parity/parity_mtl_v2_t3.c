/* parity_mtl_v2_t3.c - Multilingual v2 T3 (the English Llama T3 with a
 * 2454-token text vocabulary; the backbone and policy decided by the
 * tensors) vs upstream fixtures: conditioning, [cond, uncond] input
 * embeddings, raw logits of both rows per step, greedy and seeded sampled
 * tokens (see t3_parity.inc). */
#define VARIANT "mtl-v2"
#include "t3_parity.inc"
