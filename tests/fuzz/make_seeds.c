/* Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/): valid files of every kind the
 * targets read, made by the library itself for the micro model the targets use, plus a few hand-made ones.
 * Run by scripts/fuzz.sh --seeds; the output is committed. */
#include <errno.h>
#include <sys/stat.h>

#include "fuzz_common.h"

static char root[512];

static void put(const char *target, const char *name, const void *data, size_t len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, target);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", root, target, name);
    fuzz_put_file(path, data, len);
}

static void put_text(const char *target, const char *name, const char *text) { put(target, name, text, strlen(text)); }

static void put_file(const char *target, const char *name, const char *src) {
    FILE *f = fopen(src, "rb");
    if (!f) fuzz_die(src);
    static unsigned char buf[1 << 22];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    put(target, name, buf, n);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_make_seeds CORPUS_ROOT\n");
        return 2;
    }
    snprintf(root, sizeof root, "%s", argv[1]);
    mkdir(root, 0755);
    const char *micro = fuzz_micro_model_dir();
    char p[700];

    /* config */
    snprintf(p, sizeof p, "%s/%s", micro, H3S_MODEL_CONFIG_FILE);
    put_file("config", "micro.json", p);
    const char *presets[] = {"tiny", "small", "h3-33b"};
    for (int i = 0; i < 3; i++) {
        h3s_config c;
        char *text = NULL;
        if (h3s_config_preset(presets[i], -1, &c) != H3S_OK || h3s_config_to_json(&c, &text) != H3S_OK)
            fuzz_die("preset");
        char name[64];
        snprintf(name, sizeof name, "%s.json", presets[i]);
        put_text("config", name, text);
        free(text);
    }

    /* safetensors: the micro weights, a small file with metadata, an empty file, inputs */
    snprintf(p, sizeof p, "%s/%s", micro, H3S_MODEL_WEIGHTS_FILE);
    put_file("safetensors", "micro_weights.safetensors", p);
    static const char meta[] = "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"BF16\",\"shape\":[2],"
                               "\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"I64\",\"shape\":[1,1],\"data_offsets\":[4,"
                               "12]}}";
    unsigned char buf[512];
    uint64_t hl = sizeof meta - 1;
    memcpy(buf, &hl, 8);
    memcpy(buf + 8, meta, hl);
    memset(buf + 8 + hl, 0x3f, 12);
    put("safetensors", "meta.safetensors", buf, 8 + hl + 12);
    hl = 2;
    memcpy(buf, &hl, 8);
    memcpy(buf + 8, "{}", 2);
    put("safetensors", "empty.safetensors", buf, 10);

    /* inputs: batch 1 and 2, padded, masked */
    struct {
        int64_t batch, pad;
        int mask;
        const char *name;
    } reqs[] = {{1, 0, 0, "b1.safetensors"}, {2, 0, 1, "b2_mask.safetensors"}, {2, 8, 1, "b2_pad_mask.safetensors"}};
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        fuzz_request q;
        fuzz_request_make(reqs[i].batch, reqs[i].pad, reqs[i].mask, &q);
        const char *tmp = fuzz_path("req.safetensors");
        fuzz_request_write(&q, tmp);
        put_file("inputs", reqs[i].name, tmp);
        if (i == 0) put_file("safetensors", "inputs_b1.safetensors", tmp);
        /* the cotangent target's request is batch 2 without padding */
        if (reqs[i].batch == 2 && reqs[i].pad == 0) {
            h3s_config c = fuzz_micro_config();
            h3s_tensor ds, da;
            if (h3s_cotangent_random(2, q.in.hidden_states.shape[1], q.in.hidden_states.shape[2],
                                     q.in.audio_hidden_states.shape[1], c.audio_in_channels, 5, &ds, &da) != H3S_OK)
                fuzz_die("cotangent");
            h3s_st_entry e[2] = {{"sample", ds}, {"audio_sample", da}};
            if (h3s_st_write(tmp, e, 2) != H3S_OK) fuzz_die("write cotangent");
            put_file("cotangent", "b2.safetensors", tmp);
            h3s_tensor_free(&ds);
            h3s_tensor_free(&da);
        }
        fuzz_request_free(&q);
    }

    /* index of the sharded micro model */
    char *index = NULL;
    fuzz_micro_sharded_dir(&index);
    put_text("index", "sharded.json", index);
    free(index);

    /* manifest of the micro model, and one listing config.json as well */
    const char *man = fuzz_path("m.json");
    if (h3s_model_manifest_write(micro, man) != H3S_OK) fuzz_die("manifest");
    put_file("manifest", "micro.json", man);
    char hex[65];
    snprintf(p, sizeof p, "%s/%s", micro, H3S_MODEL_WEIGHTS_FILE);
    if (h3s_file_sha256_hex(p, hex) != H3S_OK) fuzz_die("sha");
    char text[256];
    snprintf(text, sizeof text, "{\"%s\": \"%s\"}", H3S_MODEL_WEIGHTS_FILE, hex);
    put_text("manifest", "weights_only.json", text);

    /* CLI argument vectors: byte 0 picks the command (index into init, inputs, forward, grad, cotangent,
     * trajectory, replay, verify), then the arguments, NUL-separated */
    static const char a1[] = "\x05--seeds\0"
                             "11,22,33\0--steps\0"
                             "4\0--batch=3\0--out\0r.json\0--quiet";
    static const char a2[] = "\x01--model\0m\0--seed\0"
                             "7\0--keyframes\0first,last\0--t-video\0"
                             "0.25\0--out\0x";
    static const char a3[] = "\x02--model\0m\0--inputs\0in\0--out\0o\0--device\0cuda\0--threads\0"
                             "2";
    static const char a4[] = "\x06--help";
    static const char a5[] = "\x07frobnicate\0--x";
    static const char a6[] = "\x00--version";
    put("cli_args", "trajectory", a1, sizeof a1 - 1);
    put("cli_args", "inputs", a2, sizeof a2 - 1);
    put("cli_args", "forward", a3, sizeof a3 - 1);
    put("cli_args", "help", a4, sizeof a4 - 1);
    put("cli_args", "unknown", a5, sizeof a5 - 1);
    put("cli_args", "version", a6, sizeof a6 - 1);
    printf("seeds written under %s\n", root);
    return 0;
}
