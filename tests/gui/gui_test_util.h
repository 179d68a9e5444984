#pragma once

// Shared by the gui tests: the committed run folder (tests/data/gui/tiny-run, made by a
// real run), scratch copies of it, and real runs of the quartet binary.

#include <QProcess>
#include <QString>
#include <QStringList>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#ifndef QUARTET_TEST_DATA_DIR
#error "QUARTET_TEST_DATA_DIR must name tests/data"
#endif

namespace gui_test {

namespace fs = std::filesystem;

inline fs::path fixture_run() { return fs::path(QUARTET_TEST_DATA_DIR) / "gui" / "tiny-run"; }
inline fs::path fixture_spec() { return fs::path(QUARTET_TEST_DATA_DIR) / "gui" / "tiny-run.spec.json"; }

// A copy of the fixture run under `dir`, to corrupt or to report into.
inline fs::path copy_fixture(const fs::path& dir) {
  const fs::path to = dir / "tiny-run";
  fs::copy(fixture_run(), to, fs::copy_options::recursive);
  return to;
}

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

struct ProcessResult {
  int code = -1;
  QString output;  // stdout and stderr together
};

// Runs `program args…` to the end (at most `timeout_ms`).
inline ProcessResult run_process(const QString& program, const QStringList& args, int timeout_ms = 120000) {
  QProcess p;
  p.setProcessChannelMode(QProcess::MergedChannels);
  p.start(program, args);
  if (!p.waitForFinished(timeout_ms)) {
    p.kill();
    p.waitForFinished();
    return {-1, "timed out: " + QString::fromUtf8(p.readAll())};
  }
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAll())};
}

}  // namespace gui_test
