// See loader_jitter.h.
#include "loader_jitter.h"

#include <algorithm>
#include <cmath>

namespace dn {
namespace {

// np.rint, then np.maximum(v, 0), np.minimum(v, 255), astype(uint8): nearbyint rounds in the current
// mode, to nearest even unless someone changed it (NumPy's rint does the same)
inline uint8_t level(double v) { return (uint8_t)std::min(std::max(std::nearbyint(v), 0.0), 255.0); }

}  // namespace

void hsv_jitter_tables(double dhue, double dsat, double dexp, uint8_t* tables) {
    const double hue_offset = 179 * dhue;  // Python's 179 * dhue, a double, then added to each level
    for (int x = 0; x < 256; ++x) {
        tables[3 * x] = level((double)x + hue_offset);
        tables[3 * x + 1] = level((double)x * dsat);
        tables[3 * x + 2] = level((double)x * dexp);
    }
}

}  // namespace dn
