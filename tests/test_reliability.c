/* Reliability (fail-closed I/O): an output never replaces an input, anything inside the model directory, or anything
 * but a regular file; non-finite weights and cotangents are refused; an attention mask that leaves a query with no
 * key is refused; JSON is strict; error messages are whole and escape control bytes.  Every check here failed on
 * the code before these rules (noted per test). */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json.h"
#include "io/modeldir.h"
#include "io/safetensors.h"
#include "model_util.h"

static char tmpdir[] = "/tmp/h3s_test_rel_XXXXXX";

/* a/b in one of 8 rotating buffers (a may be an earlier result) */
static char *pj(const char *a, const char *b) {
    static char bufs[8][4096];
    static int k = 0;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/%s", a, b);
    char *p = bufs[k++ % 8];
    memcpy(p, tmp, sizeof tmp);
    return p;
}

static void write_text(const char *path, const char *text) { h3t_write_file(path, text, strlen(text)); }

/* A safetensors file from a raw header text (at most 240 bytes) and 4 zero bytes of data. */
static void write_st_raw(const char *path, const char *hdr) {
    unsigned char buf[256];
    uint64_t hl = strlen(hdr);
    if (hl > sizeof buf - 12) {
        fprintf(stderr, "write_st_raw: header of %llu bytes too long\n", (unsigned long long)hl);
        abort();
    }
    memcpy(buf, &hl, 8);
    memcpy(buf + 8, hdr, hl);
    memset(buf + 8 + hl, 0, 4);
    h3t_write_file(path, buf, 8 + hl + 4);
}

static int file_is(const char *path, const char *text) {
    unsigned char *got = NULL;
    size_t n = h3t_read_file(path, &got);
    int same = got && n == strlen(text) && memcmp(got, text, n) == 0;
    free(got);
    return same;
}

static int no_raw_control(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f) return 0;
    return 1;
}

/* ---- finding 2: only a regular file is ever replaced (old code: the link / FIFO was replaced by a file) ---- */
static void test_output_targets(void) {
    float v[2] = {1, 2};
    int64_t shape[1] = {2};
    h3s_st_entry e = {"x", h3s_tensor_view(v, H3S_F32, 1, shape)};
    char *target = pj(tmpdir, "target.bin"), *link = pj(tmpdir, "link.safetensors");
    write_text(target, "precious");
    CHECK(symlink("target.bin", link) == 0, "symlink");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_st_write(link, &e, 1));
    CHECK(strstr(h3s_last_error(), "symbolic link") != NULL, "message: %s", h3s_last_error());
    struct stat sb;
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode), "the symbolic link was replaced");
    CHECK(file_is(target, "precious"), "the link's target changed");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_io_write_file_atomic(link, "{}", 2));
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode), "write_file_atomic replaced the link");
    unlink(link);
    /* a dangling link too */
    CHECK(symlink("nowhere", link) == 0, "symlink");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_st_write(link, &e, 1));
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode), "the dangling link was replaced");
    unlink(link);
    /* a FIFO (a device behaves the same: anything but a regular file) */
    char *fifo = pj(tmpdir, "fifo");
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_st_write(fifo, &e, 1));
    CHECK(strstr(h3s_last_error(), "FIFO") != NULL, "message: %s", h3s_last_error());
    CHECK(lstat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO was replaced");
    /* reading a FIFO as a model or inputs file fails at once instead of waiting for a writer */
    h3s_st_file *f = NULL;
    CHECK_FAILS(H3S_ERR_IO, h3s_st_open(fifo, &f));
    h3s_config c;
    CHECK_FAILS(H3S_ERR_IO, h3s_config_load(fifo, &c));
    unlink(fifo);
    /* a directory */
    char *d = pj(tmpdir, "adir");
    mkdir(d, 0755);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_st_write(d, &e, 1));
    CHECK(lstat(d, &sb) == 0 && S_ISDIR(sb.st_mode), "the directory was replaced");
    rmdir(d);
    /* the model and target.bin: no temporary file */
    CHECK(h3t_count_entries(tmpdir) == 2, "temporary files left: %d entries", h3t_count_entries(tmpdir));
    /* a regular file is still replaced */
    CHECK_OK(h3s_st_write(target, &e, 1));
    unlink(target);
}

