#include "engine/cpu/dnnl_conv.h"

#include <stdexcept>

#if defined(QUARTET_HAVE_DNNL)
#include <omp.h>

#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "engine/memory.h"
#include "engine/threads.h"
#endif

namespace quartet::engine::cpu {

#if defined(QUARTET_HAVE_DNNL)
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// One argument of a primitive: the engine's plain layout and the primitive's. Where they
// differ, the reorders move data into a staging copy or out of it.
struct Arg {
  int id = 0;  // DNNL_ARG_*
  bool output = false;
  memory::desc user, chosen;
  dnnl::reorder to_staged, from_staged;
  bool staged() const { return chosen != user; }
};

struct Entry {
  dnnl::primitive prim;
  std::vector<Arg> args;
  memory::desc scratchpad;
};

Arg make_arg(int id, bool output, const memory::desc& user, const memory::desc& chosen) {
  Arg a{id, output, user, chosen, {}, {}};
  if (a.staged()) {
    memory user_mem(user, cpu_engine(), DNNL_MEMORY_NONE), staged_mem(chosen, cpu_engine(), DNNL_MEMORY_NONE);
    if (output) a.from_staged = dnnl::reorder(staged_mem, user_mem);
    else a.to_staged = dnnl::reorder(user_mem, staged_mem);
  }
  return a;
}

// Primitives leave their scratch memory to us (scratchpad_mode::user), so that it comes
// from the engine's allocator and its memory tracker, as the staging copies do.
const dnnl::primitive_attr& user_scratchpad() {
  static const dnnl::primitive_attr attr = [] {
    dnnl::primitive_attr a;
    a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return a;
  }();
  return attr;
}

// A workspace-tagged buffer of at least `bytes` for oneDNN, freed with the tensor.
Tensor scratch(size_t bytes) {
  MemTagScope tag(MemTag::workspace);
  return Tensor::empty({static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float))});
}

// Runs the entry on the given pointers (in the order of entry.args). Staging copies and
// scratch live for the call only.
void execute(Entry& e, const std::vector<float*>& ptrs) {
  dnnl::stream stream(cpu_engine());
  std::unordered_map<int, memory> bound;
  std::vector<std::pair<size_t, memory>> outputs;
  std::vector<Tensor> buffers;
  for (size_t i = 0; i < e.args.size(); ++i) {
    Arg& a = e.args[i];
    memory user(a.user, cpu_engine(), ptrs[i]);
    if (!a.staged()) {
      bound[a.id] = user;
      continue;
    }
    buffers.push_back(scratch(a.chosen.get_size()));
    memory staged(a.chosen, cpu_engine(), buffers.back().data());
    if (!a.output) a.to_staged.execute(stream, user, staged);
    else outputs.emplace_back(i, user);
    bound[a.id] = staged;
  }
  if (const size_t bytes = e.scratchpad.get_size(); bytes > 0) {
    buffers.push_back(scratch(bytes));
    bound[DNNL_ARG_SCRATCHPAD] = memory(e.scratchpad, cpu_engine(), buffers.back().data());
  }
  e.prim.execute(stream, bound);
  for (auto& [i, user] : outputs) e.args[i].from_staged.execute(stream, bound.at(e.args[i].id), user);
  stream.wait();
}

Tag plain_tag(int dims) { return dims == 3 ? Tag::ncw : dims == 4 ? Tag::nchw : Tag::ncdhw; }

memory::desc plain_md(const Shape& shape) {
  return memory::desc(shape, memory::data_type::f32, plain_tag(static_cast<int>(shape.size())));
}

memory::desc any_md(const Shape& shape) { return memory::desc(shape, memory::data_type::f32, Tag::any); }

// The geometry every primitive of one convolution shares.
struct ConvShape {
  Shape x, w, y;
  memory::dims stride, dilate, pad_l, pad_r;
  bool blocked = false;

  ConvShape(const Tensor& x_, const Tensor& w_, const Shape& y_, const ConvOptions& opt, DnnlLayout layout)
      : x(x_.shape()), w(w_.shape()), y(y_), blocked(layout == DnnlLayout::blocked) {
    for (size_t i = 0; i < opt.stride.size(); ++i) {
      stride.push_back(opt.stride[i]);
      dilate.push_back(opt.dilation[i] - 1);  // oneDNN counts the gaps: 0 is a dense kernel
      pad_l.push_back(opt.padding[i]);
      // Our output size rounds down, so the right padding may leave cells no window
      // reaches; oneDNN accepts the symmetric value for the same output size.
      pad_r.push_back(opt.padding[i]);
    }
  }
  memory::desc md(const Shape& s) const { return blocked ? any_md(s) : plain_md(s); }
  memory::desc bias_md() const { return memory::desc({w[0]}, memory::data_type::f32, Tag::x); }

