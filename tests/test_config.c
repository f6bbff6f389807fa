/* Configuration: config.json parsing (every key and _class_name required, types checked, unknown keys ignored),
 * presets, JSON round trip, and the parameter table built from a config. */
#include <stdio.h>
#include <unistd.h>

#include "model/config.h"
#include "model/params.h"
#include "test_util.h"

/* The released config.json as diffusers writes it (with its bookkeeping keys). */
static const char *released_json = "{\n"
                                   "  \"_class_name\": \"MiniMaxH3Transformer3DModel\",\n"
                                   "  \"_diffusers_version\": \"0.36.0.dev0\",\n"
                                   "  \"attention_head_dim\": 128,\n"
                                   "  \"audio_in_channels\": 32,\n"
                                   "  \"ffn_dim\": 14336,\n"
                                   "  \"final_norm_eps\": 1e-05,\n"
                                   "  \"freq_dim\": 256,\n"
                                   "  \"hidden_size\": 5376,\n"
                                   "  \"in_channels\": 24,\n"
                                   "  \"norm_eps\": 1e-05,\n"
                                   "  \"num_attention_heads\": 56,\n"
                                   "  \"num_layers\": 50,\n"
                                   "  \"num_refiner_layers\": 2,\n"
                                   "  \"patch_size\": [1, 2, 2],\n"
                                   "  \"qk_norm_eps\": 1e-05,\n"
                                   "  \"rope_freq_dim\": 16,\n"
                                   "  \"rope_theta\": 10000.0,\n"
                                   "  \"text_dim\": 5120,\n"
                                   "  \"time_embed_dim\": 2688,\n"
                                   "  \"time_embed_hidden_dim\": 5376\n"
                                   "}\n";

static const char *all_keys[] = {"attention_head_dim", "audio_in_channels",  "ffn_dim",
                                 "final_norm_eps",     "freq_dim",           "hidden_size",
                                 "in_channels",        "norm_eps",           "num_attention_heads",
                                 "num_layers",         "num_refiner_layers", "patch_size",
                                 "qk_norm_eps",        "rope_freq_dim",      "rope_theta",
                                 "text_dim",           "time_embed_dim",     "time_embed_hidden_dim"};
#define N_KEYS ((int)(sizeof all_keys / sizeof all_keys[0]))

static h3s_status parse(const char *text, h3s_config *c) { return h3s_config_parse_json(text, strlen(text), c); }

/* released_json with the line of `key` replaced by `replacement` (NULL: line removed).  Static buffer. */
static const char *edited(const char *key, const char *replacement) {
    static char out[4096];
    char needle[64];
    snprintf(needle, sizeof needle, "\"%s\":", key);
    const char *at = strstr(released_json, needle);
    if (!at) {
        fprintf(stderr, "test bug: key %s\n", key);
        exit(2);
    }
    const char *line_start = at;
    while (line_start > released_json && line_start[-1] != '\n')
        line_start--;
    const char *line_end = strchr(at, '\n') + 1;
    size_t head = (size_t)(line_start - released_json);
    memcpy(out, released_json, head);
    size_t n = head;
    if (replacement) n += (size_t)snprintf(out + n, sizeof out - n, "  %s\n", replacement);
    n += (size_t)snprintf(out + n, sizeof out - n, "%s", line_end);
    /* removing the last key leaves a trailing comma on the line before: take it out */
    if (!replacement && strcmp(key, "time_embed_hidden_dim") == 0) {
        char *last = strstr(out, "\"time_embed_dim\": 2688,");
        if (last) last[strlen("\"time_embed_dim\": 2688")] = ' ';
    }
    return out;
}

