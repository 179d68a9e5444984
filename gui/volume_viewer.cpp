#include "gui/volume_viewer.h"

#include <QCheckBox>
#include <QDir>
#include <QFile>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QMouseEvent>
#include <QPainter>
#include <QPalette>
#include <QPushButton>
#include <QSlider>
#include <QVBoxLayout>
#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "gui/tone.h"
#include "medical3d/io_support.h"

#if QUARTET_WITH_MEDICAL_IO
#include "medical3d/nifti.h"
#endif

namespace quartet::gui {

namespace {

constexpr std::array<Plane, 3> kPlanes = {Plane::axial, Plane::coronal, Plane::sagittal};
constexpr std::array<const char*, 3> kPlaneNames = {"Axial", "Coronal", "Sagittal"};

// The viewer's files are NIfTI, which Quartet reads when it is built with libnifti2.
medical3d::Volume read_image([[maybe_unused]] const QString& path) {
#if QUARTET_WITH_MEDICAL_IO
  return medical3d::read_nifti(path.toStdString());
#else
  throw std::runtime_error(medical3d::no_medical_io_message("The volume viewer"));
#endif
}

medical3d::LabelVolume read_mask([[maybe_unused]] const QString& path) {
#if QUARTET_WITH_MEDICAL_IO
  return medical3d::read_nifti_labels(path.toStdString());
#else
  throw std::runtime_error(medical3d::no_medical_io_message("The volume viewer"));
#endif
}

// The patient's directions at the picture's edges, white on a dark outline.
void draw_edge_letters(QPixmap& pixmap, const EdgeLetters& e) {
  QPainter painter(&pixmap);
  QFont font = painter.font();
  font.setBold(true);
  painter.setFont(font);
  const QRect r = pixmap.rect().adjusted(4, 2, -4, -2);
  const std::pair<const char*, int> at[] = {{e.left, Qt::AlignLeft | Qt::AlignVCenter},
                                            {e.right, Qt::AlignRight | Qt::AlignVCenter},
                                            {e.top, Qt::AlignTop | Qt::AlignHCenter},
                                            {e.bottom, Qt::AlignBottom | Qt::AlignHCenter}};
  for (const auto& [letter, align] : at) {
    painter.setPen(Qt::black);
    painter.drawText(r.translated(1, 1), align, letter);
    painter.setPen(QColor(255, 230, 120));
    painter.drawText(r, align, letter);
  }
}

// The crosshair through pixel (u, v) of a slice `size` pixels large, drawn on its scaled
// picture: thin lines with a gap at the voxel, so that the voxel stays visible.
void draw_crosshair(QPixmap& pixmap, const SlicePoint& at, QSize size) {
  if (size.isEmpty()) return;
  QPainter painter(&pixmap);
  painter.setPen(QPen(QColor(80, 220, 255, 200), 1));
  const double sx = static_cast<double>(pixmap.width()) / size.width();
  const double sy = static_cast<double>(pixmap.height()) / size.height();
  const double x = (static_cast<double>(at.u) + 0.5) * sx, y = (static_cast<double>(at.v) + 0.5) * sy;
  const double gap = std::max(4.0, std::max(sx, sy));
  painter.drawLine(QPointF(0, y), QPointF(x - gap, y));
  painter.drawLine(QPointF(x + gap, y), QPointF(pixmap.width(), y));
  painter.drawLine(QPointF(x, 0), QPointF(x, y - gap));
  painter.drawLine(QPointF(x, y + gap), QPointF(x, pixmap.height()));
}

}  // namespace

VolumeViewer::VolumeViewer(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  auto* open_image = new QPushButton(tr("Open image…"), this);
  auto* open_mask = new QPushButton(tr("Open mask…"), this);
  window_ = new QDoubleSpinBox(this);
  level_ = new QDoubleSpinBox(this);
  for (QDoubleSpinBox* box : {window_, level_}) {
    box->setRange(-1e7, 1e7);
    box->setDecimals(1);
    box->setSingleStep(10.0);
  }
  window_->setMinimum(1e-3);
  opacity_ = new QSlider(Qt::Horizontal, this);
  opacity_->setRange(0, 100);
  opacity_->setValue(45);
  opacity_->setMaximumWidth(140);
  show_mask_ = new QCheckBox(tr("Mask"), this);
  show_mask_->setChecked(false);
  show_mask_->setEnabled(false);  // until a mask is open
  show_mask_->setToolTip(tr("Open a mask (File › Open Mask) to show it over the image"));
  bar->addWidget(open_image);
  bar->addWidget(open_mask);
  bar->addSpacing(12);
  bar->addWidget(new QLabel(tr("Window"), this));
  bar->addWidget(window_);
  bar->addWidget(new QLabel(tr("Level"), this));
  bar->addWidget(level_);
  bar->addSpacing(12);
  bar->addWidget(show_mask_);
  bar->addWidget(new QLabel(tr("Opacity"), this));
  bar->addWidget(opacity_);
  bar->addStretch(1);
  layout->addLayout(bar);
  info_ = new QLabel(tr("Open a NIfTI image (.nii, .nii.gz), then its mask if it has one."), this);
  info_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(info_);
  auto* lines = new QHBoxLayout;
  legend_ = new QLabel(this);
  readout_ = new QLabel(this);
  readout_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  lines->addWidget(legend_);
  lines->addStretch(1);
  lines->addWidget(readout_);
  layout->addLayout(lines);
  error_ = new QLabel(this);
  set_text_tone(error_, Tone::error);
  error_->setWordWrap(true);
  error_->hide();
  layout->addWidget(error_);

  auto* grid = new QGridLayout;
  for (size_t p = 0; p < 3; ++p) {
    auto* title = new QLabel(tr(kPlaneNames[p]), this);
    titles_[p] = title;
    views_[p] = new QLabel(this);
    views_[p]->setMouseTracking(true);
    views_[p]->installEventFilter(this);
    views_[p]->setAlignment(Qt::AlignCenter);
    views_[p]->setMinimumSize(160, 160);
    views_[p]->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Ignored);
    views_[p]->setAutoFillBackground(true);
    QPalette black = views_[p]->palette();
    black.setColor(QPalette::Window, Qt::black);
    views_[p]->setPalette(black);
    views_[p]->setToolTip(tr("Wheel: page the slices. Click: the crosshair there, the other views on its slices. "
                             "Right-drag: window (sideways) and level (up and down)."));
    sliders_[p] = new QSlider(Qt::Horizontal, this);
    sliders_[p]->setEnabled(false);
    grid->addWidget(title, 0, static_cast<int>(p));
    grid->addWidget(views_[p], 1, static_cast<int>(p));
    grid->addWidget(sliders_[p], 2, static_cast<int>(p));
    grid->setColumnStretch(static_cast<int>(p), 1);
    connect(sliders_[p], &QSlider::valueChanged, this, [this, p](int value) {
      // The crosshair's voxel follows the slice: axial moves z, coronal y, sagittal x.
      constexpr size_t kAxis[] = {2, 1, 0};
      cursor_[kAxis[p]] = value;
      if (!filling_) redraw();
    });
  }
  grid->setRowStretch(1, 1);
  layout->addLayout(grid, 1);

