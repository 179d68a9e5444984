#pragma once

// What a split server and its clients say, over one transport::Connection per virtual
// client. After the transport's hello (role "sl-client/<id>") the server answers with a
// Welcome (rank = client id, world_size = clients). Then, for each turn the server gives
// the client (vanilla and U-shaped: one client at a time; SplitFed: all at once):
//
//   server -> client  control  Turn
//   server -> client  tensors  the client half to start from            ("weights")
//   per step, vanilla and SplitFed:
//     client -> server  tensors  every tensor crossing the cut           ("activations")
//     client -> server  control  Labels                                   ("labels")
//     server -> client  tensors  their gradients                          ("gradients")
//   per step, U-shaped (no label leaves the client):
//     client -> server  tensors  the tensors crossing the first cut       ("activations")
//     server -> client  tensors  the tensors crossing the second cut      ("activations")
//     client -> server  tensors  their gradients                          ("gradients")
//     server -> client  tensors  the gradients at the first cut           ("gradients")
//   client -> server  tensors  the client half after the turn            ("weights")
//   client -> server  control  TurnDone                                   ("control")
//
// and at the end: server -> client shutdown. Either side that fails sends an error frame.

#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/nn.h"
#include "transport/messages.h"

namespace quartet::trainers::split {

inline constexpr const char* kClientRolePrefix = "sl-client/";

struct Turn {
  int64_t epoch = 0;
  int64_t client = 0;
  int64_t steps = 0;            // steps of `batch` samples over the client's partition
  int64_t batch = 0;
  std::vector<double> lrs;      // the learning rate of each step
  bool fresh_optimizer = false; // SplitFed: the client half restarts from the average

  template <class Archive>
  void serialize(Archive& ar) {
    ar(epoch, client, steps, batch, lrs, fresh_optimizer);
  }
};

struct Labels {
  std::vector<int32_t> labels;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(labels);
  }
};

struct TurnDone {
  int64_t epoch = 0;
  int64_t client = 0;
  int64_t steps = 0;
  int64_t samples = 0;         // the client's partition size (its SplitFed averaging weight)
  double loss_sum = 0.0;       // U-shaped: the client computes the loss; 0 otherwise
  double forward = 0.0, backward = 0.0, optimizer = 0.0, data = 0.0;  // seconds, client side
  int64_t memory_peak = 0;     // tracked bytes, client process
  int64_t rss_peak = 0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(epoch, client, steps, samples, loss_sum, forward, backward, optimizer, data, memory_peak, rss_peak);
  }
};

// Sends `tensors` (on any device: copied to the host to travel) as one tensors frame
// named name0, name1, ...
void send_engine_tensors(transport::Connection& conn, const engine::TensorList& tensors, const std::string& name,
                         transport::Deadline timeout);

// Throws transport::MessageError when `got` (tensors that came from `peer`) differs
// from `like` in number or shape: for tensors received before what they answer was known.
void check_like(const engine::TensorList& got, const engine::TensorList& like, const std::string& peer);

// Receives one tensors frame as engine tensors on `device` (copies, tagged as the current
// scope says). Throws transport::MessageError for an empty message, more than
// `max_tensors` tensors, a shape with more than engine::kMaxDims dims, or, when `like` is
// not empty, tensors that differ from `like` in number or shape.
engine::TensorList receive_engine_tensors(transport::Connection& conn, transport::Deadline timeout, size_t max_tensors,
                                          const engine::Device& device, const engine::TensorList& like = {});

// Sends the state tensors by name; receives them into `into`, checking names and sizes.
void send_state(transport::Connection& conn, const engine::NamedTensors& state, transport::Deadline timeout);
void receive_state(transport::Connection& conn, engine::NamedTensors& into, transport::Deadline timeout);

}  // namespace quartet::trainers::split
