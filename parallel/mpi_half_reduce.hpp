#pragma once
// bf16 and fp16 reductions over MPI, which has no 16-bit float type. Two ways (HalfReduce):
//   UserOp:      the buffers travel as they are, as MPI_UINT16_T (2 bytes an element), and MPI
//                combines them with a user-defined commutative op that widens both operands to
//                float, combines them and rounds to nearest even. A Sum is rounded after every
//                combine, so over p ranks it is rounded p-1 times, in the order of MPI's
//                algorithm for that size.
//   ThroughFp32: each rank widens its buffer into an fp32 scratch, MPI reduces that with
//                MPI_FLOAT, and the result is rounded once. Twice the bytes on the wire, two
//                conversion passes and a scratch allocation per call; rounds only once.
// Max is exact either way (the larger operand is kept, bit for bit; NaN wins).
#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "parallel/communicator.hpp"

namespace loom::parallel {

enum class HalfReduce { UserOp, ThroughFp32 };
// The default of every MpiCommunicator: UserOp, by measurement. `loom bench comm --ops all_reduce`,
// this 2-core machine, ranks oversubscribed, one run each, time in ms per all-reduce of the
// same BYTES (bf16 lines hold twice the elements of the fp32 line):
//   ranks  size    fp32   bf16 user_op   bf16 through fp32
//   2       1 MB    0.12      0.29            0.77
//   2       4 MB    1.57      3.51           30.5
//   2      16 MB   15.1      17.3            77.0
//   2      64 MB   90.0     118.7           261.6
//   4       1 MB    0.77      0.88            1.81
//   4       4 MB    8.99     11.4            45.3
//   4      16 MB   27.2      33.0           159.0
//   4      64 MB  197.0     220.3           562.0
//   8       1 MB    1.39      2.62           12.6
//   8       4 MB   12.4      24.9            77.9
//   8      16 MB   55.9      71.4           162.5
//   8      64 MB  274.0     409.9          1950.1
// Per element (what a gradient costs) bf16 via the user op beats fp32: at 64 MB, 2 ranks, 3.5 ns
// per element (33.5M in 118.7 ms) against 5.4 (16.8M in 90.0 ms); 4 ranks 6.6 vs 11.7; 8 ranks
// 12.2 vs 16.3. Through fp32 is 2-7x slower than the user op at every point: a scratch allocation,
// two conversion passes and twice the bytes. Noisy (shared cores); the ordering held everywhere.
constexpr HalfReduce kDefaultHalfReduce = HalfReduce::UserOp;

// "user_op" | "fp32"; parse_half_reduce throws std::invalid_argument on anything else.
const char* half_reduce_name(HalfReduce h);
HalfReduce parse_half_reduce(const std::string& s);

// The MPI type of one element: fp32 MPI_FLOAT, int32 MPI_INT32_T, bf16 and fp16 MPI_UINT16_T
// (their bits; only HalfOps may reduce them).
MPI_Datatype mpi_datatype(DType t);

// The user-defined ops for bf16/fp16 Sum and Max. MPI_Op_create is local (not collective): each
// MpiCommunicator creates its own in its constructor and frees them in its destructor (unless MPI
// is already finalized, when MPI has freed them).
class HalfOps {
 public:
  HalfOps();
  ~HalfOps();
  HalfOps(const HalfOps&) = delete;
  HalfOps& operator=(const HalfOps&) = delete;
  MPI_Op get(DType t, ReduceOp op) const;  // t: bf16 or f16

 private:
  MPI_Op ops_[2][2];  // [bf16, f16][Sum, Max]
};

// bf16/fp16 (src, dst: n elements) to and from an fp32 scratch; narrowing rounds to nearest even.
void widen_to_fp32(ConstTypedPtr src, float* dst, size_t n);
void narrow_from_fp32(const float* src, TypedPtr dst, size_t n);

// The ThroughFp32 way, on a bf16 or fp16 buffer (n, counts in elements).
void all_reduce_through_fp32(MPI_Comm c, TypedPtr buf, size_t n, ReduceOp op);
void reduce_scatter_through_fp32(MPI_Comm c, ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts,
                                 int rank);

// dst[i] = dst[i] (op) src[i] for i < n, both of dtype t (fp32, bf16, fp16); a bf16/fp16 Sum is
// computed in fp32 and rounded to nearest even. The combine of the half-precision MPI user ops and of
// the ring all-reduce (one definition, so every path rounds alike).
void combine_into(void* dst, const void* src, size_t n, DType t, ReduceOp op);

}  // namespace loom::parallel
