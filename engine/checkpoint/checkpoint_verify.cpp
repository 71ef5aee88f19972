#include "engine/checkpoint/checkpoint_verify.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "engine/checkpoint/checkpoint_catalog.hpp"
#include "engine/checkpoint/checkpoint_layout.hpp"
#include "engine/checkpoint/h5_tensor_file.hpp"
#include "engine/checkpoint/slice_checksum.hpp"
#include "engine/util/crc32c.hpp"

namespace loom {
namespace fs = std::filesystem;
namespace {

// The CRC-32C of each dataset's byte range (the datasets are contiguous), read from the file in
// 4 MiB blocks. Saves and loads do not need it (they checksum the slices in memory,
// slice_checksum.hpp); `loom ckpt inspect` does, after precheck_checkpoint has covered the rest.
std::vector<uint32_t> dataset_crcs_from_file(const std::string& path, const std::vector<DatasetExtent>& extents) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open");
  std::vector<char> buf(4 << 20);
  std::vector<uint32_t> crcs(extents.size(), 0);
  for (size_t i = 0; i < extents.size(); ++i) {
    f.seekg(std::streamoff(extents[i].offset));
    for (uint64_t left = extents[i].bytes; left > 0;) {
      f.read(buf.data(), std::streamsize(std::min<uint64_t>(buf.size(), left)));
      const uint64_t got = uint64_t(f.gcount());
      if (got == 0) throw std::runtime_error(path + ": short read in dataset " + extents[i].name);
      crcs[i] = crc32c(buf.data(), got, crcs[i]);
      left -= got;
    }
  }
  return crcs;
}

}  // namespace

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::string> out;
  for (const CheckpointEntry& e : scan_checkpoints(dir).complete) out.push_back(e.path);
  return out;
}

std::string verify_checkpoint(const std::string& ckpt) {
  // The manifest, the sizes and the bytes outside the datasets, as before any load; then every
  // dataset's bytes (a checksum per dataset names the tensor that is damaged).
  if (std::string bad = precheck_checkpoint(ckpt); !bad.empty()) return bad;
  const nlohmann::json man = nlohmann::json::parse(std::ifstream(fs::path(ckpt) / "manifest.json"));
  for (const auto& file : man["files"]) {
    const fs::path p = fs::path(ckpt) / file["name"].get<std::string>();
    std::vector<DatasetExtent> extents;
    for (const auto& d : file["datasets"])
      extents.push_back({d["name"].get<std::string>(), d["offset"].get<uint64_t>(), d["bytes"].get<uint64_t>()});
    const std::vector<uint32_t> crcs = dataset_crcs_from_file(p.string(), extents);
    for (size_t i = 0; i < extents.size(); ++i)
      if (crcs[i] != file["datasets"][i]["crc32c"].get<uint32_t>())
        return p.string() + ": dataset " + extents[i].name + " fails its CRC-32C check (corrupted)";
  }
  return "";
}