/* ---- finding 1: an output that resolves to an input or into the model directory ---- */
static void test_output_collisions(const char *model) {
    char *in = pj(tmpdir, "in.safetensors"), *ct = pj(tmpdir, "ct.safetensors");
    write_text(in, "in");
    write_text(ct, "ct");
    const char *inputs[2] = {in, ct}, *dirs[1] = {model};
    CHECK_OK(h3s_io_check_output(pj(tmpdir, "out.safetensors"), inputs, 2, dirs, 1));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(in, inputs, 2, dirs, 1));
    CHECK(strstr(h3s_last_error(), "input"), "message: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(ct, inputs, 2, dirs, 1));
    /* through "..", "." and a symbolic link to the directory */
    mkdir(pj(tmpdir, "sub"), 0755);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(pj(tmpdir, "sub/../in.safetensors"), inputs, 2, dirs, 1));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(pj(tmpdir, "./ct.safetensors"), inputs, 2, dirs, 1));
    CHECK(symlink(tmpdir, pj(tmpdir, "dirlink")) == 0, "symlink");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(pj(tmpdir, "dirlink/in.safetensors"), inputs, 2, dirs, 1));
    /* the input named through a link, the output by its real name */
    const char *via_link[1] = {pj(tmpdir, "dirlink/ct.safetensors")};
    CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(ct, via_link, 1, NULL, 0));
    /* a hard link to an input: the same file */
    CHECK(link(in, pj(tmpdir, "hard.safetensors")) == 0, "link");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(pj(tmpdir, "hard.safetensors"), inputs, 2, dirs, 1));
    /* anything inside the model directory: its files, a new file, a subfolder, via ".." from elsewhere */
    CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(pj(model, H3S_MODEL_WEIGHTS_FILE), inputs, 2, dirs, 1));
    CHECK(strstr(h3s_last_error(), "model directory"), "message: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(pj(model, "new.json"), inputs, 2, dirs, 1));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(pj(tmpdir, "sub/../model/config.json"), inputs, 2, dirs, 1));
    /* a sibling whose name starts like the model directory is not inside it */
    CHECK_OK(h3s_io_check_output(pj(tmpdir, "model2.json"), inputs, 2, dirs, 1));
    /* not a file name; a directory that does not exist */
    CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(pj(tmpdir, "sub/"), inputs, 2, dirs, 1));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_io_check_output(pj(tmpdir, ".."), inputs, 2, dirs, 1));
    CHECK_FAILS(H3S_ERR_IO, h3s_io_check_output(pj(tmpdir, "no/such/x"), inputs, 2, dirs, 1));
    /* the library's own writer of model-side files refuses the model directory too */
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_manifest_write(model, pj(model, "manifest.json")));
    CHECK(access(pj(model, "manifest.json"), F_OK) != 0, "a manifest was written into the model");
    unlink(pj(tmpdir, "hard.safetensors"));
    unlink(pj(tmpdir, "dirlink"));
    rmdir(pj(tmpdir, "sub"));
    unlink(in);
    unlink(ct);
}

/* Overwrite element 0 of parameter `name` in the model's weights file with raw bytes. */
static void poison_param(const char *model, const char *name, const void *bytes, size_t n) {
    char *path = pj(model, H3S_MODEL_WEIGHTS_FILE);
    h3s_st_file *f = NULL;
    CHECK_OK(h3s_st_open(path, &f));
    if (!f) return;
    const h3s_st_entry *e = h3s_st_find(f, name);
    CHECK(e != NULL, "no parameter %s", name);
    unsigned char *all = NULL;
    size_t len = h3t_read_file(path, &all);
    if (e && all) {
        size_t off =
            (size_t)((const unsigned char *)e->tensor.data - (const unsigned char *)h3s_st_entry_at(f, 0)->tensor.data);
        /* the data area starts after the 8-byte length and the header */
        uint64_t hl = 0;
        memcpy(&hl, all, 8);
        memcpy(all + 8 + hl + off, bytes, n);
        h3s_st_close(f);
        f = NULL;
        h3t_write_file(path, all, len);
    }
    free(all);
    h3s_st_close(f);
}

