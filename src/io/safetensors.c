#include "io/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "io/json.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "h3strict reads and writes little-endian tensor files in place: a little-endian host is required"
#endif

/* Integers in the header are JSON numbers that cJSON holds as doubles: accept integers up to 2^53, which covers
 * every file that fits on a disk. */
#define MAX_JSON_INT 9007199254740992.0

struct h3s_st_file {
    char *path;
    unsigned char *map;
    size_t map_size;
    int64_t count;
    h3s_st_entry *entries; /* ordered by data offset */
    int64_t *by_name;      /* entry indices sorted by name */
    char *names;           /* every name, NUL-terminated, back to back */
    void **copies;         /* aligned copies of misaligned tensors (NULL where none) */
};

/* ---------------------------------------------------------------- dtypes ------------- */

static int dtype_from_string(const char *s, h3s_dtype *out) {
    static const struct {
        const char *name;
        h3s_dtype dtype;
    } known[] = {{"F64", H3S_F64}, {"F32", H3S_F32}, {"BF16", H3S_BF16},
                 {"F16", H3S_F16}, {"I64", H3S_I64}, {"BOOL", H3S_BOOL}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (strcmp(s, known[i].name) == 0) {
            *out = known[i].dtype;
            return 1;
        }
    }
    return 0;
}

static int dtype_supported(h3s_dtype d) {
    return d == H3S_F64 || d == H3S_F32 || d == H3S_BF16 || d == H3S_F16 || d == H3S_I64 || d == H3S_BOOL;
}

/* numel * elem_size with overflow detection; 0 on success. */
static int checked_nbytes(int ndim, const int64_t *shape, size_t elem, uint64_t *out) {
    uint64_t n = elem;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return 1;
        uint64_t s = (uint64_t)shape[d];
        if (s != 0 && n > UINT64_MAX / s) return 1;
        n *= s;
    }
    *out = n;
    return 0;
}

/* ---------------------------------------------------------------- reader ------------- */

static uint64_t read_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static int json_uint(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item)) return 0;
    double v = item->valuedouble;
    if (!(v >= 0.0) || v > MAX_JSON_INT || v != (double)(uint64_t)v) return 0;
    *out = (uint64_t)v;
    return 1;
}

typedef struct {
    const char *name;
    h3s_dtype dtype;
    int ndim;
    int64_t shape[H3S_MAX_DIMS];
    uint64_t begin, end;
    int64_t header_index;
} parsed_entry;

static int cmp_by_offset(const void *a, const void *b) {
    const parsed_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->header_index < y->header_index ? -1 : (x->header_index > y->header_index);
}

/* qsort has no context argument: name sorting goes through a small array of (name, index) pairs. */
typedef struct {
    const char *name;
    int64_t index;
} name_ref;

static int cmp_name_ref(const void *a, const void *b) {
    const name_ref *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    return x->index < y->index ? -1 : (x->index > y->index);
}

/* Validate one tensor entry of the header. */
static h3s_status parse_entry(const char *path, const cJSON *item, uint64_t data_size, parsed_entry *e) {
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return h3s_fail(H3S_ERR_FORMAT, "%s: tensor '%s': header entry is not a JSON object", path, name);
    static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
    const cJSON *found[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3; k++) {
        int seen = 0;
        for (const cJSON *it = item->child; it; it = it->next) {
            if (it->string && strcmp(it->string, fields[k]) == 0) {
                found[k] = it;
                seen++;
            }
        }
        if (seen == 0)
            return h3s_fail(H3S_ERR_FORMAT, "%s: tensor '%s': header entry lacks \"%s\"", path, name, fields[k]);
        if (seen > 1)
            return h3s_fail(H3S_ERR_FORMAT, "%s: tensor '%s': header entry has \"%s\" %d times", path, name, fields[k],
                            seen);
    }
    const cJSON *dtype = found[0], *shape = found[1], *offsets = found[2];
    if (!cJSON_IsString(dtype) || !dtype->valuestring)
        return h3s_fail(H3S_ERR_FORMAT, "%s: tensor '%s': dtype is not a string", path, name);
    if (!dtype_from_string(dtype->valuestring, &e->dtype))
        return h3s_fail(H3S_ERR_DTYPE, "%s: tensor '%s': dtype %s is not supported (F64, F32, BF16, F16, I64, BOOL)",
                        path, name, dtype->valuestring);
    if (!cJSON_IsArray(shape))
        return h3s_fail(H3S_ERR_FORMAT, "%s: tensor '%s': shape is not a JSON array", path, name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > H3S_MAX_DIMS)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "%s: tensor '%s': %d dims (at most %d supported)", path, name, ndim,
                        H3S_MAX_DIMS);
    e->ndim = ndim;
    int d = 0;
    for (const cJSON *s = shape->child; s; s = s->next, d++) {
        uint64_t v;
        if (!json_uint(s, &v))
            return h3s_fail(H3S_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, d);
        e->shape[d] = (int64_t)v;
    }
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2)
        return h3s_fail(H3S_ERR_FORMAT, "%s: tensor '%s': data_offsets is not an array of two integers", path, name);
    if (!json_uint(offsets->child, &e->begin) || !json_uint(offsets->child->next, &e->end))
        return h3s_fail(H3S_ERR_FORMAT, "%s: tensor '%s': data_offsets are not non-negative integers", path, name);
    if (e->begin > e->end)
        return h3s_fail(H3S_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", path, name,
                        (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > data_size)
        return h3s_fail(H3S_ERR_FORMAT,
                        "%s: tensor '%s': data_offsets [%llu, %llu] run past the data area (%llu bytes)", path, name,
                        (unsigned long long)e->begin, (unsigned long long)e->end, (unsigned long long)data_size);
    uint64_t nbytes;
    if (checked_nbytes(ndim, e->shape, h3s_dtype_size(e->dtype), &nbytes))
        return h3s_fail(H3S_ERR_FORMAT, "%s: tensor '%s': byte size of the shape overflows", path, name);
    if (nbytes != e->end - e->begin)
        return h3s_fail(H3S_ERR_FORMAT, "%s: tensor '%s': %s shape needs %llu bytes but data_offsets span %llu", path,
                        name, h3s_dtype_name(e->dtype), (unsigned long long)nbytes,
                        (unsigned long long)(e->end - e->begin));
    e->name = name;
    return H3S_OK;
}

