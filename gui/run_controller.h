#pragma once

// Runs an experiment the way a user would: `quartet run SPEC --out DIR --progress=jsonl`
// as a child process, its event stream folded into a RunStream. Stop sends what Ctrl-C
// would; finished arms keep their results.

#include <QObject>
#include <QProcess>
#include <QString>
#include <memory>
#include <nlohmann/json.hpp>

#include "gui/run_stream.h"

class QTemporaryFile;

namespace quartet::gui {

class RunController : public QObject {
  Q_OBJECT

 public:
  explicit RunController(QObject* parent = nullptr);
  ~RunController() override;

  // The quartet binary: QUARTET_BINARY from the environment, else the one beside this program.
  static QString default_quartet();
  void set_quartet(const QString& binary) { quartet_ = binary; }
  QString quartet() const { return quartet_; }

  // Starts a run of `spec` into `out_dir` (which must not exist). Returns false with
  // error() set when it cannot start (already running, the binary missing).
  bool start(const nlohmann::json& spec, const QString& out_dir);
  // Continues a stopped or failed run folder (quartet run --resume): its finished arms
  // are kept, and shown with their records from the start. Returns false with error() set when it cannot start (no run folder there).
  bool resume(const QString& run_dir);
  // Asks the run to stop (SIGINT, as Ctrl-C); kills it if it has not stopped in 20 s.
  void stop();
  bool running() const;

  const RunStream& stream() const { return *stream_; }
  QString out_dir() const { return out_dir_; }
  int exit_code() const { return exit_code_; }
  // Why the run failed, in words: the stream's errors, else the runner's last stderr lines;
  // empty for a run that finished or was stopped.
  QString error() const { return error_; }
  // The run was stopped (Stop, or Ctrl-C): not an error; resume() continues it.
  bool stopped() const { return exit_code_ == 130; }
  QString stderr_text() const { return stderr_; }

 signals:
  void started();
  void updated();  // events arrived
  void finished(int exit_code, const QString& error);

 private:
  // `kept`: a resumed run's folder, whose ended arms the stream starts with.
  bool launch(const nlohmann::json& spec, const QString& out_dir, const QStringList& args,
              const analysis::RunResults* kept = nullptr);
  void read_stdout();
  void on_finished(int code, QProcess::ExitStatus status);

  QString quartet_;
  QProcess* process_ = nullptr;
  std::unique_ptr<QTemporaryFile> spec_file_;
  std::unique_ptr<RunStream> stream_;
  QByteArray pending_;
  QString out_dir_, error_, stderr_;
  int exit_code_ = -1;
};

}  // namespace quartet::gui
