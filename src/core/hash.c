#include <openssl/evp.h>
#include <stdio.h>

#include "core/core.h"

/* A 32-byte digest as 64 lowercase hex digits and a NUL. */
static void to_hex(const unsigned char *digest, char out_hex[65]) {
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < 32; i++) {
        out_hex[2 * i] = hex[digest[i] >> 4];
        out_hex[2 * i + 1] = hex[digest[i] & 15];
    }
    out_hex[64] = '\0';
}

h3s_status h3s_sha256_hex(const void *data, size_t len, char out_hex[65]) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    if (!data && len) return h3s_fail(H3S_ERR_INVALID, "sha256: NULL data");
    if (!out_hex) return h3s_fail(H3S_ERR_INVALID, "sha256: NULL output");
    if (EVP_Digest(len ? data : "", len, digest, &dlen, EVP_sha256(), NULL) != 1 || dlen != 32)
        return h3s_fail(H3S_ERR_INVALID, "sha256: libcrypto EVP_Digest failed");
    to_hex(digest, out_hex);
    return H3S_OK;
}

#include "core/hash.h"

struct h3s_sha256_ctx {
    EVP_MD_CTX *md;
};

h3s_status h3s_sha256_begin(h3s_sha256_ctx **ctx) {
    if (!ctx) return h3s_fail(H3S_ERR_INVALID, "sha256: NULL argument");
    h3s_sha256_ctx *c = h3s_malloc(1, sizeof *c);
    if (!c) return H3S_ERR_NOMEM;
    c->md = EVP_MD_CTX_new();
    if (!c->md || EVP_DigestInit_ex(c->md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(c->md);
        free(c);
        return h3s_fail(H3S_ERR_INVALID, "sha256: libcrypto init failed");
    }
    *ctx = c;
    return H3S_OK;
}

h3s_status h3s_sha256_update(h3s_sha256_ctx *ctx, const void *data, size_t len) {
    if (!ctx || (!data && len)) return h3s_fail(H3S_ERR_INVALID, "sha256: NULL argument");
    if (len && EVP_DigestUpdate(ctx->md, data, len) != 1)
        return h3s_fail(H3S_ERR_INVALID, "sha256: libcrypto update failed");
    return H3S_OK;
}

h3s_status h3s_sha256_end(h3s_sha256_ctx *ctx, char out_hex[65]) {
    if (!ctx) return h3s_fail(H3S_ERR_INVALID, "sha256: NULL argument");
    if (!out_hex) {
        EVP_MD_CTX_free(ctx->md);
        free(ctx);
        return h3s_fail(H3S_ERR_INVALID, "sha256: NULL argument");
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    int ok = EVP_DigestFinal_ex(ctx->md, digest, &dlen) == 1 && dlen == 32;
    EVP_MD_CTX_free(ctx->md);
    free(ctx);
    if (!ok) return h3s_fail(H3S_ERR_INVALID, "sha256: libcrypto final failed");
    to_hex(digest, out_hex);
    return H3S_OK;
}
