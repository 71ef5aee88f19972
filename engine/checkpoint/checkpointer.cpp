#include "engine/checkpoint/checkpointer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <utility>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "engine/checkpoint/h5_tensor_file.hpp"
#include "engine/config/recipe_io.hpp"
#include "engine/util/crc32c.hpp"
#include "loom_version.hpp"

namespace loom {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFile = "model.h5";

std::string step_name(int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "step_%08lld", (long long)step);
  return b;
}

// One pass over a file: the CRC-32C of the whole file and of each dataset's byte range (the
// datasets are contiguous), read in 4 MiB blocks.
struct FileSums {
  uint64_t bytes = 0;
  uint32_t file_crc = 0;
  std::vector<uint32_t> dataset_crc;  // in the order of the extents given
};
FileSums checksum_file(const std::string& path, const std::vector<DatasetExtent>& extents) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open");
  std::vector<char> buf(4 << 20);
  FileSums sums;
  sums.dataset_crc.assign(extents.size(), 0);
  while (f) {
    f.read(buf.data(), std::streamsize(buf.size()));
    const uint64_t got = uint64_t(f.gcount()), lo = sums.bytes, hi = lo + got;
    sums.file_crc = crc32c(buf.data(), got, sums.file_crc);
    for (size_t i = 0; i < extents.size(); ++i) {  // ~150 datasets: a scan per block is cheap
      const uint64_t a = std::max(lo, extents[i].offset), b = std::min(hi, extents[i].offset + extents[i].bytes);
      if (a < b) sums.dataset_crc[i] = crc32c(buf.data() + (a - lo), b - a, sums.dataset_crc[i]);
    }
    sums.bytes = hi;
  }
  return sums;
}

std::vector<std::string> dataset_names(const GptShape& s);

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << text;
    if (!f) throw std::runtime_error(tmp + ": write failed");
  }
  fsync_path(tmp);
  fs::rename(tmp, path);
}

