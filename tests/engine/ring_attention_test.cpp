// ring_attention over rings of threads, each holding some positions of every sequence,
// against causal_attention over the whole sequences (itself checked against finite
// differences, PyTorch and a double-precision reference in transformer_test.cpp):
// outputs and the gradients of q, k and v, for contiguous and load-balanced splits.
#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

using testing::random_tensor;
using testing::throws_invalid_argument;

// The mailboxes of a ring of threads: a shift copies its block into the next rank's box
// at once and waits for its own box's oldest block; boxes keep their blocks in order.
struct Mailboxes {
  explicit Mailboxes(int n) : boxes(static_cast<size_t>(n)) {}
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<std::deque<std::vector<float>>> boxes;
};

class ThreadRing final : public AttentionRing {
 public:
  ThreadRing(Mailboxes& boxes, int rank, const std::vector<std::vector<int64_t>>& positions)
      : boxes_(boxes), rank_(rank), positions_(positions) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(positions_.size()); }
  const std::vector<int64_t>& positions(int rank) const override { return positions_.at(static_cast<size_t>(rank)); }
  std::function<void()> shift(const Tensor& send, Tensor& recv) override {
    {
      std::lock_guard lock(boxes_.mutex);
      boxes_.boxes[static_cast<size_t>((rank_ + 1) % size())].push_back(send.to_vector());
    }
    boxes_.arrived.notify_all();
    ++shifts;
    return [this, &recv] {
      std::unique_lock lock(boxes_.mutex);
      auto& mine = boxes_.boxes[static_cast<size_t>(rank_)];
      boxes_.arrived.wait(lock, [&] { return !mine.empty(); });
      recv.copy_from_host(mine.front());
      mine.pop_front();
    };
  }
  int shifts = 0;

 private:
  Mailboxes& boxes_;
  int rank_;
  std::vector<std::vector<int64_t>> positions_;
};

// Rank i of n holds chunks i and 2n - 1 - i of 2n (causal work balanced), or chunk i of n.
std::vector<std::vector<int64_t>> split_positions(int64_t t, int n, bool balanced) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(n));
  const int64_t chunks = balanced ? 2 * n : n, chunk = t / chunks;
  for (int r = 0; r < n; ++r) {
    std::vector<int64_t> mine{r};
    if (balanced) mine.push_back(2 * n - 1 - r);
    for (int64_t c : mine)
      for (int64_t p = c * chunk; p < (c + 1) * chunk; ++p) out[static_cast<size_t>(r)].push_back(p);
  }
  return out;
}

// x (B, T, F) at `positions` of dim 1: (B, L, F).
Tensor take(const Tensor& x, const std::vector<int64_t>& positions) {
  const int64_t b = x.size(0), t = x.size(1), f = x.size(2), l = static_cast<int64_t>(positions.size());
  const std::vector<float> all = x.to_vector();
  std::vector<float> out;
  for (int64_t i = 0; i < b; ++i)
    for (int64_t p : positions) out.insert(out.end(), all.begin() + (i * t + p) * f, all.begin() + (i * t + p + 1) * f);
  return Tensor::from_vector({b, l, f}, out);
}

// part (B, L, F) written into whole (B, T, F) at `positions`.
void put(std::vector<float>& whole, const Shape& shape, const Tensor& part, const std::vector<int64_t>& positions) {
  const int64_t t = shape[1], f = shape[2], l = static_cast<int64_t>(positions.size());
  const std::vector<float> p = part.to_vector();
  for (int64_t i = 0; i < shape[0]; ++i)
    for (int64_t j = 0; j < l; ++j)
      std::copy_n(p.begin() + (i * l + j) * f, f, whole.begin() + (i * t + positions[static_cast<size_t>(j)]) * f);
}

struct Result {
  std::vector<float> out, dq, dk, dv;
};

// causal_attention's output and input gradients for the upstream gradient g.
Result whole_attention(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& g, int64_t heads) {
  Tensor q = q0.clone(), k = k0.clone(), v = v0.clone();
  for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
  Tensor y = causal_attention(q, k, v, heads);
  y.backward(g);
  return {y.to_vector(), q.grad().to_vector(), k.grad().to_vector(), v.grad().to_vector()};
}

