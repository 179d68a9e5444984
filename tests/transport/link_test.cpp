#include "transport/link.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "tests/transport/net_helpers.h"
#include "transport/connection.h"

namespace quartet::transport {
namespace {

using ::testing::HasSubstr;
using testing::connected_pair;
using testing::kLongTimeout;
using Clock = std::chrono::steady_clock;

TEST(LinkProfile, PresetsHaveTheDocumentedBandwidthAndLatency) {
  EXPECT_EQ(link_profile("loopback").bandwidth_bits_per_s, 0.0);
  EXPECT_EQ(link_profile("loopback").latency_s, 0.0);
  EXPECT_DOUBLE_EQ(link_profile("10gbe").bandwidth_bits_per_s, 10e9);
  EXPECT_DOUBLE_EQ(link_profile("10gbe").latency_s, 50e-6);
  EXPECT_DOUBLE_EQ(link_profile("1gbe").bandwidth_bits_per_s, 1e9);
  EXPECT_DOUBLE_EQ(link_profile("1gbe").latency_s, 100e-6);
  EXPECT_DOUBLE_EQ(link_profile("wan-100mbit").bandwidth_bits_per_s, 100e6);
  EXPECT_DOUBLE_EQ(link_profile("wan-100mbit").latency_s, 30e-3);
  EXPECT_DOUBLE_EQ(link_profile("lte").bandwidth_bits_per_s, 20e6);
  EXPECT_DOUBLE_EQ(link_profile("lte").latency_s, 60e-3);
  EXPECT_GT(link_profile("nvlink").bandwidth_bits_per_s, link_profile("infiniband").bandwidth_bits_per_s);
  EXPECT_GT(link_profile("infiniband").bandwidth_bits_per_s, link_profile("10gbe").bandwidth_bits_per_s);
}

TEST(LinkProfile, EveryListedNameResolvesToItself) {
  const auto names = link_profile_names();
  EXPECT_EQ(names.size(), 7u);
  for (const auto& name : names) EXPECT_EQ(link_profile(name).name, name);
}

TEST(LinkProfile, UnknownNameIsRefusedListingTheKnownOnes) {
  try {
    link_profile("carrier-pigeon");
    FAIL() << "an unknown profile was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("carrier-pigeon"));
    EXPECT_THAT(e.what(), HasSubstr("wan-100mbit"));
    EXPECT_THAT(e.what(), HasSubstr("1gbe"));
  }
}

// Sends `frames` frames of `bytes` each over `link` and returns the sender's seconds.
double shaped_send_seconds(const LinkProfile& link, size_t bytes, int frames) {
  auto pair = connected_pair();
  pair.client->set_link(link);
  std::thread reader([&] {
    for (int i = 0; i < frames; ++i) pair.server->receive(kLongTimeout);
  });
  const std::vector<std::byte> payload(bytes, std::byte{0x5A});
  const auto start = Clock::now();
  for (int i = 0; i < frames; ++i) pair.client->send(MessageType::tensors, payload, kLongTimeout);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  reader.join();
  return seconds;
}

TEST(LinkShaping, TenMegabytesOverWan100MbitTakeAtLeastTheirSerialisationTime) {
  // 10 MB * 8 / 100 Mbit/s = 0.8 s (plus 30 ms latency).
  const double seconds = shaped_send_seconds(link_profile("wan-100mbit"), 10'000'000, 1);
  std::printf("[ measured ] 10 MB over wan-100mbit: %.3f s\n", seconds);
  EXPECT_GE(seconds, 0.8 * 0.95);
}

TEST(LinkShaping, EveryFramePaysTheLatency) {
  LinkProfile latency_only{"latency-only", 0.0, 0.05};
  const double seconds = shaped_send_seconds(latency_only, 10, 4);
  std::printf("[ measured ] 4 small frames at 50 ms latency: %.3f s\n", seconds);
  EXPECT_GE(seconds, 4 * 0.05 * 0.95);
}

TEST(LinkShaping, BackToBackFramesQueueBehindEachOther) {
  // Two 125 kB frames at 10 Mbit/s: 0.1 s each, one after the other.
  LinkProfile slow{"slow", 10e6, 0.0};
  const double seconds = shaped_send_seconds(slow, 125'000, 2);
  std::printf("[ measured ] 2 x 125 kB at 10 Mbit/s: %.3f s\n", seconds);
  EXPECT_GE(seconds, 0.2 * 0.95);
}

TEST(LinkShaping, CloseWakesASendWaitingForItsLink) {
  auto pair = connected_pair();
  pair.client->set_link(LinkProfile{"very-slow", 0.0, 3600.0});
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pair.client->close();
  });
  EXPECT_THROW(pair.client->send(MessageType::heartbeat, std::span<const std::byte>{}, kLongTimeout),
               ConnectionClosed);
  closer.join();
}

}  // namespace
}  // namespace quartet::transport