static void test_parse_released(void) {
    h3s_config c;
    CHECK_OK(parse(released_json, &c));
    CHECK(c.num_attention_heads == 56 && c.attention_head_dim == 128 && c.hidden_size == 5376, "heads/dims");
    CHECK(c.num_layers == 50 && c.num_refiner_layers == 2 && c.ffn_dim == 14336, "layers/ffn");
    CHECK(c.in_channels == 24 && c.audio_in_channels == 32, "channels");
    CHECK(c.patch_size[0] == 1 && c.patch_size[1] == 2 && c.patch_size[2] == 2, "patch");
    CHECK(c.text_dim == 5120 && c.freq_dim == 256 && c.time_embed_hidden_dim == 5376 && c.time_embed_dim == 2688,
          "text/time dims");
    CHECK(c.rope_freq_dim == 16 && c.rope_theta == 10000.0, "rope");
    CHECK(c.norm_eps == 1e-5 && c.qk_norm_eps == 1e-5 && c.final_norm_eps == 1e-5, "eps");
    CHECK(h3s_config_video_width(&c) == 96, "video width %lld", (long long)h3s_config_video_width(&c));

    /* the h3-33b preset is exactly the released config */
    h3s_config p;
    CHECK_OK(h3s_config_preset("h3-33b", -1, &p));
    CHECK(memcmp(&p, &c, sizeof c) == 0, "h3-33b preset differs from the released config.json");
}

static void test_missing_and_wrong_types(void) {
    h3s_config c;
    for (int k = 0; k < N_KEYS; k++) {
        CHECK_FAILS(H3S_ERR_INVALID, parse(edited(all_keys[k], NULL), &c));
        CHECK(strstr(h3s_last_error(), all_keys[k]) != NULL, "missing %s: message '%s' does not name it", all_keys[k],
              h3s_last_error());
        /* a string where a number belongs */
        char repl[128];
        snprintf(repl, sizeof repl, "\"%s\": \"12\",", all_keys[k]);
        if (strcmp(all_keys[k], "time_embed_hidden_dim") == 0) repl[strlen(repl) - 1] = '\0';
        CHECK_FAILS(H3S_ERR_INVALID, parse(edited(all_keys[k], repl), &c));
        CHECK(strstr(h3s_last_error(), all_keys[k]) != NULL, "wrong type %s: message '%s' does not name it",
              all_keys[k], h3s_last_error());
    }
    /* more wrong types */
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("hidden_size", "\"hidden_size\": 5376.5,"), &c));
    CHECK(strstr(h3s_last_error(), "hidden_size"), "fractional: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("num_layers", "\"num_layers\": true,"), &c));
    CHECK(strstr(h3s_last_error(), "num_layers"), "bool: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("ffn_dim", "\"ffn_dim\": null,"), &c));
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("patch_size", "\"patch_size\": [1, 2],"), &c));
    CHECK(strstr(h3s_last_error(), "patch_size"), "patch len: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("patch_size", "\"patch_size\": 2,"), &c));
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("patch_size", "\"patch_size\": [1, \"2\", 2],"), &c));
    CHECK(strstr(h3s_last_error(), "patch_size[1]"), "patch elem: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("patch_size", "\"patch_size\": [1, 0, 2],"), &c));
    CHECK(strstr(h3s_last_error(), "patch_size[1]"), "patch zero: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("rope_theta", "\"rope_theta\": [10000],"), &c));
    /* a key twice: malformed (strict JSON names every member once) */
    CHECK_FAILS(H3S_ERR_FORMAT, parse(edited("ffn_dim", "\"ffn_dim\": 14336, \"ffn_dim\": 14336,"), &c));
    CHECK(strstr(h3s_last_error(), "ffn_dim"), "dup: %s", h3s_last_error());
    /* not JSON / not an object */
    CHECK_FAILS(H3S_ERR_FORMAT, parse("{\"hidden_size\": ", &c));
    CHECK_FAILS(H3S_ERR_FORMAT, parse("[1, 2, 3]", &c));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_config_parse_json(NULL, 0, &c));
    /* unknown keys are ignored */
    CHECK_OK(parse(edited("ffn_dim", "\"ffn_dim\": 14336, \"some_future_key\": {\"a\": [1]},"), &c));
    CHECK_OK(parse(edited("_diffusers_version", NULL), &c));
}

/* `_class_name` is required and must name this model (docs/numerics/io.md): a config of another diffusers class may
 * hold every key this one needs. */
