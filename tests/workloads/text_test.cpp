#include "workloads/text.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include "engine/ops.h"
#include "engine/random.h"
#include "tests/temp_folder.h"
#include "workloads/models.h"

namespace quartet::workloads {
namespace {

constexpr int64_t kContext = 8;

// Each source's fortunes use their own letters, so a window's bytes say its source.
const std::map<std::string, std::string> kAlphabets = {
    {"alpha", "abcdefghi"}, {"beta", "jklmnopqr"}, {"gamma", "ABCDEFGHI"}};

// Fortune n of a source: unique within it, every fortune with its "%" line.
std::string fortune(const std::string& letters, int n) {
  return std::string(static_cast<size_t>(3 + n % 5), letters[static_cast<size_t>(n % 9)]) +
         letters[static_cast<size_t>(n / 9 % 9)] + "\n%\n";
}

// The fortunes of a text every fortune of which ends in a "%" line.
std::vector<std::string> split_fortunes(const std::string& text) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (size_t at; (at = text.find("\n%\n", begin)) != std::string::npos; begin = at + 3)
    out.push_back(text.substr(begin, at + 3 - begin));
  EXPECT_EQ(begin, text.size()) << "text after the last fortune";
  return out;
}

class TextFolder : public test_util::TempFolderTest {
 protected:
  TextFolder() : TempFolderTest("text_lm") {}

  void SetUp() override {
    TempFolderTest::SetUp();
    for (const auto& [name, letters] : kAlphabets) {
      std::ofstream out(dir_ / name, std::ios::binary);
      for (int n = 0; n < 60; ++n) out << fortune(letters, n);
    }
    // What the package ships beside the text, and a folder: none of them is a source.
    std::ofstream(dir_ / "alpha.dat", std::ios::binary) << std::string("\0\0\0\2zz", 6);
    std::filesystem::create_symlink("alpha", dir_ / "alpha.u8");
    std::filesystem::create_directory(dir_ / "more");
    std::ofstream(dir_ / "more" / "delta", std::ios::binary) << "zzzz\n%\n";
  }

  WorkloadConfig config(uint64_t seed = 1) const {
    WorkloadConfig c;
    c.name = "text-lm";
    c.data_dir = dir_.string();
    c.seed = seed;
    return c;
  }
};

TEST_F(TextFolder, SourcesAreTheTextFilesByName) {
  const TextLmWorkload w(config(), kContext);
  EXPECT_EQ(w.corpus().sources, (std::vector<std::string>{"alpha", "beta", "gamma"}));
  EXPECT_EQ(w.num_classes(), 3);
}

TEST_F(TextFolder, SplitIsTheSameForASeedAndDiffersAcrossSeeds) {
  const TextCorpus a = read_text_corpus(dir_.string(), 1), b = read_text_corpus(dir_.string(), 1);
  const TextCorpus c = read_text_corpus(dir_.string(), 2);
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.validation, b.validation);
  EXPECT_NE(a.validation, c.validation);
}

TEST_F(TextFolder, EveryFortuneIsInExactlyOneSplit) {
  const TextCorpus corpus = read_text_corpus(dir_.string(), 3);
  std::multiset<std::string> seen;
  for (const std::string& t : corpus.train)
    for (const std::string& f : split_fortunes(t)) seen.insert(f);
  const std::vector<std::string> held_out = split_fortunes(corpus.validation);
  seen.insert(held_out.begin(), held_out.end());
  std::multiset<std::string> all;
  for (const auto& [name, letters] : kAlphabets)
    for (int n = 0; n < 60; ++n) all.insert(fortune(letters, n));
  EXPECT_EQ(seen, all);
  // 180 fortunes at 0.1: some, not most, are held out.
  EXPECT_GT(held_out.size(), 3u);
  EXPECT_LT(held_out.size(), 45u);
}

TEST_F(TextFolder, SourceTrainingTextKeepsFileOrder) {
  const TextCorpus corpus = read_text_corpus(dir_.string(), 1);
  const std::vector<std::string> train = split_fortunes(corpus.train[1]);  // beta
  std::vector<std::string> expected;
  for (int n = 0; n < 60; ++n)
    if (std::find(train.begin(), train.end(), fortune("jklmnopqr", n)) != train.end())
      expected.push_back(fortune("jklmnopqr", n));
  EXPECT_EQ(train, expected);
}

TEST_F(TextFolder, WindowsAreEachSourceTextInStepsOfTheContext) {
  const TextLmWorkload w(config(), kContext);
  int64_t expected = 0;
  for (const std::string& t : w.corpus().train) expected += (static_cast<int64_t>(t.size()) - 1) / kContext;
  ASSERT_EQ(w.train_size(), expected);
  std::vector<int64_t> next(3, 0);  // each source's next window
  const std::vector<int32_t> sources = w.sample_classes();
  for (int64_t i = 0; i < w.train_size(); ++i) {
    const auto s = static_cast<size_t>(sources[static_cast<size_t>(i)]);
    EXPECT_EQ(w.train_window(i), w.corpus().train[s].substr(static_cast<size_t>(next[s] * kContext), kContext + 1));
    ++next[s];
  }
}

