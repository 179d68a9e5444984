#pragma once

// Models read from ONNX files: the model name "onnx:PATH" (workloads/models.h) builds the
// graph in PATH with its initial weights. Built only where the ONNX library is found
// (QUARTET_ONNX); elsewhere every call throws std::invalid_argument saying so.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/model.h"

namespace quartet::workloads::onnx {

inline constexpr const char* kPrefix = "onnx:";
inline bool is_onnx_model(const std::string& name) { return name.rfind(kPrefix, 0) == 0; }
bool available();                             // this build reads ONNX files

struct GraphInfo {
  engine::Shape input_shape;  // per sample, as declared: (C, H, W); -1 where symbolic
  int64_t num_classes = 0;    // the last size of the (N, classes) output
  std::vector<std::string> stages;
  int64_t parameters = 0;
};

// Reads PATH, checks it with the ONNX checker and compiles every node; throws
// std::invalid_argument naming the file, the node, its op and what is wrong (an
// unknown op with the supported ones) for a graph this importer does not run, or one
// that is not one float input (N, ...) to one (N, classes) output.
// Stages: the graph is cut wherever one tensor alone crosses (in the nodes' order) and
// no initializer is read on both sides; each stage is named after the node that makes
// the tensor it hands on. Parameters are "<stage>.<initializer name>": the float
// initializers read as weights, biases and norm scales and shifts, with their values
// from the file; running statistics are buffers. `seed` seeds Dropout's masks.
std::shared_ptr<engine::Model> import_model(const std::string& path, uint64_t seed);
GraphInfo inspect_model(const std::string& path);

// Writes the graph of `source` (an ONNX file) to `out` with `trained`'s values in place
// of its initializers: the parameters and buffers of import_model(source), by name. The
// file written passes the ONNX checker. throws std::invalid_argument naming the file
// for a model whose tensors do not match the graph's, or a file that cannot be written.
void export_model(const std::string& source, const engine::Model& trained, const std::string& out);

}  // namespace quartet::workloads::onnx
