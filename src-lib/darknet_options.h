// The options Darknet's parser (AlexeyAB parser.c) reads in each section type, so that an option
// darknet_py did not use can be reported for what it is: one Darknet uses that we do not support,
// one with no effect on results, one that belongs in another section, or a typo.
#pragma once
#include <string>

namespace dn {

// Why `key` in a [section_type] section was not used, as the tail of a warning ("not used: ...").
std::string explain_unused_option(const std::string& section_type, const std::string& key);

// Levenshtein distance (for "did you mean").
int edit_distance(const std::string& a, const std::string& b);

}  // namespace dn
