/* common.c - shared helpers of the benchmark programs (see common.h). */
#include "common.h"
