/* SPDX-License-Identifier: MIT */
/*
 * sizeclass.c - the size-class tables of the malloc front end (see
 * sizeclass.h for the ladder and its fragmentation bound).  The tables are
 * constant data, so the class of a size is known before anything is
 * initialised (malloc can be called by the dynamic loader).
 */
#include "malloc/sizeclass.h"

const uint32_t sheaf_sc_size[SHEAF_SC_COUNT] = {
	8,     16,    32,    48,    64,    80,    96,    112,   128, /* quantum 16 B */
	160,   192,   224,   256,   320,   384,   448,   512,        /* four per doubling */
	640,   768,   896,   1024,  1280,  1536,  1792,  2048,  2560,  3072,
	3584,  4096,  5120,  6144,  7168,  8192,  10240, 12288, 14336, 16384,
	20480, 24576, 28672, 32768, 40960, 49152, 57344, 65536,
};

/* sheaf_sc_small[g] = smallest class >= 8 g (tests/unit/test_malloc_sizeclass.c
 * recomputes it from sheaf_sc_size). */
const uint8_t sheaf_sc_small[SHEAF_SC_TABLE_MAX / 8 + 1] = {
	0,  0,  1,  2,  2,  3,  3,  4,  4,  5,  5,  6,  6,  7,  7,  8,  8, /* 0..128 */
	9,  9,  9,  9,  10, 10, 10, 10, 11, 11, 11, 11, 12, 12, 12, 12,    /* ..256 */
	13, 13, 13, 13, 13, 13, 13, 13, 14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15,
	15, 15, 16, 16, 16, 16, 16, 16, 16, 16, /* ..512 */
	17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 18, 18, 18, 18, 18, 18,
	18, 18, 18, 18, 18, 18, 18, 18, 18, 18, 19, 19, 19, 19, 19, 19, 19, 19, 19, 19, 19, 19,
	19, 19, 19, 19, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, /* ..1024 */
};
