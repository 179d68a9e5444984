#include "transport/messages.h"

#include <limits>
#include <stdexcept>

namespace quartet::transport {

void expect_type(const Frame& frame, MessageType expected, const std::string& peer) {
  if (frame.type == expected) return;
  if (frame.type == MessageType::error && expected != MessageType::error) {
    std::string text;
    try {
      text = decode_message<ErrorMessage>(frame.payload).text;
    } catch (const MessageError&) {
      text = "(a malformed error message)";
    }
    throw RemoteError(peer, text);
  }
  throw MessageError(std::string("expected a ") + message_type_name(expected) + " frame from " + peer + ", got " +
                     message_type_name(frame.type));
}

void send_error_and_close(Connection& connection, const std::string& text, Deadline timeout) {
  try {
    send_message(connection, MessageType::error, ErrorMessage{text}, timeout);
  } catch (const std::exception&) {
    // The peer is gone or not reading; closing is all that is left to do.
  }
  connection.close();
}

namespace {

constexpr size_t kDataAlignment = 8;

size_t padded(size_t n) { return (n + kDataAlignment - 1) / kDataAlignment * kDataAlignment; }

// Products of sizes; refuses a negative size or too many dims.
size_t checked_numel(std::string_view name, std::span<const int64_t> shape) {
  if (shape.size() > kMaxTensorDims)
    throw std::invalid_argument("tensor \"" + std::string(name) + "\": " + std::to_string(shape.size()) +
                                " dims, at most " + std::to_string(kMaxTensorDims));
  bool has_zero = false;
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("tensor \"" + std::string(name) + "\": negative size " + std::to_string(d));
    has_zero = has_zero || d == 0;
  }
  if (has_zero) return 0;  // whatever the other sizes are, as decode_tensors has it
  size_t numel = 1;
  for (int64_t d : shape) {
    if (numel > std::numeric_limits<size_t>::max() / static_cast<size_t>(d))
      throw std::invalid_argument("tensor \"" + std::string(name) + "\": shape overflows");
    numel *= static_cast<size_t>(d);
  }
  return numel;
}

// Writes the header in the byte format of cereal's vector<string> and
// vector<vector<int64_t>>, which decode_tensors reads with cereal's own loaders.
template <class Archive>
void write_tensors_header(Archive& ar, std::span<const TensorRef> tensors) {
  ar(cereal::make_size_tag(static_cast<cereal::size_type>(tensors.size())));
  for (const auto& t : tensors) {
    ar(cereal::make_size_tag(static_cast<cereal::size_type>(t.name.size())));
    ar(cereal::binary_data(t.name.data(), t.name.size()));
  }
  ar(cereal::make_size_tag(static_cast<cereal::size_type>(tensors.size())));
  for (const auto& t : tensors) {
    ar(cereal::make_size_tag(static_cast<cereal::size_type>(t.shape.size())));
    ar(cereal::binary_data(t.shape.data(), t.shape.size() * sizeof(int64_t)));
  }
}

}  // namespace

std::vector<std::span<const std::byte>> EncodedTensors::pieces() const {
  std::vector<std::span<const std::byte>> all;
  all.reserve(data.size() + 1);
  all.emplace_back(header);
  all.insert(all.end(), data.begin(), data.end());
  return all;
}

size_t EncodedTensors::size() const {
  size_t n = header.size();
  for (const auto& d : data) n += d.size();
  return n;
}

EncodedTensors encode_tensors(std::span<const TensorRef> tensors) {
  EncodedTensors out;
  for (const auto& t : tensors) {
    const size_t numel = checked_numel(t.name, t.shape);
    if (numel != t.data.size())
      throw std::invalid_argument("tensor \"" + std::string(t.name) + "\": shape holds " + std::to_string(numel) +
                                  " floats, data has " + std::to_string(t.data.size()));
    if (!t.data.empty()) out.data.push_back(std::as_bytes(t.data));
  }
  detail::SpanOutputArchive counter;
  write_tensors_header(counter, tensors);
  out.header.assign(padded(counter.size()), std::byte{0});
  detail::SpanOutputArchive writer(std::span<std::byte>(out.header.data(), counter.size()));
  write_tensors_header(writer, tensors);
  return out;
}