  dnnl::convolution_forward::primitive_desc forward(bool bias) const {
    const auto kind = dnnl::prop_kind::forward_training;
    const auto algo = dnnl::algorithm::convolution_direct;
    return bias ? dnnl::convolution_forward::primitive_desc(
                      {kind, algo, md(x), md(w), bias_md(), md(y), stride, dilate, pad_l, pad_r}, user_scratchpad(),
                      cpu_engine())
                : dnnl::convolution_forward::primitive_desc(
                      {kind, algo, md(x), md(w), md(y), stride, dilate, pad_l, pad_r}, user_scratchpad(), cpu_engine());
  }

  // Cache key: pass, bias, layout, threads, then every shape and option.
  std::vector<int64_t> key(int pass, bool bias) const {
    std::vector<int64_t> k{pass, bias, blocked, compute_threads()};
    for (const auto* v : {&x, &w, &y, &stride, &dilate, &pad_l})
      k.insert(k.end(), v->begin(), v->end());
    return k;
  }
};

enum Pass : int { kForward, kBackwardData, kBackwardWeights };

Entry make_forward(const ConvShape& s, bool bias) {
  const auto pd = s.forward(bias);
  Entry e{dnnl::convolution_forward(pd), {}, pd.scratchpad_desc()};
  e.args.push_back(make_arg(DNNL_ARG_SRC, false, plain_md(s.x), pd.src_desc()));
  e.args.push_back(make_arg(DNNL_ARG_WEIGHTS, false, plain_md(s.w), pd.weights_desc()));
  if (bias) e.args.push_back(make_arg(DNNL_ARG_BIAS, false, s.bias_md(), pd.bias_desc()));
  e.args.push_back(make_arg(DNNL_ARG_DST, true, plain_md(s.y), pd.dst_desc()));
  return e;
}

Entry make_backward_data(const ConvShape& s) {
  const auto algo = dnnl::algorithm::convolution_direct;
  const dnnl::convolution_backward_data::primitive_desc pd(
      {algo, s.md(s.x), s.md(s.w), s.md(s.y), s.stride, s.dilate, s.pad_l, s.pad_r}, user_scratchpad(),
      cpu_engine(), s.forward(false));
  Entry e{dnnl::convolution_backward_data(pd), {}, pd.scratchpad_desc()};
  e.args.push_back(make_arg(DNNL_ARG_DIFF_DST, false, plain_md(s.y), pd.diff_dst_desc()));
  e.args.push_back(make_arg(DNNL_ARG_WEIGHTS, false, plain_md(s.w), pd.weights_desc()));
  e.args.push_back(make_arg(DNNL_ARG_DIFF_SRC, true, plain_md(s.x), pd.diff_src_desc()));
  return e;
}

// Always computes the weight gradient; the bias gradient when `bias`.
Entry make_backward_weights(const ConvShape& s, bool bias) {
  const auto algo = dnnl::algorithm::convolution_direct;
  const auto hint = s.forward(bias);
  const auto pd =
      bias ? dnnl::convolution_backward_weights::primitive_desc(
                 {algo, s.md(s.x), s.md(s.w), s.bias_md(), s.md(s.y), s.stride, s.dilate, s.pad_l, s.pad_r},
                 user_scratchpad(), cpu_engine(), hint)
           : dnnl::convolution_backward_weights::primitive_desc(
                 {algo, s.md(s.x), s.md(s.w), s.md(s.y), s.stride, s.dilate, s.pad_l, s.pad_r}, user_scratchpad(),
                 cpu_engine(), hint);
  Entry e{dnnl::convolution_backward_weights(pd), {}, pd.scratchpad_desc()};
  e.args.push_back(make_arg(DNNL_ARG_SRC, false, plain_md(s.x), pd.src_desc()));
  e.args.push_back(make_arg(DNNL_ARG_DIFF_DST, false, plain_md(s.y), pd.diff_dst_desc()));
  e.args.push_back(make_arg(DNNL_ARG_DIFF_WEIGHTS, true, plain_md(s.w), pd.diff_weights_desc()));
  if (bias) e.args.push_back(make_arg(DNNL_ARG_DIFF_BIAS, true, s.bias_md(), pd.diff_bias_desc()));
  return e;
}

