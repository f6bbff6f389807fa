#include "core/rng.h"

#include <math.h>

#include "core/detmath.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void h3s_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

static void philox_block(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    h3s_philox4x32_10(ctr, key, out);
}

static float bits_to_open_unit(uint32_t bits) {
    /* (k + 0.5) / 2^24 for k in [0, 2^24): exact in float, strictly inside (0, 1). */
    return ((float)(bits >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

float h3s_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t out[4];
    philox_block(seed, stream, index >> 2, out);
    return bits_to_open_unit(out[index & 3]);
}

float h3s_rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    /* Element i uses the pair of words (2*(i&1), 2*(i&1)+1) of block i/2. */
    uint32_t out[4];
    philox_block(seed, stream ^ 0x6e6f726d616cULL, index >> 1, out);
    int half = (int)(index & 1);
    double u1 = bits_to_open_unit(out[2 * half]);
    double u2 = bits_to_open_unit(out[2 * half + 1]);
    double r = sqrt(-2.0 * h3s_det_log(u1));
    return (float)(r * h3s_det_cos(6.283185307179586476925 * u2));
}

void h3s_rng_fill_normal(uint64_t seed, uint64_t stream, uint64_t offset, int64_t n, float scale, float *out) {
    for (int64_t i = 0; i < n; i++)
        out[i] = h3s_rng_normal(seed, stream, offset + (uint64_t)i) * scale;
}

uint64_t h3s_rng_stream_id(const char *name) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ULL;
    }
    return h;
}
