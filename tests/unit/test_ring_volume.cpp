// The ring model of parallel/comm_volume.hpp for groups of 1 to 8: summed over a group, each
// collective's wire bytes are the ring's traffic (2(p-1) B for all-reduce, (p-1) B for the
// others) for every size, even or not; a group of one moves nothing; and CommVolume's arithmetic.
#include <catch2/catch.hpp>

#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/bucket_plan.hpp"
#include "parallel/comm_volume.hpp"

using namespace loom::parallel;

TEST_CASE("ring wire bytes summed over a group are the ring's traffic") {
  for (int p = 1; p <= 8; ++p) {
    for (size_t n : {size_t(0), size_t(1), size_t(5), size_t(64), size_t(1001)}) {
      for (size_t elem : {size_t(2), size_t(4)}) {
        const uint64_t B = n * elem;
        const std::vector<size_t> even = even_counts(n, p);
        std::vector<size_t> uneven(static_cast<size_t>(p));
        for (int r = 0; r < p; ++r) uneven[size_t(r)] = r == 1 ? 0 : n + size_t(r);  // rank 1's part empty
        const uint64_t U = std::accumulate(uneven.begin(), uneven.end(), uint64_t(0)) * elem;
        uint64_t ar = 0, rs = 0, ag = 0, ag_uneven = 0, bc = 0;
        for (int r = 0; r < p; ++r) {
          ar += ring_all_reduce_bytes(n, elem, p, r);
          rs += ring_reduce_scatter_bytes(even, elem, r);
          ag += ring_all_gather_bytes(even, elem, r);
          ag_uneven += ring_all_gather_bytes(uneven, elem, r);
          bc += ring_broadcast_bytes(n, elem, p, r, p / 2);
          // Per rank: 2(p-1)/p of the payload, rounded to this rank's part.
          CHECK(ring_all_reduce_bytes(n, elem, p, r) == 2 * (n - even[size_t(r)]) * elem);
        }
        CHECK(ar == 2 * uint64_t(p - 1) * B);
        CHECK(rs == uint64_t(p - 1) * B);
        CHECK(ag == uint64_t(p - 1) * B);
        CHECK(ag_uneven == uint64_t(p - 1) * U);
        CHECK(bc == uint64_t(p - 1) * B);
      }
    }
  }
  CHECK(ring_all_reduce_bytes(1000, 4, 1, 0) == 0);
  CHECK(ring_reduce_scatter_bytes({1000}, 4, 0) == 0);
  CHECK(ring_broadcast_bytes(1000, 4, 1, 0, 0) == 0);
  CHECK_THROWS_AS(ring_all_reduce_bytes(10, 4, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(ring_all_gather_bytes({1, 2}, 4, 2), std::invalid_argument);
}

TEST_CASE("CommVolume adds, subtracts and formats") {
  CommVolume a, b;
  a.payload[size_t(CommKind::ReduceScatter)] = 4000000;
  a.wire[size_t(CommKind::ReduceScatter)] = 2000000;
  a.calls[size_t(CommKind::ReduceScatter)] = 3;
  b.payload[size_t(CommKind::SendRecv)] = 10;
  b.calls[size_t(CommKind::SendRecv)] = 1;
  const CommVolume s = a + b;
  CHECK(s.total_payload() == 4000010);
  CHECK(s.total_wire() == 2000000);
  CHECK(s.total_calls() == 4);
  CHECK(s - b == a);
  CHECK(s - a - b == CommVolume{});
  CHECK(format_comm_volume(a) == "reduce_scatter 4.00 MB (3 calls, wire 2.00 MB); wire 2.00 MB");
  CHECK(format_comm_volume(CommVolume{}) == "none");
  CHECK(std::string(comm_kind_name(CommKind::SendRecv)) == "send_recv");
}
