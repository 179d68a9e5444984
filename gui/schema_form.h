#pragma once

// A form built from a JSON Schema (the one `quartet schema` prints): a row per field,
// a group per object, a tab per element of an array of objects (the arms). An empty field
// is left out of the value, so the spec's own defaults apply; keys the schema does not
// list are kept as they were. Validation messages ("spec.arms[2].batch: expected …")
// are shown under the field they name.

#include <QString>
#include <QStringList>
#include <QWidget>

class QMenu;
class QToolButton;
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace quartet::gui {

class SchemaForm : public QWidget {
  Q_OBJECT

 public:
  // schema: an object schema (type, properties, required, enum, items, default,
  // description); `root` is the path of its value in messages ("spec").
  explicit SchemaForm(nlohmann::json schema, std::string root = "spec", QWidget* parent = nullptr);
  ~SchemaForm() override;

  void set_value(const nlohmann::json& value);
  nlohmann::json value() const;

  // Shows `message` under the field `path` names, or the nearest shown field above it
  // (switching to the arm's tab); returns the path it was shown at.
  std::string show_error(const std::string& path, const QString& message);
  void clear_errors();

  // Sets one plain field (a line or a choice) as a person would, `v` null to clear it.
  void set_field(const std::string& path, const nlohmann::json& v);
  // The menu of names a list field (format on an array: a pipeline's cuts) offers, or null.
  QMenu* picker(const std::string& path) const;

  // The editor of a field (a QLineEdit or QComboBox), or null; the error shown there.
  QWidget* editor(const std::string& path) const;
  QString error_at(const std::string& path) const;

  // Appends an element to the array of objects at `path` (the arms), as the Add button does.
  void add_item(const std::string& path, const nlohmann::json& item);

  // The names a string field of `format` (JSON Schema's "format": "model", "stage") may
  // hold, given the whole value and the field's path; its editor offers them in a list
  // and still takes any text (validation says what is wrong).
  using Suggestions = std::function<QStringList(const nlohmann::json& value, const std::string& path)>;
  void suggest(const std::string& format, Suggestions names);

  // A button labelled `label` beside every string field of `format` (a model's "File…"):
  // clicking it calls `pick` with the whole value and the field's path, and a text it
  // returns becomes the field's value as if typed; an empty one (cancelled) changes nothing.
  using Browse = std::function<QString(const nlohmann::json& value, const std::string& path)>;
  void browse(const std::string& format, const QString& label, Browse pick);
  // The button browse() put beside the field at `path`, or null.
  QToolButton* browse_button(const std::string& path) const;

 signals:
  void changed();

 private:
  struct Node;
  void build_object(Node& node, QWidget* container);
  QWidget* build_field(Node& node);
  // Placeholder (default or "required"), tooltip and allowed values from node.schema.
  void show_schema(Node& node);
  void rebuild_items(Node& list, const nlohmann::json& items);
  void fill(Node& node, const nlohmann::json& value);
  void reindex();
  void index_node(Node& node);
  // Shows each member of `object` that its regime takes and whose x-applies-when holds.
  void update_visibility(Node& object);
  void refresh_visibility(Node& n);
  void refresh_suggestions();
  void show_browse(Node& n);
  void browse_clicked(const std::string& path);
  void refresh_picker(Node& n, const QStringList& names);
  bool applies(const Node& object, const Node& n) const;
  // The field's x-applies-when, from its schema.
  static void read_when(Node& n);
  void edited();
  static std::optional<nlohmann::json> read(const Node& node);

  nlohmann::json schema_;
  std::unique_ptr<Node> root_;
  std::map<std::string, Node*> index_;
  std::map<std::string, Suggestions> suggestions_;
  std::map<std::string, std::pair<QString, Browse>> browsers_;  // format -> (label, pick)
  bool filling_ = false;
};

// The field path a validation message starts with ("spec.arms[2].batch" from
// "spec.arms[2].batch: expected …"), or "" when it names none.
std::string error_path(const std::string& message);

// The members an object schema gives per regime, from its if/then branches on "regime"
// (an arm's regime fields): member key -> regime -> that member's schema.
std::map<std::string, std::map<std::string, nlohmann::json>> regime_members(const nlohmann::json& object_schema);

}  // namespace quartet::gui
