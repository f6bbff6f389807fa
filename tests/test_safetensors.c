/* safetensors: round trip of every dtype, byte determinism, the incremental writer, atomic writes, and a clean
 * error (never an out-of-bounds read: this runs under ASan in CI) for every kind of malformed file. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "test_util.h"

static char tmpdir[] = "/tmp/h3s_test_st_XXXXXX";

static void path_in(char *out, size_t size, const char *name) { snprintf(out, size, "%s/%s", tmpdir, name); }

/* A file with header length field `hdr_len_field`, the JSON text `json` and `data_len` data bytes (0, 1, 2, ...). */
static void write_raw(const char *path, uint64_t hdr_len_field, const char *json, size_t data_len) {
    size_t jl = strlen(json);
    unsigned char *buf = calloc(1, 8 + jl + data_len + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(hdr_len_field >> (8 * i));
    memcpy(buf + 8, json, jl);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + jl + i] = (unsigned char)i;
    h3t_write_file(path, buf, 8 + jl + data_len);
    free(buf);
}

/* Same, with the true header length. */
static void write_json(const char *path, const char *json, size_t data_len) {
    write_raw(path, strlen(json), json, data_len);
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ---------------------------------------------------------------- round trip ---------- */

typedef struct {
    h3s_st_entry e[9];
    h3s_tensor t[9];
} sample_set;

static void make_samples(sample_set *s) {
    int64_t s_f64[2] = {2, 3}, s_f32[1] = {5}, s_bf16[3] = {3, 2, 2}, s_f16[1] = {4}, s_i64[1] = {3}, s_bool[1] = {7};
    int64_t s_4d[4] = {1, 2, 1, 3}, s_empty[2] = {0, 4};
    s->t[0] = h3t_alloc(H3S_F64, 2, s_f64);
    s->t[1] = h3t_alloc(H3S_F32, 1, s_f32);
    s->t[2] = h3t_alloc(H3S_BF16, 3, s_bf16);
    s->t[3] = h3t_alloc(H3S_F16, 1, s_f16);
    s->t[4] = h3t_alloc(H3S_I64, 1, s_i64);
    s->t[5] = h3t_alloc(H3S_BOOL, 1, s_bool);
    s->t[6] = h3t_alloc(H3S_F32, 0, NULL); /* a scalar */
    s->t[7] = h3t_alloc(H3S_F32, 4, s_4d);
    s->t[8] = h3t_alloc(H3S_F32, 2, s_empty);
    static const char *names[9] = {"a.f64",  "b.f32",    "c.bf16", "d.f16",  "e.i64",
                                   "f.bool", "g.scalar", "h.4d",   "i.empty"};
    for (int i = 0; i < 9; i++) {
        unsigned char *p = s->t[i].data;
        size_t n = h3s_tensor_nbytes(&s->t[i]);
        for (size_t k = 0; k < n; k++)
            p[k] = (unsigned char)(17 * i + 31 * k + 1);
        s->e[i].name = names[i];
        s->e[i].tensor = s->t[i];
    }
    ((int64_t *)s->t[4].data)[0] = -5;
    ((int64_t *)s->t[4].data)[2] = INT64_MAX;
    for (int k = 0; k < 7; k++)
        ((uint8_t *)s->t[5].data)[k] = (uint8_t)(k % 2);
}

static void free_samples(sample_set *s) {
    for (int i = 0; i < 9; i++)
        h3s_tensor_free(&s->t[i]);
}

static void test_round_trip(void) {
    sample_set s;
    make_samples(&s);
    char path[512], path2[512];
    path_in(path, sizeof path, "round.safetensors");
    path_in(path2, sizeof path2, "round2.safetensors");
    CHECK_OK(h3s_st_write(path, s.e, 9));
    h3s_st_file *f = NULL;
    CHECK_OK(h3s_st_open(path, &f));
    if (f) {
        CHECK(h3s_st_count(f) == 9, "count %lld", (long long)h3s_st_count(f));
        for (int i = 0; i < 9 && i < h3s_st_count(f); i++) {
            const h3s_st_entry *e = h3s_st_entry_at(f, i);
            CHECK(strcmp(e->name, s.e[i].name) == 0, "entry %d in file order: %s", i, e->name);
            CHECK(e->tensor.dtype == s.t[i].dtype && e->tensor.ndim == s.t[i].ndim, "%s dtype/ndim", e->name);
            for (int d = 0; d < s.t[i].ndim; d++)
                CHECK(e->tensor.shape[d] == s.t[i].shape[d], "%s shape[%d]", e->name, d);
            CHECK(h3t_bitwise_equal(&e->tensor, &s.t[i]), "%s bytes differ", e->name);
            CHECK(e->tensor.owns_data == 0 && e->tensor.device == 0, "%s is a host view", e->name);
            size_t a = h3s_dtype_size(e->tensor.dtype);
            CHECK(h3s_tensor_nbytes(&e->tensor) == 0 || (uintptr_t)e->tensor.data % a == 0, "%s aligned", e->name);
            const h3s_st_entry *found = h3s_st_find(f, s.e[i].name);
            CHECK(found == e, "find %s", s.e[i].name);
        }
        CHECK(h3s_st_find(f, "nope") == NULL && h3s_st_find(f, "") == NULL, "absent names");
        CHECK(h3s_st_entry_at(f, 9) == NULL && h3s_st_entry_at(f, -1) == NULL, "entry_at range");
        CHECK(((const int64_t *)h3s_st_find(f, "e.i64")->tensor.data)[2] == INT64_MAX, "I64 value");
        /* writing the entries read back gives the same bytes */
        h3s_st_entry back[9];
        for (int i = 0; i < 9; i++)
            back[i] = *h3s_st_entry_at(f, i);
        CHECK_OK(h3s_st_write(path2, back, 9));
        h3s_st_close(f);
    }
    unsigned char *a = NULL, *b = NULL;
    size_t na = h3t_read_file(path, &a), nb = h3t_read_file(path2, &b);
    CHECK(na > 8 && na == nb && memcmp(a, b, na) == 0, "rewrite is byte-identical");
    /* header length is a multiple of 8 and the padding is spaces */
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | a[i];
    CHECK(hl % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)hl);
    CHECK(a[8] == '{', "header starts with {");
    size_t end = 8 + hl;
    while (end > 8 && a[end - 1] == ' ')
        end--;
    CHECK(a[end - 1] == '}', "JSON then spaces");
    CHECK(memchr(a + 8, '\n', hl) == NULL, "no newlines in the header");
    free(a);
    free(b);

    /* same entries, another call: same bytes; one byte changed: different bytes */
    CHECK_OK(h3s_st_write(path2, s.e, 9));
    na = h3t_read_file(path, &a);
    nb = h3t_read_file(path2, &b);
    CHECK(na == nb && memcmp(a, b, na) == 0, "two writes of the same entries differ");
    free(a);
    free(b);
    ((unsigned char *)s.t[1].data)[3] ^= 1;
    CHECK_OK(h3s_st_write(path2, s.e, 9));
    na = h3t_read_file(path, &a);
    nb = h3t_read_file(path2, &b);
    CHECK(na == nb && memcmp(a, b, na) != 0, "a changed tensor must change the file");
    free(a);
    free(b);
    remove(path);
    remove(path2);
    free_samples(&s);
}

