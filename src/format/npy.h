/* NumPy .npy files (format version 1.0/2.0/3.0), float32 little-endian, C order: the logits
 * `nibble score` writes and the fixtures' reference logits it is compared with.
 * Tests: tests/model/test_npy.c. */
#ifndef NB_FORMAT_NPY_H
#define NB_FORMAT_NPY_H

#include <stdint.h>

#include "nibble.h"

#define NB_NPY_MAX_DIMS 8

/* Write `data` (float32, C order) with the given shape. */
nb_status nb_npy_write_f32(const char *path, const float *data, int ndim, const int64_t *shape);

/* Read a float32 ('<f4', fortran_order False) array. *data is malloc'd (free it); shape gets
 * up to NB_NPY_MAX_DIMS dims. Any other dtype or layout is NB_ERR_UNSUPPORTED naming the file;
 * a truncated or malformed file is NB_ERR_FORMAT. */
nb_status nb_npy_read_f32(const char *path, float **data, int *ndim, int64_t *shape);

#endif
