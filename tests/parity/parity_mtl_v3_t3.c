/* parity_mtl_v3_t3.c - Multilingual v3 T3 (v2's architecture, other
 * weights) vs upstream fixtures: conditioning, [cond, uncond] input
 * embeddings, raw logits of both rows per step (the fixture records the
 * first 16 greedy steps), greedy and seeded sampled tokens (see
 * t3_parity.inc). */
#define VARIANT "mtl-v3"
#include "t3_parity.inc"