/* ---- finding 3: non-finite weights (old code: loaded, verify OK, every output NaN) ---- */
static void test_nonfinite_weights(void) {
    char *m = pj(tmpdir, "nanmodel");
    CHECK_OK(h3s_model_init("tiny", -1, 5, m));
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_load(m, &w));
    /* the first parameter in file order (its data starts the data area), and a BF16 one further in */
    const char *first = NULL;
    h3s_st_file *f = NULL;
    CHECK_OK(h3s_st_open(pj(m, H3S_MODEL_WEIGHTS_FILE), &f));
    if (f) first = strdup(h3s_st_entry_at(f, 0)->name);
    const char *bf = NULL;
    for (int64_t i = 0; f && i < h3s_st_count(f) && !bf; i++)
        if (h3s_st_entry_at(f, i)->tensor.dtype == H3S_BF16) bf = strdup(h3s_st_entry_at(f, i)->name);
    h3s_st_close(f);
    h3s_weights_free(w);
    if (!first || !bf) return;
    h3s_dtype d0 = H3S_F32;
    {
        h3s_st_file *g = NULL;
        CHECK_OK(h3s_st_open(pj(m, H3S_MODEL_WEIGHTS_FILE), &g));
        if (g) d0 = h3s_st_entry_at(g, 0)->tensor.dtype;
        h3s_st_close(g);
    }
    uint32_t nan32 = 0x7fc00000u;
    uint16_t nan16 = 0x7fc0u, inf16 = 0xff80u;
    if (d0 == H3S_F32)
        poison_param(m, first, &nan32, 4);
    else
        poison_param(m, first, &nan16, 2);
    w = NULL;
    CHECK_FAILS(H3S_ERR_FORMAT, h3s_weights_load(m, &w));
    CHECK(w == NULL, "weights returned");
    CHECK(strstr(h3s_last_error(), first) && strstr(h3s_last_error(), "NaN"), "message: %s", h3s_last_error());
    char *report = NULL;
    CHECK_FAILS(H3S_ERR_FORMAT, h3s_model_verify(m, NULL, &report));
    CHECK(report == NULL, "verify reported");
    /* restore element 0 (re-init), then -Inf in a BF16 parameter */
    CHECK_OK(h3s_model_init("tiny", -1, 5, m));
    poison_param(m, bf, &inf16, 2);
    CHECK_FAILS(H3S_ERR_FORMAT, h3s_weights_load(m, &w));
    CHECK(strstr(h3s_last_error(), bf) && strstr(h3s_last_error(), "-Inf"), "message: %s", h3s_last_error());
    free((void *)first);
    free((void *)bf);
    CHECK_OK(h3s_model_init("tiny", -1, 5, m));
    CHECK_OK(h3s_weights_load(m, &w));
    h3s_weights_free(w);
    unlink(pj(m, H3S_MODEL_WEIGHTS_FILE));
    unlink(pj(m, H3S_MODEL_CONFIG_FILE));
    rmdir(m);
}

/* ---- finding 3: a non-finite cotangent (old code: exit 0 with NaN gradients) ---- */
static void test_nonfinite_cotangent(const h3s_config *c, h3s_model *m) {
    request q;
    make_request(c, 2, 0, 0, &q);
    h3s_tape *tape = NULL;
    h3s_tensor s = {0}, a = {0}, ds, da;
    CHECK_OK(h3s_model_forward(m, &q.in, NULL, NULL, &tape, &s, &a));
    CHECK_OK(h3s_cotangent_random(s.shape[0], s.shape[1], s.shape[2], a.shape[1], a.shape[2], 3, &ds, &da));
    h3s_grads g;
    memset(&g, 0, sizeof g);
    if (tape) {
        ((float *)ds.data)[7] = NAN;
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_backward(m, tape, &ds, &da, NULL, NULL, &g));
        CHECK(strstr(h3s_last_error(), "sample[7]"), "message: %s", h3s_last_error());
        ((float *)ds.data)[7] = 0;
        ((float *)da.data)[3] = -INFINITY;
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_backward(m, tape, &ds, &da, NULL, NULL, &g));
        CHECK(strstr(h3s_last_error(), "audio_sample[3]"), "message: %s", h3s_last_error());
        ((float *)da.data)[3] = 0;
        CHECK_OK(h3s_model_backward(m, tape, &ds, &da, NULL, NULL, &g));
        h3s_grads_free(&g);
    }
    h3s_tape_free(tape);
    h3s_tensor_free(&s);
    h3s_tensor_free(&a);
    h3s_tensor_free(&ds);
    h3s_tensor_free(&da);
    request_free(&q);
}

