// gpt-moe's experts spread over 2 and 4 ranks (threads over shm and Gloo): each rank
// holds E/N experts and its own samples, tokens travel by all-to-all. Against one process
// holding every expert and every sample: the same outputs, each expert's gradient on the
// rank that holds it, and the other parameters' gradients summed over the ranks.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "tests/transport/ranks_as_threads.h"
#include "trainers/expert_parallel/exchange.h"
#include "workloads/gpt.h"

namespace quartet::trainers {
namespace {

using engine::Tensor;

constexpr int64_t kSamples = 4, kPositions = 8;

workloads::GptConfig small() { return {.layers = 2, .heads = 2, .width = 16, .context = kPositions, .vocab = 32}; }

std::vector<float> sample_bytes(int64_t first, int64_t count) {
  std::vector<float> v;
  for (int64_t s = first; s < first + count; ++s)
    for (int64_t t = 0; t < kPositions; ++t) v.push_back(static_cast<float>((s * 7 + t * 5 + s * t) % 32));
  return v;
}

// Output values and every parameter's gradient of sum(output * w) over samples
// [first, first + count), w fixed per output element of the whole batch.
struct Result {
  std::vector<float> out;
  std::map<std::string, std::vector<float>> grads;
  workloads::MoeStats stats;
};

Result run(const workloads::MoeConfig& moe, int64_t first, int64_t count, engine::RowExchanger* ex) {
  engine::Generator gen(11);
  auto stats = std::make_shared<workloads::MoeStats>();
  auto model = workloads::make_gpt_moe(small(), moe, gen, workloads::ExpertGroup{ex}, stats);
  const Tensor x = Tensor::from_vector({count, kPositions}, sample_bytes(first, count));
  const Tensor y = model->forward(x);
  std::vector<float> w;
  for (int64_t i = first * kPositions * 32; i < (first + count) * kPositions * 32; ++i)
    w.push_back(static_cast<float>(std::sin(0.37 * static_cast<double>(i))));
  engine::sum(engine::mul(y, Tensor::from_vector(y.shape(), w))).backward();
  Result r{y.to_vector(), {}, *stats};
  for (const auto& [name, p] : model->named_parameters()) r.grads[name] = p.grad().to_vector();
  return r;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

class ExpertParallelLayers : public ::testing::TestWithParam<std::tuple<std::string, int, int>> {};

TEST_P(ExpertParallelLayers, EqualOneProcessHoldingEveryExpert) {
  const auto& [backend, ranks, top_k] = GetParam();
  workloads::MoeConfig moe;
  moe.experts = 4;
  moe.top_k = top_k;
  moe.capacity_factor = 0.0;  // nothing dropped: capacity is per rank's tokens
  moe.every = 1;
  moe.aux_loss = 0.0;  // its statistics are per rank's tokens too
  moe.z_loss = 0.0;    // a mean over each rank's tokens: the sum of the ranks' is not the whole's
  const Result whole = run(moe, 0, kSamples, nullptr);
  EXPECT_EQ(whole.stats.dropped, 0);

  std::vector<Result> parts(static_cast<size_t>(ranks));
  transport::testing::run_ranks(backend, ranks, [&](transport::Collectives& c) {
    CollectivesExchanger ex(c);
    const int64_t each = kSamples / ranks;
    parts[static_cast<size_t>(c.rank())] = run(moe, c.rank() * each, each, &ex);
  });

  std::vector<float> out;
  std::map<std::string, std::vector<float>> summed;
  int64_t choices = 0;
  for (const Result& r : parts) {
    out.insert(out.end(), r.out.begin(), r.out.end());
    choices += r.stats.choices;
    for (const auto& [name, g] : r.grads) {
      const bool expert = name.find(".experts.") != std::string::npos;
      auto& s = summed[name];
      if (s.empty()) s.assign(g.size(), 0.0f);
      ASSERT_FALSE(expert && s != std::vector<float>(g.size(), 0.0f)) << name << " held twice";
      for (size_t i = 0; i < g.size(); ++i) s[i] += g[i];
    }
  }
  EXPECT_EQ(choices, whole.stats.choices);
  EXPECT_LT(max_diff(out, whole.out), 1e-5);
  ASSERT_EQ(summed.size(), whole.grads.size());  // every expert held by one rank
  for (const auto& [name, g] : whole.grads) {
    ASSERT_TRUE(summed.count(name)) << name;
    EXPECT_LT(max_diff(summed[name], g), 2e-5) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ExpertParallelLayers,
                         ::testing::Values(std::make_tuple("shm", 2, 2), std::make_tuple("shm", 4, 2),
                                           std::make_tuple("gloo", 2, 1), std::make_tuple("shm", 4, 1)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + std::to_string(std::get<1>(info.param)) + "RanksTop" +
                                  std::to_string(std::get<2>(info.param));
                         });

TEST(ExpertParallelLayersHostile, RanksThatDoNotDivideTheExpertsAreRefused) {
  workloads::MoeConfig moe;
  moe.experts = 4;
  transport::testing::run_ranks("shm", 3, [&](transport::Collectives& c) {
    CollectivesExchanger ex(c);
    engine::Generator gen(1);
    try {
      workloads::make_gpt_moe(small(), moe, gen, workloads::ExpertGroup{&ex});
      ADD_FAILURE() << "no refusal";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("3 expert-parallel ranks do not divide 4 experts"), std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace quartet::trainers
