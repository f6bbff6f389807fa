#include "model/config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "io/json.h"
#include "io/safetensors.h"

/* Largest accepted width or count: keeps every parameter's element count (at most 18*H*time_embed_dim) and every
 * derived width far inside int64 and inside what a float index or a safetensors header can describe. */
#define H3S_CONFIG_MAX_DIM ((int64_t)1 << 24)
#define H3S_CONFIG_MAX_LAYERS ((int64_t)1 << 16)

typedef enum { KEY_INT, KEY_DOUBLE, KEY_PATCH } key_kind;

typedef struct {
    const char *name;
    key_kind kind;
} config_key;

/* Sorted by name: the order diffusers writes config.json in (json.dumps(sort_keys=True)). */
static const config_key config_keys[] = {
    {"attention_head_dim", KEY_INT}, {"audio_in_channels", KEY_INT},  {"ffn_dim", KEY_INT},
    {"final_norm_eps", KEY_DOUBLE},  {"freq_dim", KEY_INT},           {"hidden_size", KEY_INT},
    {"in_channels", KEY_INT},        {"norm_eps", KEY_DOUBLE},        {"num_attention_heads", KEY_INT},
    {"num_layers", KEY_INT},         {"num_refiner_layers", KEY_INT}, {"patch_size", KEY_PATCH},
    {"qk_norm_eps", KEY_DOUBLE},     {"rope_freq_dim", KEY_INT},      {"rope_theta", KEY_DOUBLE},
    {"text_dim", KEY_INT},           {"time_embed_dim", KEY_INT},     {"time_embed_hidden_dim", KEY_INT},
};
#define N_CONFIG_KEYS ((int)(sizeof config_keys / sizeof config_keys[0]))

_Static_assert(N_CONFIG_KEYS == 18, "config_keys and bind_fields must list the same 18 keys");

/* The field of `c` behind each entry of config_keys (same order). */
static void bind_fields(h3s_config *c, void *fields[N_CONFIG_KEYS]) {
    void *f[N_CONFIG_KEYS] = {&c->attention_head_dim, &c->audio_in_channels,  &c->ffn_dim,
                              &c->final_norm_eps,     &c->freq_dim,           &c->hidden_size,
                              &c->in_channels,        &c->norm_eps,           &c->num_attention_heads,
                              &c->num_layers,         &c->num_refiner_layers, c->patch_size,
                              &c->qk_norm_eps,        &c->rope_freq_dim,      &c->rope_theta,
                              &c->text_dim,           &c->time_embed_dim,     &c->time_embed_hidden_dim};
    memcpy(fields, f, sizeof f);
}

int64_t h3s_config_video_width(const h3s_config *c) {
    if (!c) return 0;
    return c->in_channels * c->patch_size[0] * c->patch_size[1] * c->patch_size[2];
}

static h3s_status check_dim(const char *key, int64_t v, int64_t min, int64_t max) {
    if (v < min || v > max)
        return h3s_fail(H3S_ERR_INVALID, "config: %s = %lld is outside [%lld, %lld]", key, (long long)v, (long long)min,
                        (long long)max);
    return H3S_OK;
}

/* The norms add eps in FP32 ((float)eps): it must be finite and > 0 there too, not only as a double (1e-300
 * rounds to 0, 1e300 to +inf). */
static h3s_status check_eps(const char *key, double v) {
    if (!(v > 0.0) || !isfinite(v) || !((float)v > 0.0f) || !isfinite((float)v))
        return h3s_fail(H3S_ERR_INVALID, "config: %s = %g must be finite and > 0, also after rounding to f32", key, v);
    return H3S_OK;
}

