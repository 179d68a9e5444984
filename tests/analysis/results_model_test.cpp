// The results reader: a real run folder loads with every arm and role; a corrupt one
// gives a message naming the file, never a crash.

#include "analysis/results_model.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "tests/run_fixture.h"
#include "tests/temp_folder.h"

namespace quartet::analysis {
namespace {

namespace fs = std::filesystem;
using test_util::copy_fixture;
using test_util::fixture_run;
using test_util::read_text;
using test_util::write_text;

// The message load_run throws for `dir`, or "" when it loads.
std::string load_error(const fs::path& dir) {
  try {
    load_run(dir);
  } catch (const ResultsError& e) {
    return e.what();
  }
  return "";
}

const ArmResults& arm(const RunResults& run, const std::string& name) {
  for (const ArmResults& a : run.arms)
    if (a.name == name) return a;
  throw std::runtime_error("no arm " + name);
}

class ResultsModel : public test_util::TempFolderTest {
 protected:
  ResultsModel() : TempFolderTest("results_model") {}
};

TEST_F(ResultsModel, FinishedRunLoadsEveryArmInSpecOrder) {
  const RunResults run = load_run(fixture_run());
  EXPECT_EQ(run.status, "finished");
  ASSERT_EQ(run.arms.size(), size_t{5});
  const std::vector<std::string> names{"single", "accum-2", "ddp-2", "split-2", "fedavg-4"};
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(run.arms[i].name, names[i]);
    EXPECT_EQ(run.arms[i].status, "finished");
    EXPECT_TRUE(run.arms[i].summary.is_object());
    EXPECT_FALSE(eval_points(run.arms[i]).empty()) << names[i];
  }
  EXPECT_TRUE(run.warnings.empty());
}

TEST_F(ResultsModel, ArmsKeepTheirRolesAndEmulatedLinks) {
  const RunResults run = load_run(fixture_run());
  EXPECT_EQ(arm(run, "ddp-2").roles.size(), size_t{2});
  EXPECT_EQ(arm(run, "fedavg-4").timeline()->role, "server");
  EXPECT_EQ(arm(run, "single").timeline()->role, "trainer");
  EXPECT_EQ(arm(run, "fedavg-4").link, "wan-100mbit");
  EXPECT_EQ(arm(run, "split-2").link, "1gbe");
  EXPECT_EQ(arm(run, "single").link, "loopback");
}

TEST_F(ResultsModel, CumulativeBytesGrowAndEndAtTheArmsTraffic) {
  const RunResults run = load_run(fixture_run());
  const ArmResults& fed = arm(run, "fedavg-4");
  const std::vector<BytesPoint> bytes = cumulative_bytes(fed);
  ASSERT_GT(bytes.size(), size_t{2});
  for (size_t i = 1; i < bytes.size(); ++i) EXPECT_GE(bytes[i].bytes, bytes[i - 1].bytes);
  const double total = fed.summary["bytes"]["sent"].get<double>() + fed.summary["bytes"]["received"].get<double>();
  EXPECT_EQ(bytes.back().bytes, total);
  for (const BytesPoint& b : cumulative_bytes(arm(run, "single"))) EXPECT_EQ(b.bytes, 0.0);
}

TEST_F(ResultsModel, MemoryIsPerKindOfProcessAndByTag) {
  const RunResults run = load_run(fixture_run());
  const std::vector<ProcessMemory> fed = process_memory(arm(run, "fedavg-4"));
  ASSERT_EQ(fed.size(), size_t{2});
  EXPECT_TRUE((fed[0].kind == "pool" && fed[1].kind == "server") || (fed[0].kind == "server" && fed[1].kind == "pool"));
  const std::vector<ProcessMemory> single = process_memory(arm(run, "single"));
  ASSERT_EQ(single.size(), size_t{1});
  EXPECT_EQ(single[0].kind, std::string());
  double params = 0.0;
  for (const auto& [tag, bytes] : single[0].tags)
    if (tag == "parameters") params = bytes;
  EXPECT_GT(params, 0);
}

// An arm trained on a GPU keeps its tensors there: its memory by tag is the GPU's, and
// says so; the host's figures of those records are left aside.
TEST_F(ResultsModel, AGpuArmsMemoryIsTheGpusByTag) {
  const fs::path dir = copy_fixture(dir_);
  const fs::path records = dir / "single" / "roles" / "trainer.jsonl";
  std::istringstream in(read_text(records));
  std::string out, line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j["type"] == "step")
      j["gpu_memory"] = {{"device", "cuda:0"},
                         {"parameters", {{"current", 1048576}, {"peak", 1048576}}},
                         {"activations", {{"current", 0}, {"peak", 3 * 1048576}}},
                         {"allocated", 1048576},
                         {"reserved", 8 * 1048576}};
    out += j.dump() + "\n";
  }
  write_text(records, out);
  const std::vector<ProcessMemory> single = process_memory(arm(load_run(dir), "single"));
  ASSERT_EQ(single.size(), size_t{1});
  EXPECT_TRUE(single[0].gpu);
  std::map<std::string, double> tags(single[0].tags.begin(), single[0].tags.end());
  EXPECT_EQ(tags["parameters"], 1048576.0);
  EXPECT_EQ(tags["activations"], 3.0 * 1048576);
  EXPECT_EQ(tags["gradients"], 0.0);
  EXPECT_FALSE(process_memory(arm(load_run(fixture_run()), "single"))[0].gpu);
}

