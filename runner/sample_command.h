#pragma once

// `quartet sample W.safetensors --prompt TEXT`: text from a trained language model
// (gpt-mini on text-lm), one byte at a time: the model reads the last `context` bytes,
// and the next byte is drawn from its softmax at a temperature, over the top k values.

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace quartet::runner {

struct SampleOptions {
  std::string weights;       // safetensors of `model`
  std::string prompt;        // the text generation continues; empty: a newline
  std::string model;         // empty: the run folder's, else gpt-mini
  int64_t length = 200;      // bytes to generate
  double temperature = 0.8;  // 0: always the likeliest byte
  int64_t top_k = 0;         // draw among the k likeliest bytes only; 0: all
  uint64_t seed = 1;         // the draws'
};

// Adds the `sample` subcommand to `app`, bound to `options`.
CLI::App* add_sample_command(CLI::App& app, SampleOptions& options);

// Prints the prompt and what follows it, then a newline. Returns 0. throws InputError
// (exit code 2) naming the argument for a model that is not a language model, weights
// that do not load into it, a length outside [1, 100000], a temperature outside [0, 100]
// or a top k outside [0, 256].
int sample_main(const SampleOptions& options);

}  // namespace quartet::runner
