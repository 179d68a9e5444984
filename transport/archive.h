#pragma once

// cereal archives for messages that arrive from the network. The byte format is
// cereal's binary format (little-endian scalars, 64-bit size tags), but:
//   - SpanOutputArchive writes into a buffer sized by a first, counting pass, so a large
//     message is written once, never regrown or copied out of a stream;
//   - BoundedInputArchive reads from a span and refuses any size tag larger than the
//     bytes that remain *before* cereal's loaders resize a container to it, so a hostile
//     count costs at most a small multiple of the payload it came in.

#include <cereal/cereal.hpp>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include "transport/frame.h"

namespace quartet::transport {

// A payload that does not decode as the message it claims to be.
class MessageError : public FrameError {
 public:
  using FrameError::FrameError;
};

namespace detail {

class SpanOutputArchive : public cereal::OutputArchive<SpanOutputArchive, cereal::AllowEmptyClassElision> {
 public:
  // Counts only.
  SpanOutputArchive() : OutputArchive(this) {}
  // Writes into `out`, which must be exactly as large as the counting pass said.
  explicit SpanOutputArchive(std::span<std::byte> out) : OutputArchive(this), out_(out.data()), capacity_(out.size()) {}

  void saveBinary(const void* data, std::size_t size) {
    if (out_ != nullptr && size > 0) {
      if (size > capacity_ - size_) throw std::logic_error("SpanOutputArchive: buffer smaller than the message");
      std::memcpy(out_ + size_, data, size);
    }
    size_ += size;
  }
  std::size_t size() const { return size_; }

 private:
  std::byte* out_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t size_ = 0;
};

class BoundedInputArchive : public cereal::InputArchive<BoundedInputArchive, cereal::AllowEmptyClassElision> {
 public:
  explicit BoundedInputArchive(std::span<const std::byte> in) : InputArchive(this), in_(in) {}

  void loadBinary(void* data, std::size_t size) {
    if (size > remaining())
      throw MessageError("message truncated: " + std::to_string(size) + " bytes wanted at offset " +
                         std::to_string(position_) + ", " + std::to_string(remaining()) + " left");
    if (size > 0) std::memcpy(data, in_.data() + position_, size);
    position_ += size;
  }
  std::size_t position() const { return position_; }
  std::size_t remaining() const { return in_.size() - position_; }

 private:
  std::span<const std::byte> in_;
  std::size_t position_ = 0;
};

template <class T>
std::enable_if_t<std::is_arithmetic_v<T>> CEREAL_SAVE_FUNCTION_NAME(SpanOutputArchive& ar, const T& t) {
  ar.saveBinary(std::addressof(t), sizeof(t));
}

template <class T>
std::enable_if_t<std::is_arithmetic_v<T>> CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, T& t) {
  ar.loadBinary(std::addressof(t), sizeof(t));
}

template <class Archive, class T>
CEREAL_ARCHIVE_RESTRICT(BoundedInputArchive, SpanOutputArchive)
CEREAL_SERIALIZE_FUNCTION_NAME(Archive& ar, cereal::NameValuePair<T>& t) {
  ar(t.value);
}

template <class T>
void CEREAL_SAVE_FUNCTION_NAME(SpanOutputArchive& ar, const cereal::SizeTag<T>& t) {
  ar(t.size);
}

// Every element of a container takes at least one byte on the wire, so a count larger
// than what remains is a lie; refuse it before the container is resized to it.
template <class T>
void CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, cereal::SizeTag<T>& t) {
  ar(t.size);
  if (t.size > ar.remaining())
    throw MessageError("size field " + std::to_string(t.size) + " at offset " +
                       std::to_string(ar.position() - sizeof(t.size)) + " is larger than the " +
                       std::to_string(ar.remaining()) + " bytes that remain");
}

template <class T>
void CEREAL_SAVE_FUNCTION_NAME(SpanOutputArchive& ar, const cereal::BinaryData<T>& bd) {
  ar.saveBinary(bd.data, static_cast<std::size_t>(bd.size));
}

template <class T>
void CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, cereal::BinaryData<T>& bd) {
  ar.loadBinary(bd.data, static_cast<std::size_t>(bd.size));
}

}  // namespace detail
}  // namespace quartet::transport

CEREAL_REGISTER_ARCHIVE(quartet::transport::detail::SpanOutputArchive)
CEREAL_REGISTER_ARCHIVE(quartet::transport::detail::BoundedInputArchive)
CEREAL_SETUP_ARCHIVE_TRAITS(quartet::transport::detail::BoundedInputArchive,
                            quartet::transport::detail::SpanOutputArchive)
