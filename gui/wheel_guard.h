#pragma once

// Dropdowns, spin boxes and tab bars take the mouse wheel only when they have the focus
// (clicked or tabbed into), as careful desktop apps do: a wheel turned over them while a
// form scrolls goes on scrolling the form and changes no value.

namespace quartet::gui {

// Installs the guard on the application, once; later calls do nothing.
void guard_wheel();

}  // namespace quartet::gui
