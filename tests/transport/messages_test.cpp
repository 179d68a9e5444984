#include "transport/messages.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cereal/archives/binary.hpp>
#include <cereal/types/tuple.hpp>
#include <sstream>
#include <thread>

#include "tests/transport/alloc_probe.h"
#include "tests/transport/net_helpers.h"

namespace quartet::transport {
namespace {

using ::testing::HasSubstr;
using testing::connected_pair;
using testing::kLongTimeout;

template <class T>
std::string decode_error(std::span<const std::byte> payload) {
  try {
    decode_message<T>(payload);
  } catch (const MessageError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string tensors_error(std::span<const std::byte> payload) {
  try {
    decode_tensors(payload);
  } catch (const MessageError& e) {
    return e.what();
  }
  return "(no error)";
}

void append_u64(std::vector<std::byte>& out, uint64_t v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + 8);
}

TEST(Messages, HelloRoundTrips) {
  const Hello hello{"0123456789abcdef0123456789abcdef", "client", kProtocolVersion};
  const Hello back = decode_message<Hello>(encode_message(hello));
  EXPECT_EQ(back.token, hello.token);
  EXPECT_EQ(back.role, "client");
  EXPECT_EQ(back.protocol_version, kProtocolVersion);
}

TEST(Messages, WelcomeRoundTrips) {
  const Welcome welcome{3, 8, R"({"lr": 0.05})"};
  const Welcome back = decode_message<Welcome>(encode_message(welcome));
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.world_size, 8);
  EXPECT_EQ(back.settings_json, welcome.settings_json);
}

TEST(Messages, ErrorMessageRoundTrips) {
  EXPECT_EQ(decode_message<ErrorMessage>(encode_message(ErrorMessage{"out of memory"})).text, "out of memory");
}

TEST(Messages, KeyValueRoundTripsBinaryValues) {
  KeyValue kv{"rank/0/address", {}};
  for (int i = 0; i < 256; ++i) kv.value.push_back(static_cast<std::byte>(i));
  const KeyValue back = decode_message<KeyValue>(encode_message(kv));
  EXPECT_EQ(back.key, kv.key);
  EXPECT_EQ(back.value, kv.value);
}

TEST(Messages, EncodingIsCerealsBinaryFormat) {
  const Welcome welcome{1, 2, "{}"};
  std::ostringstream stream;
  {
    cereal::BinaryOutputArchive archive(stream);
    archive(welcome);
  }
  const std::string expected = stream.str();
  const auto bytes = encode_message(welcome);
  ASSERT_EQ(bytes.size(), expected.size());
  EXPECT_EQ(0, std::memcmp(bytes.data(), expected.data(), bytes.size()));
}

TEST(Messages, DecoderRefusesASizeFieldLargerThanThePayloadBeforeAllocating) {
  std::vector<std::byte> payload;
  append_u64(payload, uint64_t{1} << 40);  // the token's length: 1 TiB
  payload.resize(payload.size() + 20, std::byte{'a'});
  testing::AllocationProbe probe;
  EXPECT_THAT(decode_error<Hello>(payload), HasSubstr("larger than the 20 bytes that remain"));
  EXPECT_LT(probe.largest(), 4096u);
}

TEST(Messages, DecoderRefusesAKeyValueWhoseValueSizeIsALie) {
  auto payload = encode_message(KeyValue{"k", std::vector<std::byte>(8)});
  // key: size 1 + 'k'; then the value's size field.
  const uint64_t lie = 1'000'000'000;
  std::memcpy(payload.data() + 9, &lie, 8);
  testing::AllocationProbe probe;
  EXPECT_THAT(decode_error<KeyValue>(payload), HasSubstr("size field 1000000000"));
  EXPECT_LT(probe.largest(), 4096u);
}

TEST(Messages, DecoderRefusesATruncatedPayload) {
  auto payload = encode_message(Welcome{1, 2, "settings"});
  payload.resize(payload.size() - 3);
  EXPECT_THAT(decode_error<Welcome>(payload), HasSubstr("larger than"));
  payload.resize(6);  // inside the rank/world size fields
  EXPECT_THAT(decode_error<Welcome>(payload), HasSubstr("truncated"));
}

TEST(Messages, DecoderRefusesBytesLeftOver) {
  auto payload = encode_message(ErrorMessage{"x"});
  payload.push_back(std::byte{0});
  EXPECT_THAT(decode_error<ErrorMessage>(payload), HasSubstr("1 bytes left over"));
}

TEST(Messages, ReceiveMessageDecodesTheExpectedType) {
  auto pair = connected_pair();
  send_message(*pair.client, MessageType::welcome, Welcome{2, 4, "{}"}, kLongTimeout);
  const Welcome welcome = receive_message<Welcome>(*pair.server, MessageType::welcome, kLongTimeout);
  EXPECT_EQ(welcome.rank, 2);
}

TEST(Messages, ReceiveMessageTurnsAnErrorFrameIntoRemoteError) {
  auto pair = connected_pair();
  send_error_and_close(*pair.client, "wrong token", kLongTimeout);
  try {
    receive_message<Welcome>(*pair.server, MessageType::welcome, kLongTimeout);
    FAIL() << "no RemoteError";
  } catch (const RemoteError& e) {
    EXPECT_THAT(e.what(), HasSubstr("wrong token"));
  }
}

TEST(Messages, ReceiveMessageRefusesAnotherTypeAndCloses) {
  auto pair = connected_pair();
  send_message(*pair.client, MessageType::kv_get, KeyValue{"k", {}}, kLongTimeout);
  EXPECT_THROW(receive_message<Welcome>(*pair.server, MessageType::welcome, kLongTimeout), MessageError);
  EXPECT_TRUE(pair.server->is_closed());
}

// ---------------------------------------------------------------------------------
// Tensors

struct TwoTensors {
  std::vector<int64_t> weight_shape{2, 3};
  std::vector<float> weight{1, 2, 3, 4, 5, 6};
  std::vector<int64_t> bias_shape{3};
  std::vector<float> bias{-1, 0.5f, 1e30f};
  std::vector<TensorRef> refs() const {
    return {{"fc.weight", weight_shape, weight}, {"fc.bias", bias_shape, bias}};
  }
};

TEST(Tensors, EncodingSendsTheCallersBuffersWithoutCopying) {
  const TwoTensors t;
  const auto refs = t.refs();
  const EncodedTensors encoded = encode_tensors(refs);
  ASSERT_EQ(encoded.data.size(), 2u);
  EXPECT_EQ(static_cast<const void*>(encoded.data[0].data()), static_cast<const void*>(t.weight.data()));
  EXPECT_EQ(static_cast<const void*>(encoded.data[1].data()), static_cast<const void*>(t.bias.data()));
  EXPECT_EQ(encoded.header.size() % 8, 0u);
  EXPECT_EQ(encoded.size(), encoded.header.size() + 9 * sizeof(float));
}

TEST(Tensors, RoundTripOverAConnection) {
  const TwoTensors t;
  auto pair = connected_pair();
  send_tensors(*pair.client, t.refs(), kLongTimeout);
  const Frame frame = pair.server->receive(kLongTimeout);
  ASSERT_EQ(frame.type, MessageType::tensors);
  const TensorsMessage message = decode_tensors(frame.payload);
  EXPECT_EQ(message.names, (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_EQ(message.shapes[0], t.weight_shape);
  EXPECT_EQ(message.shapes[1], t.bias_shape);
  EXPECT_EQ(message.data[0], t.weight);
  EXPECT_EQ(message.data[1], t.bias);
}

TEST(Tensors, EmptyAndScalarTensorsRoundTrip) {
  const std::vector<int64_t> empty_shape{0, 5};
  const std::vector<int64_t> scalar_shape{};
  const std::vector<float> scalar{42.0f};
  const std::vector<TensorRef> refs = {{"empty", empty_shape, {}}, {"scalar", scalar_shape, scalar}};
  const EncodedTensors encoded = encode_tensors(refs);
  std::vector<std::byte> payload;
  for (const auto& piece : encoded.pieces()) testing::append(payload, piece);
  const TensorsMessage message = decode_tensors(payload);
  EXPECT_TRUE(message.data[0].empty());
  EXPECT_EQ(message.data[1], scalar);
  EXPECT_TRUE(message.shapes[1].empty());
}

TEST(Tensors, EmptyTensorWithHugeOtherSizesRoundTrips) {
  // Found by the fuzzer: a zero size makes the tensor empty whatever the other sizes.
  const int64_t big = int64_t{1} << 62;
  TensorsMessage owned{{"e"}, {{big, big, 0}}, {{}}};
  const EncodedTensors encoded = encode_tensors(owned);
  std::vector<std::byte> payload;
  for (const auto& piece : encoded.pieces()) testing::append(payload, piece);
  EXPECT_EQ(decode_tensors(payload).shapes, owned.shapes);
}

TEST(Tensors, OwnedMessageEncodesLikeItsViews) {
  TensorsMessage owned{{"a"}, {{2}}, {{1.0f, 2.0f}}};
  const EncodedTensors encoded = encode_tensors(owned);
  std::vector<std::byte> payload;
  for (const auto& piece : encoded.pieces()) testing::append(payload, piece);
  EXPECT_EQ(decode_tensors(payload).data, owned.data);
}

TEST(Tensors, EncodingRefusesDataThatDoesNotMatchTheShape) {
  const std::vector<int64_t> shape{2, 2};
  const std::vector<float> data(3);
  const std::vector<TensorRef> refs = {{"w", shape, data}};
  EXPECT_THROW(encode_tensors(refs), std::invalid_argument);
}

std::vector<std::byte> payload_of(const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes,
                                  size_t float_count) {
  std::vector<std::byte> payload = encode_message(std::make_tuple(names, shapes));
  payload.resize((payload.size() + 7) / 8 * 8, std::byte{0});
  payload.resize(payload.size() + float_count * sizeof(float), std::byte{0});
  return payload;
}

TEST(Tensors, DecoderRefusesShapesNeedingMoreDataThanThePayloadHolds) {
  testing::AllocationProbe probe;
  EXPECT_THAT(tensors_error(payload_of({"w"}, {{1000, 1000}}, 10)), HasSubstr("needs more floats than the 10"));
  EXPECT_LT(probe.largest(), 4096u);
}

TEST(Tensors, DecoderRefusesShapesWhoseProductWouldOverflow) {
  const int64_t big = int64_t{1} << 40;
  EXPECT_THAT(tensors_error(payload_of({"w"}, {{big, big, big}}, 4)), HasSubstr("needs more floats"));
}

TEST(Tensors, DecoderRefusesDataLeftOver) {
  EXPECT_THAT(tensors_error(payload_of({"w"}, {{2}}, 3)), HasSubstr("the shapes hold 2 floats, the payload 3"));
}

TEST(Tensors, DecoderRefusesNegativeSizes) {
  EXPECT_THAT(tensors_error(payload_of({"w"}, {{-1, -4}}, 4)), HasSubstr("negative size"));
}

TEST(Tensors, DecoderRefusesNamesAndShapesThatDisagreeInNumber) {
  EXPECT_THAT(tensors_error(payload_of({"a", "b"}, {{1}}, 1)), HasSubstr("2 names but 1 shapes"));
}

TEST(Tensors, DecoderRefusesTooManyDims) {
  EXPECT_THAT(tensors_error(payload_of({"w"}, {std::vector<int64_t>(9, 1)}, 1)), HasSubstr("9 dims"));
}

TEST(Tensors, DecoderRefusesAPartialFloat) {
  auto payload = payload_of({"w"}, {{1}}, 1);
  payload.push_back(std::byte{0});
  EXPECT_THAT(tensors_error(payload), HasSubstr("not a whole number of floats"));
}

TEST(Tensors, DecoderRefusesANameCountLargerThanThePayload) {
  std::vector<std::byte> payload;
  append_u64(payload, uint64_t{1} << 50);
  testing::AllocationProbe probe;
  EXPECT_THAT(tensors_error(payload), HasSubstr("larger than the 0 bytes that remain"));
  EXPECT_LT(probe.largest(), 4096u);
}

}  // namespace
}  // namespace quartet::transport
