/* h3strict: the command-line contract of docs/cli.md.
 *
 * Every command validates its options, runs, and on failure prints exactly one line
 * "h3strict <command>: <message>" on standard error and exits with the code of its class
 * (EXIT_* below).  Output files are written atomically by the library (temporary file +
 * rename): a failed command leaves no partial output behind.  Progress lines go to standard
 * error only (progress.h); results go to standard output. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cjson/cJSON.h>

/* The library's public API only (include/): the CLI is one of its users. */
#include "h3s.h"
#include "h3s_dist.h"
#include "h3s_io.h"
#include "h3s_model.h"
#include "h3s_replay.h"
#include "h3s_sample.h"
#include "plot.h"
#include "progress.h"
#include "provenance.h"

/* Exit codes (docs/cli.md, tested by tests/cli_exit_codes.sh). */
#define EXIT_DIFFER 1 /* it ran, and a strict comparison found different bits (trajectory, replay, verify) */
#define EXIT_USAGE 2  /* bad command line: unknown option, missing or malformed value, impossible request */
#define EXIT_INPUT 3  /* an input file (model, inputs, cotangent, manifest) is missing, unreadable or wrong */
#define EXIT_SYSTEM 4 /* device failure, out of memory, or an output that could not be written */

static const char *g_cmd = "h3strict";
static char *g_command_line; /* malloc'd once per run, whole (never cut) */

/* Parallel runs (--sp, --tp under mpirun, docs/cli.md): the world, and this process's rank.  Rank 0 alone prints
 * and writes; a failure is agreed between the ranks and printed once, by rank 0. */
static h3s_comm *g_comm;
static int g_rank, g_sp = 1, g_tp = 1;

/* A value the launcher put in the environment, known before MPI starts (-1 when absent or malformed). */
static int launcher_env(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) return -1;
    char *end;
    long x = strtol(v, &end, 10);
    return *end || x < 0 || x > 1000000 ? -1 : (int)x;
}

/* This process's rank or the world's size as mpirun set them: Open MPI's variables, else the PMI ones (MPICH's
 * launcher); -1 when the process was not started by one. */
static int launched(const char *what) {
    char name[64];
    snprintf(name, sizeof name, "OMPI_COMM_WORLD_%s", what);
    int v = launcher_env(name);
    if (v >= 0) return v;
    snprintf(name, sizeof name, "PMI_%s", what);
    return launcher_env(name);
}

/* The command line as typed, for reports ("every figure is reproduced by one command"). */
static void remember_command_line(int argc, char **argv) {
    size_t len = 0;
    for (int i = 0; i < argc; i++)
        len += strlen(i == 0 ? "h3strict" : argv[i]) + 1;
    g_command_line = malloc(len + 1);
    if (!g_command_line) return;
    size_t used = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = i == 0 ? "h3strict" : argv[i];
        size_t n = strlen(a);
        if (i) g_command_line[used++] = ' ';
        memcpy(g_command_line + used, a, n);
        used += n;
    }
    g_command_line[used] = '\0';
}

/* One line on stderr, whatever the message holds: it is formatted whole, and control bytes (a newline included)
 * and bytes that are not UTF-8 are escaped (h3s_escape_dup), so an argument or a file cannot make it lie. */
static int fail_line(const char *fmt, ...) CLI_PRINTF(1, 2);
static int fail_line(const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    char *msg = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (msg) vsnprintf(msg, (size_t)n + 1, fmt, ap);
    va_end(ap);
    char *esc = msg ? h3s_escape_dup(msg) : NULL;
    if (g_rank == 0) fprintf(stderr, "h3strict %s: %s\n", g_cmd, esc ? esc : "(out of memory formatting the message)");
    h3s_free(esc);
    free(msg);
    return EXIT_USAGE;
}

/* The class of a library failure.  The same status can mean a bad input or a failed machine: an I/O error
 * while reading is a bad input file, while writing a system failure; an invalid value read from a file is a
 * bad input, one that came from the command line a usage error. */
static int exit_code_for(h3s_status st) {
    progress_phase phase = progress_current_phase();
    switch (st) {
    case H3S_OK: return 0;
    case H3S_ERR_MISMATCH: return EXIT_DIFFER;
    case H3S_ERR_INVALID: return phase == PHASE_READ ? EXIT_INPUT : EXIT_USAGE;
    case H3S_ERR_SHAPE:
    case H3S_ERR_DTYPE:
    case H3S_ERR_INDEX:
    case H3S_ERR_FORMAT: return EXIT_INPUT;
    case H3S_ERR_IO:
    case H3S_ERR_UNSUPPORTED: return phase == PHASE_READ ? EXIT_INPUT : EXIT_SYSTEM;
    case H3S_ERR_NOMEM:
    case H3S_ERR_DEVICE:
    default: return EXIT_SYSTEM;
    }
}

static int fail_status(h3s_status st) {
    int code = exit_code_for(st);
    fail_line("%s (%s)", h3s_last_error(), h3s_status_name(st));
    return code;
}

/* Refuse an output path that would replace an input, land in the model directory, or replace anything but a
 * regular file (h3s_io_check_output), before any work is done: a usage error (the command line asks to destroy
 * what it reads, or to replace a link, device, FIFO or directory); an unresolvable directory a system one.
 * Returns 0, or -1 with the exit code in check_output_code. */
static int check_output_code; /* the exit code of the last refusal */
/* In a parallel run every rank's status is agreed here (a rank that failed alone makes every rank fail, its message
 * printed once); elsewhere the status passes through. */
static h3s_status agree(h3s_status st) { return g_comm ? h3s_comm_agree(g_comm, st, NULL) : st; }

static int check_output(const char *out, const char *model_dir, const char *in1, const char *in2) {
    const char *inputs[2] = {in1, in2}, *dirs[1] = {model_dir};
    h3s_status st = agree(h3s_io_check_output(out, inputs, 2, dirs, 1));
    if (st == H3S_OK) return 0;
    fail_line("%s (%s)", h3s_last_error(), h3s_status_name(st));
    check_output_code = st == H3S_ERR_INVALID ? EXIT_USAGE : EXIT_SYSTEM;
    return -1;
}

/* ------------------------------------------------------------------ options ----------- */

/* One option of a command.  `arg` names the value in the help text (NULL: a flag without a value); a required
 * option is refused when absent. */
typedef struct opt {
    const char *name; /* "--model" */
    const char *arg;  /* "DIR", or NULL for a flag */
    int required;
    const char *help;
    const char *value; /* NULL when absent; "" for a present flag */
} opt;

/* Options every command takes; parse_opts handles them. */
static const opt common_opts[] = {
    {"--quiet", NULL, 0, "no progress lines on standard error", NULL},
    {"--verbose", NULL, 0, "a progress line for every stage, with its elapsed time", NULL},
    {"--help", NULL, 0, "this command's usage and options (also -h)", NULL},
};

/* Options several commands take, each spelled once (a command lists them in its table, in its own order). */
static const opt opt_model = {"--model", "DIR", 1, "model directory", NULL};
static const opt opt_device = {"--device", "cpu|cuda", 0, "strict backend to run on (default cpu)", NULL};
static const opt opt_threads = {"--threads", "N", 0, "CPU threads (default: OpenMP's); results never depend on it",
                                NULL};
static const opt opt_grad_operands = {"--grad-operands", "bf16|split", 0,
                                      "CUDA backward: dy rounded to BF16 (default) or split exactly into hi + lo",
                                      NULL};
static const opt opt_sp = {"--sp", "A", 0,
                           "under mpirun: sequence-parallel ranks (default 1; A x B = the ranks started)", NULL};
static const opt opt_tp = {"--tp", "B", 0, "under mpirun: tensor-parallel ranks (default 1)", NULL};
static const opt opt_recompute = {"--recompute", "blocks|none", 0,
                                  "blocks: keep each block's input only, recompute its forward in the backward "
                                  "(same bits)",
                                  NULL};
static const opt opt_force_run = {"--force", NULL, 0, "run even when the memory estimate exceeds the machine's memory",
                                  NULL};

typedef struct command {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} command;
static const command *find_command(const char *name);

static void print_opt(FILE *f, const opt *o) {
    char left[64];
    snprintf(left, sizeof left, "%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
    if (strlen(left) > 24)
        fprintf(f, "  %s\n  %-24s %s%s\n", left, "", o->required ? "required: " : "", o->help);
    else
        fprintf(f, "  %-24s %s%s\n", left, o->required ? "required: " : "", o->help);
}

/* `h3strict CMD --help`: the synopsis, what the command does, every option, the exit codes. */
static void command_help(FILE *f, const command *c, const opt *opts, int nopts) {
    fprintf(f, "usage: h3strict %s", c->name);
    for (int k = 0; k < nopts; k++)
        if (opts[k].required) fprintf(f, " %s %s", opts[k].name, opts[k].arg ? opts[k].arg : "");
    fprintf(f, " [options]\n\n%s\n\noptions:\n", c->summary);
    for (int k = 0; k < nopts; k++)
        print_opt(f, &opts[k]);
    for (size_t k = 0; k < sizeof common_opts / sizeof common_opts[0]; k++)
        print_opt(f, &common_opts[k]);
    fprintf(f, "\nOptions take their value as the next argument or after '=' (--seed 5, --seed=5).\n"
               "exit status: 0 success, 1 a strict comparison differed, 2 bad usage, 3 bad input file,\n"
               "4 device or I/O failure (docs/cli.md)\n");
}

static progress_level g_level = PROGRESS_NORMAL;
static int check_environment(void);

/* The report that plot took from its first argument (NULL for every other command): --report then names it twice. */
static const char *g_positional_report;

/* Parse argv[2..] against `opts` (and the common options); unknown options, missing values, an option given twice
 * and missing required options are usage errors (-1), and so is a malformed H3S_* variable of the environment
 * (check_environment).  Returns 1 when --help was asked for and printed (the command then exits 0). */
static int parse_opts(int argc, char **argv, opt *opts, int nopts) {
    int quiet = 0, verbose = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            command_help(stdout, find_command(g_cmd), opts, nopts);
            return 1;
        }
    }
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i], *eq = strncmp(arg, "--", 2) ? NULL : strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        /* the common flags: --help was handled above, so here it can only have come with a value */
        int *common_flag = len == strlen("--quiet") && !strncmp(arg, "--quiet", len)       ? &quiet
                           : len == strlen("--verbose") && !strncmp(arg, "--verbose", len) ? &verbose
                                                                                           : NULL;
        if (common_flag || (len == strlen("--help") && !strncmp(arg, "--help", len))) {
            if (eq) return fail_line("option %.*s takes no value, got '%s'", (int)len, arg, arg), -1;
            if (common_flag && *common_flag) return fail_line("option %s given twice; give it once", arg), -1;
            if (common_flag) *common_flag = 1;
            continue;
        }
        int found = 0;
        for (int k = 0; k < nopts && !found; k++) {
            if (strlen(opts[k].name) != len || strncmp(arg, opts[k].name, len)) continue;
            found = 1;
            const char *value;
            if (!opts[k].arg) {
                if (eq) return fail_line("option %s takes no value, got '%s'", opts[k].name, arg), -1;
                value = "";
            } else if (eq) {
                value = eq + 1;
            } else {
                if (i + 1 >= argc) return fail_line("option %s needs a value (%s)", arg, opts[k].arg), -1;
                value = argv[++i];
            }
            /* no option takes an empty value: '--out=' or --out '' is a slip, refused here for every option alike */
            if (opts[k].arg && !*value)
                return fail_line("option %s needs a value (%s), got an empty one", opts[k].name, opts[k].arg), -1;
            /* given twice, the last would silently win: which one was meant is the user's to say */
            if (opts[k].value && opts[k].value == g_positional_report)
                return fail_line("the report is given twice, as the first argument ('%s') and with %s ('%s'); give "
                                 "it once",
                                 g_positional_report, opts[k].name, value),
                       -1;
            if (opts[k].value && !opts[k].arg)
                return fail_line("option %s given twice; give it once", opts[k].name), -1;
            if (opts[k].value)
                return fail_line("option %s given twice ('%s', then '%s'); give it once", opts[k].name, opts[k].value,
                                 value),
                       -1;
            opts[k].value = value;
        }
        if (!found) return fail_line("unknown option '%s' (see h3strict %s --help)", arg, g_cmd), -1;
    }
    if (quiet && verbose) return fail_line("--quiet and --verbose exclude each other"), -1;
    for (int k = 0; k < nopts; k++)
        if (opts[k].required && !opts[k].value)
            return fail_line("missing required option %s %s (see h3strict %s --help)", opts[k].name, opts[k].arg,
                             g_cmd),
                   -1;
    if (check_environment()) return -1;
    g_level = quiet || g_rank > 0 ? PROGRESS_QUIET : verbose ? PROGRESS_VERBOSE : PROGRESS_NORMAL;
    progress_start(g_cmd, g_level);
    return 0;
}

