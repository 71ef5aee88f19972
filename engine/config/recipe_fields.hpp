#pragma once
// The table of every recipe key: its section, name, type, allowed range and meaning. Parsing,
// overriding, printing and the key reference in docs/recipes.md are all driven by this table,
// so a new key is added in exactly two places: its struct member (with its default) and here.
#include <charconv>
#include <string>
#include <system_error>
#include <vector>

#include "engine/config/recipe.hpp"

namespace loom {

// A whole decimal integer (an optional leading +), nothing else: recipe values and lists.
template <typename T>
inline bool parse_integer(const std::string& s, T& out) {
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') ++b;
  auto [p, ec] = std::from_chars(b, e, out);
  return ec == std::errc() && p == e && b != e;
}


enum class FieldKind { Int, Int64, UInt64, Float, String, IntOrAuto, Bool, FloatOrAuto };  // *OrAuto: auto is 0

struct Field {
  std::string section;
  std::string key;
  FieldKind kind;
  double lo, hi;                     // inclusive range for numbers
  std::vector<std::string> choices;  // allowed values for strings (empty: any)
  void* (*member)(Recipe&);          // the struct member this key sets
  std::string doc;

  std::string full_name() const { return section + "." + key; }
  std::string type_name() const;
};

const std::vector<Field>& recipe_fields();
const std::vector<std::string>& recipe_sections();
const Field* find_field(const std::string& section, const std::string& key);

// The value of a field in `r`, formatted as it is written in YAML.
std::string field_value_string(const Field& f, const Recipe& r);

}  // namespace loom
