#pragma once

// Ranks as threads of one process over an in-memory store (the Gloo test style), on any
// CPU backend: "gloo", "shm", or "hierarchical" (ranks spread over two simulated hosts).

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/collectives.h"
#include "transport/gloo_collectives.h"
#include "transport/hierarchical_collectives.h"
#include "transport/shm_collectives.h"
#include "transport/store.h"

namespace quartet::transport::testing {

inline constexpr std::chrono::milliseconds kRanksTimeout{60000};

// piece_bytes: Gloo's max_segment_bytes or the shm slot size; 0 keeps the default.
inline std::unique_ptr<Collectives> connect(const std::string& backend, gloo::rendezvous::Store& store, int rank,
                                            int ranks, size_t piece_bytes = 0,
                                            std::chrono::milliseconds timeout = kRanksTimeout) {
  ShmOptions shm;
  shm.timeout = timeout;
  if (piece_bytes) shm.slot_bytes = piece_bytes;
  GlooOptions gloo;
  gloo.timeout = timeout;
  if (piece_bytes) gloo.max_segment_bytes = piece_bytes;
  if (backend == "shm") return make_shm_collectives(store, rank, ranks, shm);
  if (backend == "hierarchical")
    return make_hierarchical_collectives(store, rank, ranks, "host-" + std::to_string(rank % 2), {shm, gloo});
  return make_gloo_collectives(store, rank, ranks, gloo);
}

// Runs fn(collectives) on `ranks` threads, each its own rank; rethrows the first error.
inline void run_ranks(const std::string& backend, int ranks, const std::function<void(Collectives&)>& fn,
                      size_t piece_bytes = 0) {
  MemoryStore store;
  std::vector<std::thread> threads;
  std::mutex error_mutex;
  std::exception_ptr error;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto c = connect(backend, store, r, ranks, piece_bytes);
        fn(*c);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace quartet::transport::testing
