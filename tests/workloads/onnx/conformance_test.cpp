// ONNX's own node tests (Debian's libonnx-testdata: data/node/ and data/pytorch-converted/)
// through the importer: every case whose graph the importer accepts must give the
// expected outputs within ONNX's backend-test tolerance (rtol 1e-3, atol 1e-7, as
// onnx.backend.test's loader sets them); every other case must be refused with a message
// that names the node and its op. Prints a tally per op: passed, refused, failed.
#include <gtest/gtest.h>
#include <onnx/defs/tensor_proto_util.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "workloads/onnx/fold.h"
#include "workloads/onnx/program.h"

namespace quartet::workloads::onnx {
namespace {

namespace fs = std::filesystem;
using engine::Tensor;

constexpr double kRtol = 1e-3, kAtol = 1e-7;

template <class Message>
bool read_proto(const fs::path& path, Message& m) {
  std::ifstream in(path, std::ios::binary);
  return in && m.ParseFromIstream(&in);
}

struct Tally {
  int passed = 0, refused = 0, failed = 0;
};

// The ops of a graph, as a tally's key: "Conv", or "Mul+Add" for a graph of several.
std::string ops_key(const ::onnx::GraphProto& g) {
  std::vector<std::string> ops;
  for (const auto& n : g.node())
    if (std::find(ops.begin(), ops.end(), n.op_type()) == ops.end()) ops.push_back(n.op_type());
  std::string key;
  for (const auto& o : ops) key += (key.empty() ? "" : "+") + o;
  return key;
}

// The test's inputs that the importer needs known at import (shapes, pads, axes, and any
// non-float tensor) become initializers; the rest stay inputs, in order.
std::vector<::onnx::TensorProto> bind_inputs(::onnx::ModelProto& model, const fs::path& set) {
  auto& g = *model.mutable_graph();
  std::set<std::string> init_names;
  for (const auto& t : g.initializer()) init_names.insert(t.name());
  std::vector<::onnx::TensorProto> runtime;
  ::google::protobuf::RepeatedPtrField<::onnx::ValueInfoProto> kept;
  int k = 0;
  for (const auto& in : g.input()) {
    if (init_names.count(in.name())) {
      *kept.Add() = in;
      continue;
    }
    ::onnx::TensorProto t;
    const fs::path file = set / ("input_" + std::to_string(k++) + ".pb");
    if (!in.type().has_tensor_type() || !read_proto(file, t)) {  // a sequence or optional: the importer refuses it
      *kept.Add() = in;
      continue;
    }
    bool is_static = t.data_type() != ::onnx::TensorProto::FLOAT;
    for (const auto& n : g.node())
      for (int i = 0; i < n.input_size(); ++i)
        if (n.input(i) == in.name() && is_static_input(n.op_type(), i)) is_static = true;
    if (is_static) {
      t.set_name(in.name());
      *g.add_initializer() = t;
      if (model.ir_version() < 4) *kept.Add() = in;  // before IR 4 an initializer is listed as an input too
      continue;
    }
    *kept.Add() = in;
    runtime.push_back(std::move(t));
  }
  g.mutable_input()->Swap(&kept);
  return runtime;
}

// "" when every output matches, else what differs.
std::string compare(const std::vector<Tensor>& got, const fs::path& set) {
  for (size_t k = 0; k < got.size(); ++k) {
    ::onnx::TensorProto t;
    if (!read_proto(set / ("output_" + std::to_string(k) + ".pb"), t)) return "no output_" + std::to_string(k);
    if (t.data_type() != ::onnx::TensorProto::FLOAT) return "expected output of another dtype";
    const engine::Shape shape(t.dims().begin(), t.dims().end());
    if (got[k].shape() != shape && got[k].numel() != engine::shape_numel(shape))
      return "output " + std::to_string(k) + " shape " + engine::shape_str(got[k].shape()) + ", expected " +
             engine::shape_str(shape);
    if (got[k].shape() != shape && !(shape.empty() && got[k].numel() == 1))
      return "output " + std::to_string(k) + " shape " + engine::shape_str(got[k].shape()) + ", expected " +
             engine::shape_str(shape);
    const auto want = ::onnx::ParseData<float>(&t);
    const std::vector<float> have = got[k].to_vector();
    for (size_t i = 0; i < want.size(); ++i) {
      const double a = have[i], e = want[i];
      if (std::isnan(e) && std::isnan(a)) continue;
      if (std::isinf(e) && a == e) continue;
      if (!(std::abs(a - e) <= kAtol + kRtol * std::abs(e)))
        return "output " + std::to_string(k) + " element " + std::to_string(i) + ": " + std::to_string(a) +
               ", expected " + std::to_string(e);
    }
  }
  return "";
}

fs::path testdata() { return fs::path(QUARTET_ONNX_TESTDATA); }

TEST(OnnxConformance, EverySupportedNodeTestPassesAndTheRestAreRefused) {
  if (!fs::is_directory(testdata() / "node"))
    GTEST_SKIP() << "no ONNX test data at " << testdata() << " (Debian: apt install libonnx-testdata)";
  std::map<std::string, Tally> tally;
  std::vector<std::string> failures;
  for (const char* kind : {"node", "pytorch-converted"}) {
    std::vector<fs::path> cases;
    for (const auto& e : fs::directory_iterator(testdata() / kind))
      if (fs::exists(e.path() / "model.onnx")) cases.push_back(e.path());
    std::sort(cases.begin(), cases.end());
    for (const fs::path& dir : cases) {
      ::onnx::ModelProto model;
      ASSERT_TRUE(read_proto(dir / "model.onnx", model)) << dir;
      const std::string key = ops_key(model.graph());
      Tally& t = tally[key];
      const std::string name = dir.filename().string();
      std::vector<fs::path> sets;
      for (const auto& e : fs::directory_iterator(dir))
        if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
      std::sort(sets.begin(), sets.end());
      if (sets.empty()) continue;
      std::string result;
      bool refused = false;
      try {
        for (const fs::path& set : sets) {
          ::onnx::ModelProto bound = model;
          const std::vector<::onnx::TensorProto> protos = bind_inputs(bound, set);
          const Program program(bound);  // refuses what it does not run, before any tensor is made
          std::vector<Tensor> inputs;
          for (const auto& t : protos) {
            const auto v = ::onnx::ParseData<float>(&t);
            inputs.push_back(Tensor::from_vector(engine::Shape(t.dims().begin(), t.dims().end()),
                                                 std::vector<float>(v.begin(), v.end())));
          }
          result = compare(program.run(inputs), set);
          if (!result.empty()) break;
        }
      } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        // The importer's refusals start "onnx:"; an engine op's error is a failure.
        refused = what.rfind("onnx:", 0) == 0;
        if (refused && std::getenv("QUARTET_ONNX_REFUSALS")) std::printf("%s: %s\n", name.c_str(), what.c_str());
        if (!refused) result = std::string("error: ") + what;
      } catch (const std::exception& e) {
        result = std::string("exception: ") + e.what();
      }
      if (refused) ++t.refused;
      else if (result.empty()) ++t.passed;
      else {
        ++t.failed;
        failures.push_back(std::string(kind) + "/" + name + ": " + result);
      }
    }
  }
  int passed = 0, refused = 0, failed = 0;
  std::printf("%-40s %7s %8s %7s\n", "op", "passed", "refused", "failed");
  for (const auto& [op, t] : tally) {
    if (t.passed + t.failed == 0) {
      refused += t.refused;
      continue;  // wholly unsupported: counted below, not listed
    }
    std::printf("%-40s %7d %8d %7d\n", op.c_str(), t.passed, t.refused, t.failed);
    passed += t.passed;
    refused += t.refused;
    failed += t.failed;
  }
  std::printf("all cases: %d passed, %d refused, %d failed\n", passed, refused, failed);
  for (const auto& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(failed, 0);
  EXPECT_GT(passed, 100);
}

// "" when `got` is `want` (integers and bools exactly, floats within the tolerance).
std::string compare_known(const Known& got, const Known& want) {
  if (got.dims != want.dims) return "shape " + engine::shape_str(got.dims) + ", expected " + engine::shape_str(want.dims);
  if (got.dtype != want.dtype)
    return std::string("dtype ") + dtype_name(got.dtype) + ", expected " + dtype_name(want.dtype);
  const bool exact = want.dtype != ::onnx::TensorProto::FLOAT && want.dtype != ::onnx::TensorProto::DOUBLE;
  for (size_t i = 0; i < want.values.size(); ++i) {
    const double a = got.values[i], e = want.values[i];
    if (exact ? a != e : !(std::abs(a - e) <= kAtol + kRtol * std::abs(e)))
      return "element " + std::to_string(i) + ": " + std::to_string(a) + ", expected " + std::to_string(e);
  }
  return "";
}

// The integer nodes (fold.h) on their own node tests: a one-node graph of an op the
// importer evaluates on host values, where an input or the output is not float32 (a
// shape, an index, a mask), evaluated as the importer does at import and at run time.
TEST(OnnxConformance, IntegerNodeTestsEvaluateAsOnnxSays) {
  if (!fs::is_directory(testdata() / "node"))
    GTEST_SKIP() << "no ONNX test data at " << testdata() << " (Debian: apt install libonnx-testdata)";
  std::map<std::string, Tally> tally;
  std::vector<std::string> failures;
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(testdata() / "node"))
    if (fs::exists(e.path() / "model.onnx")) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  for (const fs::path& dir : cases) {
    ::onnx::ModelProto model;
    ASSERT_TRUE(read_proto(dir / "model.onnx", model)) << dir;
    const auto& g = model.graph();
    if (g.node_size() != 1 || !is_foldable(g.node(0).op_type()) || !g.node(0).domain().empty()) continue;
    auto elem = [](const ::onnx::ValueInfoProto& v) { return v.type().tensor_type().elem_type(); };
    bool integer = false;
    for (const auto& v : g.input()) integer = integer || elem(v) != ::onnx::TensorProto::FLOAT;
    for (const auto& v : g.output()) integer = integer || elem(v) != ::onnx::TensorProto::FLOAT;
    if (!integer) continue;
    int64_t opset = 0;
    for (const auto& o : model.opset_import())
      if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
    const ::onnx::NodeProto& node = g.node(0);
    Tally& t = tally[node.op_type()];
    std::string result;
    bool refused = false;
    try {
      const Fold fn = make_fold(node.op_type(), fold_attrs(node, opset, "onnx: " + node.op_type()));
      for (const auto& e : fs::directory_iterator(dir)) {
        if (!e.is_directory()) continue;
        std::vector<Known> inputs;
        for (int k = 0; k < g.input_size(); ++k) {
          ::onnx::TensorProto in;
          if (!read_proto(e.path() / ("input_" + std::to_string(k) + ".pb"), in)) break;
          inputs.push_back(read_known(in, "onnx: input"));
        }
        // Inputs the node leaves out stay absent (dtype 0), as the importer passes them.
        std::vector<Known> args;
        int next = 0;
        for (const std::string& name : node.input()) args.push_back(name.empty() ? Known{} : inputs.at(next++));
        ::onnx::TensorProto out;
        if (!read_proto(e.path() / "output_0.pb", out)) continue;
        result = compare_known(fn(args), read_known(out, "onnx: output"));
        if (!result.empty()) break;
      }
    } catch (const std::invalid_argument& e) {
      refused = true;  // a dtype or attribute the importer refuses, with its message
      if (std::getenv("QUARTET_ONNX_REFUSALS")) std::printf("%s: %s\n", dir.filename().c_str(), e.what());
    }
    if (refused) ++t.refused;
    else if (result.empty()) ++t.passed;
    else {
      ++t.failed;
      failures.push_back(dir.filename().string() + ": " + result);
    }
  }
  int passed = 0;
  std::printf("%-40s %7s %8s %7s\n", "integer op", "passed", "refused", "failed");
  for (const auto& [op, t] : tally) {
    std::printf("%-40s %7d %8d %7d\n", op.c_str(), t.passed, t.refused, t.failed);
    passed += t.passed;
  }
  for (const auto& f : failures) ADD_FAILURE() << f;
  EXPECT_GT(passed, 20);
}

}  // namespace
}  // namespace quartet::workloads::onnx