h3s_status h3s_config_validate(const h3s_config *c) {
    if (!c) return h3s_fail(H3S_ERR_INVALID, "config: NULL config");
    const int64_t M = H3S_CONFIG_MAX_DIM;
    H3S_TRY(check_dim("num_attention_heads", c->num_attention_heads, 1, M));
    H3S_TRY(check_dim("attention_head_dim", c->attention_head_dim, 2, M));
    H3S_TRY(check_dim("hidden_size", c->hidden_size, 1, M));
    H3S_TRY(check_dim("num_layers", c->num_layers, 1, H3S_CONFIG_MAX_LAYERS));
    H3S_TRY(check_dim("num_refiner_layers", c->num_refiner_layers, 0, H3S_CONFIG_MAX_LAYERS));
    H3S_TRY(check_dim("ffn_dim", c->ffn_dim, 1, M));
    H3S_TRY(check_dim("in_channels", c->in_channels, 1, M));
    H3S_TRY(check_dim("audio_in_channels", c->audio_in_channels, 1, M));
    for (int d = 0; d < 3; d++) {
        if (c->patch_size[d] < 1 || c->patch_size[d] > M)
            return h3s_fail(H3S_ERR_INVALID, "config: patch_size[%d] = %lld is outside [1, %lld]", d,
                            (long long)c->patch_size[d], (long long)M);
    }
    H3S_TRY(check_dim("text_dim", c->text_dim, 1, M));
    H3S_TRY(check_dim("freq_dim", c->freq_dim, 2, M));
    H3S_TRY(check_dim("time_embed_hidden_dim", c->time_embed_hidden_dim, 1, M));
    H3S_TRY(check_dim("time_embed_dim", c->time_embed_dim, 1, M));
    H3S_TRY(check_dim("rope_freq_dim", c->rope_freq_dim, 1, M));
    if (c->attention_head_dim % 2 != 0)
        return h3s_fail(H3S_ERR_INVALID, "config: attention_head_dim = %lld must be even",
                        (long long)c->attention_head_dim);
    if (6 * c->rope_freq_dim > c->attention_head_dim)
        return h3s_fail(H3S_ERR_INVALID,
                        "config: rope_freq_dim = %lld rotates 6*%lld = %lld channels, more than attention_head_dim = "
                        "%lld",
                        (long long)c->rope_freq_dim, (long long)c->rope_freq_dim, (long long)(6 * c->rope_freq_dim),
                        (long long)c->attention_head_dim);
    if (c->freq_dim % 2 != 0)
        return h3s_fail(H3S_ERR_INVALID, "config: freq_dim = %lld must be even (cos and sin halves)",
                        (long long)c->freq_dim);
    if (c->num_attention_heads * c->attention_head_dim > M)
        return h3s_fail(H3S_ERR_INVALID, "config: num_attention_heads * attention_head_dim = %lld exceeds %lld",
                        (long long)(c->num_attention_heads * c->attention_head_dim), (long long)M);
    int64_t vw = c->in_channels;
    for (int d = 0; d < 3; d++) {
        vw *= c->patch_size[d]; /* each factor <= 2^24 and vw <= 2^24 before it: no overflow */
        if (vw > M)
            return h3s_fail(H3S_ERR_INVALID, "config: in_channels * patch_size = video row width exceeds %lld",
                            (long long)M);
    }
    /* theta >= 1 keeps every inv_freq = theta^(-2j/2F) <= 1, so no rope angle exceeds its position (which the inputs
     * bound); the strict table uses theta rounded to f32, which must stay finite. */
    if (!(c->rope_theta >= 1.0) || !isfinite((float)c->rope_theta))
        return h3s_fail(H3S_ERR_INVALID, "config: rope_theta = %g must be >= 1 and finite in f32", c->rope_theta);
    H3S_TRY(check_eps("norm_eps", c->norm_eps));
    H3S_TRY(check_eps("qk_norm_eps", c->qk_norm_eps));
    H3S_TRY(check_eps("final_norm_eps", c->final_norm_eps));
    return H3S_OK;
}

static const char *json_type_name(const cJSON *item) {
    if (cJSON_IsNumber(item)) return "a number";
    if (cJSON_IsString(item)) return "a string";
    if (cJSON_IsBool(item)) return "a boolean";
    if (cJSON_IsNull(item)) return "null";
    if (cJSON_IsArray(item)) return "an array";
    if (cJSON_IsObject(item)) return "an object";
    return "an invalid value";
}

/* Integral JSON number exactly representable as a double (|v| <= 2^53); a larger magnitude is out of range (far
 * above every bound h3s_config_validate sets). */
static h3s_status json_int(const cJSON *item, const char *what, int64_t *out) {
    if (!cJSON_IsNumber(item))
        return h3s_fail(H3S_ERR_INVALID, "config: %s must be an integer, got %s", what, json_type_name(item));
    double v = item->valuedouble;
    if (!isfinite(v) || fabs(v) > 9007199254740992.0)
        return h3s_fail(H3S_ERR_INVALID, "config: %s = %g is out of range (magnitude above 2^53)", what, v);
    if (v != floor(v)) return h3s_fail(H3S_ERR_INVALID, "config: %s = %g must be an integer", what, v);
    *out = (int64_t)v;
    return H3S_OK;
}

