#include "engine/data/prep_output.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/util/atomic_file.hpp"
#include "engine/util/splitmix64.hpp"


namespace loom {
namespace fs = std::filesystem;
namespace {

// `out` as a path whose last component names the directory itself ("data/x/" -> "data/x",
// "." -> the current directory's absolute path); a symbolic link to a directory is followed.
fs::path output_path(const std::string& out) {
  if (out.empty()) throw std::runtime_error("--out: expected an output directory");
  fs::path p = fs::absolute(out).lexically_normal();
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  p = s;
  std::error_code ec;
  if (fs::is_symlink(p, ec) && fs::is_directory(p, ec)) p = fs::canonical(p);
  if (p == p.root_path()) throw std::runtime_error("--out " + out + ": cannot write a dataset over the root directory");
  return p;
}

// The first `n` bytes of a regular file ("" for anything else: a FIFO is never opened).
std::string file_head(const fs::directory_entry& e, size_t n) {
  std::error_code ec;
  if (!e.is_regular_file(ec)) return "";
  std::FILE* f = std::fopen(e.path().c_str(), "rb");
  if (!f) return "";
  std::string head(n, '\0');
  head.resize(std::fread(head.data(), 1, n, f));
  std::fclose(f);
  return head;
}

// Files loom prep writes, recognised by their contents, not their names: a shard starts with
// "LOOMTOKS" (token_shard.hpp), the manifest is JSON with "format": "loom-tokens". An llm.c shard
// or weights file is a .bin too, and --force must not take it for one of ours.
bool is_loom_shard(const fs::directory_entry& e) {
  return e.path().extension() == ".bin" && file_head(e, 8) == "LOOMTOKS";
}
bool is_loom_manifest(const fs::directory_entry& e) {
  if (e.path().filename() != "manifest.json") return false;
  try {
    // Parsed whole (a manifest is small): its doc_separator, which sorts before "format", may be long.
    return nlohmann::json::parse(file_head(e, size_t(64) << 20)).value("format", "") == "loom-tokens";
  } catch (const std::exception&) {
    return false;
  }
}

// What a non-empty output directory holds, for the refusal message; "" when it is empty.
// `only_dataset`: it holds nothing but a prepared dataset (Loom's manifest.json and Loom token
// shards), the one kind of directory --force may replace.
std::string describe_contents(const fs::path& dir, bool* only_dataset) {
  size_t entries = 0, shards = 0;
  bool manifest = false;
  std::string example;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    ++entries;
    if (is_loom_manifest(e)) manifest = true;
    else if (is_loom_shard(e)) ++shards;
    else if (example.empty()) example = name;
  }
  *only_dataset = entries > 0 && example.empty();
  if (entries == 0) return "";
  if (manifest || shards > 0) {
    std::string what = manifest ? "manifest.json" : "";
    if (shards) what += (what.empty() ? "" : ", ") + std::to_string(shards) + " shard file" + (shards == 1 ? "" : "s");
    if (entries > shards + (manifest ? 1 : 0))
      what += ", " + std::to_string(entries - shards - (manifest ? 1 : 0)) + " other entries, e.g. '" + example + "'";
    return "already holds a prepared dataset (" + what + ")";
  }
  return "is not empty (" + std::to_string(entries) + " entr" + (entries == 1 ? "y" : "ies") + ", e.g. '" + example +
         "')";
}

// A fresh directory next to `target` ("TARGET.partial-XXXXXX"): same file system, so it can be
// renamed over `target`. Created with the usual mode (mkdtemp's 0700 would carry over to the
// dataset).
fs::path make_sibling_dir(const fs::path& target, const char* tag) {
  static const char* digits = "0123456789abcdefghijklmnopqrstuvwxyz";
  uint64_t x = splitmix64(uint64_t(::getpid()) ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string p = target.string() + tag;
    x = splitmix64(x);
    for (int i = 0; i < 6; ++i) p += digits[(x >> (6 * i)) % 36];
    if (::mkdir(p.c_str(), 0777) == 0) return p;
    if (errno != EEXIST)
      throw std::runtime_error(p + ": cannot create a directory next to the output: " + std::strerror(errno));
  }
  throw std::runtime_error(target.string() + tag + "*: cannot find a free name next to the output");
}

// Deletes a replaced dataset once the new one is in place. A failure (NFS keeps files a running
// job has open) is a warning: the new dataset is already there.
void remove_old(const fs::path& old) {
  std::error_code ec;
  fs::remove_all(old, ec);
  if (ec)
    std::fprintf(stderr, "loom prep: warning: the replaced dataset could not be deleted (%s); remove %s by hand\n",
                 ec.message().c_str(), old.string().c_str());
}

// Moves the finished `fresh` directory to `out`. An absent or empty `out` is replaced by one
// rename. A non-empty one (--force) is exchanged atomically with `fresh` (renameat2
// RENAME_EXCHANGE), or, where the file system cannot, renamed aside first; the old contents are
// removed only once the new dataset is in place.
void swap_into_place(const fs::path& fresh, const fs::path& out, bool out_has_content) {
  if (!out_has_content) {
    if (::rename(fresh.c_str(), out.c_str()) != 0) {
      const int err = errno;
      throw std::runtime_error(out.string() + ": cannot move the finished dataset into place from " + fresh.string() +
                               ": " + std::strerror(err) +
                               (err == ENOTEMPTY || err == EEXIST
                                    ? " (something else filled the directory meanwhile; it was left as it is)"
                                    : ""));
    }
    return;
  }
#ifdef RENAME_EXCHANGE
  if (::renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) == 0) {
    remove_old(fresh);  // now the old contents
    return;
  }
  if (const int err = errno; err != EINVAL && err != ENOSYS && err != ENOTSUP)
    throw std::runtime_error(out.string() + ": cannot swap in the finished dataset from " + fresh.string() + ": " +
                             std::strerror(err));
#endif
  const fs::path old = make_sibling_dir(out, ".old-");
  if (::rename(out.c_str(), old.c_str()) != 0) {
    const int err = errno;
    fs::remove(old);
    throw std::runtime_error(out.string() + ": cannot move the old contents aside: " + std::strerror(err));
  }
  if (::rename(fresh.c_str(), out.c_str()) != 0) {
    const int err = errno;
    const bool restored = ::rename(old.c_str(), out.c_str()) == 0;  // put the old dataset back
    throw std::runtime_error(out.string() + ": cannot move the finished dataset into place: " + std::strerror(err) +
                             (restored ? "; the old dataset is back in place"
                                       : "; the old dataset could not be put back either: it is intact in " +
                                             old.string() + ", move it back to " + out.string()));
  }
  remove_old(old);
}

}  // namespace

