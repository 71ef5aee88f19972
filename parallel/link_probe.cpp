#include "parallel/link_probe.hpp"

#include <algorithm>
#include <chrono>

#include "parallel/bucket_plan.hpp"  // even_counts

namespace loom::parallel {

LinkProbe probe_link(Communicator& group, Communicator& host, TypedPtr buf, bool reduce_scatter,
                     const std::vector<size_t>& bytes_sizes, int repeats, const std::function<void()>& sync) {
  const size_t elem = dtype_size(buf.dtype);
  std::vector<float> best;  // per size, seconds
  for (size_t bytes : bytes_sizes) {
    const size_t n = std::max<size_t>(bytes / elem, size_t(group.size()));
    const std::vector<size_t> counts = even_counts(n, group.size());
    auto once = [&] {
      if (reduce_scatter)  // into the second half (MPI forbids aliasing send and recv)
        group.reduce_scatter(ConstTypedPtr(buf), buf + n, counts);
      else
        group.all_reduce(buf, n, ReduceOp::Sum);
      sync();
    };
    once();  // warm-up: connections, buffers
    double fastest = 1e30;
    for (int i = 0; i < repeats; ++i) {
      host.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      once();
      fastest = std::min(fastest, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    best.push_back(float(fastest));
  }
  host.all_reduce(best.data(), best.size(), ReduceOp::Max);
  LinkProbe p;
  for (size_t i = 0; i < bytes_sizes.size(); ++i) {
    const size_t n = std::max<size_t>(bytes_sizes[i] / elem, size_t(group.size()));
    p.samples.emplace_back(double(n * elem), double(best[i]));
  }
  p.link = fit_link(p.samples);
  return p;
}

}  // namespace loom::parallel
