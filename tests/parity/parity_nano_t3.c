/* parity_nano_t3.c - Nano T3 vs upstream fixtures (see t3_parity.inc). */
#define VARIANT "nano"
#include "t3_parity.inc"