EncodedTensors encode_tensors(const TensorsMessage& message) {
  if (message.names.size() != message.shapes.size() || message.names.size() != message.data.size())
    throw std::invalid_argument("TensorsMessage: " + std::to_string(message.names.size()) + " names, " +
                                std::to_string(message.shapes.size()) + " shapes, " +
                                std::to_string(message.data.size()) + " data buffers; they must agree");
  std::vector<TensorRef> refs;
  refs.reserve(message.names.size());
  for (size_t i = 0; i < message.names.size(); ++i)
    refs.push_back(TensorRef{message.names[i], message.shapes[i], message.data[i]});
  return encode_tensors(refs);
}

TensorsMessage decode_tensors(std::span<const std::byte> payload) {
  TensorsMessage message;
  detail::BoundedInputArchive archive(payload);
  try {
    archive(message.names, message.shapes);
  } catch (const MessageError& e) {
    throw MessageError(std::string("tensors header: ") + e.what());
  } catch (const cereal::Exception& e) {
    throw MessageError(std::string("tensors header: ") + e.what());
  }
  if (message.names.size() != message.shapes.size())
    throw MessageError("tensors header: " + std::to_string(message.names.size()) + " names but " +
                       std::to_string(message.shapes.size()) + " shapes");
  const size_t data_offset = padded(archive.position());
  if (data_offset > payload.size())
    throw MessageError("tensors payload: " + std::to_string(payload.size()) + " bytes, too short for its header");
  for (size_t i = archive.position(); i < data_offset; ++i)
    if (payload[i] != std::byte{0}) throw MessageError("tensors header: non-zero padding");
  const size_t data_bytes = payload.size() - data_offset;
  if (data_bytes % sizeof(float) != 0)
    throw MessageError("tensors data: " + std::to_string(data_bytes) + " bytes is not a whole number of floats");
  const size_t floats_available = data_bytes / sizeof(float);

  std::vector<size_t> numels(message.shapes.size());
  size_t total = 0;
  for (size_t i = 0; i < message.shapes.size(); ++i) {
    const auto& shape = message.shapes[i];
    const std::string& name = message.names[i];
    if (shape.size() > kMaxTensorDims)
      throw MessageError("tensor \"" + name + "\": " + std::to_string(shape.size()) + " dims, at most " +
                         std::to_string(kMaxTensorDims));
    bool has_zero = false;
    for (int64_t d : shape) {
      if (d < 0) throw MessageError("tensor \"" + name + "\": negative size " + std::to_string(d));
      has_zero = has_zero || d == 0;
    }
    size_t numel = has_zero ? 0 : 1;
    if (!has_zero) {
      for (int64_t d : shape) {
        // Bounded by what the payload holds, so the product cannot overflow either.
        if (static_cast<uint64_t>(d) > floats_available / numel)
          throw MessageError("tensor \"" + name + "\": its shape needs more floats than the " +
                             std::to_string(floats_available) + " in the payload");
        numel *= static_cast<size_t>(d);
      }
    }
    if (numel > floats_available - total)
      throw MessageError("tensors data: shapes need more than the " + std::to_string(floats_available) +
                         " floats in the payload (at tensor \"" + name + "\")");
    total += numel;
    numels[i] = numel;
  }
  if (total != floats_available)
    throw MessageError("tensors data: the shapes hold " + std::to_string(total) + " floats, the payload " +
                       std::to_string(floats_available));

  message.data.resize(numels.size());
  const std::byte* p = payload.data() + data_offset;
  for (size_t i = 0; i < numels.size(); ++i) {
    message.data[i].resize(numels[i]);
    if (numels[i] > 0) std::memcpy(message.data[i].data(), p, numels[i] * sizeof(float));
    p += numels[i] * sizeof(float);
  }
  return message;
}

void send_tensors(Connection& connection, std::span<const TensorRef> tensors, Deadline timeout) {
  const EncodedTensors encoded = encode_tensors(tensors);
  const auto pieces = encoded.pieces();
  connection.send(MessageType::tensors, pieces, timeout);
}

}  // namespace quartet::transport
