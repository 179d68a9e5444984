#pragma once

// The slice viewer: a CT or MRI volume (NIfTI) in axial, coronal and sagittal slices,
// with window/level and a segmentation mask over it (a label file, or a model's
// prediction from `quartet predict`), handled as in 3D Slicer: the wheel pages a view's
// slices, a click puts the crosshair on a voxel and the other views on its slices, a
// right-drag sets the window (sideways) and the level (up and down), and the mask's
// classes are named from a dataset.json beside the files (the Medical Segmentation
// Decathlon's "labels").

#include <QImage>
#include <QRect>
#include <QString>
#include <QWidget>
#include <array>
#include <map>
#include <optional>

#include "gui/volume_slices.h"
#include "medical3d/volume.h"

class QCheckBox;
class QDoubleSpinBox;
class QLabel;
class QSlider;

namespace quartet::gui {

class VolumeViewer : public QWidget {
  Q_OBJECT

 public:
  explicit VolumeViewer(QWidget* parent = nullptr);

  // Each returns "" or the problem, also shown in the viewer; a failed open keeps what
  // was shown.
  QString open_image(const QString& path);
  QString open_mask(const QString& path);
  // Shows `image` (and `mask`, on the same grid); centres the slices, picks a window.
  QString set_volume(medical3d::Volume image, std::optional<medical3d::LabelVolume> mask = std::nullopt);

  void set_slice(Plane plane, int64_t index);
  void set_window(double window, double level);
  // The picture of `plane` as drawn (one pixel per voxel, before scaling to the view).
  QImage picture(Plane plane) const { return pictures_[static_cast<size_t>(plane)]; }
  QString error_text() const;
  bool has_image() const { return image_.has_value(); }
  // What the viewer says of `plane` ("Axial — slice 17 of 32"), of the voxel under a
  // point of its view (as the readout line shows it when the mouse is there; "" off the
  // image), and of the mask's classes (the legend line).
  QString plane_title(Plane plane) const;
  QString readout_at(Plane plane, QPoint point_in_view);
  QString legend_text() const;
  QRect picture_rect(Plane plane) const { return shown_[static_cast<size_t>(plane)]; }  // in its view
  bool mask_toggle_enabled() const;

  // The view of `plane` (the mouse's target), its slice, the crosshair's voxel (x, y, z),
  // the window and level, and the mask's class names (from a dataset.json; empty without).
  QWidget* plane_view(Plane plane) const;
  int64_t slice(Plane plane) const;
  std::array<int64_t, 3> cursor() const { return cursor_; }
  void set_cursor(const std::array<int64_t, 3>& voxel);
  double window() const;
  double level() const;
  const std::map<int, QString>& class_names() const { return class_names_; }
  // Where Open Mask starts: labelsTr beside the image's imagesTr when there is one, else
  // the image's folder.
  QString mask_folder() const;

 protected:
  void resizeEvent(QResizeEvent* event) override;
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void redraw();
  void show_error(const QString& message);
  void mask_changed();
  // The names of the mask's classes from a dataset.json in `dirs` (the first found).
  void read_class_names(const QStringList& dirs);
  // The voxel under `point` of `plane`'s view, or none off the picture.
  std::optional<std::array<int64_t, 3>> voxel_at(Plane plane, QPoint point) const;

  std::optional<medical3d::Volume> image_;
  std::optional<medical3d::LabelVolume> mask_;
  std::array<QLabel*, 3> views_{};
  std::array<QLabel*, 3> titles_{};
  std::array<QRect, 3> shown_{};  // where each picture sits in its view, scaled
  std::array<QSlider*, 3> sliders_{};
  std::array<QImage, 3> pictures_;
  QDoubleSpinBox* window_;
  QDoubleSpinBox* level_;
  QSlider* opacity_;
  QCheckBox* show_mask_;
  QLabel* info_;
  QLabel* legend_;
  QLabel* readout_;
  QLabel* error_;
  QString image_dir_;  // the image's folder
  std::array<int64_t, 3> cursor_{};
  std::map<int, QString> class_names_;
  QPoint drag_from_;  // a right-drag's start, and the window and level then
  double drag_window_ = 0.0, drag_level_ = 0.0;
  bool filling_ = false;
};

}  // namespace quartet::gui
