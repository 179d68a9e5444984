#pragma once

// Weights on disk as safetensors (https://github.com/huggingface/safetensors), so they
// move to and from PyTorch unchanged. Layout and names follow PyTorch's: conv weights
// OIHW / OIDHW, linear weights [out, in], dotted names ("0.weight", "fc1.bias").
// docs/safetensors.md has the format and a numpy snippet for the PyTorch side.
//
// File: 8-byte little-endian header length N, N bytes of JSON, then the data section.
//   {"__metadata__": {"k": "v"},
//    "0.weight": {"dtype": "F32", "shape": [16, 1, 3, 3], "data_offsets": [0, 576]}, ...}
// data_offsets are [begin, end) byte offsets into the data section, which the tensors
// must cover exactly: no holes, no overlaps (as the spec requires).

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/nn.h"

namespace quartet::engine {

// A larger header is refused before anything is allocated for it.
inline constexpr int64_t kMaxSafetensorsHeaderBytes = 100'000'000;
// A header listing more tensors is refused as soon as its parser passes the limit: a
// model's weights with an optimizer's state are far fewer.
inline constexpr int64_t kMaxSafetensorsTensors = 65'536;

struct SafetensorsFile {
  NamedTensors tensors;  // in data-section order
  std::map<std::string, std::string> metadata;
};

// Writes `tensors` to `path` as F32 safetensors, replacing any file there.
// requires
//   - every tensor is defined (on any device: a GPU's values are copied to the host as
//     they are written)
//   - names are non-empty, unique and not "__metadata__"
// ensures
//   - the header lists the tensors and their data in the given order, contiguously,
//     with "__metadata__" first when `metadata` is not empty; the header is padded
//     with spaces so the data section starts 8-byte aligned
//   - atomic: the bytes go to `path + ".tmp-<pid>"`, are fsynced, then renamed onto
//     `path`; a reader sees the old file or the complete new one, never a partial
//     one, and no temporary file is left behind, even on failure
// throws
//   - std::invalid_argument when a requirement above is not met (naming the tensor)
//   - std::runtime_error naming the path when the file cannot be written
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads a safetensors file, which may come from anywhere.
// ensures
//   - returns new host tensors, charged to current_mem_tag(), in data-section order
//     (which is the order save_safetensors was given), and the "__metadata__" strings
//   - memory allocated is bounded by the file's size: every size is checked against
//     the file before anything is allocated for it
//   - time grows with the header's size, not its square (each entry is checked as parsed)
//   - every value is finite
// throws std::invalid_argument naming the path and the problem when the file is not
// valid F32 safetensors: shorter than 8 bytes; a header length past the end of the file
// or over kMaxSafetensorsHeaderBytes; a header that is not a JSON object, or that lists
// more than kMaxSafetensorsTensors tensors; an entry
// without dtype, shape or data_offsets; a dtype other than F32; a shape with negative
// sizes or more than kMaxDims dims; data_offsets that are not [begin, end] with
// begin <= end within the data section and end - begin == 4 * numel; regions that
// overlap or leave holes; a value that is NaN or infinite (naming the tensor). Throws
// std::runtime_error naming the path when it cannot be opened or read.
SafetensorsFile read_safetensors(const std::string& path);

// read_safetensors(path).tensors.
NamedTensors load_safetensors(const std::string& path);

// Copies `tensors` into the tensors of m.state_dict(), matched by name.
// requires
//   - the names of `tensors` are exactly those of m.state_dict(), each once, with the
//     same shapes; the model's tensors are on the host
// ensures
//   - all-or-nothing: everything is checked before any value is copied; on a throw,
//     the model is unchanged
//   - values only: the model keeps its tensors (and optimizers holding them stay
//     valid), gradients and autograd state are untouched
// throws StateDictMismatch (a std::invalid_argument) listing every mismatch, one per line, e.g.
//   "conv1.0.weight: file has shape [32, 1, 3, 3], model expects [16, 1, 3, 3]"
//   "fc.bias: missing from file (model expects [10])"
//   "extra.weight: in file (shape [3]) but not in the model"
// `source` names where the tensors came from in that message.
void load_state_dict(Module& m, const NamedTensors& tensors, const std::string& source = "state dict");

// load_state_dict's refusal: what() lists every mismatch; brief() is one line for a
// person, the first mismatch and how many more.
class StateDictMismatch : public std::invalid_argument {
 public:
  StateDictMismatch(const std::string& source, std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }
  std::string brief() const;

 private:
  std::vector<std::string> problems_;
};

// load_state_dict(m, load_safetensors(path), path).
void load_state_dict(Module& m, const std::string& path);

}  // namespace quartet::engine
