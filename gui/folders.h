#pragma once

// Where each file dialog of the app starts: the folder it was last used in, remembered in
// the settings under its own key, so that opening a volume does not move where run
// folders are looked for.

#include <QString>

namespace quartet::gui {

// The dialog kinds: experiment files, run folders (Open Results and Compare's Add run),
// volumes, cluster profiles (Compare's Predict on).
inline constexpr const char* kSpecFolder = "dirs/spec";
inline constexpr const char* kResultsFolder = "dirs/results";
inline constexpr const char* kVolumeFolder = "dirs/volume";
inline constexpr const char* kClusterFolder = "dirs/cluster";

// The folder a dialog of `kind` starts in: the one remembered, else a sensible one in the
// working folder (experiments/, the results folder, clusters/, the working folder itself).
QString start_folder(const char* kind);
// Remembers the folder `path` (a file, or a run folder) is in.
void remember_folder(const char* kind, const QString& path);

// Where runs go: the results folder set in Run › Results Folder, else results/ in the
// working folder.
QString results_folder();

}  // namespace quartet::gui