/* ---- finding 4: a mask that hides every key of a query (old code: accepted, attention returned 0) ---- */
static void test_degenerate_masks(const h3s_config *c) {
    request q;
    make_request(c, 3, 40, 1, &q); /* padded to 40 rows: padding queries see no key, which is fine */
    int64_t S = q.lay.S, batch;
    const int64_t *tags = q.lay.token_tags.data, *ti = q.lay.text_indices.data;
    uint8_t *mask = q.mask.data;
    CHECK(q.lay.n_pad > 0, "the layout has no padding rows");
    CHECK_OK(h3s_inputs_validate(c, &q.in, &batch));
    /* item 1: every live key hidden */
    for (int64_t s = 0; s < S; s++)
        mask[1 * S + s] = 0;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_validate(c, &q.in, &batch));
    char want[64];
    int64_t first_live = 0;
    while (tags[first_live] == -1)
        first_live++;
    snprintf(want, sizeof want, "item 1 (row %lld", (long long)first_live);
    CHECK(strstr(h3s_last_error(), want), "message lacks '%s': %s", want, h3s_last_error());
    /* one visible live key is enough for the blocks, one visible text key for the refiner */
    int64_t v0 = ((const int64_t *)q.lay.video_indices.data)[0];
    mask[1 * S + v0] = 1;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_validate(c, &q.in, &batch)); /* no text key yet */
    mask[1 * S + ti[0]] = 1;
    CHECK_OK(h3s_inputs_validate(c, &q.in, &batch));
    /* item 2: every text row hidden, other live rows visible: the refiner's text queries see nothing */
    for (int64_t j = 0; j < q.lay.Nt; j++)
        mask[2 * S + ti[j]] = 0;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_inputs_validate(c, &q.in, &batch));
    snprintf(want, sizeof want, "text row of item 2 (the token refiner's query row %lld", (long long)ti[0]);
    CHECK(strstr(h3s_last_error(), want), "message lacks '%s': %s", want, h3s_last_error());
    /* ... which is harmless without a refiner */
    h3s_config no_refiner = *c;
    no_refiner.num_refiner_layers = 0;
    CHECK_OK(h3s_inputs_validate(&no_refiner, &q.in, &batch));
    /* one text key visible is enough */
    mask[2 * S + ti[q.lay.Nt - 1]] = 1;
    CHECK_OK(h3s_inputs_validate(c, &q.in, &batch));
    /* the forward refuses what validate refuses, before computing anything */
    for (int64_t s = 0; s < S; s++)
        mask[0 * S + s] = tags[s] == -1; /* only padding rows visible in item 0 */
    h3s_weights *w = NULL;
    h3s_model *m = NULL;
    CHECK_OK(h3s_weights_create(c, 1, &w));
    CHECK_OK(h3s_model_create(w, H3S_BACKEND_CPU, &m));
    h3s_tensor s = {0}, a = {0};
    if (m) {
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_forward(m, &q.in, NULL, NULL, NULL, &s, &a));
        CHECK(strstr(h3s_last_error(), "item 0"), "message: %s", h3s_last_error());
        CHECK(s.data == NULL && a.data == NULL, "outputs allocated by a refused forward");
    }
    h3s_model_free(m);
    h3s_weights_free(w);
    request_free(&q);
}

