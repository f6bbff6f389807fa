/* Progress lines on standard error: see progress.h. */
#include "progress.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wake = PTHREAD_COND_INITIALIZER;
static pthread_t g_watcher;
static int g_watching, g_stopping;
static const char *g_command = "h3strict";
static progress_level g_level = PROGRESS_NORMAL;
static double g_after = 2.0, g_repeat = 30.0, g_t0;

/* Before the first stage nothing has been read: a failure there is not a bad input file. */
static struct {
    int active, announced;
    progress_phase phase;
    char label[256];
    double start, last_line;
    double fraction; /* < 0: unknown */
} g_stage = {.phase = PHASE_RUN, .fraction = -1};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double progress_seconds(void) { return now_seconds() - g_t0; }
progress_level progress_get_level(void) { return g_level; }

progress_phase progress_current_phase(void) {
    pthread_mutex_lock(&g_lock);
    progress_phase p = g_stage.phase;
    pthread_mutex_unlock(&g_lock);
    return p;
}

/* Called with g_lock held. */
static void announce(double t) {
    double el = t - g_stage.start, f = g_stage.fraction;
    if (f > 0.005 && f < 1)
        fprintf(stderr, "h3strict %s: %s: %.0f s so far, %.0f%% done, about %.0f s left\n", g_command, g_stage.label,
                el, 100 * f, el / f * (1 - f));
    else if (g_stage.announced)
        fprintf(stderr, "h3strict %s: %s: %.0f s so far\n", g_command, g_stage.label, el);
    else if (el < 0.05)
        fprintf(stderr, "h3strict %s: %s ...\n", g_command, g_stage.label);
    else
        fprintf(stderr, "h3strict %s: %s ... (%.1f s so far)\n", g_command, g_stage.label, t - g_stage.start);
    fflush(stderr);
    g_stage.announced = 1;
    g_stage.last_line = t;
}

static void *watch(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_lock);
    while (!g_stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000 * 1000;
        if (until.tv_nsec >= 1000 * 1000 * 1000) {
            until.tv_sec++;
            until.tv_nsec -= 1000 * 1000 * 1000;
        }
        pthread_cond_timedwait(&g_wake, &g_lock, &until);
        if (g_stopping || !g_stage.active || g_level == PROGRESS_QUIET) continue;
        double t = now_seconds();
        if (!g_stage.announced ? t - g_stage.start >= g_after : t - g_stage.last_line >= g_repeat) announce(t);
    }
    pthread_mutex_unlock(&g_lock);
    return NULL;
}

void progress_set_delays(double after, double every) {
    if (after >= 0) g_after = after;
    if (every >= 0) g_repeat = every;
}

void progress_start(const char *command, progress_level level) {
    g_command = command;
    g_level = level;
    g_t0 = now_seconds();
    if (level != PROGRESS_QUIET && !g_watching && pthread_create(&g_watcher, NULL, watch, NULL) == 0) g_watching = 1;
}

/* Called with g_lock held. */
static void end_locked(void) {
    if (!g_stage.active) return;
    double t = now_seconds();
    if (g_level != PROGRESS_QUIET && (g_stage.announced || g_level == PROGRESS_VERBOSE)) {
        fprintf(stderr, "h3strict %s: %s: done in %.2f s\n", g_command, g_stage.label, t - g_stage.start);
        fflush(stderr);
    }
    g_stage.active = 0;
}

void progress_stage(progress_phase phase, const char *fmt, ...) {
    pthread_mutex_lock(&g_lock);
    end_locked();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_stage.label, sizeof g_stage.label, fmt, ap);
    va_end(ap);
    g_stage.active = 1;
    g_stage.announced = 0;
    g_stage.phase = phase;
    g_stage.fraction = -1;
    g_stage.start = now_seconds();
    if (g_level == PROGRESS_VERBOSE || (g_level == PROGRESS_NORMAL && g_after == 0)) announce(g_stage.start);
    pthread_mutex_unlock(&g_lock);
}

void progress_fraction(double done) {
    pthread_mutex_lock(&g_lock);
    g_stage.fraction = done;
    pthread_mutex_unlock(&g_lock);
}

void progress_end(void) {
    pthread_mutex_lock(&g_lock);
    end_locked();
    pthread_mutex_unlock(&g_lock);
}

void progress_note(const char *fmt, ...) {
    if (g_level == PROGRESS_QUIET) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&g_lock);
    fprintf(stderr, "h3strict %s: %s\n", g_command, line);
    fflush(stderr);
    /* a note is a sign of life: the stage's own line is not repeated right after it */
    if (g_stage.active) {
        g_stage.announced = 1;
        g_stage.last_line = now_seconds();
    }
    pthread_mutex_unlock(&g_lock);
}

void progress_stop(void) {
    pthread_mutex_lock(&g_lock);
    g_stopping = 1;
    pthread_cond_signal(&g_wake);
    pthread_mutex_unlock(&g_lock);
    if (g_watching) pthread_join(g_watcher, NULL);
    g_watching = 0;
}
