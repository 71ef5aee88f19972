// oneDNN matmul primitives for the CPU backend (onednn_gemm.hpp): one engine, one stream per
// calling thread, primitives cached by shape (creating one costs milliseconds, far more than
// running it at a training step's sizes).
#include "kernels/cpu/onednn_gemm.hpp"

#include <omp.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>

#ifdef LOOM_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace loom::cpu::onednn {

bool GemmDesc::operator<(const GemmDesc& o) const {
  return std::tie(in, out, M, K, N, a_trans, b_trans, bias, accumulate) <
         std::tie(o.in, o.out, o.M, o.K, o.N, o.a_trans, o.b_trans, o.bias, o.accumulate);
}

bool BatchedGemmDesc::operator<(const BatchedGemmDesc& o) const {
  return std::tie(in, out, batch0, batch1, M, K, N, a_strides, b_strides, dst_strides) <
         std::tie(o.in, o.out, o.batch0, o.batch1, o.M, o.K, o.N, o.a_strides, o.b_strides, o.dst_strides);
}

bool cpu_has_native_bf16() {
#ifdef LOOM_HAVE_DNNL
  // The ISA oneDNN will use (the CPU's, or less under DNNL_MAX_CPU_ISA): a bit mask, in which
  // avx512_core_amx contains avx512_core_bf16's bits.
  const unsigned isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const unsigned bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
#else
  return __builtin_cpu_supports("avx512bf16");
#endif
}

#ifdef LOOM_HAVE_DNNL
namespace {

using dt = dnnl::memory::data_type;

dt to_dnnl(DType t) {
  switch (t) {
    case DType::f32: return dt::f32;
    case DType::bf16: return dt::bf16;
    case DType::f16: return dt::f16;
    default: return dt::undef;
  }
}

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

struct Prim {
  bool ok = false;  // false: no usable implementation (callers fall back)
  std::string impl;
  dnnl::memory::desc a, b, bias, dst;
  dnnl::matmul mm;
};

// Creates the primitive for p's memory descs; p.ok stays false when oneDNN has only its reference
// implementation or none.
void create(Prim& p, bool bias, bool accumulate) {
  try {
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    dnnl::matmul::desc md = bias ? dnnl::matmul::desc(p.a, p.b, p.bias, p.dst) : dnnl::matmul::desc(p.a, p.b, p.dst);
    dnnl::matmul::primitive_desc pd(md, attr, engine());
    p.impl = pd.impl_info_str();
    // oneDNN's reference kernels are slower than widening to fp32 and calling sgemm.
    if (p.impl.rfind("ref", 0) == 0) return;
    p.mm = dnnl::matmul(pd);
    p.ok = true;
  } catch (const dnnl::error&) {
    // unimplemented for these dtypes on this CPU (e.g. f16 without AVX512_FP16)
  }
}

Prim make(const GemmDesc& d) {
  Prim p;
  using dims = dnnl::memory::dims;
  const dt in = to_dnnl(d.in), out = to_dnnl(d.out);
  p.a = dnnl::memory::desc({d.M, d.K}, in, d.a_trans ? dims{1, d.M} : dims{d.K, 1});
  p.b = dnnl::memory::desc({d.K, d.N}, in, d.b_trans ? dims{1, d.K} : dims{d.N, 1});
  p.dst = dnnl::memory::desc({d.M, d.N}, out, dims{d.N, 1});
  if (d.bias) p.bias = dnnl::memory::desc({1, d.N}, in, dims{d.N, 1});
  create(p, d.bias, d.accumulate);
  return p;
}

Prim make(const BatchedGemmDesc& d) {
  Prim p;
  using dims = dnnl::memory::dims;
  const dt in = to_dnnl(d.in), out = to_dnnl(d.out);
  auto md = [&](int64_t rows, int64_t cols, dt t, const std::array<int64_t, 4>& s) {
    return dnnl::memory::desc({d.batch0, d.batch1, rows, cols}, t, dims{s[0], s[1], s[2], s[3]});
  };
  p.a = md(d.M, d.K, in, d.a_strides);
  p.b = md(d.K, d.N, in, d.b_strides);
  p.dst = md(d.M, d.N, out, d.dst_strides);
  create(p, false, false);
  return p;
}

// One cache per desc type, keyed by shape and thread count (a primitive is laid out for the
// threads it was created with); entries are never erased, so the returned reference stays valid.
template <typename Desc>
const Prim& lookup(const Desc& d) {
  static std::mutex mu;
  static std::map<std::pair<Desc, int>, std::unique_ptr<Prim>> cache;
  const int threads = omp_get_max_threads();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[{d, threads}];
  if (!slot) slot = std::make_unique<Prim>(make(d));
  return *slot;
}

void execute(const Prim& p, void* dst, const void* a, const void* b, const void* bias) {
  thread_local dnnl::stream stream(engine());
  auto mem = [&](const dnnl::memory::desc& md, const void* ptr) {
    return dnnl::memory(md, engine(), const_cast<void*>(ptr));
  };
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, mem(p.a, a)}, {DNNL_ARG_WEIGHTS, mem(p.b, b)}, {DNNL_ARG_DST, mem(p.dst, dst)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, mem(p.bias, bias));
  p.mm.execute(stream, args);
  stream.wait();
}

}  // namespace

bool built() { return true; }

bool gemm(const GemmDesc& d, void* dst, const void* a, const void* b, const void* bias) {
  const Prim& p = lookup(d);
  if (!p.ok) return false;
  execute(p, dst, a, b, d.bias ? bias : nullptr);
  return true;
}
bool gemm(const BatchedGemmDesc& d, void* dst, const void* a, const void* b) {
  const Prim& p = lookup(d);
  if (!p.ok) return false;
  execute(p, dst, a, b, nullptr);
  return true;
}

std::string impl_name(const GemmDesc& d) { return lookup(d).impl; }
bool supported(const GemmDesc& d) { return lookup(d).ok; }
std::string impl_name(const BatchedGemmDesc& d) { return lookup(d).impl; }
bool supported(const BatchedGemmDesc& d) { return lookup(d).ok; }

#else  // no oneDNN in this build

bool built() { return false; }
bool gemm(const GemmDesc&, void*, const void*, const void*, const void*) { return false; }
std::string impl_name(const GemmDesc&) { return ""; }
bool supported(const GemmDesc&) { return false; }
bool gemm(const BatchedGemmDesc&, void*, const void*, const void*) { return false; }
std::string impl_name(const BatchedGemmDesc&) { return ""; }
bool supported(const BatchedGemmDesc&) { return false; }

#endif

}  // namespace loom::cpu::onednn
