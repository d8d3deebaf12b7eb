// The per-image HSV jitter tables of the training loader's colour pass (cpu/loader_pixels.h's
// `tables`), built here from the three jitter factors instead of in NumPy: augment._hsv_lut took ten
// NumPy calls a sample (13 us alone, 45-50 inside a sample, whose pixel passes evict the
// interpreter's caches); this is the same float64 arithmetic, so the same bytes
// (src-test/test_loader_pixels.py compares the two).
#pragma once
#include <cstdint>

namespace dn {

// tables: 256 x 3 bytes, row x = the new hue, saturation and value of level x: clamp(rint(x + 179 dhue)),
// clamp(rint(x * dsat)), clamp(rint(x * dexp)) to [0, 255], in double, rint rounding halves to even
// (np.rint), as augment._hsv_lut computes them.
void hsv_jitter_tables(double dhue, double dsat, double dexp, uint8_t* tables);

}  // namespace dn