  connect(window_, &QDoubleSpinBox::valueChanged, this, [this] {
    if (!filling_) redraw();
  });
  connect(level_, &QDoubleSpinBox::valueChanged, this, [this] {
    if (!filling_) redraw();
  });
  connect(opacity_, &QSlider::valueChanged, this, &VolumeViewer::redraw);
  connect(show_mask_, &QCheckBox::toggled, this, &VolumeViewer::redraw);
  connect(open_image, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open an image"), QString(),
                                                      tr("NIfTI (*.nii *.nii.gz);;All files (*)"));
    if (!path.isEmpty()) this->open_image(path);
  });
  connect(open_mask, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open a mask"), mask_folder(),
                                                      tr("NIfTI (*.nii *.nii.gz);;All files (*)"));
    if (!path.isEmpty()) this->open_mask(path);
  });
}

QString VolumeViewer::open_image(const QString& path) {
  medical3d::Volume image;
  try {
    image = read_image(path);
  } catch (const std::exception& e) {
    show_error(QString::fromStdString(e.what()));
    return error_text();
  }
  std::optional<medical3d::LabelVolume> mask;
  if (mask_ && mask_->grid.dims == image.grid.dims) mask = mask_;  // a mask of the same grid stays
  const QString problem = set_volume(std::move(image), std::move(mask));
  if (problem.isEmpty()) {
    info_->setText(QFileInfo(path).fileName() + " — " + info_->text());
    image_dir_ = QFileInfo(path).absolutePath();
    read_class_names({image_dir_, QFileInfo(image_dir_).absolutePath()});
    mask_changed();
  }
  return problem;
}