TEST_F(ResultsModel, ArmWithoutSummaryIsReadFromItsRecords) {
  const fs::path dir = copy_fixture(dir_);
  const double from_summary = samples_per_second(arm(load_run(dir), "ddp-2"));
  fs::remove(dir / "ddp-2" / "summary.json");
  const RunResults run = load_run(dir);
  const ArmResults& ddp = arm(run, "ddp-2");
  EXPECT_TRUE(ddp.summary.is_null());
  EXPECT_EQ(samples_done(ddp), int64_t{1024});
  EXPECT_TRUE(samples_per_second(ddp) > 0.5 * from_summary && samples_per_second(ddp) < 2.0 * from_summary);
  EXPECT_FALSE(eval_points(ddp).empty());
}

TEST_F(ResultsModel, TornLastRecordLineIsIgnored) {
  const fs::path dir = copy_fixture(dir_);
  const fs::path f = dir / "single" / "roles" / "trainer.jsonl";
  const size_t before = load_run(dir).arms[0].roles[0].records.size();
  write_text(f, read_text(f) + "{\"type\":\"step\",\"wall\":1");
  EXPECT_EQ(load_run(dir).arms[0].roles[0].records.size(), before);
}

TEST_F(ResultsModel, MissingFolderOrSpecNamesTheProblem) {
  EXPECT_NE(load_error(dir_ / "nowhere").find("no such folder"), std::string::npos);
  EXPECT_NE(load_error(dir_).find("not a Quartet run folder (no spec.json"), std::string::npos);
}

struct Corruption {
  const char* name;
  const char* file;
  const char* content;
  const char* expected;
};

// ctest's name for the case (gtest prints the parameter after the test's name).
void PrintTo(const Corruption& c, std::ostream* out) { *out << c.name; }

class CorruptFiles : public test_util::TempFolderTest, public testing::WithParamInterface<Corruption> {
 protected:
  CorruptFiles() : TempFolderTest("corrupt_files") {}
};

TEST_P(CorruptFiles, GiveAMessageNamingTheFile) {
  const fs::path dir = copy_fixture(dir_);
  write_text(dir / GetParam().file, GetParam().content);
  const std::string message = load_error(dir);
  EXPECT_NE(message.find(GetParam().expected), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    ResultsModel, CorruptFiles,
    testing::Values(
        Corruption{"SpecNotJson", "spec.json", "{\"spec\": ", "spec.json: not valid JSON"},
        Corruption{"SpecWithoutArms", "spec.json", "{\"spec\": {\"name\": \"x\"}}", "spec.arms should be"},
        Corruption{"ArmNameEscapes", "spec.json",
                   "{\"spec\": {\"arms\": [{\"name\": \"../x\", \"regime\": \"single\"}]}}", "is not a folder name"},
        Corruption{"RunJsonAnArray", "run.json", "[1, 2]", "run.json: expected a JSON object"},
        Corruption{"SummaryGarbage", "ddp-2/summary.json", "\x01\x02 not json", "summary.json: not valid JSON"},
        Corruption{"SummaryMistyped", "ddp-2/summary.json", "{\"samples_per_second\": \"fast\"}",
                   "\"samples_per_second\" should be a number"},
        Corruption{"RecordLineGarbage", "single/roles/trainer.jsonl", "{\"type\":\"step\"}\nnot json\n{}\n",
                   "trainer.jsonl:2: not a JSON record"},
        Corruption{"StepWithoutWall", "single/roles/trainer.jsonl", "{\"type\":\"step\",\"samples\":1,\"step\":1}\n",
                   "needs a numeric \"wall\""},
        Corruption{"RecordNotAnObject", "split-2/roles/server.jsonl", "[1]\n", "expected a JSON object"}),
    [](const testing::TestParamInfo<Corruption>& info) { return std::string(info.param.name); });

// Each rank records its slice's loss: the arm's loss is their mean, the whole batch's.
TEST_F(ResultsModel, ADataParallelArmsLossIsItsRanksMean) {
  const RunResults run = load_run(fixture_run());
  const ArmResults& ddp = arm(run, "ddp-2");
  std::map<int64_t, std::vector<double>> by_step;
  for (const trainers::RoleRecords& role : ddp.roles)
    for (const nlohmann::json& r : role.records)
      if (r.value("type", "") == "step") by_step[r["step"].get<int64_t>()].push_back(r["loss"].get<double>());
  const std::vector<std::pair<int64_t, double>> points = loss_points(ddp);
  ASSERT_FALSE(points.empty());
  const std::vector<double>& first = by_step.at(1);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_NE(first[0], first[1]);  // the ranks' halves differ: the mean is not rank 0's
  EXPECT_DOUBLE_EQ(points.front().second, (first[0] + first[1]) / 2.0);
}

TEST_F(ResultsModel, RoleKindDropsTheIndex) {
  EXPECT_EQ(role_kind("pool12"), "pool");
  EXPECT_EQ(role_kind("rank0"), "rank");
  EXPECT_EQ(role_kind("server"), "server");
}

}  // namespace
}  // namespace quartet::analysis
