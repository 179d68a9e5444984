#include "gui/run_controller.h"

#include <signal.h>

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QTemporaryFile>
#include <QTimer>
#include <optional>

namespace quartet::gui {

RunController::RunController(QObject* parent)
    : QObject(parent), quartet_(default_quartet()), stream_(std::make_unique<RunStream>()) {}

RunController::~RunController() {
  if (!running()) return;
  // As Ctrl-C: the runner stops its role processes and marks the run interrupted; a
  // runner that does not stop in time is killed (its roles then end with the coordinator).
  ::kill(static_cast<pid_t>(process_->processId()), SIGINT);
  if (!process_->waitForFinished(15000)) {
    process_->kill();
    process_->waitForFinished(5000);
  }
}

QString RunController::default_quartet() {
  const QString env = qEnvironmentVariable("QUARTET_BINARY");
  if (!env.isEmpty()) return env;
  return QDir(QCoreApplication::applicationDirPath()).filePath("quartet");
}

bool RunController::running() const { return process_ && process_->state() != QProcess::NotRunning; }

bool RunController::start(const nlohmann::json& spec, const QString& out_dir) {
  if (running()) {
    error_ = tr("a run is already in progress");
    return false;
  }
  spec_file_ = std::make_unique<QTemporaryFile>(QDir::temp().filePath("quartet-gui-spec-XXXXXX.json"));
  if (!spec_file_->open()) {
    error_ = tr("cannot write the spec to a temporary file: %1").arg(spec_file_->errorString());
    return false;
  }
  spec_file_->write(QByteArray::fromStdString(spec.dump(2)));
  spec_file_->flush();
  return launch(spec, out_dir, {"run", spec_file_->fileName(), "--out", out_dir, "--progress=jsonl"});
}

bool RunController::resume(const QString& run_dir) {
  QFile saved(QDir(run_dir).filePath("spec.json"));
  nlohmann::json spec;
  if (saved.open(QIODevice::ReadOnly)) {
    try {
      spec = nlohmann::json::parse(saved.readAll().toStdString()).at("spec");
    } catch (const std::exception&) {
      spec = nullptr;
    }
  }
  if (!spec.is_object()) {
    error_ = tr("%1 is not a run folder that can be resumed (no readable spec.json)").arg(run_dir);
    return false;
  }
  std::optional<analysis::RunResults> ran;
  try {
    ran = analysis::load_run(run_dir.toStdString());
  } catch (const analysis::ResultsError&) {
    // The runner says what is wrong with the folder; nothing is kept to show.
  }
  return launch(spec, run_dir, {"run", "--resume", run_dir, "--progress=jsonl"}, ran ? &*ran : nullptr);
}

bool RunController::launch(const nlohmann::json& spec, const QString& out_dir, const QStringList& args,
                           const analysis::RunResults* kept) {
  if (running()) {
    error_ = tr("a run is already in progress");
    return false;
  }
  if (!QFileInfo(quartet_).isExecutable()) {
    error_ = tr("cannot find the quartet runner at %1 (set QUARTET_BINARY, or build it beside quartet-gui)")
                 .arg(quartet_);
    return false;
  }
  stream_ = std::make_unique<RunStream>(spec);
  if (kept) stream_->keep_ended(*kept);
  pending_.clear();
  stderr_.clear();
  error_.clear();
  exit_code_ = -1;
  out_dir_ = out_dir;
  if (process_) process_->deleteLater();
  process_ = new QProcess(this);
  connect(process_, &QProcess::readyReadStandardOutput, this, &RunController::read_stdout);
  connect(process_, &QProcess::readyReadStandardError, this, [this] {
    stderr_ += QString::fromUtf8(process_->readAllStandardError());
    if (stderr_.size() > 200000) stderr_ = stderr_.right(100000);
    emit updated();
  });
  connect(process_, &QProcess::finished, this, &RunController::on_finished);
  connect(process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;
    exit_code_ = -1;
    error_ = tr("cannot start %1: %2").arg(quartet_, process_->errorString());
    emit finished(exit_code_, error_);
  });
  process_->start(quartet_, args);
  emit started();
  return true;
}

void RunController::stop() {
  if (!running()) return;
  ::kill(static_cast<pid_t>(process_->processId()), SIGINT);
  QProcess* p = process_;
  QTimer::singleShot(20000, p, [p] {
    if (p->state() != QProcess::NotRunning) p->kill();
  });
}

void RunController::read_stdout() {
  pending_ += process_->readAllStandardOutput();
  qsizetype nl;
  bool any = false;
  while ((nl = pending_.indexOf('\n')) >= 0) {
    stream_->feed(pending_.left(nl).toStdString());
    pending_.remove(0, nl + 1);
    any = true;
  }
  if (any) emit updated();
}

void RunController::on_finished(int code, QProcess::ExitStatus status) {
  read_stdout();
  if (!pending_.isEmpty()) stream_->feed(pending_.toStdString());  // a last line without its newline
  pending_.clear();
  exit_code_ = status == QProcess::NormalExit ? code : -1;
  QStringList why;
  for (const std::string& e : stream_->errors()) why << QString::fromStdString(e);
  if (why.isEmpty() && exit_code_ != 0) {
    QStringList lines = stderr_.split('\n', Qt::SkipEmptyParts);
    while (lines.size() > 6) lines.removeFirst();
    why = lines;
  }
  if (status != QProcess::NormalExit) why << tr("the runner crashed (%1)").arg(process_->errorString());
  // Stopped is what was asked for: the runner's notes then are no reason to show.
  error_ = exit_code_ == 0 || stopped() ? QString() : why.join('\n');
  emit finished(exit_code_, error_);
}

}  // namespace quartet::gui