TEST_F(TextFolder, BatchIsTheWindowsBytesAndTheNextBytes) {
  const TextLmWorkload w(config(), kContext);
  const std::vector<int64_t> indices = {5, 0, w.train_size() - 1};
  const Batch b = w.train_batch(indices, 0);
  ASSERT_EQ(b.x.shape(), (engine::Shape{3, kContext}));
  ASSERT_EQ(b.y.size(), static_cast<size_t>(3 * kContext));
  EXPECT_EQ(w.labels_per_sample(), kContext);
  EXPECT_EQ(w.label_classes(), 256);
  for (size_t k = 0; k < indices.size(); ++k) {
    const std::string window = w.train_window(indices[k]);
    for (int64_t t = 0; t < kContext; ++t) {
      EXPECT_EQ(b.x.data()[k * kContext + static_cast<size_t>(t)],
                static_cast<float>(static_cast<unsigned char>(window[static_cast<size_t>(t)])));
      EXPECT_EQ(b.y[k * kContext + static_cast<size_t>(t)], static_cast<unsigned char>(window[static_cast<size_t>(t) + 1]));
    }
  }
  EXPECT_THROW(w.train_batch({w.train_size()}, 0), std::out_of_range);
}

TEST_F(TextFolder, SampleClassIsTheFileTheWindowCameFrom) {
  const TextLmWorkload w(config(), kContext);
  const std::vector<int32_t> sources = w.sample_classes();
  ASSERT_EQ(static_cast<int64_t>(sources.size()), w.train_size());
  std::set<int32_t> kinds(sources.begin(), sources.end());
  EXPECT_EQ(kinds, (std::set<int32_t>{0, 1, 2}));
  for (int64_t i = 0; i < w.train_size(); ++i) {
    const std::string& letters = kAlphabets.at(w.corpus().sources[static_cast<size_t>(sources[static_cast<size_t>(i)])]);
    for (char ch : w.train_window(i))
      EXPECT_TRUE(ch == '%' || ch == '\n' || letters.find(ch) != std::string::npos) << "window " << i;
  }
}

// One shard a client over three sources of about equal size: each client's text comes
// (almost) all from one source, a different one for each client.
TEST_F(TextFolder, ShardsGiveClientsTextBySource) {
  const TextLmWorkload w(config(), kContext);
  PartitionSpec spec;
  spec.kind = "shards";
  spec.clients = 3;
  spec.shards_per_client = 1;
  const Partition p = make_partition(spec, w);
  ASSERT_EQ(p.num_classes, 3);
  std::set<int64_t> dominant;
  for (const std::vector<int64_t>& h : p.histograms) {
    const auto top = std::max_element(h.begin(), h.end());
    EXPECT_GE(*top * 10, std::accumulate(h.begin(), h.end(), int64_t{0}) * 8);
    dominant.insert(top - h.begin());
  }
  EXPECT_EQ(dominant.size(), 3u);
}

// Window k of n kept from a split of `total`: k * total / n, so every source stays in.
TEST_F(TextFolder, LimitsKeepWindowsSpreadOverTheSplit) {
  const TextLmWorkload all(config(), kContext);
  WorkloadConfig c = config();
  c.train_limit = 7;
  c.test_limit = 2;
  const TextLmWorkload some(c, kContext);
  EXPECT_EQ(some.train_size(), 7);
  EXPECT_EQ(some.test_size(), 2);
  for (int64_t k = 0; k < 7; ++k) EXPECT_EQ(some.train_window(k), all.train_window(k * all.train_size() / 7));
  const std::vector<int32_t> sources = some.sample_classes();
  EXPECT_EQ(std::set<int32_t>(sources.begin(), sources.end()).size(), 3u) << "every source keeps windows";
  const std::string& val = all.corpus().validation;
  for (int64_t k = 0; k < 2; ++k)
    EXPECT_EQ(some.test_window(k), val.substr(static_cast<size_t>(k * all.test_size() / 2 * kContext),
                                              static_cast<size_t>(kContext + 1)));
  c.test_limit = all.test_size() + 1;
  try {
    TextLmWorkload too_many(c, kContext);
    FAIL() << "a test limit past the validation windows was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("test_samples"), std::string::npos) << e.what();
  }
}

// x (N, T) -> (N * T, 1) -> Linear(1, 256): logits from the byte values alone.
class ByteLinear : public engine::Module {
 public:
  explicit ByteLinear(engine::Generator& gen) : linear_(std::make_shared<engine::Linear>(1, 256, gen)) {
    register_module("linear", linear_);
  }
  engine::Tensor forward(const engine::Tensor& x) override {
    return linear_->forward(engine::reshape(x, {x.size(0) * x.size(1), 1}));
  }
  engine::Linear& linear() { return *linear_; }