QString VolumeViewer::mask_folder() const {
  const QDir images(image_dir_);
  if (!image_dir_.isEmpty() && images.dirName().startsWith("images")) {
    const QString labels = QFileInfo(images.absolutePath()).absolutePath() + "/labelsTr";
    if (QFileInfo(labels).isDir()) return labels;
  }
  return image_dir_;
}

void VolumeViewer::read_class_names(const QStringList& dirs) {
  for (const QString& dir : dirs) {
    QFile file(QDir(dir).filePath("dataset.json"));
    if (!file.open(QIODevice::ReadOnly)) continue;
    const nlohmann::json j = nlohmann::json::parse(file.readAll().toStdString(), nullptr, false);
    const auto labels = j.is_object() ? j.find("labels") : j.end();
    if (j.is_discarded() || labels == j.end() || !labels->is_object()) continue;
    std::map<int, QString> names;
    for (const auto& [key, value] : labels->items()) {
      // Either {"1": "organ"} (the Decathlon's) or {"organ": 1} (nnU-Net v2's).
      bool ok = false;
      const int by_key = QString::fromStdString(key).toInt(&ok);
      if (ok && value.is_string()) names[by_key] = QString::fromStdString(value.get<std::string>());
      else if (value.is_number_integer()) names[value.get<int>()] = QString::fromStdString(key);
    }
    if (names.empty()) continue;
    class_names_ = std::move(names);
    return;
  }
}

QString VolumeViewer::open_mask(const QString& path) {
  if (!image_) {
    show_error(tr("open an image first, then its mask"));
    return error_text();
  }
  try {
    medical3d::LabelVolume mask = read_mask(path);
    if (mask.grid.dims != image_->grid.dims)
      throw std::invalid_argument(path.toStdString() + ": the mask's grid (" + std::to_string(mask.nx()) + "×" +
                                  std::to_string(mask.ny()) + "×" + std::to_string(mask.nz()) +
                                  ") differs from the image's (" + std::to_string(image_->nx()) + "×" +
                                  std::to_string(image_->ny()) + "×" + std::to_string(image_->nz()) + ")");
    mask_ = std::move(mask);
  } catch (const std::exception& e) {
    show_error(QString::fromStdString(e.what()));
    return error_text();
  }
  error_->hide();
  const QString mask_dir = QFileInfo(path).absolutePath();
  read_class_names({mask_dir, QFileInfo(mask_dir).absolutePath(), image_dir_, QFileInfo(image_dir_).absolutePath()});
  mask_changed();
  redraw();
  return {};
}

// The mask toggle, on with a fresh mask and off without one, and the legend of its classes.
void VolumeViewer::mask_changed() {
  show_mask_->setEnabled(mask_.has_value());
  show_mask_->setChecked(mask_.has_value());
  QString legend;
  if (mask_) {
    std::array<bool, 256> present{};
    for (int64_t z = 0; z < mask_->nz(); ++z)
      for (int64_t y = 0; y < mask_->ny(); ++y)
        for (int64_t x = 0; x < mask_->nx(); ++x) present[mask_->at(x, y, z)] = true;
    legend = tr("Mask classes:");
    for (int c = 1; c < 256; ++c)
      if (present[static_cast<size_t>(c)]) {
        legend += QString(" <span style=\"color:%1\">■</span> %2").arg(class_color(c).name()).arg(c);
        if (auto it = class_names_.find(c); it != class_names_.end()) legend += " " + it->second.toHtmlEscaped();
      }
    if (legend == tr("Mask classes:")) legend += tr(" none (every voxel is background)");
  }
  legend_->setText(legend);
}

