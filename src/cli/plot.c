/* h3strict plot: a replay or trajectory report drawn with PLplot (docs/cli.md).
 *
 * Replay: each node's relative error against the FP64 golden, in execution order on a log axis, the forward and
 * backward halves separated, nodes that did not repeat or were not batch-invariant in red, the first drift marked,
 * and a provider's error beside it where a node carries one ("provider_rel_l2").  Trajectory: per step, the
 * number of differing comparisons of each seed (0 everywhere is strict mode's claim).
 *
 * PLplot writes the figure through a stream to a temporary file next to the output (it never sees a file name,
 * which it would read "%n" in); every write is checked, the file is synced and checked whole for its format, and
 * only then renamed into place.  Builds without PLplot keep the command and refuse it with one line (exit 4). */
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h3s_io.h"

#ifdef H3S_HAVE_PLPLOT
#include <plplot.h>

static char g_plplot_error[512];

/* PLplot calls this instead of exit() on a fatal error; the message is reported by the command. */
static int plplot_exit_handler(PLCHAR_VECTOR msg) {
    snprintf(g_plplot_error, sizeof g_plplot_error, "%s", msg ? msg : "PLplot error");
    return 0;
}

/* The stream PLplot writes the figure to (plsfile): every write goes to the temporary file's descriptor, and the
 * first failure (a full disk, a file size limit) is remembered, since PLplot's drivers do not report it.  PLplot
 * closes the stream in plend(); the descriptor stays the caller's. */
typedef struct figure_sink {
    int fd;
    int write_errno; /* the first write's failure, 0 when every byte was written */
    int closed;      /* PLplot closed the stream */
} figure_sink;

static ssize_t sink_write(void *cookie, const char *buf, size_t size) {
    figure_sink *s = cookie;
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(s->fd, buf + done, size - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (!s->write_errno) s->write_errno = n < 0 ? errno : ENOSPC;
            return n < 0 ? -1 : (ssize_t)done;
        }
        done += (size_t)n;
    }
    return (ssize_t)done;
}

static int sink_close(void *cookie) {
    ((figure_sink *)cookie)->closed = 1;
    return 0;
}

/* Read exactly len bytes at offset (0 on success). */
static int read_at(int fd, void *buf, size_t len, off_t offset) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, (char *)buf + done, len - done, offset + (off_t)done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        done += (size_t)n;
    }
    return 0;
}

/* Whether the file on fd (size bytes) is a whole figure of its device's format: a PNG whose chunks run from the
 * signature to an IEND chunk that ends the file; an SVG that starts with "<?xml" or "<svg" and ends with "</svg>"
 * (and white space); a PDF that starts with "%PDF-", ends with "startxref N" and "%%EOF" in its last 1024 bytes,
 * and has its cross-reference section at offset N.  NULL when it is, else what is wrong.  (PLplot's writes are all
 * checked as they happen, see figure_sink; this catches what a write that claimed success lost.) */
