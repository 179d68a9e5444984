#pragma once

// What a federated server and its pools say to each other, over one transport::Connection
// per pool process. After the transport's hello (role "fl-pool/<p>") the server answers
// with a Welcome (rank = pool index, world_size = clients). A pool is handed one client
// at a time, the next one waiting in the round as soon as the last returned (a work
// queue), and trains it:
//
//   server -> pool  control  RoundStart (which client, which round)
//   server -> pool  tensors  the global weights (state_dict names and shapes)
//   pool -> server  tensors  the client's new weights      (compress "none")
//                   control  UpdatePayload: the encoded delta   (fp16, topk)
//   pool -> server  control  UpdateDone: samples, loss, timings
//
// and at the end: server -> pool shutdown. A pool whose client fails sends an error frame.

#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace quartet::trainers::federated {

inline constexpr const char* kPoolRolePrefix = "fl-pool/";

struct RoundStart {
  int64_t round = 0;
  int64_t client = 0;
  double lr = 0.0;
  double mu = 0.0;
  std::string codec = "none";
  double topk_fraction = 0.0;  // the arm's, with codec topk

  template <class Archive>
  void serialize(Archive& ar) {
    ar(round, client, lr, mu, codec, topk_fraction);
  }
};

struct UpdatePayload {
  std::vector<std::byte> bytes;

  template <class Archive>
  void save(Archive& ar) const {
    ar(cereal::make_size_tag(static_cast<cereal::size_type>(bytes.size())));
    ar(cereal::binary_data(bytes.data(), bytes.size()));
  }
  template <class Archive>
  void load(Archive& ar) {
    cereal::size_type size = 0;
    ar(cereal::make_size_tag(size));  // the bounded archive checks size against the payload
    bytes.resize(static_cast<size_t>(size));
    ar(cereal::binary_data(bytes.data(), bytes.size()));
  }
};

struct UpdateDone {
  int64_t round = 0;
  int64_t client = 0;
  int64_t samples = 0;            // the client's partition size: its FedAvg weight
  int64_t samples_processed = 0;  // this round
  int64_t steps = 0;
  double loss = 0.0;
  double forward = 0.0, backward = 0.0, optimizer = 0.0, data = 0.0;  // seconds
  double upload = 0.0;  // sending the weights or payload frame, seconds

  template <class Archive>
  void serialize(Archive& ar) {
    ar(round, client, samples, samples_processed, steps, loss, forward, backward, optimizer, data, upload);
  }
};

}  // namespace quartet::trainers::federated
