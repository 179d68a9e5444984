#pragma once

// The experiment editor: a SchemaForm over the spec's JSON Schema, checked as it is
// edited by the same validation as `quartet validate`, the error shown at its field.

#include <QString>
#include <QWidget>
#include <nlohmann/json.hpp>
#include <string>

class QLabel;
class QTimer;

namespace quartet::gui {

class SchemaForm;

class SpecEditor : public QWidget {
  Q_OBJECT

 public:
  explicit SpecEditor(QWidget* parent = nullptr);

  // A small experiment to start from (synthetic data, two arms).
  void new_spec();
  // Reads an experiment file (comments allowed). Throws std::runtime_error naming the file.
  void load(const QString& path);
  // Writes the spec as JSON (comments in the file it came from are not kept). Throws
  // std::runtime_error naming the file.
  void save(const QString& path);
  void set_spec(const nlohmann::json& spec);
  nlohmann::json spec() const;
  // spec() with its relative onnx: model paths made absolute, read from the spec file's
  // folder (the working folder while it has none): what validation checks and a run gets.
  nlohmann::json spec_as_run() const;

  // Checks the spec now; shows the first problem at its field. Returns whether it is valid.
  bool validate();
  QString problem() const { return problem_; }  // the last validation message, "" when valid

  QString path() const { return path_; }
  bool modified() const { return modified_; }
  SchemaForm* form() const { return form_; }

 signals:
  void modified_changed(bool modified);
  void validity_changed(bool ok, const QString& message);

 private:
  void set_modified(bool m);
  // A workload switched to one its model does not fit: the first model that fits it.
  void follow_workload();
  // The model field's "File…": an ONNX file chosen in a file dialog, as "onnx:PATH";
  // empty when cancelled. `field` is the field's path in the form.
  QString choose_onnx_model(const std::string& field);
  // Makes spec's relative onnx: paths absolute, as spec_as_run() does.
  void resolve_models(nlohmann::json& spec) const;

  SchemaForm* form_;
  QLabel* status_;
  QTimer* check_timer_;
  QString path_;
  QString problem_;
  std::string workload_;  // the workload the model was last checked against
  bool modified_ = false;
};

// The experiment file schema (`quartet schema`), as the form reads it.
nlohmann::json spec_json_schema();

// The model field's value for an ONNX file: "onnx:" and the file's path relative to the
// folder of the spec file at `spec_path` ("onnx:../models/m.onnx"), or absolute while the
// spec has no file (`spec_path` empty).
QString onnx_model_value(const QString& file, const QString& spec_path);

}  // namespace quartet::gui