// The global tensors of the model in a fixed order, with the shape stored for each (wte keeps
// only the real vocabulary rows: the padding depends on tp).
struct GlobalTensor {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<GlobalTensor> global_tensors(const GptShape& s) {
  std::vector<GlobalTensor> out;
  const ParamTable whole = gpt_param_table(s);  // named: a temporary would die before the loop
  for (const ParamInfo& p : whole.params()) {
    GlobalTensor g{p.name, p.global_shape};
    if (p.name == "wte") g.shape[0] = s.vocab;
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<std::string> dataset_names(const GptShape& s) {
  std::vector<std::string> names;
  for (const GlobalTensor& g : global_tensors(s))
    for (const char* group : {"params/", "adam_m/", "adam_v/"}) names.push_back(group + g.name);
  return names;
}

TensorSlice slice_of(const ParamInfo& p) { return TensorSlice{p.row_runs, p.col_begin, p.cols()}; }

std::string bcast_string(const std::string& s, MPI_Comm comm) {
  int len = int(s.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, comm);
  std::string out(size_t(len), '\0');
  if (len) {
    std::copy(s.begin(), s.end(), out.begin());
    MPI_Bcast(out.data(), len, MPI_CHAR, 0, comm);
  }
  return out;
}

}  // namespace

struct Checkpointer::Snapshot {
  int64_t steps_done = 0, loader_next_step = 0;
  std::vector<float> params, m, v;  // host copies, the model's flat layout on this rank
};

Checkpointer::Checkpointer(const Recipe& recipe, parallel::ProcessGroups& groups, Gpt& model, AdamW& optim,
                           parallel::GradSync& sync)
    : r_(recipe), groups_(groups), model_(model), optim_(optim), sync_(sync) {
  MPI_Comm_dup(groups.world().comm(), &io_comm_);
}

Checkpointer::~Checkpointer() {
  if (writer_.joinable()) writer_.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&io_comm_);
}

void Checkpointer::wait() {
  if (writer_.joinable()) writer_.join();
  in_flight_.reset();
  if (writer_error_) std::rethrow_exception(std::exchange(writer_error_, nullptr));
}

double Checkpointer::save(int64_t steps_done, int64_t loader_next_step) {
  auto t0 = std::chrono::steady_clock::now();
  wait();
  // Host copies of this rank's parameters and full (un-sharded) Adam moments.
  auto snap = std::make_shared<Snapshot>();
  snap->steps_done = steps_done;
  snap->loader_next_step = loader_next_step;
  const size_t n = model_.table().total();
  snap->params.resize(n);
  snap->m.assign(n, 0.0f);
  snap->v.assign(n, 0.0f);
  model_.get_params(snap->params.data());
  optim_.export_state(snap->m.data(), snap->v.data());
  sync_.gather_params(snap->m.data());  // ZeRO-1: every dp rank gets the whole slice (no-op otherwise)
  sync_.gather_params(snap->v.data());
  if (r_.checkpoint.async) {
    in_flight_ = snap;
    writer_ = std::thread([this, snap] {
      try {
        write(*snap, io_comm_);
      } catch (...) {
        writer_error_ = std::current_exception();
      }
    });
  } else {
    write(*snap, groups_.world().comm());
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Checkpointer::write(const Snapshot& snap, MPI_Comm world) {
  auto t0 = std::chrono::steady_clock::now();
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  const int64_t steps_done = snap.steps_done;
  const fs::path root = r_.checkpoint.dir;
  const fs::path partial = root / (step_name(steps_done) + ".partial");
  const fs::path final_dir = root / step_name(steps_done);
  if (rank == 0) {
    fs::create_directories(root);
    fs::remove_all(partial);  // leftovers of a save that died
    fs::create_directories(partial);
  }
  MPI_Barrier(world);
  const ParamTable& table = model_.table();
  const auto coord = groups_.coord();
  {
    H5TensorFile f = H5TensorFile::create((partial / kFile).string(), world);
    for (const GlobalTensor& g : global_tensors(model_.shape())) {
      const ParamInfo* mine = table.find_if_held(g.name);
      // One writer per element: dp rank 0; tp rank 0 for replicated tensors; the first stage for
      // the tied wte (the last stage's copy is identical).
      const bool writer = mine && coord.dp == 0 && (mine->split != TpSplit::Replicated || coord.tp == 0) &&
                          (g.name != "wte" || model_.stage().first);
      TensorSlice s = mine ? slice_of(*mine) : TensorSlice{};
      const TensorSlice* sl = writer ? &s : nullptr;
      f.write("params/" + g.name, g.shape, sl, writer ? snap.params.data() + mine->offset : nullptr);
      f.write("adam_m/" + g.name, g.shape, sl, writer ? snap.m.data() + mine->offset : nullptr);
      f.write("adam_v/" + g.name, g.shape, sl, writer ? snap.v.data() + mine->offset : nullptr);
    }
    f.set_attr("loom_checkpoint_version", "1");
    f.set_attr("step", std::to_string(steps_done));
    f.close();
  }
  MPI_Barrier(world);
  if (rank == 0) {
    const std::string file = (partial / kFile).string();
    fsync_path(file);
    const double write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto extents = H5TensorFile::extents(file, dataset_names(model_.shape()));
    const FileSums sums = checksum_file(file, extents);
    const uint64_t bytes = sums.bytes;
    const uint32_t crc = sums.file_crc;
    nlohmann::json datasets = nlohmann::json::array();
    for (size_t i = 0; i < extents.size(); ++i)
      datasets.push_back({{"name", extents[i].name}, {"offset", extents[i].offset}, {"bytes", extents[i].bytes},
                          {"crc32c", sums.dataset_crc[i]}});
    nlohmann::json man = {{"format", "loom-checkpoint"},
                          {"version", 1},
                          {"step", steps_done},
                          {"loader", {{"next_step", snap.loader_next_step}}},
                          {"files", {{{"name", kFile}, {"bytes", bytes}, {"crc32c", crc}, {"datasets", datasets}}}},
                          {"layout",
                           {{"tp", r_.parallel.tp}, {"pp", r_.parallel.pp}, {"dp", r_.parallel.dp},
                            {"zero", r_.parallel.zero}, {"world", r_.world}}},
                          {"model",
                           {{"n_layer", r_.model.n_layer}, {"n_head", r_.model.n_head}, {"d_model", r_.model.d_model},
                            {"vocab_size", r_.model.vocab_size}, {"seq_len", r_.model.seq_len}}},
                          {"rng", "none: initialisation is counter-based and sampling a pure function of "
                                  "(train.seed, position); the loader state is loader.next_step"},
                          {"loom_version", LOOM_VERSION},
                          {"git_commit", LOOM_GIT_COMMIT},
                          {"recipe", recipe_to_yaml(r_)}};
    write_atomically((partial / "manifest.json").string(), man.dump(2) + "\n");
    fs::remove_all(final_dir);  // an older save of the same step
    fs::rename(partial, final_dir);
    fsync_path(root.string());
    write_atomically((root / "latest").string(), step_name(steps_done) + "\n");
    // Prune only now that a newer complete checkpoint exists.
    auto all = list_checkpoints(root.string());
    for (size_t i = 0; i + size_t(r_.checkpoint.keep_last) < all.size(); ++i) fs::remove_all(all[i]);
    const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("loom: saved checkpoint %s (%.1f MB; written in %.2f s, %.2f GB/s; with checksum and rename "
                "%.2f s)%s\n",
                final_dir.string().c_str(), bytes / 1e6, write_s, bytes / 1e9 / write_s, total_s,
                r_.checkpoint.async ? " [async]" : "");
    std::fflush(stdout);
  }
  MPI_Barrier(world);
}

std::string Checkpointer::choose_on_rank0(std::string& error) {
  const std::string& how = r_.checkpoint.resume;
  if (how == "never") return "";
  if (how != "auto") {
    if (std::string bad = verify_checkpoint(how); !bad.empty())
      error = "checkpoint.resume=" + how + ": " + bad;
    return how;
  }
  if (r_.checkpoint.dir.empty()) return "";
  auto all = list_checkpoints(r_.checkpoint.dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    std::string bad = verify_checkpoint(*it);
    if (bad.empty()) return *it;
    std::fprintf(stderr, "loom: checkpoint %s is damaged (%s); trying an older one\n", it->c_str(), bad.c_str());
  }
  if (!all.empty())
    error = "checkpoint.dir=" + r_.checkpoint.dir + ": every checkpoint is damaged (see above); nothing to resume "
            "from (set checkpoint.resume=never to start afresh)";
  return "";
}

ResumePoint Checkpointer::resume() {
  MPI_Comm world = groups_.world().comm();
  std::string error, chosen;
  if (groups_.world_rank() == 0) chosen = choose_on_rank0(error);
  error = bcast_string(error, world);
  if (!error.empty()) throw std::runtime_error(error);
  chosen = bcast_string(chosen, world);
  ResumePoint at;
  if (!chosen.empty()) load(chosen, at);
  return at;
}

void Checkpointer::load(const std::string& dir, ResumePoint& at) {
  auto t0 = std::chrono::steady_clock::now();
  nlohmann::json man = nlohmann::json::parse(std::ifstream(fs::path(dir) / "manifest.json"));
  const auto& mm = man["model"];
  const auto& m = r_.model;
  if (mm["n_layer"] != m.n_layer || mm["n_head"] != m.n_head || mm["d_model"] != m.d_model ||
      mm["vocab_size"] != m.vocab_size || mm["seq_len"] != m.seq_len)
    throw std::runtime_error(dir + ": the checkpoint's model " + mm.dump() +
                             " differs from the recipe's model section; a checkpoint loads only into the same model");
  const ParamTable& table = model_.table();
  std::vector<float> params(table.total()), mv(table.total()), vv(table.total());
  H5TensorFile f = H5TensorFile::open((fs::path(dir) / kFile).string(), groups_.world().comm());
  for (const GlobalTensor& g : global_tensors(model_.shape())) {
    const ParamInfo* mine = table.find_if_held(g.name);
    TensorSlice s = mine ? slice_of(*mine) : TensorSlice{};
    const TensorSlice* sl = mine ? &s : nullptr;
    f.read("params/" + g.name, sl, mine ? params.data() + mine->offset : nullptr);
    f.read("adam_m/" + g.name, sl, mine ? mv.data() + mine->offset : nullptr);
    f.read("adam_v/" + g.name, sl, mine ? vv.data() + mine->offset : nullptr);
  }
  f.close();
  model_.set_params(params.data());
  optim_.import_state(mv.data(), vv.data());
  at.path = dir;
  at.steps_done = man["step"].get<int64_t>();
  at.loader_next_step = man["loader"]["next_step"].get<int64_t>();
  if (groups_.world_rank() == 0) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double bytes = double(fs::file_size(fs::path(dir) / kFile));
    std::printf("loom: resumed from %s (step %lld, saved under tp=%d pp=%d dp=%d zero=%d; read %.1f MB in %.2f s, "
                "%.2f GB/s)\n",
                dir.c_str(), (long long)at.steps_done, man["layout"]["tp"].get<int>(), man["layout"]["pp"].get<int>(),
                man["layout"]["dp"].get<int>(), man["layout"]["zero"].get<int>(), bytes / 1e6, s, bytes / 1e9 / s);
    std::fflush(stdout);
  }
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("step_", 0) == 0 && name.find('.') == std::string::npos &&
        fs::exists(e.path() / "manifest.json"))
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());  // zero-padded step numbers sort in step order
  return out;
}

