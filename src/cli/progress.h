/* Progress lines of the h3strict commands, on standard error only.
 *
 * A command is a sequence of named stages (load the model, run forward, write the output, ...).  A stage that
 * is still running after H3S_PROGRESS_AFTER seconds (default 2) is announced with one line and reported again
 * with its elapsed time when it ends, so a quick command prints nothing (its one-line error contract holds) and
 * a long one is never silent for more than a few seconds (H3S_PROGRESS_EVERY, default 30, between lines).  --verbose
 * announces every stage at once; --quiet prints no progress at all.  The watcher is one thread that only reads the
 * clock and prints. */
#ifndef H3S_CLI_PROGRESS_H
#define H3S_CLI_PROGRESS_H

#include "h3s.h"

/* printf-style argument checking of the CLI's formatting functions */
#if defined(__GNUC__) || defined(__clang__)
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_PRINTF(a, b)
#endif

typedef enum progress_level { PROGRESS_QUIET = 0, PROGRESS_NORMAL = 1, PROGRESS_VERBOSE = 2 } progress_level;

/* The phase a stage belongs to decides how an I/O failure inside it is classified (reading input or writing
 * output). */
typedef enum progress_phase { PHASE_READ = 0, PHASE_RUN = 1, PHASE_WRITE = 2 } progress_phase;

/* The announcement delay and the interval between a stage's lines, in seconds (a negative value keeps the default,
 * 2 and 30); the command reads them from H3S_PROGRESS_AFTER and H3S_PROGRESS_EVERY, checked, before the start. */
void progress_set_delays(double after, double every);
void progress_start(const char *command, progress_level level);
/* End the current stage (if any) and begin a new one; the label says what the stage does. */
void progress_stage(progress_phase phase, const char *fmt, ...) CLI_PRINTF(2, 3);
/* The fraction of the current stage done, in [0, 1]: the stage's lines then show it and an estimate of the time
 * left.  Cheap: meant to be called often. */
void progress_fraction(double done);
/* End the current stage. */
void progress_end(void);
/* A line inside the current stage (e.g. one trajectory step), printed at NORMAL and VERBOSE. */
void progress_note(const char *fmt, ...) CLI_PRINTF(1, 2);
/* Stop the watcher; call before exiting. */
void progress_stop(void);

progress_phase progress_current_phase(void);
progress_level progress_get_level(void);
double progress_seconds(void); /* since progress_start */

#endif