 private:
  std::shared_ptr<engine::Linear> linear_;
};

TEST_F(TextFolder, ZeroLogitsScoreEightBitsPerByte) {
  const TextLmWorkload w(config(), kContext);
  engine::Generator gen(1);
  auto stage = std::make_shared<ByteLinear>(gen);
  stage->linear().weight.fill_(0.0f);
  stage->linear().bias.fill_(0.0f);
  engine::Model model;
  model.add_stage("bytes", stage);
  model.train();
  EXPECT_EQ(w.metric_name(), "bpc");
  EXPECT_NEAR(w.evaluate(model, 3), 8.0, 1e-5);
  EXPECT_TRUE(model.training()) << "evaluate left the model in eval mode";
  const Batch b = w.train_batch({0, 1}, 0);
  EXPECT_NEAR(w.loss(model.forward(b.x), b.y).item(), std::log(256.0), 1e-5);
}

TEST_F(TextFolder, BpcFallsWhenTheModelFavoursTheTextsBytes) {
  const TextLmWorkload w(config(), kContext);
  engine::Generator gen(1);
  auto stage = std::make_shared<ByteLinear>(gen);
  stage->linear().weight.fill_(0.0f);
  stage->linear().bias.fill_(0.0f);
  for (char ch : std::string("%\n") + kAlphabets.at("alpha") + kAlphabets.at("beta") + kAlphabets.at("gamma"))
    stage->linear().bias.data()[static_cast<unsigned char>(ch)] = 5.0f;
  engine::Model model;
  model.add_stage("bytes", stage);
  EXPECT_LT(w.evaluate(model, 4), 6.0);
}

TEST_F(TextFolder, MissingFolderSaysToInstallFortunes) {
  WorkloadConfig c = config();
  c.data_dir = (dir_ / "absent").string();
  try {
    TextLmWorkload w(c, kContext);
    FAIL() << "a missing folder was accepted";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("absent does not exist"), std::string::npos) << what;
    EXPECT_NE(what.find("apt-get install fortunes"), std::string::npos) << what;
  }
}

TEST_F(TextFolder, FolderWithoutTextFilesSaysToInstallFortunes) {
  WorkloadConfig c = config();
  c.data_dir = (dir_ / "more").string();
  std::filesystem::remove(dir_ / "more" / "delta");
  std::ofstream(dir_ / "more" / "delta.dat") << "index";
  try {
    TextLmWorkload w(c, kContext);
    FAIL() << "a folder without text files was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("holds no text files"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fortunes"), std::string::npos) << e.what();
  }
}

TEST(TextLm, IsAWorkloadThatTakesLanguageModels) {
  const std::vector<std::string> names = workload_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "text-lm"), names.end());
  for (const std::string& m : workload_model_names("text-lm")) EXPECT_EQ(model_task(m), kLanguageModel) << m;
  WorkloadConfig c;
  c.name = "text-lm";
  c.model = "cnn";
  try {
    make_workload(c);
    FAIL() << "text-lm took an image model";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit workload text-lm"), std::string::npos) << e.what();
  }
}

TEST(TextLm, BitsPerCharacterAreBetterLower) {
  EXPECT_TRUE(higher_is_better("accuracy"));
  EXPECT_TRUE(higher_is_better("dice"));
  EXPECT_FALSE(higher_is_better("bpc"));
  EXPECT_EQ(workload_metric("text-lm"), "bpc");
  EXPECT_EQ(workload_metric("fashion-mnist"), "accuracy");
  EXPECT_EQ(workload_metric("phantom-ct-seg"), "dice");
  EXPECT_THROW(workload_metric("cifar"), std::invalid_argument);
}

TEST(TextLm, FortunesPackageSplitsIntoSourcesAndWindows) {
  if (!std::filesystem::is_directory(kFortunesDir))
    GTEST_SKIP() << kFortunesDir << " is absent; apt-get install fortunes to run this test";
  WorkloadConfig c;
  c.name = "text-lm";
  c.test_limit = 40;
  const TextLmWorkload w(c, 64);
  EXPECT_GE(w.num_classes(), 10);
  const auto& sources = w.corpus().sources;
  EXPECT_NE(std::find(sources.begin(), sources.end(), "computers"), sources.end());
  for (const std::string& s : sources) EXPECT_FALSE(s.ends_with(".dat") || s.ends_with(".u8")) << s;
  EXPECT_GT(w.train_size(), 10000);  // about 2.5 MB in windows of 64 bytes, 90 % of it
  EXPECT_EQ(w.test_size(), 40);
  engine::Generator gen(1);
  auto stage = std::make_shared<ByteLinear>(gen);
  stage->linear().weight.fill_(0.0f);
  stage->linear().bias.fill_(0.0f);
  engine::Model model;
  model.add_stage("bytes", stage);
  EXPECT_NEAR(w.evaluate(model, 16), 8.0, 1e-5);
}

}  // namespace
}  // namespace quartet::workloads