QString VolumeViewer::legend_text() const { return legend_->text(); }
bool VolumeViewer::mask_toggle_enabled() const { return show_mask_->isEnabled(); }

QString VolumeViewer::plane_title(Plane plane) const { return titles_[static_cast<size_t>(plane)]->text(); }

std::optional<std::array<int64_t, 3>> VolumeViewer::voxel_at(Plane plane, QPoint point) const {
  const size_t p = static_cast<size_t>(plane);
  const QRect& r = shown_[p];
  if (!image_ || r.width() <= 0 || r.height() <= 0 || !r.contains(point)) return std::nullopt;
  const int64_t u = (point.x() - r.x()) * pictures_[p].width() / r.width();
  const int64_t v = (point.y() - r.y()) * pictures_[p].height() / r.height();
  return slice_voxel(image_->grid, plane, sliders_[p]->value(), u, v);
}

QString VolumeViewer::readout_at(Plane plane, QPoint point) {
  QString text;
  if (const auto voxel = voxel_at(plane, point)) {
    const auto [x, y, z] = *voxel;
    text = tr("voxel (%1, %2, %3): %4").arg(x).arg(y).arg(z).arg(image_->at(x, y, z), 0, 'g', 5);
    if (mask_) {
      const int c = mask_->at(x, y, z);
      text += tr(", class %1").arg(c);
      if (auto it = class_names_.find(c); it != class_names_.end()) text += " (" + it->second + ")";
    }
  }
  readout_->setText(text);
  return text;
}

QWidget* VolumeViewer::plane_view(Plane plane) const { return views_[static_cast<size_t>(plane)]; }

int64_t VolumeViewer::slice(Plane plane) const { return sliders_[static_cast<size_t>(plane)]->value(); }
double VolumeViewer::window() const { return window_->value(); }
double VolumeViewer::level() const { return level_->value(); }

void VolumeViewer::set_cursor(const std::array<int64_t, 3>& voxel) {
  if (!image_) return;
  filling_ = true;
  for (size_t p = 0; p < 3; ++p) sliders_[p]->setValue(static_cast<int>(voxel_point(image_->grid, kPlanes[p], voxel).slice));
  filling_ = false;
  cursor_ = voxel;
  redraw();
}

bool VolumeViewer::eventFilter(QObject* watched, QEvent* event) {
  for (size_t p = 0; p < 3; ++p) {
    if (watched != views_[p]) continue;
    const Plane plane = kPlanes[p];
    switch (event->type()) {
      case QEvent::MouseMove: {
        auto* m = static_cast<QMouseEvent*>(event);
        if (m->buttons() & Qt::RightButton) {
          // Sideways: the window, in steps of 1/200 of it; up and down: the level.
          const QPoint d = m->position().toPoint() - drag_from_;
          const double step = std::max(drag_window_, 1.0) / 200.0;
          set_window(std::max(drag_window_ + d.x() * step, 1e-3), drag_level_ - d.y() * step);
        } else if (m->buttons() & Qt::LeftButton) {
          if (const auto voxel = voxel_at(plane, m->position().toPoint())) set_cursor(*voxel);
        }
        readout_at(plane, m->position().toPoint());
        break;
      }
      case QEvent::MouseButtonPress: {
        auto* m = static_cast<QMouseEvent*>(event);
        if (m->button() == Qt::RightButton) {
          drag_from_ = m->position().toPoint();
          drag_window_ = window_->value();
          drag_level_ = level_->value();
        } else if (m->button() == Qt::LeftButton) {
          if (const auto voxel = voxel_at(plane, m->position().toPoint())) set_cursor(*voxel);
        }
        return true;
      }
      case QEvent::Wheel: {
        // A notch a slice, as Slicer pages.
        const int notches = static_cast<QWheelEvent*>(event)->angleDelta().y() / 120;
        if (notches != 0 && sliders_[p]->isEnabled()) sliders_[p]->setValue(sliders_[p]->value() + notches);
        event->accept();
        return true;
      }
      case QEvent::Leave: readout_->clear(); break;
      default: break;
    }
  }
  return QWidget::eventFilter(watched, event);
}

