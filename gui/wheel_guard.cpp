#include "gui/wheel_guard.h"

#include <QAbstractSpinBox>
#include <QApplication>
#include <QComboBox>
#include <QEvent>
#include <QTabBar>

namespace quartet::gui {

namespace {

bool guarded(const QObject* o) {
  return qobject_cast<const QComboBox*>(o) || qobject_cast<const QAbstractSpinBox*>(o) ||
         qobject_cast<const QTabBar*>(o);
}

class WheelGuard : public QObject {
 public:
  using QObject::QObject;

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override {
    if (!guarded(watched)) return false;
    auto* w = static_cast<QWidget*>(watched);
    // The wheel would give them the focus first (Qt::WheelFocus): clicks and Tab only.
    if (event->type() == QEvent::Polish || event->type() == QEvent::Show) {
      if (w->focusPolicy() == Qt::WheelFocus) w->setFocusPolicy(Qt::StrongFocus);
      return false;
    }
    if (event->type() == QEvent::Wheel && !w->hasFocus()) {
      event->ignore();  // not taken: Qt hands it on to the parent, the scroll area
      return true;
    }
    return false;
  }
};

}  // namespace

void guard_wheel() {
  static QObject* installed = nullptr;  // one application a process
  if (!qApp || installed) return;
  installed = new WheelGuard(qApp);
  qApp->installEventFilter(installed);
}

}  // namespace quartet::gui