h3s_status h3s_config_parse_json(const char *text, size_t len, h3s_config *out) {
    if (!text || !out) return h3s_fail(H3S_ERR_INVALID, "config: NULL argument");
    cJSON *root = NULL;
    H3S_TRY(h3s_json_parse_strict(text, len, "config", &root));
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return h3s_fail(H3S_ERR_FORMAT, "config: the top level must be a JSON object");
    }
    /* A config of another diffusers class may hold every key this one needs: the class decides the model. */
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(root, "_class_name");
    if (!cJSON_IsString(cls) || strcmp(cls->valuestring, H3S_CONFIG_CLASS_NAME) != 0) {
        h3s_status st = cJSON_IsString(cls)
                            ? h3s_fail(H3S_ERR_INVALID, "config: _class_name is \"%s\", expected \"%s\"",
                                       cls->valuestring, H3S_CONFIG_CLASS_NAME)
                        : cls ? h3s_fail(H3S_ERR_INVALID, "config: _class_name must be the string \"%s\", got %s",
                                         H3S_CONFIG_CLASS_NAME, json_type_name(cls))
                              : h3s_fail(H3S_ERR_INVALID, "config: required key \"_class_name\" (\"%s\") is missing",
                                         H3S_CONFIG_CLASS_NAME);
        cJSON_Delete(root);
        return st;
    }
    h3s_config c;
    memset(&c, 0, sizeof c);
    void *fields[N_CONFIG_KEYS];
    bind_fields(&c, fields);
    h3s_status st = H3S_OK;
    for (int k = 0; k < N_CONFIG_KEYS && st == H3S_OK; k++) {
        const config_key *key = &config_keys[k];
        const cJSON *item = NULL;
        int seen = 0;
        for (const cJSON *it = root->child; it; it = it->next) {
            if (it->string && strcmp(it->string, key->name) == 0) {
                item = it;
                seen++;
            }
        }
        if (seen == 0) {
            st = h3s_fail(H3S_ERR_INVALID, "config: required key \"%s\" is missing", key->name);
            break;
        }
        if (seen > 1) {
            st = h3s_fail(H3S_ERR_INVALID, "config: key \"%s\" appears %d times", key->name, seen);
            break;
        }
        void *field = fields[k];
        switch (key->kind) {
        case KEY_INT: st = json_int(item, key->name, (int64_t *)field); break;
        case KEY_DOUBLE:
            if (!cJSON_IsNumber(item))
                st = h3s_fail(H3S_ERR_INVALID, "config: %s must be a number, got %s", key->name, json_type_name(item));
            else
                *(double *)field = item->valuedouble;
            break;
        case KEY_PATCH: {
            if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) != 3) {
                st = h3s_fail(H3S_ERR_INVALID, "config: patch_size must be an array of 3 integers, got %s",
                              cJSON_IsArray(item) ? "an array of another length" : json_type_name(item));
                break;
            }
            int d = 0;
            for (const cJSON *e = item->child; e && st == H3S_OK; e = e->next, d++) {
                char what[32];
                snprintf(what, sizeof what, "patch_size[%d]", d);
                st = json_int(e, what, &((int64_t *)field)[d]);
            }
            break;
        }
        }
    }
    cJSON_Delete(root);
    if (st != H3S_OK) return st;
    H3S_TRY(h3s_config_validate(&c));
    *out = c;
    return H3S_OK;
}

h3s_status h3s_config_load(const char *path, h3s_config *out) {
    if (!path || !out) return h3s_fail(H3S_ERR_INVALID, "config_load: NULL argument");
    /* A config.json is a few hundred bytes; anything past 1 MiB is not one. */
    char *buf = NULL;
    size_t n = 0;
    H3S_TRY(h3s_io_read_small_file(path, (size_t)1 << 20, &buf, &n));
    h3s_config c;
    h3s_status st = h3s_config_parse_json(buf, n, &c);
    if (st != H3S_OK)
        h3s_fail_context(st, "%s", path);
    else
        *out = c;
    free(buf);
    return st;
}

/* The shortest decimal that reads back as the same double, laid out the way Python's repr() does (diffusers writes
 * config.json with Python's json): fixed notation with at least one fractional digit for exponents in [-4, 16)
 * (10000.0), otherwise d.ddde-XX (1e-05).  Built from the digits of %e, so the locale's decimal point never leaks. */
static void format_double(double v, char *buf, size_t size) {
    char e[64];
    for (int prec = 0; prec <= 16; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, v);
        if (strtod(e, NULL) == v) break;
    }
    const char *p = e;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    char digits[32];
    int nd = 0;
    for (; *p && *p != 'e' && *p != 'E'; p++)
        if (*p >= '0' && *p <= '9' && nd < 31) digits[nd++] = *p;
    int exp10 = *p ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    size_t n = 0;
