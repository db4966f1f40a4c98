/* Log sink and formatting (base/log.h). The level starts from $NIBBLE_LOG. */
#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

nb_log_level nb_log_level_current = NB_LOG_INFO;
static nb_log_sink nb_sink;
static void *nb_sink_user;
static pthread_mutex_t nb_log_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t nb_log_once = PTHREAD_ONCE_INIT;

static const char *const nb_level_names[] = {"trace", "debug", "info", "warn", "error", "off"};

int nb_log_level_parse(const char *s)
{
    for (int i = 0; i <= NB_LOG_OFF; i++)
        if (strcasecmp(s, nb_level_names[i]) == 0) return i;
    return -1;
}

static void nb_log_init(void)
{
    const char *env = getenv("NIBBLE_LOG");
    if (env) {
        int l = nb_log_level_parse(env);
        if (l >= 0) nb_log_level_current = (nb_log_level)l;
    }
}

__attribute__((constructor)) static void nb_log_ctor(void) { pthread_once(&nb_log_once, nb_log_init); }

void nb_log_set(nb_log_level level, nb_log_sink sink, void *user)
{
    pthread_mutex_lock(&nb_log_mu);
    nb_log_level_current = level;
    nb_sink = sink;
    nb_sink_user = user;
    pthread_mutex_unlock(&nb_log_mu);
}

void nb_log_write(nb_log_level level, const char *tag, const char *fmt, ...)
{
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);

    pthread_mutex_lock(&nb_log_mu);
    if (nb_sink) {
        nb_sink(level, tag, line, nb_sink_user);
    } else {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        fprintf(stderr, "%02d:%02d:%02d.%03ld %-5s [%s] %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
                ts.tv_nsec / 1000000, nb_level_names[level < NB_LOG_OFF ? level : NB_LOG_ERROR],
                tag, line);
    }
    pthread_mutex_unlock(&nb_log_mu);
}
