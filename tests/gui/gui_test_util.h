#pragma once

// Shared by the gui tests: the committed run folder (tests/run_fixture.h) and real runs of
// the quartet binary.

#include <QProcess>
#include <QString>
#include <QStringList>

#include "tests/run_fixture.h"

namespace gui_test {

using namespace quartet::test_util;

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
