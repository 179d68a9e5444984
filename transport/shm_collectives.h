#pragma once

// Collectives for ranks on one host through a POSIX shared-memory segment: each rank
// copies its piece of a buffer into its own slot, and every rank reads the slots it
// needs once all have arrived. No sockets, no I/O thread; a rank waiting for its peers
// sleeps on a futex in the segment. This is what NCCL's SHM transport and MPI's
// shared-memory collectives do within a node; Gloo has no such transport.
//
// Every rank adds the slots in rank order, so all ranks get bitwise the same sums, for
// any number of ranks. Ranks rendezvous through a gloo::rendezvous::Store, as Gloo's do:
// rank 0 creates the segment and publishes its name; it is unlinked as soon as every
// rank has mapped it, so nothing is left in /dev/shm once the processes are gone.

#include <chrono>
#include <cstddef>
#include <memory>

#include "transport/collectives.h"

namespace gloo::rendezvous {
class Store;
}

namespace quartet::transport {

struct ShmOptions {
  // Rendezvous and every wait for a peer fail past this. A peer that exits or leaves the
  // group is noticed within about 50 ms whatever this is.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  // Bytes of each rank's slot: buffers larger than this go through in pieces.
  size_t slot_bytes = size_t{4} << 20;
};

// The timeout from QUARTET_GLOO_TIMEOUT_S, which bounds every CPU backend's waits (see
// gloo_options_from_environment); the rest of `base` is kept.
ShmOptions shm_options_from_environment(ShmOptions base = {});

// Maps rank `rank` of `size` into the group's segment; returns once this rank is
// attached (its peers may still be attaching: the first operation waits for them).
// Throws std::runtime_error naming the rank when a peer runs on another host (or in
// another IPC namespace), the rendezvous times out, or the segment cannot be made.
std::unique_ptr<Collectives> make_shm_collectives(gloo::rendezvous::Store& store, int rank, int size,
                                                  const ShmOptions& options = {});

}  // namespace quartet::transport
