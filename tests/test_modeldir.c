/* Model directories: seeded init (reproducible, well-scaled), load against the parameter table, shards, the
 * transformer/ subfolder, every way a directory can be wrong (each error naming the tensor or file), the
 * overwrite policy of init, and verification against a manifest. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "io/modeldir.h"
#include "io/safetensors.h"
#include "test_util.h"

static char root[] = "/tmp/h3s_test_modeldir_XXXXXX";

static char *pjoin(const char *a, const char *b) {
    static char bufs[8][1024];
    static int k = 0;
    char *out = bufs[k++ % 8];
    if (snprintf(out, 1024, "%s/%s", a, b) >= 1024) exit(2);
    return out;
}

static void write_text(const char *path, const char *text) { h3t_write_file(path, text, strlen(text)); }

static int files_equal(const char *a, const char *b) {
    unsigned char *x, *y;
    size_t nx = h3t_read_file(a, &x), ny = h3t_read_file(b, &y);
    int eq = x && y && nx == ny && memcmp(x, y, nx) == 0;
    free(x);
    free(y);
    return eq;
}

static void copy_file(const char *from, const char *to) {
    unsigned char *x;
    size_t n = h3t_read_file(from, &x);
    FILE *f = fopen(to, "wb");
    fwrite(x, 1, n, f);
    fclose(f);
    free(x);
}

static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
            rm_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void make_dir(const char *path) { mkdir(path, 0755); }

/* A path that must outlive the rotating pjoin buffers. */
#define PATHVAR(var, base, sub)                                                                                        \
    char var[1024];                                                                                                    \
    if (snprintf(var, sizeof var, "%s/%s", base, sub) >= (int)sizeof var) exit(2)

/* Every canonical parameter of `w` as entries (views). */
static h3s_st_entry *entries_of(const h3s_weights *w, int64_t *n) {
    *n = h3s_weights_count(w);
    h3s_st_entry *e = calloc((size_t)*n, sizeof *e);
    for (int64_t i = 0; i < *n; i++) {
        const h3s_tensor *t = h3s_weights_at(w, i, &e[i].name);
        e[i].tensor = *t;
    }
    return e;
}

/* The load must fail with `want` and the message must contain `needle`. */
static void expect_load_fails(const char *dir, h3s_status want, const char *needle, const char *what) {
    h3s_weights *w = NULL;
    h3s_clear_error();
    h3s_status st = h3s_weights_load(dir, &w);
    CHECK(st == want, "%s: got %s (%s), expected %s", what, h3s_status_name(st), h3s_last_error(),
          h3s_status_name(want));
    CHECK(strstr(h3s_last_error(), needle) != NULL, "%s: message lacks '%s': %s", what, needle, h3s_last_error());
    CHECK(w == NULL, "%s: output written on failure", what);
    if (st == H3S_OK) h3s_weights_free(w);
}

/* ---------------------------------------------------------------- rename shim -------- */

/* This test defines rename and renameat2, so that the library linked into it (statically) calls these: they pass
 * through to the kernel unless a case below arms them.  With g_no_exchange, RENAME_EXCHANGE fails with EINVAL as on
 * a file system without it; renames that touch a path under g_watch are counted from 0, and those whose number has
 * its bit set in g_fail_mask fail with EIO. */
static int g_no_exchange;
static const char *g_watch;
static unsigned g_fail_mask, g_watched;
static unsigned g_put_after = ~0u; /* after the watched rename of this number: a file "mine" written at g_put_path */
static const char *g_put_path;

static int watched(const char *p) {
    size_t n = g_watch ? strlen(g_watch) : 0;
    return n && strncmp(p, g_watch, n) == 0 && (p[n] == '/' || p[n] == '\0');
}

static int shim_rename(const char *a, const char *b, unsigned flags) {
    if (g_no_exchange && (flags & RENAME_EXCHANGE)) {
        errno = EINVAL;
        return -1;
    }
    unsigned k = ~0u;
    if (watched(a) || watched(b)) {
        k = g_watched++;
        if (k < 32 && (g_fail_mask >> k & 1u)) {
            errno = EIO;
            return -1;
        }
    }
    const int rc = !flags ? (int)syscall(SYS_renameat, AT_FDCWD, a, AT_FDCWD, b) /* on any kernel */
                          : (int)syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, flags);
    if (rc == 0 && watched(a) + watched(b) && k == g_put_after && g_put_path) {
        FILE *f = fopen(g_put_path, "wx");
        if (f) fputs("mine", f), fclose(f);
    }
    return rc;
}

int rename(const char *a, const char *b) { return shim_rename(a, b, 0); }

int renameat2(int fa, const char *a, int fb, const char *b, unsigned flags) {
    if (fa != AT_FDCWD || fb != AT_FDCWD) return (int)syscall(SYS_renameat2, fa, a, fb, b, flags);
    return shim_rename(a, b, flags);
}

/* ---------------------------------------------------------------- init + load ---------- */

static double mean_of(const h3s_tensor *t) {
    double s = 0;
    int64_t n = h3s_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        s += h3s_tensor_get_f64(t, i);
    return s / (double)n;
}

static double std_of(const h3s_tensor *t, double about) {
    double s = 0;
    int64_t n = h3s_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double d = h3s_tensor_get_f64(t, i) - about;
        s += d * d;
    }
    return sqrt(s / (double)n);
}

