// The experiment editor: a form built from the spec's JSON Schema; editing a field
// changes the spec; validation errors appear at the field they name.

#include <QComboBox>
#include <QApplication>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QTimer>
#include <QToolButton>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QTabBar>
#include <QWheelEvent>
#include <QPushButton>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QtTest>
#include <functional>

#include "runner/spec.h"
#include "gui/schema_form.h"
#include "gui/spec_editor.h"
#include "workloads/onnx/model.h"
#include "workloads/workload.h"
#include "tests/gui/gui_test_util.h"

using namespace quartet::gui;
using nlohmann::json;

namespace {

json tiny_spec() { return json::parse(gui_test::read_text(gui_test::fixture_spec())); }

QLineEdit* line(SpecEditor& e, const std::string& path) {
  auto* w = qobject_cast<QLineEdit*>(e.form()->editor(path));
  if (!w) throw std::runtime_error("no line edit at " + path);
  return w;
}

QComboBox* combo(SpecEditor& e, const std::string& path) {
  auto* w = qobject_cast<QComboBox*>(e.form()->editor(path));
  if (!w) throw std::runtime_error("no combo box at " + path);
  return w;
}

// Replaces a field's text as a user would: select all, type.
void type_into(QLineEdit* edit, const QString& text) {
  edit->selectAll();
  QTest::keyClicks(edit, text);
}

// Answers the next file dialog `owner` opens as a user would, once it is up: `answer`
// picks a file and accepts, or rejects.
void when_file_dialog_opens(QWidget* owner, std::function<void(QFileDialog*)> answer) {
  auto* watch = new QTimer(owner);
  watch->setInterval(10);
  QObject::connect(watch, &QTimer::timeout, owner, [owner, watch, answer] {
    for (QFileDialog* dialog : owner->findChildren<QFileDialog*>()) {
      if (!dialog->isVisible()) continue;
      watch->stop();
      watch->deleteLater();
      answer(dialog);
      return;
    }
  });
  watch->start();
}

}  // namespace

class SpecEditorTest : public QObject {
  Q_OBJECT

 private slots:
  // Qt's own file dialog, which a test can answer, wherever a platform has its own.
  void initTestCase() { QCoreApplication::setAttribute(Qt::AA_DontUseNativeDialogs); }

  void FormHasAFieldPerSchemaMember() {
    SpecEditor e;
    e.set_spec(tiny_spec());
    for (const char* path : {"spec.name", "spec.seed", "spec.workload.model", "spec.train.batch",
                             "spec.train.optimizer.lr", "spec.arms[0].name", "spec.arms[4].clients"})
      QVERIFY2(e.form()->editor(path), path);
    QVERIFY(qobject_cast<QComboBox*>(e.form()->editor("spec.arms[0].regime")));
    QVERIFY(qobject_cast<QComboBox*>(e.form()->editor("spec.train.optimizer.nesterov")));
  }

  void SettingAndReadingBackKeepsTheSpec() {
    SpecEditor e;
    e.set_spec(tiny_spec());
    QCOMPARE(e.spec(), tiny_spec());
    QVERIFY(e.validate());
  }

  void EditingAFieldChangesTheSpec() {
    SpecEditor e;
    e.set_spec(tiny_spec());
    QSignalSpy modified(&e, &SpecEditor::modified_changed);
    type_into(line(e, "spec.train.batch"), "64");
    QCOMPARE(e.spec()["train"]["batch"], json(64));
    type_into(line(e, "spec.train.optimizer.lr"), "0.1");
    QCOMPARE(e.spec()["train"]["optimizer"]["lr"], json(0.1));
    combo(e, "spec.arms[0].regime")->setCurrentText("accumulate");
    type_into(line(e, "spec.arms[0].micro_batches"), "4");
    QCOMPARE(e.spec()["arms"][0]["regime"], json("accumulate"));
    QCOMPARE(e.spec()["arms"][0]["micro_batches"], json(4));
    QVERIFY(e.modified());
    QCOMPARE(modified.count(), 1);
  }

  void ClearingAFieldLeavesItToTheDefault() {
    SpecEditor e;
    e.set_spec(tiny_spec());
    line(e, "spec.seed")->clear();
    QVERIFY(!e.spec().contains("seed"));
    QVERIFY(e.validate());
  }