static h3s_status check_metadata(const char *path, const cJSON *item) {
    if (!cJSON_IsObject(item)) return h3s_fail(H3S_ERR_FORMAT, "%s: __metadata__ is not a JSON object", path);
    for (const cJSON *m = item->child; m; m = m->next) {
        if (!cJSON_IsString(m))
            return h3s_fail(H3S_ERR_FORMAT, "%s: __metadata__ value of '%s' is not a string", path, m->string);
    }
    return H3S_OK;
}

/* Every number of a header is a shape or an offset: digits only, no sign, fraction or exponent (which cJSON's double
 * would take as an integer: 2.0, 8e0, -0, 1e-400) and at most 2^53 (above it the double rounds: 9007199254740993
 * reads as ...992), as the reference reader's unsigned integers.  The text is strict JSON already. */
static h3s_status header_integers(const char *p, size_t n, const char *path) {
    const uint64_t max = (uint64_t)MAX_JSON_INT;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '"') { /* a string: an escape takes the next byte */
            for (i++; i < n && p[i] != '"'; i++)
                if (p[i] == '\\') i++;
            continue;
        }
        if (p[i] != '-' && (p[i] < '0' || p[i] > '9')) continue;
        size_t j = i;
        uint64_t v = 0;
        int plain = 1;
        for (; j < n && (p[j] == '-' || p[j] == '+' || p[j] == '.' || p[j] == 'e' || p[j] == 'E' ||
                         (p[j] >= '0' && p[j] <= '9'));
             j++) {
            const unsigned d = (unsigned)(p[j] - '0');
            if (d > 9 || v > (max - d) / 10)
                plain = 0;
            else
                v = v * 10 + d;
        }
        if (!plain)
            return h3s_fail(H3S_ERR_FORMAT,
                            "%s: header: the number %.*s at byte %zu is not an integer in [0, 2^53] written in digits "
                            "(shapes and offsets are)",
                            path, (int)(j - i), p + i, i);
        i = j - 1;
    }
    return H3S_OK;
}