static void test_class_name(void) {
    h3s_config c;
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("_class_name", NULL), &c));
    CHECK(strstr(h3s_last_error(), "\"_class_name\"") && strstr(h3s_last_error(), "missing"), "missing class: %s",
          h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("_class_name", "\"_class_name\": \"WanTransformer3DModel\","), &c));
    CHECK(strstr(h3s_last_error(), "_class_name") && strstr(h3s_last_error(), "WanTransformer3DModel"),
          "other class: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("_class_name", "\"_class_name\": 1,"), &c));
    CHECK(strstr(h3s_last_error(), "_class_name"), "class not a string: %s", h3s_last_error());
    /* twice, even with the same value: malformed JSON (FORMAT), naming the key */
    CHECK_FAILS(H3S_ERR_FORMAT, parse(edited("_class_name", "\"_class_name\": \"MiniMaxH3Transformer3DModel\", "
                                                            "\"_class_name\": \"MiniMaxH3Transformer3DModel\","),
                                      &c));
    CHECK(strstr(h3s_last_error(), "'_class_name'"), "class twice: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_FORMAT, parse(edited("norm_eps", "\"norm_eps\": 1e-05, \"norm_eps\": 1e-06,"), &c));
    CHECK(strstr(h3s_last_error(), "'norm_eps'"), "eps twice: %s", h3s_last_error());
}

static void test_validation(void) {
    h3s_config c;
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("attention_head_dim", "\"attention_head_dim\": 127,"), &c));
    CHECK(strstr(h3s_last_error(), "attention_head_dim"), "odd head_dim: %s", h3s_last_error());
    /* 6 * 22 = 132 rotary channels > 128 */
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("rope_freq_dim", "\"rope_freq_dim\": 22,"), &c));
    CHECK(strstr(h3s_last_error(), "rope_freq_dim"), "rope too wide: %s", h3s_last_error());
    /* exactly the head width is fine */
    CHECK_OK(parse(edited("attention_head_dim", "\"attention_head_dim\": 96,"), &c));
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("freq_dim", "\"freq_dim\": 255,"), &c));
    CHECK(strstr(h3s_last_error(), "freq_dim"), "odd freq_dim: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("hidden_size", "\"hidden_size\": 0,"), &c));
    CHECK(strstr(h3s_last_error(), "hidden_size"), "zero hidden: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("ffn_dim", "\"ffn_dim\": -4,"), &c));
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("num_layers", "\"num_layers\": 0,"), &c));
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("norm_eps", "\"norm_eps\": 0,"), &c));
    CHECK(strstr(h3s_last_error(), "norm_eps"), "eps: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("qk_norm_eps", "\"qk_norm_eps\": -1e-5,"), &c));
    CHECK(strstr(h3s_last_error(), "qk_norm_eps"), "qk eps: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("rope_theta", "\"rope_theta\": 0,"), &c));
    /* below 1 an inv_freq exceeds 1 and the angles outgrow the position bound (NaN tables) */
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("rope_theta", "\"rope_theta\": 0.5,"), &c));
    CHECK(strstr(h3s_last_error(), ">= 1"), "theta < 1: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("rope_theta", "\"rope_theta\": 1e300,"), &c)); /* inf in f32 */
    CHECK_OK(parse(edited("rope_theta", "\"rope_theta\": 1,"), &c));
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("hidden_size", "\"hidden_size\": 1e300,"), &c));
    CHECK(strstr(h3s_last_error(), "hidden_size") && strstr(h3s_last_error(), "out of range"), "huge: %s",
          h3s_last_error());
    /* an integer above 2^53 is out of range (it is an integer: the message must not say it is not one) */
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("text_dim", "\"text_dim\": 1e18,"), &c));
    CHECK(strstr(h3s_last_error(), "text_dim") && strstr(h3s_last_error(), "out of range") &&
              !strstr(h3s_last_error(), "must be an integer"),
          "1e18: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("num_layers", "\"num_layers\": -9007199254740994,"), &c));
    CHECK(strstr(h3s_last_error(), "num_layers") && strstr(h3s_last_error(), "out of range"), "-2^53-2: %s",
          h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("patch_size", "\"patch_size\": [1, 1e20, 2],"), &c));
    CHECK(strstr(h3s_last_error(), "patch_size[1]") && strstr(h3s_last_error(), "out of range"), "patch 1e20: %s",
          h3s_last_error());
    /* 2^53 itself is an integer, refused by the width bound */
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("text_dim", "\"text_dim\": 9007199254740992,"), &c));
    CHECK(strstr(h3s_last_error(), "text_dim") && strstr(h3s_last_error(), "outside"), "2^53: %s", h3s_last_error());
    /* the norms add (float)eps: an epsilon must be finite and > 0 in f32 too (1e-300 rounds to 0, 1e300 and 1e39
     * to +inf; a config that passes would fail mid-forward or silently change the output) */
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("norm_eps", "\"norm_eps\": 1e-300,"), &c));
    CHECK(strstr(h3s_last_error(), "norm_eps") && strstr(h3s_last_error(), "f32"), "eps 1e-300: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("norm_eps", "\"norm_eps\": 1e300,"), &c));
    CHECK(strstr(h3s_last_error(), "norm_eps"), "eps 1e300: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("qk_norm_eps", "\"qk_norm_eps\": 1e39,"), &c));
    CHECK(strstr(h3s_last_error(), "qk_norm_eps"), "qk eps 1e39: %s", h3s_last_error());
    CHECK_FAILS(H3S_ERR_INVALID, parse(edited("final_norm_eps", "\"final_norm_eps\": 1e-50,"), &c));
    CHECK(strstr(h3s_last_error(), "final_norm_eps"), "final eps 1e-50: %s", h3s_last_error());
    /* the f32 extremes are fine: FLT_MAX and the smallest f32 subnormal */
    CHECK_OK(parse(edited("norm_eps", "\"norm_eps\": 3.4028234663852886e38,"), &c));
    CHECK_OK(parse(edited("qk_norm_eps", "\"qk_norm_eps\": 1.401298464324817e-45,"), &c));
    h3s_config e;
    CHECK_OK(h3s_config_preset("tiny", -1, &e));
    e.final_norm_eps = 1e300;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_config_validate(&e));
    CHECK(strstr(h3s_last_error(), "final_norm_eps"), "validate eps 1e300: %s", h3s_last_error());
    /* zero refiner layers is a valid model */
    CHECK_OK(parse(edited("num_refiner_layers", "\"num_refiner_layers\": 0,"), &c));

    h3s_config t;
    CHECK_OK(h3s_config_preset("tiny", -1, &t));
    t.attention_head_dim = 21;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_config_validate(&t));
    CHECK_OK(h3s_config_preset("tiny", -1, &t));
    t.rope_freq_dim = 4; /* 24 > 20 */
    CHECK_FAILS(H3S_ERR_INVALID, h3s_config_validate(&t));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_config_validate(NULL));
}

