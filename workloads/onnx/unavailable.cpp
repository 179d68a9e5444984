// The build without the ONNX library (QUARTET_ONNX off or libonnx-dev missing).
#include <stdexcept>

#include "workloads/onnx/model.h"

namespace quartet::workloads::onnx {
namespace {

[[noreturn]] void missing(const std::string& path) {
  throw std::invalid_argument("model onnx:" + path +
                              ": this build reads no ONNX files (Debian: apt install libonnx-dev, then reconfigure)");
}

}  // namespace

bool available() { return false; }
std::shared_ptr<engine::Model> import_model(const std::string& path, uint64_t) { missing(path); }
GraphInfo inspect_model(const std::string& path) { missing(path); }
void export_model(const std::string& source, const engine::Model&, const std::string&) { missing(source); }

}  // namespace quartet::workloads::onnx