static const char *figure_incomplete(int fd, off_t size, const char *device) {
    if (size <= 0) return "it is empty";
    if (!strcmp(device, "pngcairo")) {
        static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
        unsigned char head[8];
        if (size < 8 || read_at(fd, head, 8, 0) || memcmp(head, sig, 8)) return "no PNG signature";
        for (off_t at = 8;;) {
            if (size - at < 12) return "a PNG without its IEND chunk";
            if (read_at(fd, head, 8, at)) return "a PNG chunk that cannot be read";
            uint64_t len = (uint64_t)head[0] << 24 | (uint64_t)head[1] << 16 | (uint64_t)head[2] << 8 | head[3];
            if (len > (uint64_t)(size - at - 12)) return "a PNG chunk cut short";
            at += 12 + (off_t)len;
            if (!memcmp(head + 4, "IEND", 4)) return at == size ? NULL : "bytes after the PNG's IEND chunk";
        }
    }
    char head[6] = "", tail[1025];
    size_t n = size < 1024 ? (size_t)size : 1024;
    if (read_at(fd, head, size < 5 ? (size_t)size : 5, 0) || read_at(fd, tail, n, size - (off_t)n))
        return "it cannot be read back";
    tail[n] = '\0';
    if (!strcmp(device, "svgcairo")) {
        if (memcmp(head, "<?xml", 5) && memcmp(head, "<svg", 4)) return "an SVG that does not start with <?xml or <svg";
        while (n > 0 && (tail[n - 1] == ' ' || tail[n - 1] == '\t' || tail[n - 1] == '\r' || tail[n - 1] == '\n'))
            n--;
        return n >= 6 && !memcmp(tail + n - 6, "</svg>", 6) ? NULL : "an SVG that does not end with </svg>";
    }
    if (memcmp(head, "%PDF-", 5)) return "no PDF header";
    /* the last "startxref" names the offset of the cross-reference section (a table, or a stream object), which a
     * lost or cut write in between would move */
    const char *sx = NULL;
    for (size_t i = 0; i + 9 <= n; i++)
        if (!memcmp(tail + i, "startxref", 9)) sx = tail + i + 9;
    if (!sx || !strstr(sx, "%%EOF")) return "a PDF without its end-of-file marker";
    char *end = NULL;
    unsigned long long xref = strtoull(sx, &end, 10);
    char at[5] = "";
    if (end == sx || xref >= (unsigned long long)size ||
        read_at(fd, at, size - (off_t)xref < 4 ? (size_t)(size - (off_t)xref) : 4, (off_t)xref) ||
        (memcmp(at, "xref", 4) && !(at[0] >= '1' && at[0] <= '9')))
        return "a PDF whose cross-reference offset does not lead to its cross-reference section";
    return NULL;
}

static const char *device_for(const char *path) {
    const char *dot = strrchr(path, '.');
    if (dot && !strcmp(dot, ".svg")) return "svgcairo";
    if (dot && !strcmp(dot, ".pdf")) return "pdfcairo";
    return "pngcairo";
}

static void begin(FILE *stream, const char *out) {
    plsexit(plplot_exit_handler);
    plsdev(device_for(out));
    plsfile(stream);
    plsetopt("geometry", "1200x700");
    plscolbg(255, 255, 255);
    plscol0(1, 0, 0, 0);       /* axes and text: black */
    plscol0(2, 200, 30, 30);   /* red: drift, differing nodes */
    plscol0(3, 40, 90, 200);   /* blue: strict errors */
    plscol0(4, 230, 140, 20);  /* orange: provider */
    plscol0(5, 150, 150, 150); /* grey: forward | backward */
    plscol0(6, 40, 160, 80);   /* green */
    plinit();
    plfontld(1);
}

/* The axes, with room below for a legend line. */
static void frame(PLFLT xmin, PLFLT xmax, PLFLT ymin, PLFLT ymax, int logy) {
    pladv(0);
    plvpor(0.09, 0.97, 0.2, 0.9);
    plwind(xmin, xmax, ymin, ymax);
    plcol0(1);
    plbox("bcnst", 0.0, 0, logy ? "bcnstvl" : "bcnstv", 0.0, 0);
}