std::string verify_checkpoint(const std::string& ckpt) {
  const fs::path man_path = fs::path(ckpt) / "manifest.json";
  if (!fs::exists(man_path)) return "no manifest.json: an incomplete checkpoint";
  nlohmann::json man;
  try {
    man = nlohmann::json::parse(std::ifstream(man_path));
  } catch (const std::exception& e) {
    return "manifest.json does not parse: " + std::string(e.what());
  }
  for (const auto& file : man.value("files", nlohmann::json::array())) {
    const fs::path p = fs::path(ckpt) / file["name"].get<std::string>();
    if (!fs::exists(p)) return p.string() + " is missing";
    const uint64_t want_bytes = file["bytes"].get<uint64_t>();
    if (fs::file_size(p) != want_bytes)
      return p.string() + " has " + std::to_string(fs::file_size(p)) + " bytes, the manifest says " +
             std::to_string(want_bytes) + " (truncated?)";
    std::vector<DatasetExtent> extents;
    for (const auto& d : file.value("datasets", nlohmann::json::array()))
      extents.push_back({d["name"].get<std::string>(), d["offset"].get<uint64_t>(), d["bytes"].get<uint64_t>()});
    const FileSums sums = checksum_file(p.string(), extents);
    // A checksum per dataset names the tensor that is damaged; the file's covers the rest (HDF5
    // metadata).
    const auto& listed = file["datasets"];
    for (size_t i = 0; i < extents.size(); ++i)
      if (sums.dataset_crc[i] != listed[i]["crc32c"].get<uint32_t>())
        return p.string() + ": dataset " + extents[i].name + " fails its CRC-32C check (corrupted)";
    if (sums.file_crc != file["crc32c"].get<uint32_t>())
      return p.string() + " fails its CRC-32C check outside the datasets (corrupted HDF5 metadata)";
  }
  return "";
}

