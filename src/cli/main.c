/* h3strict: the command-line contract of CLI.md.
 *
 * Every command validates its options, runs, and on failure prints exactly one line
 * "h3strict <command>: <message>" on standard error and exits non-zero.  Output files are
 * written atomically by the library (temporary file + rename): a failed command leaves no
 * partial output behind. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "io/modeldir.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/model.h"
#include "report/report.h"
#include "sample/layout.h"
#include "sample/trajectory.h"

#define EXIT_USAGE 2

static const char *g_cmd = "h3strict";
static char g_command_line[1024];

/* The command line as typed, for reports ("every figure is reproduced by one command"). */
static void remember_command_line(int argc, char **argv) {
    size_t used = 0;
    for (int i = 0; i < argc && used + 2 < sizeof g_command_line; i++) {
        const char *a = i == 0 ? "h3strict" : argv[i];
        int n = snprintf(g_command_line + used, sizeof g_command_line - used, "%s%s", i ? " " : "", a);
        if (n < 0) break;
        used += (size_t)n;
    }
}

static int fail_line(const char *fmt, ...) H3S_PRINTF(1, 2);
static int fail_line(const char *fmt, ...) {
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* one line, whatever the message holds */
    for (char *p = msg; *p; p++)
        if (*p == '\n') *p = ' ';
    fprintf(stderr, "h3strict %s: %s\n", g_cmd, msg);
    return 1;
}

static int fail_status(h3s_status st) { return fail_line("%s (%s)", h3s_last_error(), h3s_status_name(st)); }

/* ------------------------------------------------------------------ options ----------- */

typedef struct opt {
    const char *name; /* "--model" */
    int takes_value;
    const char *value; /* NULL when absent; "" for a present flag */
} opt;

/* Parse argv[first..] against `opts`; unknown options and missing values are usage errors. */
static int parse_opts(int argc, char **argv, int first, opt *opts, int nopts) {
    for (int i = first; i < argc; i++) {
        int found = 0;
        for (int k = 0; k < nopts; k++) {
            if (strcmp(argv[i], opts[k].name)) continue;
            found = 1;
            if (opts[k].takes_value) {
                if (i + 1 >= argc) {
                    fail_line("option %s needs a value", argv[i]);
                    return -1;
                }
                opts[k].value = argv[++i];
            } else {
                opts[k].value = "";
            }
        }
        if (!found) {
            fail_line("unknown option '%s' (see h3strict --help)", argv[i]);
            return -1;
        }
    }
    return 0;
}

static const char *get(const opt *opts, int nopts, const char *name) {
    for (int k = 0; k < nopts; k++)
        if (!strcmp(opts[k].name, name)) return opts[k].value;
    return NULL;
}

static int need(const opt *opts, int nopts, const char *name, const char **out) {
    *out = get(opts, nopts, name);
    if (!*out) {
        fail_line("missing required option %s", name);
        return -1;
    }
    return 0;
}

