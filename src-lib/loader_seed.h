// NumPy's SeedSequence in C++, for the training loader's per-sample Generator: each sample seeds its own
// np.random.Generator from [seed, k, j] (data/sampler.py), and SeedSequence, run in NumPy's Cython with
// Python ints and arrays, was most of the 26-33 us default_rng took for it (SeedSequence 15-17 us, its
// generate_state 8; 110-140 us inside a sample, whose pixel passes evict the interpreter's caches). Same
// words as NumPy's (the algorithm is part of NumPy's reproducibility promise; src-test/test_data.py
// compares the two).
#pragma once
#include <cstdint>

namespace dn {

// SeedSequence(entropy).generate_state(n_words, np.uint32) for entropy given as its uint32 words (what
// NumPy makes of a list of non-negative ints: each one's 32-bit words, least significant first, one word
// for 0), the default pool of 4 words and no spawn key (O'Neill's seed_seq_fe, numpy/random/bit_generator.pyx).
// generate_state(n, np.uint64) is n_words = 2 n, word pairs read little-endian (low word first).
void seed_sequence_state(const uint32_t* entropy, int n_entropy, uint32_t* out, int n_words);

}  // namespace dn
