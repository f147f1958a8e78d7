/* parity_turbo_s3gen_encoder.c - Turbo S3Gen flow encoder vs upstream (see s3gen_encoder.inc). */
#define VARIANT "turbo"
#include "s3gen_encoder.inc"
