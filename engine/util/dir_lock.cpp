#include "engine/util/dir_lock.hpp"

#include "engine/util/utc_time.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>

namespace loom {
namespace fs = std::filesystem;

struct DirLock::Held {
  std::string path;
  int fd = -1;
  pid_t owner = 0;  // a forked child inherits the registry and this object, not the lock
  ~Held() {
    if (fd < 0) return;
    // Unlinked before the flock goes (a job that opened it meanwhile sees it replaced), and only
    // if the file at the path is still this one: after a takeover (a lock judged stale, or
    // deleted by hand) it is another job's.
    struct stat mine {}, there {};
    if (::getpid() == owner && ::fstat(fd, &mine) == 0 && ::stat(path.c_str(), &there) == 0 &&
        mine.st_ino == there.st_ino && mine.st_dev == there.st_dev)
      ::unlink(path.c_str());
    ::close(fd);
  }
};

namespace {

struct Holder {
  std::string host, started, slurm_job, slurm_restart;
  long pid = 0;
  bool any = false;  // the file said something
};

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string this_host() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

std::string now_iso() { return utc_now(); }

std::string read_all(int fd) {
  std::string out;
  char buf[512];
  off_t off = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, off);
    if (n <= 0) break;
    out.append(buf, size_t(n));
    off += n;
    if (out.size() > 8192) break;
  }
  return out;
}

Holder parse(const std::string& text) {
  Holder h;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string k = line.substr(0, colon);
    std::string v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(' '));
    if (k == "host") h.host = v;
    else if (k == "pid") h.pid = std::atol(v.c_str());
    else if (k == "started") h.started = v;
    else if (k == "slurm_job_id") h.slurm_job = v;
    else if (k == "slurm_restart_count") h.slurm_restart = v;
    else continue;
    h.any = true;
  }
  return h;
}

std::string describe(const Holder& h) {
  if (!h.any) return "holder unknown: the lock file is empty";
  std::string s = "host " + (h.host.empty() ? std::string("?") : h.host) + ", pid " + std::to_string(h.pid);
  if (!h.started.empty()) s += ", started " + h.started;
  if (!h.slurm_job.empty() && h.slurm_job != "-") s += ", Slurm job " + h.slurm_job;
  return s;
}

bool pid_alive(long pid) { return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM); }

std::mutex registry_mu;
std::map<std::string, std::weak_ptr<DirLock::Held>>& registry() {
  static std::map<std::string, std::weak_ptr<DirLock::Held>> r;
  return r;
}

}  // namespace

const std::string& DirLock::path() const {
  static const std::string none;
  return held_ ? held_->path : none;
}

DirLock DirLock::acquire(const std::string& dir, const std::string& key) {
  const std::string where = key + "=" + dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(where + ": cannot create the directory: " + ec.message());
  std::string canon = fs::weakly_canonical(dir, ec).string();
  if (ec || canon.empty()) canon = dir;
  const std::string path = (fs::path(dir) / ".loom.lock").string();
  {
    std::lock_guard<std::mutex> g(registry_mu);
    auto it = registry().find(canon);
    if (it != registry().end()) {
      if (auto h = it->second.lock(); h && h->owner == ::getpid()) {
        DirLock l;
        l.held_ = std::move(h);
        return l;
      }
    }
  }

  const std::string host = this_host();
  const long pid = long(::getpid());
  const std::string job = env_or("SLURM_JOB_ID", "-"), restart = env_or("SLURM_RESTART_COUNT", "0");
  for (int attempt = 0; attempt < 20; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error(where + ": cannot open the lock file " + path + ": " + std::strerror(errno));
    bool flock_works = true;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK || err == EAGAIN) {
        const Holder h = parse(read_all(fd));
        ::close(fd);
        throw std::runtime_error(where + " is in use by another Loom job (" + describe(h) + "; lock file " + path +
                                 "): two jobs writing one directory would mix their files; wait for that job to end "
                                 "or choose another " + key);
      }
      flock_works = false;  // a filesystem without flock (ENOLCK, EOPNOTSUPP): the file's contents decide
    }
    // The holder may have released (deleted) the file between our open and our flock: the file
    // we hold must still be the one at `path`.
    struct stat a {}, b {};
    if (::fstat(fd, &a) != 0 || ::stat(path.c_str(), &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
      ::close(fd);
      continue;
    }
    const Holder h = parse(read_all(fd));
    if (h.any && !(h.host == host && h.pid == pid)) {
      std::string stale;
      if (job != "-" && h.slurm_job == job && h.slurm_restart != restart) {
        stale = "left by an earlier run of this Slurm job (" + describe(h) + ")";
      } else if (h.host == host) {
        if (!flock_works && pid_alive(h.pid)) {
          ::close(fd);
          throw std::runtime_error(where + " is in use by another Loom job (" + describe(h) + ", still running; lock file " +
                                   path + "): wait for that job to end or choose another " + key);
        }
        stale = "left by " + describe(h) + (pid_alive(h.pid) ? ", which no longer holds it" : ", which is not running");
      } else {
        ::close(fd);
        throw std::runtime_error(where + " is locked by a Loom job on another host (" + describe(h) + "; lock file " +
                                 path + "); a lock cannot be checked across nodes, so that job may still be running "
                                 "there. Wait for it to end or choose another " + key +
                                 "; if that job is known to be gone, delete " + path + " and run again");
      }
      std::fprintf(stderr, "loom: warning: %s: taking over a stale lock %s (%s)\n", where.c_str(), path.c_str(),
                   stale.c_str());
    }
    const std::string text = "host: " + host + "\npid: " + std::to_string(pid) + "\nstarted: " + now_iso() +
                             "\nslurm_job_id: " + job + "\nslurm_restart_count: " + restart + "\n";
    errno = 0;
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != ssize_t(text.size())) {
      const int err = errno ? errno : ENOSPC;  // a short write: the disk is full
      ::close(fd);
      throw std::runtime_error(where + ": cannot write the lock file " + path + ": " + std::strerror(err));
    }
    ::fsync(fd);
    auto held = std::make_shared<Held>();
    held->path = path;
    held->fd = fd;
    held->owner = ::getpid();
    {
      std::lock_guard<std::mutex> g(registry_mu);
      registry()[canon] = held;
    }
    DirLock l;
    l.held_ = std::move(held);
    return l;
  }
  throw std::runtime_error(where + ": could not take the lock file " + path + ": it keeps being replaced by another job");
}

}  // namespace loom
