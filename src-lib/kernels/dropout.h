// Dropout's counter-based RNG: the mask value of element `index` is a pure function of (seed, index),
// computed with 32-bit unsigned arithmetic only, so every device and the CPU draw the same mask.
#pragma once
#include "compat_cpu.h"
KNAMESPACE_BEGIN

// murmur3's 32-bit finalizer (fmix32): a bijection of uint32 in which every input bit flips about
// half of the output bits.
KFN uint32_t dropout_fmix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

// 0 with probability p, else 1 / (1 - p).
KFN float dropout_scale(uint32_t seed_lo, uint32_t seed_hi, uint32_t index, float probability) {
    // fold the 64-bit seed into one 32-bit key (the golden-ratio constant keeps seed 0 from key 0)
    uint32_t key = dropout_fmix32(seed_lo ^ dropout_fmix32(seed_hi ^ 0x9e3779b9u));
    // two rounds keyed by the seed; for a fixed key, index -> h is a bijection (no repeated draws)
    uint32_t h = dropout_fmix32(dropout_fmix32(index ^ key) + key);
    // the top 24 bits as a float in [0, 1): exact, since a float holds 24 significant bits
    float u = (float)(h >> 8) * (1.0f / 16777216.0f);
    return u < probability ? 0.0f : 1.0f / (1.0f - probability);
}

KNAMESPACE_END