/* The exact bytes of a one-tensor file: the layout the reference serializer produces for the same tensor. */
static void test_exact_layout(void) {
    float v[6] = {0, 1, 2, 3, 4, 5};
    int64_t shape[3] = {1, 2, 3};
    h3s_st_entry e = {"attn.0", h3s_tensor_view(v, H3S_F32, 3, shape)};
    char path[512];
    path_in(path, sizeof path, "exact.safetensors");
    CHECK_OK(h3s_st_write(path, &e, 1));
    const char *json = "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
    unsigned char want[8 + 64 + 24];
    CHECK(strlen(json) == 64, "test json length");
    memset(want, 0, 8);
    want[0] = 64;
    memcpy(want + 8, json, 64);
    memcpy(want + 72, v, 24);
    unsigned char *got = NULL;
    size_t n = h3t_read_file(path, &got);
    CHECK(n == sizeof want && memcmp(got, want, n) == 0, "exact layout");
    free(got);

    /* a name that needs JSON escapes, and a padded header */
    const char *odd = "we\"ird\\name\t";
    h3s_st_entry e2 = {odd, h3s_tensor_view(v, H3S_F32, 1, (int64_t[]){2})};
    CHECK_OK(h3s_st_write(path, &e2, 1));
    h3s_st_file *f = NULL;
    CHECK_OK(h3s_st_open(path, &f));
    if (f) {
        CHECK(h3s_st_count(f) == 1 && strcmp(h3s_st_entry_at(f, 0)->name, odd) == 0, "escaped name round trip");
        h3s_st_close(f);
    }
    /* empty file: "{}" padded to 8 */
    CHECK_OK(h3s_st_write(path, NULL, 0));
    n = h3t_read_file(path, &got);
    CHECK(n == 16 && got[0] == 8 && memcmp(got + 8, "{}      ", 8) == 0, "empty file layout");
    free(got);
    CHECK_OK(h3s_st_open(path, &f));
    if (f) {
        CHECK(h3s_st_count(f) == 0, "empty file has no tensors");
        h3s_st_close(f);
    }
    remove(path);
}

