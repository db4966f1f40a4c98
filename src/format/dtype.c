/* Element types (format/dtype.h). */
#include "format/dtype.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
} nb_dtypes[NB_DTYPE_COUNT] = {
    [NB_DTYPE_F64] = {"F64", 8},     [NB_DTYPE_F32] = {"F32", 4},         [NB_DTYPE_F16] = {"F16", 2},
    [NB_DTYPE_BF16] = {"BF16", 2},   [NB_DTYPE_F8_E4M3] = {"F8_E4M3", 1}, [NB_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
    [NB_DTYPE_I64] = {"I64", 8},     [NB_DTYPE_I32] = {"I32", 4},         [NB_DTYPE_I16] = {"I16", 2},
    [NB_DTYPE_I8] = {"I8", 1},       [NB_DTYPE_U8] = {"U8", 1},           [NB_DTYPE_BOOL] = {"BOOL", 1},
};

size_t nb_dtype_size(nb_dtype t) { return (unsigned)t < NB_DTYPE_COUNT ? nb_dtypes[t].size : 0; }

const char *nb_dtype_name(nb_dtype t) { return (unsigned)t < NB_DTYPE_COUNT ? nb_dtypes[t].name : "?"; }

int nb_dtype_parse(const char *name)
{
    for (int i = 0; i < NB_DTYPE_COUNT; i++)
        if (!strcmp(name, nb_dtypes[i].name)) return i;
    return -1;
}