// The same over a ring of n threads, each rank's rows put back in place.
Result ring_of_threads(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& g, int64_t heads, int n,
                       bool balanced, std::vector<int>* shifts = nullptr) {
  const Shape shape = q0.shape();
  const auto positions = split_positions(shape[1], n, balanced);
  Result r{std::vector<float>(q0.numel()), std::vector<float>(q0.numel()), std::vector<float>(q0.numel()),
           std::vector<float>(q0.numel())};
  Mailboxes boxes(n);
  std::mutex mutex;
  std::exception_ptr error;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank)
    threads.emplace_back([&, rank] {
      try {
        const std::vector<int64_t>& mine = positions[static_cast<size_t>(rank)];
        ThreadRing ring(boxes, rank, positions);
        Tensor q = take(q0, mine), k = take(k0, mine), v = take(v0, mine);
        for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
        Tensor y = ring_attention(q, k, v, heads, ring);
        y.backward(take(g, mine));
        std::lock_guard lock(mutex);
        put(r.out, shape, y, mine);
        put(r.dq, shape, q.grad(), mine);
        put(r.dk, shape, k.grad(), mine);
        put(r.dv, shape, v.grad(), mine);
        if (shifts) shifts->push_back(ring.shifts);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!error) error = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  return r;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  EXPECT_LT(worst, tol) << what;
}

// The blocks' products and merges add in another order than one (T, T) softmax does.
constexpr float kTol = 2e-5f;

void expect_same(const Result& got, const Result& want) {
  expect_close(got.out, want.out, kTol, "out");
  expect_close(got.dq, want.dq, kTol, "dq");
  expect_close(got.dk, want.dk, kTol, "dk");
  expect_close(got.dv, want.dv, kTol, "dv");
}

TEST(RingAttention, EqualsCausalAttentionOverTheWholeSequence) {
  // T = 96: row blocks of 32 cut through the chunks of every split below.
  const int64_t B = 2, T = 96, H = 2, D = 8;
  const Shape s{B, T, H * D};
  const Tensor q = random_tensor(s, 1, -2.0f, 2.0f), k = random_tensor(s, 2, -2.0f, 2.0f), v = random_tensor(s, 3),
               g = random_tensor(s, 4);
  const Result want = whole_attention(q, k, v, g, H);
  for (int n : {1, 2, 3, 4})
    for (bool balanced : {false, true}) {
      SCOPED_TRACE(std::to_string(n) + (balanced ? " ranks, balanced" : " ranks, contiguous"));
      expect_same(ring_of_threads(q, k, v, g, H, n, balanced), want);
    }
}

TEST(RingAttention, LongerChunksThanABlockEqualCausalAttention) {
  const int64_t B = 1, T = 160, H = 4, D = 4;
  const Shape s{B, T, H * D};
  const Tensor q = random_tensor(s, 5, -3.0f, 3.0f), k = random_tensor(s, 6, -3.0f, 3.0f), v = random_tensor(s, 7),
               g = random_tensor(s, 8);
  const Result want = whole_attention(q, k, v, g, H);
  expect_same(ring_of_threads(q, k, v, g, H, 2, true), want);  // chunks of 40
}

// A ring of one sends its block to itself: its gradients against finite differences.
TEST(RingAttention, OneRankGradientsMatchFiniteDifferences) {
  Mailboxes boxes(1);
  ThreadRing ring(boxes, 0, {{0, 1, 2, 3, 4}});
  auto fn = [&](const TensorList& in) { return ring_attention(in[0], in[1], in[2], 2, ring); };
  EXPECT_TRUE(testing::gradcheck(fn, {testing::param({2, 5, 6}, 1), testing::param({2, 5, 6}, 2),
                                      testing::param({2, 5, 6}, 3)}));
}

// Forward: n - 1 shifts of the key/value blocks; backward: n - 1 again and n of the
// gradients behind them.
TEST(RingAttention, ShiftsEachBlockRoundTheRingOnceEachWay) {
  const Shape s{1, 16, 4};
  const Tensor q = random_tensor(s, 1), k = random_tensor(s, 2), v = random_tensor(s, 3), g = random_tensor(s, 4);
  for (int n : {1, 2, 4}) {
    std::vector<int> shifts;
    ring_of_threads(q, k, v, g, 2, n, true, &shifts);
    ASSERT_EQ(shifts.size(), static_cast<size_t>(n));
    for (int count : shifts) EXPECT_EQ(count, 3 * n - 2) << n << " ranks";
  }
}

TEST(RingAttention, RejectsRanksHoldingOtherCountsAndBadShapes) {
  Mailboxes boxes(2);
  const Tensor q = random_tensor({1, 4, 4}, 1);
  ThreadRing uneven(boxes, 0, {{0, 1, 2, 3}, {4, 5, 6}});
  EXPECT_TRUE(throws_invalid_argument([&] { ring_attention(q, q, q, 2, uneven); },
                                      {"ring_attention", "process 1", "holds 3 positions", "as many as q has (4)"}));
  ThreadRing unsorted(boxes, 0, {{0, 1, 2, 3}, {7, 6, 5, 4}});
  EXPECT_TRUE(throws_invalid_argument([&] { ring_attention(q, q, q, 2, unsorted); }, {"ascending"}));
  ThreadRing ring(boxes, 0, {{0, 1, 2, 3}, {4, 5, 6, 7}});
  EXPECT_TRUE(throws_invalid_argument([&] { ring_attention(q, q, q, 3, ring); },
                                      {"ring_attention", "divide the last dim 4"}));
}

}  // namespace
}  // namespace quartet::engine
