/* h3strict plot: a replay or trajectory report drawn with PLplot (docs/cli.md).
 *
 * Replay: each node's relative error against the FP64 golden, in execution order on a log axis, the forward and
 * backward halves separated, nodes that did not repeat or were not batch-invariant in red, the first drift marked,
 * and a provider's error beside it where a node carries one ("provider_rel_l2").  Trajectory: per step, the
 * number of differing comparisons of each seed (0 everywhere is strict mode's claim).
 *
 * PLplot writes the figure to a temporary file next to the output, which is renamed into place only when it is
 * complete.  Builds without PLplot keep the command and refuse it with one line (exit 4). */
#include "plot.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* An empty new file next to `path` (".<base>.tmp-<pid>-<n>", created exclusively) for PLplot to write; the output
 * itself was checked before (h3s_io_check_output).  *tmp is malloc'd. */
static h3s_status create_temp(const char *path, char **tmp) {
    static unsigned long counter;
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
    size_t cap = strlen(path) + 64;
    char *name = malloc(cap);
    if (!name) return h3s_set_error(H3S_ERR_NOMEM, "out of memory");
    for (int attempt = 0; attempt < 1000; attempt++) {
        snprintf(name, cap, "%.*s.%s.tmp-%ld-%lu", (int)dir_len, path, path + dir_len, (long)getpid(), counter++);
        int fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0) {
            close(fd);
            *tmp = name;
            return H3S_OK;
        }
        if (errno != EEXIST) {
            h3s_status st =
                h3s_set_error(H3S_ERR_IO, "cannot create a temporary file for %s: %s", path, strerror(errno));
            free(name);
            return st;
        }
    }
    free(name);
    return h3s_set_error(H3S_ERR_IO, "cannot create a temporary file for %s: every name is taken", path);
}

/* fsync the directory holding `path`, for the rename's durability (best effort: some file systems refuse it). */
static void sync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

static const char *device_for(const char *path) {
    const char *dot = strrchr(path, '.');
    if (dot && !strcmp(dot, ".svg")) return "svgcairo";
    if (dot && !strcmp(dot, ".pdf")) return "pdfcairo";
    return "pngcairo";
}

static void begin(const char *tmp, const char *out) {
    plsexit(plplot_exit_handler);
    plsdev(device_for(out));
    plsfnam(tmp);
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
            if (!isfinite(ly[i])) continue;
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
           with_provider ? "blue: h3strict vs FP64;  orange: provider vs FP64;  red x: not repeat- or batch-equal"
                         : "blue: h3strict vs FP64 (no provider errors in this report);  red x: not repeat- or "
                           "batch-equal");
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
    h3s_status made = create_temp(out, &tmp);
    if (made != H3S_OK) return made;
    g_plplot_error[0] = 0;
    begin(tmp, out);
    h3s_status st = !strcmp(*kind, "replay") ? plot_replay(doc, report) : plot_trajectory(doc, report);
    plend();
    if (st == H3S_OK && g_plplot_error[0]) st = h3s_set_error(H3S_ERR_IO, "PLplot: %s", g_plplot_error);
    if (st == H3S_OK && rename(tmp, out) != 0) st = h3s_set_error(H3S_ERR_IO, "cannot rename the figure to %s", out);
    if (st == H3S_OK)
        sync_parent_dir(out);
    else
        unlink(tmp);
    free(tmp);
    return st;
#else
    (void)out;
    return h3s_set_error(H3S_ERR_UNSUPPORTED,
                         "this build has no plotting library (install PLplot, libplplot-dev and plplot-driver-cairo on "
                         "Debian, and configure again)");
#endif
}
