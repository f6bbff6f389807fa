#include "io/modeldir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "core/hash.h"
#include "core/rng.h"
#include "io/json.h"
#include "io/safetensors.h"

/* ---------------------------------------------------------------- small helpers ------ */

static char *path_join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    while (la > 1 && a[la - 1] == '/')
        la--;
    char *p = h3s_malloc(la + lb + 2, 1);
    if (!p) return NULL;
    memcpy(p, a, la);
    p[la] = '/';
    memcpy(p + la + 1, b, lb + 1);
    return p;
}

static int is_regular_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int path_exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static void tb_printf(h3s_strbuf *b, const char *fmt, ...) H3S_PRINTF(2, 3);
static void tb_printf(h3s_strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) b->oom = 1;
    if (n < 0 || !h3s_strbuf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

h3s_status h3s_file_sha256_hex(const char *path, char out_hex[65]) {
    if (!path || !out_hex) return h3s_fail(H3S_ERR_INVALID, "file_sha256: NULL argument");
    /* without blocking, and only a regular file: a FIFO put in a file's place must not hang the hash */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return h3s_fail(H3S_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return h3s_fail(H3S_ERR_IO, "%s is not a regular file", path);
    }
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = h3s_malloc(CHUNK, 1);
    h3s_sha256_ctx *ctx = NULL;
    h3s_status st = buf ? h3s_sha256_begin(&ctx) : H3S_ERR_NOMEM;
    while (st == H3S_OK) {
        ssize_t n = read(fd, buf, CHUNK);
        if (n < 0) {
            if (errno == EINTR) continue;
            st = h3s_fail(H3S_ERR_IO, "cannot read %s: %s", path, strerror(errno));
            break;
        }
        if (n == 0) break;
        st = h3s_sha256_update(ctx, buf, (size_t)n);
    }
    close(fd);
    free(buf);
    if (ctx) {
        char hex[65];
        h3s_status end = h3s_sha256_end(ctx, hex); /* frees ctx */
        if (st == H3S_OK) st = end;
        if (st == H3S_OK) memcpy(out_hex, hex, 65);
    }
    return st;
}

/* ---------------------------------------------------------------- weights ------------ */

typedef struct {
    const char *name;
    const h3s_st_entry *entry;
    int64_t file;
} tensor_ref;

struct h3s_weights {
    char *root;      /* the directory the caller named */
    char *model_dir; /* the directory holding config.json */
    int sharded;
    h3s_config config;
    h3s_param_spec *specs;
    int64_t count;
    h3s_tensor *tensors; /* canonical order */
    int64_t *by_name;    /* spec indices sorted by name */
    h3s_st_file **files; /* the weights files (shards in name order) */
    char **file_names;   /* their names relative to model_dir */
    int64_t nfiles;
    int owns_tensors;
};

void h3s_weights_free(h3s_weights *w) {
    if (!w) return;
    if (w->owns_tensors && w->tensors) {
        for (int64_t i = 0; i < w->count; i++)
            h3s_tensor_free(&w->tensors[i]);
    }
    for (int64_t i = 0; i < w->nfiles; i++) {
        if (w->files) h3s_st_close(w->files[i]);
        if (w->file_names) free(w->file_names[i]);
    }
    free(w->files);
    free(w->file_names);
    free(w->tensors);
    free(w->by_name);
    free(w->specs);
    free(w->root);
    free(w->model_dir);
    free(w);
}

const h3s_config *h3s_weights_config(const h3s_weights *w) { return w ? &w->config : NULL; }
int64_t h3s_weights_count(const h3s_weights *w) { return w ? w->count : 0; }
const char *h3s_weights_dir(const h3s_weights *w) { return w ? w->model_dir : NULL; }

const h3s_tensor *h3s_weights_at(const h3s_weights *w, int64_t i, const char **name) {
    if (!w || i < 0 || i >= w->count) return NULL;
    if (name) *name = w->specs[i].name;
    return &w->tensors[i];
}

static int cmp_spec_name(const h3s_param_spec *specs, int64_t a, int64_t b) {
    return strcmp(specs[a].name, specs[b].name);
}

/* Sorting indices by name without a global: a simple merge sort with the spec table passed along. */
static void merge_sort_specs(const h3s_param_spec *specs, int64_t *idx, int64_t *tmp, int64_t n) {
    if (n < 2) return;
    int64_t h = n / 2;
    merge_sort_specs(specs, idx, tmp, h);
    merge_sort_specs(specs, idx + h, tmp, n - h);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = cmp_spec_name(specs, idx[i], idx[j]) <= 0 ? idx[i++] : idx[j++];
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, (size_t)n * sizeof *idx);
}

static h3s_status build_name_index(h3s_weights *w) {
    w->by_name = h3s_malloc((size_t)w->count, sizeof *w->by_name);
    int64_t *tmp = h3s_malloc((size_t)w->count, sizeof *tmp);
    if (!w->by_name || !tmp) {
        free(tmp);
        return H3S_ERR_NOMEM;
    }
    for (int64_t i = 0; i < w->count; i++)
        w->by_name[i] = i;
    merge_sort_specs(w->specs, w->by_name, tmp, w->count);
    free(tmp);
    return H3S_OK;
}

