#include "engine/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "engine/autograd.h"
#include "engine/cpu/elementwise.h"
#include "engine/device_memory.h"
#include "engine/dispatch.h"

namespace quartet::engine {

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

// Large enough for every tensor a 24 GiB machine could hold, small enough that a
// corrupt shape is refused before it reaches the allocator.
constexpr int64_t kMaxNumel = int64_t{1} << 36;

void check_shape(const Shape& shape) {
  if (shape.size() > static_cast<size_t>(kMaxDims))
    throw std::invalid_argument("tensor shape " + shape_str(shape) + " has " +
                                std::to_string(shape.size()) + " dimensions; at most " +
                                std::to_string(kMaxDims) + " are supported");
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("tensor shape " + shape_str(shape) + " has a negative size");
    if (d > 0 && n > kMaxNumel / d)
      throw std::invalid_argument("tensor shape " + shape_str(shape) + " is too large");
    n *= d;
  }
}

#if defined(__SANITIZE_ADDRESS__)
#define QUARTET_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QUARTET_ASAN 1
#endif
#endif

// Host blocks freed by tensors, kept for the next tensor of the same size. A training
// step allocates the same sizes as the one before, so after the first step allocations
// are served from here: no page faults, no zeroing by the kernel, no mmap/munmap of the
// large blocks glibc would otherwise hand back every step. Thread-safe. Blocks beyond
// the cap are returned to the system; QUARTET_HOST_CACHE_MB sets the cap (0: off; off
// under AddressSanitizer too, so that it still sees every use after free).
class BlockCache {
 public:
  static BlockCache& instance() {
    static BlockCache* cache = new BlockCache;  // never destroyed: tensors may outlive statics
    return *cache;
  }

  void* allocate(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= bytes;
        return p;
      }
    }
    void* p = std::aligned_alloc(64, bytes);
    if (!p) {
      release_all();  // the cache may hold what this allocation needs
      p = std::aligned_alloc(64, bytes);
      if (!p) throw std::bad_alloc();
    }
    return p;
  }

  void release(void* p, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + bytes <= cap_) {
        free_[bytes].push_back(p);
        cached_ += bytes;
        return;
      }
    }
    std::free(p);
  }

  void release_all() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [bytes, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_ = 0;
  }

 private:
  BlockCache() {
    if (const char* env = std::getenv("QUARTET_HOST_CACHE_MB")) cap_ = static_cast<size_t>(std::atoll(env)) << 20;
#if defined(QUARTET_ASAN)
    cap_ = 0;
#endif
  }
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  size_t cap_ = size_t{1} << 30;
};

size_t storage_bytes(int64_t numel) { return ((static_cast<size_t>(numel) * sizeof(float) + 63) / 64) * 64; }

}  // namespace

// Host storage comes from the block cache and is counted by engine/memory.h; device
// storage comes from the device's caching allocator, which counts it by tag itself.
void* Storage::acquire() {
  const size_t bytes = storage_bytes(numel_);
  if (!device_.is_cpu()) return bytes > 0 ? device_allocate(device_, bytes, tag_) : nullptr;
  void* p = bytes > 0 ? BlockCache::instance().allocate(bytes) : nullptr;
  memory_add(tag_, static_cast<int64_t>(numel_) * sizeof(float));
  return p;
}

void Storage::give_back() {
  if (!device_.is_cpu()) {
    if (data_) device_free(device_, data_);
    return;
  }
  if (data_) BlockCache::instance().release(data_, storage_bytes(numel_));
  memory_sub(tag_, static_cast<int64_t>(numel_) * sizeof(float));
}

Storage::Storage(int64_t numel, Device device, MemTag tag)
    : numel_(numel), device_(device), tag_(tag) {
  if (!device.is_cpu() && !device_available(device)) throw_no_backend(device, "allocate");
  data_ = static_cast<float*>(acquire());
}

Storage::~Storage() {
  if (!resident()) return;  // released: nothing held, nothing charged
  give_back();
}

void Storage::set_tag(MemTag tag) {
  if (tag == tag_) return;
  if (!resident()) {
    tag_ = tag;
    return;
  }
  if (!device_.is_cpu()) {
    if (data_) device_retag(device_, data_, tag);
  } else {
    // Subtract first, so that the total's peak does not count these bytes twice.
    memory_sub(tag_, static_cast<int64_t>(numel_) * sizeof(float));
    memory_add(tag, static_cast<int64_t>(numel_) * sizeof(float));
  }
  tag_ = tag;
}

void Storage::release() {
  if (!data_) return;
  give_back();
  data_ = nullptr;
}

void Storage::materialize() {
  if (resident()) return;
  data_ = static_cast<float*>(acquire());
}

void Storage::throw_released() const {
  throw std::logic_error("a tensor's storage of " + std::to_string(numel_) +
                         " floats was read while released (a sharded parameter used before it was gathered)");
}

Tensor Tensor::empty(const Shape& shape, Device device) {
  return empty(shape, device, current_mem_tag());
}

Tensor Tensor::empty(const Shape& shape, Device device, MemTag tag) {
  check_shape(shape);
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->storage = std::make_shared<Storage>(shape_numel(shape), device, tag);
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, Device device) { return full(shape, 0.0f, device); }