/* Parse and validate the header; on success fill f->entries / names / by_name. */
static h3s_status parse_header(h3s_st_file *f, const char *hdr, size_t hdr_len, uint64_t data_size) {
    const char *path = f->path;
    if (memchr(hdr, '\0', hdr_len)) return h3s_fail(H3S_ERR_FORMAT, "%s: header contains a NUL byte", path);
    /* strict JSON: one object, nothing after it but the padding, no control bytes, no member named twice */
    char *what = h3s_malloc(strlen(path) + 16, 1);
    if (!what) return H3S_ERR_NOMEM;
    snprintf(what, strlen(path) + 16, "%s: header", path);
    cJSON *root = NULL;
    h3s_status st = h3s_json_parse_strict(hdr, hdr_len, what, &root);
    free(what);
    if (st != H3S_OK) return st;
    parsed_entry *pe = NULL;
    name_ref *refs = NULL;
    if (!cJSON_IsObject(root)) {
        st = h3s_fail(H3S_ERR_FORMAT, "%s: header is not a JSON object", path);
        goto done;
    }
    int64_t n = 0, nmeta = 0;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (it->string && strcmp(it->string, "__metadata__") == 0)
            nmeta++;
        else
            n++;
    }
    if (nmeta > 1) {
        st = h3s_fail(H3S_ERR_FORMAT, "%s: __metadata__ appears %lld times", path, (long long)nmeta);
        goto done;
    }
    pe = h3s_calloc((size_t)(n ? n : 1), sizeof *pe);
    refs = h3s_calloc((size_t)(n ? n : 1), sizeof *refs);
    if (!pe || !refs) {
        st = H3S_ERR_NOMEM;
        goto done;
    }
    int64_t k = 0;
    size_t names_bytes = 0;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (!it->string) {
            st = h3s_fail(H3S_ERR_FORMAT, "%s: header entry without a name", path);
            goto done;
        }
        if (strcmp(it->string, "__metadata__") == 0) {
            st = check_metadata(path, it);
            if (st != H3S_OK) goto done;
            continue;
        }
        st = parse_entry(path, it, data_size, &pe[k]);
        if (st != H3S_OK) goto done;
        pe[k].header_index = k;
        refs[k].name = pe[k].name;
        refs[k].index = k;
        names_bytes += strlen(pe[k].name) + 1;
        k++;
    }
    qsort(refs, (size_t)n, sizeof *refs, cmp_name_ref);
    for (int64_t i = 1; i < n; i++) {
        if (strcmp(refs[i - 1].name, refs[i].name) == 0) {
            st = h3s_fail(H3S_ERR_FORMAT, "%s: tensor name '%s' appears more than once", path, refs[i].name);
            goto done;
        }
    }
    qsort(pe, (size_t)n, sizeof *pe, cmp_by_offset);
    uint64_t expect = 0;
    for (int64_t i = 0; i < n; i++) {
        if (pe[i].begin < expect) {
            st = h3s_fail(H3S_ERR_FORMAT, "%s: tensor '%s' (bytes [%llu, %llu)) overlaps tensor '%s' (ending at %llu)",
                          path, pe[i].name, (unsigned long long)pe[i].begin, (unsigned long long)pe[i].end,
                          pe[i - 1].name, (unsigned long long)expect);
            goto done;
        }
        if (pe[i].begin > expect) {
            st = h3s_fail(H3S_ERR_FORMAT,
                          "%s: bytes [%llu, %llu) of the data area before tensor '%s' belong to no tensor", path,
                          (unsigned long long)expect, (unsigned long long)pe[i].begin, pe[i].name);
            goto done;
        }
        expect = pe[i].end;
    }
    if (expect != data_size) {
        st = h3s_fail(H3S_ERR_FORMAT,
                      "%s: %llu bytes after the last tensor belong to no tensor (truncated header or "
                      "trailing data)",
                      path, (unsigned long long)(data_size - expect));
        goto done;
    }

    /* the numbers' text, after the checks that name a field (a negative offset, a shape too long) */
    st = header_integers(hdr, hdr_len, path);
    if (st != H3S_OK) goto done;
    /* Valid.  Build the entries: names copied out of the JSON tree, data pointing into the mapping. */
    f->count = n;
    f->entries = h3s_calloc((size_t)(n ? n : 1), sizeof *f->entries);
    f->by_name = h3s_calloc((size_t)(n ? n : 1), sizeof *f->by_name);
    f->names = h3s_malloc(names_bytes ? names_bytes : 1, 1);
    f->copies = h3s_calloc((size_t)(n ? n : 1), sizeof *f->copies);
    if (!f->entries || !f->by_name || !f->names || !f->copies) {
        st = H3S_ERR_NOMEM;
        goto done;
    }
    /* by_name holds header indices so far; translate them to offset-order positions. */
    int64_t *pos_of_header = h3s_malloc((size_t)(n ? n : 1), sizeof *pos_of_header);
    if (!pos_of_header) {
        st = H3S_ERR_NOMEM;
        goto done;
    }
    const unsigned char *data = f->map + 8 + hdr_len;
    size_t used = 0;
    for (int64_t i = 0; i < n; i++) {
        h3s_st_entry *e = &f->entries[i];
        size_t nl = strlen(pe[i].name) + 1;
        memcpy(f->names + used, pe[i].name, nl);
        e->name = f->names + used;
        used += nl;
        e->tensor.dtype = pe[i].dtype;
        e->tensor.ndim = pe[i].ndim;
        for (int d = 0; d < pe[i].ndim; d++)
            e->tensor.shape[d] = pe[i].shape[d];
        e->tensor.owns_data = 0;
        e->tensor.device = 0;
        const unsigned char *p = data + pe[i].begin;
        size_t nbytes = (size_t)(pe[i].end - pe[i].begin);
        size_t align = h3s_dtype_size(pe[i].dtype);
        if (nbytes > 0 && ((uintptr_t)p % align) != 0) {
            /* malloc memory is aligned for every scalar type */
            void *copy = h3s_malloc(nbytes, 1);
            if (!copy) {
                free(pos_of_header);
                st = H3S_ERR_NOMEM;
                goto done;
            }
            memcpy(copy, p, nbytes);
            f->copies[i] = copy;
            e->tensor.data = copy;
        } else {
            e->tensor.data = (void *)p;
        }
        pos_of_header[pe[i].header_index] = i;
    }
    for (int64_t i = 0; i < n; i++)
        f->by_name[i] = pos_of_header[refs[i].index];
    free(pos_of_header);

done:
    free(pe);
    free(refs);
    cJSON_Delete(root);
    return st;
}

void h3s_st_close(h3s_st_file *f) {
    if (!f) return;
    if (f->copies) {
        for (int64_t i = 0; i < f->count; i++)
            free(f->copies[i]);
    }
    free(f->copies);
    free(f->entries);
    free(f->by_name);
    free(f->names);
    if (f->map && f->map_size) munmap(f->map, f->map_size);
    free(f->path);
    free(f);
}

h3s_status h3s_st_open(const char *path, h3s_st_file **out) {
    if (!path || !out) return h3s_fail(H3S_ERR_INVALID, "st_open: NULL argument");
    h3s_st_file *f = h3s_calloc(1, sizeof *f);
    if (!f) return H3S_ERR_NOMEM;
    f->path = strdup(path);
    if (!f->path) {
        free(f);
        return h3s_fail(H3S_ERR_NOMEM, "st_open: out of memory");
    }
    h3s_status st = H3S_OK;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below as not a regular file) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        st = h3s_fail(H3S_ERR_IO, "cannot open %s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = h3s_fail(H3S_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
        close(fd);
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = h3s_fail(H3S_ERR_IO, "%s is not a regular file", path);
        close(fd);
        goto fail;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) {
        st = h3s_fail(H3S_ERR_FORMAT, "%s: truncated: %llu bytes, too short for the 8-byte header length", path,
                      (unsigned long long)size);
        close(fd);
        goto fail;
    }
    if (size > (uint64_t)SIZE_MAX) {
        st = h3s_fail(H3S_ERR_IO, "%s: too large to map", path);
        close(fd);
        goto fail;
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        st = h3s_fail(H3S_ERR_IO, "cannot map %s: %s", path, strerror(map_errno));
        goto fail;
    }
    f->map = map;
    f->map_size = (size_t)size;
    uint64_t hdr_len = read_le64(f->map);
    if (hdr_len > H3S_ST_MAX_HEADER) {
        st = h3s_fail(H3S_ERR_FORMAT, "%s: header length %llu exceeds the %llu-byte limit", path,
                      (unsigned long long)hdr_len, (unsigned long long)H3S_ST_MAX_HEADER);
        goto fail;
    }
    if (hdr_len > size - 8) {
        st = h3s_fail(H3S_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%llu bytes)", path,
                      (unsigned long long)hdr_len, (unsigned long long)size);
        goto fail;
    }
    if (hdr_len < 2) {
        st = h3s_fail(H3S_ERR_FORMAT, "%s: header length %llu is too short for a JSON object", path,
                      (unsigned long long)hdr_len);
        goto fail;
    }
    st = parse_header(f, (const char *)f->map + 8, (size_t)hdr_len, size - 8 - hdr_len);
    if (st != H3S_OK) goto fail;
    *out = f;
    return H3S_OK;
