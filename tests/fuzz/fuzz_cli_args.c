/* libFuzzer target: the CLI's option parsing.  The input is an argument vector (NUL-separated).  The CLI source is
 * compiled in, and its parsers are driven directly over the union of every command's options: parse_opts, the
 * integer, seed, float, keyframe and device parsers, the recorded command line, and the dispatcher for words that
 * name no command, with the --help of every command.  No command runs (they would write files).  Properties: no
 * crash/UB/leak; every error line is printable (checked on the text the CLI writes). */
#include <stdio.h>
#include <unistd.h>

static FILE *fuzz_err;
/* the fuzzer keeps its own signals: libFuzzer times each run with SIGALRM, which the CLI would take as an ending
 * signal, and the CLI's main, called for every input, would start a waiting thread each time */
#define H3S_CLI_KEEP_SIGNALS 1
#define main h3s_cli_main
#undef stderr
#define stderr fuzz_err
#undef stdout
#define stdout fuzz_err
#define printf(...) fprintf(fuzz_err, __VA_ARGS__)
#include "cli/main.c"
#undef main
#undef stderr
#undef stdout
#undef printf

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_err = tmpfile();
    if (!fuzz_err) abort();
    return 0;
}

/* The CLI's output since the last call must hold no raw control byte but newlines. */
static void check_cli_output(void) {
    fflush(fuzz_err);
    long n = ftell(fuzz_err);
    if (n > 0) {
        char buf[4096];
        rewind(fuzz_err);
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, fuzz_err)) > 0)
            for (size_t i = 0; i < got; i++) {
                unsigned char ch = (unsigned char)buf[i];
                if ((ch < 0x20 && ch != '\n') || ch == 0x7f) abort();
            }
    }
    if (ftruncate(fileno(fuzz_err), 0) != 0) abort();
    rewind(fuzz_err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *commands[] = {"init",      "inputs",     "forward", "grad",
                                     "cotangent", "trajectory", "replay",  "verify"};
    if (size < 1 || size > 65536) return 0;
    /* byte 0 picks the command (whose help text --help prints); the rest is argv[2..], NUL-separated */
    const char *cmd = commands[data[0] % 8];
    char *buf = malloc(size);
    if (!buf) return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    char *argv[67];
    int argc = 0;
    argv[argc++] = "h3strict";
    argv[argc++] = (char *)cmd;
    for (size_t i = 0; i + 1 < size && argc < 66;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;
    g_cmd = cmd;
    opt o[] = {{"--model", "DIR", 0, "", NULL},        {"--inputs", "IN", 0, "", NULL},
               {"--cotangent", "CT", 0, "", NULL},     {"--out", "OUT", 0, "", NULL},
               {"--device", "D", 0, "", NULL},         {"--threads", "N", 0, "", NULL},
               {"--seed", "N", 0, "", NULL},           {"--seeds", "S", 0, "", NULL},
               {"--steps", "N", 0, "", NULL},          {"--batch", "B", 0, "", NULL},
               {"--text", "T", 0, "", NULL},           {"--frames", "F", 0, "", NULL},
               {"--latent-height", "H", 0, "", NULL},  {"--latent-width", "W", 0, "", NULL},
               {"--audio-latents", "A", 0, "", NULL},  {"--keyframes", "K", 0, "", NULL},
               {"--pad-to", "N", 0, "", NULL},         {"--t-video", "T", 0, "", NULL},
               {"--t-audio", "T", 0, "", NULL},        {"--attention-mask", NULL, 0, "", NULL},
               {"--preset", "P", 0, "", NULL},         {"--layers", "N", 0, "", NULL},
               {"--manifest", "M", 0, "", NULL},       {"--write-manifest", "M", 0, "", NULL},
               {"--no-grad", NULL, 0, "", NULL},       {"--no-golden", NULL, 0, "", NULL},
               {"--plant-drift", "NODE", 0, "", NULL}, {"--required-one", "X", (data[0] & 8) != 0, "", NULL}};
    int n = sizeof o / sizeof o[0];
    remember_command_line(argc, argv);
    if (parse_opts(argc, argv, o, n) == 0) {
        int64_t v;
        uint64_t u;
        float x;
        const char *ints[] = {"--threads",       "--steps",        "--batch",         "--text",   "--frames",
                              "--latent-height", "--latent-width", "--audio-latents", "--pad-to", "--layers"};
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
            if (get(o, n, ints[k])) (void)parse_i64(ints[k], get(o, n, ints[k]), 1, 1 << 24, &v);
        if (get(o, n, "--seed")) (void)parse_u64("--seed", get(o, n, "--seed"), &u);
        if (get(o, n, "--t-video")) (void)parse_f32("--t-video", get(o, n, "--t-video"), 0, 1, &x);
        if (get(o, n, "--seeds")) {
            uint64_t *seeds = NULL;
            int64_t count = 0;
            if (parse_seeds(get(o, n, "--seeds"), &seeds, &count) == 0 && count < 1) abort();
            free(seeds);
        }
        int first, last;
        (void)parse_keyframes(get(o, n, "--keyframes"), &first, &last);
        h3s_backend_kind kind;
        (void)parse_device(o, n, &kind);
        progress_stop();
    }
    /* the dispatcher on the raw words: --help, --version, unknown commands (known commands are not run) */
    if (argc > 2 && !find_command(argv[2])) {
        char *words[3] = {"h3strict", argv[2], NULL};
        (void)h3s_cli_main(2, words);
    }
    free(g_command_line);
    g_command_line = NULL;
    check_cli_output();
    free(buf);
    return 0;
}