  void AnArmShowsOnlyItsRegimesFields() {
    SpecEditor e;
    e.set_spec(tiny_spec());
    QWidget* ranks = e.form()->editor("spec.arms[0].ranks");
    QVERIFY(ranks->parentWidget()->isHidden());  // single has no ranks
    combo(e, "spec.arms[0].regime")->setCurrentText("data_parallel");
    QVERIFY(!ranks->parentWidget()->isHidden());
    type_into(qobject_cast<QLineEdit*>(ranks), "2");
    QCOMPARE(e.spec()["arms"][0]["ranks"], json(2));
    // Back to single: the hidden ranks leave the spec, which stays valid.
    combo(e, "spec.arms[0].regime")->setCurrentText("single");
    QVERIFY(!e.spec()["arms"][0].contains("ranks"));
    QVERIFY(e.validate());
    // A single arm shows no federated, split or data-parallel field.
    for (const char* other : {"clients", "rounds", "cut", "topk_fraction", "compress", "ranks", "zero", "backend"})
      if (QWidget* w = e.form()->editor(std::string("spec.arms[0].") + other))
        QVERIFY2(!w->isVisibleTo(e.form()), other);
  }

  // A field shows where it means something: Adam's betas for Adam, momentum for SGD, the
  // volume fields for volume workloads; what is hidden leaves the spec.
  void FieldsFollowTheOptimizerAndTheWorkload() {
    SpecEditor e;
    e.set_spec(tiny_spec());
    auto shown = [&](const char* path) { return e.form()->editor(path)->isVisibleTo(e.form()); };
    combo(e, "spec.train.optimizer.name")->setCurrentText("sgd");
    QVERIFY(shown("spec.train.optimizer.momentum"));
    QVERIFY(!shown("spec.train.optimizer.beta1"));
    QVERIFY(!shown("spec.train.optimizer.eps"));
    type_into(line(e, "spec.train.optimizer.momentum"), "0.9");
    combo(e, "spec.train.optimizer.name")->setCurrentText("adam");
    QVERIFY(!shown("spec.train.optimizer.momentum"));
    QVERIFY(shown("spec.train.optimizer.beta1"));
    QVERIFY(!e.spec()["train"]["optimizer"].contains("momentum"));
    QVERIFY(e.validate());

    combo(e, "spec.workload.name")->setCurrentText("synthetic");
    QVERIFY(shown("spec.workload.train_samples"));
    for (const char* volume_field : {"spec.workload.volume_size", "spec.workload.patch", "spec.arms[0].patch"})
      QVERIFY2(!shown(volume_field), volume_field);
    combo(e, "spec.workload.name")->setCurrentText("phantom-ct-seg");
    QVERIFY(!shown("spec.workload.train_samples"));
    for (const char* volume_field : {"spec.workload.volume_size", "spec.workload.patch", "spec.arms[0].patch"})
      QVERIFY2(shown(volume_field), volume_field);
  }

  // model and cut offer the names that fit: the workload's models, the model's stages.
  void ModelAndCutOfferTheNamesThatFit() {
    SpecEditor e;
    e.set_spec(tiny_spec());
    auto names = [&](const std::string& path) {
      auto* box = qobject_cast<QComboBox*>(e.form()->editor(path)->parentWidget());
      if (!box) throw std::runtime_error("no list of names at " + path);
      QStringList out;
      for (int i = 0; i < box->count(); ++i) out << box->itemText(i);
      return std::pair{box, out};
    };
    combo(e, "spec.workload.name")->setCurrentText("synthetic");
    auto [models, fitting] = names("spec.workload.model");
    QVERIFY(fitting.contains("cnn"));
    QVERIFY(fitting.contains("resnet-mini"));
    QVERIFY(!fitting.contains("unet3d"));
    // Picking one sets the field; the split arm's cut then offers that model's stages.
    models->setCurrentIndex(fitting.indexOf("lenet5"));
    emit models->textActivated("lenet5");
    QCOMPARE(e.spec()["workload"]["model"], json("lenet5"));
    combo(e, "spec.arms[0].regime")->setCurrentText("split");
    QCOMPARE(names("spec.arms[0].cut").second, (QStringList{"conv1", "conv2", "fc1", "fc2", "fc3"}));
    combo(e, "spec.workload.name")->setCurrentText("phantom-ct-seg");
    QVERIFY(names("spec.workload.model").second.contains("unet3d"));
    QVERIFY(!names("spec.workload.model").second.contains("cnn"));
    // Any text is still taken, and validation says what is wrong with it.
    type_into(line(e, "spec.workload.model"), "no-such-model");
    QCOMPARE(e.spec()["workload"]["model"], json("no-such-model"));
    QVERIFY(!e.validate());
  }

