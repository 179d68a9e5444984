#pragma once

// Seeded, platform-independent sample order. Every regime draws its epochs from here, so
// `single`, `accumulate` and `data_parallel` see the same samples in the same order.

#include <cstdint>
#include <vector>

namespace quartet::workloads {

// A permutation of [0, n) for one epoch: Fisher-Yates driven by engine::Generator::below,
// seeded from (seed, epoch) through splitmix64, so each epoch is an independent shuffle
// and the result is the same on every platform. requires n >= 0, epoch >= 0.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

// `indices` in the order of epoch_permutation(indices.size(), seed, epoch): a client
// shuffling its own partition.
std::vector<int64_t> shuffled(const std::vector<int64_t>& indices, uint64_t seed, int64_t epoch);

// Full batches an epoch of n samples gives; the last partial batch is dropped.
// requires batch_size >= 1.
int64_t batches_per_epoch(int64_t n, int64_t batch_size);

// Cuts `order` into consecutive batches of batch_size, dropping the last partial batch.
std::vector<std::vector<int64_t>> make_batches(const std::vector<int64_t>& order, int64_t batch_size);

// The batch_index-th batch of `order` (no copy of the others). requires
// 0 <= batch_index < batches_per_epoch(order.size(), batch_size).
std::vector<int64_t> batch_at(const std::vector<int64_t>& order, int64_t batch_size, int64_t batch_index);

// splitmix64's finaliser: a well-mixed 64-bit value for deriving seeds.
uint64_t mix_seed(uint64_t x);

}  // namespace quartet::workloads