static void test_incremental_writer(void) {
    sample_set s;
    make_samples(&s);
    char path[512], path2[512];
    path_in(path, sizeof path, "whole.safetensors");
    path_in(path2, sizeof path2, "pieces.safetensors");
    CHECK_OK(h3s_st_write(path, s.e, 9));
    h3s_st_entry meta[9];
    for (int i = 0; i < 9; i++) {
        meta[i] = s.e[i];
        meta[i].tensor.data = NULL; /* begin() ignores data */
    }
    h3s_st_writer *w = NULL;
    CHECK_OK(h3s_st_writer_begin(path2, meta, 9, &w));
    if (w) {
        /* concatenate every tensor's bytes and feed them in pieces of 1, 2, 3, ... bytes */
        size_t total = 0;
        for (int i = 0; i < 9; i++)
            total += h3s_tensor_nbytes(&s.t[i]);
        unsigned char *all = malloc(total), *p = all;
        for (int i = 0; i < 9; i++) {
            memcpy(p, s.t[i].data, h3s_tensor_nbytes(&s.t[i]));
            p += h3s_tensor_nbytes(&s.t[i]);
        }
        size_t off = 0, piece = 1;
        h3s_status st = H3S_OK;
        while (off < total && st == H3S_OK) {
            size_t n = piece < total - off ? piece : total - off;
            st = h3s_st_writer_append(w, all + off, n);
            off += n;
            piece++;
        }
        CHECK(st == H3S_OK, "append: %s", h3s_last_error());
        CHECK_FAILS(H3S_ERR_INVALID, h3s_st_writer_append(w, all, 1)); /* one byte too many */
        CHECK_OK(h3s_st_writer_commit(w));
        free(all);
    }
    unsigned char *a = NULL, *b = NULL;
    size_t na = h3t_read_file(path, &a), nb = h3t_read_file(path2, &b);
    CHECK(na == nb && na > 0 && memcmp(a, b, na) == 0, "incremental writer gives the same bytes");
    free(a);
    free(b);
    remove(path);
    remove(path2);

    /* commit with bytes missing: error, nothing at the path, no temporary left */
    int before = h3t_count_entries(tmpdir);
    CHECK_OK(h3s_st_writer_begin(path2, meta, 9, &w));
    if (w) {
        CHECK_OK(h3s_st_writer_append(w, s.t[0].data, 8));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_st_writer_commit(w));
    }
    CHECK(!file_exists(path2), "a failed commit leaves no file");
    CHECK(h3t_count_entries(tmpdir) == before, "a failed commit leaves no temporary file");
    CHECK_OK(h3s_st_writer_begin(path2, meta, 9, &w));
    h3s_st_writer_abort(w);
    CHECK(!file_exists(path2) && h3t_count_entries(tmpdir) == before, "abort leaves nothing");
    free_samples(&s);
}

