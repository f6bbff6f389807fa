/* Shared by the libFuzzer targets: a micro model (every size as small as the config allows, one block, one
 * refiner layer), written once per process into a private directory, so that a target that loads a model
 * spends its time in the code under test.  Also a per-process scratch directory and an in-memory file whose
 * path can be handed to the library's path-based readers. */
#ifndef H3S_FUZZ_COMMON_H
#define H3S_FUZZ_COMMON_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "io/modeldir.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/model.h"
#include "report/report.h"
#include "sample/layout.h"

static inline h3s_config fuzz_micro_config(void) {
    h3s_config c;
    memset(&c, 0, sizeof c);
    c.num_attention_heads = 1;
    c.attention_head_dim = 6;
    c.hidden_size = 4;
    c.num_layers = 1;
    c.num_refiner_layers = 1;
    c.ffn_dim = 3;
    c.in_channels = 2;
    c.audio_in_channels = 2;
    c.patch_size[0] = 1;
    c.patch_size[1] = 2;
    c.patch_size[2] = 2;
    c.text_dim = 3;
    c.freq_dim = 4;
    c.time_embed_hidden_dim = 3;
    c.time_embed_dim = 2;
    c.rope_freq_dim = 1;
    c.rope_theta = 10000.0;
    c.norm_eps = c.qk_norm_eps = c.final_norm_eps = 1e-5;
    return c;
}

static inline void fuzz_die(const char *what) {
    fprintf(stderr, "fuzz setup: %s: %s\n", what, h3s_last_error());
    abort();
}

/* A private scratch directory, removed by nobody: the process is short-lived and it lives under TMPDIR. */
static inline const char *fuzz_scratch(void) {
    static char dir[256];
    if (!dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/h3s_fuzz_XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir)) fuzz_die("mkdtemp");
    }
    return dir;
}

static inline char *fuzz_path(const char *name) {
    static char bufs[4][512];
    static int k;
    char *p = bufs[k++ % 4];
    snprintf(p, sizeof bufs[0], "%s/%s", fuzz_scratch(), name);
    return p;
}

/* The micro model as a directory (config.json + one weights file). */
static inline const char *fuzz_micro_model_dir(void) {
    static char dir[512];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s", fuzz_path("micro"));
        h3s_config c = fuzz_micro_config();
        if (h3s_model_init_config(&c, 1, dir) != H3S_OK) fuzz_die("micro model");
    }
    return dir;
}

/* An in-memory file holding exactly data[0..size); its path is returned (valid until the next call). */
static inline const char *fuzz_memfile(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("h3s_fuzz", MFD_CLOEXEC);
        if (fd < 0) fuzz_die("memfd_create");
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) fuzz_die("memfd write");
    return path;
}

/* Replace a regular file with data[0..size) (plain write: the fuzzer must not pay for fsync). */
static inline void fuzz_put_file(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) fuzz_die(path);
    if (size && fwrite(data, 1, size, f) != size) fuzz_die(path);
    fclose(f);
}

/* The micro model split over two shards (parameters alternately) with its index: a directory for the index
 * target.  The index text written is returned through *index_text (malloc'd) when index_text != NULL. */