std::string inspect_checkpoint(const std::string& ckpt) {
  std::ostringstream os;
  if (std::string bad = verify_checkpoint(ckpt); !bad.empty()) throw std::runtime_error(ckpt + ": " + bad);
  nlohmann::json man = nlohmann::json::parse(std::ifstream(fs::path(ckpt) / "manifest.json"));
  os << "checkpoint " << ckpt << "\n  step " << man["step"] << ", loader next step " << man["loader"]["next_step"]
     << "\n  saved under " << man["layout"].dump() << "\n  model " << man["model"].dump() << "\n  loom "
     << man["loom_version"].get<std::string>() << " commit " << man["git_commit"].get<std::string>() << "\n";
  const auto& mm = man["model"];
  GptShape s = GptShape::make(mm["n_layer"], mm["n_head"], mm["d_model"], mm["vocab_size"], mm["seq_len"]);
  H5TensorFile f = H5TensorFile::open((fs::path(ckpt) / kFile).string(), MPI_COMM_SELF);
  os << "  tensors (global shape, CRC-32C of params / adam_m / adam_v data):\n";
  for (const GlobalTensor& g : global_tensors(s)) {
    size_t n = 1;
    for (int64_t d : g.shape) n *= size_t(d);
    TensorSlice all{{{0, g.shape[0]}}, 0, g.shape.size() > 1 ? g.shape[1] : 1};
    std::vector<float> buf(n);
    os << "    " << g.name << " [";
    for (size_t i = 0; i < g.shape.size(); ++i) os << (i ? ", " : "") << g.shape[i];
    os << "]";
    for (const char* group : {"params/", "adam_m/", "adam_v/"}) {
      f.read(group + g.name, &all, buf.data());
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