  // Fields in the order a person fills them: what it is first, its values, groups, the
  // arms last; an optimizer's name before its settings.
  void FieldsComeInTheOrderAPersonFillsThem() {
    SpecEditor e;
    e.set_spec(tiny_spec());
    auto y = [&](const char* path) {
      QWidget* w = e.form()->editor(path);
      return w ? w->mapTo(&e, QPoint(0, 0)).y() : -1;
    };
    e.resize(900, 4000);
    e.show();
    QVERIFY(QTest::qWaitForWindowExposed(&e));
    QVERIFY(y("spec.name") < y("spec.workload.name"));
    QVERIFY(y("spec.workload.name") < y("spec.seed"));
    QVERIFY(y("spec.seed") < y("spec.train.batch"));
    QVERIFY2(y("spec.train.optimizer.name") < y("spec.train.optimizer.lr"), qPrintable(QString("%1 %2 %3").arg(y("spec.train.optimizer.name")).arg(y("spec.train.optimizer.lr")).arg(y("spec.train.batch"))));
    QVERIFY(y("spec.train.optimizer.name") < y("spec.train.optimizer.momentum"));
  }

  void ABadValueShowsItsErrorAtTheField() {
    SpecEditor e;
    e.set_spec(tiny_spec());
    type_into(line(e, "spec.train.batch"), "0");
    QVERIFY(!e.validate());
    QVERIFY2(e.form()->error_at("spec.train.batch").contains("expected an integer ≥ 1"),
             qPrintable(e.form()->error_at("spec.train.batch")));
    QVERIFY(e.problem().startsWith("spec.train.batch"));
    type_into(line(e, "spec.train.batch"), "32");
    QVERIFY(e.validate());
    QVERIFY(e.form()->error_at("spec.train.batch").isEmpty());
  }

  void AnArmsErrorShowsOnItsTab() {
    SpecEditor e;
    e.set_spec(tiny_spec());
    type_into(line(e, "spec.arms[1].micro_batches"), "3");
    QVERIFY(!e.validate());
    QVERIFY2(e.form()->error_at("spec.arms[1].micro_batches").contains("does not divide the batch 32"),
             qPrintable(e.problem()));
    auto* tabs = e.form()->findChild<QTabWidget*>();
    QVERIFY(tabs);
    QCOMPARE(tabs->currentIndex(), 1);
  }

  void ArmsCanBeAddedAndRemoved() {
    SpecEditor e;
    e.set_spec(tiny_spec());
    e.form()->add_item("spec.arms", {{"name", "accum-4"}, {"regime", "accumulate"}, {"micro_batches", 4}});
    QCOMPARE(e.spec()["arms"].size(), size_t{6});
    QCOMPARE(e.spec()["arms"][5]["micro_batches"], json(4));
    QVERIFY(e.validate());
    auto* tabs = e.form()->findChild<QTabWidget*>();
    tabs->setCurrentIndex(0);
    auto buttons = e.form()->findChildren<QPushButton*>();
    QPushButton* remove = nullptr;
    for (QPushButton* b : buttons)
      if (b->text() == "Remove") remove = b;
    QVERIFY(remove);
    remove->click();
    QCOMPARE(e.spec()["arms"].size(), size_t{5});
    QCOMPARE(e.spec()["arms"][0]["name"], json("accum-2"));
  }

  void LoadAndSaveKeepTheExperiment() {
    // quickstart.json has comments; what is saved parses to the same experiment.
    const QString quickstart = QString(QUARTET_SOURCE_DIR) + "/experiments/quickstart.json";
    SpecEditor e;
    e.load(quickstart);
    QVERIFY2(e.validate(), qPrintable(e.problem()));
    QVERIFY(!e.modified());
    QTemporaryDir tmp;
    const QString saved = tmp.filePath("saved.json");
    e.save(saved);
    SpecEditor again;
    again.load(saved);
    QCOMPARE(quartet::runner::load_spec_file(saved.toStdString()).json,
             quartet::runner::load_spec_file(quickstart.toStdString()).json);
  }

