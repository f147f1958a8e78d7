/* parity_english_s3gen_encoder.c - English S3Gen flow encoder vs upstream (see s3gen_encoder.inc). */
#define VARIANT "english"
#include "s3gen_encoder.inc"