static h3s_status plot_replay(const cJSON *doc, const char *report) {
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(doc, "nodes");
    int n = cJSON_GetArraySize(nodes);
    if (n <= 0) return h3s_set_error(H3S_ERR_FORMAT, "%s: the replay report has no nodes", report);
    PLFLT *x = calloc((size_t)n, sizeof *x), *y = calloc((size_t)n, sizeof *y), *py = calloc((size_t)n, sizeof *py);
    if (!x || !y || !py) {
        free(x);
        free(y);
        free(py);
        return h3s_set_error(H3S_ERR_NOMEM, "out of memory for %d nodes", n);
    }
    int first_backward = -1, drift_at = -1, with_provider = 0, with_error = 0;
    const cJSON *fd = cJSON_GetObjectItemCaseSensitive(doc, "first_drift");
    double lo = 1e300, hi = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *node = cJSON_GetArrayItem(nodes, i);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(node, "name");
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(node, "golden_rel_l2");
        const cJSON *perr = cJSON_GetObjectItemCaseSensitive(node, "provider_rel_l2");
        x[i] = i;
        y[i] = cJSON_IsNumber(err) ? err->valuedouble : NAN;
        py[i] = cJSON_IsNumber(perr) ? perr->valuedouble : NAN;
        with_error |= cJSON_IsNumber(err);
        with_provider |= cJSON_IsNumber(perr);
        if (cJSON_IsString(name)) {
            size_t len = strlen(name->valuestring);
            if (first_backward < 0 && ((len > 5 && !strcmp(name->valuestring + len - 5, ".grad")) ||
                                       !strncmp(name->valuestring, "param.", 6)))
                first_backward = i;
            if (cJSON_IsString(fd) && drift_at < 0 && !strcmp(fd->valuestring, name->valuestring)) drift_at = i;
        }
        for (int k = 0; k < 2; k++) {
            double v = k ? py[i] : y[i];
            if (v > 0 && isfinite(v)) {
                if (v < lo) lo = v;
                if (v > hi) hi = v;
            }
        }
    }
    if (!(hi > 0)) lo = 1e-9, hi = 1;
    double ylo = floor(log10(lo)) - 0.2, yhi = ceil(log10(hi)) + 0.2;
    frame(-1, n, ylo, yhi, 1);
    char title[300];
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(doc, "kind");
    const cJSON *fi = cJSON_GetObjectItemCaseSensitive(doc, "first_isolated_drift");
    if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "provider_replay")) /* python -m h3strict.replay */
        snprintf(title, sizeof title,
                 "replay against the provider: %d nodes, first drift: %s, first isolated drift: %s", n,
                 cJSON_IsString(fd) ? fd->valuestring : "none", cJSON_IsString(fi) ? fi->valuestring : "none");
    else
        snprintf(title, sizeof title, "replay: %d nodes, first drift: %s", n,
                 cJSON_IsString(fd) ? fd->valuestring : "none");
    pllab("node (execution order: forward, then backward)",
          with_error ? "relative L2 error against FP64" : "(no golden run: --no-golden)", title);
    /* the strict backend's errors, as points joined in order; zero errors sit on the floor */
    PLFLT *ly = calloc((size_t)n, sizeof *ly);
    if (ly) {
        for (int i = 0; i < n; i++)
            ly[i] = y[i] > 0 ? log10(y[i]) : (y[i] == 0 ? ylo : NAN);
        plcol0(3);
        for (int i = 0; i + 1 < n; i++)
            if (isfinite(ly[i]) && isfinite(ly[i + 1])) pljoin(x[i], ly[i], x[i + 1], ly[i + 1]);
        for (int i = 0; i < n; i++) {
            const cJSON *node = cJSON_GetArrayItem(nodes, i);
            int bad = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(node, "repeat_equal")) ||
                      cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(node, "batch_equal"));
            if (!isfinite(ly[i])) {
                /* a drifted node without a finite error (none recorded, or not finite) still gets its cross, at the
                 * top of the axis, so that no drift is missing from the figure */
                if (!bad) continue;
                PLFLT top = yhi - 0.1;
                plcol0(2);
                plpoin(1, &x[i], &top, 5);
                continue;
            }
            plcol0(bad ? 2 : 3);
            plpoin(1, &x[i], &ly[i], bad ? 5 : 17);
        }
        if (with_provider) {
            plcol0(4);
            for (int i = 0; i < n; i++) {
                if (!(py[i] > 0)) continue;
                PLFLT v = log10(py[i]);
                plpoin(1, &x[i], &v, 4);
            }
        }
        free(ly);
    }
    if (first_backward > 0) {
        plcol0(5);
        pljoin(first_backward - 0.5, ylo, first_backward - 0.5, yhi);
        plptex(first_backward - 1.5, yhi - 0.3, 0, 0, 1.0, "forward");
        plptex(first_backward + 0.5, yhi - 0.3, 0, 0, 0.0, "backward");
    }
    if (drift_at >= 0) {
        plcol0(2);
        pljoin(drift_at, ylo, drift_at, yhi);
        char label[300];
        snprintf(label, sizeof label, " first drift: %s", fd->valuestring);
        plptex(drift_at, ylo + 0.3, 0, 0, 0.0, label);
    }
    plcol0(1);
    plschr(0, 0.8);
    plmtex("b", 5.5, 0.0, 0.0,
           with_provider ? "blue: h3strict vs FP64;  orange: provider vs FP64;  red x: not repeat- or batch-equal "
                           "(at the top: no finite error)"
                         : "blue: h3strict vs FP64 (no provider errors in this report);  red x: not repeat- or "
                           "batch-equal (at the top: no finite error)");
    plschr(0, 1.0);
    free(x);
    free(y);
    free(py);
    return H3S_OK;
}