#define PUT(...) n += (size_t)snprintf(buf + n, n < size ? size - n : 0, __VA_ARGS__)
    if (neg) PUT("-");
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++)
                PUT("%c", i < nd ? digits[i] : '0');
            PUT(".");
            if (nd > exp10 + 1)
                PUT("%s", digits + exp10 + 1);
            else
                PUT("0");
        } else {
            PUT("0.");
            for (int i = 0; i < -exp10 - 1; i++)
                PUT("0");
            PUT("%s", digits);
        }
    } else {
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%s", digits + 1);
        PUT("e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
#undef PUT
}

h3s_status h3s_config_to_json(const h3s_config *c, char **out_text) {
    if (!c || !out_text) return h3s_fail(H3S_ERR_INVALID, "config_to_json: NULL argument");
    H3S_TRY(h3s_config_validate(c));
    h3s_config copy = *c;
    void *fields[N_CONFIG_KEYS];
    bind_fields(&copy, fields);
    size_t cap = 4096, len = 0;
    char *buf = h3s_malloc(cap, 1);
    if (!buf) return H3S_ERR_NOMEM;
    len += (size_t)snprintf(buf + len, cap - len, "{\n  \"_class_name\": \"" H3S_CONFIG_CLASS_NAME "\"");
    for (int k = 0; k < N_CONFIG_KEYS; k++) {
        const config_key *key = &config_keys[k];
        const void *field = fields[k];
        char value[128];
        switch (key->kind) {
        case KEY_INT: snprintf(value, sizeof value, "%lld", (long long)*(const int64_t *)field); break;
        case KEY_DOUBLE: format_double(*(const double *)field, value, sizeof value); break;
        case KEY_PATCH: {
            const int64_t *p = (const int64_t *)field;
            snprintf(value, sizeof value, "[\n    %lld,\n    %lld,\n    %lld\n  ]", (long long)p[0], (long long)p[1],
                     (long long)p[2]);
            break;
        }
        }
        /* 18 short keys with bounded values cannot outgrow 4 KiB. */
        len += (size_t)snprintf(buf + len, cap - len, ",\n  \"%s\": %s", key->name, value);
    }
    len += (size_t)snprintf(buf + len, cap - len, "\n}\n");
    if (len >= cap) {
        free(buf);
        return h3s_fail(H3S_ERR_INVALID, "config_to_json: internal buffer too small");
    }
    *out_text = buf;
    return H3S_OK;
}

/* The geometry of each named preset; the fields not listed (patch size, rope theta, the epsilons) are the same
 * for all of them and set by h3s_config_preset. */
static const struct {
    const char *name;
    h3s_config c;
} config_presets[] = {
    {"h3-33b",
     {.num_attention_heads = 56,
      .attention_head_dim = 128,
      .hidden_size = 5376,
      .num_layers = 50,
      .num_refiner_layers = 2,
      .ffn_dim = 14336,
      .in_channels = 24,
      .audio_in_channels = 32,
      .text_dim = 5120,
      .freq_dim = 256,
      .time_embed_hidden_dim = 5376,
      .time_embed_dim = 2688,
      .rope_freq_dim = 16}},
    {"small",
     {.num_attention_heads = 8,
      .attention_head_dim = 64,
      .hidden_size = 448,
      .num_layers = 4,
      .num_refiner_layers = 1,
      .ffn_dim = 1216,
      .in_channels = 24,
      .audio_in_channels = 32,
      .text_dim = 512,
      .freq_dim = 256,
      .time_embed_hidden_dim = 448,
      .time_embed_dim = 224,
      .rope_freq_dim = 8}},
    /* Exercises what the real model has: heads*head_dim (60) != hidden_size (48), partial rope (12 of 20
     * channels), widths that are not powers of two, two blocks and one refiner block. */
    {"tiny",
     {.num_attention_heads = 3,
      .attention_head_dim = 20,
      .hidden_size = 48,
      .num_layers = 2,
      .num_refiner_layers = 1,
      .ffn_dim = 72,
      .in_channels = 6,
      .audio_in_channels = 5,
      .text_dim = 40,
      .freq_dim = 32,
      .time_embed_hidden_dim = 56,
      .time_embed_dim = 36,
      .rope_freq_dim = 2}},
};

h3s_status h3s_config_preset(const char *name, int64_t layers, h3s_config *out) {
    if (!name || !out) return h3s_fail(H3S_ERR_INVALID, "config_preset: NULL argument");
    int found = -1;
    for (int i = 0; found < 0 && i < (int)(sizeof config_presets / sizeof config_presets[0]); i++)
        if (strcmp(name, config_presets[i].name) == 0) found = i;
    if (found < 0) return h3s_fail(H3S_ERR_INVALID, "unknown preset \"%s\" (expected tiny, small or h3-33b)", name);
    h3s_config c = config_presets[found].c;
    c.patch_size[0] = 1;
    c.patch_size[1] = 2;
    c.patch_size[2] = 2;
    c.rope_theta = 10000.0;
    c.norm_eps = c.qk_norm_eps = c.final_norm_eps = 1e-5;
    if (layers != -1) {
        if (layers < 1 || layers > H3S_CONFIG_MAX_LAYERS)
            return h3s_fail(H3S_ERR_INVALID, "preset %s: layers = %lld must be >= 1 (or -1 for the preset's %lld)",
                            name, (long long)layers, (long long)c.num_layers);
        c.num_layers = layers;
    }
    H3S_TRY(h3s_config_validate(&c));
    *out = c;
    return H3S_OK;
}
