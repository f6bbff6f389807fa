/* Strict JSON for every JSON file the library reads (config.json, the shard index, manifests, safetensors headers).
 *
 * cJSON alone is lenient: it stops at the end of the first value and ignores what follows, treats every byte
 * <= 0x20 as whitespace, takes raw control bytes inside strings, bytes that are not UTF-8, numbers such as "+1",
 * "01" or "1.", and keeps both members of an object that names one twice.  h3s_json_parse_strict accepts RFC 8259
 * JSON only: exactly one value with nothing but JSON whitespace (space, tab, LF, CR) around it, no control byte
 * in a string, valid UTF-8 everywhere, numbers in the JSON grammar, and no object with the same member name twice
 * (names compared after unescaping), at any depth. */
#ifndef H3S_IO_JSON_H
#define H3S_IO_JSON_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "h3s.h"
#include "h3s_io.h"

/* Parse text[0..len) (need not be NUL-terminated).  Failure: H3S_ERR_FORMAT with a message "<what>: <problem>"
 * naming the byte offset or the member; *out is set only on success (free it with cJSON_Delete). */
h3s_status h3s_json_parse_strict(const char *text, size_t len, const char *what, cJSON **out);
/* h3s_json_check (public, include/h3s_io.h) is the same check without the document. */

#endif
