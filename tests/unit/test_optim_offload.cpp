// The pieces of optimizer offload (optim.offload: cpu), against the CPU backend:
//   - host AdamW and the host sum of squares give the CPU backend's bits exactly (no tolerance:
//     host_adamw.cpp is the same loop compiled with the same flags; see its header), for any
//     size, any thread count and any cut of the buffer into calls; a grad_factor gives the bits
//     of the backend's scale op followed by its AdamW (the optimizer's present path);
//   - the CPU backend's host staging (pinned allocations, async copies) round-trips exactly,
//     directly and through the op timer. The CUDA backend's is in test_cuda_ops.cpp.
#include <catch2/catch.hpp>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "engine/optim/host_adamw.hpp"
#include "kernels/backend_factory.hpp"
#include "kernels/op_timer.hpp"

using namespace loom;
using Vec = std::vector<float>;

namespace {

Vec randn(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  Vec v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The optimizer state of one test: parameters, gradients and moments (v non-negative, as
// AdamW leaves it).
struct State {
  Vec p, g, m, v;
  State(size_t n, unsigned seed) : p(randn(n, seed)), g(randn(n, seed + 1, 1e-2f)), m(randn(n, seed + 2, 1e-3f)) {
    v = randn(n, seed + 3, 1e-4f);
    for (float& x : v) x = x * x;
  }
};

// Bitwise equality; on failure the first differing index and both values.
void check_same_bits(const char* what, const Vec& got, const Vec& ref) {
  REQUIRE(got.size() == ref.size());
  if (std::memcmp(got.data(), ref.data(), got.size() * sizeof(float)) == 0) return;
  size_t bad = 0, first = 0;
  for (size_t i = got.size(); i-- > 0;)
    if (std::memcmp(&got[i], &ref[i], sizeof(float)) != 0) ++bad, first = i;
  INFO(what << ": " << bad << " of " << got.size() << " elements differ; first at " << first << ": host "
            << got[first] << " backend " << ref[first] << " (difference " << got[first] - ref[first] << ")");
  CHECK(bad == 0);
}

struct Hyper {
  float lr, beta1, beta2, eps, wd;
};
constexpr Hyper kHyper{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};

// `steps` AdamW updates of `s` by the CPU backend, from step t0 on, each gradient first scaled by
// the backend's scale op when factor != 1 (the distributed optimizer's path today).
void backend_steps(Backend& be, State& s, int64_t t0, int steps, float factor = 1.0f, Hyper h = kHyper) {
  const size_t n = s.p.size();
  for (int k = 0; k < steps; ++k) {
    Vec g = s.g;
    if (factor != 1.0f) be.scale(g.data(), n, factor);
    be.adamw_update(s.p.data(), g.data(), s.m.data(), s.v.data(), n, h.lr, h.beta1, h.beta2, h.eps, h.wd, t0 + k);
  }
}

// The same updates by host_adamw_update, the buffer cut into calls at `cuts` (ascending offsets).
void host_steps(State& s, int64_t t0, int steps, float factor = 1.0f, const std::vector<size_t>& cuts = {},
                Hyper h = kHyper) {
  const size_t n = s.p.size();
  std::vector<size_t> edges{0};
  for (size_t c : cuts)
    if (c > edges.back() && c < n) edges.push_back(c);
  edges.push_back(n);
  for (int k = 0; k < steps; ++k)
    for (size_t e = 0; e + 1 < edges.size(); ++e) {
      const size_t lo = edges[e], len = edges[e + 1] - lo;
      host_adamw_update(s.p.data() + lo, s.g.data() + lo, s.m.data() + lo, s.v.data() + lo, len, h.lr, h.beta1,
                        h.beta2, h.eps, h.wd, t0 + k, factor);
    }
}

void check_states(const char* what, const State& host, const State& ref) {
  check_same_bits(what, host.p, ref.p);
  check_same_bits(what, host.m, ref.m);
  check_same_bits(what, host.v, ref.v);
}

// Sizes: empty, below one AVX-512 vector, around vector and thread-split boundaries, ragged tails.
const size_t kSizes[] = {0, 1, 3, 15, 16, 17, 31, 33, 1000, 4099, 65537, 300007};

}  // namespace

TEST_CASE("host AdamW gives the CPU backend's adamw_update bits", "[offload]") {
  auto be = make_backend("cpu");
  for (size_t n : kSizes) {
    for (auto [t0, wd] : {std::pair<int64_t, float>{1, 0.1f}, std::pair<int64_t, float>{5000, 0.0f}}) {
      INFO("n " << n << ", steps from t = " << t0 << ", weight decay " << wd);
      Hyper h = kHyper;
      h.wd = wd;
      State ref(n, unsigned(n) + 7), host = ref;
      backend_steps(*be, ref, t0, 3, 1.0f, h);
      host_steps(host, t0, 3, 1.0f, {}, h);
      check_states("whole buffer", host, ref);
    }
  }
}

TEST_CASE("host AdamW: the same bits for any thread count and any cut of the buffer into calls", "[offload]") {
  auto be = make_backend("cpu");
  const size_t n = 100003;
  State ref(n, 11);
  backend_steps(*be, ref, 1, 2);
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    // Cuts at odd offsets: every piece starts misaligned for the vector loads and has a ragged tail.
    for (const auto& cuts : {std::vector<size_t>{}, std::vector<size_t>{1, 17, 4099, 50001, 99999},
                             std::vector<size_t>{7, 8, 9, 10, 11, 12, 13}}) {
      INFO(threads << " threads, " << cuts.size() << " cuts");
      State host(n, 11);
      host_steps(host, 1, 2, 1.0f, cuts);
      check_states("cut into calls", host, ref);
    }
  }
  omp_set_num_threads(saved);
}

TEST_CASE("host AdamW's grad_factor gives the bits of the backend's scale op followed by its AdamW", "[offload]") {
  // The gradient times the factor is rounded once, as the scale op rounds it, and the rest is the
  // same arithmetic: no tolerance. (A factor applied as two separate scalings, e.g. an unscale and
  // then a clip, rounds twice and may differ from one combined factor by an ulp of the gradient;
  // the distributed optimizer folds them into one factor before scaling, as host AdamW expects.)
  auto be = make_backend("cpu");
  const double norm = 3.7, clip = 1.0;
  const float clip_factor = float(clip / (norm + 1e-6));  // adamw.cpp's clip_by_norm coefficient
  for (float factor : {0.5f, clip_factor, clip_factor / 65536.0f, 3.0f, 0.0f}) {
    for (size_t n : kSizes) {
      INFO("n " << n << ", factor " << factor);
      State ref(n, unsigned(n) + 21), host = ref;
      backend_steps(*be, ref, 1, 3, factor);
      host_steps(host, 1, 3, factor, {5, 1000});
      check_states("scaled gradients", host, ref);
    }
  }
}

TEST_CASE("host sum of squares gives the CPU backend's sum_squares bits for any thread count", "[offload]") {
  auto be = make_backend("cpu");
  const int saved = omp_get_max_threads();
  for (size_t n : {size_t(0), size_t(1), size_t(1000), size_t(65536), size_t(65537), size_t(300007)}) {
    const Vec x = randn(n, unsigned(n) + 31, 1e-2f);
    const double ref = be->sum_squares(x.data(), n);
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      INFO("n " << n << ", " << threads << " threads");
      const double got = host_sum_squares(x.data(), n);
      CHECK(std::memcmp(&got, &ref, sizeof(double)) == 0);
    }
  }
  omp_set_num_threads(saved);
}

