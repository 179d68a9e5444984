#pragma once

// The colours a message or a field takes to say "error" or "fine", set on the widget's
// palette. Not by per-widget style sheets: each one puts the widget under Qt's style
// sheet style, whose caches are cleaned from QObject::destroyed, and a form that
// destroys hundreds of such widgets at once crashed there now and then (Qt 6.4).

class QWidget;

namespace quartet::gui {

enum class Tone { plain, error, ok };

// A label's text colour.
void set_text_tone(QWidget* w, Tone tone);
// An editor (line edit, dropdown) marked as holding a bad value: a tinted field, or plain.
void set_field_tone(QWidget* w, Tone tone);

}  // namespace quartet::gui
