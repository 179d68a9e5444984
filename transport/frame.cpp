#include "transport/frame.h"

#include <array>
#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace quartet::transport {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian; a big-endian port must swap here");

bool is_known_message_type(uint16_t type) {
  switch (static_cast<MessageType>(type)) {
    case MessageType::hello:
    case MessageType::welcome:
    case MessageType::error:
    case MessageType::heartbeat:
    case MessageType::kv_set:
    case MessageType::kv_get:
    case MessageType::kv_value:
    case MessageType::step_record:
    case MessageType::shutdown:
    case MessageType::tensors:
    case MessageType::control:
      return true;
  }
  return false;
}

const char* message_type_name(MessageType type) {
  switch (type) {
    case MessageType::hello: return "hello";
    case MessageType::welcome: return "welcome";
    case MessageType::error: return "error";
    case MessageType::heartbeat: return "heartbeat";
    case MessageType::kv_set: return "kv_set";
    case MessageType::kv_get: return "kv_get";
    case MessageType::kv_value: return "kv_value";
    case MessageType::step_record: return "step_record";
    case MessageType::shutdown: return "shutdown";
    case MessageType::tensors: return "tensors";
    case MessageType::control: return "control";
  }
  return "unknown";
}

namespace {

// Reflected Castagnoli polynomial.
constexpr uint32_t kCrc32cPoly = 0x82F63B78u;

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kCrc32cPoly : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

void put_u16(std::byte* p, uint16_t v) { std::memcpy(p, &v, 2); }
void put_u32(std::byte* p, uint32_t v) { std::memcpy(p, &v, 4); }
uint16_t get_u16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint32_t get_u32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void write_header(MessageType type, size_t length, uint32_t crc, std::byte (&out)[kFrameHeaderBytes]) {
  if (length > std::numeric_limits<uint32_t>::max())
    throw std::invalid_argument("frame payload of " + std::to_string(length) +
                                " bytes does not fit the 32-bit length field; split it");
  put_u32(out + 0, kFrameMagic);
  put_u16(out + 4, kProtocolVersion);
  put_u16(out + 6, static_cast<uint16_t>(type));
  put_u32(out + 8, static_cast<uint32_t>(length));
  put_u32(out + 12, crc);
}

}  // namespace

namespace detail {
uint32_t crc32c_portable(std::span<const std::byte> data, uint32_t crc) {
  crc = ~crc;
  for (std::byte b : data) crc = kCrcTable[(crc ^ static_cast<uint8_t>(b)) & 0xFF] ^ (crc >> 8);
  return ~crc;
}
}  // namespace detail

uint32_t crc32c(std::span<const std::byte> data, uint32_t crc) {
#if defined(__SSE4_2__)
  const std::byte* p = data.data();
  size_t n = data.size();
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n > 0) {
    c32 = _mm_crc32_u8(c32, static_cast<uint8_t>(*p));
    ++p;
    --n;
  }
  return ~c32;
#else
  return detail::crc32c_portable(data, crc);
#endif
}

void encode_header(MessageType type, std::span<const std::byte> payload, std::byte (&out)[kFrameHeaderBytes]) {
  write_header(type, payload.size(), crc32c(payload), out);
}

void encode_header(MessageType type, std::span<const std::span<const std::byte>> pieces,
                   std::byte (&out)[kFrameHeaderBytes]) {
  size_t length = 0;
  uint32_t crc = 0;
  for (const auto& piece : pieces) {
    length += piece.size();
    crc = crc32c(piece, crc);
  }
  write_header(type, length, crc, out);
}

FrameHeader decode_header(std::span<const std::byte, kFrameHeaderBytes> bytes, uint32_t max_length) {
  const std::byte* p = bytes.data();
  const uint32_t magic = get_u32(p + 0);
  if (magic != kFrameMagic) {
    char text[80];
    std::snprintf(text, sizeof text, "bad frame magic 0x%08x (expected 0x%08x, \"QRTT\")", magic, kFrameMagic);
    throw FrameError(text);
  }
  const uint16_t version = get_u16(p + 4);
  if (version != kProtocolVersion)
    throw FrameError("unsupported protocol version " + std::to_string(version) + " (this build speaks " +
                     std::to_string(kProtocolVersion) + ")");
  const uint16_t type = get_u16(p + 6);
  if (!is_known_message_type(type)) throw FrameError("unknown message type " + std::to_string(type));
  const uint32_t length = get_u32(p + 8);
  if (length > max_length)
    throw FrameError("frame length " + std::to_string(length) + " bytes is over the limit of " +
                     std::to_string(max_length) + " bytes (" +
                     message_type_name(static_cast<MessageType>(type)) + " frame)");
  return FrameHeader{static_cast<MessageType>(type), length, get_u32(p + 12)};
}

void check_payload(const FrameHeader& header, std::span<const std::byte> payload) {
  if (payload.size() != header.length)
    throw FrameError("payload of " + std::to_string(payload.size()) + " bytes, header says " +
                     std::to_string(header.length));
  const uint32_t crc = crc32c(payload);
  if (crc != header.crc) {
    char text[120];
    std::snprintf(text, sizeof text, "CRC mismatch on a %s frame of %u bytes: header 0x%08x, payload 0x%08x",
                  message_type_name(header.type), header.length, header.crc, crc);
    throw FrameError(text);
  }
}

}  // namespace quartet::transport