static void test_presets(void) {
    h3s_config t, s, b;
    CHECK_OK(h3s_config_preset("tiny", -1, &t));
    CHECK(t.num_attention_heads == 3 && t.attention_head_dim == 20 && t.hidden_size == 48 && t.num_layers == 2 &&
              t.num_refiner_layers == 1 && t.ffn_dim == 72 && t.in_channels == 6 && t.audio_in_channels == 5 &&
              t.text_dim == 40 && t.freq_dim == 32 && t.time_embed_hidden_dim == 56 && t.time_embed_dim == 36 &&
              t.rope_freq_dim == 2,
          "tiny values");
    CHECK(t.num_attention_heads * t.attention_head_dim != t.hidden_size, "tiny: heads*head_dim != hidden");
    CHECK(6 * t.rope_freq_dim < t.attention_head_dim, "tiny: partial rope");
    CHECK(h3s_config_video_width(&t) == 24, "tiny video width");
    CHECK_OK(h3s_config_preset("small", -1, &s));
    CHECK(s.hidden_size == 448 && s.num_layers == 4 && s.ffn_dim == 1216 && s.rope_freq_dim == 8 &&
              s.time_embed_dim == 224 && s.text_dim == 512,
          "small values");
    CHECK_OK(h3s_config_preset("h3-33b", 1, &b));
    CHECK(b.num_layers == 1 && b.hidden_size == 5376, "h3-33b --layers 1");
    CHECK_OK(h3s_config_preset("tiny", 5, &t));
    CHECK(t.num_layers == 5, "tiny layers override");
    CHECK_FAILS(H3S_ERR_INVALID, h3s_config_preset("tiny", 0, &t));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_config_preset("huge", -1, &t));
    CHECK(strstr(h3s_last_error(), "huge"), "unknown preset named: %s", h3s_last_error());
}

