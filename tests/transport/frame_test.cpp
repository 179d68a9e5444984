#include "transport/frame.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/transport/net_helpers.h"

namespace quartet::transport {
namespace {

using ::testing::HasSubstr;
using testing::bytes_of;
using testing::frame_bytes;
using testing::patch;

std::span<const std::byte, kFrameHeaderBytes> header_of(const std::vector<std::byte>& frame) {
  return std::span<const std::byte, kFrameHeaderBytes>(frame.data(), kFrameHeaderBytes);
}

std::string decode_error(const std::vector<std::byte>& frame, uint32_t max_length = kDefaultMaxFrameBytes) {
  try {
    decode_header(header_of(frame), max_length);
  } catch (const FrameError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Crc32c, MatchesTheStandardCheckValue) {
  EXPECT_EQ(crc32c(bytes_of("123456789")), 0xE3069283u);
  EXPECT_EQ(detail::crc32c_portable(bytes_of("123456789")), 0xE3069283u);
}

TEST(Crc32c, OfNothingIsZero) { EXPECT_EQ(crc32c({}), 0u); }

TEST(Crc32c, FastAndTablePathsAgreeOnEveryLengthAndOffset) {
  std::mt19937 rng(7);
  std::vector<std::byte> data(1100);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  for (size_t offset = 0; offset < 9; ++offset)
    for (size_t length = 0; length + offset <= data.size(); length += 1 + length / 7) {
      const std::span<const std::byte> piece(data.data() + offset, length);
      ASSERT_EQ(crc32c(piece), detail::crc32c_portable(piece)) << "offset " << offset << " length " << length;
    }
}

TEST(Crc32c, ChainsAcrossPieces) {
  const auto whole = bytes_of("the quick brown fox jumps over the lazy dog");
  const std::span<const std::byte> all(whole);
  EXPECT_EQ(crc32c(all.subspan(13), crc32c(all.first(13))), crc32c(all));
}

TEST(FrameHeader, RoundTripsTypeLengthAndCrc) {
  const auto payload = bytes_of("hello, frame");
  const auto frame = frame_bytes(MessageType::kv_set, payload);
  const FrameHeader header = decode_header(header_of(frame), kDefaultMaxFrameBytes);
  EXPECT_EQ(header.type, MessageType::kv_set);
  EXPECT_EQ(header.length, payload.size());
  EXPECT_EQ(header.crc, crc32c(payload));
  EXPECT_NO_THROW(check_payload(header, payload));
}

TEST(FrameHeader, IsLittleEndianMagicVersionTypeLengthCrc) {
  const auto payload = bytes_of("abc");
  const auto frame = frame_bytes(MessageType::tensors, payload);
  ASSERT_EQ(frame.size(), kFrameHeaderBytes + 3);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(frame.data()), 4), "QRTT");
  EXPECT_EQ(static_cast<uint8_t>(frame[4]), kProtocolVersion);
  EXPECT_EQ(static_cast<uint8_t>(frame[6]), 30);  // tensors
  EXPECT_EQ(static_cast<uint8_t>(frame[8]), 3);   // length
  EXPECT_EQ(static_cast<uint8_t>(frame[9]), 0);
}

TEST(FrameHeader, FromPiecesEqualsFromTheConcatenation) {
  const auto a = bytes_of("first piece, ");
  const auto b = bytes_of("");
  const auto c = bytes_of("third piece");
  std::vector<std::byte> all(a);
  all.insert(all.end(), c.begin(), c.end());
  const std::span<const std::byte> pieces[] = {a, b, c};
  std::byte from_pieces[kFrameHeaderBytes];
  std::byte from_all[kFrameHeaderBytes];
  encode_header(MessageType::control, pieces, from_pieces);
  encode_header(MessageType::control, all, from_all);
  EXPECT_EQ(0, std::memcmp(from_pieces, from_all, kFrameHeaderBytes));
}

TEST(FrameHeader, EmptyPayloadIsValid) {
  const auto frame = frame_bytes(MessageType::heartbeat, {});
  const FrameHeader header = decode_header(header_of(frame), 0);
  EXPECT_EQ(header.length, 0u);
  EXPECT_NO_THROW(check_payload(header, {}));
}

TEST(FrameHeader, BadMagicIsRefused) {
  auto frame = frame_bytes(MessageType::hello, bytes_of("x"));
  patch<uint32_t>(frame, 0, 0x50545448);  // "HTTP"
  EXPECT_THAT(decode_error(frame), HasSubstr("bad frame magic"));
}

TEST(FrameHeader, OtherProtocolVersionIsRefused) {
  auto frame = frame_bytes(MessageType::hello, bytes_of("x"));
  patch<uint16_t>(frame, 4, 7);
  EXPECT_THAT(decode_error(frame), HasSubstr("unsupported protocol version 7"));
}

TEST(FrameHeader, UnknownTypeIsRefused) {
  auto frame = frame_bytes(MessageType::hello, bytes_of("x"));
  patch<uint16_t>(frame, 6, 999);
  EXPECT_THAT(decode_error(frame), HasSubstr("unknown message type 999"));
}

TEST(FrameHeader, LengthOverTheLimitIsRefused) {
  auto frame = frame_bytes(MessageType::tensors, bytes_of("x"));
  patch<uint32_t>(frame, 8, 0xFFFFFFFFu);  // 4 GiB - 1
  EXPECT_THAT(decode_error(frame), HasSubstr("frame length 4294967295 bytes is over the limit of 268435456"));
}

TEST(FrameHeader, LengthAtTheLimitIsAccepted) {
  auto frame = frame_bytes(MessageType::tensors, bytes_of("x"));
  patch<uint32_t>(frame, 8, 1000u);
  EXPECT_EQ(decode_header(header_of(frame), 1000).length, 1000u);
}

TEST(FrameHeader, CrcMismatchIsRefused) {
  const auto frame = frame_bytes(MessageType::kv_value, bytes_of("payload"));
  const FrameHeader header = decode_header(header_of(frame), kDefaultMaxFrameBytes);
  try {
    check_payload(header, bytes_of("paylaod"));
    FAIL() << "a corrupted payload passed the CRC check";
  } catch (const FrameError& e) {
    EXPECT_THAT(e.what(), HasSubstr("CRC mismatch"));
  }
}

TEST(FrameHeader, PayloadOfTheWrongSizeIsRefused) {
  const auto frame = frame_bytes(MessageType::kv_value, bytes_of("payload"));
  const FrameHeader header = decode_header(header_of(frame), kDefaultMaxFrameBytes);
  EXPECT_THROW(check_payload(header, bytes_of("pay")), FrameError);
}

TEST(MessageTypes, EveryKnownTypeHasAName) {
  for (uint16_t t = 0; t < 100; ++t)
    if (is_known_message_type(t)) {
      EXPECT_STRNE(message_type_name(static_cast<MessageType>(t)), "unknown");
    }
  EXPECT_FALSE(is_known_message_type(0));
  EXPECT_TRUE(is_known_message_type(30));
}

}  // namespace
}  // namespace quartet::transport
