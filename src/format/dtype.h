/* Element types as safetensors names them, shared by format/, model/ and ops/. */
#ifndef NB_FORMAT_DTYPE_H
#define NB_FORMAT_DTYPE_H

#include <stddef.h>

typedef enum nb_dtype {
    NB_DTYPE_F64 = 0,
    NB_DTYPE_F32,
    NB_DTYPE_F16,
    NB_DTYPE_BF16,
    NB_DTYPE_F8_E4M3,
    NB_DTYPE_F8_E5M2,
    NB_DTYPE_I64,
    NB_DTYPE_I32,
    NB_DTYPE_I16,
    NB_DTYPE_I8,
    NB_DTYPE_U8,
    NB_DTYPE_BOOL,
    NB_DTYPE_COUNT
} nb_dtype;

/* Bytes per element. */
size_t nb_dtype_size(nb_dtype t);
/* The safetensors name ("BF16"); "?" when out of range. */
const char *nb_dtype_name(nb_dtype t);
/* Parse a safetensors dtype name; returns -1 when unknown. */
int nb_dtype_parse(const char *name);

#endif