static void test_write_errors(void) {
    float v[4] = {1, 2, 3, 4};
    int64_t shape[1] = {4};
    char path[512];
    path_in(path, sizeof path, "bad.safetensors");
    /* a file already at the path survives a failed write untouched */
    h3t_write_file(path, "precious", 8);
    int before = h3t_count_entries(tmpdir);
    h3s_st_entry dup[2] = {{"x", h3s_tensor_view(v, H3S_F32, 1, shape)}, {"x", h3s_tensor_view(v, H3S_F32, 1, shape)}};
    CHECK_FAILS(H3S_ERR_INVALID, h3s_st_write(path, dup, 2));
    CHECK(strstr(h3s_last_error(), "'x'"), "duplicate named: %s", h3s_last_error());
    h3s_st_entry meta = {"__metadata__", h3s_tensor_view(v, H3S_F32, 1, shape)};
    CHECK_FAILS(H3S_ERR_INVALID, h3s_st_write(path, &meta, 1));
    h3s_st_entry bad_dtype = {"x", h3s_tensor_view(v, (h3s_dtype)42, 1, shape)};
    CHECK_FAILS(H3S_ERR_DTYPE, h3s_st_write(path, &bad_dtype, 1));
    h3s_st_entry no_data = {"x", h3s_tensor_view(NULL, H3S_F32, 1, shape)};
    CHECK_FAILS(H3S_ERR_INVALID, h3s_st_write(path, &no_data, 1));
    int64_t neg[1] = {-1};
    h3s_st_entry neg_shape = {"x", h3s_tensor_view(v, H3S_F32, 1, neg)};
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_st_write(path, &neg_shape, 1));
    h3s_st_entry no_name = {NULL, h3s_tensor_view(v, H3S_F32, 1, shape)};
    CHECK_FAILS(H3S_ERR_INVALID, h3s_st_write(path, &no_name, 1));
    h3s_st_entry bad_utf8 = {"caf\xc3", h3s_tensor_view(v, H3S_F32, 1, shape)};
    CHECK_FAILS(H3S_ERR_INVALID, h3s_st_write(path, &bad_utf8, 1));
    h3s_st_entry on_device = {"x", h3s_tensor_view(v, H3S_F32, 1, shape)};
    on_device.tensor.device = 1;
    CHECK_FAILS(H3S_ERR_DEVICE, h3s_st_write(path, &on_device, 1));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_st_write(path, NULL, 1));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_st_write(NULL, &no_name, 0));
    unsigned char *got = NULL;
    size_t n = h3t_read_file(path, &got);
    CHECK(n == 8 && memcmp(got, "precious", 8) == 0, "the existing file is untouched");
    free(got);
    CHECK(h3t_count_entries(tmpdir) == before, "no temporary files left behind");
    /* a directory that does not exist */
    CHECK_FAILS(H3S_ERR_IO, h3s_st_write("/nonexistent-h3s-dir/x.safetensors", &dup[0], 1));
    /* a valid write replaces the old file atomically */
    CHECK_OK(h3s_st_write(path, &dup[0], 1));
    h3s_st_file *f = NULL;
    CHECK_OK(h3s_st_open(path, &f));
    h3s_st_close(f);
    remove(path);
}

/* ---------------------------------------------------------------- malformed files ----- */

/* Open must fail with `want`; the message must name the file and, when given, `needle`. */
static void expect_bad(const char *path, h3s_status want, const char *needle, const char *what) {
    h3s_st_file *f = (h3s_st_file *)0x1;
    h3s_clear_error();
    h3s_status st = h3s_st_open(path, &f);
    CHECK(st == want, "%s: got %s (%s), expected %s", what, h3s_status_name(st), h3s_last_error(),
          h3s_status_name(want));
    CHECK(f == (h3s_st_file *)0x1, "%s: output written on failure", what);
    CHECK(strstr(h3s_last_error(), path) != NULL, "%s: message does not name the file: %s", what, h3s_last_error());
    if (needle)
        CHECK(strstr(h3s_last_error(), needle) != NULL, "%s: message lacks '%s': %s", what, needle, h3s_last_error());
    if (st == H3S_OK) h3s_st_close(f);
}

