#pragma once

// Collectives on CPU over Gloo's TCP transport. Ranks rendezvous through a
// gloo::rendezvous::Store: the coordinator's (CoordinatorStore, for processes) or a
// MemoryStore (ranks as threads of one process, the Gloo test style).

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "transport/collectives.h"

namespace gloo::rendezvous {
class Store;
}

namespace quartet::transport {

struct GlooOptions {
  // The address this rank's Gloo device listens on and announces to its peers. Another
  // host's ranks must be able to reach it. `interface` (e.g. "eth0"), when set, wins.
  std::string hostname = "127.0.0.1";
  std::string interface;
  // Rendezvous and every operation fail past this (a peer gone or stuck).
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  // The ring all-reduce (of more than 1 MiB) and reduce-scatter move segments of at most
  // this many bytes, two in flight, so the reduction of one overlaps the transfer of the
  // next. Gloo's default
  // is 1 MiB; 4 MiB means fewer hand-offs between the caller and Gloo's event loop: on
  // 127.0.0.1 (2 ranks, 2 shared cores) busbw at 16-64 MB went from about 1.0 to 1.1 GB/s
  // (medians of 18 interleaved runs). Larger gained nothing where net.core.wmem_max is 4 MiB.
  size_t max_segment_bytes = size_t{4} << 20;
};

// Connects rank `rank` of `size` to its peers through `store` (which only needs to
// outlive this call). Every rank calls it with the same size and a store under the same
// prefix; it returns once every rank is connected. Throws std::runtime_error naming the rank when the rendezvous fails or times out.
std::unique_ptr<Collectives> make_gloo_collectives(gloo::rendezvous::Store& store, int rank, int size,
                                                   const GlooOptions& options = {});

// Environment overrides for roles: QUARTET_GLOO_HOST, QUARTET_GLOO_IFACE,
// QUARTET_GLOO_TIMEOUT_S, QUARTET_GLOO_SEGMENT_BYTES. Unset variables keep `base`.
GlooOptions gloo_options_from_environment(GlooOptions base = {});

}  // namespace quartet::transport