static int64_t find_spec(const h3s_weights *w, const char *name) {
    int64_t lo = 0, hi = w->count;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(w->specs[w->by_name[mid]].name, name);
        if (c == 0) return w->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

const h3s_tensor *h3s_weights_get(const h3s_weights *w, const char *name) {
    if (!w || !name) return NULL;
    int64_t i = find_spec(w, name);
    return i < 0 ? NULL : &w->tensors[i];
}

/* dir itself when it holds config.json, else dir/transformer when that does; *model_dir malloc'd. */
static h3s_status resolve_model_dir(const char *dir, char **model_dir) {
    struct stat sb;
    if (stat(dir, &sb) != 0) return h3s_fail(H3S_ERR_IO, "model directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return h3s_fail(H3S_ERR_IO, "model directory %s is not a directory", dir);
    char *cfg = path_join(dir, H3S_MODEL_CONFIG_FILE);
    if (!cfg) return H3S_ERR_NOMEM;
    int here = is_regular_file(cfg);
    free(cfg);
    if (here) {
        *model_dir = strdup(dir);
        return *model_dir ? H3S_OK : h3s_fail(H3S_ERR_NOMEM, "out of memory");
    }
    char *sub = path_join(dir, "transformer");
    if (!sub) return H3S_ERR_NOMEM;
    char *subcfg = path_join(sub, H3S_MODEL_CONFIG_FILE);
    int there = subcfg && is_regular_file(subcfg);
    free(subcfg);
    if (there) {
        *model_dir = sub;
        return H3S_OK;
    }
    /* something named config.json that is not a regular file (a FIFO, a directory): say so */
    for (int k = 0; k < 2; k++) {
        char *p = path_join(k ? sub : dir, H3S_MODEL_CONFIG_FILE);
        struct stat cs;
        const int odd = p && stat(p, &cs) == 0;
        if (odd) {
            h3s_status st = h3s_fail(H3S_ERR_IO, "model directory %s: %s is not a regular file", dir, p);
            free(p);
            free(sub);
            return st;
        }
        free(p);
    }
    free(sub);
    return h3s_fail(H3S_ERR_IO, "model directory %s: no %s in it nor in its transformer/ subfolder", dir,
                    H3S_MODEL_CONFIG_FILE);
}

/* A shard name from an index: a plain file name inside the model directory. */
static int safe_shard_name(const char *s) {
    return s[0] != '\0' && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int cmp_tensor_ref(const void *a, const void *b) {
    return strcmp(((const tensor_ref *)a)->name, ((const tensor_ref *)b)->name);
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* One weight_map entry: tensor name -> shard file name. */
typedef struct {
    const char *name, *file;
} map_ref;

static int cmp_map_ref(const void *a, const void *b) {
    return strcmp(((const map_ref *)a)->name, ((const map_ref *)b)->name);
}

/* Open the weights files: the single file, or every shard of the index after checking that the index and the
 * shards agree exactly. */
static h3s_status open_weight_files(h3s_weights *w) {
    char *single = path_join(w->model_dir, H3S_MODEL_WEIGHTS_FILE);
    char *index = path_join(w->model_dir, H3S_MODEL_INDEX_FILE);
    h3s_status st = H3S_OK;
    cJSON *root = NULL;
    char *text = NULL;
    if (!single || !index) {
        st = H3S_ERR_NOMEM;
        goto done;
    }
    int have_single = path_exists(single), have_index = path_exists(index);
    if (have_single && have_index) {
        st = h3s_fail(H3S_ERR_FORMAT, "model directory %s holds both %s and %s: remove one", w->model_dir,
                      H3S_MODEL_WEIGHTS_FILE, H3S_MODEL_INDEX_FILE);
        goto done;
    }
    if (!have_single && !have_index) {
        st = h3s_fail(H3S_ERR_IO, "model directory %s holds neither %s nor %s", w->model_dir, H3S_MODEL_WEIGHTS_FILE,
                      H3S_MODEL_INDEX_FILE);
        goto done;
    }
    if (have_single) {
        w->files = h3s_calloc(1, sizeof *w->files);
        w->file_names = h3s_calloc(1, sizeof *w->file_names);
        if (!w->files || !w->file_names) {
            st = H3S_ERR_NOMEM;
            goto done;
        }
        w->file_names[0] = strdup(H3S_MODEL_WEIGHTS_FILE);
        w->nfiles = 1;
        if (!w->file_names[0]) {
            st = h3s_fail(H3S_ERR_NOMEM, "out of memory");
            goto done;
        }
        st = h3s_st_open(single, &w->files[0]);
        goto done;
    }

    w->sharded = 1;
    size_t len;
    st = h3s_io_read_small_file(index, (size_t)H3S_ST_MAX_HEADER, &text, &len);
    if (st != H3S_OK) goto done;
    st = h3s_json_parse_strict(text, len, index, &root);
    if (st != H3S_OK) goto done;
    if (!cJSON_IsObject(root)) {
        st = h3s_fail(H3S_ERR_FORMAT, "%s: not a JSON object", index);
        goto done;
    }
    const cJSON *map = NULL;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (it->string && strcmp(it->string, "weight_map") == 0) {
            if (map) {
                st = h3s_fail(H3S_ERR_FORMAT, "%s: \"weight_map\" appears twice", index);
                goto done;
            }
            map = it;
        }
    }
    if (!map || !cJSON_IsObject(map)) {
        st = h3s_fail(H3S_ERR_FORMAT, "%s: no \"weight_map\" object", index);
        goto done;
    }
    int64_t nmap = 0;
    for (const cJSON *it = map->child; it; it = it->next) {
        if (!cJSON_IsString(it) || !it->valuestring) {
            st = h3s_fail(H3S_ERR_FORMAT, "%s: weight_map entry '%s' is not a file name", index, it->string);
            goto done;
        }
        if (!safe_shard_name(it->valuestring)) {
            st = h3s_fail(H3S_ERR_FORMAT, "%s: weight_map entry '%s' names '%s', not a file in the directory", index,
                          it->string, it->valuestring);
            goto done;
        }
        nmap++;
    }
    /* The distinct shard names, sorted. */
    char **names = h3s_malloc((size_t)(nmap ? nmap : 1), sizeof *names);
    if (!names) {
        st = H3S_ERR_NOMEM;
        goto done;
    }
    int64_t k = 0;
    for (const cJSON *it = map->child; it; it = it->next)
        names[k++] = it->valuestring;
    qsort(names, (size_t)nmap, sizeof *names, cmp_cstr);
    int64_t nfiles = 0;
    for (int64_t i = 0; i < nmap; i++)
        if (i == 0 || strcmp(names[i], names[i - 1]) != 0) names[nfiles++] = names[i];
    w->files = h3s_calloc((size_t)(nfiles ? nfiles : 1), sizeof *w->files);
    w->file_names = h3s_calloc((size_t)(nfiles ? nfiles : 1), sizeof *w->file_names);
    if (!w->files || !w->file_names) {
        free(names);
        st = H3S_ERR_NOMEM;
        goto done;
    }
    for (int64_t i = 0; i < nfiles; i++) {
        w->file_names[i] = strdup(names[i]);
        w->nfiles = i + 1;
        if (!w->file_names[i]) {
            free(names);
            st = h3s_fail(H3S_ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    free(names);
    for (int64_t i = 0; i < nfiles && st == H3S_OK; i++) {
        char *p = path_join(w->model_dir, w->file_names[i]);
        if (!p) {
            st = H3S_ERR_NOMEM;
            break;
        }
        if (!path_exists(p))
            st = h3s_fail(H3S_ERR_IO, "%s: shard %s named by the index is missing", w->model_dir, w->file_names[i]);
        else
            st = h3s_st_open(p, &w->files[i]);
        free(p);
    }
    if (st != H3S_OK) goto done;
    /* Every mapped tensor is in its shard, and every tensor of a shard is mapped to that shard.  Both directions
     * look names up by binary search (map entries sorted by tensor name, shard names sorted), so an index or a shard
     * of many tensors costs O(n log n), not a scan of one list per entry of the other. */
    map_ref *refs = h3s_malloc((size_t)(nmap ? nmap : 1), sizeof *refs);
    if (!refs) {
        st = H3S_ERR_NOMEM;
        goto done;
    }
    k = 0;
    for (const cJSON *it = map->child; it; it = it->next)
        refs[k++] = (map_ref){it->string, it->valuestring};
    for (int64_t i = 0; i < nmap; i++) {
        char *key = (char *)refs[i].file;
        char **hit = bsearch(&key, w->file_names, (size_t)nfiles, sizeof *w->file_names, cmp_cstr);
        if (!hit || !h3s_st_find(w->files[hit - w->file_names], refs[i].name)) {
            st = h3s_fail(H3S_ERR_FORMAT, "%s: the index maps tensor '%s' to shard %s, which does not hold it",
                          w->model_dir, refs[i].name, refs[i].file);
            break;
        }
    }
    /* names are unique: the strict JSON parser refuses an object naming a member twice */
    qsort(refs, (size_t)nmap, sizeof *refs, cmp_map_ref);
    for (int64_t i = 0; i < nfiles && st == H3S_OK; i++) {
        for (int64_t t = 0; t < h3s_st_count(w->files[i]); t++) {
            const char *name = h3s_st_entry_at(w->files[i], t)->name;
            map_ref key = {name, NULL};
            const map_ref *r = nmap ? bsearch(&key, refs, (size_t)nmap, sizeof *refs, cmp_map_ref) : NULL;
            if (!r || strcmp(r->file, w->file_names[i]) != 0) {
                st = r ? h3s_fail(H3S_ERR_FORMAT, "%s: shard %s holds tensor '%s', which the index maps to %s",
                                  w->model_dir, w->file_names[i], name, r->file)
                       : h3s_fail(H3S_ERR_FORMAT, "%s: shard %s holds tensor '%s', which the index does not list",
                                  w->model_dir, w->file_names[i], name);
                break;
            }
        }
    }
    free(refs);
done:
    cJSON_Delete(root);
    free(text);
    free(single);
    free(index);
    return st;
}

static void format_shape(char *buf, size_t size, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (used < size) snprintf(buf + used, size - used, "]");
}

/* Match the opened tensors against the parameter table. */
static h3s_status bind_tensors(h3s_weights *w) {
    int64_t total = 0;
    for (int64_t f = 0; f < w->nfiles; f++)
        total += h3s_st_count(w->files[f]);
    tensor_ref *refs = h3s_malloc((size_t)(total ? total : 1), sizeof *refs);
    if (!refs) return H3S_ERR_NOMEM;
    int64_t k = 0;
    for (int64_t f = 0; f < w->nfiles; f++) {
        for (int64_t t = 0; t < h3s_st_count(w->files[f]); t++) {
            refs[k].entry = h3s_st_entry_at(w->files[f], t);
            refs[k].name = refs[k].entry->name;
            refs[k].file = f;
            k++;
        }
    }
    qsort(refs, (size_t)total, sizeof *refs, cmp_tensor_ref);
    h3s_status st = H3S_OK;
    for (int64_t i = 1; i < total; i++) {
        if (strcmp(refs[i - 1].name, refs[i].name) == 0) {
            st = h3s_fail(H3S_ERR_FORMAT, "%s: tensor '%s' is in both %s and %s", w->model_dir, refs[i].name,
                          w->file_names[refs[i - 1].file], w->file_names[refs[i].file]);
            goto done;
        }
    }
    w->tensors = h3s_calloc((size_t)w->count, sizeof *w->tensors);
    if (!w->tensors) {
        st = H3S_ERR_NOMEM;
        goto done;
    }
    for (int64_t i = 0; i < w->count; i++) {
        const h3s_param_spec *p = &w->specs[i];
        tensor_ref key = {p->name, NULL, 0};
        const tensor_ref *r = total ? bsearch(&key, refs, (size_t)total, sizeof *refs, cmp_tensor_ref) : NULL;
        if (!r) {
            st = h3s_fail(H3S_ERR_FORMAT, "%s: parameter '%s' is missing", w->model_dir, p->name);
            goto done;
        }
        const h3s_tensor *t = &r->entry->tensor;
        if (t->dtype != p->dtype) {
            st = h3s_fail(H3S_ERR_DTYPE, "%s: parameter '%s' has dtype %s, expected %s", w->model_dir, p->name,
                          h3s_dtype_name(t->dtype), h3s_dtype_name(p->dtype));
            goto done;
        }
        int same = t->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++)
            same = t->shape[d] == p->shape[d];
        if (!same) {
            char got[96], want[96];
            format_shape(got, sizeof got, t->ndim, t->shape);
            format_shape(want, sizeof want, p->ndim, p->shape);
            st = h3s_fail(H3S_ERR_SHAPE, "%s: parameter '%s' has shape %s, expected %s", w->model_dir, p->name, got,
                          want);
            goto done;
        }
        w->tensors[i] = *t;
    }
    if (total > w->count) {
        /* Every spec matched a distinct tensor, so some tensor is no parameter: name the first in file order. */
        for (int64_t f = 0; f < w->nfiles && st == H3S_OK; f++) {
            for (int64_t t = 0; t < h3s_st_count(w->files[f]); t++) {
                const char *name = h3s_st_entry_at(w->files[f], t)->name;
                if (find_spec(w, name) < 0) {
                    st = h3s_fail(H3S_ERR_FORMAT,
                                  "%s: tensor '%s' in %s is not a parameter of MiniMaxH3Transformer3DModel with this "
                                  "config (%lld layers, %lld refiner layers)",
                                  w->model_dir, name, w->file_names[f], (long long)w->config.num_layers,
                                  (long long)w->config.num_refiner_layers);
                    break;
                }
            }
        }
        if (st == H3S_OK) st = h3s_fail(H3S_ERR_FORMAT, "%s: more tensors than parameters", w->model_dir);
    }
done:
    free(refs);
    return st;
}

/* Every parameter finite: a NaN or Inf weight makes every output NaN while every status says OK. */
static h3s_status check_finite(const h3s_weights *w) {
    for (int64_t i = 0; i < w->count; i++) {
        int64_t bad = h3s_tensor_first_nonfinite(&w->tensors[i]);
        if (bad >= 0) {
            double v = h3s_tensor_get_f64(&w->tensors[i], bad);
            return h3s_fail(H3S_ERR_FORMAT, "%s: parameter '%s' element %lld is %s", w->model_dir, w->specs[i].name,
                            (long long)bad, v != v ? "NaN" : (v > 0 ? "+Inf" : "-Inf"));
        }
    }
    return H3S_OK;
}

static h3s_status weights_new(const h3s_config *c, h3s_weights **out) {
    h3s_weights *w = h3s_calloc(1, sizeof *w);
    if (!w) return H3S_ERR_NOMEM;
    w->config = *c;
    h3s_status st = h3s_param_specs(c, &w->specs, &w->count);
    if (st == H3S_OK) st = build_name_index(w);
    if (st != H3S_OK) {
        h3s_weights_free(w);
        return st;
    }
    *out = w;
    return H3S_OK;
}

h3s_status h3s_weights_load(const char *dir, h3s_weights **out) {
    if (!dir || !out) return h3s_fail(H3S_ERR_INVALID, "weights_load: NULL argument");
    char *model_dir = NULL;
    H3S_TRY(resolve_model_dir(dir, &model_dir));
    char *cfg_path = path_join(model_dir, H3S_MODEL_CONFIG_FILE);
    if (!cfg_path) {
        free(model_dir);
        return H3S_ERR_NOMEM;
    }
    h3s_config c;
    h3s_status st = h3s_config_load(cfg_path, &c);
    free(cfg_path);
    h3s_weights *w = NULL;
    if (st == H3S_OK) st = weights_new(&c, &w);
    if (st != H3S_OK) {
        free(model_dir);
        return st;
    }
    w->model_dir = model_dir;
    w->root = strdup(dir);
    if (!w->root) st = h3s_fail(H3S_ERR_NOMEM, "out of memory");
    if (st == H3S_OK) st = open_weight_files(w);
    if (st == H3S_OK) st = bind_tensors(w);
    if (st == H3S_OK) st = check_finite(w);
    if (st != H3S_OK) {
        h3s_weights_free(w);
        return st;
    }
    *out = w;
    return H3S_OK;
}

/* ---------------------------------------------------------------- seeded init -------- */

typedef enum { INIT_SCALED, INIT_NORM } init_kind;

static int ends_with(const char *s, const char *suffix) {
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

/* The distribution of one parameter (docs/numerics/io.md):
 *   norm weights (every 1-D .weight)            1 + 0.1 * normal
 *   adaln_proj.linear / norm_out.linear weight  normal * 0.5 / sqrt(in)
 *   adaln_proj.linear / norm_out.linear bias    normal * 0.1
 *   other linear weights                        normal / sqrt(in)
 *   other biases                                normal * 0.02 */
static void init_rule(const h3s_param_spec *p, init_kind *kind, float *scale) {
    int modulation = strstr(p->name, "adaln_proj.linear.") != NULL || strncmp(p->name, "norm_out.linear.", 16) == 0;
    if (ends_with(p->name, ".bias")) {
        *kind = INIT_SCALED;
        *scale = modulation ? 0.1f : 0.02f;
    } else if (p->ndim == 1) {
        *kind = INIT_NORM;
        *scale = 0.1f;
    } else {
        *kind = INIT_SCALED;
        /* sqrt is correctly rounded (IEEE 754): the same scale on every machine */
        *scale = (float)((modulation ? 0.5 : 1.0) / sqrt((double)p->shape[1]));
    }
}

/* Elements [offset, offset + n) of parameter p, in its dtype, into out. */
static void init_values(const h3s_param_spec *p, uint64_t seed, int64_t offset, int64_t n, void *out) {
    init_kind kind;
    float scale;
    init_rule(p, &kind, &scale);
    const uint64_t stream = h3s_rng_stream_id(p->name);
    const h3s_dtype dtype = p->dtype;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float z = h3s_rng_normal(seed, stream, (uint64_t)(offset + i));
        float v = kind == INIT_NORM ? 1.0f + scale * z : z * scale;
        if (dtype == H3S_BF16)
            ((uint16_t *)out)[i] = h3s_bf16_round(v);
        else
            ((float *)out)[i] = v;
    }
}

h3s_status h3s_weights_create(const h3s_config *c, uint64_t seed, h3s_weights **out) {
    if (!c || !out) return h3s_fail(H3S_ERR_INVALID, "weights_create: NULL argument");
    h3s_weights *w;
    H3S_TRY(weights_new(c, &w));
    w->owns_tensors = 1;
    w->tensors = h3s_calloc((size_t)w->count, sizeof *w->tensors);
    if (!w->tensors) {
        h3s_weights_free(w);
        return H3S_ERR_NOMEM;
    }
    for (int64_t i = 0; i < w->count; i++) {
        const h3s_param_spec *p = &w->specs[i];
        h3s_status st = h3s_tensor_alloc(&w->tensors[i], p->dtype, p->ndim, p->shape);
        if (st != H3S_OK) {
            h3s_weights_free(w);
            return st;
        }
        init_values(p, seed, 0, h3s_param_spec_numel(p), w->tensors[i].data);
    }
    *out = w;
    return H3S_OK;
}

/* Stream every parameter into an incremental safetensors writer, a bounded chunk at a time. */
static h3s_status write_init_weights(const char *path, const h3s_param_spec *specs, int64_t count, uint64_t seed,
                                     h3s_init_progress_fn progress, void *progress_ctx) {
    uint64_t total = 0, done = 0;
    for (int64_t i = 0; i < count; i++)
        total += (uint64_t)h3s_param_spec_numel(&specs[i]) * h3s_dtype_size(specs[i].dtype);
    h3s_st_entry *entries = h3s_calloc((size_t)count, sizeof *entries);
    if (!entries) return H3S_ERR_NOMEM;
    for (int64_t i = 0; i < count; i++) {
        entries[i].name = specs[i].name;
        entries[i].tensor.dtype = specs[i].dtype;
        entries[i].tensor.ndim = specs[i].ndim;
        entries[i].tensor.shape[0] = specs[i].shape[0];
        entries[i].tensor.shape[1] = specs[i].shape[1];
    }
    h3s_st_writer *wr = NULL;
    h3s_status st = h3s_st_writer_begin(path, entries, count, &wr);
    free(entries);
    if (st != H3S_OK) return st;
    enum { CHUNK = 1 << 20 }; /* elements per piece: 4 MiB of F32 */
    void *buf = h3s_malloc(CHUNK, sizeof(float));
    if (!buf) {
        h3s_st_writer_abort(wr);
        return H3S_ERR_NOMEM;
    }
    for (int64_t i = 0; i < count && st == H3S_OK; i++) {
        const int64_t n = h3s_param_spec_numel(&specs[i]);
        const size_t esize = h3s_dtype_size(specs[i].dtype);
        for (int64_t off = 0; off < n && st == H3S_OK; off += CHUNK) {
            int64_t m = n - off < CHUNK ? n - off : CHUNK;
            init_values(&specs[i], seed, off, m, buf);
            st = h3s_st_writer_append(wr, buf, (size_t)m * esize);
            done += (uint64_t)m * esize;
            if (progress) progress(progress_ctx, done, total);
        }
    }
    free(buf);
    if (st != H3S_OK) {
        h3s_st_writer_abort(wr);
        return st;
    }
    return h3s_st_writer_commit(wr);
}

/* Remove a private temporary directory and everything directly inside it. */
void h3s_io_remove_tree_flat(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char *p = path_join(dir, e->d_name);
            if (p) unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

typedef enum { OUT_ABSENT, OUT_EMPTY, OUT_MODEL } out_state;

/* What is at out_dir now, and may init write there?  Messages name the directory as `shown`. */
static h3s_status inspect_out_dir(const char *out_dir, const char *shown, out_state *state) {
    struct stat sb;
    if (lstat(out_dir, &sb) != 0) {
        if (errno == ENOENT) {
            *state = OUT_ABSENT;
            return H3S_OK;
        }
        return h3s_fail(H3S_ERR_IO, "init: cannot inspect %s: %s", shown, strerror(errno));
    }
    if (S_ISLNK(sb.st_mode))
        return h3s_fail(H3S_ERR_INVALID, "init: %s is a symbolic link; name the directory it points to", shown);
    if (!S_ISDIR(sb.st_mode)) return h3s_fail(H3S_ERR_INVALID, "init: %s exists and is not a directory", shown);
    DIR *d = opendir(out_dir);
    if (!d) return h3s_fail(H3S_ERR_IO, "init: cannot list %s: %s", shown, strerror(errno));
    int n = 0, have_config = 0;
    h3s_status st = H3S_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        n++;
        int ours = strcmp(e->d_name, H3S_MODEL_CONFIG_FILE) == 0 || strcmp(e->d_name, H3S_MODEL_WEIGHTS_FILE) == 0;
        char *p = path_join(out_dir, e->d_name);
        struct stat fs;
        int regular = p && lstat(p, &fs) == 0 && S_ISREG(fs.st_mode);
        free(p);
        if (!ours || !regular) {
            st = h3s_fail(H3S_ERR_INVALID,
                          "init: %s is not empty and holds '%s', which init did not write; refusing to overwrite it "
                          "(remove it or choose another --out)",
                          shown, e->d_name);
            break;
        }
        if (strcmp(e->d_name, H3S_MODEL_CONFIG_FILE) == 0) have_config = 1;
    }
    closedir(d);
    if (st != H3S_OK) return st;
    if (n == 0) {
        *state = OUT_EMPTY;
        return H3S_OK;
    }
    if (!have_config)
        return h3s_fail(H3S_ERR_INVALID, "init: %s holds weights without a config.json; refusing to overwrite it",
                        shown);
    char *cfg = path_join(out_dir, H3S_MODEL_CONFIG_FILE);
    if (!cfg) return H3S_ERR_NOMEM;
    h3s_config old;
    st = h3s_config_load(cfg, &old);
    free(cfg);
    if (st != H3S_OK)
        return h3s_fail_context(H3S_ERR_INVALID,
                                "init: %s is not a MiniMax-H3 model directory; refusing to overwrite it", shown);
    *state = OUT_MODEL;
    return H3S_OK;
}

/* What init_move_files finds in `out` once the previous model's files are out of it: nothing (0), else 1 with the
 * name of an entry put there meanwhile in name[cap], or -1 when it cannot be listed (errno set). */
static int first_entry(const char *dir, char *name, size_t cap) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int found = 0;
    struct dirent *e;
    errno = 0;
    while (!found && (e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(name, cap, "%s", e->d_name);
            found = 1;
        }
    const int err = found ? 0 : errno; /* readdir's end (0) or its error */
    closedir(d);
    errno = err;
    return err ? -1 : found;
}

static int is_regular(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Init over a model directory on a file system without renameat2(RENAME_EXCHANGE): the previous files are moved
 * out of `out` into `tmp` (config first, so that a reader in between finds no model rather than a new weights file
 * beside the previous config), `out` is inspected again (empty, and what was moved out regular files: else it
 * changed while the new model was written, as the exchange path checks), then the new files go in (config last).
 * Each step is a rename; if one fails or the inspection does, the steps done are undone in reverse and `out` holds
 * the previous model again. If an undo fails too, the error names where each file is and *keep_tmp is set (tmp
 * then holds what the user needs). On success `out` and `tmp` are synced, so that the moves are durable. */
static h3s_status init_move_files(const char *out, const char *tmp, const char *tmp_cfg, const char *tmp_w,
                                  int *keep_tmp) {
    char *dst_cfg = path_join(out, H3S_MODEL_CONFIG_FILE), *dst_w = path_join(out, H3S_MODEL_WEIGHTS_FILE);
    char *old_cfg = path_join(tmp, "previous." H3S_MODEL_CONFIG_FILE);
    char *old_w = path_join(tmp, "previous." H3S_MODEL_WEIGHTS_FILE);
    h3s_status st = H3S_OK;
    if (!dst_cfg || !dst_w || !old_cfg || !old_w) st = H3S_ERR_NOMEM;
    /* from[i] -> to[i]; a previous weights file may be absent (a directory with only a config.json) */
    const char *from[4] = {dst_cfg, dst_w, tmp_w, tmp_cfg}, *to[4] = {old_cfg, old_w, dst_w, dst_cfg};
    int done[4] = {0, 0, 0, 0}, step = 0, failed = 0, had_w = 1;
    char what[3 * PATH_MAX] = ""; /* the failure (two paths and a reason), for the messages below */
    for (; st == H3S_OK && step < 4; step++) {
        if (step == 2) {
            char name[256];
            const int found = first_entry(out, name, sizeof name);
            const char *odd = !is_regular(old_cfg)            ? H3S_MODEL_CONFIG_FILE
                              : done[1] && !is_regular(old_w) ? H3S_MODEL_WEIGHTS_FILE
                                                              : NULL;
            if (found != 0 || odd) {
                if (found < 0)
                    snprintf(what, sizeof what, "cannot list %s: %s", out, strerror(errno));
                else if (found)
                    snprintf(what, sizeof what, "%s changed while the new model was written (it holds '%s')", out,
                             name);
                else
                    snprintf(what, sizeof what,
                             "%s changed while the new model was written (its %s is no longer a "
                             "regular file)",
                             out, odd);
                st = found < 0 ? H3S_ERR_IO : H3S_ERR_INVALID;
                failed = step;
                break;
            }
        }
        if (rename(from[step], to[step]) == 0)
            done[step] = 1;
        else if (step == 1 && errno == ENOENT)
            had_w = 0;
        else {
            snprintf(what, sizeof what, "%s -> %s: %s", from[step], to[step], strerror(errno));
            st = H3S_ERR_IO;
            failed = step;
            break;
        }
    }
    if (st == H3S_ERR_NOMEM) goto out;
    if (st == H3S_OK) {
        h3s_io_sync_parent_dir(dst_cfg); /* out itself */
        h3s_io_sync_parent_dir(old_cfg); /* tmp */
        goto out;
    }
    int undo_err = 0; /* the steps before `failed` (the one that failed, or that the inspection came before) */
    for (int i = failed - 1; i >= 0 && !undo_err; i--) {
        if (!done[i]) continue;
        /* never over something put at the file's place in out meanwhile (a rename would replace it) */
        struct stat sb;
        if (lstat(from[i], &sb) == 0)
            undo_err = EEXIST;
        else if (rename(to[i], from[i]) == 0)
            done[i] = 0;
        else
            undo_err = errno;
    }
    if (!undo_err) {
        if (st == H3S_ERR_INVALID)
            st = h3s_fail(st, "init: %s; it is left as it is now and the new model is not installed", what);
        else
            st = h3s_fail(st, "init: cannot install the new model in %s (%s); %s is left as it was", out, what, out);
    } else {
        /* where each file is now: step 3 (the new config) is never done here, as it is the last; a failed undo is an
         * I/O failure whatever came before it, as on the exchange path */
        st = h3s_fail(H3S_ERR_IO,
                      "init: cannot install the new model in %s (%s) nor move the previous model's files back (%s): "
                      "the previous model is %s and %s, the new one %s and %s",
                      out, what, strerror(undo_err), done[0] ? old_cfg : dst_cfg,
                      done[1] ? old_w
                      : had_w ? dst_w
                              : "(no weights file)",
                      done[2] ? dst_w : tmp_w, tmp_cfg);
        *keep_tmp = 1;
    }
out:
    free(dst_cfg);
    free(dst_w);
    free(old_cfg);
    free(old_w);
    return st;
}

/* chmod `path` to `mode`, an error naming `what` when it cannot be. */
static h3s_status init_chmod(const char *path, mode_t mode, const char *what) {
    if (chmod(path, mode) != 0)
        return h3s_fail(H3S_ERR_IO, "init: cannot give %s the permissions %04o: %s", what, (unsigned)mode,
                        strerror(errno));
    return H3S_OK;
}

/* Before the new model replaces `out`: the new directory takes the permission bits of the directory it replaces
 * (`fresh`, those of a new directory, when there is none), and, over a model, each new file those of the file it
 * replaces.  Read now, just before the rename, not when `out` was first inspected. */
static h3s_status init_copy_modes(const char *out, const char *tmp, mode_t fresh, const char *tmp_cfg,
                                  const char *tmp_w, int over_model) {
    if (over_model) {
        const char *names[2] = {H3S_MODEL_CONFIG_FILE, H3S_MODEL_WEIGHTS_FILE};
        const char *news[2] = {tmp_cfg, tmp_w};
        for (int k = 0; k < 2; k++) {
            char *old = path_join(out, names[k]);
            if (!old) return H3S_ERR_NOMEM;
            struct stat sb;
            h3s_status st = lstat(old, &sb) == 0 && S_ISREG(sb.st_mode)
                                ? init_chmod(news[k], sb.st_mode & 07777, names[k])
                                : H3S_OK;
            free(old);
            H3S_TRY(st);
        }
    }
    struct stat sb;
    mode_t mode = lstat(out, &sb) == 0 && S_ISDIR(sb.st_mode) ? sb.st_mode & 07777 : fresh;
    return init_chmod(tmp, mode, "the new model directory");
}

h3s_status h3s_model_init_config(const h3s_config *c, uint64_t seed, const char *out_dir) {
    return h3s_model_init_config_progress(c, seed, out_dir, NULL, NULL);
}

h3s_status h3s_model_init_config_progress(const h3s_config *c, uint64_t seed, const char *out_dir,
                                          h3s_init_progress_fn progress, void *progress_ctx) {
    if (!c || !out_dir || !*out_dir) return h3s_fail(H3S_ERR_INVALID, "init: NULL config or output directory");
    h3s_param_spec *specs = NULL;
    int64_t count = 0;
    H3S_TRY(h3s_param_specs(c, &specs, &count));
    char *json = NULL;
    h3s_status st = h3s_config_to_json(c, &json);
    if (st != H3S_OK) {
        free(specs);
        return st;
    }
    /* Normalise: no trailing slashes, so that the temporary directory is a sibling. */
    char *out = strdup(out_dir);
    char *tmp = NULL;
    int keep_tmp = 0; /* the previous directory could not be swapped back: it stays at tmp */
    if (!out) {
        st = h3s_fail(H3S_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t l = strlen(out); l > 1 && out[l - 1] == '/'; l--)
        out[l - 1] = '\0';
    /* ".", "..", "dir/." and "dir/..": no rename can take such a name (EBUSY), and the temporary directory must be
     * a sibling of the directory itself: name it by its real path */
    const char *last = strrchr(out, '/');
    last = last ? last + 1 : out;
    if (strcmp(last, ".") == 0 || strcmp(last, "..") == 0) {
        char *real = realpath(out, NULL);
        if (!real) {
            st = h3s_fail(H3S_ERR_IO, "init: cannot resolve %s: %s", out, strerror(errno));
            goto done;
        }
        free(out);
        out = real;
    }
    out_state state;
    st = inspect_out_dir(out, out, &state);
    if (st != H3S_OK) goto done;

    static atomic_uint_fast64_t counter;
    const char *slash = strrchr(out, '/');
    size_t dir_len = slash ? (size_t)(slash - out) + 1 : 0;
    size_t cap = strlen(out) + 64;
    tmp = h3s_malloc(cap, 1);
    if (!tmp) {
        st = H3S_ERR_NOMEM;
        goto done;
    }
    int made = 0;
    for (int attempt = 0; attempt < 1000 && !made; attempt++) {
        snprintf(tmp, cap, "%.*s.%.*s.init-%ld-%llu", (int)dir_len, out, h3s_io_temp_base_len(out + dir_len),
                 out + dir_len, (long)getpid(), (unsigned long long)atomic_fetch_add(&counter, 1));
        if (h3s_io_temp_make(tmp, 1) == 0) /* removed by h3s_io_remove_temporaries if a signal ends the process */
            made = 1;
        else if (errno != EEXIST) {
            st = h3s_fail(H3S_ERR_IO, "init: cannot create a temporary directory next to %s: %s", out,
                          errno == ECANCELED ? "the process is ending" : strerror(errno));
            free(tmp);
            tmp = NULL;
            goto done;
        }
    }
    if (!made) {
        st = h3s_fail(H3S_ERR_IO, "init: cannot create a temporary directory next to %s", out);
        free(tmp);
        tmp = NULL;
        goto done;
    }
    /* The mode a new directory gets here (0777 & ~umask), then private (0700) while the model is written. */
    struct stat tmp_sb;
    if (stat(tmp, &tmp_sb) != 0 || chmod(tmp, S_IRWXU) != 0) {
        st = h3s_fail(H3S_ERR_IO, "init: cannot set the permissions of the temporary directory %s: %s", tmp,
                      strerror(errno));
        goto done;
    }
    char *tmp_cfg = path_join(tmp, H3S_MODEL_CONFIG_FILE);
    char *tmp_w = path_join(tmp, H3S_MODEL_WEIGHTS_FILE);
    if (!tmp_cfg || !tmp_w) st = H3S_ERR_NOMEM;
    if (st == H3S_OK) st = write_init_weights(tmp_w, specs, count, seed, progress, progress_ctx);
    if (st == H3S_OK) st = h3s_io_write_file_atomic(tmp_cfg, json, strlen(json));
    if (st == H3S_OK) st = init_copy_modes(out, tmp, tmp_sb.st_mode & 07777, tmp_cfg, tmp_w, state == OUT_MODEL);
    /* The publication, under the temporaries' lock: a removal of the temporaries (a signal ending the process) runs
     * wholly before it, which then does not happen, or wholly after it, when tmp is the model itself (forgotten) or
     * holds what is to be discarded (remembered again). */
    int locked = 0;
    if (st == H3S_OK) {
        h3s_io_temp_lock();
        locked = 1;
        if (h3s_io_temp_ended_locked())
            st = h3s_fail(H3S_ERR_IO, "init: %s: the process is ending; the new model is not installed", out);
        else
            h3s_io_temp_forget_locked(tmp);
    }
    if (st == H3S_OK) {
        if (state != OUT_MODEL) {
            /* rename onto an absent name or an empty directory is atomic */
            if (rename(tmp, out) != 0)
                st = h3s_fail(H3S_ERR_IO, "init: cannot move the new model to %s: %s", out, strerror(errno));
        } else if (renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_EXCHANGE) == 0) {
            /* tmp now holds the previous model, to discard: unless something was put into it while the new model was
             * written (it was inspected before), in which case it is swapped back, as the user left it */
            out_state again;
            if (inspect_out_dir(tmp, out, &again) != H3S_OK) {
                if (renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_EXCHANGE) == 0) {
                    st = h3s_fail_context(H3S_ERR_INVALID,
                                          "init: %s changed while the new model was written; it is left as it is now "
                                          "and the new model is not installed",
                                          out);
                } else {
                    st = h3s_fail(H3S_ERR_IO,
                                  "init: %s changed while the new model was written and cannot be swapped back (%s): "
                                  "the new model is in %s, the directory as it was left in %s",
                                  out, strerror(errno), out, tmp);
                    keep_tmp = 1;
                }
            }
        } else if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
            st = init_move_files(out, tmp, tmp_cfg, tmp_w, &keep_tmp);
        } else {
            st = h3s_fail(H3S_ERR_IO, "init: cannot swap the new model into %s: %s", out, strerror(errno));
        }
    }
    if (locked) {
        /* tmp holds what is to be discarded (the previous model after the exchange, the new one or what is left of it
         * after a failure, the previous files after the move file by file), unless it is the model now or holds the
         * user's directory that could not be swapped back */
        if (st == H3S_OK ? state == OUT_MODEL : !keep_tmp) h3s_io_temp_remember_locked(tmp, 1);
        h3s_io_temp_unlock();
    }
    free(tmp_cfg);
    free(tmp_w);
    if (st == H3S_OK && state != OUT_MODEL) {
        free(tmp);
        tmp = NULL;
    }
    if (st == H3S_OK) h3s_io_sync_parent_dir(out);
done:
    if (tmp) {
        if (!keep_tmp) h3s_io_remove_tree_flat(tmp);
        h3s_io_temp_forget(tmp); /* after the removal: a signal meanwhile removes what is left of it */
        free(tmp);
    }
    free(out);
    free(json);
    free(specs);
    return st;
}

h3s_status h3s_model_init(const char *preset, int64_t layers, uint64_t seed, const char *out_dir) {
    h3s_config c;
    H3S_TRY(h3s_config_preset(preset, layers, &c));
    return h3s_model_init_config(&c, seed, out_dir);
}

/* ---------------------------------------------------------------- verify ------------- */

/* A manifest key: a relative path with no "." or ".." component. */
static int safe_relative_path(const char *s) {
    if (!*s || s[0] == '/') return 0;
    const char *p = s;
    while (*p) {
        const char *q = strchr(p, '/');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) return 0;
        p += n;
        if (*p == '/') p++;
    }
    return 1;
}

static int is_sha256_hex(const char *s) {
    if (strlen(s) != 64) return 0;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') || (s[i] >= 'A' && s[i] <= 'F'))) return 0;
    return 1;
}

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

typedef struct {
    const char *key;
    const char *want;
    char *path;
    struct stat sb;
} manifest_item;

/* Read and check a manifest on its own (strict JSON, an object of relative paths to SHA-256 digests), before any
 * model file is opened: a malformed manifest is refused without the cost of loading the model. */
static h3s_status manifest_read(const char *manifest_path, cJSON **out) {
    char *text = NULL;
    size_t len;
    H3S_TRY(h3s_io_read_small_file(manifest_path, (size_t)H3S_ST_MAX_HEADER, &text, &len));
    cJSON *root = NULL;
    h3s_status st = h3s_json_parse_strict(text, len, manifest_path, &root);
    free(text);
    if (st != H3S_OK) return h3s_fail_context(st, "manifest");
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return h3s_fail(H3S_ERR_FORMAT, "manifest %s: not a JSON object {file: sha256}", manifest_path);
    }
    for (const cJSON *it = root->child; it && st == H3S_OK; it = it->next) {
        if (!cJSON_IsString(it) || !is_sha256_hex(it->valuestring))
            st = h3s_fail(H3S_ERR_FORMAT, "manifest %s: the value for '%s' is not a 64-digit SHA-256", manifest_path,
                          it->string);
        else if (!safe_relative_path(it->string))
            st = h3s_fail(H3S_ERR_FORMAT, "manifest %s: '%s' is not a relative path inside the model", manifest_path,
                          it->string);
    }
    if (st != H3S_OK) {
        cJSON_Delete(root);
        return st;
    }
    *out = root;
    return H3S_OK;
}

/* The manifest's files against the model (root from manifest_read, deleted here). */
static h3s_status verify_manifest(const h3s_weights *w, const char *manifest_path, cJSON *root, h3s_strbuf *rep) {
    h3s_status st = H3S_OK;
    int n = cJSON_GetArraySize(root);
    manifest_item *items = h3s_calloc((size_t)(n ? n : 1), sizeof *items);
    if (!items) {
        cJSON_Delete(root);
        return H3S_ERR_NOMEM;
    }
    int k = 0;
    for (const cJSON *it = root->child; it; it = it->next, k++) {
        manifest_item *m = &items[k];
        m->key = it->string; /* checked by manifest_read; strict JSON names every key once */
        m->want = it->valuestring;
        /* relative to the directory holding config.json, else to the directory the caller named */
        m->path = path_join(w->model_dir, m->key);
        if (!m->path) {
            st = H3S_ERR_NOMEM;
            goto done;
        }
        if (stat(m->path, &m->sb) != 0 && strcmp(w->model_dir, w->root) != 0) {
            free(m->path);
            m->path = path_join(w->root, m->key);
            if (!m->path) {
                st = H3S_ERR_NOMEM;
                goto done;
            }
        }
        if (stat(m->path, &m->sb) != 0) {
            st = h3s_fail(H3S_ERR_MISMATCH, "manifest %s lists %s, which is missing from %s", manifest_path, m->key,
                          w->root);
            goto done;
        }
        if (!S_ISREG(m->sb.st_mode)) {
            st = h3s_fail(H3S_ERR_MISMATCH, "manifest %s lists %s, which is not a regular file in %s", manifest_path,
                          m->key, w->root);
            goto done;
        }
    }
    /* every file the model is read from is listed: config.json, the shard index when sharded, every weights file
     * (what h3s_model_manifest_write writes) */
    for (int64_t f = -2; f < w->nfiles; f++) {
        if (f == -1 && !w->sharded) continue;
        const char *name = f == -2 ? H3S_MODEL_CONFIG_FILE : f == -1 ? H3S_MODEL_INDEX_FILE : w->file_names[f];
        char *p = path_join(w->model_dir, name);
        struct stat sb;
        int listed = 0;
        if (p && stat(p, &sb) == 0) {
            for (int j = 0; j < n; j++)
                if (same_file(&items[j].sb, &sb)) listed = 1;
        }
        free(p);
        if (!listed) {
            st = h3s_fail(H3S_ERR_MISMATCH, "%s: %s %s is not listed in the manifest %s", w->model_dir,
                          f >= 0 ? "weights file" : "model file", name, manifest_path);
            goto done;
        }
    }
    tb_printf(rep, "manifest %s: %d file(s)\n", manifest_path, n);
    for (int j = 0; j < n; j++) {
        char got[65];
        st = h3s_file_sha256_hex(items[j].path, got);
        if (st != H3S_OK) goto done;
        if (strcasecmp(got, items[j].want) != 0) {
            st = h3s_fail(H3S_ERR_MISMATCH, "%s: SHA-256 %s differs from the manifest's %s", items[j].key, got,
                          items[j].want);
            goto done;
        }
        tb_printf(rep, "  %s  %s  ok\n", got, items[j].key);
    }
done:
    for (int j = 0; j < n; j++)
        free(items[j].path);
    free(items);
    cJSON_Delete(root);
    return st;
}

h3s_status h3s_model_verify(const char *dir, const char *manifest_path, char **report) {
    if (!dir) return h3s_fail(H3S_ERR_INVALID, "verify: NULL model directory");
    cJSON *manifest = NULL;
    if (manifest_path) H3S_TRY(manifest_read(manifest_path, &manifest));
    h3s_weights *w;
    h3s_status lst = h3s_weights_load(dir, &w);
    if (lst != H3S_OK) {
        cJSON_Delete(manifest);
        return lst;
    }
    h3s_strbuf rep = {0};
    const h3s_config *c = &w->config;
    int64_t elements = 0;
    for (int64_t i = 0; i < w->count; i++)
        elements += h3s_param_spec_numel(&w->specs[i]);
    tb_printf(&rep,
              "model %s: MiniMaxH3Transformer3DModel, %lld layers, %lld refiner layers, hidden %lld, heads %lld x "
              "%lld\n",
              w->model_dir, (long long)c->num_layers, (long long)c->num_refiner_layers, (long long)c->hidden_size,
              (long long)c->num_attention_heads, (long long)c->attention_head_dim);
    tb_printf(&rep, "  %lld parameters (%lld elements), every name, shape and dtype as expected, in %lld file(s)%s\n",
              (long long)w->count, (long long)elements, (long long)w->nfiles, w->sharded ? " (sharded)" : "");
    for (int64_t f = 0; f < w->nfiles; f++)
        tb_printf(&rep, "    %s: %lld tensors, %llu bytes, header valid\n", w->file_names[f],
                  (long long)h3s_st_count(w->files[f]), (unsigned long long)h3s_st_file_size(w->files[f]));
    h3s_status st = H3S_OK;
    if (manifest) st = verify_manifest(w, manifest_path, manifest, &rep);
    if (st == H3S_OK) tb_printf(&rep, "verify: OK\n");
    if (st == H3S_OK && rep.oom) st = h3s_fail(H3S_ERR_NOMEM, "verify: out of memory writing the report");
    h3s_weights_free(w);
    if (st != H3S_OK) {
        free(rep.s);
        return st;
    }
    if (report)
        *report = rep.s;
    else
        free(rep.s);
    return H3S_OK;
}

static int needs_json_escape(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == '"' || *p == '\\') return 1;
    return 0;
}

h3s_status h3s_model_manifest_write(const char *dir, const char *manifest_path) {
    if (!dir || !manifest_path) return h3s_fail(H3S_ERR_INVALID, "manifest_write: NULL argument");
    const char *model_dirs[1] = {dir};
    H3S_TRY(h3s_io_check_output(manifest_path, NULL, 0, model_dirs, 1));
    h3s_weights *w;
    H3S_TRY(h3s_weights_load(dir, &w));
    /* config.json, the index when sharded, then every weights file; sorted by name */
    int64_t n = w->nfiles + 1 + (w->sharded ? 1 : 0);
    const char **names = h3s_malloc((size_t)n, sizeof *names);
    if (!names) {
        h3s_weights_free(w);
        return H3S_ERR_NOMEM;
    }
    int64_t k = 0;
    names[k++] = H3S_MODEL_CONFIG_FILE;
    if (w->sharded) names[k++] = H3S_MODEL_INDEX_FILE;
    for (int64_t f = 0; f < w->nfiles; f++)
        names[k++] = w->file_names[f];
    qsort(names, (size_t)n, sizeof *names, cmp_cstr);
    h3s_strbuf out = {0};
    h3s_status st = H3S_OK;
    tb_printf(&out, "{\n");
    for (int64_t i = 0; i < n && st == H3S_OK; i++) {
        char *p = path_join(w->model_dir, names[i]);
        char hex[65];
        st = p ? h3s_file_sha256_hex(p, hex) : H3S_ERR_NOMEM;
        free(p);
        if (st == H3S_OK && needs_json_escape(names[i]))
            st = h3s_fail(H3S_ERR_INVALID, "manifest_write: file name %s needs escaping", names[i]);
        if (st == H3S_OK) tb_printf(&out, "  \"%s\": \"%s\"%s\n", names[i], hex, i + 1 < n ? "," : "");
    }
    tb_printf(&out, "}\n");
    if (st == H3S_OK && out.oom) st = h3s_fail(H3S_ERR_NOMEM, "manifest_write: out of memory");
    if (st == H3S_OK) st = h3s_io_write_file_atomic(manifest_path, out.s, out.len);
    free(out.s);
    free(names);
    h3s_weights_free(w);
    return st;
}
