/* Provenance of outputs and reports: see provenance.h. */
#include "provenance.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef H3S_SOURCE_COMMIT
#define H3S_SOURCE_COMMIT "unknown"
#endif

/* Metadata and reports must be valid UTF-8 and one line: bytes outside printable ASCII (say, of a path) become
 * '?'. */
static void printable_in_place(char *s) {
    for (char *c = s; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) *c = '?';
}

void provenance_add(provenance *p, const char *key, const char *fmt, ...) {
    if (p->n == PROVENANCE_MAX) return;
    snprintf(p->key[p->n], sizeof p->key[p->n], "%s", key);
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(p->value[p->n], sizeof p->value[p->n], fmt, ap);
    va_end(ap);
    /* a value longer than the slot (a very long path or command line) is never cut silently: it ends with a
     * marker that says how much is missing */
    if (len >= (int)sizeof p->value[p->n]) {
        char mark[64];
        int m = snprintf(mark, sizeof mark, "...(%d more bytes not recorded)", len - (int)sizeof p->value[p->n] + 1);
        size_t at = sizeof p->value[p->n] - 1 - (size_t)m;
        while (at > 0 && ((unsigned char)p->value[p->n][at] & 0xc0) == 0x80) /* not inside a UTF-8 sequence */
            at--;
        memcpy(p->value[p->n] + at, mark, (size_t)m + 1);
    }
    printable_in_place(p->value[p->n]);
    p->n++;
}

char *provenance_printable_dup(const char *s) {
    char *copy = strdup(s ? s : "");
    if (copy) printable_in_place(copy);
    return copy;
}

void provenance_init(provenance *p, const char *command_line) {
    p->n = 0;
    provenance_add(p, "h3strict_version", "%s", h3s_version());
    provenance_add(p, "source_commit", "%s", H3S_SOURCE_COMMIT);
    provenance_add(p, "command", "%s", command_line);
}

/* The CPU's model name as the kernel reports it ("cpu" when it does not). */
static void cpu_name(char *out, size_t size) {
    snprintf(out, size, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t len = strcspn(v, "\n");
        snprintf(out, size, "cpu: %.*s", (int)len, v);
        break;
    }
    fclose(f);
}

void provenance_add_backend(provenance *p, h3s_backend_kind kind) {
    char dev[300];
    if (kind == H3S_BACKEND_CUDA) {
        char desc[256];
        if (h3s_cuda_describe(desc, sizeof desc) == H3S_OK)
            snprintf(dev, sizeof dev, "cuda: %s", desc);
        else
            snprintf(dev, sizeof dev, "cuda: device 0 (not described: %s)", h3s_last_error());
    } else
        cpu_name(dev, sizeof dev);
    provenance_add(p, "backend", "%s", h3s_backend_name(kind));
    provenance_add(p, "device", "%s", dev);
    provenance_add(p, "threads", "%d", h3s_get_num_threads());
    provenance_add(p, "grad_operands", "%s", h3s_grad_operands_name(h3s_get_grad_operands()));
}

h3s_status provenance_add_model(provenance *p, const char *model, const h3s_config *c) {
    char *json = NULL, hex[65];
    h3s_status st = h3s_config_to_json(c, &json);
    if (st != H3S_OK) return st;
    st = h3s_sha256_hex(json, strlen(json), hex);
    h3s_free(json);
    if (st != H3S_OK) return st;
    provenance_add(p, "model", "%s", model);
    provenance_add(p, "model_config_sha256", "%s", hex);
    return H3S_OK;
}

h3s_status provenance_add_file(provenance *p, const char *key, const char *path) {
    char hex[65];
    h3s_status st = h3s_file_sha256_hex(path, hex);
    if (st != H3S_OK) return st;
    provenance_add(p, key, "%s", hex);
    return H3S_OK;
}

const h3s_st_meta *provenance_meta(provenance *p) {
    for (int i = 0; i < p->n; i++)
        p->meta[i] = (h3s_st_meta){p->key[i], p->value[i]};
    return p->meta;
}

cJSON *provenance_json(const provenance *p) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; o && i < p->n; i++)
        cJSON_AddStringToObject(o, p->key[i], p->value[i]);
    return o;
}