static int parse_i64(const char *name, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        fail_line("%s must be an integer in [%lld, %lld], got '%s'", name, (long long)lo, (long long)hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_u64(const char *name, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-') return fail_line("%s must be a non-negative integer, got '%s'", name, s), -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || end == s) {
        fail_line("%s must be a non-negative integer, got '%s'", name, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_f32(const char *name, const char *s, float lo, float hi, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= lo && v <= hi)) {
        fail_line("%s must be a number in [%g, %g], got '%s'", name, lo, hi, s);
        return -1;
    }
    *out = (float)v;
    return 0;
}

static int apply_threads(const opt *opts, int nopts) {
    const char *t = get(opts, nopts, "--threads");
    if (!t) return 0;
    int64_t n;
    if (parse_i64("--threads", t, 1, 1024, &n)) return -1;
    h3s_set_num_threads((int)n);
    return 0;
}

static int parse_device(const opt *opts, int nopts, h3s_backend_kind *kind) {
    const char *d = get(opts, nopts, "--device");
    *kind = H3S_BACKEND_CPU;
    if (!d || !strcmp(d, "cpu")) return 0;
    if (!strcmp(d, "cuda")) {
        *kind = H3S_BACKEND_CUDA;
        return 0;
    }
    fail_line("--device must be cpu or cuda, got '%s'", d);
    return -1;
}

/* ------------------------------------------------------------------ init -------------- */

static int cmd_init(int argc, char **argv) {
    opt o[] = {{"--preset", 1, NULL}, {"--layers", 1, NULL}, {"--seed", 1, NULL}, {"--out", 1, NULL}};
    int n = sizeof o / sizeof o[0];
    const char *preset, *seed_s, *out;
    if (parse_opts(argc, argv, 2, o, n) || need(o, n, "--preset", &preset) || need(o, n, "--seed", &seed_s) ||
        need(o, n, "--out", &out))
        return EXIT_USAGE;
    uint64_t seed;
    int64_t layers = -1;
    if (parse_u64("--seed", seed_s, &seed)) return EXIT_USAGE;
    if (get(o, n, "--layers") && parse_i64("--layers", get(o, n, "--layers"), 1, 1000, &layers)) return EXIT_USAGE;
    h3s_status st = h3s_model_init(preset, layers, seed, out);
    if (st != H3S_OK) return fail_status(st);
    h3s_config c;
    st = h3s_config_preset(preset, layers, &c);
    if (st != H3S_OK) return fail_status(st);
    printf("initialised %s model (hidden %lld, %lld x %lld heads, %lld blocks, %lld refiner) seed %llu in %s\n", preset,
           (long long)c.hidden_size, (long long)c.num_attention_heads, (long long)c.attention_head_dim,
           (long long)c.num_layers, (long long)c.num_refiner_layers, (unsigned long long)seed, out);
    return 0;
}

/* ------------------------------------------------------------------ inputs ------------ */

static int parse_keyframes(const char *s, int *first, int *last) {
    *first = *last = 0;
    if (!s) return 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (!strcmp(tok, "first"))
            *first = 1;
        else if (!strcmp(tok, "last"))
            *last = 1;
        else
            return fail_line("--keyframes takes first, last or first,last; got '%s'", s), -1;
    }
    return 0;
}

static int cmd_inputs(int argc, char **argv) {
    opt o[] = {{"--model", 1, NULL},          {"--seed", 1, NULL},
               {"--batch", 1, NULL},          {"--text", 1, NULL},
               {"--frames", 1, NULL},         {"--latent-height", 1, NULL},
               {"--latent-width", 1, NULL},   {"--audio-latents", 1, NULL},
               {"--keyframes", 1, NULL},      {"--pad-to", 1, NULL},
               {"--t-video", 1, NULL},        {"--t-audio", 1, NULL},
               {"--attention-mask", 0, NULL}, {"--out", 1, NULL}};
    int n = sizeof o / sizeof o[0];
    const char *model, *seed_s, *out;
    if (parse_opts(argc, argv, 2, o, n) || need(o, n, "--model", &model) || need(o, n, "--seed", &seed_s) ||
        need(o, n, "--out", &out))
        return EXIT_USAGE;
    uint64_t seed;
    int64_t batch = 1;
    h3s_layout_opts lo = {6, 2, 4, 6, 4, 0, 0, 0};
    float tv = 0.25f, ta = 0.6f;
    if (parse_u64("--seed", seed_s, &seed)) return EXIT_USAGE;
    struct {
        const char *name;
        int64_t *dst;
        int64_t lo;
    } ints[] = {{"--batch", &batch, 1},
                {"--text", &lo.text_tokens, 1},
                {"--frames", &lo.frames, 1},
                {"--latent-height", &lo.latent_height, 1},
                {"--latent-width", &lo.latent_width, 1},
                {"--audio-latents", &lo.audio_latents, 0},
                {"--pad-to", &lo.pad_to, 0}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const char *v = get(o, n, ints[i].name);
        if (v && parse_i64(ints[i].name, v, ints[i].lo, 1 << 24, ints[i].dst)) return EXIT_USAGE;
    }
    if (parse_keyframes(get(o, n, "--keyframes"), &lo.keyframe_first, &lo.keyframe_last)) return EXIT_USAGE;
    if (get(o, n, "--t-video") && parse_f32("--t-video", get(o, n, "--t-video"), 0, 1, &tv)) return EXIT_USAGE;
    if (get(o, n, "--t-audio") && parse_f32("--t-audio", get(o, n, "--t-audio"), 0, 1, &ta)) return EXIT_USAGE;

    h3s_weights *w = NULL;
    h3s_status st = h3s_weights_load(model, &w);
    if (st != H3S_OK) return fail_status(st);
    const h3s_config *c = h3s_weights_config(w);
    h3s_layout lay;
    memset(&lay, 0, sizeof lay);
    h3s_tensor hv = {0}, ha = {0}, enc = {0}, ts = {0}, tsi = {0}, mask = {0};
    st = h3s_layout_build(&lo, c->patch_size[1], c->patch_size[2], &lay);
    if (st == H3S_OK)
        st = h3s_inputs_random(&lay, batch, seed, h3s_config_video_width(c), c->audio_in_channels, c->text_dim, &hv,
                               &ha, &enc);
    if (st == H3S_OK) st = h3s_layout_timesteps(&lay, tv, ta, &ts, &tsi);
    int with_mask = get(o, n, "--attention-mask") != NULL;
    if (st == H3S_OK && with_mask) {
        int64_t s2[2] = {batch, lay.S};
        st = h3s_tensor_alloc(&mask, H3S_BOOL, 2, s2);
        const int64_t *tags = lay.token_tags.data;
        for (int64_t b = 0; st == H3S_OK && b < batch; b++)
            for (int64_t s = 0; s < lay.S; s++)
                ((uint8_t *)mask.data)[b * lay.S + s] = tags[s] != -1;
    }
    if (st == H3S_OK) {
        h3s_st_entry e[11] = {{"hidden_states", hv},
                              {"audio_hidden_states", ha},
                              {"encoder_hidden_states", enc},
                              {"timestep", ts},
                              {"timestep_indices", tsi},
                              {"token_tags", lay.token_tags},
                              {"position_ids", lay.position_ids},
                              {"video_indices", lay.video_indices},
                              {"audio_indices", lay.audio_indices},
                              {"text_indices", lay.text_indices},
                              {"attention_mask", mask}};
        st = h3s_st_write(out, e, with_mask ? 11 : 10);
    }
    if (st == H3S_OK)
        printf("wrote %s: batch %lld, S %lld rows (%lld text, %lld video of which %lld condition, %lld audio, %lld "
               "padding), %lld timesteps\n",
               out, (long long)batch, (long long)lay.S, (long long)lay.Nt, (long long)lay.Nv,
               (long long)lay.n_condition, (long long)lay.Na, (long long)lay.n_pad, (long long)ts.shape[0]);
    h3s_tensor *ts_all[] = {&hv, &ha, &enc, &ts, &tsi, &mask};
    for (size_t i = 0; i < sizeof ts_all / sizeof ts_all[0]; i++)
        h3s_tensor_free(ts_all[i]);
    h3s_layout_free(&lay);
    h3s_weights_free(w);
    return st == H3S_OK ? 0 : fail_status(st);
}

/* ------------------------------------------------------------------ forward / grad ---- */

typedef struct loaded {
    h3s_weights *w;
    h3s_st_file *inputs_file;
    h3s_inputs in;
    h3s_model *model;
} loaded;

static void loaded_free(loaded *l) {
    h3s_model_free(l->model);
    h3s_st_close(l->inputs_file);
    h3s_weights_free(l->w);
}

static h3s_status load_all(const char *model, const char *inputs, h3s_backend_kind kind, loaded *l) {
    memset(l, 0, sizeof *l);
    H3S_TRY(h3s_weights_load(model, &l->w));
    h3s_status st = h3s_st_open(inputs, &l->inputs_file);
    if (st == H3S_OK) st = h3s_inputs_from_file(l->inputs_file, &l->in);
    int64_t batch;
    if (st == H3S_OK) st = h3s_inputs_validate(h3s_weights_config(l->w), &l->in, &batch);
    if (st == H3S_OK) st = h3s_model_create(l->w, kind, &l->model);
    return st;
}

static int cmd_forward(int argc, char **argv) {
    opt o[] = {
        {"--model", 1, NULL}, {"--inputs", 1, NULL}, {"--out", 1, NULL}, {"--device", 1, NULL}, {"--threads", 1, NULL}};
    int n = sizeof o / sizeof o[0];
    const char *model, *inputs, *out;
    h3s_backend_kind kind;
    if (parse_opts(argc, argv, 2, o, n) || need(o, n, "--model", &model) || need(o, n, "--inputs", &inputs) ||
        need(o, n, "--out", &out) || parse_device(o, n, &kind) || apply_threads(o, n))
        return EXIT_USAGE;
    loaded l;
    h3s_status st = load_all(model, inputs, kind, &l);
    h3s_tensor sample = {0}, audio = {0};
    if (st == H3S_OK) st = h3s_model_forward(l.model, &l.in, NULL, NULL, NULL, &sample, &audio);
    if (st == H3S_OK) {
        h3s_st_entry e[2] = {{"sample", sample}, {"audio_sample", audio}};
        st = h3s_st_write(out, e, 2);
    }
    if (st == H3S_OK)
        printf("wrote %s: sample [%lld, %lld, %lld], audio_sample [%lld, %lld, %lld] (%s)\n", out,
               (long long)sample.shape[0], (long long)sample.shape[1], (long long)sample.shape[2],
               (long long)audio.shape[0], (long long)audio.shape[1], (long long)audio.shape[2], h3s_backend_name(kind));
    h3s_tensor_free(&sample);
    h3s_tensor_free(&audio);
    loaded_free(&l);
    return st == H3S_OK ? 0 : fail_status(st);
}

static h3s_status read_cotangent(const char *path, h3s_st_file **f, const h3s_tensor **ds, const h3s_tensor **da) {
    H3S_TRY(h3s_st_open(path, f));
    const h3s_st_entry *es = h3s_st_find(*f, "sample"), *ea = h3s_st_find(*f, "audio_sample");
    if (!es || !ea) return h3s_fail(H3S_ERR_FORMAT, "cotangent %s must hold 'sample' and 'audio_sample'", path);
    for (int64_t i = 0; i < h3s_st_count(*f); i++) {
        const char *name = h3s_st_entry_at(*f, i)->name;
        if (strcmp(name, "sample") && strcmp(name, "audio_sample"))
            return h3s_fail(H3S_ERR_FORMAT, "cotangent %s: unexpected tensor '%s'", path, name);
    }
    if (es->tensor.dtype != H3S_F32 || ea->tensor.dtype != H3S_F32)
        return h3s_fail(H3S_ERR_DTYPE, "cotangent %s: 'sample' and 'audio_sample' must be F32", path);
    *ds = &es->tensor;
    *da = &ea->tensor;
    return H3S_OK;
}

static h3s_status write_grads(const char *path, const h3s_grads *g) {
    int64_t n = 3 + g->count;
    h3s_st_entry *e = h3s_calloc((size_t)n, sizeof *e);
    if (!e) return H3S_ERR_NOMEM;
    e[0] = (h3s_st_entry){"hidden_states", g->hidden_states};
    e[1] = (h3s_st_entry){"audio_hidden_states", g->audio_hidden_states};
    e[2] = (h3s_st_entry){"encoder_hidden_states", g->encoder_hidden_states};
    for (int64_t i = 0; i < g->count; i++)
        e[3 + i] = (h3s_st_entry){g->names[i], g->params[i]};
    h3s_status st = h3s_st_write(path, e, n);
    free(e);
    return st;
}

static int cmd_grad(int argc, char **argv) {
    opt o[] = {{"--model", 1, NULL}, {"--inputs", 1, NULL}, {"--cotangent", 1, NULL},
               {"--out", 1, NULL},   {"--device", 1, NULL}, {"--threads", 1, NULL}};
    int n = sizeof o / sizeof o[0];
    const char *model, *inputs, *ct, *out;
    h3s_backend_kind kind;
    if (parse_opts(argc, argv, 2, o, n) || need(o, n, "--model", &model) || need(o, n, "--inputs", &inputs) ||
        need(o, n, "--cotangent", &ct) || need(o, n, "--out", &out) || parse_device(o, n, &kind) || apply_threads(o, n))
        return EXIT_USAGE;
    loaded l;
    h3s_st_file *ctf = NULL;
    const h3s_tensor *ds = NULL, *da = NULL;
    h3s_status st = load_all(model, inputs, kind, &l);
    if (st == H3S_OK) st = read_cotangent(ct, &ctf, &ds, &da);
    h3s_tensor sample = {0}, audio = {0};
    h3s_tape *tape = NULL;
    h3s_grads g;
    memset(&g, 0, sizeof g);
    if (st == H3S_OK) st = h3s_model_forward(l.model, &l.in, NULL, NULL, &tape, &sample, &audio);
    if (st == H3S_OK) st = h3s_model_backward(l.model, tape, ds, da, NULL, NULL, &g);
    if (st == H3S_OK) st = write_grads(out, &g);
    if (st == H3S_OK)
        printf("wrote %s: 3 input gradients and %lld parameter gradients (%s)\n", out, (long long)g.count,
               h3s_backend_name(kind));
    h3s_grads_free(&g);
    h3s_tape_free(tape);
    h3s_tensor_free(&sample);
    h3s_tensor_free(&audio);
    h3s_st_close(ctf);
    loaded_free(&l);
    return st == H3S_OK ? 0 : fail_status(st);
}

static int cmd_cotangent(int argc, char **argv) {
    opt o[] = {{"--model", 1, NULL}, {"--inputs", 1, NULL}, {"--seed", 1, NULL}, {"--out", 1, NULL}};
    int n = sizeof o / sizeof o[0];
    const char *model, *inputs, *seed_s, *out;
    if (parse_opts(argc, argv, 2, o, n) || need(o, n, "--model", &model) || need(o, n, "--inputs", &inputs) ||
        need(o, n, "--seed", &seed_s) || need(o, n, "--out", &out))
        return EXIT_USAGE;
    uint64_t seed;
    if (parse_u64("--seed", seed_s, &seed)) return EXIT_USAGE;
    h3s_weights *w = NULL;
    h3s_st_file *f = NULL;
    h3s_inputs in;
    int64_t batch = 0;
    h3s_tensor ds = {0}, da = {0};
    h3s_status st = h3s_weights_load(model, &w);
    if (st == H3S_OK) st = h3s_st_open(inputs, &f);
    if (st == H3S_OK) st = h3s_inputs_from_file(f, &in);
    if (st == H3S_OK) st = h3s_inputs_validate(h3s_weights_config(w), &in, &batch);
    if (st == H3S_OK)
        st = h3s_cotangent_random(batch, in.hidden_states.shape[1], in.hidden_states.shape[2],
                                  in.audio_hidden_states.shape[1], in.audio_hidden_states.shape[2], seed, &ds, &da);
    if (st == H3S_OK) {
        h3s_st_entry e[2] = {{"sample", ds}, {"audio_sample", da}};
        st = h3s_st_write(out, e, 2);
    }
    if (st == H3S_OK) printf("wrote %s: seeded cotangent for batch %lld\n", out, (long long)batch);
    h3s_tensor_free(&ds);
    h3s_tensor_free(&da);
    h3s_st_close(f);
    h3s_weights_free(w);
    return st == H3S_OK ? 0 : fail_status(st);
}

/* ------------------------------------------------------------------ verify ------------ */

static int cmd_verify(int argc, char **argv) {
    opt o[] = {{"--model", 1, NULL}, {"--manifest", 1, NULL}, {"--write-manifest", 1, NULL}};
    int n = sizeof o / sizeof o[0];
    const char *model;
    if (parse_opts(argc, argv, 2, o, n) || need(o, n, "--model", &model)) return EXIT_USAGE;
    if (get(o, n, "--write-manifest")) {
        h3s_status st = h3s_model_manifest_write(model, get(o, n, "--write-manifest"));
        if (st != H3S_OK) return fail_status(st);
        printf("wrote manifest %s\n", get(o, n, "--write-manifest"));
        return 0;
    }
    char *report = NULL;
    h3s_status st = h3s_model_verify(model, get(o, n, "--manifest"), &report);
    if (st != H3S_OK) {
        free(report);
        return fail_status(st);
    }
    if (report) fputs(report, stdout);
    free(report);
    h3s_weights *w = NULL;
    st = h3s_weights_load(model, &w);
    if (st != H3S_OK) return fail_status(st);
    printf("verified %s: every parameter present with its checkpoint shape and dtype\n", model);
    h3s_weights_free(w);
    return 0;
}

/* ------------------------------------------------------------------ trajectory -------- */

static void progress_stderr(void *ctx, const char *line) {
    (void)ctx;
    fprintf(stderr, "h3strict trajectory: %s\n", line);
}

static int parse_seeds(const char *s, uint64_t *seeds, int64_t max, int64_t *count) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    *count = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*count == max) return fail_line("--seeds: at most %lld seeds", (long long)max), -1;
        if (parse_u64("--seeds", tok, &seeds[*count])) return -1;
        (*count)++;
    }
    if (*count == 0) return fail_line("--seeds needs at least one seed"), -1;
    return 0;
}

