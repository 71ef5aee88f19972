#include "engine/checkpoint/checkpointer.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <utility>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "engine/checkpoint/checkpoint_catalog.hpp"
#include "engine/checkpoint/checkpoint_layout.hpp"
#include "engine/checkpoint/h5_tensor_file.hpp"
#include "engine/checkpoint/slice_checksum.hpp"
#include "engine/config/recipe_io.hpp"
#include "engine/util/atomic_file.hpp"
#include "engine/util/crc32c.hpp"
#include "engine/util/host_buffer.hpp"
#include "engine/util/utc_time.hpp"
#include "parallel/mpi_world.hpp"
#include "loom_version.hpp"

namespace loom {
namespace fs = std::filesystem;
namespace {

std::string step_name(int64_t step) { return checkpoint_name(step); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TensorSlice slice_of(const ParamInfo& p) { return TensorSlice{p.row_runs, p.col_begin, p.cols()}; }

// Which data-parallel rank writes (and, on load, checksums) each dataset. Every dp replica holds
// the same slices (ZeRO-1 moments are gathered first), so the datasets are dealt out among them,
// largest first to the least loaded: a job's replicas write at once (on a cluster, from as many
// nodes) instead of leaving it all to dp rank 0.
std::vector<int> spread_over_dp(const std::vector<uint64_t>& bytes, int dp) {
  std::vector<size_t> order(bytes.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
  std::vector<uint64_t> load(size_t(dp), 0);
  std::vector<int> owner(bytes.size(), 0);
  for (size_t d : order) {
    const size_t least = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    owner[d] = int(least);
    load[least] += bytes[d];
  }
  return owner;
}

// The one rank that writes (and, on load, checksums) each element of dataset `owner_dp`'s tensor:
// the dataset's dp rank; tp rank 0 for replicated tensors; the first stage for the tied wte (the
// last stage's copy is identical).
bool canonical_holder(const ParamInfo& p, const parallel::GridLayout::Coord& coord, int owner_dp, bool first_stage) {
  return coord.dp == owner_dp && (p.split != TpSplit::Replicated || coord.tp == 0) && (p.name != "wte" || first_stage);
}

// Free bytes for an unprivileged writer on the filesystem holding `dir` (-1 if unknown).
int64_t free_bytes(const std::string& dir) {
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) != 0) return -1;
  return int64_t(v.f_bavail) * int64_t(v.f_frsize);
}

// Now in UTC, for file names: 20261123T154500Z.
std::string utc_stamp() { return utc_now("%Y%m%dT%H%M%SZ"); }

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
  int64_t steps_done = 0;
  SavedDataPosition data;
  StateHealth health;
  HostBuffer<float> params, m, v;  // host copies, the model's flat layout on this rank
};

Checkpointer::Checkpointer(const Recipe& recipe, parallel::ProcessGroups& groups, Gpt& model, AdamW& optim,
                           parallel::GradSync& sync)
    : r_(recipe), groups_(groups), model_(model), optim_(optim), sync_(sync) {
  MPI_Comm_dup(groups.world().comm(), &io_comm_);
  if (r_.checkpoint.dir.empty()) return;
  // Before any training: checkpoint.dir is this job's alone (a lock on rank 0, which alone
  // renames and prunes), and every rank can create files in it (each writes its own slices of
  // model.h5), so that a bad directory is not found at the first save, after that much training.
  MPI_Comm world = groups.world().comm();
  const fs::path dir = r_.checkpoint.dir;
  std::string error;
  if (groups.world_rank() == 0) {
    try {
      lock_ = DirLock::acquire(dir.string(), "checkpoint.dir");
      // With the lock held no save is in progress: a step_N.partial is an interrupted save of
      // this directory's own (never loadable), and goes, with the space it holds.
      for (const auto& e : fs::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        if (e.is_directory() && name.ends_with(".partial") &&
            parse_checkpoint_name(name.substr(0, name.size() - 8), nullptr)) {
          std::printf("loom: removing %s: an interrupted save\n", e.path().c_str());
          fs::remove_all(e.path());
        }
      }
      // A fresh run into a directory of another run's checkpoints would prune and replace them.
      const CheckpointCatalog c = scan_checkpoints(dir.string());
      if (r_.checkpoint.resume == "never" && !c.complete.empty())
        error = "checkpoint.dir=" + dir.string() + " holds checkpoints of an earlier run (newest: " +
                c.complete.back().path + ") and checkpoint.resume=never: a fresh run there would prune and replace "
                "them. Choose an empty checkpoint.dir, or resume (checkpoint.resume=auto or a checkpoint PATH)";
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (error = bcast_string(error, world); !error.empty()) throw std::runtime_error(error);
  const fs::path probe = dir / (".loom_write_probe." + std::to_string(groups.world_rank()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int open_errno = errno;
  if (fd < 0) {
    error = "checkpoint.dir=" + dir.string() + ": cannot create files there (" + std::strerror(open_errno) +
            "); every rank writes its part of each checkpoint";
  } else {
    ::close(fd);
    ::unlink(probe.c_str());
  }
  if (error = parallel::agree_on_error(error, world); !error.empty()) throw std::runtime_error(error);
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

double Checkpointer::save(int64_t steps_done, const SavedDataPosition& data, const StateHealth& health) {
  auto t0 = std::chrono::steady_clock::now();
  wait();
  // Host copies of this rank's parameters and full (un-sharded) Adam moments.
  // The buffers are kept from one save to the next: allocating and first touching hundreds of MB
  // was most of the stall.
  if (!snapshot_) snapshot_ = std::make_shared<Snapshot>();
  std::shared_ptr<Snapshot> snap = snapshot_;
  snap->steps_done = steps_done;
  snap->data = data;
  snap->health = health;
  const size_t n = model_.table().total();
  snap->params.resize(n);
  snap->m.resize(n);
  snap->v.resize(n);
  std::fill(snap->m.data(), snap->m.data() + n, 0.0f);  // export_state fills only the owned ranges
  std::fill(snap->v.data(), snap->v.data() + n, 0.0f);
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
  const std::vector<GlobalTensor> tensors = global_tensors(model_.shape());
  const std::vector<uint64_t> bytes_of = dataset_bytes(tensors);
  // Every parameter finite on every rank: part of what makes a state clean (retention keeps the
  // last clean checkpoint however many saves follow).
  int finite = 1;
  for (size_t i = 0, n = snap.params.size(); i < n && finite; ++i) finite = std::isfinite(snap.params.data()[i]);
  MPI_Allreduce(MPI_IN_PLACE, &finite, 1, MPI_INT, MPI_MIN, world);
  std::string error;
  if (rank == 0) {
    try {
      fs::create_directories(root);
      fs::remove_all(partial);  // leftovers of a save that died
      // A full disk is reported before anything is written (the file is the datasets plus a
      // little HDF5 metadata); a disk that fills during the write is reported by the write.
      uint64_t need = 0;
      for (uint64_t b : bytes_of) need += b;
      const int64_t avail = free_bytes(root.string());
      if (avail >= 0 && uint64_t(avail) < need)
        throw std::runtime_error(root.string() + ": No space left on device: this checkpoint needs " +
                                 std::to_string(need / 1000000 + 1) + " MB, the filesystem has " +
                                 std::to_string(avail / 1000000) + " MB free (older checkpoints are intact)");
      fs::create_directories(partial);
    } catch (const std::exception& e) {
      error = std::string("checkpoint.dir: ") + e.what();
    }
  }
  if (error = bcast_string(error, world); !error.empty()) throw std::runtime_error(error);
  const ParamTable& table = model_.table();
  const auto coord = groups_.coord();
  const std::vector<int> owner_dp = spread_over_dp(bytes_of, groups_.layout().dp);
  SliceChecksums sums;  // of what this rank writes, taken from memory as it is written
  {
    // A failed write (a full disk) does not throw here: every rank must go on making the same
    // collective HDF5 calls; the ranks agree on the first error once the file is closed.
    H5TensorFile f = H5TensorFile::create((partial / kCheckpointFile).string(), world);
    for (size_t t = 0; t < tensors.size(); ++t) {
      const GlobalTensor& g = tensors[t];
      const ParamInfo* mine = table.find_if_held(g.name);
      const TensorSlice s = mine ? slice_of(*mine) : TensorSlice{};
      const float* data[3] = {snap.params.data(), snap.m.data(), snap.v.data()};
      for (int gi = 0; gi < 3; ++gi) {
        const bool writer = mine && canonical_holder(*mine, coord, owner_dp[3 * t + size_t(gi)], model_.stage().first);
        std::string bad = f.write(kCheckpointGroups[gi] + g.name, g.shape, writer ? &s : nullptr,
                                  writer ? data[gi] + mine->offset : nullptr);
        if (error.empty()) error = std::move(bad);
        if (writer) sums.add(uint32_t(3 * t + size_t(gi)), g.shape, s, data[gi] + mine->offset);
      }
    }
    f.set_attr("loom_checkpoint_version", "1");
    f.set_attr("step", std::to_string(steps_done));
    if (std::string bad = f.close_checked(); error.empty()) error = std::move(bad);
  }
  if (error = parallel::agree_on_error(error, world); !error.empty()) {
    if (rank == 0) {
      std::error_code ec;
      fs::remove_all(partial, ec);  // ours, incomplete, and taking the space a retry needs
    }
    throw std::runtime_error("saving checkpoint " + final_dir.string() + " failed: " + error);
  }
  std::vector<uint32_t> dataset_crc;
  try {
    dataset_crc = sums.combine_on_rank0(bytes_of, world);
  } catch (const std::exception& e) {
    error = e.what();
  }
  MPI_Barrier(world);  // every rank has closed the file
  if (rank == 0 && error.empty()) {
    try {
      const std::string file = (partial / kCheckpointFile).string();
      const double data_s = seconds_since(t0);
      fsync_path(file);
      const double fsync_s = seconds_since(t0) - data_s;
      const auto extents = H5TensorFile::extents(file, dataset_names(model_.shape()));
      for (size_t i = 0; i < extents.size(); ++i)
        if (extents[i].bytes != bytes_of[i])
          throw std::runtime_error(file + ": dataset " + extents[i].name + " is stored in " +
                                   std::to_string(extents[i].bytes) + " bytes, expected " + std::to_string(bytes_of[i]));
      const uint64_t bytes = fs::file_size(file);
      const uint32_t crc = file_crc_from_datasets(file, bytes, extents, dataset_crc);
      nlohmann::json datasets = nlohmann::json::array();
      for (size_t i = 0; i < extents.size(); ++i)
        datasets.push_back({{"name", extents[i].name}, {"offset", extents[i].offset}, {"bytes", extents[i].bytes},
                            {"crc32c", dataset_crc[i]}});
      const StateHealth& h = snap.health;
      const bool clean = finite && h.first_bad_step < 0;
      nlohmann::json man = {
          {"format", "loom-checkpoint"},
          {"version", 1},
          {"step", steps_done},
          {"loader",
           {{"next_step", snap.data.loader.next_step},
            {"next_sample", snap.data.loader.next_sample},
            {"seed", snap.data.seed},
            {"global_batch", snap.data.global_batch},
            {"samples_per_epoch", snap.data.samples_per_epoch}}},
          {"health",
           {{"clean", clean},
            {"loss", std::isfinite(h.loss) ? nlohmann::json(h.loss) : nlohmann::json(nullptr)},
            {"params_finite", bool(finite)},
            {"first_bad_step", h.first_bad_step >= 0 ? nlohmann::json(h.first_bad_step) : nlohmann::json(nullptr)}}},
          {"files", {{{"name", kCheckpointFile}, {"bytes", bytes}, {"crc32c", crc}, {"datasets", datasets}}}},
          {"layout",
           {{"tp", r_.parallel.tp}, {"pp", r_.parallel.pp}, {"dp", r_.parallel.dp}, {"zero", r_.parallel.zero},
            {"world", r_.world}}},
          {"model",
           {{"n_layer", r_.model.n_layer}, {"n_head", r_.model.n_head}, {"d_model", r_.model.d_model},
            {"vocab_size", r_.model.vocab_size}, {"seq_len", r_.model.seq_len}}},
          {"rng", "none: initialisation is counter-based and sampling a pure function of "
                  "(train.seed, position); the loader state is loader.next_sample"},
          {"loom_version", LOOM_VERSION},
          {"git_commit", LOOM_GIT_COMMIT},
          {"recipe", recipe_to_yaml(r_)}};
      write_file_atomically((partial / "manifest.json").string(), man.dump(2) + "\n");
      if (fs::exists(final_dir)) {
        // A checkpoint of the same step from an earlier history (this run resumed from an older
        // one): set aside, never deleted, and said so. Renamed before the new one takes its name,
        // so a crash in between loses neither.
        const fs::path aside = root / (step_name(steps_done) + ".replaced-" + utc_stamp());
        fs::rename(final_dir, aside);
        std::printf("loom: step %lld was saved before by an earlier history of this run; that checkpoint is kept as "
                    "%s\n",
                    (long long)steps_done, aside.string().c_str());
      }
      fs::rename(partial, final_dir);
      fsync_path(root.string());
      write_file_atomically((root / "latest").string(), step_name(steps_done) + "\n");
      const double complete_s = seconds_since(t0);
      // Prune only now that a newer complete checkpoint exists, and only what retention allows.
      const CheckpointCatalog catalog = scan_checkpoints(root.string());
      const Retention keep = plan_retention(catalog, r_.checkpoint.keep_last);
      for (const std::string& p : keep.prune) {
        std::error_code ec;  // the save is complete: a checkpoint that will not go is a warning
        fs::remove_all(p, ec);
        if (ec) std::fprintf(stderr, "loom: warning: could not prune %s: %s\n", p.c_str(), ec.message().c_str());
      }
      std::printf("loom: saved checkpoint %s (%.1f MB complete in %.2f s, %.2f GB/s: data written in %.2f s, fsync "
                  "%.2f s, checksums, manifest and rename %.2f s; older ones pruned in %.2f s)%s%s\n",
                  final_dir.string().c_str(), bytes / 1e6, complete_s, bytes / 1e9 / complete_s, data_s, fsync_s,
                  complete_s - data_s - fsync_s, seconds_since(t0) - complete_s, r_.checkpoint.async ? " [async]" : "",
                  clean ? "" : " [not clean: saved after the run went non-finite or diverged]");
      for (const PinnedCheckpoint& pin : keep.pinned)
        std::printf("loom: keeping %s beyond checkpoint.keep_last = %d: it is the last clean checkpoint, saved before "
                    "the run went non-finite or diverged at step %lld\n",
                    pin.path.c_str(), r_.checkpoint.keep_last, (long long)pin.before_step);
      std::fflush(stdout);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Every rank learns of a failure on rank 0 (no rank waits for another that gave up); the
  // .partial directory goes (it may hold gigabytes a retry needs), older checkpoints are untouched.
  if (error = bcast_string(error, world); !error.empty()) {
    if (rank == 0) {
      std::error_code ec;
      fs::remove_all(partial, ec);
    }
    throw std::runtime_error("saving checkpoint " + final_dir.string() + " failed: " + error);
  }
}

// Rank 0: the candidates for checkpoint.resume, the one to try first first. Entries of
// checkpoint.dir that are not usable checkpoints are named once, here.
std::vector<std::string> Checkpointer::candidates_on_rank0() const {
  const std::string& how = r_.checkpoint.resume;
  if (how == "never") return {};
  if (how != "auto") return {how};
  if (r_.checkpoint.dir.empty()) return {};
  const CheckpointCatalog c = scan_checkpoints(r_.checkpoint.dir);
  for (const std::string& line : c.ignored) std::fprintf(stderr, "loom: warning: %s\n", line.c_str());
  return resume_order(c);
}

std::string Checkpointer::last_clean_checkpoint(int64_t before_step) const {
  if (r_.checkpoint.dir.empty()) return "";
  return last_clean_before(scan_checkpoints(r_.checkpoint.dir), before_step);
}

ResumePoint Checkpointer::resume() {
  MPI_Comm world = groups_.world().comm();
  const bool rank0 = groups_.world_rank() == 0;
  const std::string& how = r_.checkpoint.resume;
  std::vector<std::string> candidates;
  if (rank0) candidates = candidates_on_rank0();
  int n = int(candidates.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, world);
  for (int i = 0; i < n; ++i) {
    const std::string path = bcast_string(rank0 ? candidates[size_t(i)] : "", world);
    // Rank 0 checks the manifest, the sizes and the bytes outside the datasets (the HDF5
    // metadata) before any rank opens the file; the datasets are checked as they are read.
    std::string bad = bcast_string(rank0 ? precheck_checkpoint(path) : "", world);
    ResumePoint at;
    if (bad.empty()) bad = load(path, at);
    if (bad.empty()) {
      if (rank0) {
        const int64_t bad = at.health.first_bad_step >= 0 ? at.health.first_bad_step : at.steps_done;
        at.last_clean = last_clean_checkpoint(bad);
        if (!at.clean)
          std::fprintf(stderr,
                       "loom: warning: %s was saved after the run went non-finite or diverged (first at step %lld); "
                       "the last clean checkpoint before that is %s%s\n",
                       path.c_str(), (long long)bad,
                       at.last_clean.empty() ? "(none)" : at.last_clean.c_str(),
                       at.last_clean.empty() ? "" : " (set checkpoint.resume to it to go back there)");
      }
      return at;
    }
    if (how != "auto") throw std::runtime_error("checkpoint.resume=" + how + ": " + bad);
    if (rank0)
      std::fprintf(stderr, "loom: checkpoint %s is damaged (%s); trying the next newest\n", path.c_str(), bad.c_str());
  }
  if (n > 0)
    throw std::runtime_error("checkpoint.dir=" + r_.checkpoint.dir + ": every checkpoint is damaged (see above); "
                             "nothing to resume from (set checkpoint.resume=never to start afresh)");
  return ResumePoint{};
}

std::string Checkpointer::load(const std::string& dir, ResumePoint& at) {
  auto t0 = std::chrono::steady_clock::now();
  MPI_Comm world = groups_.world().comm();
  const bool rank0 = groups_.world_rank() == 0;
  nlohmann::json man = nlohmann::json::parse(std::ifstream(fs::path(dir) / "manifest.json"));
  const auto& mm = man["model"];
  const auto& m = r_.model;
  if (mm["n_layer"] != m.n_layer || mm["n_head"] != m.n_head || mm["d_model"] != m.d_model ||
      mm["vocab_size"] != m.vocab_size || mm["seq_len"] != m.seq_len)
    throw std::runtime_error(dir + ": the checkpoint's model " + mm.dump() +
                             " differs from the recipe's model section; a checkpoint loads only into the same model");
  const ParamTable& table = model_.table();
  const auto coord = groups_.coord();
  const std::vector<GlobalTensor> tensors = global_tensors(model_.shape());
  // Tensor by tensor through one staging buffer (the largest slice), straight into the model and
  // the optimizer: host memory stays at one tensor, not a copy of the whole state.
  size_t largest = 1;
  for (const ParamInfo& p : table.params()) largest = std::max(largest, p.numel);
  HostBuffer<float> staging(largest);
  const std::vector<uint64_t> bytes_of = dataset_bytes(tensors);
  const std::vector<int> owner_dp = spread_over_dp(bytes_of, groups_.layout().dp);
  SliceChecksums sums;  // of what this rank reads, where it is the canonical holder
  // Each rank opens the (complete, read-only) file on its own and reads only its slices: no
  // collective calls, so ranks holding different numbers of tensors need not keep step. (Reading
  // through a file opened by all ranks together was no faster here.)
  // A read that fails on one rank (a damaged file) is agreed on before the collective checksum
  // step, so every rank moves on to the next candidate together.
  std::string read_error;
  try {
    H5TensorFile f = H5TensorFile::open((fs::path(dir) / kCheckpointFile).string(), MPI_COMM_SELF);
    for (size_t t = 0; t < tensors.size(); ++t) {
      const GlobalTensor& g = tensors[t];
      const ParamInfo* mine = table.find_if_held(g.name);
      const TensorSlice s = mine ? slice_of(*mine) : TensorSlice{};
      for (int gi = 0; gi < 3; ++gi) {
        if (!mine) continue;
        f.read(kCheckpointGroups[gi] + g.name, &s, staging.data());
        if (canonical_holder(*mine, coord, owner_dp[3 * t + size_t(gi)], model_.stage().first))
          sums.add(uint32_t(3 * t + size_t(gi)), g.shape, s, staging.data());
        if (gi == 0)
          model_.set_params(mine->offset, mine->numel, staging.data());
        else
          optim_.import_state(gi - 1, mine->offset, mine->numel, staging.data());
      }
    }
    f.close();
  } catch (const std::exception& e) {
    read_error = e.what();
  }
  if (read_error = parallel::agree_on_error(read_error, world); !read_error.empty()) return read_error;
  // What was read must be what was saved. Until this passes, the state just installed is not
  // used: a failure makes resume() load an older checkpoint over all of it, or stop the job.
  std::string bad;
  try {
    const std::vector<uint32_t> got = sums.combine_on_rank0(bytes_of, world);
    if (rank0) {
      std::map<std::string, uint32_t> want;
      for (const auto& d : man["files"][0]["datasets"]) want[d["name"].get<std::string>()] = d["crc32c"].get<uint32_t>();
      const std::vector<std::string> names = dataset_names(model_.shape());
      for (size_t i = 0; i < names.size() && bad.empty(); ++i) {
        auto it = want.find(names[i]);
        if (it == want.end())
          bad = "manifest.json lists no dataset " + names[i];
        else if (it->second != got[i])
          bad = (fs::path(dir) / kCheckpointFile).string() + ": dataset " + names[i] + " fails its CRC-32C check (corrupted)";
      }
    }
  } catch (const std::exception& e) {
    bad = e.what();
  }
  if (bad = bcast_string(bad, world); !bad.empty()) return bad;
  at.path = dir;
  at.steps_done = man["step"].get<int64_t>();
  const auto& loader = man["loader"];
  at.data.loader.next_step = loader["next_step"].get<int64_t>();
  at.data.loader.next_sample = loader.value("next_sample", int64_t(-1));
  at.data.seed_recorded = loader.contains("seed") && loader["seed"].is_number_unsigned();
  if (at.data.seed_recorded) at.data.seed = loader["seed"].get<uint64_t>();
  at.data.global_batch = loader.value("global_batch", int64_t(-1));
  at.data.samples_per_epoch = loader.value("samples_per_epoch", int64_t(-1));
  if (man.contains("health")) {
    const auto& h = man["health"];
    at.clean = h.value("clean", true);
    if (h.contains("loss") && h["loss"].is_number()) at.health.loss = h["loss"].get<double>();
    if (h.contains("first_bad_step") && h["first_bad_step"].is_number_integer())
      at.health.first_bad_step = h["first_bad_step"].get<int64_t>();
  }
  MPI_Barrier(world);  // the time below is the slowest rank's
  if (rank0) {
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double bytes = double(fs::file_size(fs::path(dir) / kCheckpointFile));
    std::printf("loom: resumed from %s (step %lld, saved under tp=%d pp=%d dp=%d zero=%d; read and verified %.1f MB "
                "in %.2f s, %.2f GB/s)\n",
                dir.c_str(), (long long)at.steps_done, man["layout"]["tp"].get<int>(), man["layout"]["pp"].get<int>(),
                man["layout"]["dp"].get<int>(), man["layout"]["zero"].get<int>(), bytes / 1e6, sec, bytes / 1e9 / sec);
    std::fflush(stdout);
  }
  return "";
}

}  // namespace loom
