/* Incremental SHA-256 (libcrypto EVP) for digesting files and several buffers as one: public (include/h3s.h,
 * h3s_sha256_begin / update / end). */
#ifndef H3S_HASH_H
#define H3S_HASH_H
#include <stddef.h>
#include "h3s.h"
#endif
