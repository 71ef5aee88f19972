#include "parallel/abort_hooks.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace loom::parallel {
namespace {

struct Registry {
  std::mutex mu;
  std::map<int, std::pair<std::string, std::function<void()>>> hooks;  // id order = registration order
  int next_id = 0;
  std::atomic<bool> ran{false};
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: an abort may come during static destruction
  return *r;
}

// What the detached threads share with the caller; owned jointly, so a hook that outlives the
// deadline finds it still there.
struct Progress {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<bool> done;
};

}  // namespace

int add_abort_hook(std::string what, std::function<void()> hook) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  const int id = r.next_id++;
  r.hooks.emplace(id, std::make_pair(std::move(what), std::move(hook)));
  return id;
}

void remove_abort_hook(int id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  r.hooks.erase(id);
}

int run_abort_hooks(double deadline_s) {
  Registry& r = registry();
  if (r.ran.exchange(true)) return 0;
  std::vector<std::pair<std::string, std::function<void()>>> hooks;
  {
    std::lock_guard<std::mutex> lk(r.mu);
    for (auto& [id, h] : r.hooks) hooks.push_back(h);
  }
  if (hooks.empty()) return 0;
  // One thread runs them in turn (NCCL advises against concurrent calls on one device's
  // communicators); it is detached, so a hook that hangs holds up only the hooks after it.
  auto progress = std::make_shared<Progress>();
  progress->done.assign(hooks.size(), false);
  std::thread([progress, hooks] {
    for (size_t i = 0; i < hooks.size(); ++i) {
      try {
        hooks[i].second();
      } catch (...) {
      }
      std::lock_guard<std::mutex> lk(progress->mu);
      progress->done[i] = true;
      progress->cv.notify_all();
    }
  }).detach();
  std::unique_lock<std::mutex> lk(progress->mu);
  progress->cv.wait_for(lk, std::chrono::duration<double>(deadline_s), [&] { return progress->done.back(); });
  int finished = 0;
  std::string late;
  for (size_t i = 0; i < hooks.size(); ++i) {
    if (progress->done[i])
      ++finished;
    else
      late += (late.empty() ? "" : ", ") + hooks[i].first;
  }
  if (!late.empty()) {
    std::fprintf(stderr, "loom: before aborting: %s did not finish within %.1f s; aborting anyway\n", late.c_str(),
                 deadline_s);
    std::fflush(stderr);
  }
  return finished;
}

}  // namespace loom::parallel
