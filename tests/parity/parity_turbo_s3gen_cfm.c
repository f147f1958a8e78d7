/* parity_turbo_s3gen_cfm.c - Turbo S3Gen meanflow decoder (2 steps) vs
 * upstream fixtures (see s3gen_cfm.inc). */
#define VARIANT "turbo"
#define LAST 1
#include "s3gen_cfm.inc"