static void test_init_and_load(const char *m1) {
    CHECK_OK(h3s_model_init("tiny", -1, 7, m1));
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_load(m1, &w));
    if (!w) return;
    h3s_config tiny;
    CHECK_OK(h3s_config_preset("tiny", -1, &tiny));
    CHECK(memcmp(h3s_weights_config(w), &tiny, sizeof tiny) == 0, "config.json holds the tiny preset");
    h3s_param_spec *specs = NULL;
    int64_t n = 0;
    CHECK_OK(h3s_param_specs(&tiny, &specs, &n));
    CHECK(h3s_weights_count(w) == n, "count %lld vs %lld", (long long)h3s_weights_count(w), (long long)n);
    for (int64_t i = 0; i < n && i < h3s_weights_count(w); i++) {
        const char *name = NULL;
        const h3s_tensor *t = h3s_weights_at(w, i, &name);
        CHECK(name && strcmp(name, specs[i].name) == 0, "canonical order at %lld", (long long)i);
        CHECK(t == h3s_weights_get(w, specs[i].name), "get(%s) is at(%lld)", specs[i].name, (long long)i);
        CHECK(t->dtype == specs[i].dtype && t->ndim == specs[i].ndim && t->shape[0] == specs[i].shape[0] &&
                  (t->ndim == 1 || t->shape[1] == specs[i].shape[1]),
              "%s: dtype/shape", specs[i].name);
    }
    CHECK(h3s_weights_get(w, "transformer_blocks.2.norm1.weight") == NULL, "absent parameter");
    CHECK(h3s_weights_at(w, n, NULL) == NULL, "at out of range");

    /* the scales the init promises */
    const h3s_tensor *q = h3s_weights_get(w, "transformer_blocks.0.attn.to_q.weight"); /* [60, 48] bf16 */
    const h3s_tensor *k = h3s_weights_get(w, "transformer_blocks.0.attn.to_k.weight");
    double sq = std_of(q, 0), want = 1 / sqrt(48.0);
    CHECK(fabs(sq / want - 1) < 0.08, "to_q std %g, want %g", sq, want);
    CHECK(fabs(mean_of(q)) < 0.02, "to_q mean %g", mean_of(q));
    CHECK(!h3t_bitwise_equal(q, k), "to_q and to_k must differ (own streams)");
    const h3s_tensor *ada = h3s_weights_get(w, "transformer_blocks.1.adaln_proj.linear.weight"); /* [864, 36] */
    double sa = std_of(ada, 0), want_a = 0.5 / 6.0;
    CHECK(fabs(sa / want_a - 1) < 0.05, "adaln weight std %g, want %g", sa, want_a);
    const h3s_tensor *adab = h3s_weights_get(w, "transformer_blocks.1.adaln_proj.linear.bias"); /* [864] */
    CHECK(fabs(std_of(adab, 0) / 0.1 - 1) < 0.12, "adaln bias std %g", std_of(adab, 0));
    const h3s_tensor *nb = h3s_weights_get(w, "norm_out.linear.bias");
    CHECK(fabs(std_of(nb, 0) / 0.1 - 1) < 0.25, "norm_out bias std %g", std_of(nb, 0));
    const h3s_tensor *pb = h3s_weights_get(w, "proj_in.bias"); /* [48] f32 */
    CHECK(pb->dtype == H3S_F32 && std_of(pb, 0) > 0.01 && std_of(pb, 0) < 0.03, "proj_in bias std %g", std_of(pb, 0));
    const h3s_tensor *norm = h3s_weights_get(w, "transformer_blocks.0.norm1.weight");
    CHECK(fabs(mean_of(norm) - 1) < 0.05 && std_of(norm, mean_of(norm)) > 0.05 && std_of(norm, mean_of(norm)) < 0.15,
          "norm weight mean %g std %g", mean_of(norm), std_of(norm, mean_of(norm)));
    const h3s_tensor *po = h3s_weights_get(w, "proj_out.weight"); /* [24, 48] f32 */
    CHECK(fabs(std_of(po, 0) / (1 / sqrt(48.0)) - 1) < 0.1, "proj_out std %g", std_of(po, 0));
    /* every BF16 value is finite and the F32 ones are not all bf16-rounded (F32 modules keep full precision) */
    int f32_full = 0;
    for (int64_t i = 0; i < h3s_tensor_numel(po); i++) {
        float v = ((const float *)po->data)[i];
        if (h3s_bf16_value(h3s_bf16_round(v)) != v) f32_full++;
    }
    CHECK(f32_full > 0, "F32 parameters keep F32 precision");

    /* writing the loaded parameters back in canonical order reproduces the file byte for byte */
    int64_t ne;
    h3s_st_entry *e = entries_of(w, &ne);
    PATHVAR(back, root, "rewrite.safetensors");
    CHECK_OK(h3s_st_write(back, e, ne));
    CHECK(files_equal(back, pjoin(m1, H3S_MODEL_WEIGHTS_FILE)), "rewrite is byte-identical to init's file");
    unlink(back);
    free(e);

    /* in-memory weights carry exactly the values init wrote */
    h3s_weights *mem = NULL;
    CHECK_OK(h3s_weights_create(&tiny, 7, &mem));
    if (mem) {
        int same = h3s_weights_count(mem) == n;
        for (int64_t i = 0; same && i < n; i++)
            same = h3t_bitwise_equal(h3s_weights_at(mem, i, NULL), h3s_weights_at(w, i, NULL));
        CHECK(same, "weights_create equals init's file");
        CHECK(h3s_weights_dir(mem) == NULL, "in-memory weights have no directory");
        h3s_weights_free(mem);
    }
    free(specs);
    h3s_weights_free(w);
}

static void test_reproducible(const char *m1) {
    PATHVAR(m2, root, "m2");
    PATHVAR(m3, root, "m3");
    CHECK_OK(h3s_model_init("tiny", -1, 7, m2));
    CHECK_OK(h3s_model_init("tiny", -1, 8, m3));
    CHECK(files_equal(pjoin(m1, H3S_MODEL_WEIGHTS_FILE), pjoin(m2, H3S_MODEL_WEIGHTS_FILE)),
          "same seed, different weights bytes");
    CHECK(files_equal(pjoin(m1, H3S_MODEL_CONFIG_FILE), pjoin(m2, H3S_MODEL_CONFIG_FILE)), "same config bytes");
    CHECK(!files_equal(pjoin(m1, H3S_MODEL_WEIGHTS_FILE), pjoin(m3, H3S_MODEL_WEIGHTS_FILE)),
          "different seeds gave the same weights");
    CHECK(files_equal(pjoin(m1, H3S_MODEL_CONFIG_FILE), pjoin(m3, H3S_MODEL_CONFIG_FILE)),
          "config independent of seed");
    /* the seed changes every parameter, not just some */
    h3s_weights *a = NULL, *b = NULL;
    CHECK_OK(h3s_weights_load(m1, &a));
    CHECK_OK(h3s_weights_load(m3, &b));
    if (a && b) {
        int differ = 0;
        for (int64_t i = 0; i < h3s_weights_count(a); i++)
            differ += !h3t_bitwise_equal(h3s_weights_at(a, i, NULL), h3s_weights_at(b, i, NULL));
        CHECK(differ == h3s_weights_count(a), "%d of %lld parameters changed with the seed", differ,
              (long long)h3s_weights_count(a));
    }
    h3s_weights_free(a);
    h3s_weights_free(b);
    /* a pinned digest: the bytes must be the same on every machine and every build (update only on purpose) */
    char hex[65];
    CHECK_OK(h3s_file_sha256_hex(pjoin(m1, H3S_MODEL_WEIGHTS_FILE), hex));
    CHECK(strcmp(hex, "b90c79dc47b048a8365f7cfa3300af343c0743c37429346c51639c169617fc01") == 0,
          "tiny seed 7 weights changed: sha256 %s", hex);
    /* more layers through the same API */
    PATHVAR(m4, root, "m4");
    CHECK_OK(h3s_model_init("tiny", 3, 7, m4));
    h3s_weights *w4 = NULL;
    CHECK_OK(h3s_weights_load(m4, &w4));
    if (w4) {
        CHECK(h3s_weights_config(w4)->num_layers == 3 && h3s_weights_get(w4, "transformer_blocks.2.norm1.weight"),
              "--layers 3");
        /* a parameter's values depend on its name and the seed, not on the depth */
        h3s_weights *w1 = NULL;
        CHECK_OK(h3s_weights_load(m1, &w1));
        if (w1)
            CHECK(h3t_bitwise_equal(h3s_weights_get(w4, "transformer_blocks.1.ff.net.2.weight"),
                                    h3s_weights_get(w1, "transformer_blocks.1.ff.net.2.weight")),
                  "values independent of depth");
        h3s_weights_free(w1);
        h3s_weights_free(w4);
    }
    rm_tree(m2);
    rm_tree(m3);
    rm_tree(m4);
}

/* ---------------------------------------------------------------- shards --------------- */

static const char *SHARD1 = "diffusion_pytorch_model-00001-of-00002.safetensors";
static const char *SHARD2 = "diffusion_pytorch_model-00002-of-00002.safetensors";