static void test_malformed(void) {
    char p[512];
    path_in(p, sizeof p, "malformed.safetensors");
    const char *good = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";

    h3t_write_file(p, "", 0);
    expect_bad(p, H3S_ERR_FORMAT, "truncated", "empty file");
    h3t_write_file(p, "\x10\0\0\0\0", 5);
    expect_bad(p, H3S_ERR_FORMAT, "truncated", "5-byte file");
    write_raw(p, 4096, good, 24);
    expect_bad(p, H3S_ERR_FORMAT, "past the end", "header length beyond the file");
    write_raw(p, (uint64_t)1 << 62, good, 24);
    expect_bad(p, H3S_ERR_FORMAT, "limit", "absurd header length");
    write_raw(p, 0, good, 24);
    expect_bad(p, H3S_ERR_FORMAT, NULL, "zero header length");
    write_json(p, "this is not json", 0);
    expect_bad(p, H3S_ERR_FORMAT, "JSON", "non-JSON header");
    write_json(p, "{\"w\":{\"dtype\":\"F32\",", 0);
    expect_bad(p, H3S_ERR_FORMAT, "JSON", "cut JSON");
    write_json(p, "[1,2,3]", 0);
    expect_bad(p, H3S_ERR_FORMAT, "object", "header is an array");
    write_json(p, "{}  x", 0);
    expect_bad(p, H3S_ERR_FORMAT, "after", "bytes after the JSON");
    h3t_write_file(p, "\x08\0\0\0\0\0\0\0{}\0     ", 16);
    expect_bad(p, H3S_ERR_FORMAT, "NUL", "NUL in the header");

    /* truncated data: the header describes 24 bytes, 20 are there */
    write_json(p, good, 20);
    expect_bad(p, H3S_ERR_FORMAT, "'w'", "truncated data");
    write_json(p, good, 24);
    h3s_st_file *f = NULL;
    CHECK_OK(h3s_st_open(p, &f)); /* the control: exactly right */
    h3s_st_close(f);
    write_json(p, good, 28);
    expect_bad(p, H3S_ERR_FORMAT, "no tensor", "trailing bytes");

    /* numbers that cJSON's double would take as integers, or round: refused by their text (a string holding digits,
     * e.g. in __metadata__, is not a number) */
    {
        static const char *const hdrs[] = {
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0,3],\"data_offsets\":[0,24]}}",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24e0]}}",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[-0,24]}}",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3,1E0],\"data_offsets\":[0,24]}}",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[0,9007199254740993],\"data_offsets\":[0,0]}}",
        };
        static const char *const nums[] = {"2.0", "24e0", "-0", "1E0", "9007199254740993"};
        for (int i = 0; i < 5; i++) {
            write_json(p, hdrs[i], i == 4 ? 0 : 24);
            char what[64];
            snprintf(what, sizeof what, "number %s", nums[i]);
            expect_bad(p, H3S_ERR_FORMAT, nums[i], what);
        }
        write_json(p,
                   "{\"__metadata__\":{\"n\":\"-1.5e3\"},\"w\":{\"dtype\":\"F32\",\"shape\":[0,9007199254740992],"
                   "\"data_offsets\":[0,0]}}",
                   0);
        CHECK_OK(h3s_st_open(p, &f)); /* 2^53 itself, and digits in a string */
        h3s_st_close(f);
    }

    /* an unsupported dtype is named whole (messages never cut a user string) */
    write_json(
        p, "{\"w\":{\"dtype\":\"FLOAT32_WITH_A_VERY_LONG_SUFFIX_ABCDEFGHIJ\",\"shape\":[2,3],\"data_offsets\":[0,24]}}",
        24);
    expect_bad(p, H3S_ERR_DTYPE, "FLOAT32_WITH_A_VERY_LONG_SUFFIX_ABCDEFGHIJ is not supported", "long dtype");

    /* header lying about sizes */
    write_json(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20);
    expect_bad(p, H3S_ERR_FORMAT, "'w'", "shape needs more than the offsets span");
    write_json(p, "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24);
    expect_bad(p, H3S_ERR_FORMAT, "'w'", "dtype size lie");
    write_json(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4503599627370496,4503599627370496],\"data_offsets\":[0,8]}}",
               8);
    expect_bad(p, H3S_ERR_FORMAT, "'w'", "shape product overflows");

    /* offsets */
    write_json(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[250],\"data_offsets\":[0,1000]}}", 24);
    expect_bad(p, H3S_ERR_FORMAT, "'w'", "offsets outside the data");
    write_json(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[30,30]}}", 24);
    expect_bad(p, H3S_ERR_FORMAT, "'w'", "empty tensor past the end");
    write_json(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 24);
    expect_bad(p, H3S_ERR_FORMAT, "'w'", "begin > end");
    write_json(p,
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
               24);
    expect_bad(p, H3S_ERR_FORMAT, "overlaps", "overlapping tensors");
    write_json(p,
               "{\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
               24);
    expect_bad(p, H3S_ERR_FORMAT, "overlaps", "overlapping tensors listed out of order");
    write_json(p,
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
               8);
    expect_bad(p, H3S_ERR_FORMAT, "overlaps", "two tensors on the same bytes");
    write_json(p,
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}",
               24);
    expect_bad(p, H3S_ERR_FORMAT, "no tensor", "gap between tensors");
    write_json(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4);
    expect_bad(p, H3S_ERR_FORMAT, "data_offsets", "one offset");
    write_json(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,-4]}}", 4);
    expect_bad(p, H3S_ERR_FORMAT, "data_offsets", "negative offset");
    write_json(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":\"0,4\"}}", 4);
    expect_bad(p, H3S_ERR_FORMAT, "data_offsets", "offsets as a string");

    /* dtypes */
    write_json(p, "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4);
    expect_bad(p, H3S_ERR_DTYPE, "'w'", "U8");
    write_json(p, "{\"w\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    expect_bad(p, H3S_ERR_DTYPE, "I32", "I32");
    write_json(p, "{\"w\":{\"dtype\":\"Q4_K\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    expect_bad(p, H3S_ERR_DTYPE, "'w'", "unknown dtype");
    write_json(p, "{\"w\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    expect_bad(p, H3S_ERR_FORMAT, "dtype", "dtype not a string");

    /* entry structure */
    write_json(p, "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    expect_bad(p, H3S_ERR_FORMAT, "dtype", "no dtype");
    write_json(p, "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4);
    expect_bad(p, H3S_ERR_FORMAT, "shape", "no shape");
    write_json(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4);
    expect_bad(p, H3S_ERR_FORMAT, "data_offsets", "no offsets");
    write_json(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4);
    expect_bad(p, H3S_ERR_FORMAT, "shape", "shape not an array");
    write_json(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4);
    expect_bad(p, H3S_ERR_FORMAT, "shape", "negative dim");
    write_json(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4);
    expect_bad(p, H3S_ERR_FORMAT, "shape", "fractional dim");
    write_json(p, "{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    expect_bad(p, H3S_ERR_FORMAT, "dtype", "dtype twice");
    write_json(p, "{\"w\":[1,2]}", 0);
    expect_bad(p, H3S_ERR_FORMAT, "'w'", "entry not an object");
    write_json(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4);
    expect_bad(p, H3S_ERR_UNSUPPORTED, "'w'", "five dims");

    /* names */
    write_json(p,
               "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8);
    expect_bad(p, H3S_ERR_FORMAT, "'w'", "duplicate names");

    /* __metadata__ */
    write_json(p,
               "{\"__metadata__\":{\"format\":\"pt\"},"
               "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
               4);
    CHECK_OK(h3s_st_open(p, &f));
    if (f) {
        CHECK(h3s_st_count(f) == 1 && h3s_st_find(f, "__metadata__") == NULL, "metadata skipped");
        h3s_st_close(f);
    }
    write_json(p, "{\"__metadata__\":{\"format\":1}}", 0);
    expect_bad(p, H3S_ERR_FORMAT, "__metadata__", "metadata value not a string");
    write_json(p, "{\"__metadata__\":[\"pt\"]}", 0);
    expect_bad(p, H3S_ERR_FORMAT, "__metadata__", "metadata not an object");
    write_json(p, "{\"__metadata__\":{},\"__metadata__\":{}}", 0);
    expect_bad(p, H3S_ERR_FORMAT, "__metadata__", "metadata twice");

    /* deep nesting must be refused, not recurse without bound */
    char deep[4096 + 16];
    size_t k = 0;
    deep[k++] = '{';
    deep[k++] = '"';
    deep[k++] = 'x';
    deep[k++] = '"';
    deep[k++] = ':';
    for (int i = 0; i < 2000; i++)
        deep[k++] = '[';
    deep[k] = '\0';
    write_json(p, deep, 0);
    expect_bad(p, H3S_ERR_FORMAT, NULL, "deep nesting");

    /* not a file */
    CHECK_FAILS(H3S_ERR_IO, h3s_st_open("/nonexistent-h3s-file.safetensors", &f));
    CHECK(strstr(h3s_last_error(), "/nonexistent-h3s-file.safetensors"), "IO error names the file");
    CHECK_FAILS(H3S_ERR_IO, h3s_st_open(tmpdir, &f));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_st_open(NULL, &f));
    remove(p);
}

/* A tensor whose bytes sit at an offset that is not a multiple of its element size (another writer's layout):
 * the reader hands out an aligned copy with the same bytes. */
static void test_misaligned(void) {
    char p[512];
    path_in(p, sizeof p, "misaligned.safetensors");
    const char *json = "{\"h\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,2]},"
                       "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[2,10]}}";
    size_t jl = strlen(json), pad = (8 - jl % 8) % 8;
    unsigned char buf[256];
    memset(buf, 0, sizeof buf);
    buf[0] = (unsigned char)(jl + pad);
    memcpy(buf + 8, json, jl);
    memset(buf + 8 + jl, ' ', pad);
    unsigned char *data = buf + 8 + jl + pad;
    data[0] = 0x80;
    data[1] = 0x3f; /* bf16 1.0 */
    float xs[2] = {2.5f, -7.25f};
    memcpy(data + 2, xs, 8);
    h3t_write_file(p, buf, 8 + jl + pad + 10);
    h3s_st_file *f = NULL;
    CHECK_OK(h3s_st_open(p, &f));
    if (f) {
        const h3s_st_entry *x = h3s_st_find(f, "x");
        CHECK(x && (uintptr_t)x->tensor.data % 4 == 0, "aligned copy");
        CHECK(x && ((const float *)x->tensor.data)[0] == 2.5f && ((const float *)x->tensor.data)[1] == -7.25f,
              "copied values");
        const h3s_st_entry *h = h3s_st_find(f, "h");
        CHECK(h && h3s_bf16_value(((const uint16_t *)h->tensor.data)[0]) == 1.0f, "bf16 value");
        h3s_st_close(f);
    }
    remove(p);
}

/* __metadata__ on write: first in the header, keys in order, escaped; the file reads back with the same tensors;
 * no metadata gives h3s_st_write's bytes; duplicate keys and invalid UTF-8 are refused and write nothing. */
static void test_metadata_write(void) {
    char path[256], path2[256];
    path_in(path, sizeof path, "meta.safetensors");
    path_in(path2, sizeof path2, "nometa.safetensors");
    float v[3] = {1.0f, -2.0f, 0.5f};
    int64_t shape[1] = {3};
    h3s_st_entry e[1] = {{"x", h3s_tensor_view(v, H3S_F32, 1, shape)}};
    h3s_st_meta m[3] = {{"h3strict_version", "0.1.0"}, {"command", "h3strict forward --out \"a b\""}, {"z", ""}};
    CHECK_OK(h3s_st_write_meta(path, e, 1, m, 3));
    unsigned char *a = NULL, *b = NULL;
    size_t na = h3t_read_file(path, &a);
    const char *want = "{\"__metadata__\":{\"h3strict_version\":\"0.1.0\",\"command\":\"h3strict forward --out "
                       "\\\"a b\\\"\",\"z\":\"\"},\"x\":{";
    CHECK(na > 8 + strlen(want) && memcmp(a + 8, want, strlen(want)) == 0, "metadata first, in order, escaped: %.*s",
          (int)(na > 120 ? 120 : na - 8), (const char *)a + 8);
    h3s_st_file *f = NULL;
    CHECK_OK(h3s_st_open(path, &f));
    if (f) {
        CHECK(h3s_st_count(f) == 1 && h3s_st_find(f, "x") &&
                  h3t_bitwise_equal(&h3s_st_find(f, "x")->tensor, &e[0].tensor),
              "tensor reads back past the metadata");
        h3s_st_close(f);
    }
    CHECK_OK(h3s_st_write_meta(path2, e, 1, NULL, 0));
    size_t nb = h3t_read_file(path2, &b);
    free(a);
    a = NULL;
    CHECK_OK(h3s_st_write(path, e, 1));
    na = h3t_read_file(path, &a);
    CHECK(na == nb && memcmp(a, b, na) == 0, "no metadata: the bytes of h3s_st_write");
    free(a);
    free(b);
    unlink(path);
    unlink(path2);
    h3s_st_meta dup[2] = {{"k", "1"}, {"k", "2"}};
    CHECK_FAILS(H3S_ERR_INVALID, h3s_st_write_meta(path, e, 1, dup, 2));
    h3s_st_meta bad_utf8[1] = {{"k", "\xff"}};
    CHECK_FAILS(H3S_ERR_INVALID, h3s_st_write_meta(path, e, 1, bad_utf8, 1));
    h3s_st_meta null_value[1] = {{"k", NULL}};
    CHECK_FAILS(H3S_ERR_INVALID, h3s_st_write_meta(path, e, 1, null_value, 1));
    CHECK(!file_exists(path), "a refused metadata list wrote a file");
}

/* ---------------------------------------------------------------- permissions ------- */

static unsigned mode_of(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (unsigned)(sb.st_mode & 07777) : 0xFFFFu;
}

/* The mode of the one temporary file ".<base>.tmp-*" in tmpdir, while a writer holds it. */
static unsigned temp_mode_of(const char *base) {
    char prefix[128];
    snprintf(prefix, sizeof prefix, ".%s.tmp-", base);
    unsigned mode = 0xFFFFu;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        mode = mode_of(p);
    }
    if (d) closedir(d);
    return mode;
}

/* Replacing a file keeps its permission bits (a private output stays private, also while the new contents are
 * written); a new file gets 0666 & ~umask.  Every writer: h3s_st_write, the incremental writer, write_file_atomic
 * (config.json, manifests, reports), temp_open/commit. */
static void test_output_mode(void) {
    const mode_t um = umask(022);
    umask(um);
    float v[2] = {1, 2};
    int64_t shape[1] = {2};
    h3s_st_entry e = {"x", h3s_tensor_view(v, H3S_F32, 1, shape)};
    char path[512];
    path_in(path, sizeof path, "mode.safetensors");
    CHECK_OK(h3s_st_write(path, &e, 1));
    CHECK(mode_of(path) == (0666u & ~(unsigned)um), "new file: mode %04o, umask %04o", mode_of(path), (unsigned)um);
    chmod(path, 0600);
    CHECK_OK(h3s_st_write(path, &e, 1));
    CHECK(mode_of(path) == 0600u, "st_write over a 0600 file: %04o", mode_of(path));
    chmod(path, 0751);
    CHECK_OK(h3s_st_write_meta(path, &e, 1, NULL, 0));
    CHECK(mode_of(path) == 0751u, "st_write_meta over a 0751 file: %04o", mode_of(path));
    /* the incremental writer: the temporary file is private from the start; a change while it is written wins */
    chmod(path, 0600);
    h3s_st_writer *w = NULL;
    CHECK_OK(h3s_st_writer_begin(path, &e, 1, &w));
    if (w) {
        CHECK(temp_mode_of("mode.safetensors") == 0600u, "temporary file while written: %04o",
              temp_mode_of("mode.safetensors"));
        chmod(path, 0640);
        CHECK_OK(h3s_st_writer_append(w, v, sizeof v));
        CHECK_OK(h3s_st_writer_commit(w));
    }
    CHECK(mode_of(path) == 0640u, "incremental writer, target chmod'ed while written: %04o", mode_of(path));
    remove(path);

    char text[512];
    path_in(text, sizeof text, "mode.json");
    CHECK_OK(h3s_io_write_file_atomic(text, "{}", 2));
    CHECK(mode_of(text) == (0666u & ~(unsigned)um), "new text file: %04o", mode_of(text));
    chmod(text, 0600);
    CHECK_OK(h3s_io_write_file_atomic(text, "{\"a\": 1}", 8));
    CHECK(mode_of(text) == 0600u, "write_file_atomic over a 0600 file: %04o", mode_of(text));
    chmod(text, 0604);
    int fd = -1;
    char *tmp = NULL;
    CHECK_OK(h3s_io_temp_open(text, &fd, &tmp));
    if (tmp) {
        CHECK(mode_of(tmp) == 0604u, "temp_open over a 0604 file: temporary %04o", mode_of(tmp));
        CHECK(write(fd, "{}", 2) == 2, "write");
        CHECK_OK(h3s_io_temp_commit(fd, tmp, text));
    }
    CHECK(mode_of(text) == 0604u, "temp_commit over a 0604 file: %04o", mode_of(text));
    remove(text);
}

int main(void) {
    h3t_make_temp_dir(tmpdir);
    test_round_trip();
    test_exact_layout();
    test_incremental_writer();
    test_write_errors();
    test_malformed();
    test_misaligned();
    test_metadata_write();
    test_output_mode();
    CHECK(h3t_count_entries(tmpdir) == 0, "test files left behind");
    rmdir(tmpdir);
    return h3t_finish("test_safetensors");
}