static void test_round_trip(void) {
    const char *names[] = {"tiny", "small", "h3-33b"};
    for (int i = 0; i < 3; i++) {
        h3s_config c, back;
        CHECK_OK(h3s_config_preset(names[i], -1, &c));
        char *text = NULL;
        CHECK_OK(h3s_config_to_json(&c, &text));
        if (!text) continue;
        CHECK(strstr(text, "\"_class_name\": \"MiniMaxH3Transformer3DModel\"") != NULL, "class name");
        CHECK(strstr(text, "\"rope_theta\": 10000.0") != NULL, "rope_theta written as a float: %s", text);
        CHECK(strstr(text, "\"norm_eps\": 1e-05") != NULL, "eps written as 1e-05");
        CHECK_OK(h3s_config_parse_json(text, strlen(text), &back));
        CHECK(memcmp(&c, &back, sizeof c) == 0, "%s: to_json -> parse is not the identity", names[i]);
        free(text);
    }
    /* odd doubles survive the round trip exactly */
    h3s_config c, back;
    CHECK_OK(h3s_config_preset("tiny", -1, &c));
    c.rope_theta = 12345.678901234567;
    c.norm_eps = 1.0 / 3.0 * 1e-6;
    c.qk_norm_eps = 1.0 / 7.0 * 1e-30; /* the smallest eps must stay > 0 in f32 */
    char *text = NULL;
    CHECK_OK(h3s_config_to_json(&c, &text));
    if (text) {
        CHECK_OK(h3s_config_parse_json(text, strlen(text), &back));
        CHECK(back.rope_theta == c.rope_theta && back.norm_eps == c.norm_eps && back.qk_norm_eps == c.qk_norm_eps,
              "doubles round trip");
        free(text);
    }
    /* an invalid config is refused, not written */
    c.attention_head_dim = 19;
    text = NULL;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_config_to_json(&c, &text));
    CHECK(text == NULL, "no output on failure");
}

static void test_load(void) {
    char dir[] = "/tmp/h3s_test_config_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fputs(released_json, f);
    fclose(f);
    h3s_config c;
    CHECK_OK(h3s_config_load(path, &c));
    CHECK(c.hidden_size == 5376, "loaded");
    f = fopen(path, "w");
    fputs(edited("ffn_dim", NULL), f);
    fclose(f);
    CHECK_FAILS(H3S_ERR_INVALID, h3s_config_load(path, &c));
    CHECK(strstr(h3s_last_error(), path) && strstr(h3s_last_error(), "ffn_dim"), "load error names file and key: %s",
          h3s_last_error());
    remove(path);
    CHECK_FAILS(H3S_ERR_IO, h3s_config_load(path, &c));
    rmdir(dir);
}

static int has_name(const h3s_param_spec *s, int64_t n, const char *name, h3s_dtype dtype, int64_t d0, int64_t d1) {
    for (int64_t i = 0; i < n; i++) {
        if (strcmp(s[i].name, name) == 0)
            return s[i].dtype == dtype && s[i].shape[0] == d0 && (d1 < 0 ? s[i].ndim == 1 : s[i].shape[1] == d1);
    }
    return 0;
}