QString VolumeViewer::set_volume(medical3d::Volume image, std::optional<medical3d::LabelVolume> mask) {
  if (mask && mask->grid.dims != image.grid.dims) {
    show_error(tr("the mask's grid differs from the image's"));
    return error_text();
  }
  image_ = std::move(image);
  mask_ = std::move(mask);
  mask_changed();
  error_->hide();
  filling_ = true;
  const SliceStyle style = default_style(*image_);
  window_->setValue(style.window);
  level_->setValue(style.level);
  for (size_t p = 0; p < 3; ++p) {
    const int64_t n = slice_count(image_->grid, kPlanes[p]);
    sliders_[p]->setEnabled(true);
    sliders_[p]->setRange(0, static_cast<int>(n - 1));
    sliders_[p]->setValue(static_cast<int>(n / 2));
  }
  cursor_ = {image_->nx() / 2, image_->ny() / 2, image_->nz() / 2};
  filling_ = false;
  const medical3d::Grid& g = image_->grid;
  info_->setText(tr("%1 × %2 × %3 voxels of %4 × %5 × %6 mm")
                     .arg(g.nx())
                     .arg(g.ny())
                     .arg(g.nz())
                     .arg(g.spacing[0], 0, 'g', 3)
                     .arg(g.spacing[1], 0, 'g', 3)
                     .arg(g.spacing[2], 0, 'g', 3));
  redraw();
  return {};
}

void VolumeViewer::set_slice(Plane plane, int64_t index) { sliders_[static_cast<size_t>(plane)]->setValue(static_cast<int>(index)); }

void VolumeViewer::set_window(double window, double level) {
  filling_ = true;
  window_->setValue(window);
  filling_ = false;
  level_->setValue(level);
  redraw();
}

void VolumeViewer::redraw() {
  if (!image_) return;
  SliceStyle style;
  style.window = window_->value();
  style.level = level_->value();
  style.mask_opacity = opacity_->value() / 100.0;
  const medical3d::LabelVolume* mask = mask_ && show_mask_->isChecked() ? &*mask_ : nullptr;
  for (size_t p = 0; p < 3; ++p) {
    pictures_[p] = slice_image(*image_, kPlanes[p], sliders_[p]->value(), style, mask);
    // Scale to the view, voxels kept square in millimetres and sharp.
    const QSize room = views_[p]->size();
    const double aspect = pixel_aspect(image_->grid, kPlanes[p]);
    QSizeF shape(pictures_[p].width(), pictures_[p].height() * aspect);
    shape.scale(QSizeF(room), Qt::KeepAspectRatio);
    QPixmap pixmap = QPixmap::fromImage(pictures_[p].scaled(shape.toSize().expandedTo(QSize(1, 1)),
                                                            Qt::IgnoreAspectRatio, Qt::FastTransformation));
    draw_crosshair(pixmap, voxel_point(image_->grid, kPlanes[p], cursor_), pictures_[p].size());
    draw_edge_letters(pixmap, edge_letters(kPlanes[p]));
    shown_[p] = QRect(QPoint((room.width() - pixmap.width()) / 2, (room.height() - pixmap.height()) / 2), pixmap.size());
    views_[p]->setPixmap(pixmap);
    titles_[p]->setText(tr("%1 — slice %2 of %3")
                            .arg(tr(kPlaneNames[p]))
                            .arg(sliders_[p]->value() + 1)
                            .arg(slice_count(image_->grid, kPlanes[p])));
  }
}

void VolumeViewer::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  redraw();
}

void VolumeViewer::show_error(const QString& message) {
  error_->setText(message);
  error_->show();
}

QString VolumeViewer::error_text() const { return error_->isHidden() ? QString() : error_->text(); }

}  // namespace quartet::gui