fail:
    h3s_st_close(f);
    return st;
}

int64_t h3s_st_count(const h3s_st_file *f) { return f ? f->count : 0; }

const h3s_st_entry *h3s_st_entry_at(const h3s_st_file *f, int64_t i) {
    if (!f || i < 0 || i >= f->count) return NULL;
    return &f->entries[i];
}

const h3s_st_entry *h3s_st_find(const h3s_st_file *f, const char *name) {
    if (!f || !name) return NULL;
    int64_t lo = 0, hi = f->count;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const h3s_st_entry *e = &f->entries[f->by_name[mid]];
        int c = strcmp(e->name, name);
        if (c == 0) return e;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *h3s_st_path(const h3s_st_file *f) { return f ? f->path : NULL; }

uint64_t h3s_st_file_size(const h3s_st_file *f) { return f ? (uint64_t)f->map_size : 0; }

/* ---------------------------------------------------------------- atomic files ------- */

static char *path_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

void h3s_io_sync_parent_dir(const char *path) {
    char *dir = path_dir(path);
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd); /* durability of the rename; some file systems do not support it */
        close(fd);
    }
    free(dir);
}

/* What is at `path` now: 0 when nothing or a regular file (not a link) is there, else an error naming what is. */
static h3s_status check_output_target(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT) return H3S_OK;
        return h3s_fail(H3S_ERR_IO, "cannot inspect output %s: %s", path, strerror(errno));
    }
    if (S_ISLNK(sb.st_mode))
        return h3s_fail(H3S_ERR_INVALID,
                        "output %s is a symbolic link; refusing to replace it (name the file it points to instead)",
                        path);
    if (!S_ISREG(sb.st_mode)) {
        const char *kind = S_ISDIR(sb.st_mode)    ? "a directory"
                           : S_ISFIFO(sb.st_mode) ? "a FIFO"
                           : S_ISCHR(sb.st_mode)  ? "a character device"
                           : S_ISBLK(sb.st_mode)  ? "a block device"
                           : S_ISSOCK(sb.st_mode) ? "a socket"
                                                  : "not a regular file";
        return h3s_fail(H3S_ERR_INVALID, "output %s is %s; only a regular file is ever replaced", path, kind);
    }
    return H3S_OK;
}

/* realpath of the directory holding `path`, then "/" and the last component: where a rename onto `path` lands. */
static h3s_status resolve_output(const char *path, char **out, char **dir_real) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return h3s_fail(H3S_ERR_INVALID, "output %s does not name a file", path);
    char *dir = path_dir(path);
    if (!dir) return h3s_fail(H3S_ERR_NOMEM, "out of memory");
    char *real = realpath(dir, NULL);
    int err = errno;
    free(dir);
    if (!real) return h3s_fail(H3S_ERR_IO, "the directory of output %s: %s", path, strerror(err));
    size_t lr = strlen(real), lb = strlen(base);
    char *full = h3s_malloc(lr + lb + 2, 1);
    if (!full) {
        free(real);
        return H3S_ERR_NOMEM;
    }
    memcpy(full, real, lr);
    size_t k = lr;
    if (k == 0 || full[k - 1] != '/') full[k++] = '/';
    memcpy(full + k, base, lb + 1);
    *out = full;
    *dir_real = real;
    return H3S_OK;
}

/* a == b or a lies below b (both absolute, resolved). */
static int path_within(const char *a, const char *b) {
    size_t lb = strlen(b);
    if (strcmp(b, "/") == 0) return 1;
    return strncmp(a, b, lb) == 0 && (a[lb] == '\0' || a[lb] == '/');
}

/* Whether `cand` is the file the output lands on: the same real path, or, when the output exists, the same inode
 * (a hard link). */
static int lands_on(const char *cand, const char *full, int out_exists, const struct stat *out_sb) {
    char *r = realpath(cand, NULL);
    int same = r && strcmp(r, full) == 0;
    free(r);
    struct stat sb;
    if (!same && out_exists && stat(cand, &sb) == 0) same = sb.st_dev == out_sb->st_dev && sb.st_ino == out_sb->st_ino;
    return same;
}

/* The output against a model directory: neither inside it nor inside its transformer/ subfolder (each resolved, so
 * wherever a link leads), and none of the entries of either (in a Hugging Face cache a snapshot's files are links
 * into blobs/, outside the snapshot). */