  void UnreadableFilesAreNamed() {
    QTemporaryDir tmp;
    SpecEditor e;
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, e.load(tmp.filePath("none.json")));
    gui_test::write_text(tmp.filePath("bad.json").toStdString(), "{ \"name\": ");
    try {
      e.load(tmp.filePath("bad.json"));
      QFAIL("a broken file loaded");
    } catch (const std::runtime_error& err) {
      QVERIFY(QString(err.what()).contains("bad.json: not valid JSON"));
    }
  }

  void ErrorPathsAreReadFromText() {
    QCOMPARE(error_path("spec.arms[2].batch: expected an integer"), std::string("spec.arms[2].batch"));
    QCOMPARE(error_path("spec.name: expected letters"), std::string("spec.name"));
    QCOMPARE(error_path("no arm named x"), std::string());
  }

  // An arm's regime fields come from the schema's branches, which the regime table makes.
  void RegimeFieldsAreReadFromTheSchemasBranches() {
    const auto members = regime_members(quartet::runner::spec_json_schema()["properties"]["arms"]["items"]);
    QCOMPARE(members.at("ranks").size(), size_t{5});
    QVERIFY(members.at("ranks").count("data_parallel"));
    QVERIFY(members.at("ranks").count("tensor_parallel"));
    QVERIFY(members.at("ranks").count("context_parallel"));
    QVERIFY(members.at("ranks").count("expert_parallel"));
    QVERIFY(members.at("ranks").count("mesh"));
    QCOMPARE(members.at("backend").at("data_parallel")["default"], json("gloo"));
    QCOMPARE(members.at("backend").at("tensor_parallel")["default"], json("shm"));
    QCOMPARE(members.at("backend").at("context_parallel")["enum"], json::array({"shm", "gloo"}));
    QCOMPARE(members.at("clients").size(), size_t{2});
    QCOMPARE(members.at("clients").at("federated")["default"], json(10));
    QCOMPARE(members.at("clients").at("split")["default"], json(1));
    QVERIFY(!members.count("name"));  // every arm's
  }

  // A mesh arm's axes are fields of its "mesh" object: typed into, they land there.
  void AMeshArmEditsItsAxes() {
    SpecEditor e;
    e.set_spec(tiny_spec());
    combo(e, "spec.arms[0].regime")->setCurrentText("mesh");
    type_into(line(e, "spec.arms[0].mesh.dp"), "2");
    type_into(line(e, "spec.arms[0].mesh.tp"), "2");
    QCOMPARE(e.spec()["arms"][0]["mesh"]["dp"], json(2));
    QCOMPARE(e.spec()["arms"][0]["mesh"]["tp"], json(2));
    QVERIFY(!e.spec()["arms"][0]["mesh"].contains("pp"));
  }

  // A field two regimes take shows the chosen regime's default and allowed values.
  void ASharedFieldFollowsTheChosenRegime() {
    SpecEditor e;
    e.set_spec(tiny_spec());
    combo(e, "spec.arms[0].regime")->setCurrentText("federated");
    QCOMPARE(line(e, "spec.arms[0].clients")->placeholderText(), QString("default: 10"));
    QCOMPARE(combo(e, "spec.arms[0].compress")->findData("topk") > 0, true);
    combo(e, "spec.arms[0].regime")->setCurrentText("split");
    QCOMPARE(line(e, "spec.arms[0].clients")->placeholderText(), QString("default: 1"));
    combo(e, "spec.arms[0].regime")->setCurrentText("data_parallel");
    QCOMPARE(combo(e, "spec.arms[0].compress")->findData("topk"), -1);
  }

  // The wheel turned over a dropdown or the arms' tab bar while the form scrolls changes
  // nothing; once the dropdown has the focus (a click, Tab) it does.
  void TheWheelChangesOnlyAFocusedDropdown() {
    SpecEditor e;
    e.resize(900, 700);
    e.show();
    QVERIFY(QTest::qWaitForWindowExposed(&e));
    e.set_spec(tiny_spec());
    QComboBox* regime = combo(e, "spec.arms[0].regime");
    auto wheel = [](QWidget* w) {
      QWheelEvent down(QPointF(5, 5), w->mapToGlobal(QPointF(5, 5)), QPoint(), QPoint(0, -120), Qt::NoButton,
                       Qt::NoModifier, Qt::NoScrollPhase, false);
      QApplication::sendEvent(w, &down);
    };
    QVERIFY(!regime->hasFocus());
    const QString before = regime->currentText();
    wheel(regime);
    QCOMPARE(regime->currentText(), before);
    QCOMPARE(regime->focusPolicy(), Qt::StrongFocus);  // the wheel does not give it the focus either
    // The arms' tab bar: the arm shown stays.
    QTabBar* bar = nullptr;
    for (QTabWidget* tabs : e.form()->findChildren<QTabWidget*>())
      if (tabs->count() == 5) bar = tabs->tabBar();
    QVERIFY(bar);
    bar->setCurrentIndex(1);
    wheel(bar);
    QCOMPARE(bar->currentIndex(), 1);
    // Focused, the dropdown takes the wheel: the guard is what kept it still above.
    e.activateWindow();
    regime->setFocus(Qt::TabFocusReason);
    if (!regime->hasFocus()) QSKIP("the platform gives no window the focus");
    wheel(regime);
    QVERIFY(regime->currentText() != before);
  }

  // What a field depends on counts at its default when it is not set: a federated arm of
  // the default strategy (fedavg) shows none of the others' fields, the default constant
  // schedule none of step's or cosine's, a vanilla split arm (the default) its cut but no
  // cuts.
  void FieldsHideWhereTheDefaultDoesNotTakeThem() {
    SpecEditor e;
    json spec = tiny_spec();
    e.set_spec(spec);
    QTabWidget* arms = nullptr;
    for (QTabWidget* tabs : e.form()->findChildren<QTabWidget*>())
      if (tabs->count() == 5) arms = tabs;
    QVERIFY(arms);
    // Whether the field is shown, its arm's tab brought to the front.
    auto shown = [&](const std::string& path) {
      if (const size_t at = path.find("arms["); at != std::string::npos) arms->setCurrentIndex(path[at + 5] - '0');
      QWidget* w = e.form()->editor(path);
      return w && w->isVisibleTo(e.form());
    };
    for (const char* f : {"beta1", "beta2", "tau", "mu", "server_lr", "server_momentum", "krum_byzantine",
                          "krum_select", "trim_fraction", "topk_fraction"})
      QVERIFY2(!shown(std::string("spec.arms[4].") + f), f);
    QVERIFY(shown("spec.arms[4].strategy"));
    for (const char* f : {"gamma", "step_size", "min_lr"})
      QVERIFY2(!shown(std::string("spec.train.schedule.") + f), f);
    QVERIFY(shown("spec.arms[3].cut"));
    QVERIFY(!shown("spec.arms[3].cuts"));
    // Chosen, they show.
    combo(e, "spec.arms[4].strategy")->setCurrentText("fedadam");
    QVERIFY(shown("spec.arms[4].beta1"));
    QVERIFY(shown("spec.arms[4].tau"));
    QVERIFY(!shown("spec.arms[4].mu"));
    combo(e, "spec.train.schedule.name")->setCurrentText("step");
    QVERIFY(shown("spec.train.schedule.gamma"));
    combo(e, "spec.arms[3].variant")->setCurrentText("ushaped");
    QVERIFY(shown("spec.arms[3].cuts"));
    QVERIFY(!shown("spec.arms[3].cut"));
    QVERIFY(e.validate() || e.problem().contains("cuts"));
  }

  // A required choice offers the values it takes, not "required" as one of them.
  void RequiredDropdownsOfferOnlyValues() {
    SpecEditor e;
    e.set_spec(tiny_spec());
    for (const char* path : {"spec.arms[0].regime", "spec.workload.name"}) {
      QComboBox* c = combo(e, path);
      for (int i = 0; i < c->count(); ++i) QVERIFY2(c->itemText(i) != "required", path);
    }
    json spec = tiny_spec();
    spec["arms"][0].erase("regime");
    e.set_spec(spec);
    QCOMPARE(combo(e, "spec.arms[0].regime")->currentIndex(), -1);
    QCOMPARE(combo(e, "spec.arms[0].regime")->placeholderText(), QString("required"));
    QVERIFY(!e.validate());
  }

  // A workload its model does not fit takes the first model that fits it.
  void SwitchingTheWorkloadPicksAModelThatFits() {
    SpecEditor e;
    e.set_spec(tiny_spec());
    QCOMPARE(line(e, "spec.workload.model")->text(), QString("mlp"));
    combo(e, "spec.workload.name")->setCurrentText("phantom-ct-seg");
    const std::vector<std::string> fit = quartet::workloads::workload_model_names("phantom-ct-seg");
    QCOMPARE(line(e, "spec.workload.model")->text().toStdString(), fit.front());
    QCOMPARE(e.spec()["workload"]["model"], json(fit.front()));
    combo(e, "spec.workload.name")->setCurrentText("synthetic");  // a model of both stays
    combo(e, "spec.workload.name")->setCurrentText("fashion-mnist");
    QCOMPARE(e.spec()["workload"]["model"], json("mlp"));
  }

  // A pipeline's cuts are picked from the model's stages, as split's cut is.
  void PipelineCutsArePickedFromTheModelsStages() {
    SpecEditor e;
    json spec = tiny_spec();
    spec["arms"] = json::array({{{"name", "pp"}, {"regime", "pipeline"}, {"cuts", json::array({"fc1"})}}});
    e.set_spec(spec);
    QMenu* menu = e.form()->picker("spec.arms[0].cuts");
    QVERIFY(menu);
    QStringList offered;
    for (QAction* a : menu->actions()) offered << a->text();
    QCOMPARE(offered, (QStringList{"fc1", "fc2", "fc3"}));
    QVERIFY(menu->actions()[0]->isChecked());
    menu->actions()[1]->setChecked(true);
    QCOMPARE(e.spec()["arms"][0]["cuts"], json::array({"fc1", "fc2"}));
  }

  // An error under a field is shown whole, however many lines it wraps to.
  void AnErrorUnderAFieldIsShownWhole() {
    SpecEditor e;
    e.resize(700, 600);
    e.show();
    QVERIFY(QTest::qWaitForWindowExposed(&e));
    json spec = tiny_spec();
    spec["workload"]["model"] = "a-model-that-does-not-exist";
    e.set_spec(spec);
    QVERIFY(!e.validate());
    const QString message = e.form()->error_at("spec.workload.model");
    QVERIFY2(!message.isEmpty(), qPrintable(e.problem()));
    QLabel* shown = nullptr;
    for (QLabel* l : e.form()->findChildren<QLabel*>())
      if (l->text() == message && l->isVisible()) shown = l;
    QVERIFY(shown);
    // In the error colour, and the field it is about tinted.
    QCOMPARE(shown->palette().color(QPalette::WindowText), QColor(0xb0, 0x00, 0x20));
    QWidget* field = e.form()->editor("spec.workload.model");
    QVERIFY(field->palette().color(QPalette::Base) != QApplication::palette(field).color(QPalette::Base));
    QVERIFY2(shown->heightForWidth(shown->width()) > 2 * shown->fontMetrics().height(), "a message of three lines or more");
    // Once the layout has settled (a deadline, not a timing).
    QTRY_VERIFY2_WITH_TIMEOUT(shown->height() >= shown->heightForWidth(shown->width()),
                              qPrintable(QString("%1 px shown of %2").arg(shown->height()).arg(shown->heightForWidth(shown->width()))),
                              5000);
  }

  // The model field's "File…" opens a dialog for *.onnx files; the file chosen becomes
  // "onnx:" and its path relative to the spec's folder, which validation reads it from,
  // and a split arm's cut then offers the graph's stages. Cancelling changes nothing.
  void TheModelsFileButtonPicksAnOnnxFileRelativeToTheSpec() {
    if (!quartet::workloads::onnx::available()) QSKIP("this build reads no ONNX files (QUARTET_ONNX)");
    QTemporaryDir dir;
    QVERIFY(QDir(dir.path()).mkpath("models") && QDir(dir.path()).mkpath("specs"));
    const QString model = dir.filePath("models/tiny_cnn.onnx");
    QVERIFY(QFile::copy(QString(QUARTET_TEST_DATA_DIR) + "/onnx/tiny_cnn.onnx", model));
    SpecEditor e;
    json spec = tiny_spec();
    spec["arms"] = json::array({{{"name", "split"}, {"regime", "split"}, {"clients", 2}, {"cut", "pool_MaxPool"}}});
    e.set_spec(spec);
    e.save(dir.filePath("specs/mine.json"));
    QToolButton* file = e.form()->browse_button("spec.workload.model");
    QVERIFY(file);
    QCOMPARE(file->text(), QString("File…"));

    when_file_dialog_opens(&e, [](QFileDialog* d) { d->reject(); });
    file->click();
    QCOMPARE(e.spec()["workload"]["model"], spec["workload"]["model"]);

    QStringList filters;
    when_file_dialog_opens(&e, [&](QFileDialog* d) {
      filters = d->nameFilters();
      // The file's path in the name field, then Open.
      auto* name = d->findChild<QLineEdit*>("fileNameEdit");
      QVERIFY(name);
      name->setText(model);
      static_cast<QDialog*>(d)->accept();  // QFileDialog::accept, as its Open button does
    });
    file->click();
    QCOMPARE(filters, QStringList{"ONNX models (*.onnx)"});
    QCOMPARE(e.spec()["workload"]["model"], json("onnx:../models/tiny_cnn.onnx"));
    QVERIFY(e.modified());
    QVERIFY2(e.validate(), qPrintable(e.problem()));
    auto* cut = qobject_cast<QComboBox*>(e.form()->editor("spec.arms[0].cut")->parentWidget());
    QVERIFY(cut);
    QVERIFY(cut->count() > 2);
    QCOMPARE(cut->itemText(0), QString("conv1_Conv"));
    // The arm's own model field has the button too.
    QVERIFY(e.form()->browse_button("spec.arms[0].model"));
  }

  // An onnx: path typed into the model field stays as typed while the list of built-in
  // models is refreshed around it and the workload changes, and is read relative to the
  // spec.
  void ATypedOnnxPathIsKept() {
    if (!quartet::workloads::onnx::available()) QSKIP("this build reads no ONNX files (QUARTET_ONNX)");
    QTemporaryDir dir;
    QVERIFY(QFile::copy(QString(QUARTET_TEST_DATA_DIR) + "/onnx/tiny_cnn.onnx", dir.filePath("tiny_cnn.onnx")));
    SpecEditor e;
    json spec = tiny_spec();
    spec["arms"] = json::array({{{"name", "single"}, {"regime", "single"}}});
    e.set_spec(spec);
    e.save(dir.filePath("mine.json"));
    type_into(line(e, "spec.workload.model"), "onnx:tiny_cnn.onnx");
    combo(e, "spec.workload.name")->setCurrentText("fashion-mnist");
    QCOMPARE(line(e, "spec.workload.model")->text(), QString("onnx:tiny_cnn.onnx"));
    QCOMPARE(e.spec()["workload"]["model"], json("onnx:tiny_cnn.onnx"));
    QVERIFY2(e.validate(), qPrintable(e.problem()));
    QCOMPARE(e.spec_as_run()["workload"]["model"], json("onnx:" + dir.filePath("tiny_cnn.onnx").toStdString()));
  }

  // Relative to the spec's folder once it has one; absolute before.
  void AnOnnxFilesValueIsRelativeToTheSpec() {
    QCOMPARE(onnx_model_value("/data/models/m.onnx", "/data/specs/a.json"), QString("onnx:../models/m.onnx"));
    QCOMPARE(onnx_model_value("/data/specs/m.onnx", "/data/specs/a.json"), QString("onnx:m.onnx"));
    QCOMPARE(onnx_model_value("/data/models/m.onnx", ""), QString("onnx:/data/models/m.onnx"));
  }

  // Fields whose default a rule applies (the volume workloads') show it.
  void VolumeFieldsShowTheirDefaults() {
    SpecEditor e;
    e.set_spec(tiny_spec());
    combo(e, "spec.workload.name")->setCurrentText("phantom-ct-seg");
    QCOMPARE(line(e, "spec.workload.test_volumes")->placeholderText(), QString("default: 4"));
    QCOMPARE(line(e, "spec.workload.volume_size")->placeholderText(), QString("default: 32"));
    QCOMPARE(line(e, "spec.workload.patch")->placeholderText(), QString("default: 32"));
  }
};

QTEST_MAIN(SpecEditorTest)
#include "spec_editor_test.moc"