static int cmd_trajectory(int argc, char **argv) {
    opt o[] = {{"--model", 1, NULL},   {"--seeds", 1, NULL},   {"--steps", 1, NULL},
               {"--batch", 1, NULL},   {"--out", 1, NULL},     {"--device", 1, NULL},
               {"--threads", 1, NULL}, {"--no-grad", 0, NULL}, {"--quiet", 0, NULL}};
    int n = sizeof o / sizeof o[0];
    const char *out;
    h3s_backend_kind kind;
    if (parse_opts(argc, argv, 2, o, n) || need(o, n, "--out", &out) || parse_device(o, n, &kind) ||
        apply_threads(o, n))
        return EXIT_USAGE;
    uint64_t seeds[64] = {11, 22, 33};
    int64_t nseeds = 3, steps = 4, batch = 4;
    if (get(o, n, "--seeds") && parse_seeds(get(o, n, "--seeds"), seeds, 64, &nseeds)) return EXIT_USAGE;
    if (get(o, n, "--steps") && parse_i64("--steps", get(o, n, "--steps"), 1, 1000, &steps)) return EXIT_USAGE;
    if (get(o, n, "--batch") && parse_i64("--batch", get(o, n, "--batch"), 2, 4096, &batch)) return EXIT_USAGE;
    h3s_weights *w = NULL;
    h3s_status st;
    const char *model = get(o, n, "--model");
    if (model) {
        st = h3s_weights_load(model, &w);
    } else {
        /* the built-in tiny model: the project's main job on a fresh machine */
        h3s_config c;
        st = h3s_config_preset("tiny", -1, &c);
        if (st == H3S_OK) st = h3s_weights_create(&c, 0, &w);
    }
    if (st != H3S_OK) return fail_status(st);
    h3s_trajectory_opts to;
    memset(&to, 0, sizeof to);
    to.seeds = seeds;
    to.nseeds = nseeds;
    to.steps = steps;
    to.batch = batch;
    to.backend = kind;
    to.layout = (h3s_layout_opts){6, 2, 4, 6, 4, 1, 0, 0};
    to.with_grad = get(o, n, "--no-grad") == NULL;
    to.progress = get(o, n, "--quiet") ? NULL : progress_stderr;
    cJSON *report = NULL;
    h3s_trajectory_totals tot;
    st = h3s_trajectory_run(w, &to, &report, &tot);
    if (st == H3S_OK) {
        cJSON_AddStringToObject(report, "model", model ? model : "built-in tiny (seed 0)");
        cJSON_AddStringToObject(report, "command", g_command_line);
        cJSON_AddStringToObject(report, "h3strict_version", h3s_version());
        st = h3s_json_write_file(out, report);
    }
    cJSON_Delete(report);
    h3s_weights_free(w);
    if (st != H3S_OK) return fail_status(st);
    printf("report: %s\n", out);
    if (to.with_grad)
        printf("gradients: %lld/%lld item-0 input gradients differ (%lld seeds x %lld steps x 3)\n",
               (long long)tot.gradient_differing, (long long)tot.gradient_comparisons, (long long)nseeds,
               (long long)(tot.steps_run / (nseeds ? nseeds : 1)));
    printf("strict: %lld/%lld comparisons differ (%lld seeds x %lld steps x 4)\n", (long long)tot.differing,
           (long long)tot.comparisons, (long long)nseeds, (long long)(tot.steps_run / (nseeds ? nseeds : 1)));
    return tot.differing || tot.gradient_differing ? 1 : 0;
}