/* dir gets config.json, two shards (first half / second half of the canonical order) and an index. */
static void write_sharded(const h3s_weights *w, const char *m1, const char *dir) {
    make_dir(dir);
    copy_file(pjoin(m1, H3S_MODEL_CONFIG_FILE), pjoin(dir, H3S_MODEL_CONFIG_FILE));
    int64_t n;
    h3s_st_entry *e = entries_of(w, &n);
    int64_t half = n / 2;
    CHECK_OK(h3s_st_write(pjoin(dir, SHARD2), e, half)); /* deliberately: shard 2 holds the first half */
    CHECK_OK(h3s_st_write(pjoin(dir, SHARD1), e + half, n - half));
    size_t cap = 64 + (size_t)n * 256, len = 0;
    char *idx = malloc(cap);
    len += (size_t)snprintf(idx + len, cap - len, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (int64_t i = 0; i < n; i++)
        len += (size_t)snprintf(idx + len, cap - len, "%s\"%s\": \"%s\"", i ? ", " : "", e[i].name,
                                i < half ? SHARD2 : SHARD1);
    snprintf(idx + len, cap - len, "}}\n");
    write_text(pjoin(dir, H3S_MODEL_INDEX_FILE), idx);
    free(idx);
    free(e);
}

static void test_sharded(const char *m1) {
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_load(m1, &w));
    if (!w) return;
    PATHVAR(sd, root, "sharded");
    write_sharded(w, m1, sd);
    h3s_weights *s = NULL;
    CHECK_OK(h3s_weights_load(sd, &s));
    if (s) {
        int same = h3s_weights_count(s) == h3s_weights_count(w);
        for (int64_t i = 0; same && i < h3s_weights_count(w); i++)
            same = h3t_bitwise_equal(h3s_weights_at(s, i, NULL), h3s_weights_at(w, i, NULL));
        CHECK(same, "sharded directory gives identical tensors");
        h3s_weights_free(s);
    }

    /* verify with a manifest written for it, then with a wrong one */
    PATHVAR(man, root, "sharded-manifest.json");
    CHECK_OK(h3s_model_manifest_write(sd, man));
    char *report = NULL;
    CHECK_OK(h3s_model_verify(sd, man, &report));
    CHECK(report && strstr(report, SHARD1) && strstr(report, "OK"), "report: %s", report ? report : "(null)");
    free(report);
    unsigned char *text;
    h3t_read_file(man, &text);
    char *line = strstr((char *)text, SHARD2);
    /* drop shard 2 from the manifest: every shard must be listed */
    {
        char *start = line;
        while (start > (char *)text && start[-1] != '\n')
            start--;
        char *end = strchr(line, '\n') + 1;
        memmove(start, end, strlen(end) + 1);
        write_text(man, (char *)text);
    }
    free(text);
    report = (char *)0x1;
    CHECK_FAILS(H3S_ERR_MISMATCH, h3s_model_verify(sd, man, &report));
    CHECK(strstr(h3s_last_error(), SHARD2), "unlisted shard named: %s", h3s_last_error());
    CHECK(report == (char *)0x1, "report untouched on failure");
    unlink(man);

    /* a shard the index names is missing */
    PATHVAR(sd2, root, "sharded2");
    write_sharded(w, m1, sd2);
    unlink(pjoin(sd2, SHARD1));
    expect_load_fails(sd2, H3S_ERR_IO, SHARD1, "missing shard");
    CHECK_FAILS(H3S_ERR_IO, h3s_model_verify(sd2, NULL, NULL));
    rm_tree(sd2);

    /* the index maps a tensor to the other shard */
    write_sharded(w, m1, sd2);
    {
        unsigned char *idx;
        h3t_read_file(pjoin(sd2, H3S_MODEL_INDEX_FILE), &idx);
        char *at = strstr((char *)idx, "\"proj_in.weight\": \"");
        at += strlen("\"proj_in.weight\": \"");
        at[strlen("diffusion_pytorch_model-0000")] = '1'; /* 00002 -> 00001 */
        write_text(pjoin(sd2, H3S_MODEL_INDEX_FILE), (char *)idx);
        free(idx);
    }
    expect_load_fails(sd2, H3S_ERR_FORMAT, "proj_in.weight", "index maps a tensor to the wrong shard");
    rm_tree(sd2);

    /* a shard holds a tensor the index does not list */
    write_sharded(w, m1, sd2);
    {
        unsigned char *idx;
        h3t_read_file(pjoin(sd2, H3S_MODEL_INDEX_FILE), &idx);
        char *at = strstr((char *)idx, "\"norm_out.linear.bias\": ");
        char *comma = strchr(at, ',');
        memmove(at, comma + 2, strlen(comma + 2) + 1);
        write_text(pjoin(sd2, H3S_MODEL_INDEX_FILE), (char *)idx);
        free(idx);
    }
    expect_load_fails(sd2, H3S_ERR_FORMAT, "norm_out.linear.bias", "tensor not in the index");
    rm_tree(sd2);

    /* a shard name that leaves the directory */
    write_sharded(w, m1, sd2);
    write_text(pjoin(sd2, H3S_MODEL_INDEX_FILE),
               "{\"weight_map\": {\"proj_in.weight\": \"../elsewhere.safetensors\"}}");
    expect_load_fails(sd2, H3S_ERR_FORMAT, "../elsewhere", "shard outside the directory");
    write_text(pjoin(sd2, H3S_MODEL_INDEX_FILE), "{\"weight_map\": [1]}");
    expect_load_fails(sd2, H3S_ERR_FORMAT, "weight_map", "weight_map not an object");
    write_text(pjoin(sd2, H3S_MODEL_INDEX_FILE), "not json");
    expect_load_fails(sd2, H3S_ERR_FORMAT, H3S_MODEL_INDEX_FILE, "index not JSON");
    /* both a single file and an index */
    copy_file(pjoin(m1, H3S_MODEL_WEIGHTS_FILE), pjoin(sd2, H3S_MODEL_WEIGHTS_FILE));
    expect_load_fails(sd2, H3S_ERR_FORMAT, "both", "single file and index");
    rm_tree(sd2);
    rm_tree(sd);
    h3s_weights_free(w);
}

/* ---------------------------------------------------------------- bad parameters ------- */

/* A single-file model dir whose tensors are w's, edited: `drop` removed, `extra` added, `reshape` given another
 * shape, `retype` stored as BF16. */
static void write_edited(const h3s_weights *w, const char *m1, const char *dir, const char *drop, const char *extra,
                         const char *reshape, const char *retype) {
    make_dir(dir);
    copy_file(pjoin(m1, H3S_MODEL_CONFIG_FILE), pjoin(dir, H3S_MODEL_CONFIG_FILE));
    int64_t n;
    h3s_st_entry *e = entries_of(w, &n);
    h3s_st_entry *out = calloc((size_t)n + 1, sizeof *out);
    int64_t k = 0;
    static uint16_t bf[8192];
    for (int64_t i = 0; i < n; i++) {
        if (drop && strcmp(e[i].name, drop) == 0) continue;
        out[k] = e[i];
        if (reshape && strcmp(e[i].name, reshape) == 0) {
            out[k].tensor.shape[0] -= 1; /* fewer elements: a consistent file with the wrong shape */
        }
        if (retype && strcmp(e[i].name, retype) == 0) {
            int64_t m = h3s_tensor_numel(&e[i].tensor);
            for (int64_t j = 0; j < m && j < 8192; j++)
                bf[j] = h3s_bf16_round(((const float *)e[i].tensor.data)[j]);
            out[k].tensor.dtype = H3S_BF16;
            out[k].tensor.data = bf;
        }
        k++;
    }
    static float extra_data[4] = {1, 2, 3, 4};
    if (extra) {
        out[k].name = extra;
        out[k].tensor = h3s_tensor_view(extra_data, H3S_F32, 1, (int64_t[]){4});
        k++;
    }
    CHECK_OK(h3s_st_write(pjoin(dir, H3S_MODEL_WEIGHTS_FILE), out, k));
    free(out);
    free(e);
}

