#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/memory.h"

namespace quartet::engine {

// Up to kMaxDims sizes, outermost first: (N, C, D, H, W) for volumes.
using Shape = std::vector<int64_t>;
inline constexpr int kMaxDims = 5;
std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);

// Contiguous float32 buffer on one device, charged to one memory tag while it lives.
class Storage {
 public:
  Storage(int64_t numel, Device device, MemTag tag);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // Throws std::logic_error while released.
  float* data() {
    if (!data_ && numel_ > 0) throw_released();
    return data_;
  }
  int64_t numel() const { return numel_; }
  Device device() const { return device_; }
  MemTag tag() const { return tag_; }
  // Moves this storage's charge to another tag (a workspace buffer adopted as a gradient).
  void set_tag(MemTag tag);
  // Frees the buffer and its charge but keeps the size: ZeRO-3 frees a stage's parameters
  // between the uses it gathers them for. Every tensor sharing the storage (a backward's
  // saved copies included) sees the buffer come back with materialize(), whose values
  // are undefined until written. Both do nothing when already so.
  void release();
  void materialize();
  bool resident() const { return data_ != nullptr || numel_ == 0; }

 private:
  [[noreturn]] void throw_released() const;
  void* acquire();    // a buffer for numel_ floats, charged to tag_
  void give_back();   // data_'s buffer and charge

  float* data_ = nullptr;
  int64_t numel_ = 0;
  Device device_;
  MemTag tag_;
};

class Tensor;
struct Node;
// Called once a leaf's gradient is final for the current backward pass, on the thread
// that runs backward. `param` is the leaf; its grad() holds the summed gradient.
using GradReadyHook = std::function<void(const Tensor& param)>;

struct TensorImpl {
  Shape shape;
  std::shared_ptr<Storage> storage;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // leaves only; accumulates with += until zeroed
  MemTag grad_tag = MemTag::gradients;  // what grad is charged to (a checkpoint's inputs: workspace)
  std::shared_ptr<Node> grad_fn;     // null for leaves and for tensors outside the graph
  std::vector<GradReadyHook> hooks;
};

// A float32 tensor of up to five dimensions. Copies share storage (like PyTorch's).
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // New storage is charged to current_mem_tag() unless a tag is given.
  static Tensor empty(const Shape& shape, Device device = Device::cpu());
  static Tensor empty(const Shape& shape, Device device, MemTag tag);
  static Tensor zeros(const Shape& shape, Device device = Device::cpu());
  static Tensor full(const Shape& shape, float value, Device device = Device::cpu());
  // Requires values.size() == numel(shape); host memory.
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int dim() const { return static_cast<int>(shape().size()); }
  int64_t size(int d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(shape()); }
  Device device() const;
  MemTag mem_tag() const;

  // Host pointer; requires a cpu tensor.
  float* data();
  const float* data() const;
  // The storage's pointer on its own device (device memory for cuda): for collectives and
  // kernels, never read on the host unless the tensor is on the cpu.
  float* device_data();
  const float* device_data() const;

  // The values copied to host memory, from any device; and replaced by host values
  // (requires values.size() == numel()). The explicit host copies of code above the engine.
  std::vector<float> to_vector() const;
  void copy_from_host(std::span<const float> values);
  float item() const;  // requires numel() == 1; any device
  // The same values on `device`: this tensor itself when it is there already (storage
  // shared, as PyTorch's to()), else a copy charged to this tensor's memory tag.
  Tensor to(const Device& device) const;
  // Moves this leaf's storage to `device` in place: every copy of this tensor sees it
  // there; its gradient is dropped. Nothing happens when it is there already.
  void move_to(const Device& device);
  // The storage's Storage::release() and materialize(), for every tensor sharing it.
  void release_storage();
  void materialize_storage();
  bool resident() const;

  bool requires_grad() const;
  // Marks a leaf as a trainable parameter; throws on a tensor with a grad_fn.
  Tensor& set_requires_grad(bool value);
  Tensor grad() const;  // undefined until backward reaches this leaf
  void set_grad(const Tensor& g);
  void zero_grad();     // drops the gradient buffer (PyTorch's set_to_none)
  void add_grad_ready_hook(GradReadyHook hook);
  void clear_grad_ready_hooks();
  const std::shared_ptr<Node>& grad_fn() const;

  // Backpropagates from this scalar (gradient 1) or from `grad` of the same shape.
  void backward() const;
  void backward(const Tensor& grad) const;

  Tensor detach() const;  // same storage, outside the graph
  Tensor clone() const;   // new storage, outside the graph, current tag
  void copy_from(const Tensor& src);  // same shape, any devices; values only, no graph
  void fill_(float value);

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  TensorImpl& checked() const;
  std::shared_ptr<TensorImpl> impl_;
};

using TensorList = std::vector<Tensor>;

// A tensor's values readable on the host: the storage itself for a cpu tensor (kept
// alive while this lives), else a copy made once. For code above the engine that sends or
// reads values (messages, checksums): host access is explicit, and free on the cpu.
class HostValues {
 public:
  explicit HostValues(const Tensor& t);
  std::span<const float> span() const { return span_; }

 private:
  Tensor keep_;
  std::vector<float> copy_;
  std::span<const float> span_;
};

// Runs fn on a tensor's values in host memory and keeps what it wrote: the storage itself
// for a cpu tensor, else a host copy written back afterwards.
void update_on_host(Tensor& t, const std::function<void(std::span<float>)>& fn);

// Throws std::invalid_argument with `what` and the shapes when a and b differ.
void check_same_shape(const Tensor& a, const Tensor& b, const char* what);

}  // namespace quartet::engine
