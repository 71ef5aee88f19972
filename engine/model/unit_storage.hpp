#pragma once
// Where a Gpt's weights and gradients live when the model does not hold them whole: ZeRO-2 keeps
// only a shard of the gradients, ZeRO-3 a shard of the parameters too (engine/optim/sharded_state.hpp
// implements this). The model asks for one unit (param_table.hpp's ParamUnit: the embedding, a
// block, the final LayerNorm) at a time, just before it uses it, and says when it is done with it;
// the storage gathers, frees, prefetches and reduces. Unit indices are into
// param_units(model.table()); every pointer addresses the unit's first element (flat offset
// unit.begin).
#include <cstddef>
#include <functional>

#include "kernels/dtype.hpp"

namespace loom {

class UnitStorage {
 public:
  virtual ~UnitStorage() = default;

  // Weights (ZeRO-3). False: the model holds its weights flat and never calls the two below.
  virtual bool holds_weights() const = 0;
  // The unit's weights in the compute dtype, complete, until release_weights(unit). `next` is the
  // unit the model will ask for after this one (-1: unknown): the storage may fetch it meanwhile.
  virtual TypedPtr acquire_weights(int unit, int next) = 0;
  virtual void release_weights(int unit) = 0;
  // The fp32 master parameters, in the flat layout: sets elements [offset, offset + n) from host
  // `src` (this rank keeps what it owns of them), or reads all of them a piece at a time, in
  // ascending order: `use(begin, n, data)` gets elements [begin, begin + n) in host memory
  // (collective over the storage's data-parallel group; no rank holds more than a piece at once).
  virtual void set_master(size_t offset, size_t n, const float* src) = 0;
  virtual void visit_master(const std::function<void(size_t begin, size_t n, const float* data)>& use) = 0;

  // Gradients (ZeRO-2 and 3). The unit's fp32 gradient buffer for this micro-batch's backward,
  // zeroed on first use (the same buffer until grads_done(unit)); backward accumulates into it.
  virtual float* acquire_grads(int unit) = 0;
  // The unit's gradients of this micro-batch are final: the storage reduces them (and may reuse
  // the buffer once that is done).
  virtual void grads_done(int unit) = 0;
};

}  // namespace loom
