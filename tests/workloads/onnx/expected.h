#pragma once

// What PyTorch computed on the test models of tests/data/onnx/ (make_fixtures.py writes a
// SequenceProto of named tensors beside each), and how close Quartet comes to it.
#include <gtest/gtest.h>
#include <onnx/onnx-data_pb.h>
#include <onnx/defs/tensor_proto_util.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/ops.h"
#include "engine/tensor.h"

namespace quartet::workloads::onnx::testing {

// The tensors of tests/data/onnx/<file>, by name.
inline std::map<std::string, engine::Tensor> expected(const std::string& file) {
  std::ifstream in(std::string(QUARTET_TEST_DATA_DIR) + "/onnx/" + file, std::ios::binary);
  ::onnx::SequenceProto seq;
  EXPECT_TRUE(seq.ParseFromIstream(&in)) << file;
  std::map<std::string, engine::Tensor> out;
  for (const auto& t : seq.tensor_values()) {
    const auto v = ::onnx::ParseData<float>(&t);
    out[t.name()] = engine::Tensor::from_vector(engine::Shape(t.dims().begin(), t.dims().end()), {v.begin(), v.end()});
  }
  return out;
}

// The largest |a - b| / (1 + |b|) over two tensors of one shape.
inline double max_rel_diff(const engine::Tensor& a, const engine::Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const auto va = a.to_vector(), vb = b.to_vector();
  double worst = 0;
  for (size_t i = 0; i < va.size() && i < vb.size(); ++i)
    worst = std::max(worst, std::abs(double(va[i]) - vb[i]) / (1.0 + std::abs(double(vb[i]))));
  return worst;
}

// Trains `model` one SGD step (lr 0.1, cross-entropy) on e's "input" and "labels" and
// expects each parameter after it within 1e-5 of PyTorch's "step.<initializer name>" (a
// parameter is "<stage>.<initializer name>"). Returns how many parameters it checked.
inline int expect_one_sgd_step(engine::Model& model, std::map<std::string, engine::Tensor>& e) {
  model.train();
  std::vector<int32_t> labels;
  for (float v : e["labels"].to_vector()) labels.push_back(static_cast<int32_t>(v));
  engine::cross_entropy(model.forward(e["input"]), labels).backward();
  int checked = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    const auto want = e.find("step." + name.substr(name.find('.') + 1));
    if (want == e.end()) {
      ADD_FAILURE() << name << " has no step in the expected tensors";
      continue;
    }
    const std::vector<float> w = p.to_vector(), g = p.grad().to_vector();
    std::vector<float> stepped(w.size());
    for (size_t i = 0; i < w.size(); ++i) stepped[i] = w[i] - 0.1f * g[i];
    EXPECT_LT(max_rel_diff(engine::Tensor::from_vector(p.shape(), stepped), want->second), 1e-5) << name;
    ++checked;
  }
  return checked;
}

}  // namespace quartet::workloads::onnx::testing
