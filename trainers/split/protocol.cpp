#include "trainers/split/protocol.h"


namespace quartet::trainers::split {

using transport::MessageError;
using transport::MessageType;

void send_engine_tensors(transport::Connection& conn, const engine::TensorList& tensors, const std::string& name,
                         transport::Deadline timeout) {
  std::vector<std::string> names;
  names.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) names.push_back(name + std::to_string(i));
  std::vector<engine::HostValues> host;
  host.reserve(tensors.size());
  std::vector<transport::TensorRef> refs;
  for (size_t i = 0; i < tensors.size(); ++i) {
    host.emplace_back(tensors[i]);
    refs.push_back({names[i], tensors[i].shape(), host.back().span()});
  }
  transport::send_tensors(conn, refs, timeout);
}

engine::TensorList receive_engine_tensors(transport::Connection& conn, transport::Deadline timeout, size_t max_tensors,
                                          const engine::Device& device, const engine::TensorList& like) {
  transport::Frame frame = conn.receive(timeout);
  transport::expect_type(frame, MessageType::tensors, conn.peer());
  transport::TensorsMessage m = transport::decode_tensors(frame.payload);
  frame.payload = {};
  if (m.data.empty()) throw MessageError("split: a tensors message with no tensor from " + conn.peer());
  if (m.data.size() > max_tensors)
    throw MessageError("split: " + std::to_string(m.data.size()) + " tensors from " + conn.peer() + ", at most " +
                       std::to_string(max_tensors) + " expected");
  if (!like.empty() && like.size() != m.data.size())
    throw MessageError("split: " + std::to_string(m.data.size()) + " tensors from " + conn.peer() + ", expected " +
                       std::to_string(like.size()));
  engine::TensorList out;
  for (size_t i = 0; i < m.data.size(); ++i) {
    if (m.shapes[i].empty() || m.shapes[i].size() > static_cast<size_t>(engine::kMaxDims))
      throw MessageError("split: tensor " + m.names[i] + " from " + conn.peer() + " has " +
                         std::to_string(m.shapes[i].size()) + " dims, expected 1 to " +
                         std::to_string(engine::kMaxDims));
    if (!like.empty() && like[i].shape() != m.shapes[i])
      throw MessageError("split: tensor " + m.names[i] + " from " + conn.peer() + " is " +
                         engine::shape_str(m.shapes[i]) + ", expected " + engine::shape_str(like[i].shape()));
    out.push_back(engine::Tensor::from_vector(m.shapes[i], m.data[i]).to(device));
    m.data[i] = {};
  }
  return out;
}

void check_like(const engine::TensorList& got, const engine::TensorList& like, const std::string& peer) {
  if (got.size() != like.size())
    throw MessageError("split: " + std::to_string(got.size()) + " tensors from " + peer + ", expected " +
                       std::to_string(like.size()));
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i].shape() != like[i].shape())
      throw MessageError("split: tensor " + std::to_string(i) + " from " + peer + " is " +
                         engine::shape_str(got[i].shape()) + ", expected " + engine::shape_str(like[i].shape()));
}

void send_state(transport::Connection& conn, const engine::NamedTensors& state, transport::Deadline timeout) {
  std::vector<engine::HostValues> host;
  host.reserve(state.size());
  std::vector<transport::TensorRef> refs;
  for (const auto& [name, t] : state) {
    host.emplace_back(t);
    refs.push_back({name, t.shape(), host.back().span()});
  }
  transport::send_tensors(conn, refs, timeout);
}

void receive_state(transport::Connection& conn, engine::NamedTensors& into, transport::Deadline timeout) {
  transport::Frame frame = conn.receive(timeout);
  transport::expect_type(frame, MessageType::tensors, conn.peer());
  const transport::TensorsMessage m = transport::decode_tensors(frame.payload);
  if (m.names.size() != into.size())
    throw MessageError("split: a client half of " + std::to_string(m.names.size()) + " tensors from " + conn.peer() +
                       ", expected " + std::to_string(into.size()));
  for (size_t i = 0; i < into.size(); ++i) {
    engine::Tensor& t = into[i].second;
    if (m.names[i] != into[i].first || m.shapes[i] != t.shape())
      throw MessageError("split: client half tensor " + m.names[i] + " " + engine::shape_str(m.shapes[i]) + " from " +
                         conn.peer() + ", expected " + into[i].first + " " + engine::shape_str(t.shape()));
  }
  for (size_t i = 0; i < into.size(); ++i) into[i].second.copy_from_host(m.data[i]);
}

}  // namespace quartet::trainers::split