/* ---- finding 7: strict JSON (old code: trailing text, control bytes, repeated names and another class passed) */
static void test_strict_json(const char *model) {
    cJSON *j = NULL;
    CHECK_OK(h3s_json_parse_strict("{\"a\": [1, -2.5e3, \"x\\u00e9\"]} \n", 29, "t", &j));
    cJSON_Delete(j);
    struct {
        const char *text, *needle;
    } bad[] = {{"{} x", "after"},
               {"{}{}", "after"},
               {"{\"a\":1}\x1c", "control byte 0x1c"},
               {"{\x0b\"a\":1}", "control byte 0x0b"},
               {"{\"a\r\":1}", "control byte 0x0d inside a string"},
               {"{\"a\":1,\"a\":2}", "'a'"},
               {"{\"x\":{\"b\":1,\"c\":2,\"b\":3}}", "'b'"},
               {"{\"a\\u0000b\":1}", "u0000"},
               {"{\"a\":01}", "number"},
               {"{\"a\":+1}", "0x2b"},
               {"{\"a\":1.}", "number"},
               {"{\"a\":\"\xc3\x28\"}", "UTF-8"},
               {"[1,2", "JSON"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = NULL;
        CHECK_FAILS(H3S_ERR_FORMAT, h3s_json_parse_strict(bad[i].text, strlen(bad[i].text), "t", &j));
        CHECK(j == NULL, "a tree for a refused text");
        CHECK(strstr(h3s_last_error(), bad[i].needle), "case %zu: message lacks '%s': %s", i, bad[i].needle,
              h3s_last_error());
        CHECK(no_raw_control(h3s_last_error()), "case %zu: raw control byte in the message", i);
    }
    /* config.json: the file of a model directory */
    char *cfg_path = pj(model, H3S_MODEL_CONFIG_FILE);
    unsigned char *orig = NULL;
    size_t olen = h3t_read_file(cfg_path, &orig);
    h3s_weights *w = NULL;
    char *edited = malloc(olen + 256);
    /* trailing text */
    snprintf(edited, olen + 256, "%s{\"more\": 1}", (const char *)orig);
    write_text(cfg_path, edited);
    CHECK_FAILS(H3S_ERR_FORMAT, h3s_weights_load(model, &w));
    /* another class with the same keys */
    const char *cls = strstr((const char *)orig, "MiniMaxH3Transformer3DModel");
    CHECK(cls != NULL, "config has no class name");
    if (cls) {
        size_t head = (size_t)(cls - (const char *)orig);
        snprintf(edited, olen + 256, "%.*sWanTransformer3DModel%s", (int)head, (const char *)orig,
                 cls + strlen("MiniMaxH3Transformer3DModel"));
        write_text(cfg_path, edited);
        CHECK_FAILS(H3S_ERR_INVALID, h3s_weights_load(model, &w));
        CHECK(strstr(h3s_last_error(), "WanTransformer3DModel"), "message: %s", h3s_last_error());
        char *report = NULL;
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_verify(model, NULL, &report));
    }
    h3s_config c;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_config_parse_json("{\"hidden_size\": 1}", 18, &c));
    CHECK(strstr(h3s_last_error(), "_class_name"), "missing class: %s", h3s_last_error());
    h3t_write_file(cfg_path, orig, olen);
    CHECK_OK(h3s_weights_load(model, &w));
    h3s_weights_free(w);
    free(edited);
    free(orig);
    /* a safetensors header with a control byte where cJSON sees whitespace */
    char *p = pj(tmpdir, "ctl.safetensors");
    const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}\x1c}";
    write_st_raw(p, hdr);
    h3s_st_file *f = NULL;
    CHECK_FAILS(H3S_ERR_FORMAT, h3s_st_open(p, &f));
    CHECK(strstr(h3s_last_error(), "0x1c"), "message: %s", h3s_last_error());
    unlink(p);
}

