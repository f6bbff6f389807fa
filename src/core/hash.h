/* Incremental SHA-256 (libcrypto EVP) for digesting files and several buffers as one. */
#ifndef H3S_HASH_H
#define H3S_HASH_H
#include <stddef.h>
#include "h3s.h"
typedef struct h3s_sha256_ctx h3s_sha256_ctx;
h3s_status h3s_sha256_begin(h3s_sha256_ctx **ctx);
h3s_status h3s_sha256_update(h3s_sha256_ctx *ctx, const void *data, size_t len);
/* Writes the hex digest and frees the context (also on failure). */
h3s_status h3s_sha256_end(h3s_sha256_ctx *ctx, char out_hex[65]);
#endif
