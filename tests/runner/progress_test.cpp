// What `quartet run` writes while it works: a bar that fits the terminal, log lines that
// keep coming while a long arm trains, a closing table that fits, and where the results are.

#include "runner/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "analysis/summary.h"
#include "analysis/tables.h"

namespace quartet::runner {
namespace {

using analysis::display_width;
using nlohmann::json;

BarFields busy_arm() {
  BarFields f;
  f.tag = "[3/5]";
  f.arm = "split-4-with-a-long-name";
  f.fraction = 0.42;
  f.loss = 0.6123;
  f.metric = "accuracy";
  f.quality = 0.8123;
  f.elapsed = 81.0;
  f.eta = 110.0;
  f.run_eta = 600.0;
  return f;
}

TEST(BarLine, FitsEveryWidthFromNarrowToWide) {
  for (int columns : {20, 40, 60, 80, 100, 120, 200}) {
    const std::string line = bar_line(busy_arm(), columns);
    EXPECT_LE(display_width(line), columns - 1) << columns << ": " << line;
    EXPECT_EQ(line.find('\n'), std::string::npos);
  }
}

TEST(BarLine, WideTerminalsGetEveryField) {
  const std::string line = bar_line(busy_arm(), 200);
  for (const char* part : {"[3/5]", "split-4-with-a-long-name", "42%", "loss 0.6123", "accuracy 0.8123", "1:21 elapsed",
                           "ETA 1:50", "run 10:00"})
    EXPECT_NE(line.find(part), std::string::npos) << part << " in " << line;
}

TEST(BarLine, FieldsAreGivenUpInOrderRunEtaFirst) {
  const std::string at80 = bar_line(busy_arm(), 80);
  EXPECT_EQ(at80.find("run 10:00"), std::string::npos) << at80;
  EXPECT_NE(at80.find("ETA 1:50"), std::string::npos) << at80;
  EXPECT_NE(at80.find("42%"), std::string::npos) << at80;
  const std::string at40 = bar_line(busy_arm(), 40);
  EXPECT_NE(at40.find("42%"), std::string::npos) << at40;  // the percentage outlives the bar's details
  EXPECT_EQ(at40.find("accuracy"), std::string::npos) << at40;
}

TEST(BarLine, NoLossIsShownBeforeTheFirstStep) {
  BarFields f = busy_arm();
  f.loss.reset();
  f.quality.reset();
  EXPECT_EQ(bar_line(f, 200).find("loss"), std::string::npos);
}

// A console writing into memory, on a clock the test moves.
struct Captured {
  char* err_text = nullptr;
  size_t err_size = 0;
  char* out_text = nullptr;
  size_t out_size = 0;
  FILE* err = open_memstream(&err_text, &err_size);
  FILE* out = open_memstream(&out_text, &out_size);
  double now = 0.0;
  ~Captured() {
    std::fclose(err);
    std::fclose(out);
    std::free(err_text);
    std::free(out_text);
  }
  std::unique_ptr<Progress> console(bool terminal, int columns = 80) {
    ConsoleOptions o;
    o.err = err;
    o.out = out;
    o.err_terminal = o.out_terminal = terminal;
    o.columns = columns;
    o.clock = [this] { return now; };
    o.runner = "build/quartet";
    o.gui = "build/quartet-gui";
    return make_console(std::move(o));
  }
  std::string err_string() {
    std::fflush(err);
    return std::string(err_text, err_size);
  }
  std::string out_string() {
    std::fflush(out);
    return std::string(out_text, out_size);
  }
};

json step(int64_t samples, double loss) {
  return {{"role", "server"}, {"samples", samples}, {"epoch", samples / 60000.0}, {"loss", loss}};
}

TEST(Console, ALogLineComesEveryThirtySecondsWithoutAnEvaluation) {
  Captured c;
  auto p = c.console(false);
  p->run_started("results/x", 1, 60000);
  p->arm_started("split-4", 0, 60000, "server");
  c.now = 10.0;
  p->step("split-4", step(15000, 0.9));
  EXPECT_EQ(c.err_string().find("epoch 0.25"), std::string::npos);  // too soon
  c.now = 31.0;
  p->step("split-4", step(30000, 0.7));
  const std::string log = c.err_string();
  EXPECT_NE(log.find("[1/1] split-4: epoch 0.50, 50%, loss 0.7000"), std::string::npos) << log;
  c.now = 40.0;
  p->step("split-4", step(45000, 0.6));
  EXPECT_EQ(c.err_string().find("epoch 0.75"), std::string::npos);  // 9 s after the last line
}

TEST(Console, EachRedrawOnATerminalIsOneLineThatFits) {
  Captured c;
  auto p = c.console(true, 80);
  p->run_started("results/x", 2, 120000);
  p->arm_started("fedavg-10-with-a-long-name", 1, 60000, "server");
  EXPECT_EQ(c.err_string().find("loss"), std::string::npos);  // nothing trained yet: no loss 0.0000
  for (int i = 1; i <= 4; ++i) {
    c.now = i * 5.0;
    json r = step(i * 15000, 1.0 / i);
    if (i == 2) r["eval"] = {{"metric", "accuracy"}, {"value", 0.8}};
    p->step("fedavg-10-with-a-long-name", r);
  }
  p->arm_finished("fedavg-10-with-a-long-name", {{"status", "finished"}, {"samples_per_second", 3000.0}});
  const std::string text = c.err_string();
  // Every redraw goes back to the line's start and clears what is left of the old one.
  size_t redraws = 0;
  for (size_t at = text.find('\r'); at != std::string::npos; at = text.find('\r', at + 1)) {
    const size_t end = text.find_first_of("\r\n", at + 1);
    std::string line = text.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
    ASSERT_EQ(line.rfind("\x1b[K"), line.size() - 3) << line;
    line.resize(line.size() - 3);
    EXPECT_LE(display_width(line), 79) << line;
    ++redraws;
  }
  EXPECT_EQ(redraws, 6u);  // the start, four steps, the end
}

TEST(Console, TheClosingTableFitsTheTerminalAndSaysWhereEverythingIs) {
  Captured c;
  auto p = c.console(true, 80);
  p->run_started("results/quickstart-1", 3, 180000);
  std::vector<json> arms = {
      {{"arm", "single"}, {"regime", "single"}, {"status", "finished"}, {"samples", 60000},
       {"samples_per_second", 2345.6}, {"final_quality", 0.8512},
       {"memory_peak_bytes", {{"total", 3e7}, {"rss", 9e7}, {"by_tag", {{"activations", 1e7}}}}},
       {"bytes", {{"per_process_per_epoch", 0.0}}}, {"train_seconds", 25.6},
       {"evaluations", json::array({{{"step", 1}, {"samples", 60000}, {"epoch", 1.0}, {"wall", 26.0}, {"value", 0.8512}}})}},
      {{"arm", "fedavg-10"}, {"regime", "federated"}, {"status", "interrupted"}, {"samples", 0}},
      {{"arm", "split-4"}, {"regime", "split"}, {"status", "not run"}},
  };
  p->run_finished({"interrupted", "quickstart", "# quickstart\n\n| arm |\n", arms, {}});
  const std::string table = c.out_string();
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(display_width(line), 80) << line;
  for (const char* part : {"single", "finished", "2346", "0.8512", "fedavg-10", "interrupted", "split-4", "not run"})
    EXPECT_NE(table.find(part), std::string::npos) << part << " in\n" << table;
  EXPECT_EQ(table.find("| arm |"), std::string::npos);  // not the Markdown
  // The interrupted arm trained nothing: dashes, not zeros.
  const size_t row = table.find("fedavg-10");
  const std::string fed = table.substr(row, table.find('\n', row) - row);
  EXPECT_EQ(fed.find(" 0 "), std::string::npos) << fed;
  EXPECT_NE(fed.find("—"), std::string::npos) << fed;
  const std::string err = c.err_string();
  EXPECT_NE(err.find("Results: results/quickstart-1"), std::string::npos) << err;
  EXPECT_NE(err.find("build/quartet report results/quickstart-1"), std::string::npos) << err;
  EXPECT_NE(err.find("build/quartet-gui results/quickstart-1"), std::string::npos) << err;
}

TEST(Console, ARedirectedRunPrintsTheMarkdownTable) {
  Captured c;
  auto p = c.console(false);
  p->run_started("results/x", 1, 1);
  p->run_finished({"finished", "x", "# x\n\n| arm |\n", {}, {}});
  EXPECT_EQ(c.out_string(), "# x\n\n| arm |\n");
}

TEST(TextTable, LeavesOutColumnsInTheOrderGivenUntilItFits) {
  analysis::Table t{{"arm", "wide column", "status"}, {false, false, false}, {{"single", "xxxxxxxxxxxxxxxxxxxx", "ok"}}};
  std::vector<std::string> left_out;
  const std::string text = analysis::text_table(t, 20, {1}, &left_out);
  EXPECT_EQ(left_out, std::vector<std::string>{"wide column"});
  EXPECT_EQ(text.find("xxx"), std::string::npos);
  EXPECT_NE(text.find("single  ok"), std::string::npos) << text;
}

}  // namespace
}  // namespace quartet::runner