static void test_bad_parameters(const char *m1) {
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_load(m1, &w));
    if (!w) return;
    PATHVAR(d, root, "edited");
    write_edited(w, m1, d, "transformer_blocks.1.attn.norm_q.weight", NULL, NULL, NULL);
    expect_load_fails(d, H3S_ERR_FORMAT, "'transformer_blocks.1.attn.norm_q.weight' is missing", "missing parameter");
    rm_tree(d);
    write_edited(w, m1, d, NULL, "transformer_blocks.0.attn.extra.weight", NULL, NULL);
    expect_load_fails(d, H3S_ERR_FORMAT, "'transformer_blocks.0.attn.extra.weight'", "extra parameter");
    rm_tree(d);
    write_edited(w, m1, d, NULL, NULL, "norm_out.linear.weight", NULL);
    expect_load_fails(d, H3S_ERR_SHAPE, "'norm_out.linear.weight' has shape [95, 36], expected [96, 36]",
                      "wrong shape");
    rm_tree(d);
    write_edited(w, m1, d, NULL, NULL, NULL, "proj_out.bias");
    expect_load_fails(d, H3S_ERR_DTYPE, "'proj_out.bias' has dtype BF16, expected F32", "wrong dtype");
    rm_tree(d);

    /* a config that says 3 layers over weights for 2 */
    write_edited(w, m1, d, NULL, NULL, NULL, NULL);
    h3s_config c = *h3s_weights_config(w);
    c.num_layers = 3;
    char *json = NULL;
    CHECK_OK(h3s_config_to_json(&c, &json));
    write_text(pjoin(d, H3S_MODEL_CONFIG_FILE), json);
    free(json);
    expect_load_fails(d, H3S_ERR_FORMAT, "transformer_blocks.2.norm1.weight", "config deeper than the weights");
    /* and 1 layer over weights for 2: the block-1 tensors are extra */
    c.num_layers = 1;
    CHECK_OK(h3s_config_to_json(&c, &json));
    write_text(pjoin(d, H3S_MODEL_CONFIG_FILE), json);
    free(json);
    expect_load_fails(d, H3S_ERR_FORMAT, "transformer_blocks.1.", "config shallower than the weights");
    /* a broken config */
    write_text(pjoin(d, H3S_MODEL_CONFIG_FILE), "{\"hidden_size\": 48}");
    expect_load_fails(d, H3S_ERR_INVALID, "config.json", "incomplete config");
    /* no weights */
    unlink(pjoin(d, H3S_MODEL_WEIGHTS_FILE));
    CHECK_OK(h3s_config_to_json(h3s_weights_config(w), &json));
    write_text(pjoin(d, H3S_MODEL_CONFIG_FILE), json);
    free(json);
    expect_load_fails(d, H3S_ERR_IO, H3S_MODEL_WEIGHTS_FILE, "no weights file");
    /* a corrupt weights file */
    write_text(pjoin(d, H3S_MODEL_WEIGHTS_FILE), "garbage");
    expect_load_fails(d, H3S_ERR_FORMAT, H3S_MODEL_WEIGHTS_FILE, "corrupt weights");
    rm_tree(d);
    expect_load_fails(pjoin(root, "does-not-exist"), H3S_ERR_IO, "does-not-exist", "no directory");
    make_dir(d);
    expect_load_fails(d, H3S_ERR_IO, "config.json", "empty directory");
    rm_tree(d);
    h3s_weights_free(w);
}

/* ---------------------------------------------------------------- snapshot + verify ---- */

static void test_snapshot_and_verify(const char *m1) {
    PATHVAR(snap, root, "snapshot");
    make_dir(snap);
    PATHVAR(tdir, snap, "transformer");
    make_dir(tdir);
    copy_file(pjoin(m1, H3S_MODEL_CONFIG_FILE), pjoin(tdir, H3S_MODEL_CONFIG_FILE));
    copy_file(pjoin(m1, H3S_MODEL_WEIGHTS_FILE), pjoin(tdir, H3S_MODEL_WEIGHTS_FILE));
    make_dir(pjoin(snap, "vae")); /* other pipeline parts are ignored */
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_load(snap, &w));
    if (w) {
        const char *d = h3s_weights_dir(w);
        CHECK(d && strlen(d) > 12 && strcmp(d + strlen(d) - 12, "/transformer") == 0, "dir %s", d ? d : "(null)");
        h3s_weights_free(w);
    }

    /* a manifest relative to the model dir, written by the library */
    PATHVAR(man, root, "manifest.json");
    CHECK_OK(h3s_model_manifest_write(m1, man));
    char *report = NULL;
    CHECK_OK(h3s_model_verify(m1, man, &report));
    CHECK(report && strstr(report, "verify: OK"), "report %s", report ? report : "(null)");
    free(report);
    CHECK_OK(h3s_model_verify(m1, NULL, NULL));
    /* the same manifest verifies the snapshot (keys relative to transformer/) */
    CHECK_OK(h3s_model_verify(snap, man, NULL));
    /* keys relative to the snapshot root */
    char hex[65], chex[65], text[512];
    CHECK_OK(h3s_file_sha256_hex(pjoin(m1, H3S_MODEL_WEIGHTS_FILE), hex));
    CHECK_OK(h3s_file_sha256_hex(pjoin(m1, H3S_MODEL_CONFIG_FILE), chex));
    /* a FIFO or a directory is refused at once (a FIFO would otherwise wait for a writer) */
    PATHVAR(fifo, root, "fifo");
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    char unused[65];
    CHECK_FAILS(H3S_ERR_IO, h3s_file_sha256_hex(fifo, unused));
    CHECK(strstr(h3s_last_error(), "not a regular file"), "names the FIFO: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_IO, h3s_file_sha256_hex(root, unused));
    unlink(fifo);
    snprintf(text, sizeof text, "{\"transformer/%s\": \"%s\", \"transformer/%s\": \"%s\"}", H3S_MODEL_CONFIG_FILE, chex,
             H3S_MODEL_WEIGHTS_FILE, hex);
    PATHVAR(man2, root, "manifest2.json");
    write_text(man2, text);
    CHECK_OK(h3s_model_verify(snap, man2, NULL));
    /* upper-case hex is the same digest */
    for (char *p = strstr(text, hex); p && *p != '"'; p++)
        if (*p >= 'a' && *p <= 'f') *p = (char)(*p - 32);
    write_text(man2, text);
    CHECK_OK(h3s_model_verify(snap, man2, NULL));

    /* a wrong digest */
    char bad[65];
    memcpy(bad, hex, 65);
    bad[10] = bad[10] == '0' ? '1' : '0';
    snprintf(text, sizeof text, "{\"%s\": \"%s\", \"%s\": \"%s\"}", H3S_MODEL_CONFIG_FILE, chex, H3S_MODEL_WEIGHTS_FILE,
             bad);
    write_text(man2, text);
    CHECK_FAILS(H3S_ERR_MISMATCH, h3s_model_verify(m1, man2, NULL));
    CHECK(strstr(h3s_last_error(), H3S_MODEL_WEIGHTS_FILE) && strstr(h3s_last_error(), "differs"),
          "mismatch names the file: %s", h3s_last_error());
    /* the weights file not listed at all */
    snprintf(text, sizeof text, "{\"%s\": \"%s\"}", H3S_MODEL_CONFIG_FILE, chex);
    write_text(man2, text);
    CHECK_FAILS(H3S_ERR_MISMATCH, h3s_model_verify(m1, man2, NULL));
    CHECK(strstr(h3s_last_error(), H3S_MODEL_WEIGHTS_FILE), "unlisted file named: %s", h3s_last_error());
    /* config.json not listed: a changed config (other numerics) would pass unnoticed */
    snprintf(text, sizeof text, "{\"%s\": \"%s\"}", H3S_MODEL_WEIGHTS_FILE, hex);
    write_text(man2, text);
    CHECK_FAILS(H3S_ERR_MISMATCH, h3s_model_verify(m1, man2, NULL));
    CHECK(strstr(h3s_last_error(), H3S_MODEL_CONFIG_FILE) && strstr(h3s_last_error(), "not listed"),
          "unlisted config named: %s", h3s_last_error());
    /* a listed entry that is a directory: named as not a regular file */
    make_dir(pjoin(m1, "sub"));
    snprintf(text, sizeof text, "{\"%s\": \"%s\", \"%s\": \"%s\", \"sub\": \"%s\"}", H3S_MODEL_CONFIG_FILE, chex,
             H3S_MODEL_WEIGHTS_FILE, hex, hex);
    write_text(man2, text);
    CHECK_FAILS(H3S_ERR_MISMATCH, h3s_model_verify(m1, man2, NULL));
    CHECK(strstr(h3s_last_error(), "not a regular file"), "a directory listed: %s", h3s_last_error());
    rmdir(pjoin(m1, "sub"));
    /* a listed file that is not there */
    snprintf(text, sizeof text, "{\"%s\": \"%s\", \"nothere.bin\": \"%s\"}", H3S_MODEL_WEIGHTS_FILE, bad, hex);
    write_text(man2, text);
    CHECK_FAILS(H3S_ERR_MISMATCH, h3s_model_verify(m1, man2, NULL));
    CHECK(strstr(h3s_last_error(), "nothere.bin"), "missing listed file named: %s", h3s_last_error());
    /* malformed manifests */
    write_text(man2, "[\"x\"]");
    CHECK_FAILS(H3S_ERR_FORMAT, h3s_model_verify(m1, man2, NULL));
    snprintf(text, sizeof text, "{\"%s\": \"abc\"}", H3S_MODEL_WEIGHTS_FILE);
    write_text(man2, text);
    CHECK_FAILS(H3S_ERR_FORMAT, h3s_model_verify(m1, man2, NULL));
    snprintf(text, sizeof text, "{\"../m2/%s\": \"%s\"}", H3S_MODEL_WEIGHTS_FILE, hex);
    write_text(man2, text);
    CHECK_FAILS(H3S_ERR_FORMAT, h3s_model_verify(m1, man2, NULL));
    CHECK_FAILS(H3S_ERR_IO, h3s_model_verify(m1, pjoin(root, "no-manifest.json"), NULL));

    /* one flipped data byte: the header still validates, the manifest catches it */
    PATHVAR(m5, root, "m5");
    make_dir(m5);
    copy_file(pjoin(m1, H3S_MODEL_CONFIG_FILE), pjoin(m5, H3S_MODEL_CONFIG_FILE));
    copy_file(pjoin(m1, H3S_MODEL_WEIGHTS_FILE), pjoin(m5, H3S_MODEL_WEIGHTS_FILE));
    unsigned char *bytes;
    size_t n = h3t_read_file(pjoin(m5, H3S_MODEL_WEIGHTS_FILE), &bytes);
    bytes[n - 3] ^= 0x10;
    FILE *f = fopen(pjoin(m5, H3S_MODEL_WEIGHTS_FILE), "wb");
    fwrite(bytes, 1, n, f);
    fclose(f);
    free(bytes);
    CHECK_OK(h3s_model_verify(m5, NULL, NULL));
    CHECK_FAILS(H3S_ERR_MISMATCH, h3s_model_verify(m5, man, NULL));
    CHECK(strstr(h3s_last_error(), H3S_MODEL_WEIGHTS_FILE), "corruption names the file: %s", h3s_last_error());
    rm_tree(m5);
    unlink(man);
    unlink(man2);
    rm_tree(snap);
}