static h3s_status plot_trajectory(const cJSON *doc, const char *report) {
    const cJSON *seeds = cJSON_GetObjectItemCaseSensitive(doc, "seeds");
    int ns = cJSON_GetArraySize(seeds);
    if (ns <= 0) return h3s_set_error(H3S_ERR_FORMAT, "%s: the trajectory report has no seeds", report);
    int max_steps = 0, max_cmp = 1;
    for (int s = 0; s < ns; s++) {
        const cJSON *steps = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(seeds, s), "steps");
        int k = cJSON_GetArraySize(steps);
        if (k > max_steps) max_steps = k;
        const cJSON *st0 = cJSON_GetArrayItem(steps, 0);
        int c = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(st0, "comparisons")) +
                cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(st0, "gradients"));
        if (c > max_cmp) max_cmp = c;
    }
    if (max_steps <= 0) return h3s_set_error(H3S_ERR_FORMAT, "%s: the trajectory report has no steps", report);
    frame(0.5, max_steps + 0.5, -0.5, max_cmp + 0.5, 0);
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(doc, "summary");
    const cJSON *cmp = cJSON_GetObjectItemCaseSensitive(sum, "comparisons");
    const cJSON *dif = cJSON_GetObjectItemCaseSensitive(sum, "differing");
    const cJSON *gcmp = cJSON_GetObjectItemCaseSensitive(sum, "gradient_comparisons");
    const cJSON *gdif = cJSON_GetObjectItemCaseSensitive(sum, "gradient_differing");
    char title[200];
    snprintf(title, sizeof title, "rollout vs training batch: %d/%d comparisons and %d/%d gradients differ",
             cJSON_IsNumber(dif) ? dif->valueint : 0, cJSON_IsNumber(cmp) ? cmp->valueint : 0,
             cJSON_IsNumber(gdif) ? gdif->valueint : 0, cJSON_IsNumber(gcmp) ? gcmp->valueint : 0);
    pllab("Euler step", "differing comparisons in the step", title);
    char legend[600] = "";
    for (int s = 0; s < ns; s++) {
        const cJSON *so = cJSON_GetArrayItem(seeds, s);
        const cJSON *steps = cJSON_GetObjectItemCaseSensitive(so, "steps");
        int k = cJSON_GetArraySize(steps);
        PLFLT *x = calloc((size_t)k + 1, sizeof *x), *y = calloc((size_t)k + 1, sizeof *y);
        if (!x || !y) {
            free(x);
            free(y);
            return h3s_set_error(H3S_ERR_NOMEM, "out of memory for %d steps", k);
        }
        for (int i = 0; i < k; i++) {
            const cJSON *st = cJSON_GetArrayItem(steps, i);
            int bad = 0;
            const char *groups[2] = {"comparisons", "gradients"};
            for (int g = 0; g < 2; g++) {
                const cJSON *c;
                cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(st, groups[g])) bad +=
                    cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(c, "equal"));
            }
            x[i] = i + 1;
            y[i] = bad + 0.06 * (s - (ns - 1) / 2.0); /* seeds side by side where they overlap */
        }
        int color = 3 + s % 4;
        plcol0(color);
        plline(k, x, y);
        plpoin(k, x, y, 17);
        const cJSON *seed = cJSON_GetObjectItemCaseSensitive(so, "seed");
        size_t used = strlen(legend);
        static const char *color_name[4] = {"blue", "orange", "grey", "green"};
        snprintf(legend + used, sizeof legend - used, "%sseed %.0f (%s)", s ? ", " : "",
                 cJSON_IsNumber(seed) ? seed->valuedouble : (double)s, color_name[s % 4]);
        free(x);
        free(y);
    }
    plcol0(1);
    plschr(0, 0.8);
    plmtex("b", 5.5, 0.0, 0.0, legend);
    plschr(0, 1.0);
    return H3S_OK;
}
#endif