// Entries are few (one per layer shape and pass); past the cap the cache starts over.
constexpr size_t kMaxEntries = 256;

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}

// Guarded by cache_mutex(), held for a whole call.
std::map<std::vector<int64_t>, Entry>& cache() {
  static std::map<std::vector<int64_t>, Entry> entries;
  return entries;
}

template <class Make>
Entry& cached(const std::vector<int64_t>& key, Make&& make) {
  auto& entries = cache();
  if (auto it = entries.find(key); it != entries.end()) return it->second;
  if (entries.size() >= kMaxEntries) entries.clear();
  return entries.emplace(key, make()).first->second;
}

// oneDNN's memory objects take a mutable handle; the primitives only read their inputs.
float* ptr(const Tensor& t) { return const_cast<float*>(t.data()); }

// oneDNN's OpenMP runtime sizes its parallel regions by the calling thread's
// omp_get_max_threads(), read both when a primitive is created and when it runs.
void use_engine_threads() { omp_set_num_threads(compute_threads()); }

}  // namespace

bool dnnl_available() { return true; }

size_t dnnl_cached_primitives() {
  std::lock_guard lock(cache_mutex());
  return cache().size();
}

std::string dnnl_version() {
  const dnnl_version_t* v = ::dnnl_version();
  std::string isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: isa = "sse41"; break;
    case dnnl::cpu_isa::avx: isa = "avx"; break;
    case dnnl::cpu_isa::avx2: isa = "avx2"; break;
    case dnnl::cpu_isa::avx2_vnni: isa = "avx2_vnni"; break;
    case dnnl::cpu_isa::avx512_core: isa = "avx512_core"; break;
    case dnnl::cpu_isa::avx512_core_vnni: isa = "avx512_core_vnni"; break;
    case dnnl::cpu_isa::avx512_core_bf16: isa = "avx512_core_bf16"; break;
    case dnnl::cpu_isa::avx512_core_amx: isa = "avx512_core_amx"; break;
    default: isa = "other ISA"; break;
  }
  const char* runtime = v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP"
                        : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                        : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                             : "other runtime";
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         " (" + runtime + ", " + isa + ")";
}

void dnnl_conv_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt,
                       Tensor& out, DnnlLayout layout) {
  std::lock_guard lock(cache_mutex());
  use_engine_threads();
  const ConvShape s(x, weight, out.shape(), opt, layout);
  const bool has_bias = bias.defined();
  Entry& e = cached(s.key(kForward, has_bias), [&] { return make_forward(s, has_bias); });
  std::vector<float*> ptrs{ptr(x), ptr(weight)};
  if (has_bias) ptrs.push_back(ptr(bias));
  ptrs.push_back(out.data());
  execute(e, ptrs);
}

void dnnl_conv_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out, const ConvOptions& opt,
                        Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias, DnnlLayout layout) {
  std::lock_guard lock(cache_mutex());
  use_engine_threads();
  const ConvShape s(x, weight, grad_out.shape(), opt, layout);
  if (grad_x.defined()) {
    Entry& e = cached(s.key(kBackwardData, false), [&] { return make_backward_data(s); });
    execute(e, {ptr(grad_out), ptr(weight), grad_x.data()});
  }
  if (grad_weight.defined() || grad_bias.defined()) {
    // oneDNN gives the bias gradient only beside the weight gradient.
    Tensor dw = grad_weight.defined() ? grad_weight : Tensor::empty(weight.shape());
    const bool has_bias = grad_bias.defined();
    Entry& e = cached(s.key(kBackwardWeights, has_bias), [&] { return make_backward_weights(s, has_bias); });
    std::vector<float*> ptrs{ptr(x), ptr(grad_out), dw.data()};
    if (has_bias) ptrs.push_back(grad_bias.data());
    execute(e, ptrs);
  }
}

#else

bool dnnl_available() { return false; }
size_t dnnl_cached_primitives() { return 0; }
std::string dnnl_version() { return "oneDNN: not built"; }

void dnnl_conv_forward(const Tensor&, const Tensor&, const Tensor&, const ConvOptions&, Tensor&, DnnlLayout) {
  throw std::logic_error("dnnl_conv_forward: built without oneDNN (QUARTET_DNNL)");
}

void dnnl_conv_backward(const Tensor&, const Tensor&, const Tensor&, const ConvOptions&, Tensor&, Tensor&, Tensor&,
                        DnnlLayout) {
  throw std::logic_error("dnnl_conv_backward: built without oneDNN (QUARTET_DNNL)");
}

#endif

}  // namespace quartet::engine::cpu
