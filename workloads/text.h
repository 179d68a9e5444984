#pragma once

// Byte-level language modelling on a folder of fortune files (Debian's fortunes package):
// a model reads T bytes and predicts each next one.
//
// Corpus: every regular file of the folder (indexes *.dat, symlinks *.u8 and subfolders
// skipped), in name order; file k is source k. A file's fortunes are separated by lines
// holding only "%"; a fortune is its text and its "%" line. Each fortune goes to
// validation with probability kValidationFraction, one draw per fortune in corpus order
// from an engine::Generator of the seed, so a seed always gives the same split. A
// source's training text is its training fortunes in file order; the validation text is
// every source's validation fortunes, in corpus order.
//
// Training sample i is a window of T + 1 bytes of one source's training text, starting at
// a multiple of T: T input bytes and the T bytes after each of them. Windows never cross
// sources, and a sample's class (for partitioners) is its source, so label skew, shards
// and Dirichlet partitions give each federated client text from its own few sources.
// Metric: bits per byte ("bpc") over every such window of the validation text: the mean
// cross-entropy of the next byte, in nats, over ln 2. Lower is better.

#include <cstdint>
#include <string>
#include <vector>

#include "workloads/workload.h"

namespace quartet::workloads {

// Where Debian's fortunes package installs its fortune files.
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";
inline constexpr double kValidationFraction = 0.1;
// What a data_dir may hold, checked from the files' sizes before any is read: the corpus
// is held in memory (Debian's fortunes are about 2.5 MB in all).
inline constexpr int64_t kMaxTextFileBytes = int64_t{64} << 20;
inline constexpr int64_t kMaxTextCorpusBytes = int64_t{256} << 20;

struct TextCorpus {
  std::vector<std::string> sources;   // file names, sorted
  std::vector<std::string> train;     // per source: its training fortunes
  std::string validation;             // every source's validation fortunes
};

// The corpus of `dir` split by `seed` as described above.
// throws std::runtime_error saying how to get the fortunes package for a missing folder
// or one without text files, and naming the file for an unreadable one, a file over
// kMaxTextFileBytes or files over kMaxTextCorpusBytes in all (before reading any).
TextCorpus read_text_corpus(const std::string& dir, uint64_t seed);

class TextLmWorkload : public Workload {
 public:
  // The corpus of config.data_dir (empty: kFortunesDir) split by config.seed, in windows
  // of `context` (T) input bytes; config.train_limit / test_limit windows when those are
  // > 0, spread evenly over each split (window k of n kept from total: k * total / n), so
  // a limited run still reads every source. The default model is config.model, or "gpt-mini" when empty; it is
  // not checked here (make_workload does).
  // throws std::invalid_argument for context < 1 or a limit past a split's windows, and
  // std::runtime_error as read_text_corpus does, or when a split has no window of T + 1
  // bytes.
  TextLmWorkload(const WorkloadConfig& config, int64_t context);

  const std::string& name() const override { return name_; }
  int64_t context() const { return context_; }
  int64_t train_size() const override { return static_cast<int64_t>(windows_.size()); }
  int64_t test_size() const override { return test_windows_; }
  // x: (N, T) byte values as floats; y: N * T next bytes, sample-major. `epoch` is unused.
  Batch train_batch(const std::vector<int64_t>& indices, int64_t epoch) const override;
  int64_t labels_per_sample() const override { return context_; }
  int label_classes() const override { return 256; }
  // The source (file index) of each training window.
  std::vector<int32_t> sample_classes() const override;
  int num_classes() const override { return static_cast<int>(corpus_.sources.size()); }
  std::vector<std::string> model_names() const override;
  const std::string& default_model() const override { return default_model_; }
  using Workload::make_model;
  // throws std::invalid_argument for a model that is not a language model or reads
  // another context than this workload's.
  std::shared_ptr<engine::Model> make_model(const std::string& model_name, uint64_t seed) const override;
  // logits (N * T, 256), labels N * T.
  engine::Tensor loss(const engine::Tensor& logits, const std::vector<int32_t>& labels) const override;
  std::string metric_name() const override { return "bpc"; }
  // batch: windows per forward pass.
  double evaluate(engine::Model& model, int64_t batch) const override;

  const TextCorpus& corpus() const { return corpus_; }
  // The T + 1 bytes of training window i, and of evaluated validation window i.
  std::string train_window(int64_t i) const;
  std::string test_window(int64_t i) const;

 private:
  struct Window {
    int32_t source;
    int64_t offset;
  };
  std::string name_ = "text-lm";
  TextCorpus corpus_;
  int64_t context_;
  std::string default_model_;
  std::vector<Window> windows_;
  // Where evaluated window i starts in the validation text.
  int64_t test_offset(int64_t i) const { return i * test_total_ / test_windows_ * context_; }

  int64_t test_windows_ = 0;  // evaluated: test_total_ or the test limit, spread evenly
  int64_t test_total_ = 0;    // the validation text's windows
};

// "text-lm" from config: T is model_info(config.model).input_shape[0] (default model
// gpt-mini). throws std::invalid_argument for a model that is not a language model.
std::unique_ptr<Workload> make_text_workload(const WorkloadConfig& config);

}  // namespace quartet::workloads