/* parse_opts, and the exit status it implies: -1 to go on, else the code to return. */
#define PARSE_OR_RETURN(argc, argv, o)                                                                                 \
    do {                                                                                                               \
        int parse_result_ = parse_opts(argc, argv, o, (int)(sizeof o / sizeof o[0]));                                  \
        if (parse_result_) return parse_result_ > 0 ? 0 : EXIT_USAGE;                                                  \
    } while (0)

static const char *get(const opt *opts, int nopts, const char *name) {
    for (int k = 0; k < nopts; k++)
        if (!strcmp(opts[k].name, name)) return opts[k].value;
    return NULL;
}

static int need(const opt *opts, int nopts, const char *name, const char **out) {
    *out = get(opts, nopts, name);
    if (!*out) {
        fail_line("missing required option %s", name);
        return -1;
    }
    return 0;
}

/* A number on the command line is written as it is meant: its first byte is a digit, or a '-' followed by one where
 * the range takes negatives (strtoll, strtoull and strtod would skip leading white space and take a sign: ' -1'
 * would wrap to 2^64 - 1, ' 5' and '+5' would pass). */
static int starts_as_number(const char *s, int negative_ok) {
    if (negative_ok && s[0] == '-') s++;
    return s[0] >= '0' && s[0] <= '9';
}

