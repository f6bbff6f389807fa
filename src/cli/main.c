#include <stdio.h>
#include <string.h>

#include "h3s.h"

static void usage(FILE *f) {
    fprintf(f, "usage: h3strict <command> [options]\n"
               "\n"
               "Strict-mode MiniMax-H3: bitwise identical rollout and training computations.\n"
               "\n"
               "  --help       this text\n"
               "  --version    print the version\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("h3strict %s\n", h3s_version());
        return 0;
    }
    fprintf(stderr, "h3strict: unknown command '%s' (try --help)\n", argv[1]);
    return 2;
}
