#include "runner/sample_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <vector>

#include "engine/autograd.h"
#include "engine/random.h"
#include "engine/safetensors.h"
#include "runner/wiring.h"
#include "workloads/models.h"

namespace quartet::runner {
namespace {

// The next byte after `logits` (one per byte value): the argmax at temperature 0, else a
// draw from softmax(logits / temperature) over the top_k largest (all when 0).
int next_byte(std::vector<float> logits, double temperature, int64_t top_k, engine::Generator& gen) {
  const auto best = std::max_element(logits.begin(), logits.end());
  if (temperature == 0.0) return static_cast<int>(best - logits.begin());
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const size_t kept = top_k > 0 ? static_cast<size_t>(top_k) : order.size();
  std::vector<double> weight(kept);
  double total = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    weight[i] = std::exp((static_cast<double>(logits[order[i]]) - *best) / temperature);
    total += weight[i];
  }
  double u = static_cast<double>(gen.uniform(0.0f, 1.0f)) * total;
  for (size_t i = 0; i < kept; ++i) {
    if (u < weight[i]) return order[i];
    u -= weight[i];
  }
  return order[kept - 1];
}

}  // namespace

CLI::App* add_sample_command(CLI::App& app, SampleOptions& o) {
  CLI::App* cmd = app.add_subcommand("sample", "Generate text with a trained language model (gpt-mini)");
  cmd->add_option("weights", o.weights, "weights (safetensors), e.g. a text-lm run's final.safetensors")->required();
  cmd->add_option("--prompt", o.prompt, "the text to continue; default a newline");
  cmd->add_option("--model", o.model, "the model the weights are for; default: the run folder's, else gpt-mini");
  cmd->add_option("--length", o.length, "bytes to generate, 1 to 100000; default 200");
  cmd->add_option("--temperature", o.temperature,
                  "softmax temperature, 0 to 100 (0: always the likeliest byte); default 0.8");
  cmd->add_option("--top-k", o.top_k, "draw among the k likeliest bytes only, 0 to 256 (0: all); default 0");
  cmd->add_option("--seed", o.seed, "seed of the draws; default 1");
  return cmd;
}

int sample_main(const SampleOptions& o) {
  std::string where;
  std::string model = o.model;
  if (model.empty()) {
    const std::optional<workloads::WorkloadConfig> recorded = recorded_workload(o.weights, where);
    model = recorded ? recorded->model : "gpt-mini";
  }
  try {
    workloads::check_model_name(model);
  } catch (const std::invalid_argument& e) {
    throw InputError(std::string("--model: ") + e.what());
  }
  if (workloads::model_task(model) != workloads::kLanguageModel)
    throw InputError("--model: " + model + " is not a language model (it is " + workloads::model_task(model) +
                     "); use gpt-mini");
  if (o.length < 1 || o.length > 100000)
    throw InputError("--length: expected 1 to 100000 bytes, got " + std::to_string(o.length));
  if (!(o.temperature >= 0.0 && o.temperature <= 100.0))
    throw InputError("--temperature: expected 0 to 100, got " + std::to_string(o.temperature));
  if (o.top_k < 0 || o.top_k > 256) throw InputError("--top-k: expected 0 to 256, got " + std::to_string(o.top_k));

  std::shared_ptr<engine::Model> m = workloads::make_model(model, 0);
  try {
    engine::load_state_dict(*m, engine::read_safetensors(o.weights).tensors);
  } catch (const engine::StateDictMismatch& e) {
    throw InputError(o.weights + ": " + e.brief() + "; are these weights of model " + model +
                     "? (--model; quartet list models)");
  } catch (const std::exception& e) {
    throw InputError(e.what());  // the reader names the file
  }
  m->eval();
  engine::NoGradScope no_grad;
  const int64_t context = workloads::model_info(model).input_shape.at(0);
  std::string text = o.prompt.empty() ? std::string("\n") : o.prompt;
  engine::Generator gen(o.seed);
  std::cout << text << std::flush;
  for (int64_t i = 0; i < o.length; ++i) {
    const size_t n = std::min(text.size(), static_cast<size_t>(context));
    std::vector<float> window(n);
    for (size_t j = 0; j < n; ++j) window[j] = static_cast<float>(static_cast<unsigned char>(text[text.size() - n + j]));
    const engine::Tensor logits = m->forward(engine::Tensor::from_vector({1, static_cast<int64_t>(n)}, window));
    const std::vector<float> all = logits.to_vector();
    const int64_t vocab = logits.size(1);
    const std::vector<float> last(all.end() - vocab, all.end());
    const char c = static_cast<char>(next_byte(last, o.temperature, o.top_k, gen));
    text.push_back(c);
    std::cout << c;
  }
  std::cout << "\n" << std::flush;
  return 0;
}

}  // namespace quartet::runner