static int parse_i64(const char *name, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = starts_as_number(s, lo < 0) ? strtoll(s, &end, 10) : 0;
    if (!end || errno || *end || v < lo || v > hi) {
        fail_line("%s must be an integer in [%lld, %lld], got '%s'", name, (long long)lo, (long long)hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_u64(const char *name, const char *s, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = starts_as_number(s, 0) ? strtoull(s, &end, 10) : 0;
    if (!end || errno || *end) {
        fail_line("%s must be a non-negative integer (digits only, at most %llu), got '%s'", name,
                  (unsigned long long)UINT64_MAX, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* A fractional number written plainly: [-]DIGITS[.[DIGITS]][(e|E)[+|-]DIGITS], the '-' only where the range takes
 * negatives (no '+', no leading '.', no white space, no hex float, inf or nan), read exactly as typed: the value is
 * 0.d1d2...dn x 10^exp10, its n significant digits (d1 and dn not 0; n = 0 for zero) read in place in the text, so
 * that any number of digits compares exactly with a bound. */
typedef struct plain_decimal {
    int negative;
    const char *whole, *frac; /* the digits before and after the point */
    size_t nwhole, nfrac;
    size_t first, n; /* the significant digits: n of them from digit `first` of whole, then frac */
    int64_t exp10;
} plain_decimal;

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Digit k of the number as typed (the whole part, then the fraction). */
static char typed_digit(const plain_decimal *d, size_t k) {
    return k < d->nwhole ? d->whole[k] : d->frac[k - d->nwhole];
}

/* Significant digit k. */
static char plain_digit(const plain_decimal *d, size_t k) { return typed_digit(d, k + d->first); }

/* 0 when s is a plain number (above), -1 otherwise. */
static int plain_decimal_read(const char *s, int negative_ok, plain_decimal *d) {
    memset(d, 0, sizeof *d);
    const char *p = s;
    if (negative_ok && *p == '-') {
        d->negative = 1;
        p++;
    }
    d->whole = p;
    while (is_digit(*p))
        p++;
    d->nwhole = (size_t)(p - d->whole);
    if (d->nwhole == 0) return -1;
    d->frac = p;
    if (*p == '.') {
        d->frac = ++p;
        while (is_digit(*p))
            p++;
        d->nfrac = (size_t)(p - d->frac);
    }
    int64_t e = 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        int e_negative = *p == '-';
        if (*p == '+' || *p == '-') p++;
        if (!is_digit(*p)) return -1;
        for (; is_digit(*p); p++) /* saturated: 10^(10^10) is beyond every range either way */
            if (e < 1000000000) e = e * 10 + (*p - '0');
        if (e_negative) e = -e;
    }
    if (*p) return -1;
    size_t total = d->nwhole + d->nfrac, last = total;
    d->n = total;
    while (d->first < total && plain_digit(d, 0) == '0')
        d->first++;
    if (d->first == total) { /* zero, whatever its sign and exponent */
        d->negative = 0;
        d->n = 0;
        return 0;
    }
    while (last > d->first && typed_digit(d, last - 1) == '0')
        last--;
    d->n = last - d->first;
    d->exp10 = (int64_t)d->nwhole - (int64_t)d->first + e;
    return 0;
}

/* -1, 0 or 1 as a < b, a == b, a > b, exactly. */
static int plain_decimal_cmp(const plain_decimal *a, const plain_decimal *b) {
    int sa = a->n == 0 ? 0 : a->negative ? -1 : 1, sb = b->n == 0 ? 0 : b->negative ? -1 : 1;
    if (sa != sb) return sa < sb ? -1 : 1;
    if (sa == 0) return 0;
    int mag = 0;
    if (a->exp10 != b->exp10) mag = a->exp10 < b->exp10 ? -1 : 1;
    for (size_t k = 0; !mag && k < a->n && k < b->n; k++)
        if (plain_digit(a, k) != plain_digit(b, k)) mag = plain_digit(a, k) < plain_digit(b, k) ? -1 : 1;
    if (!mag && a->n != b->n) mag = a->n < b->n ? -1 : 1;
    return sa * mag;
}

/* A bound, as the shortest decimal that reads back as it (0.001 for 1e-3, not the double's exact expansion): the
 * range an option documents.  `text` holds the digits d points into. */
static void plain_decimal_of(double x, char text[40], plain_decimal *d) {
    for (int prec = 0; prec <= 16; prec++) {
        snprintf(text, 40, "%.*e", prec, x);
        if (strtod(text, NULL) == x) break;
    }
    (void)plain_decimal_read(text, 1, d);
}

/* 1 when v lies in [lo, hi], the bounds read as their shortest decimals. */
static int plain_in_range(const plain_decimal *v, double lo, double hi) {
    char lo_text[40], hi_text[40];
    plain_decimal l, h;
    plain_decimal_of(lo, lo_text, &l);
    plain_decimal_of(hi, hi_text, &h);
    return plain_decimal_cmp(v, &l) >= 0 && plain_decimal_cmp(v, &h) <= 0;
}

/* A number in [lo, hi], written plainly and compared exactly as typed (1.0000000000000000001 is above 1 though a
 * double rounds it to 1), then rounded once to the nearest float.  A value too small for a double or a float
 * (1e-320) is in a range that holds 0 and rounds to 0, as every value rounds to the float it is nearest. */
static int parse_f32(const char *name, const char *s, double lo, double hi, float *out) {
    plain_decimal v;
    if (plain_decimal_read(s, lo < 0, &v)) {
        fail_line("%s must be a number in [%g, %g] written plainly (decimal digits, a '.', an exponent such as e-3), "
                  "got '%s'",
                  name, lo, hi, s);
        return -1;
    }
    if (!plain_in_range(&v, lo, hi)) {
        fail_line("%s must be a number in [%g, %g], got '%s'", name, lo, hi, s);
        return -1;
    }
    *out = strtof(s, NULL);
    return 0;
}

static int apply_threads(const opt *opts, int nopts) {
    const char *t = get(opts, nopts, "--threads");
    if (!t) return 0;
    int64_t n;
    if (parse_i64("--threads", t, 1, 1024, &n)) return -1;
    h3s_set_num_threads((int)n);
    return 0;
}

/* --sp A --tp B: run the passes over the ranks mpirun started (A x B of them; docs/cli.md "Parallel runs").  Without
 * them, or with 1 x 1, a process launched alone runs alone; a process that mpirun started as one of several ranks
 * must be told how to split (every rank would otherwise compute and write the same file).  Returns 0, or the exit
 * code of a refusal. */
static int apply_parallel(const opt *opts, int nopts, h3s_backend_kind kind) {
    int64_t sp = 1, tp = 1;
    if (get(opts, nopts, "--sp") && parse_i64("--sp", get(opts, nopts, "--sp"), 1, 4096, &sp)) return EXIT_USAGE;
    if (get(opts, nopts, "--tp") && parse_i64("--tp", get(opts, nopts, "--tp"), 1, 4096, &tp)) return EXIT_USAGE;
    int world = launched("SIZE");
    if (world < 1) world = 1;
    if (sp * tp == 1 && world == 1) return 0;
    if (kind != H3S_BACKEND_CPU) {
        fail_line("--sp %lld --tp %lld: parallel runs use the strict CPU backend only (--device cpu)", (long long)sp,
                  (long long)tp);
        return EXIT_SYSTEM;
    }
    if (!h3s_comm_mpi_built()) {
        h3s_comm_mpi_world(NULL, NULL, &g_comm); /* leaves the reason */
        fail_line("--sp %lld --tp %lld: %s", (long long)sp, (long long)tp, h3s_last_error());
        return EXIT_SYSTEM;
    }
    if (sp * tp != world) {
        if (world == 1)
            fail_line("--sp %lld x --tp %lld needs %lld ranks: run it under mpirun -np %lld", (long long)sp,
                      (long long)tp, (long long)(sp * tp), (long long)(sp * tp));
        else
            fail_line(
                "mpirun started %d ranks but --sp %lld x --tp %lld = %lld (give --sp and --tp whose product is %d)",
                world, (long long)sp, (long long)tp, (long long)(sp * tp), world);
        return EXIT_USAGE;
    }
    h3s_status st = h3s_comm_mpi_world(NULL, NULL, &g_comm);
    if (st != H3S_OK) {
        fail_line("%s (%s)", h3s_last_error(), h3s_status_name(st));
        return EXIT_SYSTEM;
    }
    g_rank = h3s_comm_rank(g_comm);
    st = agree(h3s_set_parallel(g_comm, (int)sp, (int)tp));
    if (st != H3S_OK) {
        fail_line("%s (%s)", h3s_last_error(), h3s_status_name(st));
        return st == H3S_ERR_UNSUPPORTED ? EXIT_SYSTEM : EXIT_USAGE;
    }
    g_sp = (int)sp;
    g_tp = (int)tp;
    return 0;
}

/* A parallel run needs the same bytes on every rank: this rank's digest of `what` against rank 0's.  Outside a
 * parallel run, H3S_OK. */
static h3s_status same_on_every_rank(const char *what, const char hex[65]) {
    if (!g_comm) return H3S_OK;
    int n = h3s_comm_size(g_comm);
    char *all = n > 0 ? calloc((size_t)n, 65) : NULL;
    size_t *v = n > 0 ? calloc((size_t)n * 2, sizeof *v) : NULL;
    h3s_status st =
        all && v ? H3S_OK : h3s_set_error(H3S_ERR_NOMEM, "out of memory gathering the digests of %d ranks", n);
    for (int r = 0; st == H3S_OK && r < n; r++) {
        v[r] = 65;
        v[n + r] = (size_t)r * 65;
    }
    if (st == H3S_OK) st = h3s_comm_allgatherv(g_comm, hex, all, v, v + n);
    /* each rank judges its own bytes, so the agreed message names the rank that differs */
    if (st == H3S_OK && memcmp(all + (size_t)g_rank * 65, all, 64))
        st = h3s_set_error(H3S_ERR_FORMAT, "%s differs from rank 0's (SHA-256 %.12s... against %.12s...)", what,
                           all + (size_t)g_rank * 65, all);
    free(all);
    free(v);
    return st;
}

/* SHA-256 over every weight's name and bytes, in canonical order. */
static h3s_status weights_sha256(const h3s_weights *w, char hex[65]) {
    h3s_sha256_ctx *ctx = NULL;
    h3s_status st = h3s_sha256_begin(&ctx);
    if (st != H3S_OK) return st;
    for (int64_t i = 0; st == H3S_OK && i < h3s_weights_count(w); i++) {
        const char *name = NULL;
        const h3s_tensor *t = h3s_weights_at(w, i, &name);
        if (!t || !name) {
            st = h3s_set_error(H3S_ERR_INVALID, "weights: parameter %lld missing", (long long)i);
            break;
        }
        st = h3s_sha256_update(ctx, name, strlen(name) + 1);
        if (st == H3S_OK) st = h3s_sha256_update(ctx, t->data, h3s_tensor_nbytes(t));
    }
    h3s_status end = h3s_sha256_end(ctx, hex);
    return st != H3S_OK ? st : end;
}

/* Every file a parallel run reads, checked equal on every rank (agreed: a rank with other bytes fails every rank). */
static h3s_status same_inputs(const h3s_weights *w, const char *const *paths, const char *const *whats, int n) {
    if (!g_comm) return H3S_OK;
    char hex[65] = "";
    h3s_status st = w ? weights_sha256(w, hex) : H3S_OK;
    st = agree(st);
    if (st == H3S_OK && w) st = agree(same_on_every_rank("model weights", hex));
    for (int i = 0; st == H3S_OK && i < n; i++) {
        if (!paths[i]) continue;
        memset(hex, 0, sizeof hex);
        st = agree(h3s_file_sha256_hex(paths[i], hex));
        if (st == H3S_OK) st = agree(same_on_every_rank(whats[i], hex));
    }
    return st;
}

/* How a parallel run was cut (metadata only: the tensors do not depend on it). */
static void add_parallel_provenance(provenance *p) {
    if (g_comm) provenance_add(p, "parallel", "sp %d x tp %d (%d ranks, MPI)", g_sp, g_tp, h3s_comm_size(g_comm));
}

/* A pass failed on this rank while the others may wait for it inside a collective: say so and end every rank. */
static int fail_parallel_pass(h3s_status st) {
    int code = exit_code_for(st);
    char *esc = h3s_escape_dup(h3s_last_error());
    fprintf(stderr, "h3strict %s: rank %d: %s (%s)\n", g_cmd, g_rank, esc ? esc : "?", h3s_status_name(st));
    h3s_free(esc);
    fflush(stderr);
    h3s_comm_abort(g_comm, code ? code : EXIT_SYSTEM);
    return code;
}

/* --grad-operands bf16|split: how dy enters the tensor cores in the CUDA backward (the CPU backend
 * always multiplies the exact F32 dy). */
static int apply_grad_operands(const opt *opts, int nopts) {
    const char *g = get(opts, nopts, "--grad-operands");
    if (!g) return 0;
    h3s_grad_operands mode;
    if (h3s_grad_operands_parse(g, &mode) != H3S_OK || h3s_set_grad_operands(mode) != H3S_OK) {
        fail_line("--grad-operands must be bf16 or split, got '%s'", g);
        return -1;
    }
    return 0;
}

/* --recompute blocks|none (default none): per-block activation recomputation of every model the command creates
 * (h3s_set_recompute); the memory estimates count it. */
static h3s_recompute g_recompute = H3S_RECOMPUTE_NONE;

static int apply_recompute(const opt *opts, int nopts) {
    const char *r = get(opts, nopts, "--recompute");
    if (!r) return 0;
    if (h3s_recompute_parse(r, &g_recompute) != H3S_OK || h3s_set_recompute(g_recompute) != H3S_OK)
        return fail_line("--recompute must be blocks or none, got '%s'", r), -1;
    return 0;
}

static int parse_device(const opt *opts, int nopts, h3s_backend_kind *kind) {
    const char *d = get(opts, nopts, "--device");
    *kind = H3S_BACKEND_CPU;
    if (!d || !strcmp(d, "cpu")) return 0;
    if (!strcmp(d, "cuda")) {
        *kind = H3S_BACKEND_CUDA;
        return 0;
    }
    fail_line("--device must be cpu or cuda, got '%s'", d);
    return -1;
}

/* ------------------------------------------------------------------ size guards ------- */

/* Largest inputs file written without --force (docs/cli.md). */
#define INPUTS_LIMIT_BYTES ((double)(512ull << 20))

static void format_bytes(double b, char *out, size_t size) {
    const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (b >= 1024 && u < 5) {
        b /= 1024;
        u++;
    }
    snprintf(out, size, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
}

/* H3S_MEMORY_LIMIT in bytes, as check_environment read it; 0 when not set. */
static double g_memory_limit;

/* The variables of the environment a command reads (docs/cli.md), checked before it runs: one that is set (and not
 * empty) but malformed would otherwise be ignored, and the run would go on with a default the user did not mean.
 * H3S_MEMORY_LIMIT is a whole number of bytes, more than 0, optionally with a binary suffix K, M, G or T;
 * H3S_PROGRESS_AFTER and H3S_PROGRESS_EVERY are seconds in [0, 1000000], written as the options' numbers are.  0, or
 * -1 after printing the refusal. */
static int check_environment(void) {
    g_memory_limit = 0;
    const char *mem = getenv("H3S_MEMORY_LIMIT");
    if (mem && *mem) {
        char *p = NULL;
        errno = 0;
        unsigned long long v = is_digit(mem[0]) ? strtoull(mem, &p, 10) : 0;
        int bad = !p || errno || v == 0;
        static const char units[] = "KMGT";
        const char *unit = !bad && *p ? strchr(units, *p) : NULL;
        if (unit) {
            for (const char *u = units; u <= unit && !bad; u++) {
                bad = v > ULLONG_MAX / 1024;
                v *= 1024;
            }
            p++;
        }
        if (bad || *p)
            return fail_line("H3S_MEMORY_LIMIT must be a whole number of bytes above 0 (digits, optionally followed "
                             "by K, M, G or T: times 1024, 1024^2, 1024^3, 1024^4; below 2^64), got '%s'",
                             mem),
                   -1;
        g_memory_limit = (double)v;
    }
    const char *names[2] = {"H3S_PROGRESS_AFTER", "H3S_PROGRESS_EVERY"};
    double seconds[2] = {-1, -1};
    for (int i = 0; i < 2; i++) {
        const char *e = getenv(names[i]);
        if (!e || !*e) continue;
        plain_decimal d;
        if (plain_decimal_read(e, 0, &d) || !plain_in_range(&d, 0, 1e6))
            return fail_line("%s must be a number of seconds in [0, 1000000] written plainly (decimal digits, a '.', "
                             "an exponent such as e-3), got '%s'",
                             names[i], e),
                   -1;
        seconds[i] = strtod(e, NULL);
    }
    progress_set_delays(seconds[0], seconds[1]);
    return 0;
}

/* The machine's memory, or H3S_MEMORY_LIMIT (bytes) where a smaller share is all a run may use. */
static double physical_memory_bytes(void) {
    if (g_memory_limit > 0) return g_memory_limit;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : 0;
}

/* Peak memory of a forward + backward, estimated (docs/ARCHITECTURE.md, "The graph and its tape"; the same
 * formula as scripts/memory_plan.py).  Per packed row and block the tape keeps, without recomputation, the BF16
 * activations of the block (6H + 8 heads*D + 3F values, and 2 F32 softmax statistics per head); with
 * --recompute blocks only the block's input (H BF16 values), plus one block's activations rebuilt at a time.  The
 * backward holds one block's F32 gradients at a time (10H + 8 heads*D + 3F per row; gpu, with BF16 gradient operands
 * and no node hook: 8H + 5 heads*D + F F32 values, since df, du, dout_o, dq, dk and dv exist only as the BF16 copies
 * their linears read, 2H + 3 heads*D + 2F BF16 values) and the F32 gradient of every
 * parameter asked for.  activations: bytes of the tape and the backward's temporaries (device memory with --device
 * cuda); params: bytes of the F32 parameter gradients asked for (host memory). */
typedef struct memory_estimate {
    double activations, params;
} memory_estimate;

static memory_estimate estimate_backward_memory(const h3s_config *c, int64_t batch, int64_t S, int64_t Nt,
                                                int recompute, int gpu, double param_elems) {
    double H = (double)c->hidden_size, F = (double)c->ffn_dim;
    double hd = (double)c->num_attention_heads * (double)c->attention_head_dim;
    double per_row = (6.0 * H + 8.0 * hd + 3.0 * F) * 2 + 2.0 * (double)c->num_attention_heads * 4;
    double grad_row =
        gpu ? (8.0 * H + 5.0 * hd + F) * 4 + (2.0 * H + 3.0 * hd + 2.0 * F) * 2 : (10.0 * H + 8.0 * hd + 3.0 * F) * 4;
    double b = (double)batch, block_rows = b * (double)S, text_rows = b * (double)Nt;
    double rows = block_rows * (double)c->num_layers + text_rows * (double)c->num_refiner_layers;
    double widest = block_rows > text_rows ? block_rows : text_rows;
    memory_estimate e;
    e.activations = (recompute ? rows * H * 2 + widest * per_row : rows * per_row) + widest * grad_row;
    e.params = param_elems * 4;
    return e;
}

/* Refused before anything runs when the host part exceeds the memory, unless --force: the activations (unless they
 * live on the device) and the parameter gradients; the FP64 golden keeps F64 activations (4x BF16), an F64 copy of
 * the weights and F64 gradients.  Each rank of a parallel run judges its own memory and the verdict is agreed (a
 * refusal is every rank's, printed once).  Returns 0, or -1 after printing the refusal. */
static int backward_memory_guard(const char *what, const h3s_weights *w, h3s_backend_kind kind, int64_t batch,
                                 int64_t S, int64_t Nt, int golden, int force) {
    const h3s_config *c = h3s_weights_config(w);
    double params = 0;
    for (int64_t i = 0; i < h3s_weights_count(w); i++)
        params += (double)h3s_tensor_numel(h3s_weights_at(w, i, NULL));
    memory_estimate e = estimate_backward_memory(c, batch, S, Nt, g_recompute == H3S_RECOMPUTE_BLOCKS,
                                                 kind == H3S_BACKEND_CUDA, params);
    double strict = (kind == H3S_BACKEND_CUDA ? 0 : e.activations) + e.params;
    double bytes = golden ? e.activations * 4 + params * 16 : strict;
    double mem = physical_memory_bytes();
    h3s_status st = H3S_OK;
    if (!force && mem > 0 && bytes > mem) {
        char need[32], have[32];
        format_bytes(bytes, need, sizeof need);
        format_bytes(mem, have, sizeof have);
        st = h3s_set_error(H3S_ERR_INVALID,
                           "%s needs about %s (activations kept for the backward and F32 parameter gradients), more "
                           "than the %s of memory; nothing run (--force runs it anyway)",
                           what, need, have);
    }
    if (agree(st) == H3S_OK) return 0;
    return fail_line("%s", h3s_last_error()), -1;
}

/* The host's peak resident set of this process so far (getrusage; Linux reports KiB), 0 when unknown. */
static double host_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_maxrss * 1024.0;
}

/* A request built in memory: refused when it exceeds the machine's memory, or `limit` without --force. */
static int memory_guard(const char *what, double bytes, double limit, int force) {
    char need[32], have[32];
    format_bytes(bytes, need, sizeof need);
    double mem = physical_memory_bytes();
    if (mem > 0 && bytes > mem) {
        format_bytes(mem, have, sizeof have);
        return fail_line("%s would take %s, more than this machine's memory (%s); nothing written", what, need, have),
               -1;
    }
    if (bytes > limit && !force) {
        format_bytes(limit, have, sizeof have);
        return fail_line("%s would take %s, over the %s limit; nothing written (--force writes it anyway)", what, need,
                         have),
               -1;
    }
    return 0;
}

/* Free space where `path` (a file or directory to be created) will be written; < 0 when unknown. */
static double free_space_for(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        dir[--len] = 0;
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0) return -1;
    return (double)sv.f_bavail * (double)sv.f_frsize;
}

/* ------------------------------------------------------------------ init -------------- */

static void init_progress(void *ctx, uint64_t done, uint64_t total) {
    (void)ctx;
    if (total) progress_fraction((double)done / (double)total);
}

static int cmd_init(int argc, char **argv) {
    opt o[] = {{"--preset", "tiny|small|h3-33b", 1, "tiny (tests), small (CPU benchmarks), h3-33b (released)", NULL},
               {"--layers", "N", 0, "number of transformer blocks (default: the preset's)", NULL},
               {"--seed", "N", 1, "seed of the weights: the same seed gives the same bytes on every machine", NULL},
               {"--out", "DIR", 1, "model directory to write (absent, empty, or a model directory to replace)", NULL}};
    int n = sizeof o / sizeof o[0];
    const char *preset, *seed_s, *out;
    PARSE_OR_RETURN(argc, argv, o);
    if (need(o, n, "--preset", &preset) || need(o, n, "--seed", &seed_s) || need(o, n, "--out", &out))
        return EXIT_USAGE;
    uint64_t seed;
    int64_t layers = -1;
    if (parse_u64("--seed", seed_s, &seed)) return EXIT_USAGE;
    if (get(o, n, "--layers") && parse_i64("--layers", get(o, n, "--layers"), 1, 1000, &layers)) return EXIT_USAGE;
    h3s_config c;
    h3s_status st = h3s_config_preset(preset, layers, &c);
    if (st != H3S_OK) return fail_status(st);
    /* the weights are generated in bounded pieces: disk, not memory, is what a large preset needs */
    h3s_param_spec *specs = NULL;
    int64_t nspecs = 0;
    st = h3s_param_specs(&c, &specs, &nspecs);
    if (st != H3S_OK) return fail_status(st);
    double bytes = 0;
    for (int64_t i = 0; i < nspecs; i++)
        bytes += (double)h3s_param_spec_numel(&specs[i]) * (double)h3s_dtype_size(specs[i].dtype);
    h3s_free(specs);
    char size[32], room[32];
    format_bytes(bytes, size, sizeof size);
    double free_bytes = free_space_for(out);
    if (free_bytes >= 0 && bytes > free_bytes) {
        format_bytes(free_bytes, room, sizeof room);
        fail_line("the %s model takes %s; only %s free where %s would be written; nothing written", preset, size, room,
                  out);
        return EXIT_SYSTEM;
    }
    progress_stage(PHASE_WRITE, "writing %s model (%s) to %s", preset, size, out);
    st = h3s_model_init_config_progress(&c, seed, out, init_progress, NULL);
    if (st != H3S_OK) return fail_status(st);
    progress_end();
    printf("initialised %s model (hidden %lld, %lld x %lld heads, %lld blocks, %lld refiner) seed %llu in %s\n", preset,
           (long long)c.hidden_size, (long long)c.num_attention_heads, (long long)c.attention_head_dim,
           (long long)c.num_layers, (long long)c.num_refiner_layers, (unsigned long long)seed, out);
    return 0;
}

/* ------------------------------------------------------------------ inputs ------------ */

static int parse_keyframes(const char *s, int *first, int *last) {
    *first = *last = 0;
    if (!s) return 0;
    /* comma-separated tokens, read in place: no copy, so nothing is ever cut */
    for (const char *p = s;;) {
        size_t n = strcspn(p, ",");
        if (n == 5 && !strncmp(p, "first", 5))
            *first = 1;
        else if (n == 4 && !strncmp(p, "last", 4))
            *last = 1;
        else
            return fail_line("--keyframes takes first, last or first,last; got '%s'", s), -1;
        if (!p[n]) break;
        p += n + 1;
    }
    return 0;
}

/* Bytes of the inputs file (and about the memory it is built in), from the options alone: refused before
 * anything is built when it is too large.  Sizes the layout cannot build are left to h3s_layout_count. */
static int inputs_size_guard(const h3s_config *c, const h3s_layout_opts *lo, int64_t batch, int with_mask, int force) {
    if (c->patch_size[1] <= 0 || c->patch_size[2] <= 0) return 0;
    double rows_per_frame =
        (double)(lo->latent_height / c->patch_size[1]) * (double)(lo->latent_width / c->patch_size[2]);
    double nv = rows_per_frame * (double)(lo->frames + lo->keyframe_first + lo->keyframe_last);
    double na = 2.0 * (double)lo->audio_latents, nt = (double)lo->text_tokens, S = nv + na + nt;
    if (lo->pad_to > 0) S += (double)lo->pad_to;
    double per_item =
        nv * (double)h3s_config_video_width(c) + na * (double)c->audio_in_channels + nt * (double)c->text_dim;
    double bytes = (double)batch * per_item * 4 + S * (8 + 8 + 3 * 8) + (nv + na + nt) * 8;
    if (with_mask) bytes += (double)batch * S;
    return memory_guard("this inputs file", bytes, INPUTS_LIMIT_BYTES, force);
}

static int cmd_inputs(int argc, char **argv) {
    opt o[] = {
        {"--model", "DIR", 1, "model directory (its config sets the row widths)", NULL},
        {"--seed", "N", 1, "seed of the latents and text features; item 0 depends on it alone", NULL},
        {"--batch", "B", 0, "requests in the file, one layout shared by all (default 1)", NULL},
        {"--text", "T", 0, "text rows (default 6)", NULL},
        {"--frames", "F", 0, "latent video frames (default 2)", NULL},
        {"--latent-height", "H", 0, "latent height, a multiple of 2 (default 4)", NULL},
        {"--latent-width", "W", 0, "latent width, a multiple of 2 (default 6)", NULL},
        {"--audio-latents", "A", 0, "audio latents; 2 rows each (default 4)", NULL},
        {"--keyframes", "first,last", 0, "condition frames: first, last or first,last (default none: t2va)", NULL},
        {"--pad-to", "N", 0, "append padding rows (tag -1) up to a multiple of N rows (default 0: none)", NULL},
        {"--t-video", "T", 0, "timestep of the video and text rows, in [0, 1] (default 0.25)", NULL},
        {"--t-audio", "T", 0, "timestep of the audio rows, in [0, 1] (default 0.6)", NULL},
        {"--attention-mask", NULL, 0, "also write attention_mask [B, S] (false on padding rows)", NULL},
        {"--force", NULL, 0, "write a file over the 512 MiB size limit (never more than the memory)", NULL},
        {"--out", "IN.safetensors", 1, "inputs file to write", NULL}};
    int n = sizeof o / sizeof o[0];
    const char *model, *seed_s, *out;
    PARSE_OR_RETURN(argc, argv, o);
    if (need(o, n, "--model", &model) || need(o, n, "--seed", &seed_s) || need(o, n, "--out", &out)) return EXIT_USAGE;
    uint64_t seed;
    int64_t batch = 1;
    h3s_layout_opts lo = {6, 2, 4, 6, 4, 0, 0, 0};
    float tv = 0.25f, ta = 0.6f;
    if (parse_u64("--seed", seed_s, &seed)) return EXIT_USAGE;
    struct {
        const char *name;
        int64_t *dst;
        int64_t lo;
    } ints[] = {{"--batch", &batch, 1},
                {"--text", &lo.text_tokens, 1},
                {"--frames", &lo.frames, 1},
                {"--latent-height", &lo.latent_height, 1},
                {"--latent-width", &lo.latent_width, 1},
                {"--audio-latents", &lo.audio_latents, 1},
                {"--pad-to", &lo.pad_to, 0}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const char *v = get(o, n, ints[i].name);
        if (v && parse_i64(ints[i].name, v, ints[i].lo, 1 << 24, ints[i].dst)) return EXIT_USAGE;
    }
    if (parse_keyframes(get(o, n, "--keyframes"), &lo.keyframe_first, &lo.keyframe_last)) return EXIT_USAGE;
    if (check_output(out, model, NULL, NULL)) return check_output_code;
    if (get(o, n, "--t-video") && parse_f32("--t-video", get(o, n, "--t-video"), 0, 1, &tv)) return EXIT_USAGE;
    if (get(o, n, "--t-audio") && parse_f32("--t-audio", get(o, n, "--t-audio"), 0, 1, &ta)) return EXIT_USAGE;

    h3s_weights *w = NULL;
    progress_stage(PHASE_READ, "loading model %s", model);
    h3s_status st = h3s_weights_load(model, &w);
    if (st != H3S_OK) return fail_status(st);
    const h3s_config *c = h3s_weights_config(w);
    if (inputs_size_guard(c, &lo, batch, get(o, n, "--attention-mask") != NULL, get(o, n, "--force") != NULL)) {
        h3s_weights_free(w);
        return EXIT_USAGE;
    }
    progress_stage(PHASE_RUN, "building the layout and seeded inputs");
    h3s_layout_rows lay;
    memset(&lay, 0, sizeof lay);
    h3s_inputs in;
    memset(&in, 0, sizeof in);
    st = h3s_layout_count(&lo, c->patch_size[1], c->patch_size[2], &lay);
    if (st == H3S_OK) st = h3s_inputs_seeded(c, &lo, batch, seed, tv, ta, &in);
    int with_mask = get(o, n, "--attention-mask") != NULL;
    if (st == H3S_OK && with_mask) {
        int64_t s2[2] = {batch, lay.rows};
        st = h3s_tensor_alloc(&in.attention_mask, H3S_BOOL, 2, s2);
        const int64_t *tags = in.token_tags.data;
        for (int64_t b = 0; st == H3S_OK && b < batch; b++)
            for (int64_t s = 0; s < lay.rows; s++)
                ((uint8_t *)in.attention_mask.data)[b * lay.rows + s] = tags[s] != -1;
    }
    provenance prov;
    provenance_init(&prov, g_command_line ? g_command_line : "");
    if (st == H3S_OK) st = provenance_add_model(&prov, model, c);
    provenance_add(&prov, "seed", "%llu", (unsigned long long)seed);
    if (st == H3S_OK) {
        progress_stage(PHASE_WRITE, "writing %s", out);
        st = h3s_inputs_write(out, &in, provenance_meta(&prov), prov.n);
    }
    if (st == H3S_OK) progress_end();
    if (st == H3S_OK)
        printf("wrote %s: batch %lld, S %lld rows (%lld text, %lld video of which %lld condition, %lld audio, %lld "
               "padding), %lld timesteps\n",
               out, (long long)batch, (long long)lay.rows, (long long)lay.text, (long long)lay.video,
               (long long)lay.condition, (long long)lay.audio, (long long)lay.padding, (long long)in.timestep.shape[0]);
    h3s_inputs_free(&in);
    h3s_weights_free(w);
    return st == H3S_OK ? 0 : fail_status(st);
}

/* ------------------------------------------------------------------ forward / grad ---- */

typedef struct loaded {
    h3s_weights *w;
    h3s_st_file *inputs_file;
    h3s_inputs in;
    h3s_model *model;
    provenance prov;
} loaded;

static void loaded_free(loaded *l) {
    h3s_model_free(l->model);
    h3s_st_close(l->inputs_file);
    h3s_weights_free(l->w);
}

/* Progress of a forward or backward pass: the model's node hook counts the nodes run (on the GPU, the nodes
 * queued).  Both counts follow from the config (docs/strict.md section 4): the backward emits a gradient for
 * every forward node but the rotary table and the sinusoid, three from each attention (q, k, v), then the
 * parameter gradients, which are quick and not counted. */
typedef struct node_counter {
    int64_t done, total;
} node_counter;

static int64_t forward_nodes(const h3s_config *c) {
    return 6 + 14 * c->num_refiner_layers + 2 + 17 * c->num_layers + 3;
}

static int64_t backward_nodes(const h3s_config *c) {
    return forward_nodes(c) + 2 * (c->num_layers + c->num_refiner_layers) - 2;
}

static h3s_status count_node(void *ctx, const char *name, h3s_tensor *out, int batched, int64_t rows_per_item) {
    (void)out, (void)batched, (void)rows_per_item;
    node_counter *nc = ctx;
    if (!strncmp(name, "param.", 6)) return H3S_OK;
    nc->done++;
    double f = (double)nc->done / (double)(nc->total > 0 ? nc->total : 1);
    progress_fraction(f < 0.99 ? f : 0.99);
    return H3S_OK;
}

static h3s_status load_all(const char *model, const char *inputs, h3s_backend_kind kind, loaded *l) {
    memset(l, 0, sizeof *l);
    progress_stage(PHASE_READ, "loading model %s", model);
    h3s_status st = h3s_weights_load(model, &l->w);
    if (st != H3S_OK) return st;
    progress_stage(PHASE_READ, "reading and validating %s", inputs);
    st = h3s_st_open(inputs, &l->inputs_file);
    if (st == H3S_OK) st = h3s_inputs_from_file(l->inputs_file, &l->in);
    int64_t batch;
    if (st == H3S_OK) st = h3s_inputs_validate(h3s_weights_config(l->w), &l->in, &batch);
    provenance_init(&l->prov, g_command_line ? g_command_line : "");
    /* only after the inputs loaded: describing the device sets the last error, which must stay the file's */
    if (st == H3S_OK) provenance_add_backend(&l->prov, kind);
    if (st == H3S_OK) st = provenance_add_model(&l->prov, model, h3s_weights_config(l->w));
    if (st == H3S_OK) st = provenance_add_file(&l->prov, "inputs_sha256", inputs);
    return st;
}

/* After load_all, agreed: the same inputs on every rank, a cut the inputs allow (h3s_parallel_check: a pass refusing
 * it would fail inside its collectives, on every rank at once), then the model, whose creation is collective in a
 * parallel run (every rank's status agreed before the set-up). */
static h3s_status prepare_model(loaded *l, const char *const *paths, const char *const *whats, int n,
                                h3s_backend_kind kind) {
    h3s_status st = same_inputs(l->w, paths, whats, n);
    if (st != H3S_OK) return st;
    /* from here a refusal is of the command line (the cut), not of the files */
    progress_stage(PHASE_RUN, "preparing the %s backend", h3s_backend_name(kind));
    if (g_comm)
        st = agree(h3s_parallel_check(h3s_weights_config(l->w), g_sp, g_tp,
                                      l->in.hidden_states.shape[0] * l->in.token_tags.shape[0]));
    if (st != H3S_OK) return st;
    return h3s_model_create(l->w, kind, &l->model);
}

static int cmd_forward(int argc, char **argv) {
    opt o[] = {opt_model,
               {"--inputs", "IN.safetensors", 1, "forward arguments under their diffusers names", NULL},
               {"--out", "OUT.safetensors", 1, "output file: sample and audio_sample, F32", NULL},
               opt_device,
               opt_sp,
               opt_tp,
               opt_threads};
    int n = sizeof o / sizeof o[0];
    const char *model, *inputs, *out;
    h3s_backend_kind kind;
    PARSE_OR_RETURN(argc, argv, o);
    if (need(o, n, "--model", &model) || need(o, n, "--inputs", &inputs) || need(o, n, "--out", &out) ||
        parse_device(o, n, &kind) || apply_threads(o, n))
        return EXIT_USAGE;
    int prc = apply_parallel(o, n, kind);
    if (prc) return prc;
    if (check_output(out, model, inputs, NULL)) return check_output_code;
    loaded l;
    h3s_status st = agree(load_all(model, inputs, kind, &l));
    const char *paths[1] = {inputs}, *whats[1] = {"inputs file"};
    if (st == H3S_OK) st = prepare_model(&l, paths, whats, 1, kind);
    h3s_tensor sample = {0}, audio = {0};
    if (st != H3S_OK) {
        loaded_free(&l);
        return fail_status(st);
    }
    add_parallel_provenance(&l.prov);
    progress_stage(PHASE_RUN, "forward");
    node_counter nc = {0, forward_nodes(h3s_weights_config(l.w))};
    /* in a parallel run the progress hook would gather every node's rows: no hook */
    st = h3s_model_forward(l.model, &l.in, g_comm ? NULL : count_node, &nc, NULL, &sample, &audio);
    if (st != H3S_OK && g_comm) return fail_parallel_pass(st);
    if (st == H3S_OK) {
        progress_stage(PHASE_WRITE, "writing %s", out);
        h3s_st_entry e[2] = {{"sample", sample}, {"audio_sample", audio}};
        if (g_rank == 0) st = h3s_st_write_meta(out, e, 2, provenance_meta(&l.prov), l.prov.n);
        st = agree(st);
    }
    if (st == H3S_OK) progress_end();
    if (st == H3S_OK)
        printf("wrote %s: sample [%lld, %lld, %lld], audio_sample [%lld, %lld, %lld] (%s)\n", out,
               (long long)sample.shape[0], (long long)sample.shape[1], (long long)sample.shape[2],
               (long long)audio.shape[0], (long long)audio.shape[1], (long long)audio.shape[2], h3s_backend_name(kind));
    h3s_tensor_free(&sample);
    h3s_tensor_free(&audio);
    loaded_free(&l);
    return st == H3S_OK ? 0 : fail_status(st);
}

/* "[2, 12, 24]": a shape as the messages write it. */
static void format_shape(const h3s_tensor *t, char *out, size_t size) {
    size_t used = (size_t)snprintf(out, size, "[");
    for (int d = 0; d < t->ndim && used < size; d++)
        used += (size_t)snprintf(out + used, size - used, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (used < size) snprintf(out + used, size - used, "]");
}

/* The cotangent file of grad: 'sample' and 'audio_sample' alone, each shaped like the output of `in` (read from
 * inputs_path) it is the gradient of, F32 and finite.  Checked here, before the forward runs, so that a wrong file is a
 * bad input file (exit 3) named with its shapes, not a failed backward. */
static h3s_status read_cotangent(const char *path, const h3s_inputs *in, const char *inputs_path, h3s_st_file **f,
                                 const h3s_tensor **ds, const h3s_tensor **da) {
    h3s_status opened = h3s_st_open(path, f);
    if (opened != H3S_OK) return opened;
    const h3s_st_entry *es = h3s_st_find(*f, "sample"), *ea = h3s_st_find(*f, "audio_sample");
    if (!es || !ea) return h3s_set_error(H3S_ERR_FORMAT, "cotangent %s must hold 'sample' and 'audio_sample'", path);
    for (int64_t i = 0; i < h3s_st_count(*f); i++) {
        const char *name = h3s_st_entry_at(*f, i)->name;
        if (strcmp(name, "sample") && strcmp(name, "audio_sample"))
            return h3s_set_error(H3S_ERR_FORMAT, "cotangent %s: unexpected tensor '%s'", path, name);
    }
    /* the outputs are [B, Nv, video width] and [B, Na, audio width]: the inputs' latents' shapes */
    const h3s_st_entry *both[2] = {es, ea};
    const h3s_tensor *like[2] = {&in->hidden_states, &in->audio_hidden_states};
    for (int k = 0; k < 2; k++) {
        const h3s_tensor *t = &both[k]->tensor;
        int same = t->ndim == like[k]->ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = t->shape[d] == like[k]->shape[d];
        if (!same) {
            char got[160], want[160];
            format_shape(t, got, sizeof got);
            format_shape(like[k], want, sizeof want);
            return h3s_set_error(H3S_ERR_SHAPE, "cotangent %s: '%s' is %s, but the output '%s' of %s is %s", path,
                                 both[k]->name, got, both[k]->name, inputs_path, want);
        }
    }
    if (es->tensor.dtype != H3S_F32 || ea->tensor.dtype != H3S_F32)
        return h3s_set_error(H3S_ERR_DTYPE, "cotangent %s: 'sample' and 'audio_sample' must be F32", path);
    /* checked again by the backward; here it is still a bad input file (exit 3), not a bad run */
    for (int k = 0; k < 2; k++) {
        int64_t bad = h3s_tensor_first_nonfinite(&both[k]->tensor);
        if (bad >= 0)
            return h3s_set_error(H3S_ERR_INVALID, "cotangent %s: %s[%lld] is not finite", path, both[k]->name,
                                 (long long)bad);
    }
    *ds = &es->tensor;
    *da = &ea->tensor;
    return H3S_OK;
}

/* The input gradients and the parameter gradients computed (those not asked for have no data and are left out). */
static h3s_status write_grads(const char *path, const h3s_grads *g, provenance *prov) {
    int64_t n = 3;
    h3s_st_entry *e = calloc((size_t)(3 + g->count), sizeof *e);
    if (!e) return h3s_set_error(H3S_ERR_NOMEM, "out of memory for %lld gradient entries", (long long)(3 + g->count));
    e[0] = (h3s_st_entry){"hidden_states", g->hidden_states};
    e[1] = (h3s_st_entry){"audio_hidden_states", g->audio_hidden_states};
    e[2] = (h3s_st_entry){"encoder_hidden_states", g->encoder_hidden_states};
    for (int64_t i = 0; i < g->count; i++)
        if (g->params[i].data) e[n++] = (h3s_st_entry){g->names[i], g->params[i]};
    h3s_status st = h3s_st_write_meta(path, e, n, provenance_meta(prov), prov->n);
    free(e);
    return st;
}

/* --param-grads all|none|GLOB: which parameter gradients grad computes and writes.  *want (the caller's, free) gets
 * one byte per parameter of the model in canonical order, or NULL for all; *count the number asked for and
 * *elems their elements.  A pattern (fnmatch, over the checkpoint names) that matches nothing is a usage error. */
static int parse_param_grads(const char *spec, const h3s_model *m, unsigned char **want, int64_t *count,
                             double *elems) {
    int64_t n = h3s_model_param_count(m);
    *want = NULL;
    *count = 0;
    *elems = 0;
    int all = !spec || !strcmp(spec, "all"), none = spec && !strcmp(spec, "none");
    unsigned char *w = all ? NULL : calloc((size_t)n + 1, 1);
    if (!all && !w) return fail_line("out of memory for %lld parameter flags", (long long)n), -1;
    for (int64_t i = 0; i < n; i++) {
        const char *name = NULL;
        h3s_tensor view;
        if (h3s_model_param(m, i, &name, &view) != H3S_OK) {
            free(w);
            return fail_line("--param-grads: %s", h3s_last_error()), -1;
        }
        int take = all || (!none && fnmatch(spec, name, 0) == 0);
        if (w) w[i] = (unsigned char)take;
        if (take) {
            (*count)++;
            *elems += (double)h3s_tensor_numel(&view);
        }
    }
    if (!all && !none && *count == 0) {
        free(w);
        return fail_line("--param-grads '%s' matches no parameter name of this model (use all, none or a glob such as "
                         "'transformer_blocks.0.*')",
                         spec),
               -1;
    }
    *want = w;
    return 0;
}

/* --verbose: the memory estimate of this grad and what was measured (the host's peak resident set; the peak of the
 * model's activation and gradient tensors, in device memory with --device cuda). */
static void report_grad_memory(const memory_estimate *e, const h3s_model *m, h3s_backend_kind kind) {
    if (progress_get_level() < PROGRESS_VERBOSE) return;
    char act[32], par[32], rss[32], peak[32];
    format_bytes(e->activations, act, sizeof act);
    format_bytes(e->params, par, sizeof par);
    format_bytes(host_peak_rss_bytes(), rss, sizeof rss);
    format_bytes((double)h3s_model_peak_bytes(m), peak, sizeof peak);
    const char *where = kind == H3S_BACKEND_CUDA ? "device" : "host";
    fprintf(stderr,
            "h3strict grad: memory: estimated %s of activations and backward temporaries (%s) + %s of parameter "
            "gradients (host); measured: model tensors peaked at %s (%s), host peak resident set %s\n",
            act, where, par, peak, where, rss);
}

static int cmd_grad(int argc, char **argv) {
    opt o[] = {opt_model,
               {"--inputs", "IN.safetensors", 1, "forward arguments under their diffusers names", NULL},
               {"--cotangent", "CT.safetensors", 1, "upstream gradients: sample and audio_sample, F32", NULL},
               {"--out", "GRADS.safetensors", 1, "input gradients and the parameter gradients asked for, F32", NULL},
               {"--param-grads", "all|none|GLOB", 0,
                "parameter gradients to compute and write (default all; GLOB: fnmatch over checkpoint names)", NULL},
               opt_recompute,
               opt_force_run,
               opt_device,
               opt_grad_operands,
               opt_sp,
               opt_tp,
               opt_threads};
    int n = sizeof o / sizeof o[0];
    const char *model, *inputs, *ct, *out;
    h3s_backend_kind kind;
    PARSE_OR_RETURN(argc, argv, o);
    if (need(o, n, "--model", &model) || need(o, n, "--inputs", &inputs) || need(o, n, "--cotangent", &ct) ||
        need(o, n, "--out", &out) || parse_device(o, n, &kind) || apply_threads(o, n) || apply_grad_operands(o, n))
        return EXIT_USAGE;
    if (apply_recompute(o, n)) return EXIT_USAGE;
    const h3s_recompute recompute = g_recompute;
    int prc = apply_parallel(o, n, kind);
    if (prc) return prc;
    if (check_output(out, model, inputs, ct)) return check_output_code;
    loaded l;
    h3s_st_file *ctf = NULL;
    const h3s_tensor *ds = NULL, *da = NULL;
    unsigned char *want = NULL;
    int64_t nwant = 0;
    double want_elems = 0;
    memory_estimate est = {0, 0};
    h3s_status st = agree(load_all(model, inputs, kind, &l));
    const char *paths[2] = {inputs, ct}, *whats[2] = {"inputs file", "cotangent file"};
    if (st == H3S_OK) st = prepare_model(&l, paths, whats, 2, kind);
    if (st == H3S_OK && parse_param_grads(get(o, n, "--param-grads"), l.model, &want, &nwant, &want_elems)) {
        loaded_free(&l);
        return EXIT_USAGE;
    }
    if (st == H3S_OK) {
        est = estimate_backward_memory(h3s_weights_config(l.w), l.in.hidden_states.shape[0], l.in.token_tags.shape[0],
                                       l.in.text_indices.shape[0], recompute == H3S_RECOMPUTE_BLOCKS,
                                       kind == H3S_BACKEND_CUDA, want_elems);
        double host = (kind == H3S_BACKEND_CUDA ? 0 : est.activations) + est.params, mem = physical_memory_bytes();
        h3s_status guard = H3S_OK;
        if (get(o, n, "--force") == NULL && mem > 0 && host > mem) {
            char need_s[32], have[32];
            format_bytes(host, need_s, sizeof need_s);
            format_bytes(mem, have, sizeof have);
            guard = h3s_set_error(
                H3S_ERR_INVALID,
                "this grad needs about %s (%s and F32 parameter gradients), more than the %s of memory; nothing "
                "run (--force runs it anyway%s)",
                need_s, recompute ? "block inputs, one block's activations" : "activations kept for the backward", have,
                recompute ? "" : "; --recompute blocks or --param-grads none need less");
        }
        /* each rank judges its own memory: a refusal is every rank's, printed once */
        if (agree(guard) != H3S_OK) {
            fail_line("%s", h3s_last_error());
            free(want);
            loaded_free(&l);
            return EXIT_USAGE;
        }
    }
    if (st == H3S_OK) st = h3s_model_set_recompute(l.model, recompute);
    if (st == H3S_OK) progress_stage(PHASE_READ, "reading %s", ct);
    if (st == H3S_OK) st = agree(read_cotangent(ct, &l.in, inputs, &ctf, &ds, &da));
    if (st == H3S_OK) st = agree(provenance_add_file(&l.prov, "cotangent_sha256", ct));
    if (st == H3S_OK) add_parallel_provenance(&l.prov);
    h3s_tensor sample = {0}, audio = {0};
    h3s_tape *tape = NULL;
    h3s_grads g;
    memset(&g, 0, sizeof g);
    if (st == H3S_OK) progress_stage(PHASE_RUN, "forward");
    node_counter nc = {0, st == H3S_OK ? forward_nodes(h3s_weights_config(l.w)) : 0};
    int ran = st == H3S_OK;
    if (st == H3S_OK) st = h3s_model_forward(l.model, &l.in, g_comm ? NULL : count_node, &nc, &tape, &sample, &audio);
    if (st == H3S_OK) progress_stage(PHASE_RUN, "backward");
    node_counter bc = {0, st == H3S_OK ? backward_nodes(h3s_weights_config(l.w)) : 0};
    if (st == H3S_OK) st = h3s_model_backward_select(l.model, tape, ds, da, want, g_comm ? NULL : count_node, &bc, &g);
    if (ran && st != H3S_OK && g_comm) return fail_parallel_pass(st);
    if (st == H3S_OK) progress_stage(PHASE_WRITE, "writing %s", out);
    if (ran && st == H3S_OK) {
        if (g_rank == 0) st = write_grads(out, &g, &l.prov);
        st = agree(st);
    }
    if (st == H3S_OK) progress_end();
    if (st == H3S_OK) report_grad_memory(&est, l.model, kind);
    if (st == H3S_OK)
        printf("wrote %s: 3 input gradients and %lld parameter gradients (%s)\n", out, (long long)nwant,
               h3s_backend_name(kind));
    free(want);
    h3s_grads_free(&g);
    h3s_tape_free(tape);
    h3s_tensor_free(&sample);
    h3s_tensor_free(&audio);
    h3s_st_close(ctf);
    loaded_free(&l);
    return st == H3S_OK ? 0 : fail_status(st);
}

static int cmd_cotangent(int argc, char **argv) {
    opt o[] = {opt_model,
               {"--inputs", "IN.safetensors", 1, "the inputs whose outputs the cotangent matches", NULL},
               {"--seed", "N", 1, "seed of the values; item 0 depends on it alone", NULL},
               {"--out", "CT.safetensors", 1, "cotangent file to write: sample and audio_sample, F32", NULL}};
    int n = sizeof o / sizeof o[0];
    const char *model, *inputs, *seed_s, *out;
    PARSE_OR_RETURN(argc, argv, o);
    if (need(o, n, "--model", &model) || need(o, n, "--inputs", &inputs) || need(o, n, "--seed", &seed_s) ||
        need(o, n, "--out", &out))
        return EXIT_USAGE;
    if (check_output(out, model, inputs, NULL)) return check_output_code;
    uint64_t seed;
    if (parse_u64("--seed", seed_s, &seed)) return EXIT_USAGE;
    h3s_weights *w = NULL;
    h3s_st_file *f = NULL;
    h3s_inputs in;
    int64_t batch = 0;
    h3s_tensor ds = {0}, da = {0};
    progress_stage(PHASE_READ, "loading model %s and %s", model, inputs);
    h3s_status st = h3s_weights_load(model, &w);
    if (st == H3S_OK) st = h3s_st_open(inputs, &f);
    if (st == H3S_OK) st = h3s_inputs_from_file(f, &in);
    if (st == H3S_OK) st = h3s_inputs_validate(h3s_weights_config(w), &in, &batch);
    provenance prov;
    provenance_init(&prov, g_command_line ? g_command_line : "");
    if (st == H3S_OK) st = provenance_add_model(&prov, model, h3s_weights_config(w));
    if (st == H3S_OK) st = provenance_add_file(&prov, "inputs_sha256", inputs);
    provenance_add(&prov, "seed", "%llu", (unsigned long long)seed);
    if (st == H3S_OK) progress_stage(PHASE_WRITE, "writing %s", out);
    if (st == H3S_OK)
        st = h3s_cotangent_random(batch, in.hidden_states.shape[1], in.hidden_states.shape[2],
                                  in.audio_hidden_states.shape[1], in.audio_hidden_states.shape[2], seed, &ds, &da);
    if (st == H3S_OK) {
        h3s_st_entry e[2] = {{"sample", ds}, {"audio_sample", da}};
        st = h3s_st_write_meta(out, e, 2, provenance_meta(&prov), prov.n);
    }
    if (st == H3S_OK) progress_end();
    if (st == H3S_OK) printf("wrote %s: seeded cotangent for batch %lld\n", out, (long long)batch);
    h3s_tensor_free(&ds);
    h3s_tensor_free(&da);
    h3s_st_close(f);
    h3s_weights_free(w);
    return st == H3S_OK ? 0 : fail_status(st);
}

/* ------------------------------------------------------------------ verify ------------ */

static int cmd_verify(int argc, char **argv) {
    opt o[] = {{"--model", "DIR", 1, "model directory (or a pipeline snapshot with transformer/)", NULL},
               {"--manifest", "MANIFEST.json", 0, "also check every file's SHA-256 against {file: sha256}", NULL},
               {"--write-manifest", "MANIFEST.json", 0, "verify, then write the SHA-256 of every file instead", NULL}};
    int n = sizeof o / sizeof o[0];
    const char *model;
    PARSE_OR_RETURN(argc, argv, o);
    if (need(o, n, "--model", &model)) return EXIT_USAGE;
    if (get(o, n, "--manifest") && get(o, n, "--write-manifest"))
        return fail_line("--manifest and --write-manifest exclude each other: check a manifest, or write one"),
               EXIT_USAGE;
    if (get(o, n, "--write-manifest")) {
        /* the output's checks before the model is read and scanned (h3s_model_manifest_write checks it again) */
        if (check_output(get(o, n, "--write-manifest"), model, NULL, NULL)) return check_output_code;
        progress_stage(PHASE_READ, "verifying %s", model);
        h3s_status st = h3s_model_verify(model, NULL, NULL);
        if (st == H3S_OK) progress_stage(PHASE_WRITE, "hashing %s into %s", model, get(o, n, "--write-manifest"));
        if (st == H3S_OK) st = h3s_model_manifest_write(model, get(o, n, "--write-manifest"));
        if (st != H3S_OK) return fail_status(st);
        progress_end();
        printf("wrote manifest %s\n", get(o, n, "--write-manifest"));
        return 0;
    }
    char *report = NULL;
    progress_stage(PHASE_READ, get(o, n, "--manifest") ? "verifying %s and hashing every file" : "verifying %s", model);
    h3s_status st = h3s_model_verify(model, get(o, n, "--manifest"), &report);
    if (st != H3S_OK) {
        h3s_free(report);
        return fail_status(st);
    }
    if (report) fputs(report, stdout);
    h3s_free(report);
    h3s_weights *w = NULL;
    st = h3s_weights_load(model, &w);
    if (st != H3S_OK) return fail_status(st);
    progress_end();
    printf("verified %s: every parameter present with its checkpoint shape and dtype\n", model);
    h3s_weights_free(w);
    return 0;
}

/* ------------------------------------------------------------------ reports ----------- */

/* A report the library returned as JSON text, as a document the command can add its provenance to. */
static h3s_status parse_report(const char *text, const char *what, cJSON **doc) {
    *doc = text ? cJSON_Parse(text) : NULL;
    if (!*doc) return h3s_set_error(H3S_ERR_NOMEM, "%s: out of memory reading back the report", what);
    return H3S_OK;
}

/* A report's top-level "model" or "command", whole, with the bytes outside printable ASCII replaced as in the
 * provenance block (a path of other bytes would make the report invalid UTF-8, which no strict reader takes). */
static h3s_status add_printable(cJSON *report, const char *key, const char *value) {
    char *text = provenance_printable_dup(value ? value : "");
    h3s_status st = text && cJSON_AddStringToObject(report, key, text)
                        ? H3S_OK
                        : h3s_set_error(H3S_ERR_NOMEM, "out of memory writing the report's %s", key);
    free(text);
    return st;
}

/* A report written as the library writes JSON: pretty-printed, one final newline, atomically. */
static h3s_status write_json(const char *path, const cJSON *doc) {
    char *text = cJSON_Print(doc);
    if (!text) return h3s_set_error(H3S_ERR_NOMEM, "json: could not render the report");
    size_t len = strlen(text);
    char *with_nl = realloc(text, len + 2);
    if (!with_nl) {
        cJSON_free(text);
        return h3s_set_error(H3S_ERR_NOMEM, "json: out of memory");
    }
    with_nl[len] = '\n';
    with_nl[len + 1] = '\0';
    h3s_status st = h3s_io_write_file_atomic(path, with_nl, len + 1);
    free(with_nl);
    return st;
}

/* ------------------------------------------------------------------ trajectory -------- */

/* Library progress lines (one per pass), with the elapsed time and an estimate of what is left when the number of
 * passes is known. */
typedef struct pass_counter {
    int64_t done, total;
    double start;
} pass_counter;

static void progress_passes(void *ctx, const char *line) {
    pass_counter *pc = ctx;
    double t = progress_seconds() - pc->start;
    if (pc->total > 0 && pc->done > 0 && pc->done < pc->total)
        progress_note("%s [%.1f s, about %.0f s left]", line, t, t / (double)pc->done * (double)(pc->total - pc->done));
    else
        progress_note("%s [%.1f s]", line, t);
    pc->done++;
}

/* A shift whose sigma schedule rounds a sigma above 1 (h3s_schedule_check) is refused here, before the weights
 * load, naming the option as typed; the library refuses it too, before any work. */
static int check_schedule(const char *name, const char *typed, float shift, int64_t steps) {
    if (h3s_schedule_check(steps, shift) == H3S_OK) return 0;
    return fail_line("%s %s: %s", name, typed, h3s_last_error()), -1;
}

/* Most requests one trajectory samples (docs/cli.md). */
#define MAX_SEEDS 64

/* --seeds a,b,c: every seed is parsed (none dropped), at most MAX_SEEDS of them; *seeds is malloc'd. */
static int parse_seeds(const char *s, uint64_t **seeds, int64_t *count) {
    int64_t n = 1;
    for (const char *p = s; *p; p++)
        n += *p == ',';
    if (n > MAX_SEEDS) return fail_line("--seeds takes at most %d seeds, got %lld", MAX_SEEDS, (long long)n), -1;
    *seeds = malloc((size_t)n * sizeof **seeds);
    if (!*seeds) return fail_line("--seeds: out of memory for %lld seeds", (long long)n), -1;
    *count = 0;
    for (const char *p = s;;) {
        size_t len = strcspn(p, ",");
        char *tok = strndup(p, len);
        if (!tok) return fail_line("--seeds: out of memory"), -1;
        int bad =
            len == 0 ? (fail_line("--seeds: empty seed in '%s'", s), 1) : parse_u64("--seeds", tok, &(*seeds)[*count]);
        free(tok);
        if (bad) return -1;
        (*count)++;
        if (!p[len]) break;
        p += len + 1;
    }
    return 0;
}

static int cmd_trajectory(int argc, char **argv) {
    opt o[] = {{"--model", "DIR", 0, "model directory (default: the built-in tiny model, seed 0)", NULL},
               {"--seeds", "S1,S2,...", 0, "requests to sample, one per seed (default 11,22,33; at most 64)", NULL},
               {"--steps", "N", 0, "Euler steps per request (default 4)", NULL},
               {"--batch", "B", 0, "size of the training batch; item 0 is the rollout's request (default 4)", NULL},
               {"--out", "REPORT.json", 1, "report: every comparison of every step", NULL},
               opt_device,
               opt_threads,
               opt_grad_operands,
               opt_recompute,
               {"--no-grad", NULL, 0, "skip the backward and the gradient comparisons", NULL},
               {"--inputs", "IN.safetensors", 0, "sample your request (item 0) instead of seeded ones", NULL},
               {"--condition-rows", "N", 0, "with --inputs: leading video rows held fixed (default: inferred)", NULL},
               {"--batch-inputs", "B.safetensors", 0,
                "with --inputs: the training batch goes on with this file's items", NULL},
               {"--shift-video", "S", 0, "scheduler shift of the video rows, in [0.001, 100000] (default 12)", NULL},
               {"--shift-audio", "S", 0, "scheduler shift of the audio rows, in [0.001, 100000] (default 3)", NULL},
               opt_sp,
               opt_tp,
               opt_force_run};
    int n = sizeof o / sizeof o[0];
    const char *out;
    h3s_backend_kind kind;
    PARSE_OR_RETURN(argc, argv, o);
    if (need(o, n, "--out", &out) || parse_device(o, n, &kind) || apply_threads(o, n) || apply_grad_operands(o, n) ||
        apply_recompute(o, n))
        return EXIT_USAGE;
    static const uint64_t default_seeds[3] = {11, 22, 33};
    uint64_t *seeds = NULL;
    int64_t nseeds = 3, steps = 4, batch = 4;
    const char *model = get(o, n, "--model");
    if (get(o, n, "--steps") && parse_i64("--steps", get(o, n, "--steps"), 1, 1000, &steps)) return EXIT_USAGE;
    if (get(o, n, "--batch") && parse_i64("--batch", get(o, n, "--batch"), 2, 4096, &batch)) return EXIT_USAGE;
    const char *req_path = get(o, n, "--inputs");
    float shift_v = 0, shift_a = 0;
    int64_t cond_rows = -1;
    if (get(o, n, "--shift-video") && parse_f32("--shift-video", get(o, n, "--shift-video"), 1e-3, 1e5, &shift_v))
        return EXIT_USAGE;
    if (get(o, n, "--shift-audio") && parse_f32("--shift-audio", get(o, n, "--shift-audio"), 1e-3, 1e5, &shift_a))
        return EXIT_USAGE;
    if ((shift_v > 0 && check_schedule("--shift-video", get(o, n, "--shift-video"), shift_v, steps)) ||
        (shift_a > 0 && check_schedule("--shift-audio", get(o, n, "--shift-audio"), shift_a, steps)))
        return EXIT_USAGE;
    if (get(o, n, "--condition-rows") &&
        parse_i64("--condition-rows", get(o, n, "--condition-rows"), 0, (int64_t)1 << 40, &cond_rows))
        return EXIT_USAGE;
    if (cond_rows >= 0 && !req_path) return fail_line("--condition-rows needs --inputs"), EXIT_USAGE;
    const char *batch_path = get(o, n, "--batch-inputs");
    if (batch_path && !req_path) return fail_line("--batch-inputs needs --inputs"), EXIT_USAGE;
    if (get(o, n, "--seeds") && parse_seeds(get(o, n, "--seeds"), &seeds, &nseeds)) {
        free(seeds);
        return EXIT_USAGE;
    }
    int prc = apply_parallel(o, n, kind);
    if (prc) {
        free(seeds);
        return prc;
    }
    if (check_output(out, model, req_path, batch_path)) {
        free(seeds);
        return check_output_code;
    }
    h3s_weights *w = NULL;
    h3s_status st;
    progress_stage(PHASE_READ, "loading model %s", model ? model : "(built-in tiny)");
    if (model) {
        st = h3s_weights_load(model, &w);
    } else {
        /* the built-in tiny model: the project's main job on a fresh machine */
        h3s_config c;
        st = h3s_config_preset("tiny", -1, &c);
        if (st == H3S_OK) st = h3s_weights_create(&c, 0, &w);
    }
    h3s_st_file *req_file = NULL;
    h3s_inputs req;
    memset(&req, 0, sizeof req);
    int64_t req_batch = 0;
    if (st == H3S_OK && req_path) {
        progress_stage(PHASE_READ, "reading and validating %s", req_path);
        st = h3s_st_open(req_path, &req_file);
        if (st == H3S_OK) st = h3s_inputs_from_file(req_file, &req);
        if (st == H3S_OK) st = h3s_inputs_validate(h3s_weights_config(w), &req, &req_batch);
        if (st == H3S_OK && req.attention_mask.data)
            st = h3s_set_error(H3S_ERR_UNSUPPORTED, "%s: trajectory --inputs does not take an attention_mask yet",
                               req_path);
        if (st == H3S_OK && cond_rows < 0) cond_rows = h3s_layout_condition_rows(&req);
        if (st == H3S_OK) nseeds = 1;
    }
    h3s_st_file *batch_file = NULL;
    h3s_inputs others;
    memset(&others, 0, sizeof others);
    if (st == H3S_OK && batch_path) {
        int64_t others_batch = 0;
        progress_stage(PHASE_READ, "reading and validating %s", batch_path);
        st = h3s_st_open(batch_path, &batch_file);
        if (st == H3S_OK) st = h3s_inputs_from_file(batch_file, &others);
        if (st == H3S_OK) st = h3s_inputs_validate(h3s_weights_config(w), &others, &others_batch);
        if (st == H3S_OK && others.attention_mask.data)
            st = h3s_set_error(H3S_ERR_UNSUPPORTED, "%s: trajectory --batch-inputs does not take an attention_mask yet",
                               batch_path);
    }
    st = agree(st);
    const char *paths[2] = {req_path, batch_path}, *whats[2] = {"inputs file", "batch inputs file"};
    if (st == H3S_OK) st = same_inputs(w, paths, whats, 2);
    if (st == H3S_OK && req_path && cond_rows > req.video_indices.shape[0]) {
        fail_line("--condition-rows %lld: %s has %lld video rows", (long long)cond_rows, req_path,
                  (long long)req.video_indices.shape[0]);
        free(seeds);
        h3s_st_close(req_file);
        h3s_st_close(batch_file);
        h3s_weights_free(w);
        return EXIT_USAGE;
    }
    h3s_layout_opts seeded_layout = {6, 2, 4, 6, 4, 1, 0, 0};
    int64_t S = 0, Nt = 0;
    h3s_layout_rows lay;
    if (st == H3S_OK && req_path) {
        S = req.token_tags.shape[0];
        Nt = req.text_indices.shape[0];
    } else if (st == H3S_OK && h3s_layout_count(&seeded_layout, h3s_weights_config(w)->patch_size[1],
                                                h3s_weights_config(w)->patch_size[2], &lay) == H3S_OK) {
        S = lay.rows;
        Nt = lay.text;
    }
    /* the cut, before the passes (the rollout's pass has the fewest rows: one request, S) */
    if (st == H3S_OK && g_comm) {
        progress_stage(PHASE_RUN, "checking the cut over --sp %d x --tp %d ranks", g_sp, g_tp);
        st = agree(h3s_parallel_check(h3s_weights_config(w), g_sp, g_tp, S));
    }
    if (st != H3S_OK) {
        free(seeds);
        h3s_st_close(req_file);
        h3s_st_close(batch_file);
        h3s_weights_free(w);
        return fail_status(st);
    }
    if (get(o, n, "--no-grad") == NULL) {
        /* the training batch's backward is the peak */
        if (backward_memory_guard("this trajectory", w, kind, batch, S, Nt, 0, get(o, n, "--force") != NULL)) {
            free(seeds);
            h3s_st_close(req_file);
            h3s_st_close(batch_file);
            h3s_weights_free(w);
            return EXIT_USAGE;
        }
    }
    h3s_trajectory_opts to;
    memset(&to, 0, sizeof to);
    to.seeds = seeds ? seeds : default_seeds;
    to.nseeds = nseeds;
    to.steps = steps;
    to.batch = batch;
    to.backend = kind;
    to.layout = seeded_layout;
    to.with_grad = get(o, n, "--no-grad") == NULL;
    to.request = req_path ? &req : NULL;
    to.batch_inputs = batch_path ? &others : NULL;
    to.condition_rows = cond_rows > 0 ? cond_rows : 0;
    to.shift_video = shift_v;
    to.shift_audio = shift_a;
    pass_counter pc = {0, nseeds * steps * 2, 0};
    to.progress = progress_passes;
    to.progress_ctx = &pc;
    cJSON *report = NULL;
    h3s_trajectory_totals tot;
    if (req_path)
        progress_stage(PHASE_RUN,
                       "sampling the request of %s (%lld condition rows) x %lld steps, alone and in a batch "
                       "of %lld",
                       req_path, (long long)to.condition_rows, (long long)steps, (long long)batch);
    else
        progress_stage(PHASE_RUN, "sampling %lld seeds x %lld steps, alone and in a batch of %lld", (long long)nseeds,
                       (long long)steps, (long long)batch);
    pc.start = progress_seconds();
    char *report_text = NULL;
    st = h3s_trajectory(w, &to, &report_text, &tot);
    if (st != H3S_OK && g_comm) return fail_parallel_pass(st);
    if (st == H3S_OK) st = parse_report(report_text, "trajectory", &report);
    h3s_free(report_text);
    if (st == H3S_OK) { /* the seeds as the library wrote them, all their digits (cJSON read them as doubles) */
        const cJSON *runs = cJSON_GetObjectItemCaseSensitive(report, "seeds");
        int64_t i = 0;
        for (cJSON *so = runs ? runs->child : NULL; so && i < to.nseeds; so = so->next, i++) {
            char text[24];
            snprintf(text, sizeof text, "%llu", (unsigned long long)to.seeds[i]);
            cJSON *raw = cJSON_CreateRaw(text);
            if (!raw || !cJSON_ReplaceItemInObjectCaseSensitive(so, "seed", raw)) {
                cJSON_Delete(raw);
                st = h3s_set_error(H3S_ERR_NOMEM, "trajectory: out of memory writing the seeds");
                break;
            }
        }
    }
    if (st == H3S_OK) {
        progress_stage(PHASE_WRITE, "writing %s", out);
        st = add_printable(report, "model", model ? model : "built-in tiny (seed 0)");
        if (st == H3S_OK) st = add_printable(report, "command", g_command_line);
        cJSON_AddStringToObject(report, "h3strict_version", h3s_version());
        provenance prov;
        provenance_init(&prov, g_command_line ? g_command_line : "");
        provenance_add_backend(&prov, kind);
        if (st == H3S_OK)
            st = provenance_add_model(&prov, model ? model : "built-in tiny (seed 0)", h3s_weights_config(w));
        if (st == H3S_OK && req_path) st = provenance_add_file(&prov, "inputs_sha256", req_path);
        if (st == H3S_OK && batch_path) st = provenance_add_file(&prov, "batch_inputs_sha256", batch_path);
        add_parallel_provenance(&prov);
        cJSON_AddItemToObject(report, "provenance", provenance_json(&prov));
        if (st == H3S_OK && g_rank == 0) st = write_json(out, report);
        st = agree(st);
    }
    cJSON_Delete(report);
    h3s_st_close(req_file);
    h3s_st_close(batch_file);
    h3s_weights_free(w);
    free(seeds);
    if (st != H3S_OK) return fail_status(st);
    progress_end();
    printf("report: %s\n", out);
    if (to.with_grad)
        printf("gradients: %lld/%lld item-0 input gradients differ (%lld seeds x %lld steps x 3)\n",
               (long long)tot.gradient_differing, (long long)tot.gradient_comparisons, (long long)nseeds,
               (long long)(tot.steps_run / (nseeds ? nseeds : 1)));
    printf("strict: %lld/%lld comparisons differ (%lld seeds x %lld steps x 4)\n", (long long)tot.differing,
           (long long)tot.comparisons, (long long)nseeds, (long long)(tot.steps_run / (nseeds ? nseeds : 1)));
    return tot.differing || tot.gradient_differing ? EXIT_DIFFER : 0;
}

/* ------------------------------------------------------------------ replay ------------ */

static int cmd_replay(int argc, char **argv) {
    opt o[] = {
        opt_model,
        {"--inputs", "IN.safetensors", 1, "the batch to replay (batch 2 or more also checks item 0 alone)", NULL},
        {"--out", "REPORT.json", 1, "per-node report: SHA-256, repeat, batch, error against FP64", NULL},
        opt_device,
        opt_threads,
        opt_grad_operands,
        opt_recompute,
        {"--no-golden", NULL, 0, "skip the FP64 golden run (no per-node errors)", NULL},
        {"--plant-drift", "NODE", 0, "test only: flip one bit of NODE in the repeat run; exits 1", NULL},
        opt_sp,
        opt_tp,
        opt_force_run};
    int n = sizeof o / sizeof o[0];
    const char *model, *inputs, *out;
    h3s_backend_kind kind;
    PARSE_OR_RETURN(argc, argv, o);
    if (need(o, n, "--model", &model) || need(o, n, "--inputs", &inputs) || need(o, n, "--out", &out) ||
        parse_device(o, n, &kind) || apply_threads(o, n) || apply_grad_operands(o, n) || apply_recompute(o, n))
        return EXIT_USAGE;
    int prc = apply_parallel(o, n, kind);
    if (prc) return prc;
    if (check_output(out, model, inputs, NULL)) return check_output_code;
    h3s_weights *w = NULL;
    h3s_st_file *f = NULL;
    h3s_inputs in;
    memset(&in, 0, sizeof in);
    int64_t batch = 0;
    cJSON *report = NULL;
    progress_stage(PHASE_READ, "loading model %s and %s", model, inputs);
    h3s_status st = h3s_weights_load(model, &w);
    if (st == H3S_OK) st = h3s_st_open(inputs, &f);
    if (st == H3S_OK) st = h3s_inputs_from_file(f, &in);
    if (st == H3S_OK) st = h3s_inputs_validate(h3s_weights_config(w), &in, &batch);
    provenance prov;
    provenance_init(&prov, g_command_line ? g_command_line : "");
    provenance_add_backend(&prov, kind);
    if (st == H3S_OK) st = provenance_add_model(&prov, model, h3s_weights_config(w));
    if (st == H3S_OK) st = provenance_add_file(&prov, "inputs_sha256", inputs);
    st = agree(st);
    const char *paths[1] = {inputs}, *whats[1] = {"inputs file"};
    if (st == H3S_OK) st = same_inputs(w, paths, whats, 1);
    add_parallel_provenance(&prov);
    int with_golden = get(o, n, "--no-golden") == NULL;
    /* the cut, before the passes (a request alone has the fewest rows, S) */
    if (st == H3S_OK && g_comm) {
        progress_stage(PHASE_RUN, "checking the cut over --sp %d x --tp %d ranks", g_sp, g_tp);
        st = agree(h3s_parallel_check(h3s_weights_config(w), g_sp, g_tp, in.token_tags.shape[0]));
    }
    if (st == H3S_OK && backward_memory_guard("this replay", w, kind, batch, in.token_tags.shape[0],
                                              in.text_indices.shape[0], with_golden, get(o, n, "--force") != NULL)) {
        h3s_st_close(f);
        h3s_weights_free(w);
        return EXIT_USAGE;
    }
    pass_counter pc = {0, with_golden ? 4 : 3, 0};
    if (st == H3S_OK) {
        h3s_replay_opts ro = {kind, 1234, with_golden, get(o, n, "--plant-drift"), progress_passes, &pc, 0};
        progress_stage(PHASE_RUN, "replaying %lld item(s) forward and backward", (long long)batch);
        pc.start = progress_seconds();
        char *report_text = NULL;
        st = h3s_replay_report(w, &in, &ro, &report_text);
        if (st != H3S_OK && g_comm) return fail_parallel_pass(st);
        if (st == H3S_OK) st = parse_report(report_text, "replay", &report);
        h3s_free(report_text);
    }
    if (st == H3S_OK) {
        progress_stage(PHASE_WRITE, "writing %s", out);
        st = add_printable(report, "command", g_command_line);
        cJSON_AddStringToObject(report, "h3strict_version", h3s_version());
        cJSON_AddItemToObject(report, "provenance", provenance_json(&prov));
        if (st == H3S_OK && g_rank == 0) st = write_json(out, report);
        st = agree(st);
    }
    int drift = 0;
    if (st == H3S_OK) {
        progress_end();
        const cJSON *fd = cJSON_GetObjectItemCaseSensitive(report, "first_drift");
        const cJSON *sum = cJSON_GetObjectItemCaseSensitive(report, "summary");
        const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(sum, "nodes");
        printf("report: %s\n", out);
        if (batch == 1)
            printf("replay: batch-1 inputs: batch invariance not compared (use inputs --batch 2 or more)\n");
        printf("replay: %d nodes, first drift: %s\n", cJSON_IsNumber(nodes) ? nodes->valueint : 0,
               cJSON_IsString(fd) ? fd->valuestring : "none");
        drift = cJSON_IsString(fd);
    }
    cJSON_Delete(report);
    h3s_st_close(f);
    h3s_weights_free(w);
    if (st != H3S_OK) return fail_status(st);
    return drift ? EXIT_DIFFER : 0;
}

/* ------------------------------------------------------------------ plot -------------- */

/* Largest report plot reads. */
#define REPORT_LIMIT_BYTES ((size_t)1 << 30)

static int cmd_plot(int argc, char **argv) {
    opt o[] = {{"--report", "REPORT.json", 1, "a replay or trajectory report (also the first argument)", NULL},
               {"--out", "FIG.png", 1, "figure to write: .png, .svg or .pdf", NULL}};
    int n = sizeof o / sizeof o[0];
    /* `h3strict plot REPORT.json --out FIG.png`: a first argument that is not an option names the report (then a
     * --report too is refused: parse_opts knows the positional value by its address) */
    char **args = malloc(((size_t)argc + 1) * sizeof *args);
    if (!args) return fail_line("out of memory"), EXIT_SYSTEM;
    int nargs = 0;
    for (int i = 0; i < argc; i++) {
        if (i == 2 && argv[i][0] != '-') {
            o[0].value = g_positional_report = argv[i];
            continue;
        }
        args[nargs++] = argv[i];
    }
    args[nargs] = NULL;
    int parsed = parse_opts(nargs, args, o, n);
    free(args);
    if (parsed) return parsed > 0 ? 0 : EXIT_USAGE;
    const char *report, *out;
    if (need(o, n, "--report", &report) || need(o, n, "--out", &out)) return EXIT_USAGE;
    if (!plot_available()) {
        fail_line("this build has no plotting library (install libplplot-dev and plplot-driver-cairo, then configure "
                  "again)");
        return EXIT_SYSTEM;
    }
    if (check_output(out, NULL, report, NULL)) return check_output_code;
    progress_stage(PHASE_READ, "reading %s", report);
    char *text = NULL;
    size_t len = 0;
    cJSON *doc = NULL;
    h3s_status st = h3s_io_read_small_file(report, REPORT_LIMIT_BYTES, &text, &len);
    /* strict JSON, as the library reads every JSON file; then cJSON sees exactly what was checked */
    if (st == H3S_OK) st = h3s_json_check(text, len, report);
    if (st == H3S_OK && !(doc = cJSON_ParseWithLength(text, len)))
        st = h3s_set_error(H3S_ERR_NOMEM, "%s: out of memory reading the report", report);
    h3s_free(text);
    const char *kind = NULL;
    if (st == H3S_OK) {
        progress_stage(PHASE_WRITE, "drawing %s", out);
        st = plot_report(doc, report, out, &kind);
    }
    cJSON_Delete(doc);
    if (st != H3S_OK) return fail_status(st);
    progress_end();
    printf("wrote %s: %s report %s\n", out, kind, report);
    return 0;
}

/* ------------------------------------------------------------------ main -------------- */

static const command commands[] = {
    {"init", cmd_init, "Write a seeded model directory (config.json and the weights) of a preset geometry."},
    {"inputs", cmd_inputs, "Write an inputs file: a packed t2va/fl2va request with seeded latents and text."},
    {"forward", cmd_forward, "Run the model forward; write sample and audio_sample."},
    {"grad", cmd_grad, "Run forward and backward; write the input and parameter gradients."},
    {"cotangent", cmd_cotangent, "Write a seeded cotangent (upstream gradient) for an inputs file."},
    {"trajectory", cmd_trajectory,
     "Rollout (batch 1) against training layout (item 0 of a batch), compared bitwise.\n"
     "Samples each seed's request with the Euler scheduler alone and as item 0 of a batch of other\n"
     "requests, and compares velocities, next latents and input gradients at every step."},
    {"replay", cmd_replay,
     "Per-node evidence: digests, repeat, batch invariance, error against FP64, first drift.\n"
     "Runs the batch forward and backward twice and item 0 alone (and the FP64 golden)."},
    {"plot", cmd_plot,
     "Draw a replay report (per-node error against FP64, first drift) or a trajectory report.\n"
     "Drawn with PLplot; a build without it refuses with exit 4."},
    {"verify", cmd_verify, "Check a model directory, optionally every file's SHA-256 against a manifest."},
};

static const command *find_command(const char *name) {
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(name, commands[i].name)) return &commands[i];
    return NULL;
}

static void usage(FILE *f) {
    fprintf(f, "usage: h3strict <command> [options]\n"
               "       h3strict <command> --help    (or: h3strict help <command>)\n"
               "\n"
               "Strict-mode MiniMax-H3: a rollout (batch 1) and its training recomputation (item 0 of a\n"
               "batch) give bit-for-bit identical results, forward and backward, on any thread count.\n"
               "\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        const char *nl = strchr(commands[i].summary, '\n');
        int len = nl ? (int)(nl - commands[i].summary) : (int)strlen(commands[i].summary);
        fprintf(f, "  %-11s%.*s\n", commands[i].name, len, commands[i].summary);
    }
    fprintf(f, "\n"
               "  --help       this text\n"
               "  --version    print the version\n"
               "\n"
               "exit status: 0 success, 1 a strict comparison differed, 2 bad usage, 3 bad input file,\n"
               "4 device or I/O failure (docs/cli.md)\n");
}

static int unknown_command(const char *word) {
    char *esc = h3s_escape_dup(word); /* the word as typed, control bytes escaped */
    fprintf(stderr, "h3strict: unknown command '%s' (try --help)\n", esc ? esc : "?");
    h3s_free(esc);
    return EXIT_USAGE;
}

/* The command's status once everything it printed has reached standard output: a result lost there (a full disk,
 * > /dev/full) is an output that could not be written, exit 4 with one line, unless the command failed already
 * (its code and its one line stand). */
static int flush_stdout(int rc) {
    errno = 0;
    int flushed = fflush(stdout) == 0;
    int err = errno;
    if ((flushed && !ferror(stdout)) || (rc != 0 && rc != EXIT_DIFFER)) return rc;
    const char *why = !flushed && err ? strerror(err) : "a write failed";
    if (g_rank == 0) {
        if (find_command(g_cmd))
            fprintf(stderr, "h3strict %s: cannot write standard output: %s (%s)\n", g_cmd, why,
                    h3s_status_name(H3S_ERR_IO));
        else
            fprintf(stderr, "h3strict: cannot write standard output: %s (%s)\n", why, h3s_status_name(H3S_ERR_IO));
    }
    return EXIT_SYSTEM;
}

static int dispatch(int argc, char **argv);

/* The signals that end the process by default (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM, SIGUSR1, SIGUSR2, SIGXCPU),
 * unless ignored when the command starts (nohup): blocked in every thread and taken by one thread that waits for
 * them, which removes the temporaries being written (h3s_io_remove_temporaries) and then ends the process by that
 * signal, as it would have (the shell sees 128 + its number).  A handler could run on any thread, in the middle of
 * an init publishing its model; the waiting thread takes the temporaries' lock instead.  SIGPIPE is ignored: a
 * write to a closed pipe fails (exit 4) instead of killing the command mid-write. */
#ifndef H3S_CLI_KEEP_SIGNALS
static sigset_t g_ending;

static void *wait_ending_signal(void *arg) {
    (void)arg;
    int sig;
    while (sigwait(&g_ending, &sig) != 0) {
    }
    h3s_io_remove_temporaries();
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    raise(sig);       /* to this thread, where it is now unblocked with its default action: the process ends */
    _exit(128 + sig); /* not reached */
}

static void catch_ending_signals(void) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM, SIGUSR1, SIGUSR2, SIGXCPU};
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&g_ending);
    int any = 0;
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN) continue; /* nohup: stays ignored */
        sigaddset(&g_ending, sigs[i]);
        any = 1;
    }
    if (!any) return;
    /* before any other thread exists (OpenMP's, the progress lines', the CUDA runtime's): each inherits the mask */
    pthread_sigmask(SIG_BLOCK, &g_ending, NULL);
    pthread_t t;
    if (pthread_create(&t, NULL, wait_ending_signal, NULL) != 0) {
        pthread_sigmask(SIG_UNBLOCK, &g_ending, NULL); /* no waiting thread: the signals act as they would */
        return;
    }
    pthread_detach(t);
}

