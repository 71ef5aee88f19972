// Tensor-parallel layers, the model's gradient hooks and its parameter table's layer and tie data.
//
// tp > 1 runs in one process: each tp rank is a thread with its own CPU backend, joined by a
// Communicator over shared memory (ThreadComm) that reduces in rank order. The layers are
// checked exactly on integer-valued inputs (every float sum is exact, so the tp = 2 split must
// give bit for bit the tp = 1 result); the whole model with a tolerance (the split changes the
// order of fp32 sums).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/model/gpt.hpp"

using namespace loom;
using parallel::ReduceOp;

namespace {

// Every collective but all_reduce is unused by the model: they throw.
class TestComm : public parallel::Communicator {
 public:
  TestComm(int rank, int size) : rank_(rank), size_(size) {}
  std::string backend() const override { return "test"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  parallel::RequestPtr iall_reduce(TypedPtr, size_t, ReduceOp) override { throw unused(); }
  void reduce_scatter(ConstTypedPtr, TypedPtr, const std::vector<size_t>&) override { throw unused(); }
  parallel::RequestPtr ireduce_scatter(ConstTypedPtr, TypedPtr, const std::vector<size_t>&) override { throw unused(); }
  void all_gather(TypedPtr, const std::vector<size_t>&) override { throw unused(); }
  parallel::RequestPtr iall_gather(TypedPtr, const std::vector<size_t>&) override { throw unused(); }
  void broadcast(TypedPtr, size_t, int) override { throw unused(); }
  void send(ConstTypedPtr, size_t, int, int) override { throw unused(); }
  void recv(TypedPtr, size_t, int, int) override { throw unused(); }
  parallel::RequestPtr isend(ConstTypedPtr, size_t, int, int) override { throw unused(); }
  parallel::RequestPtr irecv(TypedPtr, size_t, int, int) override { throw unused(); }
  void barrier() override { throw unused(); }

 protected:
  static std::logic_error unused() { return std::logic_error("collective not used by the model"); }
  int rank_, size_;
};

// Records each all-reduce (count, op) and leaves the buffer as it is.
class RecordingComm final : public TestComm {
 public:
  using TestComm::TestComm;
  void all_reduce(TypedPtr, size_t n, ReduceOp op) override { calls.emplace_back(n, op); }
  std::vector<std::pair<size_t, ReduceOp>> calls;
};

// Shared memory between the threads of one group.
struct ThreadGroup {
  explicit ThreadGroup(int n) : size(n), bufs(size_t(n)) {}
  void wait_all() {  // a reusable barrier
    std::unique_lock<std::mutex> lock(m);
    const unsigned long gen = generation;
    if (++arrived == size) {
      arrived = 0, ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen; });
    }
  }
  int size, arrived = 0;
  unsigned long generation = 0;
  std::mutex m;
  std::condition_variable cv;
  std::vector<float*> bufs;
};

class ThreadComm final : public TestComm {
 public:
  ThreadComm(ThreadGroup& g, int rank) : TestComm(rank, g.size), g_(g) {}
  void all_reduce(TypedPtr typed, size_t n, ReduceOp op) override {
    float* buf = typed.as<float>();  // the model's tp all-reduces are fp32 here
    g_.bufs[size_t(rank_)] = buf;
    g_.wait_all();
    std::vector<float> r(g_.bufs[0], g_.bufs[0] + n);
    for (int k = 1; k < size_; ++k)
      for (size_t i = 0; i < n; ++i)
        r[i] = op == ReduceOp::Sum ? r[i] + g_.bufs[size_t(k)][i] : std::max(r[i], g_.bufs[size_t(k)][i]);
    g_.wait_all();  // every rank has read every buffer
    std::copy(r.begin(), r.end(), buf);
  }

 private:
  ThreadGroup& g_;
};

