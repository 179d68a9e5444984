#include "workloads/sampler.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "engine/random.h"

namespace quartet::workloads {

uint64_t mix_seed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  if (n < 0) throw std::invalid_argument("epoch_permutation: n must be >= 0, got " + std::to_string(n));
  if (epoch < 0) throw std::invalid_argument("epoch_permutation: epoch must be >= 0, got " + std::to_string(epoch));
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  engine::Generator gen(mix_seed(mix_seed(seed) ^ static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(gen.below(static_cast<uint64_t>(i) + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

std::vector<int64_t> shuffled(const std::vector<int64_t>& indices, uint64_t seed, int64_t epoch) {
  const std::vector<int64_t> p = epoch_permutation(static_cast<int64_t>(indices.size()), seed, epoch);
  std::vector<int64_t> out(indices.size());
  for (size_t i = 0; i < p.size(); ++i) out[i] = indices[static_cast<size_t>(p[i])];
  return out;
}

int64_t batches_per_epoch(int64_t n, int64_t batch_size) {
  if (batch_size < 1) throw std::invalid_argument("batch size must be >= 1, got " + std::to_string(batch_size));
  if (n < 0) throw std::invalid_argument("sample count must be >= 0, got " + std::to_string(n));
  return n / batch_size;
}

std::vector<int64_t> batch_at(const std::vector<int64_t>& order, int64_t batch_size, int64_t batch_index) {
  const int64_t batches = batches_per_epoch(static_cast<int64_t>(order.size()), batch_size);
  if (batch_index < 0 || batch_index >= batches)
    throw std::out_of_range("batch " + std::to_string(batch_index) + " outside [0, " + std::to_string(batches) +
                            ") for " + std::to_string(order.size()) + " samples in batches of " +
                            std::to_string(batch_size));
  const auto begin = order.begin() + batch_index * batch_size;
  return std::vector<int64_t>(begin, begin + batch_size);
}

std::vector<std::vector<int64_t>> make_batches(const std::vector<int64_t>& order, int64_t batch_size) {
  const int64_t batches = batches_per_epoch(static_cast<int64_t>(order.size()), batch_size);
  std::vector<std::vector<int64_t>> out;
  out.reserve(static_cast<size_t>(batches));
  for (int64_t b = 0; b < batches; ++b) out.push_back(batch_at(order, batch_size, b));
  return out;
}

}  // namespace quartet::workloads