/* ---------------------------------------------------------------- init policy ---------- */

static void test_init_policy(const char *m1) {
    /* overwrite our own model dir: allowed, the result is the new model */
    PATHVAR(m6, root, "m6");
    PATHVAR(m7, root, "m7");
    CHECK_OK(h3s_model_init("tiny", -1, 1, m6));
    CHECK_OK(h3s_model_init("tiny", -1, 7, m6));
    CHECK(files_equal(pjoin(m6, H3S_MODEL_WEIGHTS_FILE), pjoin(m1, H3S_MODEL_WEIGHTS_FILE)), "overwrite result");
    CHECK(h3t_count_entries(m6) == 2, "overwritten dir holds exactly the two files");
    /* trailing slash */
    char slash[1100];
    snprintf(slash, sizeof slash, "%s/", m6);
    CHECK_OK(h3s_model_init("tiny", -1, 7, slash));
    /* an empty directory is fine */
    make_dir(m7);
    CHECK_OK(h3s_model_init("tiny", -1, 7, m7));
    CHECK(files_equal(pjoin(m7, H3S_MODEL_WEIGHTS_FILE), pjoin(m1, H3S_MODEL_WEIGHTS_FILE)), "init into empty dir");
    /* a directory with anything else in it is refused and left alone */
    write_text(pjoin(m7, "notes.txt"), "mine");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_init("tiny", -1, 9, m7));
    CHECK(strstr(h3s_last_error(), "notes.txt"), "names the foreign file: %s", h3s_last_error());
    CHECK(files_equal(pjoin(m7, H3S_MODEL_WEIGHTS_FILE), pjoin(m1, H3S_MODEL_WEIGHTS_FILE)), "left alone");
    unlink(pjoin(m7, "notes.txt"));
    /* a config.json that is not ours */
    write_text(pjoin(m7, H3S_MODEL_CONFIG_FILE), "{\"_class_name\": \"SomethingElse\"}");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_init("tiny", -1, 9, m7));
    /* a file where the directory should be */
    PATHVAR(file, root, "plainfile");
    write_text(file, "x");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_init("tiny", -1, 7, file));
    unlink(file);
    /* bad arguments create nothing */
    PATHVAR(m8, root, "m8");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_init("gigantic", -1, 7, m8));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_init("tiny", 0, 7, m8));
    CHECK_FAILS(H3S_ERR_IO, h3s_model_init("tiny", -1, 7, "/nonexistent-h3s-parent/model"));
    h3s_config bad;
    CHECK_OK(h3s_config_preset("tiny", -1, &bad));
    bad.attention_head_dim = 7;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_init_config(&bad, 7, m8));
    CHECK(h3t_count_entries(m8) == -1, "nothing created for bad arguments");
    rm_tree(m6);
    rm_tree(m7);
}

/* A file put into the model directory while init writes the new model (after init inspected the directory): the
 * directory is left as it is then, the file kept, the new model not installed; nothing is left beside it. */
static void put_notes(void *ctx, uint64_t done, uint64_t total) {
    (void)total;
    if (done > 0) {
        FILE *f = fopen(pjoin((const char *)ctx, "notes.txt"), "wx"); /* once: "x" fails when it exists */
        if (f) fputs("mine", f), fclose(f);
    }
}
static void test_init_race(const char *m1) {
    PATHVAR(m9, root, "m9");
    CHECK_OK(h3s_model_init("tiny", -1, 7, m9)); /* m1's model */
    h3s_config c;
    CHECK_OK(h3s_config_preset("tiny", -1, &c));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_init_config_progress(&c, 9, m9, put_notes, m9));
    CHECK(strstr(h3s_last_error(), "changed while") && strstr(h3s_last_error(), "notes.txt"), "names the change: %s",
          h3s_last_error());
    CHECK(h3t_count_entries(m9) == 3, "the directory as it was left: %d entries", h3t_count_entries(m9));
    CHECK(files_equal(pjoin(m9, H3S_MODEL_WEIGHTS_FILE), pjoin(m1, H3S_MODEL_WEIGHTS_FILE)),
          "the previous model is still there");
    FILE *f = fopen(pjoin(m9, "notes.txt"), "r");
    char got[8] = "";
    if (f) {
        if (!fgets(got, sizeof got, f)) got[0] = '\0';
        fclose(f);
    }
    CHECK(strcmp(got, "mine") == 0, "the file put there is kept: '%s'", got);
    rm_tree(m9);
}

/* ---------------------------------------------------------------- large index -------- */

/* An index and a shard of 100,000 zero-size tensors besides the parameters: refused (they are not parameters).  The
 * index check once scanned the whole weight_map per tensor of every shard: quadratic, this case took about 90 s in
 * a release build and far longer under the sanitizers; it looks names up by binary search now and takes well under
 * a second.  Nothing is timed here: the guard is that the test finishes within ctest's timeout. */
