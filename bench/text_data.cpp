// quartet-bench-text-data: the text-lm workload's windows and sample order as Quartet's
// single arm reads them, for bench/torch_text_lm.py to train PyTorch on the same bytes in
// the same order. Writes, into --out:
//   train.u8   the training windows, T + 1 bytes each, in sample index order
//   val.u8     the evaluated validation windows, T + 1 bytes each
//   order.i64  for each epoch, the permutation of the sample indices the loop takes its
//              batches from (workloads/sampler.h's epoch_permutation), little-endian int64

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

#include "workloads/sampler.h"
#include "workloads/text.h"

namespace {

using namespace quartet;

void write(const std::filesystem::path& path, const void* data, size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Writes text-lm's training and validation windows and its epochs' sample order"};
  workloads::WorkloadConfig c;
  c.name = "text-lm";
  c.model = "gpt-mini";
  int64_t epochs = 1;
  std::string out;
  app.add_option("--data-dir", c.data_dir, "the corpus (default: Debian's fortunes)");
  app.add_option("--seed", c.seed, "the experiment's seed: the split's and the order's")->capture_default_str();
  app.add_option("--train-samples", c.train_limit, "train_samples (0: all)")->capture_default_str();
  app.add_option("--test-samples", c.test_limit, "test_samples (0: all)")->capture_default_str();
  app.add_option("--epochs", epochs, "epochs of sample order to write")->capture_default_str();
  app.add_option("--out", out, "folder to write into")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    const auto wl = workloads::make_text_workload(c);
    const auto& text = dynamic_cast<const workloads::TextLmWorkload&>(*wl);
    std::filesystem::create_directories(out);
    std::string train, val;
    for (int64_t i = 0; i < text.train_size(); ++i) train += text.train_window(i);
    for (int64_t i = 0; i < text.test_size(); ++i) val += text.test_window(i);
    write(std::filesystem::path(out) / "train.u8", train.data(), train.size());
    write(std::filesystem::path(out) / "val.u8", val.data(), val.size());
    std::vector<int64_t> order;
    for (int64_t e = 0; e < epochs; ++e)
      for (int64_t i : workloads::epoch_permutation(text.train_size(), c.seed, e)) order.push_back(i);
    write(std::filesystem::path(out) / "order.i64", order.data(), order.size() * sizeof(int64_t));
    std::printf("%lld training windows, %lld validation windows of %lld bytes\n",
                static_cast<long long>(text.train_size()), static_cast<long long>(text.test_size()),
                static_cast<long long>(text.context() + 1));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quartet-bench-text-data: %s\n", e.what());
    return 2;
  }
}
