/* common.h - shared helpers of the benchmark programs. */
#ifndef CBX_BENCH_COMMON_H
#define CBX_BENCH_COMMON_H
#endif
