#include "engine/pretrained/safetensors_file.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "kernels/dtype.hpp"

namespace loom {
namespace {

// Bytes per element of the dtypes the format names (0: unknown to Loom).
size_t element_bytes(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

uint64_t read_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

int64_t SafetensorsEntry::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  auto bad = [&](const std::string& what) { return std::runtime_error(path + ": not a valid safetensors file: " + what); };
  const size_t size = file_.size();
  if (size < 8) throw bad("the file has " + std::to_string(size) + " bytes, less than the 8-byte header length");
  const uint64_t n = read_u64_le(file_.data());
  if (n > size - 8)
    throw bad("the header is said to be " + std::to_string(n) + " bytes but the file has only " +
              std::to_string(size - 8) + " after the length (truncated?)");
  data_start_ = 8 + n;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file_.data() + 8, file_.data() + data_start_);
  } catch (const std::exception& e) {
    throw bad(std::string("its JSON header does not parse (") + e.what() + ")");
  }
  if (!header.is_object()) throw bad("its JSON header is not an object");
  const uint64_t data_size = size - data_start_;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) throw bad("__metadata__ is not an object");
      for (const auto& [k, m] : v.items())
        if (m.is_string()) metadata_[k] = m.get<std::string>();
      continue;
    }
    SafetensorsEntry e;
    e.name = name;
    try {
      e.dtype = v.at("dtype").get<std::string>();
      e.shape = v.at("shape").get<std::vector<int64_t>>();
      const auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
      if (off.size() != 2) throw std::runtime_error("data_offsets must be [begin, end]");
      e.begin = off[0];
      e.end = off[1];
    } catch (const std::exception& ex) {
      throw bad("tensor '" + name + "': " + ex.what());
    }
    for (int64_t d : e.shape)
      if (d < 0) throw bad("tensor '" + name + "' has a negative dimension in shape " + shape_text(e.shape));
    if (e.begin > e.end || e.end > data_size)
      throw bad("tensor '" + name + "' has data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                "] outside the " + std::to_string(data_size) + " bytes of data (truncated?)");
    const size_t es = element_bytes(e.dtype);
    if (es && e.end - e.begin != uint64_t(e.elements()) * es)
      throw bad("tensor '" + name + "' of dtype " + e.dtype + " and shape " + shape_text(e.shape) + " needs " +
                std::to_string(uint64_t(e.elements()) * es) + " bytes but its data_offsets span " +
                std::to_string(e.end - e.begin));
    entries_.push_back(std::move(e));
  }
  std::sort(entries_.begin(), entries_.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin; });
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

const SafetensorsEntry& SafetensorsFile::readable(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  if (!e) throw std::runtime_error(path() + ": no tensor '" + name + "' (the file has " +
                                   std::to_string(entries_.size()) + " tensors)");
  if (e->dtype != "F32" && e->dtype != "BF16" && e->dtype != "F16")
    throw std::runtime_error(path() + ": tensor '" + name + "' has dtype " + e->dtype +
                             ", which Loom does not read (F32, BF16 or F16)");
  return *e;
}

void SafetensorsFile::copy_elements(const SafetensorsEntry& e, size_t first, size_t count, float* out) const {
  const StoredFloat kind = e.dtype == "F32" ? StoredFloat::F32 : e.dtype == "BF16" ? StoredFloat::BF16 : StoredFloat::F16;
  read_mapped_floats(file_, data_start_ + size_t(e.begin) + first * stored_float_bytes(kind), count, kind, out);
}

void SafetensorsFile::read_f32_range(const std::string& name, size_t first, size_t count, float* out) const {
  const SafetensorsEntry& e = readable(name);
  if (first > size_t(e.elements()) || count > size_t(e.elements()) - first)
    throw std::logic_error(path() + ": elements [" + std::to_string(first) + ", +" + std::to_string(count) +
                           ") of tensor '" + name + "' are past its " + std::to_string(e.elements()));
  copy_elements(e, first, count, out);
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name, const std::vector<int64_t>& expected) const {
  const SafetensorsEntry& e = readable(name);
  if (!expected.empty() && e.shape != expected)
    throw std::runtime_error(path() + ": tensor '" + name + "' has shape " + shape_text(e.shape) + ", expected " +
                             shape_text(expected));
  std::vector<float> out(size_t(e.elements()));
  copy_elements(e, 0, out.size(), out.data());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  namespace fs = std::filesystem;
  if (fs::exists(path)) throw std::runtime_error(path + ": already exists; not replacing it");
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.dtype != "F32" && t.dtype != "BF16")
      throw std::runtime_error(path + ": tensor '" + t.name + "': cannot write dtype " + t.dtype + " (F32 or BF16)");
    if (header.contains(t.name)) throw std::runtime_error(path + ": tensor '" + t.name + "' given twice");
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const uint64_t bytes = uint64_t(n) * (t.dtype == "F32" ? 4 : 2);
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(tmp + ": cannot create");
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = (uint64_t(h.size()) >> (8 * i)) & 0xff;
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(h.data(), std::streamsize(h.size()));
    std::vector<uint16_t> half;
    for (const auto& t : tensors) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      if (t.dtype == "F32") {
        out.write(reinterpret_cast<const char*>(t.data), std::streamsize(n) * 4);
      } else {
        half.resize(size_t(n));
        for (int64_t i = 0; i < n; ++i) half[size_t(i)] = bf16::from_float(t.data[i]);
        out.write(reinterpret_cast<const char*>(half.data()), std::streamsize(n) * 2);
      }
    }
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw std::runtime_error(tmp + ": write failed (disk full?)");
    }
  }
  fs::rename(tmp, path);
}

}  // namespace loom
