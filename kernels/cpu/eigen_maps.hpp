#pragma once
// Row-major Eigen views over raw buffers. With EIGEN_USE_BLAS (set by the build) every
// matrix product below is an OpenBLAS ?gemm call.
#include <Eigen/Dense>

namespace loom::cpu {

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MatMap = Eigen::Map<RowMat<T>>;
template <typename T>
using ConstMatMap = Eigen::Map<const RowMat<T>>;
// A matrix whose rows are `stride` elements apart (one head's slice of a (T, 3C) qkv block).
template <typename T>
using StridedMap = Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using ConstStridedMap = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>;

}  // namespace loom::cpu