Tensor Tensor::full(const Shape& shape, float value, Device device) {
  Tensor t = empty(shape, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) {
  check_shape(shape);
  if (static_cast<int64_t>(values.size()) != shape_numel(shape))
    throw std::invalid_argument("from_vector: shape " + shape_str(shape) + " needs " +
                                std::to_string(shape_numel(shape)) + " values, got " +
                                std::to_string(values.size()));
  Tensor t = empty(shape);
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

TensorImpl& Tensor::checked() const {
  if (!impl_) throw std::logic_error("use of an undefined tensor");
  return *impl_;
}

const Shape& Tensor::shape() const { return checked().shape; }

int64_t Tensor::size(int d) const {
  const int n = dim();
  const int i = d < 0 ? d + n : d;
  if (i < 0 || i >= n)
    throw std::out_of_range("size(" + std::to_string(d) + ") of a tensor of shape " +
                            shape_str(shape()));
  return shape()[i];
}

Device Tensor::device() const { return checked().storage->device(); }
MemTag Tensor::mem_tag() const { return checked().storage->tag(); }

float* Tensor::data() {
  TensorImpl& impl = checked();
  if (!impl.storage->device().is_cpu())
    throw std::logic_error("data(): tensor is on " + impl.storage->device().str() + ", not the host");
  return impl.storage->data();
}

const float* Tensor::data() const { return const_cast<Tensor*>(this)->data(); }

float* Tensor::device_data() { return checked().storage->data(); }

const float* Tensor::device_data() const { return checked().storage->data(); }

std::vector<float> Tensor::to_vector() const {
  if (!device().is_cpu()) return to(Device::cpu()).to_vector();
  const float* p = data();
  return std::vector<float>(p, p + numel());
}

void Tensor::copy_from_host(std::span<const float> values) {
  if (static_cast<int64_t>(values.size()) != numel())
    throw std::invalid_argument("copy_from_host: " + std::to_string(values.size()) + " values for a tensor of shape " +
                                shape_str(shape()));
  if (device().is_cpu()) {
    std::copy(values.begin(), values.end(), data());
    return;
  }
  Tensor host = empty(shape(), Device::cpu(), mem_tag());
  std::copy(values.begin(), values.end(), host.data());
  copy_from(host);
}

float Tensor::item() const {
  if (numel() != 1)
    throw std::invalid_argument("item(): tensor of shape " + shape_str(shape()) + " is not a scalar");
  if (!device().is_cpu()) return to_vector()[0];
  return data()[0];
}

Tensor Tensor::to(const Device& target) const {
  if (device() == target) return *this;
  Tensor out = empty(shape(), target, mem_tag());
  out.copy_from(*this);
  return out;
}

void Tensor::move_to(const Device& target) {
  TensorImpl& impl = checked();
  if (impl.storage->device() == target) return;
  if (impl.grad_fn) throw std::logic_error("move_to: only tensors outside the graph (parameters, buffers) move");
  impl.storage = to(target).impl()->storage;
  impl.grad.reset();
}

void Tensor::release_storage() { checked().storage->release(); }
void Tensor::materialize_storage() { checked().storage->materialize(); }
bool Tensor::resident() const { return checked().storage->resident(); }

HostValues::HostValues(const Tensor& t) {
  if (t.device().is_cpu()) {
    keep_ = t;
    span_ = {t.data(), static_cast<size_t>(t.numel())};
  } else {
    copy_ = t.to_vector();
    span_ = copy_;
  }
}

void update_on_host(Tensor& t, const std::function<void(std::span<float>)>& fn) {
  if (t.device().is_cpu()) {
    fn({t.data(), static_cast<size_t>(t.numel())});
    return;
  }
  std::vector<float> host = t.to_vector();
  fn(host);
  t.copy_from_host(host);
}

bool Tensor::requires_grad() const { return checked().requires_grad; }

Tensor& Tensor::set_requires_grad(bool value) {
  TensorImpl& impl = checked();
  if (impl.grad_fn)
    throw std::logic_error("set_requires_grad: only leaves (tensors no op produced) can be marked");
  impl.requires_grad = value;
  return *this;
}

Tensor Tensor::grad() const { return Tensor(checked().grad); }

void Tensor::set_grad(const Tensor& g) {
  if (g.defined()) check_same_shape(*this, g, "set_grad");
  checked().grad = g.impl_ptr();
}

void Tensor::zero_grad() { checked().grad.reset(); }

void Tensor::add_grad_ready_hook(GradReadyHook hook) { checked().hooks.push_back(std::move(hook)); }
void Tensor::clear_grad_ready_hooks() { checked().hooks.clear(); }
const std::shared_ptr<Node>& Tensor::grad_fn() const { return checked().grad_fn; }

void Tensor::backward() const {
  if (numel() != 1)
    throw std::invalid_argument("backward(): needs a scalar, got shape " + shape_str(shape()) +
                                "; pass a gradient of that shape instead");
  run_backward(*this, Tensor::full(shape(), 1.0f, device()));
}

void Tensor::backward(const Tensor& grad) const { run_backward(*this, grad); }

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape();
  impl->storage = checked().storage;
  return Tensor(std::move(impl));
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), device());
  QUARTET_DISPATCH(device(), copy, *this, out);
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  check_same_shape(*this, src, "copy_from");
  // Between devices the device backend copies (to, from or within its device).
  const Device backend = device().is_cpu() ? src.device() : device();
  QUARTET_DISPATCH(backend, copy, src, *this);
}

void Tensor::fill_(float value) { QUARTET_DISPATCH(device(), fill, *this, value); }

void check_same_shape(const Tensor& a, const Tensor& b, const char* what) {
  if (a.shape() != b.shape())
    throw std::invalid_argument(std::string(what) + ": shapes differ: " + shape_str(a.shape()) +
                                " and " + shape_str(b.shape()));
}

}  // namespace quartet::engine
