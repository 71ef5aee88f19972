#include "engine/config/recipe_io.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "engine/config/recipe_fields.hpp"
#include "engine/config/recipe_rules.hpp"

namespace loom {
namespace {

// One key=value to apply: from the file (with its line) or from a --set override.
struct Setting {
  std::string section, key;
  YAML::Node value;
  std::string where;  // "configs/tiny.yaml:4:3" or "--set train.steps=5"
};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// "did you mean ...?" for the closest candidate within a small edit distance, or "".
std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
  // A candidate that starts the word or is started by it ("optimizer" / "optim") is a likely
  // intent even when many letters differ.
  for (const auto& c : candidates)
    if (c.size() >= 3 && word.size() >= 3 && (word.rfind(c, 0) == 0 || c.rfind(word, 0) == 0))
      return " (did you mean '" + c + "'?)";
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

std::string unknown_key_message(const std::string& section, const std::string& key) {
  std::vector<std::string> same_section, everywhere;
  for (const Field& f : recipe_fields()) {
    if (f.section == section) same_section.push_back(f.key);
    everywhere.push_back(f.full_name());
  }
  std::string hint;
  std::vector<std::string> same_full;
  for (const auto& k : same_section) same_full.push_back(section + "." + k);
  hint = suggestion(section + "." + key, same_full);
  if (hint.empty()) {
    // A key put in the wrong section (e.g. train.lr) is the commonest slip: look everywhere.
    for (const Field& f : recipe_fields())
      if (f.key == key) hint = " (did you mean '" + f.full_name() + "'?)";
  }
  if (hint.empty()) hint = suggestion(section + "." + key, everywhere);
  std::string known;
  for (const auto& k : same_section) known += (known.empty() ? "" : ", ") + k;
  return "unknown key '" + section + "." + key + "'" + hint + "; keys of section '" + section + "': " + known;
}

std::string where_of(const std::string& file, const YAML::Mark& m) {
  return file + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw ConfigError(where + ": " + what);
}

std::string node_kind(const YAML::Node& n) {
  if (n.IsMap()) return "a mapping";
  if (n.IsSequence()) return "a list";
  if (n.IsNull()) return "nothing";
  // A scalar as written, cut short: a text file given as the recipe is one long scalar.
  const std::string& v = n.Scalar();
  if (v.size() > 80) {
    size_t cut = 60;
    while (cut > 0 && (static_cast<unsigned char>(v[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
    return "'" + v.substr(0, cut) + "...' (a text of " + std::to_string(v.size()) + " bytes)";
  }
  return "'" + v + "'";
}

void apply(Recipe& r, const Setting& s) {
  const Field* f = find_field(s.section, s.key);
  if (!f) fail(s.where, unknown_key_message(s.section, s.key));
  const std::string name = f->full_name();
  const YAML::Node& v = s.value;
  void* p = f->member(r);
  r.origin[name] = s.where;

  if (f->kind == FieldKind::String) {
    if (v.IsNull()) {
      *static_cast<std::string*>(p) = "";
    } else if (!v.IsScalar()) {
      fail(s.where, name + ": expected a string, got " + node_kind(v));
    } else {
      *static_cast<std::string*>(p) = v.Scalar();
    }
    const auto& ch = f->choices;
    const std::string& val = *static_cast<std::string*>(p);
    if (!ch.empty() && std::find(ch.begin(), ch.end(), val) == ch.end()) {
      std::string list;
      for (const auto& c : ch) list += (list.empty() ? "" : " | ") + c;
      fail(s.where, name + ": '" + val + "' is not one of " + list + suggestion(val, ch));
    }
    return;
  }

  if (f->kind == FieldKind::Bool) {
    const std::string t = v.IsScalar() ? v.Scalar() : "";
    if (t == "true" || t == "false") *static_cast<bool*>(p) = t == "true";
    else fail(s.where, name + ": expected true or false, got " + (v.IsScalar() ? "'" + t + "'" : node_kind(v)));
    return;
  }
  if (!v.IsScalar() || v.Scalar().empty())
    fail(s.where, name + ": expected " + std::string(f->kind == FieldKind::Float ? "a number" : f->kind == FieldKind::FloatOrAuto ? "a number or 'auto'" : "an integer") +
                      ", got " + node_kind(v));
  const std::string text = v.Scalar();
  auto range_check = [&](double x) {
    if (x < f->lo || x > f->hi) {
      // The bound that was crossed, written exactly (integers as integers: "1048576", never
      // "1.04858e+06"); an integer key's huge upper bound is named only when it was crossed.
      const bool integer = f->kind == FieldKind::Int || f->kind == FieldKind::IntOrAuto ||
                           f->kind == FieldKind::Int64 || f->kind == FieldKind::UInt64;
      auto num = [&](double b) {
        char buf[40];
        if (integer) std::snprintf(buf, sizeof buf, "%.0f", b);
        else std::snprintf(buf, sizeof buf, "%.10g", b);
        return std::string(buf);
      };
      std::ostringstream os;
      os << name << ": " << text << " is out of range; expected ";
      if (integer) os << "an integer " << (x < f->lo ? ">= " + num(f->lo) : "<= " + num(f->hi));
      else if (std::isinf(f->hi)) os << "a value >= " << num(f->lo);
      else os << "a value in [" << num(f->lo) << ", " << num(f->hi) << "]";
      fail(s.where, os.str());
    }
  };
  switch (f->kind) {
    case FieldKind::IntOrAuto:
      if (text == "auto") {
        *static_cast<int*>(p) = 0;
        return;
      }
      [[fallthrough]];
    case FieldKind::Int: {
      int64_t x;
      if (!parse_integer(text, x))
        fail(s.where, name + ": expected " + (f->kind == FieldKind::IntOrAuto ? "an integer or 'auto'" : "an integer") +
                          ", got '" + text + "'");
      range_check(static_cast<double>(x));
      *static_cast<int*>(p) = static_cast<int>(x);
      return;
    }
    case FieldKind::Int64: {
      int64_t x;
      if (!parse_integer(text, x)) fail(s.where, name + ": expected an integer, got '" + text + "'");
      range_check(static_cast<double>(x));
      *static_cast<int64_t*>(p) = x;
      return;
    }
    case FieldKind::UInt64: {
      uint64_t x;
      if (!parse_integer(text, x)) fail(s.where, name + ": expected a non-negative integer, got '" + text + "'");
      *static_cast<uint64_t*>(p) = x;
      return;
    }
    case FieldKind::FloatOrAuto:
      if (text == "auto") {
        *static_cast<double*>(p) = 0;
        return;
      }
      [[fallthrough]];
    case FieldKind::Float: {
      errno = 0;
      char* end = nullptr;
      double x = std::strtod(text.c_str(), &end);
      if (end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(x))
        fail(s.where, name + ": expected a finite number" + (f->kind == FieldKind::FloatOrAuto ? " or 'auto'" : "") +
                          ", got '" + text + "'");
      range_check(x);
      *static_cast<double*>(p) = x;
      return;
    }
    case FieldKind::String:
    case FieldKind::Bool: break;
  }
}

std::vector<Setting> settings_from_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw ConfigError(path + ": recipe file not found");
  if (fs::is_directory(path, ec)) throw ConfigError(path + ": is a directory, expected a YAML recipe file");
  YAML::Node root;
  try {
    // One document: a second one (after `---`) would otherwise be dropped without a word.
    const std::vector<YAML::Node> docs = YAML::LoadAllFromFile(path);
    if (!docs.empty()) root = docs[0];
    for (size_t i = 1; i < docs.size(); ++i)
      if (!docs[i].IsNull())
        fail(where_of(path, docs[i].Mark()), "a second YAML document (after '---'): a recipe is one document; "
                                             "merge its sections into the first");
  } catch (const YAML::ParserException& e) {
    fail(where_of(path, e.mark), "YAML syntax error: " + e.msg);
  } catch (const YAML::BadFile&) {
    throw ConfigError(path + ": cannot open the recipe file for reading");
  }
  const std::string sections_list = "model, parallel, train, optim, data, checkpoint, log, lora";
  if (root.IsNull()) throw ConfigError(path + ": the recipe is empty; expected a mapping with sections " + sections_list);
  if (!root.IsMap())
    fail(where_of(path, root.Mark()), "expected a mapping of sections (" + sections_list + "), got " + node_kind(root));

  std::vector<Setting> out;
  std::set<std::string> seen_sections;
  for (const auto& sec : root) {
    const std::string section = sec.first.Scalar();
    const std::string where = where_of(path, sec.first.Mark());
    const auto& known = recipe_sections();
    if (std::find(known.begin(), known.end(), section) == known.end()) {
      std::string hint;
      for (const Field& f : recipe_fields())
        if (f.key == section) hint = " (did you mean '" + f.full_name() + "'? keys belong inside their section)";
      if (hint.empty()) hint = suggestion(section, known);
      fail(where, "unknown section '" + section + "'" + hint + "; sections are " + sections_list);
    }
    if (!seen_sections.insert(section).second) fail(where, "section '" + section + "' appears twice");
    if (sec.second.IsNull()) continue;  // "log:" with nothing under it: all defaults
    if (!sec.second.IsMap())
      fail(where, "section '" + section + "' must be a mapping of keys, got " + node_kind(sec.second));
    std::set<std::string> seen_keys;
    for (const auto& kv : sec.second) {
      const std::string key = kv.first.Scalar();
      const std::string kwhere = where_of(path, kv.first.Mark());
      if (!seen_keys.insert(key).second) fail(kwhere, "duplicate key '" + section + "." + key + "'");
      out.push_back({section, key, kv.second, kwhere});
    }
  }
  return out;
}

Setting setting_from_override(const std::string& ov) {
  const std::string where = "--set " + ov;
  auto eq = ov.find('=');
  if (eq == std::string::npos) fail(where, "expected section.key=value, e.g. --set train.steps=100");
  std::string name = ov.substr(0, eq), value = ov.substr(eq + 1);
  auto dot = name.find('.');
  if (dot == std::string::npos || name.find('.', dot + 1) != std::string::npos)
    fail(where, "'" + name + "' is not a section.key name (e.g. optim.lr)");
  Setting s{name.substr(0, dot), name.substr(dot + 1), {}, where};
  const auto& known = recipe_sections();
  if (std::find(known.begin(), known.end(), s.section) == known.end())
    fail(where, "unknown section '" + s.section + "'" + suggestion(s.section, known));
  try {
    // What YAML would turn into something other than the text, where the text was meant: a value
    // starting with an indicator of a directive, anchor, tag, alias, comment or block scalar
    // ("%j" as a Slurm-style path, "&a", "!x", "#x", "|"), one with a comment inside ("a #b"),
    // or anything YAML reads as empty that is not YAML's spelling of null. Parsed, each would
    // silently lose text (an empty checkpoint.dir turns checkpointing off).
    const bool quoted = !value.empty() && (value[0] == '"' || value[0] == '\'');
    if (!value.empty() && (std::string("%&!*@`#|>").find(value[0]) != std::string::npos ||
                           (!quoted && value.find(" #") != std::string::npos))) {
      s.value = YAML::Node(value);
    } else {
      s.value = value.empty() ? YAML::Node() : YAML::Load(value);
      const bool null_spelling = value == "~" || value == "null" || value == "Null" || value == "NULL";
      const bool empty_spelling = value == "''" || value == "\"\"";
      const bool read_empty = s.value.IsNull() || !s.value.IsDefined() ||
                              (s.value.IsScalar() && s.value.Scalar().empty());
      if (!value.empty() && !null_spelling && !empty_spelling && read_empty) s.value = YAML::Node(value);
    }
  } catch (const YAML::ParserException& e) {
    fail(where, "cannot parse the value '" + value + "': " + e.msg);
  }
  return s;
}

}  // namespace

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides) {
  Recipe r;
  r.source = path;
  std::vector<Setting> settings = settings_from_file(path);
  for (const auto& ov : overrides) settings.push_back(setting_from_override(ov));
  for (const auto& s : settings) apply(r, s);
  validate_shapes(r);
  return r;
}

void apply_override(Recipe& r, const std::string& section_key_value) {
  apply(r, setting_from_override(section_key_value));
}

std::string recipe_to_yaml(const Recipe& r) {
  std::ostringstream os;
  os << "# resolved recipe: " << r.source << " (world " << r.world << ")\n";
  std::string section;
  for (const Field& f : recipe_fields()) {
    if (f.section != section) {
      section = f.section;
      os << section << ":\n";
    }
    std::string v = field_value_string(f, r);
    if (f.kind == FieldKind::String) {
      // Quote strings so that values such as "" or "auto: x" survive a round trip.
      YAML::Emitter e;
      e << YAML::DoubleQuoted << v;
      v = e.c_str();
    }
    os << "  " << f.key << ": " << v << "\n";
  }
  return os.str();
}

std::string recipe_key_table() {
  Recipe defaults;
  std::ostringstream os;
  os << "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const Field& f : recipe_fields()) {
    std::string d = field_value_string(f, defaults);
    if (f.kind == FieldKind::String && d.empty()) d = "\"\"";
    std::string type = f.type_name();
    if (!f.choices.empty()) {
      type.clear();
      for (const auto& c : f.choices) type += (type.empty() ? "" : " \\| ") + c;
    }
    os << "| `" << f.full_name() << "` | " << type << " | `" << d << "` | " << f.doc << " |\n";
  }
  return os.str();
}

}  // namespace loom
