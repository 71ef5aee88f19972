// The checkpointer's set-up (checkpoint.dir's lock and write probe) and its saves: the snapshot
// of the state to host memory, written here or by a background thread (checkpoint_writer.cpp).
#include "engine/checkpoint/checkpointer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <utility>

#include "engine/checkpoint/checkpoint_catalog.hpp"
#include "engine/checkpoint/checkpoint_layout.hpp"
#include "engine/checkpoint/slice_plan.hpp"
#include "engine/config/recipe_io.hpp"
#include "parallel/host_collectives.hpp"

namespace loom {
namespace fs = std::filesystem;

namespace {

// Creates and removes `path` (a probe that this rank can create files in `dir`), or keeps it
// (keep = true); "" or the error naming checkpoint.dir.
std::string create_empty_file(const fs::path& path, const fs::path& dir, bool keep = false) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return "checkpoint.dir=" + dir.string() + ": cannot create files there (" + std::strerror(errno) +
           "); every rank writes its part of each checkpoint";
  ::close(fd);
  if (!keep) ::unlink(path.c_str());
  return "";
}

}  // namespace

std::string unseen_by_this_rank(const std::string& path, const std::string& what_rank0_has) {
  for (int attempt = 0;; ++attempt) {
    std::error_code ec;
    if (fs::exists(path, ec)) return "";
    if (ec && ec != std::errc::no_such_file_or_directory)
      return what_rank0_has + " and this rank cannot look it up: " + ec.message();
    if (attempt == 2) break;
    // A network file system's client may remember a name as missing for up to a minute (NFS's
    // directory attribute cache): reading the directories above it makes the client ask the
    // server again. Only on this failure path, twice, half a second apart.
    const fs::path parent = fs::path(path).parent_path();
    for (const fs::path& d : {parent, parent.parent_path()}) {
      std::error_code skip;
      if (d.empty()) continue;
      for (fs::directory_iterator it(d, skip), end; !skip && it != end; it.increment(skip)) {
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  return what_rank0_has + " and this rank does not see it (working directory " + cwd.string() +
         "): every rank must see the same checkpoints, on a file system the nodes share (by an absolute path if "
         "the ranks start in different directories)";
}

CheckpointSetup checkpoint_setup(const Recipe& recipe) {
  return CheckpointSetup{recipe.checkpoint, recipe.model, recipe_to_yaml(recipe), "", ""};
}

Checkpointer::Checkpointer(CheckpointSetup setup, parallel::ProcessGroups& groups, Gpt& model,
                           DistributedOptimizer& optim)
    : setup_(std::move(setup)), groups_(groups), model_(model), optim_(optim) {
  io_comm_ = std::make_unique<parallel::MpiCommunicator>(groups.world().comm(), "checkpoint writer");
  io_comm_->set_all_reduce_algo(groups.all_reduce_algo());
  if (cfg_.dir.empty()) return;
  // Before any training: checkpoint.dir is this job's alone (a lock on rank 0, which alone
  // renames and prunes), and every rank can create files in it (each writes its own slices of
  // model.h5), so that a bad directory is not found at the first save, after that much training.
  parallel::MpiCommunicator& world = groups.world();
  const fs::path dir = cfg_.dir;
  std::string error, shared_name;
  if (groups.world_rank() == 0) {
    try {
      lock_ = DirLock::acquire(dir.string(), "checkpoint.dir");
      // With the lock held no save is in progress: a step_N.partial is an interrupted save of
      // this directory's own (never loadable), and goes, with the space it holds.
      for (const auto& e : fs::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        if (e.is_directory() && name.ends_with(".partial") &&
            parse_checkpoint_name(name.substr(0, name.size() - 8), nullptr)) {
          // Only if it holds nothing but what a save writes: a user's file in it is not ours.
          const std::string foreign = foreign_file_in_partial(e.path().string());
          if (foreign.empty()) {
            std::printf("loom: removing %s: an interrupted save\n", e.path().c_str());
            fs::remove_all(e.path());
          } else {
            std::fprintf(stderr, "loom: warning: %s looks like an interrupted save but holds %s, which a save "
                         "does not write: left as it is\n", e.path().c_str(), foreign.c_str());
          }
        } else if (name == "latest" && !e.is_regular_file()) {
          // Every save replaces `latest` with a file: a directory (or anything else) there would
          // fail the first save after a whole interval of training.
          throw std::runtime_error("checkpoint.dir=" + dir.string() + ": " + e.path().string() +
                                   " is not a regular file; Loom writes the name of the newest checkpoint there "
                                   "after every save. Move it away, or choose another checkpoint.dir");
        } else if (e.is_regular_file() && (name.starts_with(".loom_shared_probe.") || name.starts_with(".loom_write_probe."))) {
          std::error_code ignored;  // the start-up probes (below) of a job that died during them
          fs::remove(e.path(), ignored);
        }
      }
      // A fresh run into a directory of another run's checkpoints would prune and replace them.
      const CheckpointCatalog c = scan_checkpoints(dir.string());
      if (cfg_.resume == "never" && !c.complete.empty())
        error = "checkpoint.dir=" + dir.string() + " holds checkpoints of an earlier run (newest: " +
                c.complete.back().path + ") and checkpoint.resume=never: a fresh run there would prune and replace "
                "them. Choose an empty checkpoint.dir, or resume (checkpoint.resume=auto or a checkpoint PATH)";
      // A file whose name no rank has looked up before (so no cached "no such file" on a network
      // file system can hide it); every rank must see it, or the ranks' checkpoint.dir are
      // different directories (node-local disks, or a relative path from different working
      // directories), and the first save would hang in its collective file creation.
      if (error.empty()) {
        shared_name = ".loom_shared_probe." + std::to_string(::getpid()) + "." +
                      std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
        error = create_empty_file(dir / shared_name, dir, /*keep=*/true);
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const std::vector<std::string> from0 = parallel::broadcast_strings(world, {error, shared_name});
  if (!from0[0].empty()) throw std::runtime_error(from0[0]);
  const fs::path shared_probe = dir / from0[1];
  if (groups.world_rank() != 0) {
    error = unseen_by_this_rank(shared_probe.string(), "checkpoint.dir=" + dir.string() + ": rank 0 made " +
                                                           shared_probe.string());
    if (error.empty()) error = create_empty_file(dir / (".loom_write_probe." + std::to_string(groups.world_rank())), dir);
  }
  error = parallel::agree_on_error(error, world);
  if (groups.world_rank() == 0) ::unlink(shared_probe.c_str());
  if (!error.empty()) throw std::runtime_error(error);
}

Checkpointer::~Checkpointer() {
  if (writer_.joinable()) writer_.join();
}

void Checkpointer::wait() {
  if (writer_.joinable()) writer_.join();
  in_flight_.reset();
  if (writer_error_) std::rethrow_exception(std::exchange(writer_error_, nullptr));
}

double Checkpointer::save(int64_t steps_done, const SavedDataPosition& data, const StateHealth& health,
                          const LossScaleState& loss_scale, const NoiseScale::State& noise) {
  auto t0 = std::chrono::steady_clock::now();
  wait();
  // Host copies of the slices this rank writes. The buffer is kept from one save to the next:
  // allocating and first touching hundreds of MB was most of the stall.
  if (!snapshot_) snapshot_ = std::make_shared<Snapshot>();
  std::shared_ptr<Snapshot> snap = snapshot_;
  snap->steps_done = steps_done;
  snap->optimizer_updates = optim_.updates();
  snap->data = data;
  snap->health = health;
  snap->loss_scale = loss_scale;
  snap->noise = noise;
  const std::vector<GlobalTensor> tensors = global_tensors(model_.shape());
  std::vector<std::string> names;
  for (const GlobalTensor& g : tensors) names.push_back(g.name);
  snap->writes = datasets_written(names, model_.table(), groups_.coord(),
                                  spread_over_dp(dataset_bytes(tensors), groups_.layout().dp));
  snap->at.assign(snap->writes.size(), 0);
  size_t packed = 0;
  for (size_t d = 0; d < snap->writes.size(); ++d)
    if (const ParamInfo* p = snap->writes[d]) {
      snap->at[d] = packed;
      packed += p->numel;
    }
  snap->slices.resize(packed);
  // Every element passes by a piece at a time (ZeRO: gathered over dp a bucket at a time); each
  // keeps what falls in the slices of group g (0: parameters, 1: m, 2: v) this rank writes.
  auto keep = [&](size_t g) {
    return [&, g](size_t begin, size_t n, const float* data) {
      for (size_t t = 0; t < tensors.size(); ++t) {
        const ParamInfo* p = snap->writes[3 * t + g];
        if (!p) continue;
        const size_t lo = std::max(begin, p->offset), hi = std::min(begin + n, p->offset + p->numel);
        if (lo < hi)
          std::memcpy(snap->slices.data() + snap->at[3 * t + g] + (lo - p->offset), data + (lo - begin),
                      (hi - lo) * sizeof(float));
      }
    };
  };
  bool finite = true;
  model_.visit_params([&, params = keep(0)](size_t begin, size_t n, const float* data) {
    for (size_t i = 0; i < n && finite; ++i) finite = std::isfinite(data[i]);
    params(begin, n, data);
  });
  snap->finite = finite;
  optim_.visit_moment(0, keep(1));
  optim_.visit_moment(1, keep(2));
  if (cfg_.async) {
    in_flight_ = snap;
    writer_ = std::thread([this, snap] {
      try {
        write(*snap, *io_comm_);
      } catch (...) {
        writer_error_ = std::current_exception();
      }
    });
  } else {
    write(*snap, groups_.world());
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string Checkpointer::last_clean_checkpoint(int64_t before_step) const {
  if (cfg_.dir.empty()) return "";
  return last_clean_before(scan_checkpoints(cfg_.dir), before_step);
}

}  // namespace loom