PrepOutput::PrepOutput(const std::string& arg, bool force, const std::vector<std::string>& own_files)
    : out_(output_path(arg)) {
  const fs::path& out = out_;
  std::error_code ec;
  const auto st = fs::status(out, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st)) throw std::runtime_error("--out " + arg + ": exists and is not a directory");
    // It is replaced by a rename: the working directory would be left deleted under the shell.
    if (fs::equivalent(out, fs::current_path(), ec))
      throw std::runtime_error("--out " + arg + " is the working directory: loom prep writes the dataset beside "
                               "--out and renames it into its place, which would leave this shell in a deleted "
                               "directory; name a directory inside it, e.g. --out dataset");
    bool only_dataset = false;
    const std::string contents = describe_contents(out, &only_dataset);
    replaces_ = !contents.empty();
    if (replaces_ && !only_dataset)
      throw std::runtime_error("--out " + arg + " " + contents +
                               ": it holds files that are not a prepared dataset, and --force replaces only a "
                               "directory that holds nothing but one (manifest.json and .bin shards); choose another "
                               "--out");
    if (replaces_ && !force)
      throw std::runtime_error("--out " + arg + " " + contents +
                               "; pass --force to replace it (the new dataset is written aside and swapped in only "
                               "once complete), or choose another --out");
    // The dataset is written beside --out and renamed in: that cannot cross into a mount point.
    struct stat here {}, parent {};
    if (::stat(out.c_str(), &here) == 0 && ::stat(out.parent_path().c_str(), &parent) == 0 &&
        here.st_dev != parent.st_dev)
      throw std::runtime_error("--out " + arg + " is a mount point: loom prep writes the dataset beside it and "
                               "renames it into place, which cannot cross file systems; use a directory inside it, "
                               "e.g. --out " + (out / "dataset").string());
    if (replaces_)
      for (const auto& in : own_files) {
        const fs::path rel = fs::weakly_canonical(in).lexically_relative(fs::weakly_canonical(out));
        if (!rel.empty() && *rel.begin() != "..")
          throw std::runtime_error("--force --out " + arg + ": the input " + in +
                                   " lies inside the directory that --force would replace; move it out first");
      }
  }
  fs::create_directories(out.parent_path(), ec);
  if (ec) throw std::runtime_error(out.parent_path().string() + ": cannot create the output's parent: " + ec.message());
  work_ = make_sibling_dir(out, ".partial-");
  // The new directory takes the place of the one the user made or had: it keeps its group and
  // owner (the owner only where this process may: root) and its mode (a group-private 2770 must
  // not become 755). Group and setgid are set before any shard is written, so that files made
  // inside inherit the group as they would have; the owner keeps write access until commit(),
  // which gives the exact mode (a write-protected dataset replaced with --force stays so).
  struct stat had {};
  if (fs::exists(st) && ::stat(out.c_str(), &had) == 0) {
    keep_mode_ = had.st_mode & 07777;
    if (::chown(work_.c_str(), had.st_uid, had.st_gid) != 0 && ::chown(work_.c_str(), uid_t(-1), had.st_gid) != 0)
      std::fprintf(stderr, "loom prep: warning: %s: the new directory cannot take the old one's group (%s)\n",
                   out.c_str(), std::strerror(errno));
    if (::chmod(work_.c_str(), *keep_mode_ | S_IRWXU) != 0)
      std::fprintf(stderr, "loom prep: warning: %s: the new directory cannot take the old one's mode (%s)\n",
                   out.c_str(), std::strerror(errno));
  }
}

PrepOutput::~PrepOutput() {
  if (!work_.empty()) {
    std::error_code ec;
    fs::remove_all(work_, ec);
  }
}

bool PrepOutput::commit() {
  if (keep_mode_ && ::chmod(work_.c_str(), *keep_mode_) != 0)
    std::fprintf(stderr, "loom prep: warning: %s: the new directory cannot take the old one's mode (%s)\n",
                 out_.c_str(), std::strerror(errno));
  swap_into_place(work_, out_, replaces_);
  work_.clear();
  fsync_path(out_.parent_path().string());
  return replaces_;
}

}  // namespace loom
