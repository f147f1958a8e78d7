/* parity_english_s3gen_cfm.c - English S3Gen decoder (cosine schedule,
 * 10 steps, classifier-free guidance) vs upstream fixtures (see
 * s3gen_cfm.inc). */
#define VARIANT "english"
#define LAST 9
#include "s3gen_cfm.inc"
