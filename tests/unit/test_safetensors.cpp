// The safetensors reader against files built byte by byte here (not by Loom's writer), its
// errors for broken files, and the writer: read back equal, and the same input written twice
// gives the same bytes.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/pretrained/safetensors_file.hpp"

namespace fs = std::filesystem;
using loom::SafetensorsFile;

namespace {

struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("loom_st_" + std::to_string(::getpid()) + "_" + std::to_string(rand()));
  TempDir() { fs::create_directories(dir); }
  ~TempDir() { fs::remove_all(dir); }
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

// A safetensors file: the 8-byte length, `header` verbatim, then `data`.
void write_raw(const std::string& path, const std::string& header, const std::vector<uint8_t>& data,
               uint64_t claimed_len = UINT64_MAX) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = claimed_len == UINT64_MAX ? header.size() : claimed_len;
  for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xff));
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
}

void put_f32(std::vector<uint8_t>& d, float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  for (int i = 0; i < 4; ++i) d.push_back(uint8_t(u >> (8 * i)));
}
void put_u16(std::vector<uint8_t>& d, uint16_t u) {
  d.push_back(uint8_t(u));
  d.push_back(uint8_t(u >> 8));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("safetensors reads F32 BF16 and F16 tensors written byte by byte", "[safetensors]") {
  TempDir t;
  std::vector<uint8_t> data;
  for (float f : {1.0f, -2.5f, 0.125f, 3.0f, 4.0f, 5.0f}) put_f32(data, f);  // a: F32 [2, 3]
  put_u16(data, 0x3f80);  // b: BF16 [2]: 1.0
  put_u16(data, 0xc040);  //              -3.0
  put_u16(data, 0x3c00);  // c: F16 [1]: 1.0
  const std::string header =
      R"({"b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},)"
      R"("__metadata__":{"format":"pt"},)"
      R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("c":{"dtype":"F16","shape":[1],"data_offsets":[28,30]}}   )";
  write_raw(t.file("m.safetensors"), header, data);
  SafetensorsFile f(t.file("m.safetensors"));
  REQUIRE(f.tensors().size() == 3);
  CHECK(f.tensors()[0].name == "a");  // in data order
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.read_f32("a", {2, 3}) == std::vector<float>{1.0f, -2.5f, 0.125f, 3.0f, 4.0f, 5.0f});
  CHECK(f.read_f32("b") == std::vector<float>{1.0f, -3.0f});
  CHECK(f.read_f32("c", {1}) == std::vector<float>{1.0f});
}

TEST_CASE("safetensors names the file and the problem of a broken file", "[safetensors]") {
  TempDir t;
  const std::string p = t.file("bad.safetensors");
  std::vector<uint8_t> data(24, 0);
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";

  write_raw(p, ok, std::vector<uint8_t>(data.begin(), data.begin() + 20));  // data cut short
  CHECK_THAT(error_of([&] { SafetensorsFile f(p); }), Catch::Contains(p) && Catch::Contains("outside the 20 bytes"));

  write_raw(p, ok, data, 1000);  // the length points past the end
  CHECK_THAT(error_of([&] { SafetensorsFile f(p); }), Catch::Contains("header is said to be 1000 bytes"));

  write_raw(p, "{not json", data);
  CHECK_THAT(error_of([&] { SafetensorsFile f(p); }), Catch::Contains("does not parse"));

  write_raw(p, R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,24]}})", data);  // 16 != 24 bytes
  CHECK_THAT(error_of([&] { SafetensorsFile f(p); }), Catch::Contains("tensor 'a'") && Catch::Contains("needs 16 bytes"));

  write_raw(p, R"({"a":{"dtype":"I64","shape":[3],"data_offsets":[0,24]}})", data);
  SafetensorsFile i64(p);
  CHECK_THAT(error_of([&] { i64.read_f32("a"); }), Catch::Contains("dtype I64") && Catch::Contains("F32, BF16 or F16"));

  write_raw(p, ok, data);
  SafetensorsFile f(p);
  CHECK_THAT(error_of([&] { f.read_f32("h.0.attn.c_attn.weight"); }), Catch::Contains("no tensor 'h.0.attn.c_attn.weight'"));
  CHECK_THAT(error_of([&] { f.read_f32("a", {3, 2}); }), Catch::Contains("has shape [2, 3], expected [3, 2]"));

  write_raw(p, "", {}, 0);
  std::ofstream(p, std::ios::trunc) << "abc";  // shorter than the length field
  CHECK_THAT(error_of([&] { SafetensorsFile g(p); }), Catch::Contains("less than the 8-byte header length"));
}

TEST_CASE("safetensors written by Loom reads back and is byte-identical when written again", "[safetensors]") {
  TempDir t;
  const std::vector<float> w = {0.5f, -1.25f, 3.0f, 1e-3f, 7.0f, -0.0f}, b = {1.0f, 2.0f, 3.0f};
  const std::vector<loom::SafetensorsTensor> ts = {{"wte.weight", {2, 3}, w.data(), "F32"},
                                                   {"ln_f.bias", {3}, b.data(), "BF16"}};
  loom::write_safetensors(t.file("one.safetensors"), ts, {{"format", "pt"}});
  loom::write_safetensors(t.file("two.safetensors"), ts, {{"format", "pt"}});
  std::ifstream a(t.file("one.safetensors"), std::ios::binary), c(t.file("two.safetensors"), std::ios::binary);
  const std::string bytes_a((std::istreambuf_iterator<char>(a)), {}), bytes_c((std::istreambuf_iterator<char>(c)), {});
  CHECK(bytes_a == bytes_c);
  CHECK((bytes_a.size() - 8 - 24 - 6) % 8 == 0);  // the header is padded: the data starts 8-aligned
  SafetensorsFile f(t.file("one.safetensors"));
  CHECK(f.read_f32("wte.weight", {2, 3}) == w);
  CHECK(f.read_f32("ln_f.bias", {3}) == b);  // exact in bf16
  CHECK(f.metadata().at("format") == "pt");
  // Never replaces a file.
  CHECK_THAT(error_of([&] { loom::write_safetensors(t.file("one.safetensors"), ts); }), Catch::Contains("already exists"));
}
