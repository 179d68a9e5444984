#include "workloads/text.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "workloads/models.h"
#include "workloads/sampler.h"

namespace quartet::workloads {
namespace {

namespace fs = std::filesystem;

std::string no_corpus(const std::string& dir, const std::string& why) {
  return "text corpus " + dir + " " + why +
         "; install Debian's fortunes package (apt-get install fortunes; scripts/setup does) or name a folder of "
         "fortune files (data_dir)";
}

// The fortune files of `dir`, sorted by name.
std::vector<fs::path> text_files(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw std::runtime_error(no_corpus(dir, "does not exist"));
  fs::directory_iterator entries(dir, ec);
  if (ec) throw std::runtime_error(dir + ": cannot list the folder: " + ec.message());
  std::vector<fs::path> out;
  for (const fs::directory_entry& e : entries) {
    const fs::path& p = e.path();
    if (e.is_symlink(ec) || !e.is_regular_file(ec) || p.extension() == ".dat" || p.extension() == ".u8") continue;
    out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  if (out.empty()) throw std::runtime_error(no_corpus(dir, "holds no text files"));
  // Sizes are checked before anything is read: a 6 GB (sparse) file is refused, not read.
  uintmax_t total = 0;
  for (const fs::path& p : out) {
    const uintmax_t bytes = fs::file_size(p, ec);
    if (ec) throw std::runtime_error(p.string() + ": cannot read its size: " + ec.message());
    if (bytes > static_cast<uintmax_t>(kMaxTextFileBytes))
      throw std::runtime_error(p.string() + ": " + std::to_string(bytes) + " bytes; allowed: at most " +
                               std::to_string(kMaxTextFileBytes) + " bytes a file (" +
                               std::to_string(kMaxTextFileBytes >> 20) + " MiB) in a text-lm data_dir");
    total += bytes;
    if (total > static_cast<uintmax_t>(kMaxTextCorpusBytes))
      throw std::runtime_error(dir + ": its text files hold more than " + std::to_string(kMaxTextCorpusBytes) +
                               " bytes; allowed: at most that many (" + std::to_string(kMaxTextCorpusBytes >> 20) +
                               " MiB) in a text-lm data_dir");
  }
  return out;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw std::runtime_error(path.string() + ": cannot read the file");
  return std::move(text).str();
}

// Each fortune of `text` with its "%" line; text after the last "%" line is a last fortune.
std::vector<std::string_view> fortunes(std::string_view text) {
  std::vector<std::string_view> out;
  size_t begin = 0;
  for (size_t line = 0; line < text.size();) {
    const size_t newline = text.find('\n', line);
    const size_t end = newline == std::string_view::npos ? text.size() : newline + 1;
    const std::string_view l = text.substr(line, end - line);
    if (l == "%\n" || l == "%") {
      out.push_back(text.substr(begin, end - begin));
      begin = end;
    }
    line = end;
  }
  if (begin < text.size()) out.push_back(text.substr(begin));
  return out;
}

// Windows of T + 1 bytes starting at multiples of T that fit in `bytes` bytes.
int64_t window_count(size_t bytes, int64_t context) {
  return static_cast<int64_t>(bytes) > context ? (static_cast<int64_t>(bytes) - 1) / context : 0;
}

int64_t limited(int64_t size, int64_t limit, const char* field) {
  if (limit <= 0) return size;
  if (limit > size)
    throw std::invalid_argument(std::string(field) + ": " + std::to_string(limit) + " windows asked, the split has " +
                                std::to_string(size));
  return limit;
}

// Window `offset` of `text` as sample k of `b`: x bytes [offset, offset + T), y the byte after each.
void put_window(const std::string& text, int64_t offset, int64_t context, int64_t k, Batch& b) {
  float* x = b.x.data() + k * context;
  int32_t* y = b.y.data() + k * context;
  for (int64_t t = 0; t < context; ++t) {
    x[t] = static_cast<float>(static_cast<unsigned char>(text[static_cast<size_t>(offset + t)]));
    y[t] = static_cast<unsigned char>(text[static_cast<size_t>(offset + t + 1)]);
  }
}

Batch empty_batch(int64_t n, int64_t context) {
  Batch b;
  b.x = engine::Tensor::empty({n, context});
  b.y.resize(static_cast<size_t>(n * context));
  return b;
}

}  // namespace

TextCorpus read_text_corpus(const std::string& dir, uint64_t seed) {
  TextCorpus corpus;
  engine::Generator gen(mix_seed(seed));
  for (const fs::path& path : text_files(dir)) {
    const std::string text = read_bytes(path);
    corpus.sources.push_back(path.filename().string());
    std::string& train = corpus.train.emplace_back();
    for (std::string_view f : fortunes(text))
      (gen.uniform(0.0f, 1.0f) < kValidationFraction ? corpus.validation : train).append(f);
  }
  return corpus;
}

TextLmWorkload::TextLmWorkload(const WorkloadConfig& config, int64_t context)
    : context_(context), default_model_(config.model.empty() ? "gpt-mini" : config.model) {
  if (context < 1)
    throw std::invalid_argument("workload text-lm: the context must be >= 1 byte, got " + std::to_string(context));
  const std::string dir = config.data_dir.empty() ? kFortunesDir : config.data_dir;
  corpus_ = read_text_corpus(dir, config.seed);
  for (size_t s = 0; s < corpus_.train.size(); ++s)
    for (int64_t i = 0; i < window_count(corpus_.train[s].size(), context_); ++i)
      windows_.push_back({static_cast<int32_t>(s), i * context_});
  test_windows_ = window_count(corpus_.validation.size(), context_);
  const std::string bytes = std::to_string(context_ + 1) + " bytes";
  if (windows_.empty()) throw std::runtime_error(dir + ": no source's training text holds " + bytes);
  if (test_windows_ == 0) throw std::runtime_error(dir + ": the validation text holds fewer than " + bytes);
  // A limit keeps windows spread evenly over the split, so every source stays in it.
  const int64_t train_total = train_size();
  const int64_t train_kept = limited(train_total, config.train_limit, "train_samples");
  std::vector<Window> kept;
  for (int64_t k = 0; k < train_kept; ++k) kept.push_back(windows_[static_cast<size_t>(k * train_total / train_kept)]);
  windows_ = std::move(kept);
  test_total_ = test_windows_;
  test_windows_ = limited(test_windows_, config.test_limit, "test_samples");
}

Batch TextLmWorkload::train_batch(const std::vector<int64_t>& indices, int64_t) const {
  Batch b = empty_batch(static_cast<int64_t>(indices.size()), context_);
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    if (i < 0 || i >= train_size())
      throw std::out_of_range("workload " + name_ + ": sample " + std::to_string(i) + " outside [0, " +
                              std::to_string(train_size()) + ")");
    const Window& w = windows_[static_cast<size_t>(i)];
    put_window(corpus_.train[static_cast<size_t>(w.source)], w.offset, context_, static_cast<int64_t>(k), b);
  }
  return b;
}

std::string TextLmWorkload::train_window(int64_t i) const {
  const Window& w = windows_.at(static_cast<size_t>(i));
  return corpus_.train[static_cast<size_t>(w.source)].substr(static_cast<size_t>(w.offset),
                                                             static_cast<size_t>(context_ + 1));
}

std::string TextLmWorkload::test_window(int64_t i) const {
  if (i < 0 || i >= test_windows_) throw std::out_of_range("test window " + std::to_string(i) + " outside [0, " +
                                                           std::to_string(test_windows_) + ")");
  return corpus_.validation.substr(static_cast<size_t>(test_offset(i)), static_cast<size_t>(context_ + 1));
}

std::vector<int32_t> TextLmWorkload::sample_classes() const {
  std::vector<int32_t> out;
  out.reserve(windows_.size());
  for (const Window& w : windows_) out.push_back(w.source);
  return out;
}

std::vector<std::string> TextLmWorkload::model_names() const { return workload_model_names(name_); }

std::shared_ptr<engine::Model> TextLmWorkload::make_model(const std::string& model_name, uint64_t seed) const {
  check_workload_model(name_, model_name);
  const int64_t context = model_info(model_name).input_shape.at(0);
  if (context != context_)
    throw std::invalid_argument("model " + model_name + " reads " + std::to_string(context) +
                                " bytes; this text-lm workload was made for " + std::to_string(context_));
  return workloads::make_model(model_name, seed);
}

engine::Tensor TextLmWorkload::loss(const engine::Tensor& logits, const std::vector<int32_t>& labels) const {
  return engine::cross_entropy(logits, labels);
}

double TextLmWorkload::evaluate(engine::Model& model, int64_t batch) const {
  if (batch < 1) throw std::invalid_argument("evaluation batch: expected >= 1, got " + std::to_string(batch));
  const bool was_training = model.training();
  model.eval();
  engine::NoGradScope no_grad;
  double nats = 0.0;  // summed over every predicted byte
  try {
    for (int64_t begin = 0; begin < test_windows_; begin += batch) {
      const int64_t n = std::min(batch, test_windows_ - begin);
      Batch b = empty_batch(n, context_);
      for (int64_t k = 0; k < n; ++k)
        put_window(corpus_.validation, test_offset(begin + k), context_, k, b);
      const engine::Tensor logits = model.forward(b.x.to(model.device())).to(engine::Device::cpu());
      nats += static_cast<double>(engine::cross_entropy(logits, b.y).item()) * static_cast<double>(n * context_);
    }
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  return nats / static_cast<double>(test_windows_ * context_) / std::log(2.0);
}

std::unique_ptr<Workload> make_text_workload(const WorkloadConfig& config) {
  WorkloadConfig c = config;
  if (c.model.empty()) c.model = "gpt-mini";
  check_workload_model("text-lm", c.model);  // before the corpus is read
  return std::make_unique<TextLmWorkload>(c, model_info(c.model).input_shape.at(0));
}

}  // namespace quartet::workloads