/* ------------------------------------------------------------------ replay ------------ */

static int cmd_replay(int argc, char **argv) {
    opt o[] = {{"--model", 1, NULL},   {"--inputs", 1, NULL},    {"--out", 1, NULL},        {"--device", 1, NULL},
               {"--threads", 1, NULL}, {"--no-golden", 0, NULL}, {"--plant-drift", 1, NULL}};
    int n = sizeof o / sizeof o[0];
    const char *model, *inputs, *out;
    h3s_backend_kind kind;
    if (parse_opts(argc, argv, 2, o, n) || need(o, n, "--model", &model) || need(o, n, "--inputs", &inputs) ||
        need(o, n, "--out", &out) || parse_device(o, n, &kind) || apply_threads(o, n))
        return EXIT_USAGE;
    h3s_weights *w = NULL;
    h3s_st_file *f = NULL;
    h3s_inputs in;
    int64_t batch;
    cJSON *report = NULL;
    h3s_status st = h3s_weights_load(model, &w);
    if (st == H3S_OK) st = h3s_st_open(inputs, &f);
    if (st == H3S_OK) st = h3s_inputs_from_file(f, &in);
    if (st == H3S_OK) st = h3s_inputs_validate(h3s_weights_config(w), &in, &batch);
    if (st == H3S_OK) {
        h3s_replay_opts ro = {kind, 1234, get(o, n, "--no-golden") == NULL, get(o, n, "--plant-drift")};
        st = h3s_replay(w, &in, &ro, &report);
    }
    if (st == H3S_OK) {
        cJSON_AddStringToObject(report, "command", g_command_line);
        cJSON_AddStringToObject(report, "h3strict_version", h3s_version());
        st = h3s_json_write_file(out, report);
    }
    if (st == H3S_OK) {
        const cJSON *fd = cJSON_GetObjectItemCaseSensitive(report, "first_drift");
        const cJSON *sum = cJSON_GetObjectItemCaseSensitive(report, "summary");
        const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(sum, "nodes");
        printf("report: %s\n", out);
        if (batch == 1)
            printf("replay: batch-1 inputs: batch invariance not compared (use inputs --batch 2 or more)\n");
        printf("replay: %d nodes, first drift: %s\n", cJSON_IsNumber(nodes) ? nodes->valueint : 0,
               cJSON_IsString(fd) ? fd->valuestring : "none");
    }
    cJSON_Delete(report);
    h3s_st_close(f);
    h3s_weights_free(w);
    return st == H3S_OK ? 0 : fail_status(st);
}

