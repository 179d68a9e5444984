#pragma once

// Wire frames: every message on a Quartet connection is one frame.
//   offset 0  u32 magic   "QRTT" (0x54545251 little-endian)
//   offset 4  u16 version kProtocolVersion
//   offset 6  u16 type    a MessageType
//   offset 8  u32 length  payload bytes that follow the header
//   offset 12 u32 crc     CRC32C of the payload
// All fields little-endian. A header is checked (magic, version, known type, length
// within the receiver's limit) before any payload memory is allocated.

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

namespace quartet::transport {

inline constexpr uint32_t kFrameMagic = 0x54545251;  // "QRTT"
inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 16;
inline constexpr uint32_t kDefaultMaxFrameBytes = 256u << 20;  // 256 MiB

// What a frame carries. Values are part of the protocol; append only.
enum class MessageType : uint16_t {
  hello = 1,        // client -> server: token, role; first frame of every connection
  welcome = 2,      // server -> client: accepted (rank, settings)
  error = 3,        // either way: a message, then the sender closes
  heartbeat = 4,
  kv_set = 10,      // coordinator key-value store (collective bootstrap)
  kv_get = 11,
  kv_value = 12,
  step_record = 20, // a role's JSON step record for the coordinator to write
  shutdown = 21,
  tensors = 30,     // a cereal header and raw float buffers (weights, activations, grads)
  control = 31,     // regime-specific control messages (cereal)
};
bool is_known_message_type(uint16_t type);
const char* message_type_name(MessageType type);

// A malformed or hostile frame. The connection that produced it is closed.
class FrameError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct FrameHeader {
  MessageType type = MessageType::hello;
  uint32_t length = 0;
  uint32_t crc = 0;
};

// CRC32C (Castagnoli), hardware-accelerated where the build targets SSE4.2.
// Chains: crc32c(b, crc32c(a)) == crc32c(a followed by b).
uint32_t crc32c(std::span<const std::byte> data, uint32_t crc = 0);

namespace detail {
// The table-driven CRC32C that crc32c() uses without SSE4.2; tests compare the two.
uint32_t crc32c_portable(std::span<const std::byte> data, uint32_t crc = 0);
}  // namespace detail

// Writes the 16 header bytes for `payload` (which is CRC'd) into `out`.
void encode_header(MessageType type, std::span<const std::byte> payload, std::byte (&out)[kFrameHeaderBytes]);
// Same, for a payload given as consecutive pieces (header + raw buffers, no copy).
void encode_header(MessageType type, std::span<const std::span<const std::byte>> pieces,
                   std::byte (&out)[kFrameHeaderBytes]);

// Parses and checks a header; throws FrameError naming what is wrong (bad magic,
// version, unknown type, length over max_length).
FrameHeader decode_header(std::span<const std::byte, kFrameHeaderBytes> bytes, uint32_t max_length);

// Checks the payload against the header's CRC; throws FrameError on mismatch.
void check_payload(const FrameHeader& header, std::span<const std::byte> payload);

}  // namespace quartet::transport
