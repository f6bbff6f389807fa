/* Provenance of what a command writes: which build, on what, from which model and inputs, by which command.
 * The same key/value pairs go into a safetensors file's "__metadata__" and a JSON report's "provenance" object
 * (docs/cli.md lists the keys). */
#ifndef H3S_CLI_PROVENANCE_H
#define H3S_CLI_PROVENANCE_H

#include <cjson/cJSON.h>

#include "h3s.h"
#include "h3s_io.h"
#include "h3s_model.h"
#include "progress.h"

#define PROVENANCE_MAX 16

typedef struct provenance {
    int n;
    char key[PROVENANCE_MAX][32];
    char value[PROVENANCE_MAX][1100];
    h3s_st_meta meta[PROVENANCE_MAX];
} provenance;

/* h3strict_version, source_commit, command. */
void provenance_init(provenance *p, const char *command_line);
void provenance_add(provenance *p, const char *key, const char *fmt, ...) CLI_PRINTF(3, 4);
/* backend, device, threads, grad_operands (how the backward rounds its operands: it decides gradient bits) */
void provenance_add_backend(provenance *p, h3s_backend_kind kind);
/* model (as given) and model_config_sha256 (SHA-256 of the canonical config.json text) */
h3s_status provenance_add_model(provenance *p, const char *model, const h3s_config *c);
/* <key> = SHA-256 of the file's bytes */
h3s_status provenance_add_file(provenance *p, const char *key, const char *path);

/* A copy of s (malloc'd, the caller frees it; NULL when out of memory) with every byte outside printable ASCII
 * replaced by '?', as every provenance value is: the reports' top-level "command" and "model" are written so. */
char *provenance_printable_dup(const char *s);

/* The pairs as safetensors metadata (valid while p lives) and as a JSON object. */
const h3s_st_meta *provenance_meta(provenance *p);
cJSON *provenance_json(const provenance *p);

#endif