TEST_CASE("CPU backend offload staging: pinned memory and async copies round-trip", "[offload]") {
  std::unique_ptr<Backend> direct = make_backend("cpu");
  OpTimer timed(make_backend("cpu"));  // the timer forwards the staging calls
  for (Backend* be : {direct.get(), static_cast<Backend*>(&timed)}) {
    for (size_t n : {size_t(1), size_t(17), size_t(100003)}) {
      INFO(be->name() << (be == &timed ? " (through the op timer)" : "") << ", n " << n);
      const Vec x = randn(n, unsigned(n) + 41);
      float* in = static_cast<float*>(be->alloc_host_pinned(n * sizeof(float)));
      float* out = static_cast<float*>(be->alloc_host_pinned(n * sizeof(float)));
      REQUIRE(in != nullptr);
      REQUIRE(out != nullptr);
      CHECK(reinterpret_cast<uintptr_t>(in) % 64 == 0);
      size_t nonzero = 0;
      for (size_t i = 0; i < n; ++i) nonzero += out[i] != 0.0f;
      CHECK(nonzero == 0);  // zero-filled
      std::memcpy(in, x.data(), n * sizeof(float));
      // Host -> device, an op that must see the copied data, device -> host.
      float* dev = be->alloc(n);
      be->copy_from_host_async(dev, in, n * sizeof(float));
      be->scale(dev, n, 2.0f);
      be->copy_to_host_async(out, dev, n * sizeof(float));
      be->wait_host_copies();
      Vec got(out, out + n), want(n);
      for (size_t i = 0; i < n; ++i) want[i] = 2.0f * x[i];  // exact: a power of two
      check_same_bits("round trip", got, want);
      be->release(dev);
      be->release_host_pinned(in);
      be->release_host_pinned(out);
    }
    // Zero bytes: a real allocation to release; copies of nothing are allowed.
    void* empty = be->alloc_host_pinned(0);
    CHECK(empty != nullptr);
    be->copy_to_host_async(empty, empty, 0);
    be->wait_host_copies();
    be->release_host_pinned(empty);
    be->release_host_pinned(nullptr);
  }
}