static inline const char *fuzz_micro_sharded_dir(char **index_text) {
    static char dir[512];
    static char *text;
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s", fuzz_path("sharded"));
        if (mkdir(dir, 0700) != 0) fuzz_die("mkdir sharded");
        h3s_config c = fuzz_micro_config();
        h3s_weights *w = NULL;
        if (h3s_weights_create(&c, 1, &w) != H3S_OK) fuzz_die("weights");
        char *cfg = NULL;
        if (h3s_config_to_json(&c, &cfg) != H3S_OK) fuzz_die("config json");
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, H3S_MODEL_CONFIG_FILE);
        fuzz_put_file(path, (const uint8_t *)cfg, strlen(cfg));
        free(cfg);
        int64_t n = h3s_weights_count(w);
        h3s_st_entry *e[2];
        int64_t k[2] = {0, 0};
        e[0] = calloc((size_t)n, sizeof *e[0]);
        e[1] = calloc((size_t)n, sizeof *e[1]);
        size_t cap = 64 + (size_t)n * 200;
        text = malloc(cap);
        size_t len = (size_t)snprintf(text, cap, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
        for (int64_t i = 0; i < n; i++) {
            const char *name = NULL;
            const h3s_tensor *t = h3s_weights_at(w, i, &name);
            int s = (int)(i % 2);
            e[s][k[s]++] = (h3s_st_entry){name, *t};
            len += (size_t)snprintf(text + len, cap - len, "%s\"%s\": \"shard-%d.safetensors\"", i ? ", " : "", name,
                                    s + 1);
        }
        snprintf(text + len, cap - len, "}}\n");
        for (int s = 0; s < 2; s++) {
            snprintf(path, sizeof path, "%s/shard-%d.safetensors", dir, s + 1);
            if (h3s_st_write(path, e[s], k[s]) != H3S_OK) fuzz_die("shard");
        }
        snprintf(path, sizeof path, "%s/%s", dir, H3S_MODEL_INDEX_FILE);
        fuzz_put_file(path, (const uint8_t *)text, strlen(text));
        free(e[0]);
        free(e[1]);
        h3s_weights_free(w);
    }
    if (index_text) *index_text = strdup(text);
    return dir;
}

/* A valid micro request: B items, padded to pad_to (0: none), with a key-padding mask when with_mask.  Every
 * tensor, the mask included, is owned by `in`. */
typedef struct fuzz_request {
    h3s_inputs in;
} fuzz_request;

static inline void fuzz_request_make(int64_t batch, int64_t pad_to, int with_mask, fuzz_request *q) {
    memset(q, 0, sizeof *q);
    h3s_config c = fuzz_micro_config();
    h3s_layout_opts lo = {2, 1, 2, 2, 1, 1, 0, pad_to};
    if (h3s_inputs_seeded(&c, &lo, batch, 3, 0.3f, 0.6f, &q->in) != H3S_OK) fuzz_die("inputs");
    if (with_mask) {
        const int64_t S = q->in.token_tags.shape[0], s2[2] = {batch, S};
        if (h3s_tensor_alloc(&q->in.attention_mask, H3S_BOOL, 2, s2) != H3S_OK) fuzz_die("mask");
        const int64_t *tags = q->in.token_tags.data;
        for (int64_t b = 0; b < batch; b++)
            for (int64_t s = 0; s < S; s++)
                ((uint8_t *)q->in.attention_mask.data)[b * S + s] = tags[s] != -1;
    }
}

/* The micro model in memory (weights seeded 1) on the CPU backend, one thread: what the targets that run it use.
 * The weights stay reachable through *w for the leak checker. */
static inline h3s_model *fuzz_micro_model(h3s_weights **w) {
    h3s_config c = fuzz_micro_config();
    h3s_model *m = NULL;
    if (h3s_weights_create(&c, 1, w) != H3S_OK || h3s_model_create(*w, H3S_BACKEND_CPU, &m) != H3S_OK)
        fuzz_die("micro model");
    h3s_set_num_threads(1);
    return m;
}

static inline void fuzz_request_free(fuzz_request *q) { h3s_inputs_free(&q->in); }

/* Write the request as an inputs file (the CLI's names). */
static inline void fuzz_request_write(const fuzz_request *q, const char *path) {
    if (h3s_inputs_write(path, &q->in, NULL, 0) != H3S_OK) fuzz_die("write inputs");
}

/* A message must be one line of printable text: no control byte may reach a terminal. */
static inline void fuzz_check_message(void) {
    const char *m = h3s_last_error();
    if (!m[0]) {
        fprintf(stderr, "failure without a message\n");
        abort();
    }
    for (const unsigned char *p = (const unsigned char *)m; *p; p++)
        if (*p < 0x20 || *p == 0x7f) {
            fprintf(stderr, "raw control byte 0x%02x in the message\n", *p);
            abort();
        }
}

#endif
