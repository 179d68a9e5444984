// quartet-bench-step: one SGD step of a model from one safetensors file, for
// bench/torch_step_parity.py's float64 PyTorch reference. The file holds the model's
// parameters by name and the batch as "batch.x" (the model's input) and "batch.y" (class
// indices as floats, one per row of the model's output); the output file holds the
// parameters after the step, each parameter's gradient as "grad.<name>", "loss", and
// "logits" (the model's output on the batch, before the step).
//
//   quartet-bench-step case.safetensors --model gpt-mini --lr 0.1 --out after.safetensors
//   quartet-bench-step case.safetensors --model onnx:resnet18.onnx ...  (bench/onnx_resnet18_parity.py)
//
// With --forward it takes no step: it writes the model's logits for batch.x in eval mode
// (BatchNorm's running statistics, no Dropout) as "logits"; the file may then leave out
// batch.y and any of the model's tensors, which keep the model's own (an imported
// model's: its file's initializers). bench/onnx_readback.py holds them to onnxruntime's.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/optim.h"
#include "engine/safetensors.h"
#include "workloads/models.h"

namespace {

using namespace quartet;

int run(const std::string& in, const std::string& model_name, float lr, const std::string& out, bool forward) {
  std::map<std::string, engine::Tensor> file;
  for (auto& [name, t] : engine::read_safetensors(in).tensors) file[name] = t;
  for (const char* key : {"batch.x", "batch.y"})
    if (!file.count(key) && !(forward && std::string(key) == "batch.y"))
      throw std::invalid_argument(in + " has no \"" + key + "\"");
  std::shared_ptr<engine::Model> model = workloads::make_model(model_name, 0);
  engine::NamedTensors weights;
  // An imported ONNX model's tensors are "<stage>.<initializer>"; the file may name the
  // initializers alone, as PyTorch's state_dict does.
  for (const auto& [name, t] : model->state_dict()) {
    const std::string bare = name.substr(name.find('.') + 1);
    if (!file.count(name) && !file.count(bare)) {
      if (forward) {
        weights.emplace_back(name, t);
        continue;
      }
      throw std::invalid_argument(in + " has no \"" + name + "\"");
    }
    weights.emplace_back(name, file.at(file.count(name) ? name : bare));
  }
  engine::load_state_dict(*model, weights);
  if (forward) {
    model->eval();
    engine::NoGradScope no_grad;
    const engine::Tensor logits = model->forward(file.at("batch.x"));
    engine::save_safetensors(out, {{"logits", logits}});
    std::printf("logits %s\n", engine::shape_str(logits.shape()).c_str());
    return 0;
  }
  std::vector<int32_t> labels;
  for (float v : file.at("batch.y").to_vector()) labels.push_back(static_cast<int32_t>(v));

  engine::SGD sgd(model->parameters(), {.lr = lr});
  sgd.zero_grad();
  const engine::Tensor logits = model->forward(file.at("batch.x"));
  engine::Tensor loss = engine::cross_entropy(logits, labels);
  loss.backward();
  engine::NamedTensors result;
  for (const auto& [name, p] : model->named_parameters()) result.emplace_back("grad." + name, p.grad().clone());
  sgd.step();
  for (const auto& [name, p] : model->named_parameters()) result.emplace_back(name, p);
  result.emplace_back("loss", loss.detach());
  result.emplace_back("logits", logits.detach());
  engine::save_safetensors(out, result);
  std::printf("loss %.9g\n", static_cast<double>(loss.item()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"One SGD step of a model from one safetensors file (weights and batch); writes the result"};
  std::string in, model = "gpt-mini", out;
  float lr = 0.1f;
  bool forward = false;
  app.add_option("case", in, "safetensors: the parameters by name, batch.x, batch.y")->required();
  app.add_option("--model", model, "the model the parameters are for")->capture_default_str();
  app.add_option("--lr", lr, "SGD learning rate (no momentum)")->capture_default_str();
  app.add_option("--out", out, "where to write the parameters after the step, their gradients and the loss")
      ->required();
  app.add_flag("--forward", forward,
               "no step: write the logits of batch.x in eval mode as \"logits\" (tensors the file lacks keep the "
               "model's own)");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(in, model, lr, out, forward);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quartet-bench-step: %s\n", e.what());
    return 2;
  }
}
