#include "parallel/mpi_half_reduce.hpp"

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "parallel/mpi_check.hpp"

namespace loom::parallel {
namespace {

template <typename T>
float widen1(uint16_t bits) {
  T v;
  v.bits = bits;
  return float(v);
}

template <typename T>
void combine_half(uint16_t* d, const uint16_t* s, size_t n, ReduceOp op) {
  if (op == ReduceOp::Sum) {
    for (size_t i = 0; i < n; ++i) d[i] = T::from_float(widen1<T>(d[i]) + widen1<T>(s[i]));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const float x = widen1<T>(s[i]), y = widen1<T>(d[i]);
    if (std::isnan(x) || (!std::isnan(y) && x > y)) d[i] = s[i];
  }
}

// MPI_User_function: inout[i] = in[i] (op) inout[i], on 16-bit patterns of dtype T (the sum is
// commutative bit for bit, and the max keeps `in` exactly where combine_into keeps src).
template <DType T, ReduceOp Op>
void user_op(void* in, void* inout, int* len, MPI_Datatype*) {
  combine_into(inout, in, size_t(*len), T, Op);
}

int half_index(DType t) {
  if (t == DType::bf16) return 0;
  if (t == DType::f16) return 1;
  throw std::logic_error(std::string("HalfOps: no user op for dtype ") + dtype_name(t));
}

template <typename T>
void widen_all(const void* src, float* dst, size_t n) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (size_t i = 0; i < n; ++i) dst[i] = widen1<T>(s[i]);
}
template <typename T>
void narrow_all(const float* src, void* dst, size_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  for (size_t i = 0; i < n; ++i) d[i] = T::from_float(src[i]);
}
// Uninitialised fp32 scratch (every element is written before it is read).
std::unique_ptr<float[]> scratch(size_t n) { return std::unique_ptr<float[]>(new float[n ? n : 1]); }

}  // namespace

void widen_to_fp32(ConstTypedPtr src, float* dst, size_t n) {
  if (src.dtype == DType::bf16) widen_all<bf16>(src.data, dst, n);
  else widen_all<fp16>(src.data, dst, n);
}
void narrow_from_fp32(const float* src, TypedPtr dst, size_t n) {
  if (dst.dtype == DType::bf16) narrow_all<bf16>(src, dst.data, n);
  else narrow_all<fp16>(src, dst.data, n);
}

const char* half_reduce_name(HalfReduce h) { return h == HalfReduce::UserOp ? "user_op" : "fp32"; }
HalfReduce parse_half_reduce(const std::string& s) {
  if (s == "user_op") return HalfReduce::UserOp;
  if (s == "fp32") return HalfReduce::ThroughFp32;
  throw std::invalid_argument("half reduce method '" + s + "': expected user_op or fp32");
}

MPI_Datatype mpi_datatype(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::i32: return MPI_INT32_T;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;
  }
  throw std::logic_error("mpi_datatype: unknown dtype");
}

HalfOps::HalfOps() {
  mpi_check(MPI_Op_create(&user_op<DType::bf16, ReduceOp::Sum>, /*commute=*/1, &ops_[0][0]), "MPI_Op_create");
  mpi_check(MPI_Op_create(&user_op<DType::bf16, ReduceOp::Max>, 1, &ops_[0][1]), "MPI_Op_create");
  mpi_check(MPI_Op_create(&user_op<DType::f16, ReduceOp::Sum>, 1, &ops_[1][0]), "MPI_Op_create");
  mpi_check(MPI_Op_create(&user_op<DType::f16, ReduceOp::Max>, 1, &ops_[1][1]), "MPI_Op_create");
}

HalfOps::~HalfOps() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& per_type : ops_)
    for (MPI_Op& op : per_type) MPI_Op_free(&op);
}

MPI_Op HalfOps::get(DType t, ReduceOp op) const { return ops_[half_index(t)][op == ReduceOp::Sum ? 0 : 1]; }

void all_reduce_through_fp32(MPI_Comm c, TypedPtr buf, size_t n, ReduceOp op) {
  auto f = scratch(n);
  widen_to_fp32(buf, f.get(), n);
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, f.get(), mpi_count(n, "elements"), MPI_FLOAT,
                          op == ReduceOp::Sum ? MPI_SUM : MPI_MAX, c),
            "MPI_Allreduce");
  narrow_from_fp32(f.get(), buf, n);
}

void reduce_scatter_through_fp32(MPI_Comm c, ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts,
                                 int rank) {
  size_t total = 0;
  std::vector<int> cnt;
  for (size_t x : counts) {
    total += x;
    cnt.push_back(mpi_count(x, "elements"));
  }
  const size_t mine = counts[size_t(rank)];
  auto fs = scratch(total), fr = scratch(mine);
  widen_to_fp32(send, fs.get(), total);
  mpi_check(MPI_Reduce_scatter(fs.get(), fr.get(), cnt.data(), MPI_FLOAT, MPI_SUM, c), "MPI_Reduce_scatter");
  narrow_from_fp32(fr.get(), recv, mine);
}

void combine_into(void* dst, const void* src, size_t n, DType t, ReduceOp op) {
  if (t == DType::f32) {
    float* d = static_cast<float*>(dst);
    const float* s = static_cast<const float*>(src);
    if (op == ReduceOp::Sum) {
      for (size_t i = 0; i < n; ++i) d[i] += s[i];
    } else {
      for (size_t i = 0; i < n; ++i)
        if (std::isnan(s[i]) || (!std::isnan(d[i]) && s[i] > d[i])) d[i] = s[i];
    }
    return;
  }
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  if (t == DType::bf16) combine_half<bf16>(d, s, n, op);
  else combine_half<fp16>(d, s, n, op);
}

}  // namespace loom::parallel
