#include "gui/tone.h"

#include <QApplication>
#include <QColor>
#include <QPalette>
#include <QWidget>

namespace quartet::gui {

namespace {

const QColor kError(0xb0, 0x00, 0x20);
const QColor kOk(0x1b, 0x5e, 0x20);
const QColor kErrorField(0xfd, 0xe7, 0xea);

}  // namespace

void set_text_tone(QWidget* w, Tone tone) {
  QPalette p = w->palette();
  const QColor plain = QApplication::palette(w).color(QPalette::WindowText);
  p.setColor(QPalette::WindowText, tone == Tone::error ? kError : tone == Tone::ok ? kOk : plain);
  w->setPalette(p);
}

void set_field_tone(QWidget* w, Tone tone) {
  QPalette p = w->palette();
  const QPalette app = QApplication::palette(w);
  p.setColor(QPalette::Base, tone == Tone::error ? kErrorField : app.color(QPalette::Base));
  p.setColor(QPalette::Button, tone == Tone::error ? kErrorField : app.color(QPalette::Button));
  w->setPalette(p);
}

}  // namespace quartet::gui
