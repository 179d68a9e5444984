#include <stdexcept>
#include <string>

#include "engine/autograd.h"
#include "engine/cpu/dense.h"
#include "engine/dispatch.h"
#include "engine/memory.h"
#include "engine/ops.h"
#include "engine/ops/op_checks.h"

namespace quartet::engine {

void StatsReducer::all_gather(const Tensor&, Tensor&) {
  throw std::logic_error("this group of processes has no all-gather");
}
void StatsReducer::reduce_scatter_sum(const Tensor&, Tensor&) {
  throw std::logic_error("this group of processes has no reduce-scatter");
}

namespace {

// (ranks, B, S, W) slices one after another <-> (B, ranks S, W) sequences: runs of S W.
void slices_to_sequence(const Tensor& slices, Tensor& seq, int ranks) {
  const int64_t b = seq.size(0), run = seq.numel() / (b * ranks);
  for (int r = 0; r < ranks; ++r)
    for (int64_t i = 0; i < b; ++i)
      copy_range(seq, (i * ranks + r) * run, slices, (r * b + i) * run, run);
}
void sequence_to_slices(const Tensor& seq, Tensor& slices, int ranks) {
  const int64_t b = seq.size(0), run = seq.numel() / (b * ranks);
  for (int r = 0; r < ranks; ++r)
    for (int64_t i = 0; i < b; ++i)
      copy_range(slices, (r * b + i) * run, seq, (i * ranks + r) * run, run);
}

Tensor communication_buffer(int64_t numel, const Device& device) {
  MemTagScope tag(MemTag::communication);
  return Tensor::empty({numel}, device);
}

// All-gathers the slices x (B, S, W) into (B, ranks S, W).
Tensor gathered(const Tensor& x, StatsReducer& group, int ranks) {
  Tensor slices = communication_buffer(x.numel() * ranks, x.device());
  group.all_gather(x, slices);
  Tensor out = Tensor::empty({x.size(0), x.size(1) * ranks, x.size(2)}, x.device());
  slices_to_sequence(slices, out, ranks);
  return out;
}

// Sums x (B, T, W) over the group and keeps this process's slice (B, T / ranks, W).
Tensor scattered(const Tensor& x, StatsReducer& group, int ranks) {
  Tensor slices = communication_buffer(x.numel(), x.device());
  sequence_to_slices(x, slices, ranks);
  Tensor out = Tensor::empty({x.size(0), x.size(1) / ranks, x.size(2)}, x.device());
  group.reduce_scatter_sum(slices, out);
  return out;
}

void check_sequence(const Tensor& x, int ranks, int64_t per_rank_multiple, const char* op) {
  if (!x.defined() || x.dim() != 3) detail::fail(op, "input must be (B, T, W), got " + (x.defined() ? shape_str(x.shape()) : std::string("undefined")));
  if (ranks < 1 || x.size(1) % per_rank_multiple != 0)
    detail::fail(op, std::to_string(ranks) + " ranks do not split the sequence of " + shape_str(x.shape()));
}

}  // namespace

Tensor scatter_sequence(const Tensor& x, StatsReducer& group, int ranks) {
  check_sequence(x, ranks, ranks, "scatter_sequence");
  Tensor out = scattered(x, group, ranks);
  record(out, "scatter_sequence", {x}, [&group, ranks](const Tensor& g) { return TensorList{gathered(g, group, ranks)}; });
  return out;
}

namespace {

// What the outputs of one gathered_linears call share in backward: the slice they were
// computed from, the sequence gathered from it again when the first output's backward
// runs, and the input's gradient summed over the outputs until the last one scatters it.
struct GatheredInput {
  Tensor slice;  // (B, S, W), this process's positions
  StatsReducer& group;
  int ranks;
  int pending;    // outputs whose backward has not run yet
  Tensor whole;   // (B T, W) rows, between the first output's backward and the last
  Tensor grad;    // (B T, W) rows, the sum so far
};

}  // namespace

TensorList gathered_linears(const Tensor& x, const std::vector<std::pair<Tensor, Tensor>>& layers, StatsReducer& group,
                            int ranks) {
  check_sequence(x, ranks, 1, "gathered_linears");
  if (layers.empty()) detail::fail("gathered_linears", "at least one layer expected");
  const int64_t b = x.size(0), t = x.size(1) * ranks, w = x.size(2);
  TensorList outs;
  {
    NoGradScope plain;  // the whole sequence is freed on return; backward gathers it again
    const Tensor rows = reshape(gathered(x, group, ranks), {b * t, w});
    for (const auto& [weight, bias] : layers) outs.push_back(reshape(linear(rows, weight, bias), {b, t, weight.size(0)}));
  }
  auto shared = std::make_shared<GatheredInput>(GatheredInput{x.detach(), group, ranks, static_cast<int>(layers.size()), {}, {}});
  for (size_t i = 0; i < layers.size(); ++i) {
    const Tensor& weight = layers[i].first;
    const Tensor& bias = layers[i].second;
    const bool gw = weight.requires_grad(), gbias = bias.defined() && bias.requires_grad(), gx = x.requires_grad();
    record(outs[i], "gathered_linears", {x, weight, bias},
           [shared, w_ = weight.detach(), bshape = bias.defined() ? bias.shape() : Shape{}, gw, gbias, gx,
            b, t, w](const Tensor& g_out) {
             GatheredInput& in = *shared;
             const Tensor g = reshape(g_out, {b * t, w_.size(0)});
             if (!in.whole.defined()) in.whole = reshape(gathered(in.slice, in.group, in.ranks), {b * t, w});
             Tensor dw, db, dx;
             if (gw) {  // dW = G^T X over the whole sequence
               dw = Tensor::empty(w_.shape(), g.device());
               QUARTET_DISPATCH(g.device(), gemm, g, true, in.whole, false, dw, 1.0f, 0.0f);
             }
             if (gbias) {
               db = Tensor::empty(bshape, g.device());
               QUARTET_DISPATCH(g.device(), sum_rows, g, db);
             }
             if (gx) {  // dX = G W, summed over the outputs
               const float beta = in.grad.defined() ? 1.0f : 0.0f;
               if (!in.grad.defined()) in.grad = Tensor::empty({b * t, w}, g.device());
               QUARTET_DISPATCH(g.device(), gemm, g, false, w_, false, in.grad, 1.0f, beta);
             }
             if (--in.pending == 0) {
               if (gx) dx = scattered(reshape(in.grad, {b, t, w}), in.group, in.ranks);
               in.whole = Tensor();
               in.grad = Tensor();
             }
             return TensorList{dx, dw, db};
           });
  }
  return outs;
}

Tensor all_reduce_backward(const Tensor& x, StatsReducer& group) {
  if (!x.defined()) detail::fail("all_reduce_backward", "input must be a defined tensor");
  Tensor out = x.detach();
  record(out, "all_reduce_backward", {x}, [&group](const Tensor& g) {
    Tensor sum = g.clone();  // g may be shared with other consumers of the gradient
    group.all_reduce_sum(sum);
    return TensorList{sum};
  });
  return out;
}

Tensor all_reduce_forward(const Tensor& x, StatsReducer& group) {
  if (!x.defined()) detail::fail("all_reduce_forward", "input must be a defined tensor");
  Tensor out = x.clone();
  group.all_reduce_sum(out);
  record(out, "all_reduce_forward", {x}, [](const Tensor& g) { return TensorList{g}; });
  return out;
}

}  // namespace quartet::engine

