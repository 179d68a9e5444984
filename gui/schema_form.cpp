#include "gui/schema_form.h"
#include "gui/tone.h"

#include <QComboBox>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalBlocker>
#include <QTabWidget>
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>
#include <functional>
#include <map>
#include <optional>

namespace quartet::gui {

using nlohmann::json;

namespace {


enum class Kind { line, choice, object, list };

// A wrapped message that holds the height of every line it wraps to at its width: the
// form in its scroll area lays rows out by their minimum heights, which a wrapped label
// does not give by itself (a long error was cut to two lines).
class WrappedLabel : public QLabel {
 public:
  explicit WrappedLabel(QWidget* parent) : QLabel(parent) { setWordWrap(true); }
  void show_text(const QString& text) {
    setText(text);
    show();
    fit();
  }

 protected:
  void resizeEvent(QResizeEvent* event) override {
    QLabel::resizeEvent(event);
    fit();
  }

 private:
  void fit() {
    if (width() <= 0 || isHidden()) return;
    if (const int h = heightForWidth(width()); h > 0 && minimumHeight() != h) setMinimumHeight(h);
  }
};

const json& field(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::string type_of(const json& schema) {
  const json& t = field(schema, "type");
  return t.is_string() ? t.get<std::string>() : "";
}

Kind kind_of(const json& schema) {
  const std::string t = type_of(schema);
  if (field(schema, "enum").is_array() || t == "boolean") return Kind::choice;
  if (t == "object" && field(schema, "properties").is_object() && !field(schema, "properties").empty())
    return Kind::object;
  if (t == "array" && type_of(field(schema, "items")) == "object") return Kind::list;
  return Kind::line;  // numbers, strings, arrays of strings, open objects (as JSON text)
}

// Members in the order a person fills them: what it is (name, regime, workload, model),
// then its plain values (the required ones first, the rest alphabetically), then nested
// groups (train, optimizer), and lists (the arms) last.
std::vector<std::string> member_order(const json& schema) {
  const json& required = field(schema, "required");
  auto is_required = [&](const std::string& key) {
    return required.is_array() && std::find(required.begin(), required.end(), key) != required.end();
  };
  const json& properties = field(schema, "properties");
  auto rank = [&](const std::string& key) {
    static const char* const kFirst[] = {"name", "regime", "workload", "model"};
    for (int i = 0; i < 4; ++i)
      if (key == kFirst[i]) return i;
    switch (kind_of(field(properties, key.c_str()))) {
      case Kind::object: return 6;
      case Kind::list: return 7;
      default: return is_required(key) ? 4 : 5;
    }
  };
  std::vector<std::string> order;
  for (const auto& [key, _] : properties.items()) order.push_back(key);  // alphabetical
  std::stable_sort(order.begin(), order.end(),
                   [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  return order;
}

QString json_text(const json& v) {
  if (v.is_string()) return QString::fromStdString(v.get<std::string>());
  if (v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); })) {
    QStringList parts;
    for (const json& e : v) parts << QString::fromStdString(e.get<std::string>());
    return parts.join(", ");
  }
  return QString::fromStdString(v.dump());
}

}  // namespace

struct SchemaForm::Node {
  std::string key;   // member name in its parent; "" for the root and list items
  std::string path;  // "spec.arms[0].name"
  json schema;
  Kind kind = Kind::line;
  bool required = false;
  std::vector<std::string> regimes;  // shown only for these regimes (arm members)
  std::map<std::string, json> schema_for;  // a regime member: its schema under each regime
  std::string when;                  // shown only while this field ("x-applies-when") ...
  std::vector<std::string> when_values;  // ... holds one of these (or is unset)
  QWidget* row = nullptr;            // what is hidden with the field
  QLabel* label = nullptr;
  QLineEdit* line = nullptr;
  QComboBox* combo = nullptr;
  QComboBox* names = nullptr;        // a line with known values to pick from (its line edit is `line`)
  QToolButton* pick = nullptr;       // a list of names: a menu of those known, ticked into `line`
  QToolButton* browse = nullptr;     // a name: its browse() button, hidden while none is registered
  QLabel* error = nullptr;
  QTabWidget* tabs = nullptr;  // list
  std::vector<std::unique_ptr<Node>> children;
  json extra = json::object();  // object: keys the schema does not list