#endif

int main(int argc, char **argv) {
    /* a file size limit (ulimit -f) must fail the write (EFBIG: exit 4, the temporary removed), not kill the process
     * mid-write with SIGXFSZ, leaving the temporary behind */
    signal(SIGXFSZ, SIG_IGN);
#ifndef H3S_CLI_KEEP_SIGNALS /* a fuzz harness that calls this main in its own process */
    catch_ending_signals();
#endif
    return flush_stdout(dispatch(argc, argv));
}

static int dispatch(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    /* h3strict help|--help|-h [COMMAND]: the usage, or COMMAND's; an unknown COMMAND or a second word is bad usage */
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        if (argc > 3) {
            char *esc = h3s_escape_dup(argv[3]);
            fprintf(stderr, "h3strict %s: unexpected argument '%s' (usage: h3strict %s [COMMAND])\n", argv[1],
                    esc ? esc : "?", argv[1]);
            h3s_free(esc);
            return EXIT_USAGE;
        }
        if (argc == 2 || !strcmp(argv[2], "--help") || !strcmp(argv[2], "-h")) {
            usage(stdout);
            return 0;
        }
        const command *c = find_command(argv[2]);
        if (!c) return unknown_command(argv[2]);
        char *args[] = {argv[0], argv[2], "--help", NULL};
        g_cmd = c->name;
        return c->fn(3, args);
    }
    if (!strcmp(argv[1], "--version")) {
        printf("h3strict %s\n", h3s_version());
        return 0;
    }
    const command *c = find_command(argv[1]);
    if (!c) return unknown_command(argv[1]);
    g_cmd = c->name;
    /* under mpirun, ranks other than 0 print nothing: rank 0 speaks for the run */
    int launched_rank = launched("RANK");
    if (launched_rank > 0) {
        g_rank = launched_rank;
        if (!freopen("/dev/null", "w", stdout)) return EXIT_SYSTEM;
    }
    remember_command_line(argc, argv);
    int rc = c->fn(argc, argv);
    progress_stop();
    if (g_comm) {
        h3s_set_parallel(NULL, 1, 1);
        h3s_comm_free(g_comm);
        g_comm = NULL;
    }
    return rc;
}