namespace quartet::engine {
namespace {

// x's rows exchanged through the host; rows of `features` floats.
Tensor exchange_rows(const Tensor& x, int64_t features, const std::vector<int64_t>& send_rows,
                     const std::vector<int64_t>& recv_rows, RowExchanger& group) {
  std::vector<int64_t> send, recv;
  int64_t rows_in = 0, rows_out = 0;
  for (int64_t r : send_rows) send.push_back(r * features), rows_in += r;
  for (int64_t r : recv_rows) recv.push_back(r * features), rows_out += r;
  if (rows_in != x.size(0))
    detail::fail("all_to_all_rows", "send_rows add up to " + std::to_string(rows_in) + " rows, x " +
                                        shape_str(x.shape()) + " has " + std::to_string(x.size(0)));
  std::vector<float> out(static_cast<size_t>(rows_out * features));
  group.all_to_all(x.numel() > 0 ? x.to_vector() : std::vector<float>{}, send, out, recv);
  Tensor t = rows_out > 0 ? Tensor::from_vector({rows_out, features}, out) : Tensor::empty({0, features});
  return t.to(x.device());
}

}  // namespace

Tensor all_to_all_rows(const Tensor& x, const std::vector<int64_t>& send_rows, const std::vector<int64_t>& recv_rows,
                       RowExchanger& group) {
  const char* op = "all_to_all_rows";
  if (!x.defined() || x.dim() != 2) detail::fail(op, "x (S, F) expected");
  const size_t n = static_cast<size_t>(group.size());
  if (send_rows.size() != n || recv_rows.size() != n)
    detail::fail(op, "one send and one receive count per rank (" + std::to_string(n) + ") expected");
  const int64_t f = x.size(1);
  Tensor out = exchange_rows(x, f, send_rows, recv_rows, group);
  record(out, op, {x}, [f, send_rows, recv_rows, &group](const Tensor& g) {
    return TensorList{exchange_rows(g, f, recv_rows, send_rows, group)};
  });
  return out;
}

}  // namespace quartet::engine
