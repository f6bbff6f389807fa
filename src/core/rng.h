/* Counter-based random numbers (Philox4x32-10).
 *
 * Element i of stream `stream` under `seed` is a pure function of (seed, stream, i): the
 * same value on every machine, for every thread count and every chunking of the work. */
#ifndef H3S_RNG_H
#define H3S_RNG_H

#include <stdint.h>

void h3s_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

/* Uniform in (0, 1): 24 random bits, never exactly 0 or 1. */
float h3s_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
/* Standard normal (Box-Muller on two uniforms, evaluated with deterministic math). */
float h3s_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);
/* Fill out[0..n) with normal * scale; element i uses index offset + i. */
void h3s_rng_fill_normal(uint64_t seed, uint64_t stream, uint64_t offset, int64_t n, float scale, float *out);

/* A stable 64-bit stream id from a name (FNV-1a), so each tensor gets its own stream. */
uint64_t h3s_rng_stream_id(const char *name);

#endif
