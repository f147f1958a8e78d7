/* parity_turbo_t3.c - Turbo T3 vs upstream fixtures (see t3_parity.inc). */
#define VARIANT "turbo"
#include "t3_parity.inc"
