#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/cpu/elementwise.h"
#include "engine/cpu/transformer.h"
#include "engine/memory.h"
#include "engine/ops.h"
#include "engine/ops/op_checks.h"

namespace quartet::engine {
namespace {

using detail::fail;

constexpr const char* kOp = "ring_attention";

void check_ring(const Tensor& q, AttentionRing& ring) {
  if (!q.device().is_cpu())
    fail(kOp, "runs on the cpu only (its blocks have no CUDA kernels yet), got q on " + q.device().str());
  if (ring.size() < 1 || ring.rank() < 0 || ring.rank() >= ring.size())
    fail(kOp, "the ring's rank " + std::to_string(ring.rank()) + " is not in 0.." + std::to_string(ring.size() - 1));
  for (int r = 0; r < ring.size(); ++r) {
    const std::vector<int64_t>& p = ring.positions(r);
    if (static_cast<int64_t>(p.size()) != q.size(1) || !std::is_sorted(p.begin(), p.end()))
      fail(kOp, "process " + std::to_string(r) + " of the ring holds " + std::to_string(p.size()) +
                    " positions; every process must hold as many as q has (" + std::to_string(q.size(1)) +
                    "), ascending (q " + shape_str(q.shape()) + ")");
  }
}

// For each query position, how many of the keys' positions (ascending) lie at or before it.
std::vector<int64_t> visible_keys(const std::vector<int64_t>& queries, const std::vector<int64_t>& keys) {
  std::vector<int64_t> out(queries.size());
  for (size_t i = 0; i < queries.size(); ++i)
    out[i] = std::upper_bound(keys.begin(), keys.end(), queries[i]) - keys.begin();
  return out;
}

// The block that travels: [a | b], both flat. A communication buffer.
Tensor pack(const Tensor& a, const Tensor& b) {
  MemTagScope tag(MemTag::communication);
  Tensor out = Tensor::empty({2 * a.numel()}, a.device());
  const int64_t n = a.numel();
  cpu::copy_range(out, 0, a, 0, n);
  cpu::copy_range(out, n, b, 0, n);
  return out;
}

void unpack(const Tensor& packed, Tensor& a, Tensor& b) {
  const int64_t n = a.numel();
  cpu::copy_range(a, 0, packed, 0, n);
  cpu::copy_range(b, 0, packed, n, n);
}

Tensor received_like(const Tensor& block) {
  MemTagScope tag(MemTag::communication);
  return Tensor::empty(block.shape(), block.device());
}

// Whose block process `me` holds at step s of a pass round the ring: s shifts have
// brought it from s places back.
int owner_at(int me, int s, int n) { return (me - s + n) % n; }

// One pass of every process's key/value block round the ring: fn(visible, k block, v
// block) for the block held at step s = 0 .. size - 1 (its own at s = 0, then the one s
// places back), with `visible` its keys this process's queries see (the blocks are read
// only where some are). Each step starts the next block's shift before fn and waits for
// it after, so the shift runs while fn computes.
template <class Fn>
void pass_round(const Tensor& k, const Tensor& v, AttentionRing& ring, Fn&& fn) {
  const int n = ring.size(), me = ring.rank();
  Tensor kb, vb;
  {
    MemTagScope tag(MemTag::workspace);
    kb = Tensor::empty(k.shape(), k.device());
    vb = Tensor::empty(v.shape(), v.device());
  }
  Tensor held = pack(k, v);
  for (int s = 0; s < n; ++s) {
    Tensor next;
    std::function<void()> arrived;
    if (s + 1 < n) {
      next = received_like(held);
      arrived = ring.shift(held, next);
    }
    const std::vector<int64_t> visible = visible_keys(ring.positions(me), ring.positions(owner_at(me, s, n)));
    if (s > 0 && visible.back() > 0) unpack(held, kb, vb);
    fn(visible, s > 0 ? kb : k, s > 0 ? vb : v);
    if (arrived) {
      arrived();
      held = next;
    }
  }
}

// The key/value gradients of the blocks, each added to by every process that sees some
// of it and passed on behind the block: at step s a process adds its part of the block
// it holds to what came from the previous process (which held it at step s - 1) and
// sends the sum on, while it goes on to the next block. The last shift brings each
// process its own block's whole gradients.
class GradientRelay {
 public:
  explicit GradientRelay(AttentionRing& ring) : ring_(ring) {}

  void pass_on(Tensor mine) {
    if (arrived_) {
      arrived_();
      cpu::add_(mine, incoming_, 1.0f);
    }
    sent_ = std::move(mine);  // kept until its shift is waited for
    incoming_ = received_like(sent_);
    arrived_ = ring_.shift(sent_, incoming_);
  }
  // After the last pass_on: this process's own block's gradients.
  Tensor own() {
    arrived_();
    return incoming_;
  }

 private:
  AttentionRing& ring_;
  Tensor sent_, incoming_;
  std::function<void()> arrived_;
};

TensorList ring_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& lse, int64_t heads, AttentionRing& ring) {
  const Device dev = q.device();
  Tensor dq = Tensor::zeros(q.shape(), dev);
  Tensor dq_block = Tensor::empty(q.shape(), dev), dk_block = Tensor::empty(q.shape(), dev),
         dv_block = Tensor::empty(q.shape(), dev);
  GradientRelay relay(ring);
  pass_round(k, v, ring, [&](const std::vector<int64_t>& visible, const Tensor& kb, const Tensor& vb) {
    Tensor part;
    if (visible.back() > 0) {
      cpu::attention_block_backward(grad_out, q, kb, vb, out, lse, heads, visible, dq_block, dk_block, dv_block);
      cpu::add_(dq, dq_block, 1.0f);
      part = pack(dk_block, dv_block);
    } else {
      MemTagScope tag(MemTag::communication);
      part = Tensor::zeros({2 * k.numel()}, dev);
    }
    relay.pass_on(std::move(part));
  });
  Tensor dk = Tensor::empty(q.shape(), dev), dv = Tensor::empty(q.shape(), dev);
  unpack(relay.own(), dk, dv);
  return {dq, dk, dv};
}

}  // namespace

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, AttentionRing& ring) {
  detail::check_attention_inputs(q, k, v, heads, kOp);
  check_ring(q, ring);
  const Device dev = q.device();
  const Shape lse_shape{q.size(0), heads, q.size(1)};
  Tensor out = Tensor::zeros(q.shape(), dev);
  Tensor lse = Tensor::full(lse_shape, -std::numeric_limits<float>::infinity(), dev);
  Tensor block_out, block_lse;
  {
    MemTagScope tag(MemTag::workspace);
    block_out = Tensor::empty(q.shape(), dev);
    block_lse = Tensor::empty(lse_shape, dev);
  }
  pass_round(k, v, ring, [&](const std::vector<int64_t>& visible, const Tensor& kb, const Tensor& vb) {
    if (visible.back() == 0) return;
    cpu::attention_block_forward(q, kb, vb, heads, visible, block_out, block_lse);
    cpu::attention_merge(out, lse, block_out, block_lse, heads);
  });
  record(out, kOp, {q, k, v},
         [q = q.detach(), k = k.detach(), v = v.detach(), o = out.detach(), lse, heads, &ring](const Tensor& g) {
           return ring_attention_backward(g, q, k, v, o, lse, heads, ring);
         });
  return out;
}

}  // namespace quartet::engine