static h3s_status check_model_dir(const char *path, const char *full, int out_exists, const struct stat *out_sb,
                                  const char *dir) {
    for (int sub = 0; sub < 2; sub++) {
        size_t ld = strlen(dir);
        char *d = h3s_malloc(ld + sizeof "/transformer", 1);
        if (!d) return H3S_ERR_NOMEM;
        memcpy(d, dir, ld + 1);
        if (sub) memcpy(d + ld, "/transformer", sizeof "/transformer");
        char *d_real = realpath(d, NULL);
        struct stat dsb;
        h3s_status st = H3S_OK;
        if (d_real && stat(d_real, &dsb) == 0 && S_ISDIR(dsb.st_mode)) {
            if (path_within(full, d_real))
                st =
                    h3s_fail(H3S_ERR_INVALID,
                             "output %s lies inside the model directory %s; refusing to write into a model", path, dir);
            DIR *dh = st == H3S_OK ? opendir(d_real) : NULL;
            struct dirent *e;
            while (dh && st == H3S_OK && (e = readdir(dh)) != NULL) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                size_t lr = strlen(d_real), ln = strlen(e->d_name);
                char *f = h3s_malloc(lr + ln + 2, 1);
                if (!f) {
                    st = H3S_ERR_NOMEM;
                    break;
                }
                memcpy(f, d_real, lr);
                f[lr] = '/';
                memcpy(f + lr + 1, e->d_name, ln + 1);
                if (lands_on(f, full, out_exists, out_sb))
                    st = h3s_fail(H3S_ERR_INVALID,
                                  "output %s is the model's file %s%s%s (through a link); refusing to write into a "
                                  "model",
                                  path, dir, sub ? "/transformer/" : "/", e->d_name);
                free(f);
            }
            if (dh) closedir(dh);
        }
        free(d_real);
        free(d);
        if (st != H3S_OK) return st;
    }
    return H3S_OK;
}

h3s_status h3s_io_check_output(const char *path, const char *const *inputs, int ninputs, const char *const *dirs,
                               int ndirs) {
    if (!path || !*path) return h3s_fail(H3S_ERR_INVALID, "output: empty path");
    if (ninputs < 0 || ndirs < 0 || (ninputs > 0 && !inputs) || (ndirs > 0 && !dirs))
        return h3s_fail(H3S_ERR_INVALID, "output %s: %d inputs and %d model directories, from %s and %s arrays", path,
                        ninputs, ndirs, inputs ? "given" : "NULL", dirs ? "given" : "NULL");
    H3S_TRY(check_output_target(path));
    char *full = NULL, *dir_real = NULL;
    H3S_TRY(resolve_output(path, &full, &dir_real));
    struct stat out_sb;
    int out_exists = stat(full, &out_sb) == 0;
    h3s_status st = H3S_OK;
    for (int i = 0; i < ninputs && st == H3S_OK; i++)
        if (inputs[i] && lands_on(inputs[i], full, out_exists, &out_sb))
            st = h3s_fail(H3S_ERR_INVALID, "output %s is the input file %s; refusing to overwrite an input", path,
                          inputs[i]);
    for (int i = 0; i < ndirs && st == H3S_OK; i++)
        if (dirs[i]) st = check_model_dir(path, full, out_exists, &out_sb, dirs[i]);
    free(full);
    free(dir_real);
    return st;
}

