// The registry of what runs before a job abort (parallel/abort_hooks.hpp): the NCCL
// communicators' ncclCommAbort goes through it, so its logic is tested here on the CPU.
// run_abort_hooks runs only once per process, so each case needs a process of its own: CTest runs
// every TEST_CASE alone (catch_discover_tests); run by hand, pass one case's name.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "parallel/abort_hooks.hpp"

using namespace loom::parallel;

TEST_CASE("abort hooks run once, in registration order, removed ones not at all", "[abort]") {
  std::vector<int> order;
  std::mutex mu;
  auto hook = [&](int i) {
    return [&, i] {
      std::lock_guard<std::mutex> lk(mu);
      order.push_back(i);
    };
  };
  add_abort_hook("first", hook(1));
  const int second = add_abort_hook("second", hook(2));
  add_abort_hook("third", hook(3));
  remove_abort_hook(second);
  CHECK(run_abort_hooks(5.0) == 2);
  std::lock_guard<std::mutex> lk(mu);
  CHECK(order == std::vector<int>{1, 3});  // one after the other, in order
  CHECK(run_abort_hooks(5.0) == 0);  // a second abort path runs nothing again
}

TEST_CASE("a hook that hangs is abandoned at the deadline, the ones before it ran", "[abort]") {
  std::atomic<int> ran{0};
  add_abort_hook("fine", [&] { ++ran; });
  add_abort_hook("throws", [] { throw std::runtime_error("ncclCommAbort failed"); });
  add_abort_hook("a wedged ncclCommAbort", [] { std::this_thread::sleep_for(std::chrono::seconds(30)); });
  add_abort_hook("after the wedged one", [&] { ++ran; });
  const auto t0 = std::chrono::steady_clock::now();
  const int finished = run_abort_hooks(0.5);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(finished == 2);  // the one that threw counts as done
  CHECK(ran == 1);       // the last is held up behind the wedged one
  CHECK(waited >= 0.45);
  CHECK(waited < 5.0);
}

TEST_CASE("with nothing registered an abort does not wait", "[abort]") {
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(run_abort_hooks(10.0) == 0);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 1.0);
}
