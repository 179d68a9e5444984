#include "transport/refusal_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace quartet::transport {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;
using Clock = RefusalLog::Clock;

// A RefusalLog on a clock the test moves by hand.
struct Logged {
  std::vector<std::string> lines;
  RefusalLog log{5s, [this](const std::string& line) { lines.push_back(line); }};
  Clock::time_point t0 = Clock::now();
  void refuse(const std::string& address, int port, const std::string& reason, Clock::duration at) {
    log.refused(address, address + ":" + std::to_string(port), reason, "", t0 + at);
  }
};

TEST(RefusalLog, OneRefusalIsOneLineInFull) {
  Logged l;
  l.log.refused("127.0.0.1", "127.0.0.1:41234", "wrong token", "wrong token (role \"client\")", l.t0);
  l.log.tick(l.t0 + 5s);
  l.log.tick(l.t0 + 10s);
  l.log.flush(l.t0 + 11s);
  EXPECT_THAT(l.lines, ElementsAre("refused 127.0.0.1:41234: wrong token (role \"client\")"));
  EXPECT_EQ(l.log.window_end(), std::nullopt);
}

TEST(RefusalLog, AFloodIsOneLineThenOneSummaryPerInterval) {
  Logged l;
  for (int i = 0; i < 1077; ++i) l.refuse("127.0.0.1", 40000 + i, i % 2 ? "no hello in time" : "wrong token", i * 1ms);
  ASSERT_EQ(l.lines.size(), 1u);
  EXPECT_EQ(l.log.window_end(), l.t0 + 5s);
  l.log.tick(l.t0 + 4999ms);
  EXPECT_EQ(l.lines.size(), 1u) << "the window is not over yet";
  l.log.tick(l.t0 + 5s);
  ASSERT_EQ(l.lines.size(), 2u);
  EXPECT_EQ(l.lines[1],
            "refused 1,076 connections from 127.0.0.1 in the last 5 s: no hello in time (538), wrong token (538)");
  // A window that summarised opens the next one; a quiet one closes.
  EXPECT_EQ(l.log.window_end(), l.t0 + 10s);
  l.log.tick(l.t0 + 10s);
  EXPECT_EQ(l.lines.size(), 2u);
  EXPECT_EQ(l.log.window_end(), std::nullopt);
  l.refuse("127.0.0.1", 1, "wrong token", 11s);
  EXPECT_EQ(l.lines.back(), "refused 127.0.0.1:1: wrong token");
}

TEST(RefusalLog, ARefusalAfterTheWindowEndsItFirst) {
  Logged l;
  l.refuse("10.0.0.1", 1, "wrong token", 0s);
  l.refuse("10.0.0.1", 2, "wrong token", 1s);
  l.refuse("10.0.0.1", 3, "wrong token", 6s);  // no tick came between: this one ends the window
  EXPECT_THAT(l.lines, ElementsAre("refused 10.0.0.1:1: wrong token",
                                   "refused 1 connection from 10.0.0.1 in the last 6 s: wrong token (1)"));
  l.log.flush(l.t0 + 7s);
  EXPECT_EQ(l.lines.back(), "refused 1 connection from 10.0.0.1 in the last 1 s: wrong token (1)");
  l.refuse("10.0.0.1", 4, "wrong token", 100s);
  l.refuse("10.0.0.1", 5, "wrong token", 100s);
  l.log.tick(l.t0 + 212500ms);  // a late tick says how long the window really was
  EXPECT_EQ(l.lines.back(), "refused 1 connection from 10.0.0.1 in the last 112 s: wrong token (1)");
}

TEST(RefusalLog, SummaryNamesTheBusiestAddressesAndCountsTheRest) {
  Logged l;
  l.refuse("10.0.0.9", 0, "x", 0s);  // logged in full
  for (int i = 0; i < 5; ++i) l.refuse("10.0.0.1", i, "over the per-address cap", 1s);
  for (int i = 0; i < 4; ++i) l.refuse("10.0.0.2", i, "over the per-address cap", 1s);
  for (int i = 0; i < 3; ++i) l.refuse("10.0.0.3", i, "over the per-address cap", 1s);
  for (int i = 0; i < 2; ++i) l.refuse("10.0.0.4", i, "closed before the hello", 1s);
  l.refuse("10.0.0.5", 0, "closed before the hello", 1s);
  l.log.flush(l.t0 + 2s);
  EXPECT_EQ(l.lines.back(),
            "refused 15 connections from 10.0.0.1 (5), 10.0.0.2 (4), 10.0.0.3 (3) and 3 from 2 other addresses in "
            "the last 2 s: closed before the hello (3), over the per-address cap (12)");
}

TEST(RefusalLog, AddressesPastTheBoundAreCountedTogether) {
  Logged l;
  l.refuse("10.1.0.0", 0, "x", 0s);
  const int addresses = static_cast<int>(RefusalLog::kMaxAddresses) + 100;
  for (int a = 0; a < addresses; ++a) l.refuse("10.1.0." + std::to_string(a), 1, "x", 1s);
  l.log.flush(l.t0 + 1s);
  EXPECT_THAT(l.lines.back(), HasSubstr("refused " + std::to_string(addresses) + " connections from "));
  EXPECT_THAT(l.lines.back(), HasSubstr(" and " + std::to_string(addresses - 3) + " from more addresses"));
}

TEST(RefusalLog, CountsAreGroupedByThousands) {
  EXPECT_EQ(grouped(0), "0");
  EXPECT_EQ(grouped(999), "999");
  EXPECT_EQ(grouped(1076), "1,076");
  EXPECT_EQ(grouped(1234567), "1,234,567");
  EXPECT_EQ(grouped(-1234), "-1,234");
}

}  // namespace
}  // namespace quartet::transport
