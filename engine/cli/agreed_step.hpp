#pragma once
// One start-up step of a multi-rank command (eval, sample), run on every rank and agreed on: if
// it threw on any rank, rank 0 prints the agreed error once ("loom CMD: error: rank R: ...") and
// every rank gets false, so the command exits 2 on all of them. Steps that may fail on some ranks
// only (a node that does not see a file) go before the next collective call in one of these, or
// the ranks that passed would wait in that call for the one that left.
#include <cstdio>
#include <exception>
#include <utility>

#include "parallel/mpi_world.hpp"

namespace loom::cli {

template <typename Fn>
bool agreed_step(const parallel::MpiWorld& world, const char* command, Fn&& fn) {
  try {
    parallel::agreed(world.comm(), std::forward<Fn>(fn));
    return true;
  } catch (const std::exception& e) {
    if (world.rank() == 0) std::fprintf(stderr, "loom %s: error: %s\n", command, e.what());
    return false;
  }
}

}  // namespace loom::cli
