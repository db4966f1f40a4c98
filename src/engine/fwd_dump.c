/* NB_DUMP hook of the forward pass (engine/fwd_dump.h). */
#include "engine/fwd_dump.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/log.h"
#include "format/npy.h"

static int dump_state = -1; /* -1 unread, 0 off, 1 on */
static const char *dump_pattern, *dump_dir;
static int dump_step_no = -1;

int nb_dump_enabled(void)
{
    if (dump_state < 0) {
        dump_pattern = getenv("NB_DUMP");
        dump_dir = getenv("NB_DUMP_DIR");
        if (!dump_dir || !*dump_dir) dump_dir = ".";
        dump_state = dump_pattern && *dump_pattern;
    }
    return dump_state;
}

void nb_dump_step(void)
{
    if (nb_dump_enabled()) dump_step_no++;
}

void nb_dump_f32(const char *name, const float *data, int64_t rows, int64_t cols)
{
    if (!nb_dump_enabled() || fnmatch(dump_pattern, name, 0) != 0) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/s%d.%s.npy", dump_dir, dump_step_no < 0 ? 0 : dump_step_no, name);
    if (nb_npy_write_f32(path, data, 2, (int64_t[]){rows, cols}) != NB_OK)
        NB_LOG_WARN("engine", "NB_DUMP: %s", nb_last_error());
    else
        NB_LOG_DEBUG("engine", "NB_DUMP: wrote %s [%lld, %lld]", path, (long long)rows, (long long)cols);
}
