/* amx_tilecfg.h - the AMX tile configuration block (palette 1) that
 * _tile_loadconfig reads: 64 bytes, bytes per row and rows of each of the
 * 16 tile registers. Kernels define theirs as a static const object aligned
 * to 64: GCC's _tile_loadconfig tells the compiler it reads only 8 bytes,
 * so a configuration built on the stack could lose its other stores. */
#ifndef CBX_CPU_AMX_TILECFG_H
#define CBX_CPU_AMX_TILECFG_H

#include <stdint.h>

struct amx_tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

#endif
