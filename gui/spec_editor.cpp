#include "gui/spec_editor.h"

#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QScrollArea>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "runner/results.h"
#include "runner/spec.h"
#include "gui/schema_form.h"
#include "gui/tone.h"
#include "gui/wheel_guard.h"
#include "workloads/models.h"
#include "workloads/onnx/model.h"
#include "workloads/workload.h"

namespace quartet::gui {

using nlohmann::json;

json spec_json_schema() { return runner::spec_json_schema(); }

QString onnx_model_value(const QString& file, const QString& spec_path) {
  const QString absolute = QFileInfo(file).absoluteFilePath();
  const QString prefix = workloads::onnx::kPrefix;
  if (spec_path.isEmpty()) return prefix + absolute;
  return prefix + QFileInfo(spec_path).absoluteDir().relativeFilePath(absolute);
}

namespace {

QStringList qt_list(const std::vector<std::string>& names) {
  QStringList out;
  for (const std::string& n : names) out << QString::fromStdString(n);
  return out;
}

std::string text_at(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// "spec.arms[2].cut" -> the arm's object in `spec`, or null.
const json* arm_of(const json& spec, const std::string& path) {
  const size_t open = path.find("arms[");
  if (open == std::string::npos || !spec.contains("arms") || !spec["arms"].is_array()) return nullptr;
  const size_t i = std::stoul(path.substr(open + 5));
  return i < spec["arms"].size() && spec["arms"][i].is_object() ? &spec["arms"][i] : nullptr;
}

// The models that fit the spec's workload (all of them while the workload is unknown).
QStringList model_choices(const json& spec, const std::string&) {
  try {
    return qt_list(workloads::workload_model_names(text_at(spec.value("workload", json::object()), "name")));
  } catch (const std::exception&) {
    return qt_list(workloads::model_names());
  }
}

// The stages of the model the field's arm trains: where a cut may go.
QStringList stage_choices(const json& spec, const std::string& path) {
  const json* arm = arm_of(spec, path);
  std::string model = arm ? text_at(*arm, "model") : "";
  if (model.empty()) model = text_at(spec.value("workload", json::object()), "model");
  try {
    return qt_list(workloads::model_info(model).stages);
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace

SpecEditor::SpecEditor(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  status_ = new QLabel(this);
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(status_);
  form_ = new SchemaForm(spec_json_schema(), "spec");
  form_->suggest("model", model_choices);
  // An onnx: model's stages, read from the file its path names relative to the spec.
  form_->suggest("stage", [this](const json& value, const std::string& field) {
    json whole = value;
    resolve_models(whole);
    return stage_choices(whole, field);
  });
  form_->browse("model", tr("File…"), [this](const json&, const std::string& field) { return choose_onnx_model(field); });
  auto* scroll = new QScrollArea(this);
  scroll->setWidget(form_);
  scroll->setWidgetResizable(true);
  layout->addWidget(scroll, 1);
  check_timer_ = new QTimer(this);
  check_timer_->setSingleShot(true);
  check_timer_->setInterval(300);
  connect(check_timer_, &QTimer::timeout, this, [this] { validate(); });
  connect(form_, &SchemaForm::changed, this, [this] {
    follow_workload();
    set_modified(true);
    check_timer_->start();
  });
  guard_wheel();
  new_spec();
}

void SpecEditor::new_spec() {
  set_spec(json::parse(R"({
    "name": "my-experiment",
    "workload": {"name": "synthetic", "model": "mlp", "train_samples": 2048, "test_samples": 512},
    "train": {"epochs": 2, "batch": 64, "target": 0.8, "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9}},
    "arms": [{"name": "single", "regime": "single"},
             {"name": "ddp-2", "regime": "data_parallel", "ranks": 2}]
  })"));
  path_.clear();
  set_modified(false);
}

void SpecEditor::set_spec(const json& spec) {
  form_->set_value(spec);
  workload_ = text_at(spec.value("workload", json::object()), "name");
  validate();
}

void SpecEditor::follow_workload() {
  const json workload = spec().value("workload", json::object());
  const std::string name = text_at(workload, "name");
  if (name == workload_) return;
  workload_ = name;
  std::vector<std::string> fit;
  try {
    fit = workloads::workload_model_names(name);
  } catch (const std::exception&) {
    return;  // a workload this build does not know: validation says so
  }
  const std::string model = text_at(workload, "model");
  // An ONNX file is the user's own: kept, and validation says whether it fits.
  if (fit.empty() || workloads::onnx::is_onnx_model(model) || std::find(fit.begin(), fit.end(), model) != fit.end())
    return;
  form_->set_field("spec.workload.model", fit.front());  // the first model that fits the new workload
}

json SpecEditor::spec() const { return form_->value(); }

void SpecEditor::resolve_models(json& spec) const {
  runner::resolve_onnx_paths(spec, path_.isEmpty() ? QDir::current().filePath("untitled.json").toStdString()
                                                   : path_.toStdString());
}

json SpecEditor::spec_as_run() const {
  json j = spec();
  resolve_models(j);
  return j;
}

QString SpecEditor::choose_onnx_model(const std::string& field) {
  // Opens where the field's file is, else beside the spec, else in the working folder.
  QString folder = path_.isEmpty() ? QDir::currentPath() : QFileInfo(path_).absolutePath();
  const json whole = spec_as_run();
  const json* holder = arm_of(whole, field);
  const std::string current = text_at(holder ? *holder : whole.value("workload", json::object()), "model");
  if (workloads::onnx::is_onnx_model(current)) {
    const QFileInfo file(QString::fromStdString(current.substr(std::strlen(workloads::onnx::kPrefix))));
    if (file.absoluteDir().exists()) folder = file.absolutePath();
  }
  QFileDialog dialog(this, tr("Choose an ONNX model"), folder, tr("ONNX models (*.onnx)"));
  dialog.setFileMode(QFileDialog::ExistingFile);
  dialog.setAcceptMode(QFileDialog::AcceptOpen);
  if (dialog.exec() != QDialog::Accepted || dialog.selectedFiles().isEmpty()) return {};
  return onnx_model_value(dialog.selectedFiles().front(), path_);
}

void SpecEditor::load(const QString& path) {
  const json j = runner::read_spec_json(path.toStdString());
  if (!j.is_object()) throw std::runtime_error(path.toStdString() + ": expected an experiment (a JSON object)");
  set_spec(j);
  path_ = path;
  set_modified(false);
}

void SpecEditor::save(const QString& path) {
  runner::write_file_atomically(path.toStdString(), spec().dump(2) + "\n");
  path_ = path;
  set_modified(false);
}

bool SpecEditor::validate() {
  check_timer_->stop();
  form_->clear_errors();
  try {
    const runner::ExperimentSpec parsed = runner::parse_spec(spec_as_run());
    problem_.clear();
    set_text_tone(status_, Tone::ok);
    status_->setText(tr("Valid: experiment \"%1\" with %n arm(s).", nullptr, static_cast<int>(parsed.arms.size()))
                         .arg(QString::fromStdString(parsed.name)));
    emit validity_changed(true, QString());
    return true;
  } catch (const std::exception& e) {
    problem_ = QString::fromStdString(e.what());
    form_->show_error(error_path(e.what()), problem_);
    set_text_tone(status_, Tone::error);
    status_->setText(problem_);
    emit validity_changed(false, problem_);
    return false;
  }
}

void SpecEditor::set_modified(bool m) {
  if (m == modified_) return;
  modified_ = m;
  emit modified_changed(m);
}

}  // namespace quartet::gui