  bool hidden() const { return row && row->isHidden(); }
  QWidget* editor() const { return line ? static_cast<QWidget*>(line) : combo; }
};

std::map<std::string, std::map<std::string, json>> regime_members(const json& object_schema) {
  std::map<std::string, std::map<std::string, json>> out;
  const json& branches = field(object_schema, "allOf");
  if (!branches.is_array()) return out;
  for (const json& b : branches) {
    const json& regime = field(field(field(field(b, "if"), "properties"), "regime"), "const");
    const json& members = field(field(b, "then"), "properties");
    if (!regime.is_string() || !members.is_object()) continue;
    for (const auto& [key, schema] : members.items()) out[key][regime.get<std::string>()] = schema;
  }
  return out;
}

std::string error_path(const std::string& message) {
  static const QRegularExpression path(R"(^(spec(?:\.[A-Za-z_][A-Za-z_0-9]*|\[\d+\])*)(?::|\s|$))");
  const QRegularExpressionMatch m = path.match(QString::fromStdString(message));
  return m.hasMatch() ? m.captured(1).toStdString() : "";
}

SchemaForm::SchemaForm(json schema, std::string root, QWidget* parent)
    : QWidget(parent), schema_(std::move(schema)), root_(std::make_unique<Node>()) {
  root_->path = std::move(root);
  root_->schema = schema_;
  root_->kind = Kind::object;
  root_->required = true;
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  build_object(*root_, this);
  layout->addStretch(1);
  reindex();
}

SchemaForm::~SchemaForm() = default;

void SchemaForm::build_object(Node& node, QWidget* container) {
  QBoxLayout* outer = qobject_cast<QBoxLayout*>(container->layout());
  if (!outer) outer = new QVBoxLayout(container);
  node.error = new WrappedLabel(container);
  set_text_tone(node.error, Tone::error);
  node.error->hide();
  outer->addWidget(node.error);
  // Label and field side by side, a row a field. A grid, not a QFormLayout: Qt 6.4's
  // QFormLayout writes past its row arrays in heightForWidth once rows are hidden (an
  // arm hides the fields its regime does not take) beside a wrapping label.
  auto* form = new QGridLayout;
  form->setColumnStretch(1, 1);
  outer->addLayout(form);
  const int line_height = QLineEdit().sizeHint().height();
  const json& required = field(node.schema, "required");
  int rows = 0;
  auto add_row = [&](std::unique_ptr<Node> child) {
    read_when(*child);
    QWidget* w = build_field(*child);
    child->label = new QLabel(QString::fromStdString(child->key) + (child->required ? " *" : ""), container);
    child->label->setToolTip(w->toolTip());
    // Level with a one-line field's text; at the top of a taller field.
    child->label->setMinimumHeight(line_height);
    child->label->setAlignment(Qt::AlignLeft | Qt::AlignVCenter);
    form->addWidget(child->label, rows, 0, Qt::AlignLeft | Qt::AlignTop);
    // A field that grows (a line edit, a group) takes the row's width; a dropdown keeps its own.
    const bool grows = ((w->layout() ? w->layout()->expandingDirections() : Qt::Orientations()) |
                        w->sizePolicy().expandingDirections()) &
                       Qt::Horizontal;
    form->addWidget(w, rows++, 1, grows ? Qt::Alignment() : Qt::AlignLeft);
    node.children.push_back(std::move(child));
  };
  for (const std::string& key : member_order(node.schema)) {
    auto child = std::make_unique<Node>();
    child->key = key;
    child->path = node.path + "." + key;
    child->schema = node.schema["properties"][key];
    child->kind = kind_of(child->schema);
    child->required = required.is_array() && std::find(required.begin(), required.end(), key) != required.end();
    add_row(std::move(child));
  }
  // An arm's regime fields: one row a field, shown for the regimes that take it, with
  // that regime's description, default and allowed values.
  for (auto& [key, by_regime] : regime_members(node.schema)) {
    auto child = std::make_unique<Node>();
    child->key = key;
    child->path = node.path + "." + key;
    child->schema = by_regime.begin()->second;
    child->kind = kind_of(child->schema);
    child->schema_for = by_regime;
    for (const auto& [regime, _] : by_regime) child->regimes.push_back(regime);
    for (const json& b : field(node.schema, "allOf")) {
      const json& req = field(field(b, "then"), "required");
      if (req.is_array() && std::find(req.begin(), req.end(), key) != req.end()) child->required = true;
    }
    add_row(std::move(child));
  }
  // An arm shows the fields of its regime only: edited() refreshes that as a choice changes.
  update_visibility(node);
}

QWidget* SchemaForm::build_field(Node& n) {
  const QString description = QString::fromStdString(field(n.schema, "description").is_string()
                                                         ? n.schema["description"].get<std::string>()
                                                         : std::string());
  QWidget* row = new QWidget;
  auto* v = new QVBoxLayout(row);
  v->setContentsMargins(0, 0, 0, 0);
  v->setSpacing(2);
  row->setToolTip(description);
  n.row = row;
  if (n.kind == Kind::object) {
    auto* box = new QGroupBox(row);
    box->setToolTip(description);
    v->addWidget(box);
    build_object(n, box);
    return row;
  }
  if (n.kind == Kind::list) {
    n.tabs = new QTabWidget(row);
    n.tabs->setDocumentMode(true);
    v->addWidget(n.tabs);
    auto* buttons = new QHBoxLayout;
    auto* add = new QPushButton(tr("Add"), row);
    auto* remove = new QPushButton(tr("Remove"), row);
    add->setToolTip(tr("Add an element (an arm) after the last"));
    remove->setToolTip(tr("Remove the element shown"));
    buttons->addWidget(add);
    buttons->addWidget(remove);
    buttons->addStretch(1);
    v->addLayout(buttons);
    Node* self = &n;
    connect(add, &QPushButton::clicked, this, [this, self] {
      const std::string name = "arm-" + std::to_string(self->children.size() + 1);
      add_item(self->path, {{"name", name}, {"regime", "single"}});
    });
    connect(remove, &QPushButton::clicked, this, [this, self] {
      const int at = self->tabs->currentIndex();
      if (at < 0) return;
      json items = read(*self).value_or(json::array());
      items.erase(items.begin() + at);
      rebuild_items(*self, items);
      edited();
    });
    return row;
  }
  if (n.kind == Kind::choice) {
    n.combo = new QComboBox(row);
    connect(n.combo, &QComboBox::currentIndexChanged, this, [this] { edited(); });
    v->addWidget(n.combo);
  } else if (field(n.schema, "format").is_string() && type_of(n.schema) == "array") {
    // A list of names (a pipeline's cuts): typed, or ticked in a menu of those that fit.
    auto* line = new QHBoxLayout;
    n.line = new QLineEdit(row);
    n.line->setClearButtonEnabled(true);
    n.pick = new QToolButton(row);
    n.pick->setText(tr("Pick"));
    n.pick->setToolTip(tr("Tick the names, in order"));
    n.pick->setPopupMode(QToolButton::InstantPopup);
    n.pick->setMenu(new QMenu(n.pick));
    connect(n.line, &QLineEdit::textEdited, this, [this] { edited(); });
    line->addWidget(n.line, 1);
    line->addWidget(n.pick);
    v->addLayout(line);
  } else if (field(n.schema, "format").is_string() && type_of(n.schema) == "string") {
    n.names = new QComboBox(row);
    n.names->setEditable(true);
    n.names->setInsertPolicy(QComboBox::NoInsert);
    n.names->setSizeAdjustPolicy(QComboBox::AdjustToContents);  // as wide as its longest name
    n.names->setMinimumContentsLength(12);                       // and room to type one
    n.line = n.names->lineEdit();
    connect(n.line, &QLineEdit::textEdited, this, [this] { edited(); });
    connect(n.names, &QComboBox::textActivated, this, [this] { edited(); });
    // As wide as the row: a file's path needs the room a name does not.
    auto* line = new QHBoxLayout;
    line->addWidget(n.names, 1);
    n.browse = new QToolButton(row);
    const std::string path = n.path;  // the node may be rebuilt (an arm's tab): found again by path
    connect(n.browse, &QToolButton::clicked, this, [this, path] { browse_clicked(path); });
    line->addWidget(n.browse);
    v->addLayout(line);
    show_browse(n);
  } else {
    n.line = new QLineEdit(row);
    n.line->setClearButtonEnabled(true);
    connect(n.line, &QLineEdit::textEdited, this, [this] { edited(); });
    v->addWidget(n.line);
  }
  show_schema(n);
  n.error = new WrappedLabel(row);
  set_text_tone(n.error, Tone::error);
  n.error->hide();
  v->addWidget(n.error);
  return row;
}

void SchemaForm::show_schema(Node& n) {
  const QString description = QString::fromStdString(field(n.schema, "description").is_string()
                                                         ? n.schema["description"].get<std::string>()
                                                         : std::string());
  const json& def = field(n.schema, "default");
  // An empty default string means "not set" (data_dir: the workload's own folder).
  const bool no_default = def.is_null() || (def.is_string() && def.get<std::string>().empty());
  QString placeholder =
      no_default ? (n.required ? tr("required") : tr("not set")) : tr("default: %1").arg(json_text(def));
  n.row->setToolTip(description);
  if (n.label) n.label->setToolTip(description);
  if (n.combo) {
    // The same value stays chosen when the allowed ones change (another regime's list).
    const QString chosen = n.combo->currentData().toString();
    const bool was_filling = filling_;
    filling_ = true;
    n.combo->clear();
    // A required choice has nothing to fall back on: its placeholder is no item to pick.
    if (n.required) n.combo->setPlaceholderText(placeholder);
    else n.combo->addItem(placeholder, QString());
    if (type_of(n.schema) == "boolean") {
      n.combo->addItem("true", "true");
      n.combo->addItem("false", "false");
    } else {
      for (const json& e : n.schema["enum"]) n.combo->addItem(json_text(e), json_text(e));
    }
    if (!chosen.isEmpty()) {
      int at = n.combo->findData(chosen);
      if (at < 0) {  // not allowed here: kept, and validation will say so
        n.combo->addItem(chosen, chosen);
        at = n.combo->count() - 1;
      }
      n.combo->setCurrentIndex(at);
    } else if (n.required) {
      n.combo->setCurrentIndex(-1);
    }
    filling_ = was_filling;
    n.combo->setToolTip(description);
  }
  if (n.line) {
    const std::string t = type_of(n.schema);
    if (t == "array") placeholder += tr(" (comma-separated)");
    if (t == "object") placeholder += tr(" (a JSON object)");
    n.line->setPlaceholderText(placeholder);
    n.line->setToolTip(description);
  }
}

void SchemaForm::rebuild_items(Node& list, const json& items) {
  const bool was_filling = filling_;
  filling_ = true;
  const int shown = list.tabs->currentIndex();
  index_.clear();  // it points into the items about to go; reindex() below rebuilds it
  while (list.tabs->count() > 0) {
    QWidget* page = list.tabs->widget(0);
    list.tabs->removeTab(0);
    delete page;
  }
  list.children.clear();
  const json& item_schema = list.schema["items"];
  for (size_t i = 0; i < items.size(); ++i) {
    auto item = std::make_unique<Node>();
    item->path = list.path + "[" + std::to_string(i) + "]";
    item->schema = item_schema;
    item->kind = Kind::object;
    item->required = true;
    auto* page = new QWidget;
    build_object(*item, page);
    fill(*item, items[i]);
    const json& name = field(items[i], "name");
    list.tabs->addTab(page, name.is_string() ? QString::fromStdString(name.get<std::string>()) : tr("item %1").arg(i + 1));
    // The tab follows the element's name as it is typed.
    for (auto& c : item->children)
      if (c->key == "name" && c->line) {
        QLineEdit* edit = c->line;
        QTabWidget* tabs = list.tabs;
        connect(edit, &QLineEdit::textChanged, this, [tabs, page, edit] {
          tabs->setTabText(tabs->indexOf(page), edit->text().isEmpty() ? tr("(unnamed)") : edit->text());
        });
      }
    list.children.push_back(std::move(item));
  }
  if (shown >= 0 && list.tabs->count() > 0) list.tabs->setCurrentIndex(std::min(shown, list.tabs->count() - 1));
  filling_ = was_filling;
  reindex();
}

void SchemaForm::add_item(const std::string& path, const json& item) {
  auto it = index_.find(path);
  if (it == index_.end() || it->second->kind != Kind::list) return;
  Node& list = *it->second;
  json items = read(list).value_or(json::array());
  items.push_back(item);
  rebuild_items(list, items);
  list.tabs->setCurrentIndex(list.tabs->count() - 1);
  edited();
}

void SchemaForm::read_when(Node& n) {
  n.when.clear();
  n.when_values.clear();
  const json& when = field(n.schema, "x-applies-when");
  if (!when.is_object() || when.size() != 1 || !when.begin().value().is_array()) return;
  n.when = when.begin().key();
  for (const json& v : when.begin().value())
    if (v.is_string()) n.when_values.push_back(v.get<std::string>());
}

bool SchemaForm::applies(const Node& object, const Node& n) const {
  if (n.when.empty()) return true;
  // A sibling's name, or a JSON Pointer from the root ("/workload/name").
  QString path = QString::fromStdString(object.path) + '.' + QString::fromStdString(n.when);
  if (n.when.front() == '/')
    path = QString::fromStdString(root_->path) + QString::fromStdString(n.when).replace('/', '.');
  auto it = index_.find(path.toStdString());
  if (it == index_.end() || !it->second->combo || it->second->hidden()) return true;
  // The value that will run: the one chosen, else the field's default.
  std::string value = it->second->combo->currentData().toString().toStdString();
  if (const json& def = field(it->second->schema, "default"); value.empty() && def.is_string()) value = def.get<std::string>();
  return value.empty() || std::find(n.when_values.begin(), n.when_values.end(), value) != n.when_values.end();
}

void SchemaForm::update_visibility(Node& object) {
  std::string chosen;
  for (auto& c : object.children)
    if (c->key == "regime" && c->combo) chosen = c->combo->currentData().toString().toStdString();
  for (auto& c : object.children) {
    if (auto it = c->schema_for.find(chosen); it != c->schema_for.end() && it->second != c->schema) {
      c->schema = it->second;
      read_when(*c);  // two regimes' field may apply under different conditions (split's cuts, pipeline's)
      if (c->kind == Kind::line || c->kind == Kind::choice) show_schema(*c);
    }
  }
  for (auto& c : object.children) {
    const bool regime_ok =
        c->regimes.empty() || chosen.empty() || std::find(c->regimes.begin(), c->regimes.end(), chosen) != c->regimes.end();
    const bool show = regime_ok && applies(object, *c);
    if (c->row->isHidden() == show) {
      c->row->setVisible(show);
      c->label->setVisible(show);
    }
  }
}

void SchemaForm::refresh_visibility(Node& n) {
  if (n.kind != Kind::object && n.kind != Kind::list) return;
  if (n.kind == Kind::object) update_visibility(n);
  for (auto& c : n.children) refresh_visibility(*c);
}

void SchemaForm::fill(Node& n, const json& v) {
  switch (n.kind) {
    case Kind::object: {
      n.extra = json::object();
      if (v.is_object())
        for (const auto& [key, val] : v.items())
          if (std::none_of(n.children.begin(), n.children.end(), [&](const auto& c) { return c->key == key; }))
            n.extra[key] = val;
      for (auto& c : n.children) fill(*c, v.is_object() && v.contains(c->key) ? v[c->key] : json());
      update_visibility(n);
      return;
    }
    case Kind::list: rebuild_items(n, v.is_array() ? v : json::array()); return;
    case Kind::choice: {
      if (v.is_null()) {
        n.combo->setCurrentIndex(n.required ? -1 : 0);
        return;
      }
      const QString text = json_text(v);
      int at = n.combo->findData(text);
      if (at < 0) {  // a value the schema does not list: kept, and validation will say so
        n.combo->addItem(text, text);
        at = n.combo->count() - 1;
      }
      n.combo->setCurrentIndex(at);
      return;
    }
    case Kind::line: n.line->setText(v.is_null() ? QString() : json_text(v)); return;
  }
}

void SchemaForm::set_value(const json& value) {
  filling_ = true;
  fill(*root_, value);
  filling_ = false;
  reindex();
  clear_errors();
}

namespace {

std::optional<json> line_value(const json& schema, const QString& raw) {
  const QString text = raw.trimmed();
  if (text.isEmpty()) return std::nullopt;
  const std::string t = type_of(schema);
  bool ok = false;
  if (t == "integer") {
    const qlonglong v = text.toLongLong(&ok);
    return ok ? json(static_cast<int64_t>(v)) : json(text.toStdString());
  }
  if (t == "number") {
    const double v = text.toDouble(&ok);
    return ok ? json(v) : json(text.toStdString());
  }
  if (t == "array") {
    json out = json::array();
    for (const QString& part : text.split(',', Qt::SkipEmptyParts))
      if (!part.trimmed().isEmpty()) out.push_back(part.trimmed().toStdString());
    return out;
  }
  if (t == "object") {
    try {
      return json::parse(text.toStdString());
    } catch (const json::exception&) {
      return json(text.toStdString());  // validation names the field
    }
  }
  return json(text.toStdString());
}

}  // namespace

std::optional<json> SchemaForm::read(const Node& n) {
  if (n.hidden()) return std::nullopt;
  switch (n.kind) {
    case Kind::object: {
      json out = n.extra;
      for (const auto& c : n.children)
        if (auto v = read(*c)) out[c->key] = *v;
      if (out.empty() && !n.required) return std::nullopt;
      return out;
    }
    case Kind::list: {
      json out = json::array();
      for (const auto& c : n.children) out.push_back(read(*c).value_or(json::object()));
      return out;
    }
    case Kind::choice: {
      const QString data = n.combo->currentData().toString();
      if (data.isEmpty()) return std::nullopt;
      if (type_of(n.schema) == "boolean") return json(data == "true");
      return json(data.toStdString());
    }
    case Kind::line: return line_value(n.schema, n.line->text());
  }
  return std::nullopt;
}

json SchemaForm::value() const { return read(*root_).value_or(json::object()); }

void SchemaForm::index_node(Node& n) {
  index_[n.path] = &n;
  for (auto& c : n.children) index_node(*c);
}

void SchemaForm::reindex() {
  index_.clear();
  index_node(*root_);
  refresh_visibility(*root_);
  refresh_suggestions();
}

std::string SchemaForm::show_error(const std::string& path, const QString& message) {
  std::string at = path.empty() ? root_->path : path;
  while (true) {
    auto it = index_.find(at);
    if (it != index_.end() && !it->second->hidden()) break;
    const size_t cut = at.find_last_of(".[");
    if (cut == std::string::npos || at.size() <= root_->path.size()) {
      at = root_->path;
      break;
    }
    at = at.substr(0, cut);
  }
  Node* n = index_.at(at);
  static_cast<WrappedLabel*>(n->error)->show_text(message);
  if (QWidget* e = n->editor()) set_field_tone(e, Tone::error);
  // Show the tabs on the way down to it.
  for (const auto& [p, node] : index_)
    if (node->kind == Kind::list && at.rfind(p + "[", 0) == 0) {
      const int i = std::stoi(at.substr(p.size() + 1));
      if (i < node->tabs->count()) node->tabs->setCurrentIndex(i);
    }
  return at;
}

void SchemaForm::clear_errors() {
  for (auto& [path, n] : index_) {
    if (n->error) {
      n->error->clear();
      n->error->hide();
      n->error->setMinimumHeight(0);
    }
    if (QWidget* e = n->editor()) set_field_tone(e, Tone::plain);
  }
}

void SchemaForm::suggest(const std::string& format, Suggestions names) {
  suggestions_[format] = std::move(names);
  refresh_suggestions();
}

void SchemaForm::browse(const std::string& format, const QString& label, Browse pick) {
  browsers_[format] = {label, std::move(pick)};
  for (auto& [path, n] : index_)
    if (n->browse) show_browse(*n);
}

void SchemaForm::show_browse(Node& n) {
  auto it = browsers_.find(field(n.schema, "format").get<std::string>());
  n.browse->setVisible(it != browsers_.end());
  if (it != browsers_.end()) n.browse->setText(it->second.first);
}

QToolButton* SchemaForm::browse_button(const std::string& path) const {
  auto it = index_.find(path);
  return it == index_.end() || !it->second->browse || it->second->browse->isHidden() ? nullptr : it->second->browse;
}

void SchemaForm::browse_clicked(const std::string& path) {
  auto node = index_.find(path);
  if (node == index_.end()) return;
  auto it = browsers_.find(field(node->second->schema, "format").get<std::string>());
  if (it == browsers_.end()) return;
  const QString text = it->second.second(value(), path);
  if (text.isEmpty()) return;
  // Found again: the dialog's event loop may have rebuilt the form.
  node = index_.find(path);
  if (node == index_.end()) return;
  node->second->line->setText(text);
  edited();
}

void SchemaForm::refresh_picker(Node& n, const QStringList& names) {
  QMenu* menu = n.pick->menu();
  QStringList listed;
  for (QAction* a : menu->actions()) listed << a->text();
  if (listed != names) {
    menu->clear();
    QLineEdit* line = n.line;
    for (const QString& name : names) {
      QAction* a = menu->addAction(name);
      a->setCheckable(true);
      // Ticking keeps the names in the model's order.
      connect(a, &QAction::toggled, this, [this, menu, line] {
        QStringList picked;
        for (QAction* b : menu->actions())
          if (b->isChecked()) picked << b->text();
        line->setText(picked.join(", "));
        edited();
      });
    }
  }
  const QStringList typed = n.line->text().split(',', Qt::SkipEmptyParts);
  for (QAction* a : menu->actions()) {
    const QSignalBlocker block(a);
    a->setChecked(std::any_of(typed.begin(), typed.end(), [&](const QString& t) { return t.trimmed() == a->text(); }));
  }
  n.pick->setEnabled(!names.isEmpty());
}

void SchemaForm::refresh_suggestions() {
  if (suggestions_.empty()) return;
  const json whole = value();
  for (auto& [path, n] : index_) {
    if (n->pick) {
      auto it = suggestions_.find(field(n->schema, "format").get<std::string>());
      if (it != suggestions_.end()) refresh_picker(*n, it->second(whole, path));
      continue;
    }
    if (!n->names) continue;
    auto it = suggestions_.find(field(n->schema, "format").get<std::string>());
    if (it == suggestions_.end()) continue;
    const QStringList names = it->second(whole, path);
    QStringList shown;
    for (int i = 0; i < n->names->count(); ++i) shown << n->names->itemText(i);
    if (names == shown) continue;
    const QString text = n->line->text();  // clearing the list would clear the text
    const QSignalBlocker block(n->names);
    n->names->clear();
    n->names->addItems(names);
    n->names->setCurrentIndex(-1);
    n->line->setText(text);
  }
}

void SchemaForm::set_field(const std::string& path, const json& v) {
  auto it = index_.find(path);
  if (it == index_.end() || (it->second->kind != Kind::line && it->second->kind != Kind::choice)) return;
  const bool was_filling = filling_;
  filling_ = true;
  fill(*it->second, v);
  filling_ = was_filling;
  edited();
}

QWidget* SchemaForm::editor(const std::string& path) const {
  auto it = index_.find(path);
  return it == index_.end() ? nullptr : it->second->editor();
}

QMenu* SchemaForm::picker(const std::string& path) const {
  auto it = index_.find(path);
  return it == index_.end() || !it->second->pick ? nullptr : it->second->pick->menu();
}

QString SchemaForm::error_at(const std::string& path) const {
  auto it = index_.find(path);
  return it == index_.end() || !it->second->error || it->second->error->isHidden() ? QString() : it->second->error->text();
}

void SchemaForm::edited() {
  if (filling_) return;
  refresh_visibility(*root_);
  refresh_suggestions();
  emit changed();
}

}  // namespace quartet::gui