static void test_large_index(const char *m1) {
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_load(m1, &w));
    if (!w) return;
    enum { EXTRA = 100000 };
    PATHVAR(d, root, "many");
    make_dir(d);
    copy_file(pjoin(m1, H3S_MODEL_CONFIG_FILE), pjoin(d, H3S_MODEL_CONFIG_FILE));
    int64_t n;
    h3s_st_entry *e = entries_of(w, &n);
    h3s_st_entry *all = calloc((size_t)(n + EXTRA), sizeof *all);
    char(*names)[32] = calloc(EXTRA, sizeof *names);
    static float nothing[1];
    memcpy(all, e, (size_t)n * sizeof *all);
    for (int i = 0; i < EXTRA; i++) {
        snprintf(names[i], sizeof names[i], "zz.extra.%06d", i);
        all[n + i].name = names[i];
        all[n + i].tensor = h3s_tensor_view(nothing, H3S_F32, 1, (int64_t[]){0});
    }
    /* shard 1: the parameters' first half and every extra tensor; shard 2: the rest */
    const int64_t half = n / 2;
    h3s_st_entry *s1 = calloc((size_t)(half + EXTRA), sizeof *s1);
    memcpy(s1, all, (size_t)half * sizeof *s1);
    memcpy(s1 + half, all + n, (size_t)EXTRA * sizeof *s1);
    CHECK_OK(h3s_st_write(pjoin(d, SHARD1), s1, half + EXTRA));
    CHECK_OK(h3s_st_write(pjoin(d, SHARD2), all + half, n - half));
    size_t cap = 64 + (size_t)(n + EXTRA) * 128, len = 0;
    char *idx = malloc(cap);
    len += (size_t)snprintf(idx + len, cap - len, "{\"weight_map\": {");
    for (int64_t i = 0; i < n + EXTRA; i++)
        len += (size_t)snprintf(idx + len, cap - len, "%s\"%s\": \"%s\"", i ? ", " : "", all[i].name,
                                i < half || i >= n ? SHARD1 : SHARD2);
    snprintf(idx + len, cap - len, "}}\n");
    write_text(pjoin(d, H3S_MODEL_INDEX_FILE), idx);
    expect_load_fails(d, H3S_ERR_FORMAT,
                      "'zz.extra.000000' in "
                      "diffusion_pytorch_model-00001-of-00002.safetensors is "
                      "not a parameter",
                      "100,000 extra tensors");
    CHECK_FAILS(H3S_ERR_FORMAT, h3s_model_verify(d, NULL, NULL));
    free(idx);
    free(s1);
    free(names);
    free(all);
    free(e);
    rm_tree(d);
    h3s_weights_free(w);
}

/* ---------------------------------------------------------------- permissions --------- */

static unsigned mode_of(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (unsigned)(sb.st_mode & 07777) : 0xFFFFu;
}

/* init keeps the permission bits of what it replaces: the directory's (an empty one or a model), and over a model
 * each file's; what is new gets 0777 / 0666 & ~umask.  A manifest written over one keeps its bits. */
static void test_init_modes(const char *m1) {
    const mode_t um = umask(022);
    umask(um);
    const unsigned dmode = 0777u & ~(unsigned)um, fmode = 0666u & ~(unsigned)um;
    PATHVAR(m, root, "modes");
    CHECK_OK(h3s_model_init("tiny", -1, 7, m));
    CHECK(mode_of(m) == dmode, "new directory: %04o, umask %04o", mode_of(m), (unsigned)um);
    CHECK(mode_of(pjoin(m, H3S_MODEL_CONFIG_FILE)) == fmode && mode_of(pjoin(m, H3S_MODEL_WEIGHTS_FILE)) == fmode,
          "new files: %04o %04o", mode_of(pjoin(m, H3S_MODEL_CONFIG_FILE)), mode_of(pjoin(m, H3S_MODEL_WEIGHTS_FILE)));
    /* over a private model */
    chmod(m, 0700);
    chmod(pjoin(m, H3S_MODEL_CONFIG_FILE), 0600);
    chmod(pjoin(m, H3S_MODEL_WEIGHTS_FILE), 0640);
    CHECK_OK(h3s_model_init("tiny", -1, 7, m));
    CHECK(mode_of(m) == 0700u, "re-init: directory %04o", mode_of(m));
    CHECK(mode_of(pjoin(m, H3S_MODEL_CONFIG_FILE)) == 0600u, "re-init: config.json %04o",
          mode_of(pjoin(m, H3S_MODEL_CONFIG_FILE)));
    CHECK(mode_of(pjoin(m, H3S_MODEL_WEIGHTS_FILE)) == 0640u, "re-init: weights %04o",
          mode_of(pjoin(m, H3S_MODEL_WEIGHTS_FILE)));
    CHECK(files_equal(pjoin(m, H3S_MODEL_WEIGHTS_FILE), pjoin(m1, H3S_MODEL_WEIGHTS_FILE)), "re-init result");
    /* a manifest replaced */
    PATHVAR(man, root, "modes-manifest.json");
    CHECK_OK(h3s_model_manifest_write(m, man));
    CHECK(mode_of(man) == fmode, "new manifest: %04o", mode_of(man));
    chmod(man, 0600);
    CHECK_OK(h3s_model_manifest_write(m, man));
    CHECK(mode_of(man) == 0600u, "manifest over a 0600 one: %04o", mode_of(man));
    unlink(man);
    rm_tree(m);
    /* into an empty private directory */
    mkdir(m, 0700);
    chmod(m, 0710);
    CHECK_OK(h3s_model_init("tiny", -1, 7, m));
    CHECK(mode_of(m) == 0710u, "init into an empty 0710 directory: %04o", mode_of(m));
    CHECK(mode_of(pjoin(m, H3S_MODEL_CONFIG_FILE)) == fmode, "new file in it: %04o",
          mode_of(pjoin(m, H3S_MODEL_CONFIG_FILE)));
    rm_tree(m);
}

/* ---------------------------------------------------------------- "." ----------------- */

/* --out "." (the current directory, empty or a model), "sub/." and "sub/./": resolved to the directory's real path
 * (a rename cannot take the name "."); the process stays in the directory, now the new one. */
static void test_init_dot(const char *m1) {
    char cwd[2048];
    if (!getcwd(cwd, sizeof cwd)) {
        CHECK(0, "getcwd");
        return;
    }
    PATHVAR(d, root, "dot");
    make_dir(d);
    CHECK(chdir(d) == 0, "chdir %s", d);
    CHECK_OK(h3s_model_init("tiny", -1, 7, "."));
    CHECK(files_equal(pjoin(d, H3S_MODEL_WEIGHTS_FILE), pjoin(m1, H3S_MODEL_WEIGHTS_FILE)), "init into .");
    /* the library never changes the working directory: the caller steps into the new directory itself */
    CHECK(chdir(d) == 0, "chdir %s after init", d);
    CHECK(files_equal(H3S_MODEL_WEIGHTS_FILE, pjoin(m1, H3S_MODEL_WEIGHTS_FILE)), "seen from the current directory");
    CHECK_OK(h3s_model_init("tiny", -1, 7, ".")); /* re-init: the model in . is replaced */
    CHECK(chdir(d) == 0, "chdir %s after re-init", d);
    CHECK(files_equal(H3S_MODEL_WEIGHTS_FILE, pjoin(m1, H3S_MODEL_WEIGHTS_FILE)), "re-init of .");
    CHECK_OK(h3s_model_init("tiny", -1, 7, "./"));
    CHECK(chdir(d) == 0, "chdir %s after init", d);
    CHECK(h3t_count_entries(".") == 2, "%d entries in .", h3t_count_entries("."));
    make_dir("sub");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_init("tiny", -1, 7, ".")); /* sub is in the way */
    CHECK(strstr(h3s_last_error(), "'sub'"), "names sub: %s", h3s_last_error());
    CHECK_OK(h3s_model_init("tiny", -1, 7, "sub/."));
    CHECK(files_equal(pjoin(d, "sub/" H3S_MODEL_WEIGHTS_FILE), pjoin(m1, H3S_MODEL_WEIGHTS_FILE)), "init into sub/.");
    CHECK_OK(h3s_model_init("tiny", -1, 7, "sub/./"));
    CHECK(h3t_count_entries("sub") == 2, "%d entries in sub", h3t_count_entries("sub"));
    /* ".." names the parent: here the directory holding the model files and sub */
    CHECK(chdir("sub") == 0, "chdir sub");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_init("tiny", -1, 7, ".."));
    CHECK(chdir(cwd) == 0, "chdir back to %s", cwd);
    /* no temporary directory is left next to the outputs */
    CHECK(h3t_count_entries(d) == 3, "%d entries in %s", h3t_count_entries(d), d);
    rm_tree(d);
}