/* ---- findings 5 and 6: messages are whole and escaped (old code: cut at 1023 bytes, raw \r and \x1b) ---- */
static void test_messages(void) {
    /* a tensor name holding CR, ESC and a C1 control (escaped in the JSON, raw once decoded) */
    char *p = pj(tmpdir, "esc.safetensors");
    const char *hdr = "{\"a\\r\\u001b[2Kb\\u009b\":{\"dtype\":\"Q8\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    write_st_raw(p, hdr);
    h3s_st_file *f = NULL;
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_st_open(p, &f));
    const char *msg = h3s_last_error();
    CHECK(no_raw_control(msg), "raw control byte in: %s", msg);
    CHECK(strstr(msg, "'a\\x0d\\x1b[2Kb\\u009b'"), "escaped name missing: %s", msg);
    unlink(p);
    /* a context prefix is escaped too, and keeps the message */
    h3s_fail(H3S_ERR_IO, "inner\x1e");
    h3s_fail_context(H3S_ERR_IO, "outer\x1c");
    CHECK(!strcmp(h3s_last_error(), "outer\\x1c: inner\\x1e"), "context: %s", h3s_last_error());
    /* invalid UTF-8 and DEL */
    h3s_fail(H3S_ERR_IO, "x\xff\x7fy\xc3\xa9");
    CHECK(!strcmp(h3s_last_error(), "x\\xff\\x7fy\xc3\xa9"), "utf-8: %s", h3s_last_error());
    /* a long path is never cut */
    char longp[3000];
    memset(longp, 'a', sizeof longp);
    memcpy(longp, "/nonexistent-", 13);
    memcpy(longp + sizeof longp - 8, "END.bin", 8);
    CHECK_FAILS(H3S_ERR_IO, h3s_st_open(longp, &f));
    CHECK(strstr(h3s_last_error(), "END.bin") != NULL, "message cut at %zu bytes", strlen(h3s_last_error()));
    char *esc = h3s_escape_dup("ok\n");
    CHECK(esc && !strcmp(esc, "ok\\x0a"), "escape_dup: %s", esc ? esc : "(null)");
    free(esc);
}

/* ---- the finite check on large tensors gives the first bad index on any thread count ---- */
static void test_first_nonfinite(void) {
    int64_t n = (int64_t)5 << 20;
    h3s_tensor t = h3t_alloc(H3S_BF16, 1, &n);
    CHECK(h3s_tensor_first_nonfinite(&t) == -1, "zeros are finite");
    uint16_t *v = t.data;
    v[n - 1] = 0x7f81;            /* NaN */
    v[(int64_t)3 << 20] = 0x7f80; /* +Inf */
    v[(int64_t)(3 << 20) + 5] = 0xff80;
    for (int th = 1; th <= 4; th *= 2) {
        h3s_set_num_threads(th);
        CHECK(h3s_tensor_first_nonfinite(&t) == (int64_t)3 << 20, "%d threads: %lld", th,
              (long long)h3s_tensor_first_nonfinite(&t));
    }
    h3s_set_num_threads(0);
    v[7] = 0x7f7f; /* the largest finite BF16 */
    CHECK(h3s_tensor_first_nonfinite(&t) == (int64_t)3 << 20, "max finite is finite");
    h3s_tensor_free(&t);
    double d[3] = {1, INFINITY, NAN};
    int64_t n3 = 3;
    h3s_tensor td = h3s_tensor_view(d, H3S_F64, 1, &n3);
    CHECK(h3s_tensor_first_nonfinite(&td) == 1, "F64");
    uint16_t h[2] = {0x7bff, 0x7c00}; /* F16: max finite, +Inf */
    int64_t n2 = 2;
    h3s_tensor th = h3s_tensor_view(h, H3S_F16, 1, &n2);
    CHECK(h3s_tensor_first_nonfinite(&th) == 1, "F16");
}

int main(void) {
    h3t_make_temp_dir(tmpdir);
    char *model = strdup(pj(tmpdir, "model"));
    CHECK_OK(h3s_model_init("tiny", -1, 3, model));
    test_output_targets();
    test_output_collisions(model);
    test_nonfinite_weights();
    h3s_config c;
    CHECK_OK(h3s_config_preset("tiny", -1, &c));
    h3s_weights *w = NULL;
    h3s_model *m = NULL;
    CHECK_OK(h3s_weights_create(&c, 2, &w));
    CHECK_OK(h3s_model_create(w, H3S_BACKEND_CPU, &m));
    if (m) test_nonfinite_cotangent(&c, m);
    h3s_model_free(m);
    h3s_weights_free(w);
    test_degenerate_masks(&c);
    test_strict_json(model);
    test_messages();
    test_first_nonfinite();
    unlink(pj(model, H3S_MODEL_WEIGHTS_FILE));
    unlink(pj(model, H3S_MODEL_CONFIG_FILE));
    rmdir(model);
    free(model);
    rmdir(tmpdir);
    return h3t_finish("test_reliability");
}
