/* Clocks: monotonic nanoseconds for timing, wall-clock microseconds for timestamps. */
#ifndef NB_BASE_CLOCK_H
#define NB_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t nb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline double nb_now_s(void) { return (double)nb_now_ns() * 1e-9; }

static inline int64_t nb_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

#endif