static void test_param_table(void) {
    h3s_config c;
    CHECK_OK(h3s_config_preset("h3-33b", 2, &c));
    h3s_param_spec *s = NULL;
    int64_t n = 0;
    CHECK_OK(h3s_param_specs(&c, &s, &n));
    if (!s) return;
    /* 10 top-level input params, 2 refiner blocks x 10, final_norm, 2 blocks x 12, norm_out 3, heads 4 */
    CHECK(n == 10 + 20 + 1 + 24 + 3 + 4, "count %lld", (long long)n);
    CHECK(n == h3s_param_count(&c), "param_count agrees");
    const h3s_dtype F = H3S_F32, B = H3S_BF16;
    CHECK(has_name(s, n, "proj_in.weight", F, 5376, 96), "proj_in.weight");
    CHECK(has_name(s, n, "proj_in.bias", F, 5376, -1), "proj_in.bias");
    CHECK(has_name(s, n, "audio_proj_in.weight", F, 5376, 32), "audio_proj_in.weight");
    CHECK(has_name(s, n, "context_embedder.weight", B, 5376, 5120), "context_embedder.weight");
    CHECK(has_name(s, n, "context_embedder.bias", B, 5376, -1), "context_embedder.bias");
    CHECK(has_name(s, n, "time_embedder.linear_1.weight", F, 5376, 256), "linear_1");
    CHECK(has_name(s, n, "time_embedder.linear_1.bias", F, 5376, -1), "linear_1.bias");
    CHECK(has_name(s, n, "time_embedder.linear_2.weight", F, 2688, 5376), "linear_2");
    CHECK(has_name(s, n, "time_embedder.linear_2.bias", F, 2688, -1), "linear_2.bias");
    CHECK(has_name(s, n, "token_refiner.refiner_blocks.1.attn.to_q.weight", B, 7168, 5376), "refiner to_q");
    CHECK(has_name(s, n, "token_refiner.refiner_blocks.0.attn.to_out.0.weight", B, 5376, 7168), "refiner to_out");
    CHECK(has_name(s, n, "token_refiner.refiner_blocks.0.attn.norm_k.weight", B, 128, -1), "refiner norm_k");
    CHECK(has_name(s, n, "token_refiner.refiner_blocks.0.ff.net.0.proj.weight", B, 28672, 5376), "refiner ff0");
    CHECK(has_name(s, n, "token_refiner.refiner_blocks.0.ff.net.2.weight", B, 5376, 14336), "refiner ff2");
    CHECK(!has_name(s, n, "token_refiner.refiner_blocks.0.adaln_proj.linear.weight", B, 96768, 2688),
          "refiner has no adaln");
    CHECK(has_name(s, n, "token_refiner.final_norm.weight", B, 5376, -1), "final_norm");
    CHECK(has_name(s, n, "transformer_blocks.1.norm2.weight", B, 5376, -1), "block norm2");
    CHECK(has_name(s, n, "transformer_blocks.1.adaln_proj.linear.weight", B, 96768, 2688), "adaln weight");
    CHECK(has_name(s, n, "transformer_blocks.1.adaln_proj.linear.bias", B, 96768, -1), "adaln bias");
    CHECK(has_name(s, n, "norm_out.norm.weight", B, 5376, -1), "norm_out.norm");
    CHECK(has_name(s, n, "norm_out.linear.weight", B, 10752, 2688), "norm_out.linear");
    CHECK(has_name(s, n, "norm_out.linear.bias", B, 10752, -1), "norm_out.linear.bias");
    CHECK(has_name(s, n, "proj_out.weight", F, 96, 5376), "proj_out");
    CHECK(has_name(s, n, "proj_out.bias", F, 96, -1), "proj_out.bias");
    CHECK(has_name(s, n, "audio_proj_out.weight", F, 32, 5376), "audio_proj_out");
    CHECK(has_name(s, n, "audio_proj_out.bias", F, 32, -1), "audio_proj_out.bias");
    /* canonical order: first and last, refiner before blocks, names unique */
    CHECK(strcmp(s[0].name, "proj_in.weight") == 0 && strcmp(s[n - 1].name, "audio_proj_out.bias") == 0, "ends");
    CHECK(strcmp(s[10].name, "token_refiner.refiner_blocks.0.norm1.weight") == 0, "refiner starts at 10: %s",
          s[10].name);
    CHECK(strcmp(s[31].name, "transformer_blocks.0.norm1.weight") == 0, "blocks start at 31: %s", s[31].name);
    CHECK(strcmp(s[31 + 11].name, "transformer_blocks.0.adaln_proj.linear.bias") == 0, "block ends with adaln bias");
    int dups = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i + 1; j < n; j++)
            dups += strcmp(s[i].name, s[j].name) == 0;
    CHECK(dups == 0, "%d duplicate names", dups);
    free(s);
    c.attention_head_dim = 3;
    s = NULL;
    CHECK_FAILS(H3S_ERR_INVALID, h3s_param_specs(&c, &s, &n));
    CHECK(s == NULL, "no table for an invalid config");
}

int main(void) {
    test_parse_released();
    test_missing_and_wrong_types();
    test_class_name();
    test_validation();
    test_presets();
    test_round_trip();
    test_load();
    test_param_table();
    return h3t_finish("test_config");
}