/* ------------------------------------------------------------------ main -------------- */

static void usage(FILE *f) {
    fprintf(f, "usage: h3strict <command> [options]\n"
               "\n"
               "Strict-mode MiniMax-H3: a rollout (batch 1) and its training recomputation (item 0 of a\n"
               "batch) give bit-for-bit identical results, forward and backward, on any thread count.\n"
               "\n"
               "commands:\n"
               "  init       --preset tiny|small|h3-33b [--layers N] --seed N --out DIR\n"
               "  inputs     --model DIR --seed N [--batch B] [--text T] [--frames F] [--latent-height H]\n"
               "             [--latent-width W] [--audio-latents A] [--keyframes first,last] [--pad-to N]\n"
               "             [--t-video T] [--t-audio T] [--attention-mask] --out IN.safetensors\n"
               "  forward    --model DIR --inputs IN --out OUT [--device cpu|cuda] [--threads N]\n"
               "  grad       --model DIR --inputs IN --cotangent CT --out GRADS [--device cpu|cuda] [--threads N]\n"
               "  cotangent  --model DIR --inputs IN --seed N --out CT.safetensors\n"
               "  trajectory [--model DIR] [--seeds 11,22,33] [--steps N] [--batch B] --out REPORT.json\n"
               "             [--device cpu|cuda] [--threads N] [--no-grad] [--quiet]\n"
               "  replay     --model DIR --inputs IN --out REPORT.json [--device cpu|cuda] [--threads N]\n"
               "             [--no-golden] [--plant-drift NODE  (test only: flip one bit of NODE in the repeat run)]\n"
               "  verify     --model DIR [--manifest MANIFEST.json] [--write-manifest MANIFEST.json]\n"
               "\n"
               "  --help       this text\n"
               "  --version    print the version\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("h3strict %s\n", h3s_version());
        return 0;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"init", cmd_init},     {"inputs", cmd_inputs},       {"forward", cmd_forward},
                {"grad", cmd_grad},     {"cotangent", cmd_cotangent}, {"trajectory", cmd_trajectory},
                {"replay", cmd_replay}, {"verify", cmd_verify}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (!strcmp(argv[1], cmds[i].name)) {
            g_cmd = cmds[i].name;
            remember_command_line(argc, argv);
            return cmds[i].fn(argc, argv);
        }
    }
    fprintf(stderr, "h3strict: unknown command '%s' (try --help)\n", argv[1]);
    return EXIT_USAGE;
}
