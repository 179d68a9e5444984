#pragma once

// What frames carry. Small messages are cereal structs in cereal's binary format
// (transport/archive.h: written into a pre-sized buffer, read with every size field
// checked against the bytes that remain). Tensors travel as raw float buffers behind a
// small cereal header, so weights and activations are sent without a copy.
//
// tensors payload:
//   cereal header: names (vector<string>), shapes (vector<vector<int64>>)
//   zero padding up to the next multiple of 8 bytes
//   the tensors' float32 data, one after another, little-endian, row-major

#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "transport/archive.h"
#include "transport/connection.h"
#include "transport/frame.h"

namespace quartet::transport {

// The peer sent an error frame (ErrorMessage): what() is "PEER reported: TEXT".
class RemoteError : public std::runtime_error {
 public:
  RemoteError(const std::string& peer, std::string text)
      : std::runtime_error(peer + " reported: " + text), text_(std::move(text)) {}
  // The peer's own words.
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// client -> server, the first frame of every connection (MessageType::hello).
struct Hello {
  std::string token;  // the run's token (make_token)
  std::string role;   // who is calling: "rank", "server", "client", ...
  uint16_t protocol_version = kProtocolVersion;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(token, role, protocol_version);
  }
};

// server -> client once the hello is accepted (MessageType::welcome).
struct Welcome {
  int32_t rank = 0;
  int32_t world_size = 0;
  std::string settings_json;  // role settings as a JSON document

  template <class Archive>
  void serialize(Archive& ar) {
    ar(rank, world_size, settings_json);
  }
};

// Either way, just before the sender closes (MessageType::error).
struct ErrorMessage {
  std::string text;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(text);
  }
};

// An error whose text starts with this refuses a connection for now only: the server
// had too many connections yet to say hello and closed this one to make room. Trying
// again shortly is the right answer (CoordinatorClient does, until its timeout).
inline constexpr std::string_view kBusyRefusal = "busy: ";

// Key-value store traffic (kv_set: key and value; kv_get: key; kv_value: the answer).
struct KeyValue {
  std::string key;
  std::vector<std::byte> value;

  template <class Archive>
  void save(Archive& ar) const {
    ar(key, cereal::make_size_tag(static_cast<cereal::size_type>(value.size())));
    ar(cereal::binary_data(value.data(), value.size()));
  }
  template <class Archive>
  void load(Archive& ar) {
    cereal::size_type size = 0;
    ar(key, cereal::make_size_tag(size));  // checked against the payload before resize
    value.resize(static_cast<size_t>(size));
    ar(cereal::binary_data(value.data(), value.size()));
  }
};

// The cereal form of a message, written once into a buffer of exactly its size.
template <class T>
std::vector<std::byte> encode_message(const T& message) {
  detail::SpanOutputArchive counter;
  counter(message);
  std::vector<std::byte> bytes(counter.size());
  detail::SpanOutputArchive writer(bytes);
  writer(message);
  return bytes;
}

// Decodes a payload from the network.
// ensures memory allocated is at most a small multiple of payload.size()
// throws MessageError naming the problem: a size field past the end, a payload too
// short, or bytes left over.
template <class T>
T decode_message(std::span<const std::byte> payload) {
  detail::BoundedInputArchive archive(payload);
  T message{};
  try {
    archive(message);
  } catch (const MessageError&) {
    throw;
  } catch (const cereal::Exception& e) {
    throw MessageError(std::string("malformed message: ") + e.what());
  }
  if (archive.remaining() != 0)
    throw MessageError("malformed message: " + std::to_string(archive.remaining()) + " bytes left over after " +
                       std::to_string(archive.position()));
  return message;
}

template <class T>
void send_message(Connection& connection, MessageType type, const T& message, Deadline timeout) {
  const auto bytes = encode_message(message);
  connection.send(type, bytes, timeout);
}

// A frame that arrived: throws RemoteError (with the peer's text) if it is an error
// frame, MessageError if it is not of type `expected`.
void expect_type(const Frame& frame, MessageType expected, const std::string& peer);

// Receives one frame that must be of type `expected` and decodes it.
// throws RemoteError when the peer sent an error frame instead, MessageError (and
// closes the connection) when another type came or the payload is malformed, and
// whatever Connection::receive throws.
template <class T>
T receive_message(Connection& connection, MessageType expected, Deadline timeout) {
  Frame frame = connection.receive(timeout);
  try {
    expect_type(frame, expected, connection.peer());
    return decode_message<T>(frame.payload);
  } catch (const MessageError&) {
    connection.close();
    throw;
  }
}

// Sends an ErrorMessage with `text`, best effort (a peer that is gone or not reading
// is ignored), then closes the connection.
void send_error_and_close(Connection& connection, const std::string& text, Deadline timeout);

// ---------------------------------------------------------------------------------
// Tensors

inline constexpr size_t kMaxTensorDims = 8;

// A tensor to send, viewed in place: data.size() must be the product of shape.
struct TensorRef {
  std::string_view name;
  std::span<const int64_t> shape;
  std::span<const float> data;
};

// A tensors message as received: data[i] holds the product of shapes[i] floats.
struct TensorsMessage {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<float>> data;
};

// A tensors payload ready to send: the header is owned, the data are views of the
// caller's buffers (which must outlive the send).
struct EncodedTensors {
  std::vector<std::byte> header;                 // cereal names and shapes + padding
  std::vector<std::span<const std::byte>> data;  // one view per non-empty tensor
  // header followed by data, for Connection::send (a gather write, no copy).
  std::vector<std::span<const std::byte>> pieces() const;
  size_t size() const;  // payload bytes
};

// throws std::invalid_argument naming the tensor whose data size does not match its
// shape, whose shape has a negative size or more than kMaxTensorDims dims.
EncodedTensors encode_tensors(std::span<const TensorRef> tensors);
// Views into `message`, which must outlive the result.
EncodedTensors encode_tensors(const TensorsMessage& message);

// Decodes a tensors payload from the network.
// ensures every count is checked before anything is allocated for it: names and shapes
// agree in number, shapes have at most kMaxTensorDims non-negative sizes, and the data
// section is exactly 4 * (sum of the products) bytes
// throws MessageError naming the first problem.
TensorsMessage decode_tensors(std::span<const std::byte> payload);

void send_tensors(Connection& connection, std::span<const TensorRef> tensors, Deadline timeout);

}  // namespace quartet::transport