/* ---------------------------------------------------------------- init without the exchange ------------- */

/* The one `.m_noexch.init-*` directory kept beside the model after a failed undo, in kept[1024]; 0 if not exactly
 * one is there. */
static int kept_dir(char kept[1024]) {
    int n = 0;
    DIR *d = opendir(root);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (strncmp(e->d_name, ".m_noexch.init-", 15) == 0 && n++ == 0) snprintf(kept, 1024, "%s/%s", root, e->d_name);
    if (d) closedir(d);
    return n == 1;
}

/* A progress callback that replaces the model's config.json with a directory of that name (once). */
static void config_to_dir(void *ctx, uint64_t done, uint64_t total) {
    (void)total;
    const char *cfg = pjoin((const char *)ctx, H3S_MODEL_CONFIG_FILE);
    struct stat sb;
    if (done > 0 && lstat(cfg, &sb) == 0 && S_ISREG(sb.st_mode) && unlink(cfg) == 0) mkdir(cfg, 0755);
}

/* A progress callback that replaces the model's weights file with a directory holding a file (once). */
static void weights_to_dir(void *ctx, uint64_t done, uint64_t total) {
    (void)total;
    PATHVAR(w, (const char *)ctx, H3S_MODEL_WEIGHTS_FILE);
    struct stat sb;
    if (done > 0 && lstat(w, &sb) == 0 && S_ISREG(sb.st_mode) && unlink(w) == 0 && mkdir(w, 0755) == 0)
        write_text(pjoin(w, "inner.txt"), "mine");
}

static int holds_mine(const char *path) {
    unsigned char *x;
    size_t n = h3t_read_file(path, &x);
    int yes = x && n == 4 && memcmp(x, "mine", 4) == 0;
    free(x);
    return yes;
}

/* One failed move whose undo fails too (g_fail_mask `mask`, over m holding m1's model, or its config.json alone):
 * the message names where each of the four files is, each is there with its contents, and the kept temporary
 * directory holds what is not in m.  `loc` gives each file's place: 'o' in m, 't' in the kept directory (the new
 * files under their names, the previous ones as previous.*), '-' absent (a config.json alone). */
static void undo_fails(const char *m, const char *m1, const char *ref9, unsigned mask, const char loc[4]) {
    static const char *const names[4] = {H3S_MODEL_CONFIG_FILE, H3S_MODEL_WEIGHTS_FILE, H3S_MODEL_WEIGHTS_FILE,
                                         H3S_MODEL_CONFIG_FILE};
    const char *const want[4] = {pjoin(m1, H3S_MODEL_CONFIG_FILE), pjoin(m1, H3S_MODEL_WEIGHTS_FILE),
                                 pjoin(ref9, H3S_MODEL_WEIGHTS_FILE), pjoin(ref9, H3S_MODEL_CONFIG_FILE)};
    g_watched = 0;
    g_fail_mask = mask;
    CHECK_FAILS(H3S_ERR_IO, h3s_model_init("tiny", -1, 9, m));
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", h3s_last_error());
    char kept[1024] = "";
    CHECK(kept_dir(kept), "mask %#x: one temporary directory kept", mask);
    char where[4][1100], expect[4600];
    for (int i = 0; i < 4; i++) {
        if (loc[i] == 'o')
            snprintf(where[i], sizeof where[i], "%s/%s", m, names[i]);
        else if (loc[i] == 't')
            snprintf(where[i], sizeof where[i], "%s/%s%s", kept, i < 2 ? "previous." : "", names[i]);
        else
            snprintf(where[i], sizeof where[i], "(no weights file)");
        if (loc[i] != '-') CHECK(files_equal(where[i], want[i]), "mask %#x: %s holds file %d", mask, where[i], i);
    }
    snprintf(expect, sizeof expect, "the previous model is %s and %s, the new one %s and %s", where[0], where[1],
             where[2], where[3]);
    CHECK(strstr(msg, "nor move the previous model's files back") && strstr(msg, expect),
          "mask %#x: %s\n  expected: %s", mask, msg, expect);
    rm_tree(kept);
}

/* Init over a model where RENAME_EXCHANGE is not supported: the files are moved one by one, all or nothing.  Each of
 * the four moves failing in turn leaves the previous model as it was; a failed move whose undo fails too keeps the
 * temporary directory and names where each file is; a file put into the directory, or a file of its model turned
 * into a directory, while the new model is written is found as the exchange path finds it; a directory with a
 * config.json only takes the new model. */
