// See loader_seed.h. The constants and steps are numpy/random/bit_generator.pyx's (hashmix, mix,
// mix_entropy, generate_state), in uint32 arithmetic that wraps as theirs does.
#include "loader_seed.h"

namespace dn {
namespace {

constexpr int kPoolSize = 4;
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kXShift = 16;  // 4 * 8 / 2

inline uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
    value ^= hash_const;
    hash_const *= kMultA;
    value *= hash_const;
    return value ^ (value >> kXShift);
}

inline uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t result = kMixMultL * x - kMixMultR * y;
    return result ^ (result >> kXShift);
}

}  // namespace

void seed_sequence_state(const uint32_t* entropy, int n_entropy, uint32_t* out, int n_words) {
    uint32_t pool[kPoolSize];
    uint32_t hash_const = kInitA;  // mix_entropy: the entropy into the pool, every word into every other
    for (int i = 0; i < kPoolSize; ++i) pool[i] = hashmix(i < n_entropy ? entropy[i] : 0, hash_const);
    for (int src = 0; src < kPoolSize; ++src)
        for (int dst = 0; dst < kPoolSize; ++dst)
            if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hash_const));
    for (int src = kPoolSize; src < n_entropy; ++src)
        for (int dst = 0; dst < kPoolSize; ++dst) pool[dst] = mix(pool[dst], hashmix(entropy[src], hash_const));
    uint32_t state_const = kInitB;  // generate_state: the pool's words in turn, hashed
    for (int i = 0; i < n_words; ++i) {
        uint32_t value = pool[i % kPoolSize] ^ state_const;
        state_const *= kMultB;
        value *= state_const;
        out[i] = value ^ (value >> kXShift);
    }
}

}  // namespace dn
