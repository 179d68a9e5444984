#include "gui/folders.h"

#include <QDir>
#include <QFileInfo>
#include <QSettings>
#include <cstring>

namespace quartet::gui {

QString results_folder() { return QSettings().value("results_dir", QDir::current().filePath("results")).toString(); }

QString start_folder(const char* kind) {
  const QString remembered = QSettings().value(kind).toString();
  if (!remembered.isEmpty() && QFileInfo(remembered).isDir()) return remembered;
  QString fallback = QDir::currentPath();
  if (std::strcmp(kind, kSpecFolder) == 0) fallback = QDir::current().filePath("experiments");
  if (std::strcmp(kind, kResultsFolder) == 0) fallback = results_folder();
  if (std::strcmp(kind, kClusterFolder) == 0) fallback = QDir::current().filePath("clusters");
  // Always a folder that exists: an empty or missing one would send Qt's dialog to the
  // last folder any dialog visited.
  return QFileInfo(fallback).isDir() ? fallback : QDir::currentPath();
}

void remember_folder(const char* kind, const QString& path) {
  // A file's folder; a run folder's parent, which holds the other runs.
  QSettings().setValue(kind, QFileInfo(path).absolutePath());
}

}  // namespace quartet::gui