h3s_status h3s_io_read_small_file(const char *path, size_t limit, char **out, size_t *len) {
    if (!path || !out || !len) return h3s_fail(H3S_ERR_INVALID, "read_file: NULL argument");
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return h3s_fail(H3S_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return h3s_fail(H3S_ERR_IO, "%s is not a regular file", path);
    }
    if ((uint64_t)sb.st_size > (uint64_t)limit) {
        close(fd);
        return h3s_fail(H3S_ERR_FORMAT, "%s: larger than %zu bytes", path, limit);
    }
    /* sized by the file, not by the limit; grown if the file grows while it is read */
    size_t cap = (size_t)sb.st_size + 1, n = 0;
    char *buf = h3s_malloc(cap + 1, 1);
    if (!buf) {
        close(fd);
        return H3S_ERR_NOMEM;
    }
    while (n < limit + 1) {
        if (n == cap) {
            size_t grown = cap * 2 < limit + 1 ? cap * 2 : limit + 1;
            char *nb = realloc(buf, grown + 1);
            if (!nb) {
                close(fd);
                free(buf);
                return h3s_fail(H3S_ERR_NOMEM, "out of memory reading %s", path);
            }
            buf = nb;
            cap = grown;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            h3s_status st = h3s_fail(H3S_ERR_IO, "cannot read %s: %s", path, strerror(errno));
            close(fd);
            free(buf);
            return st;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (n > limit) {
        free(buf);
        return h3s_fail(H3S_ERR_FORMAT, "%s: larger than %zu bytes", path, limit);
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return H3S_OK;
}

int h3s_io_temp_base_len(const char *base) {
    size_t n = strlen(base);
    if (n <= H3S_IO_TEMP_BASE_MAX) return (int)n;
    n = H3S_IO_TEMP_BASE_MAX;
    while (n > 0 && ((unsigned char)base[n] & 0xC0) == 0x80) /* not inside a UTF-8 sequence */
        n--;
    return (int)n;
}

/* A file replacing `path` keeps its permission bits: when a regular file is there, give the temporary file its
 * st_mode & 07777 (a new file keeps the 0666 & ~umask it was created with).  So a private (0600) output stays
 * private, also while the new contents are written. */
static h3s_status keep_target_mode(int fd, const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return H3S_OK;
    if (fchmod(fd, sb.st_mode & 07777) != 0)
        return h3s_fail(H3S_ERR_IO,
                        "cannot give the temporary file for %s the permissions %04o of the file it replaces: %s", path,
                        (unsigned)(sb.st_mode & 07777), strerror(errno));
    return H3S_OK;
}

h3s_status h3s_io_create_temp(const char *path, int *fd_out, char **tmp_out) {
    static atomic_uint_fast64_t counter;
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
    const char *base = path + dir_len;
    if (!*base) return h3s_fail(H3S_ERR_INVALID, "%s: not a file path", path);
    H3S_TRY(check_output_target(path));
    size_t cap = strlen(path) + 64;
    char *tmp = h3s_malloc(cap, 1);
    if (!tmp) return H3S_ERR_NOMEM;
    for (int attempt = 0; attempt < 1000; attempt++) {
        unsigned long long n = (unsigned long long)atomic_fetch_add(&counter, 1);
        snprintf(tmp, cap, "%.*s.%.*s.tmp-%ld-%llu", (int)dir_len, path, h3s_io_temp_base_len(base), base,
                 (long)getpid(), n);
        int fd = h3s_io_temp_make(tmp, 0);
        if (fd >= 0) {
            h3s_status st = keep_target_mode(fd, path);
            if (st != H3S_OK) {
                h3s_io_temp_discard(fd, tmp);
                return st;
            }
            *fd_out = fd;
            *tmp_out = tmp;
            return H3S_OK;
        }
        if (errno != EEXIST) {
            h3s_status st = h3s_fail(H3S_ERR_IO, "cannot create a temporary file for %s: %s", path,
                                     errno == ECANCELED ? "the process is ending" : strerror(errno));
            free(tmp);
            return st;
        }
    }
    free(tmp);
    return h3s_fail(H3S_ERR_IO, "cannot create a temporary file for %s: every name is taken", path);
}

static h3s_status write_all(int fd, const void *data, size_t len, const char *path) {
    const unsigned char *p = data;
    while (len > 0) {
        size_t chunk = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return h3s_fail(H3S_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        }
        if (w == 0) return h3s_fail(H3S_ERR_IO, "cannot write %s: no progress", path);
        p += w;
        len -= (size_t)w;
    }
    return H3S_OK;
}

/* fsync + close + rename; removes the temporary file on failure.  The permission bits of a file at `path` are
 * copied again first: they may have changed while the file was written. */
static h3s_status finish_temp(int fd, char *tmp, const char *path) {
    h3s_status st = keep_target_mode(fd, path);
    if (st == H3S_OK && fsync(fd) != 0) st = h3s_fail(H3S_ERR_IO, "cannot sync %s: %s", path, strerror(errno));
    if (close(fd) != 0 && st == H3S_OK) st = h3s_fail(H3S_ERR_IO, "cannot close %s: %s", path, strerror(errno));
    /* again just before the rename: something may have been put at the path while the file was written */
    if (st == H3S_OK) st = check_output_target(path);
    if (st == H3S_OK && rename(tmp, path) != 0)
        st = h3s_fail(H3S_ERR_IO, "cannot rename the temporary file to %s: %s", path, strerror(errno));
    if (st != H3S_OK)
        unlink(tmp);
    else
        h3s_io_sync_parent_dir(path);
    h3s_io_temp_forget(tmp);
    free(tmp);
    return st;
}

h3s_status h3s_io_temp_open(const char *path, int *fd, char **tmp) {
    if (!path || !fd || !tmp) return h3s_fail(H3S_ERR_INVALID, "temp_open: NULL argument");
    return h3s_io_create_temp(path, fd, tmp);
}

h3s_status h3s_io_temp_commit(int fd, char *tmp, const char *path) {
    if (!tmp || !path) {
        h3s_io_temp_discard(fd, tmp);
        return h3s_fail(H3S_ERR_INVALID, "temp_commit: NULL argument");
    }
    return finish_temp(fd, tmp, path);
}

void h3s_io_temp_discard(int fd, char *tmp) {
    if (fd >= 0) close(fd);
    if (tmp) {
        unlink(tmp);
        h3s_io_temp_forget(tmp);
    }
    free(tmp);
}

h3s_status h3s_io_write_file_atomic(const char *path, const void *data, size_t len) {
    if (!path || (!data && len)) return h3s_fail(H3S_ERR_INVALID, "write_file: NULL argument");
    int fd;
    char *tmp;
    H3S_TRY(h3s_io_create_temp(path, &fd, &tmp));
    h3s_status st = write_all(fd, data, len, path);
    if (st != H3S_OK) {
        h3s_io_temp_discard(fd, tmp);
        return st;
    }
    return finish_temp(fd, tmp, path);
}

/* ---------------------------------------------------------------- writer ------------- */

static void sb_put(h3s_strbuf *b, const char *s, size_t n) {
    if (!h3s_strbuf_reserve(b, n)) return;
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_str(h3s_strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(h3s_strbuf *b, uint64_t v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    sb_put(b, tmp, (size_t)n);
}

static void sb_json_string(h3s_strbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            sb_put(b, esc, 2);
        } else if (*p < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int valid_utf8(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        int extra;
        unsigned min;
        if (c < 0x80) {
            p++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            extra = 1;
            min = 0x80;
            c &= 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            extra = 2;
            min = 0x800;
            c &= 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            extra = 3;
            min = 0x10000;
            c &= 0x07;
        } else {
            return 0;
        }
        p++;
        for (int i = 0; i < extra; i++, p++) {
            if ((*p & 0xc0) != 0x80) return 0;
            c = (c << 6) | (*p & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
    }
    return 1;
}

static int cmp_cstr_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Validate the entries and build the padded header; *data_bytes = total size of the data area. */
static h3s_status build_header(const char *path, const h3s_st_entry *entries, int64_t count, int need_data,
                               const h3s_st_meta *meta, int64_t nmeta, h3s_strbuf *hdr, uint64_t *data_bytes) {
    if (count < 0) return h3s_fail(H3S_ERR_INVALID, "st_write %s: count %lld is negative", path, (long long)count);
    if (nmeta < 0 || (nmeta > 0 && !meta)) return h3s_fail(H3S_ERR_INVALID, "st_write %s: bad metadata list", path);
    for (int64_t i = 0; i < nmeta; i++) {
        if (!meta[i].key || !meta[i].value || !valid_utf8(meta[i].key) || !valid_utf8(meta[i].value))
            return h3s_fail(H3S_ERR_INVALID, "st_write %s: metadata entry %lld is NULL or not valid UTF-8", path,
                            (long long)i);
        for (int64_t j = 0; j < i; j++)
            if (strcmp(meta[i].key, meta[j].key) == 0)
                return h3s_fail(H3S_ERR_INVALID, "st_write %s: metadata key '%s' appears more than once", path,
                                meta[i].key);
    }
    if (count > 0 && !entries) return h3s_fail(H3S_ERR_INVALID, "st_write %s: NULL entries", path);
    uint64_t offset = 0;
    for (int64_t i = 0; i < count; i++) {
        const h3s_st_entry *e = &entries[i];
        const h3s_tensor *t = &e->tensor;
        if (!e->name) return h3s_fail(H3S_ERR_INVALID, "st_write %s: entry %lld has no name", path, (long long)i);
        if (strcmp(e->name, "__metadata__") == 0)
            return h3s_fail(H3S_ERR_INVALID, "st_write %s: \"__metadata__\" is reserved, not a tensor name", path);
        if (!valid_utf8(e->name))
            return h3s_fail(H3S_ERR_INVALID, "st_write %s: entry %lld: name is not valid UTF-8", path, (long long)i);
        if (!dtype_supported(t->dtype))
            return h3s_fail(H3S_ERR_DTYPE, "st_write %s: tensor '%s' has an unsupported dtype", path, e->name);
        if (t->ndim < 0 || t->ndim > H3S_MAX_DIMS)
            return h3s_fail(H3S_ERR_SHAPE, "st_write %s: tensor '%s' has %d dims", path, e->name, t->ndim);
        uint64_t nbytes;
        if (checked_nbytes(t->ndim, t->shape, h3s_dtype_size(t->dtype), &nbytes) || nbytes > (uint64_t)SIZE_MAX ||
            (double)nbytes > MAX_JSON_INT)
            return h3s_fail(H3S_ERR_SHAPE, "st_write %s: tensor '%s' has a negative or oversized shape", path, e->name);
        if (t->device != 0)
            return h3s_fail(H3S_ERR_DEVICE, "st_write %s: tensor '%s' is on a device; copy it to the host first", path,
                            e->name);
        if (need_data && nbytes > 0 && !t->data)
            return h3s_fail(H3S_ERR_INVALID, "st_write %s: tensor '%s' has no data", path, e->name);
        if (offset + nbytes < offset || (double)(offset + nbytes) > MAX_JSON_INT)
            return h3s_fail(H3S_ERR_SHAPE, "st_write %s: total size overflows", path);
        offset += nbytes;
    }
    if (count > 0) {
        const char **names = h3s_malloc((size_t)count, sizeof *names);
        if (!names) return H3S_ERR_NOMEM;
        for (int64_t i = 0; i < count; i++)
            names[i] = entries[i].name;
        qsort(names, (size_t)count, sizeof *names, cmp_cstr_ptr);
        for (int64_t i = 1; i < count; i++) {
            if (strcmp(names[i - 1], names[i]) == 0) {
                h3s_status st =
                    h3s_fail(H3S_ERR_INVALID, "st_write %s: tensor name '%s' appears more than once", path, names[i]);
                free(names);
                return st;
            }
        }
        free(names);
    }
    /* 8 bytes of length are reserved in front; the JSON follows. */
    sb_put(hdr, "\0\0\0\0\0\0\0\0", 8);
    sb_str(hdr, "{");
    if (nmeta > 0) {
        sb_str(hdr, "\"__metadata__\":{");
        for (int64_t i = 0; i < nmeta; i++) {
            if (i) sb_str(hdr, ",");
            sb_json_string(hdr, meta[i].key);
            sb_str(hdr, ":");
            sb_json_string(hdr, meta[i].value);
        }
        sb_str(hdr, "}");
    }
    offset = 0;
    for (int64_t i = 0; i < count; i++) {
        const h3s_tensor *t = &entries[i].tensor;
        uint64_t nbytes = 0;
        checked_nbytes(t->ndim, t->shape, h3s_dtype_size(t->dtype), &nbytes);
        if (i || nmeta > 0) sb_str(hdr, ",");
        sb_json_string(hdr, entries[i].name);
        sb_str(hdr, ":{\"dtype\":\"");
        sb_str(hdr, h3s_dtype_name(t->dtype));
        sb_str(hdr, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) sb_str(hdr, ",");
            sb_u64(hdr, (uint64_t)t->shape[d]);
        }
        sb_str(hdr, "],\"data_offsets\":[");
        sb_u64(hdr, offset);
        sb_str(hdr, ",");
        sb_u64(hdr, offset + nbytes);
        sb_str(hdr, "]}");
        offset += nbytes;
    }
    sb_str(hdr, "}");
    while (!hdr->oom && (hdr->len - 8) % 8 != 0)
        sb_str(hdr, " ");
    if (hdr->oom) return h3s_fail(H3S_ERR_NOMEM, "st_write %s: out of memory building the header", path);
    uint64_t json_len = hdr->len - 8;
    if (json_len > H3S_ST_MAX_HEADER)
        return h3s_fail(H3S_ERR_INVALID, "st_write %s: header of %llu bytes exceeds the %llu-byte limit", path,
                        (unsigned long long)json_len, (unsigned long long)H3S_ST_MAX_HEADER);
    for (int i = 0; i < 8; i++)
        hdr->s[i] = (char)((json_len >> (8 * i)) & 0xff);
    *data_bytes = offset;
    return H3S_OK;
}

#define WRITER_BUFFER ((size_t)4 << 20)

struct h3s_st_writer {
    char *path, *tmp;
    int fd;
    unsigned char *buf;
    size_t buf_len;
    uint64_t expected, received;
};

static h3s_status writer_flush(h3s_st_writer *w) {
    if (w->buf_len == 0) return H3S_OK;
    H3S_TRY(write_all(w->fd, w->buf, w->buf_len, w->path));
    w->buf_len = 0;
    return H3S_OK;
}

void h3s_st_writer_abort(h3s_st_writer *w) {
    if (!w) return;
    h3s_io_temp_discard(w->fd, w->tmp);
    free(w->path);
    free(w->buf);
    free(w);
}

static h3s_status writer_begin(const char *path, const h3s_st_entry *entries, int64_t count, int need_data,
                               const h3s_st_meta *meta, int64_t nmeta, h3s_st_writer **out) {
    if (!path || !out) return h3s_fail(H3S_ERR_INVALID, "st_write: NULL argument");
    h3s_strbuf hdr = {0};
    uint64_t data_bytes = 0;
    h3s_status st = build_header(path, entries, count, need_data, meta, nmeta, &hdr, &data_bytes);
    if (st != H3S_OK) {
        free(hdr.s);
        return st;
    }
    h3s_st_writer *w = h3s_calloc(1, sizeof *w);
    if (!w) {
        free(hdr.s);
        return H3S_ERR_NOMEM;
    }
    w->fd = -1;
    w->path = strdup(path);
    w->buf = h3s_malloc(WRITER_BUFFER, 1);
    if (!w->path || !w->buf) {
        free(hdr.s);
        h3s_st_writer_abort(w);
        return h3s_fail(H3S_ERR_NOMEM, "st_write %s: out of memory", path);
    }
    w->expected = data_bytes;
    st = h3s_io_create_temp(path, &w->fd, &w->tmp);
    if (st == H3S_OK) st = write_all(w->fd, hdr.s, hdr.len, path);
    free(hdr.s);
    if (st != H3S_OK) {
        h3s_st_writer_abort(w);
        return st;
    }
    *out = w;
    return H3S_OK;
}

h3s_status h3s_st_writer_begin(const char *path, const h3s_st_entry *entries, int64_t count, h3s_st_writer **out) {
    return writer_begin(path, entries, count, 0, NULL, 0, out);
}

h3s_status h3s_st_writer_append(h3s_st_writer *w, const void *data, size_t len) {
    if (!w || (!data && len)) return h3s_fail(H3S_ERR_INVALID, "st_writer_append: NULL argument");
    if (len > w->expected - w->received)
        return h3s_fail(H3S_ERR_INVALID, "st_write %s: %zu more bytes given than the header describes", w->path,
                        (size_t)(len - (w->expected - w->received)));
    const unsigned char *p = data;
    w->received += len;
    while (len > 0) {
        size_t room = WRITER_BUFFER - w->buf_len;
        if (w->buf_len == 0 && len >= WRITER_BUFFER) { /* large piece: skip the copy */
            H3S_TRY(write_all(w->fd, p, len, w->path));
            return H3S_OK;
        }
        size_t n = len < room ? len : room;
        memcpy(w->buf + w->buf_len, p, n);
        w->buf_len += n;
        p += n;
        len -= n;
        if (w->buf_len == WRITER_BUFFER) H3S_TRY(writer_flush(w));
    }
    return H3S_OK;
}

h3s_status h3s_st_writer_commit(h3s_st_writer *w) {
    if (!w) return h3s_fail(H3S_ERR_INVALID, "st_writer_commit: NULL writer");
    h3s_status st = H3S_OK;
    if (w->received != w->expected)
        st = h3s_fail(H3S_ERR_INVALID, "st_write %s: %llu of %llu data bytes were given", w->path,
                      (unsigned long long)w->received, (unsigned long long)w->expected);
    if (st == H3S_OK) st = writer_flush(w);
    if (st != H3S_OK) {
        h3s_st_writer_abort(w);
        return st;
    }
    int fd = w->fd;
    char *tmp = w->tmp;
    w->fd = -1;
    w->tmp = NULL;
    st = finish_temp(fd, tmp, w->path);
    h3s_st_writer_abort(w);
    return st;
}

h3s_status h3s_st_write(const char *path, const h3s_st_entry *entries, int64_t count) {
    return h3s_st_write_meta(path, entries, count, NULL, 0);
}

h3s_status h3s_st_write_meta(const char *path, const h3s_st_entry *entries, int64_t count, const h3s_st_meta *meta,
                             int64_t nmeta) {
    h3s_st_writer *w = NULL;
    H3S_TRY(writer_begin(path, entries, count, 1, meta, nmeta, &w));
    for (int64_t i = 0; i < count; i++) {
        h3s_status st = h3s_st_writer_append(w, entries[i].tensor.data, h3s_tensor_nbytes(&entries[i].tensor));
        if (st != H3S_OK) {
            h3s_st_writer_abort(w);
            return st;
        }
    }
    return h3s_st_writer_commit(w);
}