static void test_init_no_exchange(const char *m1) {
    PATHVAR(m, root, "m_noexch");
    PATHVAR(ref9, root, "m_ref9");
    CHECK_OK(h3s_model_init("tiny", -1, 9, ref9));
    CHECK_OK(h3s_model_init("tiny", -1, 7, m)); /* m1's model */
    g_no_exchange = 1;
    g_watch = m;
    for (unsigned k = 0; k < 4; k++) {
        g_watched = 0;
        g_fail_mask = 1u << k;
        CHECK_FAILS(H3S_ERR_IO, h3s_model_init("tiny", -1, 9, m));
        CHECK(strstr(h3s_last_error(), "is left as it was") != NULL, "move %u: %s", k, h3s_last_error());
        CHECK(g_watched == 2 * k + 1, "move %u failed: %u renames in the model directory", k, g_watched);
        CHECK(h3t_count_entries(m) == 2, "move %u: %d entries", k, h3t_count_entries(m));
        CHECK(files_equal(pjoin(m, H3S_MODEL_WEIGHTS_FILE), pjoin(m1, H3S_MODEL_WEIGHTS_FILE)) &&
                  files_equal(pjoin(m, H3S_MODEL_CONFIG_FILE), pjoin(m1, H3S_MODEL_CONFIG_FILE)),
              "move %u failed: the previous model is in place", k);
        CHECK(h3t_count_entries(root) == 3, "move %u: %d entries beside the model", k, h3t_count_entries(root));
    }
    /* moves 0-3 are renames 0-3; the undos of moves 2, 1, 0 the next ones in that order */
    undo_fails(m, m1, ref9, 1u << 2 | 1u << 3, "tttt"); /* the new weights in fails, then the previous back */
    CHECK_OK(h3s_model_init("tiny", -1, 7, m));         /* into the empty directory m is now: one rename */
    undo_fails(m, m1, ref9, 1u << 3 | 1u << 4, "ttot"); /* the new config in fails, then the new weights out */
    rm_tree(m);
    CHECK_OK(h3s_model_init("tiny", -1, 7, m));
    undo_fails(m, m1, ref9, 1u << 1 | 1u << 2, "tott"); /* the previous weights out fail, then the config back */
    rm_tree(m);
    /* a file put into the directory while the new model is written: the directory as it was then, notes kept */
    h3s_config c;
    CHECK_OK(h3s_config_preset("tiny", -1, &c));
    CHECK_OK(h3s_model_init("tiny", -1, 7, m));
    g_fail_mask = 0;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_init_config_progress(&c, 9, m, put_notes, m));
    CHECK(strstr(h3s_last_error(), "changed while") && strstr(h3s_last_error(), "notes.txt"), "names the change: %s",
          h3s_last_error());
    CHECK(h3t_count_entries(m) == 3 && files_equal(pjoin(m, H3S_MODEL_WEIGHTS_FILE), pjoin(m1, H3S_MODEL_WEIGHTS_FILE)),
          "the directory as it was left: %d entries", h3t_count_entries(m));
    unlink(pjoin(m, "notes.txt"));
    /* its config.json turned into a directory meanwhile: moved back, not installed over */
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_init_config_progress(&c, 9, m, config_to_dir, m));
    CHECK(strstr(h3s_last_error(), "no longer a regular file") != NULL, "names the change: %s", h3s_last_error());
    struct stat sb;
    CHECK(lstat(pjoin(m, H3S_MODEL_CONFIG_FILE), &sb) == 0 && S_ISDIR(sb.st_mode) &&
              files_equal(pjoin(m, H3S_MODEL_WEIGHTS_FILE), pjoin(m1, H3S_MODEL_WEIGHTS_FILE)),
          "the directory as it was left");
    CHECK(h3t_count_entries(root) == 3, "%d entries beside the model", h3t_count_entries(root));
    rm_tree(m);
    /* its weights file turned into a directory holding a file: moved back with that file, nothing left beside it */
    CHECK_OK(h3s_model_init("tiny", -1, 7, m));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_init_config_progress(&c, 9, m, weights_to_dir, m));
    CHECK(strstr(h3s_last_error(), "its " H3S_MODEL_WEIGHTS_FILE " is no longer a regular file") != NULL,
          "names the weights: %s", h3s_last_error());
    CHECK(holds_mine(pjoin(pjoin(m, H3S_MODEL_WEIGHTS_FILE), "inner.txt")) && h3t_count_entries(root) == 3,
          "the directory put there is back in place, nothing beside the model (%d)", h3t_count_entries(root));
    rm_tree(m);
    /* the change found, and then moving the previous weights back fails: an I/O failure, the directory kept */
    CHECK_OK(h3s_model_init("tiny", -1, 7, m));
    g_watched = 0;
    g_fail_mask = 1u << 2;
    CHECK_FAILS(H3S_ERR_IO, h3s_model_init_config_progress(&c, 9, m, put_notes, m));
    char kept[1024] = "";
    CHECK(strstr(h3s_last_error(), "nor move the previous model's files back") && kept_dir(kept),
          "changed, then an undo failed: %s", h3s_last_error());
    CHECK(files_equal(pjoin(kept, "previous." H3S_MODEL_WEIGHTS_FILE), pjoin(m1, H3S_MODEL_WEIGHTS_FILE)),
          "the previous weights are in the kept directory");
    if (kept[0]) rm_tree(kept);
    rm_tree(m);
    /* a config.json put in place of the one moved out: found, and never replaced by the undo */
    CHECK_OK(h3s_model_init("tiny", -1, 7, m));
    g_watched = 0;
    g_fail_mask = 0;
    g_put_after = 0;
    g_put_path = pjoin(m, H3S_MODEL_CONFIG_FILE);
    CHECK_FAILS(H3S_ERR_IO, h3s_model_init("tiny", -1, 9, m));
    g_put_after = ~0u;
    g_put_path = NULL;
    CHECK(holds_mine(pjoin(m, H3S_MODEL_CONFIG_FILE)), "the file put there is kept");
    CHECK(strstr(h3s_last_error(), "it holds '" H3S_MODEL_CONFIG_FILE "'") &&
              strstr(h3s_last_error(), "nor move the previous model's files back (File exists)") && kept_dir(kept),
          "names the change and the file in the way: %s", h3s_last_error());
    CHECK(files_equal(pjoin(kept, "previous." H3S_MODEL_CONFIG_FILE), pjoin(m1, H3S_MODEL_CONFIG_FILE)),
          "the previous config is in the kept directory");
    if (kept[0]) rm_tree(kept);
    rm_tree(m);
    /* no failure: the new model in place, nothing left beside it */
    CHECK_OK(h3s_model_init("tiny", -1, 7, m));
    g_watched = 0;
    CHECK_OK(h3s_model_init("tiny", -1, 9, m));
    CHECK(g_watched == 4, "four moves: %u", g_watched);
    CHECK(h3t_count_entries(m) == 2 &&
              files_equal(pjoin(m, H3S_MODEL_WEIGHTS_FILE), pjoin(ref9, H3S_MODEL_WEIGHTS_FILE)) &&
              files_equal(pjoin(m, H3S_MODEL_CONFIG_FILE), pjoin(ref9, H3S_MODEL_CONFIG_FILE)),
          "the new model is in place");
    /* a directory with only a config.json (m1's): every failure path, then success */
    rm_tree(m);
    CHECK_OK(h3s_model_init("tiny", -1, 7, m));
    unlink(pjoin(m, H3S_MODEL_WEIGHTS_FILE));
    undo_fails(m, m1, ref9, 1u << 3 | 1u << 4, "t-ot"); /* config in fails, new weights out fail */
    rm_tree(m);
    CHECK_OK(h3s_model_init("tiny", -1, 7, m));
    unlink(pjoin(m, H3S_MODEL_WEIGHTS_FILE));
    undo_fails(m, m1, ref9, 1u << 2 | 1u << 3, "t-tt"); /* new weights in fail, config back fails */
    CHECK_OK(h3s_model_init("tiny", -1, 7, m));         /* into the empty directory */
    unlink(pjoin(m, H3S_MODEL_WEIGHTS_FILE));
    g_watched = 0;
    g_fail_mask = 1u << 3;
    CHECK_FAILS(H3S_ERR_IO, h3s_model_init("tiny", -1, 9, m));
    CHECK(h3t_count_entries(m) == 1 && files_equal(pjoin(m, H3S_MODEL_CONFIG_FILE), pjoin(m1, H3S_MODEL_CONFIG_FILE)),
          "config.json alone, as it was");
    g_fail_mask = 0;
    CHECK_OK(h3s_model_init("tiny", -1, 7, m));
    CHECK(h3t_count_entries(m) == 2 && files_equal(pjoin(m, H3S_MODEL_WEIGHTS_FILE), pjoin(m1, H3S_MODEL_WEIGHTS_FILE)),
          "over a config.json alone");
    g_no_exchange = 0;
    g_watch = NULL;
    CHECK(h3t_count_entries(root) == 3, "%d entries beside the model", h3t_count_entries(root));
    rm_tree(m);
    rm_tree(ref9);
}

int main(void) {
    h3t_make_temp_dir(root);
    char m1[1024];
    snprintf(m1, sizeof m1, "%s/m1", root);
    test_init_and_load(m1);
    test_reproducible(m1);
    test_sharded(m1);
    test_bad_parameters(m1);
    test_snapshot_and_verify(m1);
    test_init_policy(m1);
    test_init_race(m1);
    test_large_index(m1);
    test_init_modes(m1);
    test_init_dot(m1);
    test_init_no_exchange(m1);
    rm_tree(m1);
    /* no temporary directories or files may be left next to the outputs */
    CHECK(h3t_count_entries(root) == 0, "%d entries left in %s", h3t_count_entries(root), root);
    rm_tree(root);
    return h3t_finish("test_modeldir");
}