int plot_available(void) {
#ifdef H3S_HAVE_PLPLOT
    return 1;
#else
    return 0;
#endif
}

h3s_status plot_report(const cJSON *doc, const char *report, const char *out, const char **kind) {
    *kind = cJSON_GetObjectItemCaseSensitive(doc, "nodes")   ? "replay"
            : cJSON_GetObjectItemCaseSensitive(doc, "seeds") ? "trajectory"
                                                             : NULL;
    if (!*kind) return h3s_set_error(H3S_ERR_FORMAT, "%s is neither a replay nor a trajectory report", report);
#ifdef H3S_HAVE_PLPLOT
    char *tmp = NULL;
    figure_sink sink = {-1, 0, 0};
    /* PLplot never sees the temporary file's name (the figure goes through a stream on its descriptor), so a '%' in
     * the name or the directory means nothing to it */
    h3s_status made = h3s_io_temp_open(out, &sink.fd, &tmp);
    if (made != H3S_OK) return made;
    cookie_io_functions_t io = {NULL, sink_write, NULL, sink_close};
    FILE *stream = fopencookie(&sink, "w", io);
    if (!stream) {
        h3s_io_temp_discard(sink.fd, tmp);
        return h3s_set_error(H3S_ERR_NOMEM, "out of memory opening the figure's stream");
    }
    g_plplot_error[0] = 0;
    begin(stream, out);
    h3s_status st = !strcmp(*kind, "replay") ? plot_replay(doc, report) : plot_trajectory(doc, report);
    plend();
    if (!sink.closed) fclose(stream); /* PLplot closes it; never twice */
    if (st == H3S_OK && g_plplot_error[0]) st = h3s_set_error(H3S_ERR_IO, "PLplot: %s", g_plplot_error);
    if (st == H3S_OK && sink.write_errno)
        st = h3s_set_error(H3S_ERR_IO, "cannot write the figure %s: %s; nothing replaced", out,
                           strerror(sink.write_errno));
    /* the figure must be whole before it takes the output's name */
    struct stat sb;
    memset(&sb, 0, sizeof sb);
    const char *incomplete = NULL;
    if (st == H3S_OK && fstat(sink.fd, &sb) != 0)
        st = h3s_set_error(H3S_ERR_IO, "cannot write the figure %s: fstat: %s; nothing replaced", out, strerror(errno));
    if (st == H3S_OK && (incomplete = figure_incomplete(sink.fd, sb.st_size, device_for(out))) != NULL)
        st = h3s_set_error(H3S_ERR_IO, "the figure written for %s is incomplete (%s); nothing replaced", out,
                           incomplete);
    /* the output is checked again before the rename: nothing put there meanwhile (only a regular file is replaced,
     * never the report) */
    const char *inputs[1] = {report};
    if (st == H3S_OK) st = h3s_io_check_output(out, inputs, 1, NULL, 0);
    if (st != H3S_OK) {
        h3s_io_temp_discard(sink.fd, tmp);
        return st;
    }
    /* fsync, close, rename, fsync of the directory; the temporary file removed on failure */
    return h3s_io_temp_commit(sink.fd, tmp, out);
#else
    (void)out;
    return h3s_set_error(H3S_ERR_UNSUPPORTED,
                         "this build has no plotting library (install PLplot, libplplot-dev and plplot-driver-cairo on "
                         "Debian, and configure again)");
#endif
}
