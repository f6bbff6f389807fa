#include "io/json.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static int json_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* A JSON number starting at p[0] (n bytes left): its length, 0 if the text there is not one. */
static size_t number_len(const unsigned char *p, size_t n) {
    size_t i = 0;
    if (i < n && p[i] == '-') i++;
    if (i >= n || !digit(p[i])) return 0;
    if (p[i] == '0')
        i++;
    else
        while (i < n && digit(p[i]))
            i++;
    if (i < n && p[i] == '.') {
        i++;
        if (i >= n || !digit(p[i])) return 0;
        while (i < n && digit(p[i]))
            i++;
    }
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        i++;
        if (i < n && (p[i] == '+' || p[i] == '-')) i++;
        if (i >= n || !digit(p[i])) return 0;
        while (i < n && digit(p[i]))
            i++;
    }
    return i;
}

/* The lexical checks cJSON does not make. */
static h3s_status lex_check(const unsigned char *p, size_t len, const char *what) {
    size_t i = 0;
    while (i < len) {
        unsigned char c = p[i];
        if (c == '"') {
            for (i++;; i++) {
                if (i >= len) return h3s_fail(H3S_ERR_FORMAT, "%s: unterminated string", what);
                unsigned char s = p[i];
                if (s == '"') break;
                if (s < 0x20)
                    return h3s_fail(H3S_ERR_FORMAT, "%s: control byte 0x%02x inside a string at byte %zu", what, s, i);
                if (s == '\\') {
                    if (++i >= len) return h3s_fail(H3S_ERR_FORMAT, "%s: unterminated string", what);
                    if (!strchr("\"\\/bfnrtu", p[i]) || p[i] == '\0')
                        return h3s_fail(H3S_ERR_FORMAT, "%s: invalid escape at byte %zu", what, i - 1);
                    /* C strings end at NUL: a name or value holding one would be cut short, silently */
                    if (p[i] == 'u' && len - i > 4 && memcmp(p + i + 1, "0000", 4) == 0)
                        return h3s_fail(H3S_ERR_FORMAT, "%s: \\u0000 inside a string at byte %zu", what, i - 1);
                    continue;
                }
                unsigned cp;
                size_t n = h3s_utf8_seq(p + i, len - i, &cp);
                if (n == 0) return h3s_fail(H3S_ERR_FORMAT, "%s: byte %zu is not valid UTF-8", what, i);
                i += n - 1;
            }
            i++;
        } else if (c == '-' || digit(c)) {
            size_t n = number_len(p + i, len - i);
            if (n == 0 || (i + n < len && (digit(p[i + n]) || strchr("+-.eE", p[i + n]))))
                return h3s_fail(H3S_ERR_FORMAT, "%s: malformed number at byte %zu", what, i);
            i += n;
        } else if (json_space(c) || strchr("{}[]:,", c) || (c >= 'a' && c <= 'z')) {
            i++; /* structure, or a literal that cJSON checks (true, false, null) */
        } else if (c < 0x20 || c == 0x7f) {
            return h3s_fail(H3S_ERR_FORMAT, "%s: control byte 0x%02x at byte %zu", what, c, i);
        } else {
            return h3s_fail(H3S_ERR_FORMAT, "%s: unexpected byte 0x%02x at byte %zu", what, c, i);
        }
    }
    return H3S_OK;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* No object anywhere in the tree names a member twice. */
static h3s_status check_duplicates(const cJSON *node, const char *what, int depth) {
    if (depth > 1000) return h3s_fail(H3S_ERR_FORMAT, "%s: nested too deeply", what);
    if (cJSON_IsObject(node)) {
        size_t n = 0;
        for (const cJSON *it = node->child; it; it = it->next)
            n++;
        if (n > 1) {
            const char **names = h3s_malloc(n, sizeof *names);
            if (!names) return H3S_ERR_NOMEM;
            size_t k = 0;
            for (const cJSON *it = node->child; it; it = it->next)
                names[k++] = it->string ? it->string : "";
            qsort(names, n, sizeof *names, cmp_name);
            for (size_t i = 1; i < n; i++) {
                if (strcmp(names[i - 1], names[i]) == 0) {
                    h3s_status st =
                        h3s_fail(H3S_ERR_FORMAT, "%s: an object names member '%s' more than once", what, names[i]);
                    free(names);
                    return st;
                }
            }
            free(names);
        }
    }
    if (cJSON_IsObject(node) || cJSON_IsArray(node))
        for (const cJSON *it = node->child; it; it = it->next)
            H3S_TRY(check_duplicates(it, what, depth + 1));
    return H3S_OK;
}

h3s_status h3s_json_parse_strict(const char *text, size_t len, const char *what, cJSON **out) {
    if (!text || !out) return h3s_fail(H3S_ERR_INVALID, "json: NULL argument");
    if (!what) what = "json";
    if (memchr(text, '\0', len)) return h3s_fail(H3S_ERR_FORMAT, "%s: contains a NUL byte", what);
    H3S_TRY(lex_check((const unsigned char *)text, len, what));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t off = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        return h3s_fail(H3S_ERR_FORMAT, "%s: not valid JSON (at byte %zu of %zu)", what, off, len);
    }
    for (const char *p = end; p && p < text + len; p++) {
        if (!json_space((unsigned char)*p)) {
            cJSON_Delete(root);
            return h3s_fail(H3S_ERR_FORMAT, "%s: bytes after the JSON value (at byte %zu)", what, (size_t)(p - text));
        }
    }
    h3s_status st = check_duplicates(root, what, 0);
    if (st != H3S_OK) {
        cJSON_Delete(root);
        return st;
    }
    *out = root;
    return H3S_OK;
}

h3s_status h3s_json_check(const char *text, size_t len, const char *what) {
    cJSON *doc = NULL;
    H3S_TRY(h3s_json_parse_strict(text, len, what, &doc));
    cJSON_Delete(doc);
    return H3S_OK;
}
