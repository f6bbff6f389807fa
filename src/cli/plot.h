/* h3strict plot: figures of replay and trajectory reports (plot.c). */
#ifndef H3S_CLI_PLOT_H
#define H3S_CLI_PLOT_H

#include <cjson/cJSON.h>

#include "h3s.h"

/* 1 when this build draws (PLplot found at configure time). */
int plot_available(void);
/* Draw `doc` (read from `report`) into `out` (.png, .svg or .pdf), atomically; *kind = "replay" or "trajectory".
 * H3S_ERR_FORMAT for a report of neither kind, H3S_ERR_UNSUPPORTED in a build without PLplot. */
h3s_status plot_report(const cJSON *doc, const char *report, const char *out, const char **kind);

#endif
