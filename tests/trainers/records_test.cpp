// The reader of step records: it reads back every field the writer writes, reads what is
// missing or mistyped as its default, and says what a strict reader should refuse.

#include "trainers/records.h"

#include <gtest/gtest.h>

#include <vector>

#include "trainers/metrics.h"

namespace quartet::trainers {
namespace {

using nlohmann::json;

TEST(Records, ReadsBackEveryFieldTheWriterWrites) {
  StepRecord w;
  w.step = 7;
  w.epoch = 0.75;
  w.samples = 896;
  w.wall = 12.5;
  w.forward = 0.25;
  w.backward = 0.5;
  w.optimizer = 0.125;
  w.data = 0.0625;
  w.comm_exposed = 0.03125;
  w.bytes_sent = 1000;
  w.bytes_received = 2000;
  w.messages = 30;
  w.loss = 1.5;
  w.lr = 0.05;
  w.eval = Evaluation{"dice", 0.875, 64, 2.25};
  engine::MemStats mem;
  mem.current[static_cast<int>(engine::MemTag::activations)] = 10;
  mem.peak[static_cast<int>(engine::MemTag::activations)] = 40;
  mem.total_current = 11;
  mem.total_peak = 41;

  const RecordView r = read_record(json::parse(to_json(w, "arm", "rank1", 1, mem).dump()));
  EXPECT_TRUE(r.is_step());
  EXPECT_EQ(r.type, "step");
  EXPECT_EQ(r.role, "rank1");
  EXPECT_EQ(r.step, 7);
  EXPECT_EQ(r.epoch, 0.75);
  EXPECT_EQ(r.samples, 896);
  EXPECT_EQ(r.wall, 12.5);
  EXPECT_EQ(r.forward, 0.25);
  EXPECT_EQ(r.backward, 0.5);
  EXPECT_EQ(r.optimizer, 0.125);
  EXPECT_EQ(r.data, 0.0625);
  EXPECT_EQ(r.compute_seconds(), 0.25 + 0.5 + 0.125 + 0.0625);
  EXPECT_EQ(r.comm_exposed, 0.03125);
  EXPECT_EQ(r.bytes_sent, 1000);
  EXPECT_EQ(r.bytes_received, 2000);
  EXPECT_EQ(r.messages, 30);
  EXPECT_EQ(r.loss, 1.5);
  EXPECT_EQ(r.lr, 0.05);
  ASSERT_TRUE(r.eval.has_value());
  EXPECT_EQ(r.eval->metric, "dice");
  EXPECT_EQ(r.eval->value, 0.875);
  EXPECT_EQ(r.eval->samples, 64);
  EXPECT_EQ(r.eval->seconds, 2.25);
  ASSERT_TRUE(r.memory.has_value());
  EXPECT_EQ(r.memory->at("activations").current, 10);
  EXPECT_EQ(r.memory->at("activations").peak, 40);
  EXPECT_EQ(r.memory->at("total").peak, 41);
  EXPECT_EQ(r.memory->size(), static_cast<size_t>(engine::kMemTagCount + 1));
  ASSERT_TRUE(r.rss_peak.has_value());
  EXPECT_GT(*r.rss_peak, 0);
}

TEST(Records, MissingOrMistypedFieldsReadAsDefaults) {
  const RecordView r = read_record(json::parse(R"({"type": "step", "samples": "many", "wall": 2,
                                                   "compute": [1], "eval": 0.9, "memory": null})"));
  EXPECT_EQ(r.samples, 0);
  EXPECT_EQ(r.wall, 2.0);
  EXPECT_EQ(r.compute_seconds(), 0.0);
  EXPECT_FALSE(r.eval.has_value());
  EXPECT_FALSE(r.memory.has_value());
  EXPECT_FALSE(r.rss_peak.has_value());
  EXPECT_EQ(r.role, "");
  EXPECT_FALSE(read_record(json::array()).is_step());
}

TEST(Records, OtherRecordTypesCarryTheirMemory) {
  const RecordView r = read_record(
      json::parse(R"({"type": "client_round", "role": "pool0", "memory": {"total": {"current": 1, "peak": 5}},
                      "rss_peak": 900})"));
  EXPECT_FALSE(r.is_step());
  EXPECT_EQ(r.role, "pool0");
  EXPECT_EQ(r.memory->at("total").peak, 5);
  EXPECT_EQ(r.rss_peak, 900);
}

TEST(Records, ProblemsNameWhatAStrictReaderRefuses) {
  EXPECT_EQ(record_problem(json::parse(R"({"type": "step", "wall": 1, "samples": 1, "step": 1})")), "");
  EXPECT_EQ(record_problem(json::parse(R"({"type": "partition", "clients": []})")), "");
  EXPECT_EQ(record_problem(json::array()), "expected a JSON object, got array");
  EXPECT_EQ(record_problem(json::parse(R"({"type": "step", "samples": 1, "step": 1})")),
            "a step record needs a numeric \"wall\"");
  EXPECT_EQ(record_problem(json::parse(R"({"type": "step", "wall": 1, "samples": 1, "step": 1, "loss": "x"})")),
            "\"loss\" should be a number, got string");
  EXPECT_EQ(record_problem(json::parse(R"({"type": "step", "wall": 1, "samples": 1, "step": 1, "memory": 3})")),
            "\"memory\" should be an object, got number");
  EXPECT_EQ(record_problem(json::parse(R"({"type": "step", "wall": 1, "samples": 1, "step": 1, "eval": {}})")),
            "\"eval\" needs a numeric \"value\"");
}

TEST(Records, LenientAccessorsFallBack) {
  const json j = json::parse(R"({"n": 2.5, "i": 3, "s": "x"})");
  EXPECT_EQ(number(j, "n"), 2.5);
  EXPECT_EQ(number(j, "s", -1.0), -1.0);
  EXPECT_EQ(integer(j, "n"), 2);
  EXPECT_EQ(integer(j, "i"), 3);
  EXPECT_EQ(text(j, "s"), "x");
  EXPECT_EQ(text(j, "i", "none"), "none");
  EXPECT_TRUE(member(json::array(), "n").is_null());
  EXPECT_EQ(type_problem(j, "missing", json::value_t::object), "");
  EXPECT_EQ(type_problem(j, "s", json::value_t::number_float), "\"s\" should be a number, got string");
}

TEST(Records, ClockIsTheServerTrainerOrRankZeroWithSteps) {
  const json step = {{"type", "step"}};
  const json round = {{"type", "client_round"}};
  const std::vector<RoleRecords> federated = {{"pool0", {round, round}}, {"server", {step}}};
  EXPECT_EQ(clock_role(federated)->role, "server");
  const std::vector<RoleRecords> ranks = {{"rank1", {step}}, {"rank0", {step}}};
  EXPECT_EQ(clock_role(ranks)->role, "rank0");
  const std::vector<RoleRecords> server_without_steps = {{"server", {round}}, {"pool1", {step}}};
  EXPECT_EQ(clock_role(server_without_steps)->role, "pool1");
  EXPECT_EQ(clock_role({{"pool0", {round}}}), nullptr);
  EXPECT_FALSE(has_steps({"pool0", {round}}));
}

// 64 MiB written page by page is resident: the current RSS climbs by about that much.
TEST(Metrics, CurrentRssFollowsTouchedMemory) {
  const int64_t before = current_rss_bytes();
  ASSERT_GT(before, 0);
  std::vector<char> block(64 << 20);
  for (size_t i = 0; i < block.size(); i += 4096) block[i] = static_cast<char>(i);
  const int64_t after = current_rss_bytes();
  EXPECT_GE(after - before, 60 << 20);
  EXPECT_EQ(block[4096], static_cast<char>(4096));
}

}  // namespace
}  // namespace quartet::trainers