std::string precheck_checkpoint(const std::string& ckpt) {
  const fs::path man_path = fs::path(ckpt) / "manifest.json";
  std::error_code ec;
  if (!fs::exists(ckpt, ec)) return ckpt + ": no such directory";
  if (!fs::is_directory(ckpt, ec)) return ckpt + ": not a directory (a checkpoint is a step_NNNNNNNN directory)";
  if (!fs::exists(man_path)) {
    if (!scan_checkpoints(ckpt).complete.empty())
      return ckpt + " is a checkpoint.dir, not a checkpoint: name one of its step_NNNNNNNN directories, or use "
                    "checkpoint.resume=auto with checkpoint.dir=" + ckpt;
    return "no manifest.json: an incomplete or damaged checkpoint";
  }
  try {
    const nlohmann::json man = nlohmann::json::parse(std::ifstream(man_path));
    // Another kind of directory with a manifest: say what it is rather than which key it lacks.
    if (const std::string format = man.is_object() ? man.value("format", "") : ""; format != "loom-checkpoint") {
      if (format == "loom-tokens")
        return "a `loom prep` dataset (its manifest.json is a dataset's), not a checkpoint";
      if (!format.empty() || !man.is_object() || !man.contains("files"))
        return "manifest.json is not a Loom checkpoint's (format " + (format.empty() ? "missing" : "'" + format + "'") +
               ", expected 'loom-checkpoint')";
    }
    // AdamW's update count (absent in older checkpoints): at most one per step. Out of range it
    // is damage (the manifest has no checksum of its own); 0 before an update would be t = 0.
    if (man.contains("optimizer")) {
      const auto& u = man["optimizer"].is_object() && man["optimizer"].contains("updates") ? man["optimizer"]["updates"]
                                                                                            : nlohmann::json();
      if (!u.is_number_integer() || u.get<int64_t>() < 0 || u.get<int64_t>() > man.at("step").get<int64_t>())
        return "manifest.json: optimizer.updates " + u.dump() + " is not a count from 0 to the step " +
               man.at("step").dump() + " (damaged)";
    }
    const auto& files = man.at("files");
    if (files.size() != 1 || files[0].at("name") != kCheckpointFile) return "manifest.json does not list " + std::string(kCheckpointFile);
    for (const auto& file : files) {
      const fs::path p = fs::path(ckpt) / file.at("name").get<std::string>();
      if (!fs::exists(p)) return p.string() + " is missing";
      const uint64_t want_bytes = file.at("bytes").get<uint64_t>();
      if (fs::file_size(p) != want_bytes)
        return p.string() + " has " + std::to_string(fs::file_size(p)) + " bytes, the manifest says " +
               std::to_string(want_bytes) + " (truncated?)";
      std::vector<DatasetExtent> extents;
      std::vector<uint32_t> crcs;
      for (const auto& d : file.at("datasets")) {
        extents.push_back({d.at("name").get<std::string>(), d.at("offset").get<uint64_t>(), d.at("bytes").get<uint64_t>()});
        crcs.push_back(d.at("crc32c").get<uint32_t>());
      }
      if (file_crc_from_datasets(p.string(), want_bytes, extents, crcs) != file.at("crc32c").get<uint32_t>())
        return p.string() + " fails its CRC-32C check outside the datasets (corrupted HDF5 metadata)";
    }
  } catch (const std::exception& e) {
    return "manifest.json is unreadable or incomplete: " + std::string(e.what());
  }
  return "";
}

std::string inspect_checkpoint(const std::string& ckpt) {
  std::ostringstream os;
  if (std::string bad = verify_checkpoint(ckpt); !bad.empty()) throw std::runtime_error(ckpt + ": " + bad);
  nlohmann::json man = nlohmann::json::parse(std::ifstream(fs::path(ckpt) / "manifest.json"));
  os << "checkpoint " << ckpt << "\n  step " << man["step"] << ", loader next step " << man["loader"]["next_step"]
     << ", optimizer updates "
     << (man.contains("optimizer") ? man["optimizer"]["updates"].dump() : std::string("(not recorded)"))
     << ", health " << (man.contains("health") ? man["health"].dump() : std::string("(not recorded)"))
     << "\n  saved under " << man["layout"].dump() << "\n  model " << man["model"].dump() << "\n  loom "
     << man["loom_version"].get<std::string>() << " commit " << man["git_commit"].get<std::string>() << "\n";
  // The tensors as the manifest lists them, whatever the model holds (a LoRA checkpoint: the
  // adapters and what else trained, not the frozen base).
  H5TensorFile f = H5TensorFile::open_alone((fs::path(ckpt) / kCheckpointFile).string());
  os << "  tensors (global shape, CRC-32C of params / adam_m / adam_v data):\n";
  const std::string params = kCheckpointGroups[0];
  for (const auto& d : man.at("files").at(0).at("datasets")) {
    const std::string ds = d.at("name").get<std::string>();
    if (ds.rfind(params, 0) != 0) continue;
    const std::string name = ds.substr(params.size());
    const std::vector<int64_t> shape = f.shape_of(ds);
    size_t n = 1;
    for (int64_t x : shape) n *= size_t(x);
    TensorSlice all{{{0, shape.empty() ? 1 : shape[0]}}, 0, shape.size() > 1 ? shape[1] : 1};
    std::vector<float> buf(n);
    os << "    " << name << " [";
    for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
    os << "]";
    for (const char* group : kCheckpointGroups) {
      f.read(group + name, &all, buf.data());
      char crc[16];
      std::snprintf(crc, sizeof crc, " %08x", crc32c(buf.data(), n * sizeof(float)));
      os << crc;
    }
    os << "\n";
  }
  os << "  recipe:\n" << man["recipe"].get<std::string>();
  return os.str();
}

}  // namespace loom