template <typename F>
void on_ranks(int tp, F body) {  // body(rank, comm) on tp threads
  ThreadGroup group(tp);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(tp));
  for (int r = 0; r < tp; ++r)
    threads.emplace_back([&, r] {
      ThreadComm comm(group, r);
      try {
        body(r, comm);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

std::vector<float> small_ints(size_t n, int seed) {  // in [-2, 2]: every sum below is exact
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(int((i * 7 + size_t(seed) * 13) % 5) - 2);
  return v;
}

const GptShape kShape = GptShape::make(2, 4, 32, 100, 16);  // Vp = 128: at tp 2, rank 1 has 36 real

}  // namespace

TEST_CASE("parameter table: wte is tied on first and last stages of a pipeline, not with pp = 1") {
  const StageSpec only{}, first{0, 1, true, false}, middle{1, 1, false, false}, last{1, 1, false, true};
  for (int tp : {1, 2}) {
    const ParamTable t_only = gpt_param_table(kShape, 0, tp, only), t_first = gpt_param_table(kShape, 0, tp, first),
                     t_mid = gpt_param_table(kShape, tp - 1, tp, middle),
                     t_last = gpt_param_table(kShape, tp - 1, tp, last);
    CHECK(!t_only.find("wte").tied);
    CHECK(!t_only.find("wte").tied_copy);
    CHECK(t_first.find("wte").tied);
    CHECK(!t_first.find("wte").tied_copy);
    CHECK(t_mid.find_if_held("wte") == nullptr);
    CHECK(t_last.find("wte").tied);
    CHECK(t_last.find("wte").tied_copy);
    for (const ParamTable* t : {&t_only, &t_first, &t_mid, &t_last})
      for (const ParamInfo& p : t->params())
        if (p.name != "wte") CHECK((!p.tied && !p.tied_copy));
  }
}

TEST_CASE("parameter table: each block's tensors carry its global layer and form one range") {
  const ParamTable t = gpt_param_table(kShape, 1, 2, StageSpec{1, 1, false, true});
  const auto [begin, end] = t.layer_range(1);
  CHECK(begin == t.find("h.1.ln1.weight").offset);
  CHECK(end == t.find("ln_f.weight").offset);
  for (const ParamInfo& p : t.params()) {
    const bool in_block = p.name.rfind("h.1.", 0) == 0;
    CHECK(p.layer == (in_block ? 1 : -1));
    CHECK(in_block == (p.offset >= begin && p.offset + p.numel <= end));
  }
  CHECK_THROWS_AS(t.layer_range(0), std::out_of_range);
  CHECK_THROWS_AS(t.layer_range(-1), std::out_of_range);
}

TEST_CASE("column-parallel then row-parallel at tp 2 gives the tp 1 result bit for bit") {
  const int N = 6, C = 8, H = 32;  // x (N,C) -> fc (N,H) -> proj (N,C)
  const auto x = small_ints(size_t(N) * C, 1), w1 = small_ints(size_t(H) * C, 2), b1 = small_ints(H, 3),
             w2 = small_ints(size_t(C) * H, 4), b2 = small_ints(C, 5), dy = small_ints(size_t(N) * C, 6);
  struct Result {
    std::vector<float> y, dx, dw1, db1, dw2, db2;
  };
  auto run = [&](int r, int tp, parallel::Communicator* comm) {
    auto be = make_cpu_backend();
    const TensorParallel grid{r, tp, comm};
    const int Ht = H / tp;
    ColumnParallelLinear fc(*be, grid, C, Ht);
    RowParallelLinear proj(*be, grid, Ht, C);
    auto up = [&](const float* host, size_t n) {
      float* d = be->alloc(n);
      be->upload(d, host, n);
      return d;
    };
    // This rank's slices: rows [r*Ht, (r+1)*Ht) of w1 and b1, columns of w2.
    std::vector<float> w2s(size_t(C) * Ht);
    for (int i = 0; i < C; ++i) std::copy_n(&w2[size_t(i) * H + size_t(r) * Ht], Ht, &w2s[size_t(i) * Ht]);
    float *dx_ = up(x.data(), x.size()), *dw1 = up(&w1[size_t(r) * Ht * C], size_t(Ht) * C),
          *db1 = up(&b1[size_t(r) * Ht], size_t(Ht)), *dw2 = up(w2s.data(), w2s.size()), *db2 = up(b2.data(), C),
          *ddy = up(dy.data(), dy.size());
    float *h = be->alloc(size_t(N) * Ht), *y = be->alloc(size_t(N) * C), *dh = be->alloc(size_t(N) * Ht),
          *dx = be->alloc(size_t(N) * C), *gw1 = be->alloc(size_t(Ht) * C), *gb1 = be->alloc(size_t(Ht)),
          *gw2 = be->alloc(size_t(C) * Ht), *gb2 = be->alloc(C);
    fc.forward(h, dx_, dw1, db1, N);
    proj.forward(y, h, dw2, db2, N);
    proj.backward(dh, gw2, gb2, ddy, h, dw2, N);
    fc.backward(dx, gw1, gb1, dh, dx_, dw1, N);
    auto down = [&](const float* d, size_t n) {
      std::vector<float> v(n);
      be->download(v.data(), d, n);
      return v;
    };
    return Result{down(y, size_t(N) * C), down(dx, size_t(N) * C), down(gw1, size_t(Ht) * C),
                  down(gb1, size_t(Ht)),  down(gw2, size_t(C) * Ht), down(gb2, C)};
  };
  const Result ref = run(0, 1, nullptr);
  std::vector<Result> got(2);
  on_ranks(2, [&](int r, parallel::Communicator& comm) { got[size_t(r)] = run(r, 2, &comm); });
  for (int r = 0; r < 2; ++r) {
    INFO("tp rank " << r);
    const Result& g = got[size_t(r)];
    CHECK(g.y == ref.y);    // g: all-reduced, the bias added once
    CHECK(g.dx == ref.dx);  // f backward: all-reduced
    CHECK(g.db2 == ref.db2);  // replicated bias: the full gradient on every rank
    CHECK(std::equal(g.dw1.begin(), g.dw1.end(), ref.dw1.begin() + r * (H / 2) * C));
    CHECK(std::equal(g.db1.begin(), g.db1.end(), ref.db1.begin() + r * (H / 2)));
    for (int i = 0; i < C; ++i)
      CHECK(std::equal(&g.dw2[size_t(i) * (H / 2)], &g.dw2[size_t(i + 1) * (H / 2)], &ref.dw2[size_t(i) * H + r * (H / 2)]));
  }
}

namespace {

std::vector<int32_t> ids(size_t n, int mul, int add) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = int32_t((i * size_t(mul) + size_t(add)) % size_t(kShape.vocab));
  return v;
}

struct Step {
  double loss = 0;
  std::vector<float> grads;
};

Step train_step(Gpt& model, int B) {
  const size_t N = size_t(B) * kShape.seq_len;
  const auto tokens = ids(N, 7, 3), targets = ids(N, 11, 5);
  std::vector<float> init(model.num_params());
  init_params(model.table(), kShape, 42, init.data());
  model.set_params(init.data());
  model.zero_grads();
  Step s;
  s.loss = model.forward(tokens.data(), targets.data(), 1.0f / float(N));
  model.backward();
  s.grads.resize(model.num_params());
  model.get_grads(s.grads.data());
  return s;
}

}  // namespace

TEST_CASE("the model's collectives: two all-reduces forward and two backward per block, owned by the layers") {
  const int B = 2, N = B * kShape.seq_len, C = kShape.d_model, L = kShape.n_layer;
  auto be = make_cpu_backend();
  RecordingComm comm(0, 2);  // rank 0 of 2; sums nothing, so only the calls count here
  Gpt model(*be, kShape, B, TensorParallel{0, 2, &comm});
  std::vector<std::pair<size_t, ReduceOp>> expect = {{size_t(N) * C, ReduceOp::Sum}};  // embedding
  for (int l = 0; l < 2 * L; ++l) expect.emplace_back(size_t(N) * C, ReduceOp::Sum);  // g after each row-parallel
  expect.emplace_back(size_t(N), ReduceOp::Max);                                       // cross-entropy
  expect.emplace_back(2 * size_t(N), ReduceOp::Sum);
  for (int l = 0; l < 2 * L + 1; ++l) expect.emplace_back(size_t(N) * C, ReduceOp::Sum);  // head, f of each column
  train_step(model, B);
  CHECK(comm.calls == expect);

  RecordingComm none(0, 1);  // tp = 1: no communication at all
  Gpt single(*be, kShape, B, TensorParallel{0, 1, &none});
  train_step(single, B);
  CHECK(none.calls.empty());
}

TEST_CASE("hooks: gradients ready at grad_ready_points(), in order, whatever the recompute") {
  const int B = 2, L = kShape.n_layer;
  auto be = make_cpu_backend();
  Step none_step;
  for (Recompute rc : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    INFO("recompute " << int(rc));
    Gpt model(*be, kShape, B, {}, {}, 1, rc);
    std::vector<size_t> ready;
    ModelHooks hooks;
    hooks.grads_ready_from = [&](size_t o) { ready.push_back(o); };
    model.set_hooks(hooks);
    const Step s = train_step(model, B);
    CHECK(ready.size() == size_t(L) + 2);  // the head (ln_f), each block, the embedding (0)
    CHECK(ready == model.grad_ready_points());
    CHECK(ready[1] == model.table().layer_range(L - 1).first);
    if (rc == Recompute::None) none_step = s;
    CHECK(s.loss == none_step.loss);  // recompute changes no bit
    CHECK(s.grads == none_step.grads);
  }
}

TEST_CASE("the model at tp 2 matches tp 1: loss and every gradient, in global coordinates") {
  const int B = 2;
  auto be = make_cpu_backend();
  Gpt ref_model(*be, kShape, B);
  const Step ref = train_step(ref_model, B);
  std::vector<Step> got(2);
  std::vector<ParamTable> tables(2);
  on_ranks(2, [&](int r, parallel::Communicator& comm) {
    auto rb = make_cpu_backend();
    Gpt model(*rb, kShape, B, TensorParallel{r, 2, &comm});
    got[size_t(r)] = train_step(model, B);
    tables[size_t(r)] = model.table();
  });
  // The split reorders fp32 sums (matmuls over C/tp columns, then the all-reduce): each value
  // within 1e-5 of its tensor's largest magnitude, as against PyTorch in test_gpt_golden.
  for (int r = 0; r < 2; ++r) {
    CHECK(got[size_t(r)].loss == Approx(ref.loss).epsilon(1e-6));
    for (const ParamInfo& p : tables[size_t(r)].params()) {
      const ParamInfo& q = ref_model.table().find(p.name);
      double scale = 0, err = 0;
      for (size_t i = 0; i < p.numel; ++i) {
        const float want = ref.grads[q.offset + size_t(p.global_index(i))];
        scale = std::max(scale, double(std::fabs(want)));
        err = std::max(err, double(std::fabs(got[size_t(r)].grads[p.offset + i] - want)));
      }
      INFO("rank " << r << " " << p.name << ": max |diff| " << err << ", max |ref| " << scale);
      CHECK(err <= 1e-5 * scale);
    }
  }
}
