// The slice viewer shows a volume's slices and its mask over them; a mask that does not
// fit, or a file that is not NIfTI, gives a message.

#include <QDir>
#include <QMouseEvent>
#include <QRegularExpression>
#include <QWheelEvent>
#include <QTemporaryDir>
#include <QtTest>

#include "gui/volume_slices.h"
#include "gui/volume_viewer.h"
#include "medical3d/nifti.h"
#include "medical3d/phantom.h"
#include "tests/gui/gui_test_util.h"

using namespace quartet::gui;
namespace m3d = quartet::medical3d;

namespace {

// A voxel of class `c` in the middle axial slice of `labels`, as (x, y).
std::pair<int, int> voxel_of_class(const m3d::LabelVolume& labels, int c) {
  const int64_t z = labels.nz() / 2;
  for (int64_t y = 0; y < labels.ny(); ++y)
    for (int64_t x = 0; x < labels.nx(); ++x)
      if (labels.at(x, y, z) == c) return {static_cast<int>(x), static_cast<int>(y)};
  return {-1, -1};
}

}  // namespace

class VolumeViewerTest : public QObject {
  Q_OBJECT

 private slots:
  void SlicesFollowTheRadiologicalConvention() {
    m3d::Grid g;
    g.dims = {4, 3, 2};
    g.spacing = {1.0, 1.0, 2.5};
    m3d::Volume v(g, 0.0f);
    v.at(3, 0, 1) = 100.0f;  // patient's left, anterior, superior
    SliceStyle s;
    s.window = 100.0;
    s.level = 50.0;
    const QImage axial = slice_image(v, Plane::axial, 1, s);
    QCOMPARE(axial.size(), QSize(4, 3));
    QCOMPARE(qGray(axial.pixel(3, 0)), 255);  // right of the picture, top row
    const QImage coronal = slice_image(v, Plane::coronal, 0, s);
    QCOMPARE(coronal.size(), QSize(4, 2));
    QCOMPARE(qGray(coronal.pixel(3, 0)), 255);  // superior at the top
    QCOMPARE(qGray(coronal.pixel(3, 1)), 0);
    QCOMPARE(pixel_aspect(g, Plane::coronal), 2.5);
    QCOMPARE(slice_count(g, Plane::sagittal), int64_t{4});
    // The letters at the edges say where the patient's directions are, as drawn above.
    const EdgeLetters a = edge_letters(Plane::axial), c = edge_letters(Plane::coronal),
                      sg = edge_letters(Plane::sagittal);
    QCOMPARE(QString("%1%2%3%4").arg(a.left, a.right, a.top, a.bottom), QString("RLAP"));
    QCOMPARE(QString("%1%2%3%4").arg(c.left, c.right, c.top, c.bottom), QString("RLSI"));
    QCOMPARE(QString("%1%2%3%4").arg(sg.left, sg.right, sg.top, sg.bottom), QString("APSI"));
    const auto far = slice_voxel(g, Plane::coronal, 0, 3, 0);  // the top right pixel of the coronal slice
    QCOMPARE(far[0], int64_t{3});
    QCOMPARE(far[2], int64_t{1});
  }

  // The slice viewer handled as 3D Slicer's: the wheel pages a view's slices, a click puts
  // the crosshair on a voxel and the other views on its slices, a right-drag sets window
  // (sideways) and level (up and down).
  void TheMousePagesSlicesMovesTheCrosshairAndSetsTheWindow() {
    QTemporaryDir tmp;
    const m3d::Sample phantom = m3d::make_phantom(m3d::PhantomKind::ct, 32, 7);
    const QString image = tmp.filePath("ct.nii.gz");
    m3d::write_nifti(image.toStdString(), phantom.image);
    VolumeViewer viewer;
    viewer.resize(900, 400);
    viewer.show();
    QVERIFY(QTest::qWaitForWindowExposed(&viewer));
    QCOMPARE(viewer.open_image(image), QString());
    QWidget* axial = viewer.plane_view(Plane::axial);
    const int64_t first = viewer.slice(Plane::axial);
    QWheelEvent up(QPointF(10, 10), axial->mapToGlobal(QPointF(10, 10)), QPoint(), QPoint(0, 240), Qt::NoButton,
                   Qt::NoModifier, Qt::NoScrollPhase, false);
    QApplication::sendEvent(axial, &up);
    QCOMPARE(viewer.slice(Plane::axial), first + 2);  // a notch a slice
    QCOMPARE(viewer.cursor()[2], first + 2);
    // A click on the axial view: the coronal and sagittal views go to that voxel's slices.
    const QRect shown = viewer.picture_rect(Plane::axial);
    const QPoint at = shown.topLeft() + QPoint(shown.width() / 4, shown.height() * 3 / 4);
    QTest::mouseClick(axial, Qt::LeftButton, {}, at);
    const std::array<int64_t, 3> voxel = viewer.cursor();
    QCOMPARE(voxel[2], first + 2);  // the axial slice stays
    QVERIFY2(std::abs(voxel[0] - 8) <= 1 && std::abs(voxel[1] - 24) <= 1, qPrintable(QString("%1 %2").arg(voxel[0]).arg(voxel[1])));
    QCOMPARE(viewer.slice(Plane::sagittal), voxel[0]);
    QCOMPARE(viewer.slice(Plane::coronal), voxel[1]);
    // Right-drag: wider to the right, lower level upwards... as Slicer: up raises the level.
    const double window = viewer.window(), level = viewer.level();
    QTest::mousePress(axial, Qt::RightButton, {}, at);
    QMouseEvent drag(QEvent::MouseMove, QPointF(at + QPoint(50, -20)), axial->mapToGlobal(QPointF(at + QPoint(50, -20))),
                     Qt::NoButton, Qt::RightButton, Qt::NoModifier);
    QApplication::sendEvent(axial, &drag);
    QTest::mouseRelease(axial, Qt::RightButton, {}, at + QPoint(50, -20));
    QVERIFY2(viewer.window() > window, qPrintable(QString("%1 -> %2").arg(window).arg(viewer.window())));
    QVERIFY2(viewer.level() > level, qPrintable(QString("%1 -> %2").arg(level).arg(viewer.level())));
  }

  // A dataset.json beside the files (the Decathlon's layout) names the mask's classes, and
  // Open Mask starts in the labelsTr beside the image's imagesTr.
  void ClassNamesComeFromTheDatasetAndMasksFromLabelsTr() {
    QTemporaryDir tmp;
    QDir task(tmp.filePath("Task03_Liver"));
    QVERIFY(task.mkpath("imagesTr") && task.mkpath("labelsTr"));
    const m3d::Sample phantom = m3d::make_phantom(m3d::PhantomKind::ct, 32, 7);
    const QString image = task.filePath("imagesTr/liver_0.nii.gz"), labels = task.filePath("labelsTr/liver_0.nii.gz");
    m3d::write_nifti(image.toStdString(), phantom.image);
    m3d::write_nifti(labels.toStdString(), phantom.labels);
    gui_test::write_text(task.filePath("dataset.json").toStdString(),
                         R"({"name": "Liver", "labels": {"0": "background", "1": "liver", "2": "cancer"}})");
    VolumeViewer viewer;
    viewer.resize(900, 400);
    viewer.show();
    QVERIFY(QTest::qWaitForWindowExposed(&viewer));
    QCOMPARE(viewer.open_image(image), QString());
    QCOMPARE(QDir(viewer.mask_folder()).canonicalPath(), QDir(task.filePath("labelsTr")).canonicalPath());
    QCOMPARE(viewer.open_mask(labels), QString());
    QCOMPARE(viewer.class_names().at(1), QString("liver"));
    QVERIFY2(viewer.legend_text().contains("1 liver") && viewer.legend_text().contains("2 cancer"),
             qPrintable(viewer.legend_text()));
    const auto [x, y] = voxel_of_class(phantom.labels, m3d::kOrganClass);
    viewer.set_cursor({x, y, phantom.labels.nz() / 2});
    const QRect shown = viewer.picture_rect(Plane::axial);
    const QPoint at(shown.x() + (2 * x + 1) * shown.width() / 64, shown.y() + (2 * y + 1) * shown.height() / 64);
    QVERIFY2(viewer.readout_at(Plane::axial, at).endsWith("class 1 (liver)"), qPrintable(viewer.readout_at(Plane::axial, at)));
  }

  void ViewerShowsAPhantomsSlicesAndMask() {
    QTemporaryDir tmp;
    const m3d::Sample phantom = m3d::make_phantom(m3d::PhantomKind::ct, 32, 7);
    const QString image = tmp.filePath("ct.nii.gz"), labels = tmp.filePath("ct-labels.nii.gz");
    m3d::write_nifti(image.toStdString(), phantom.image);
    m3d::write_nifti(labels.toStdString(), phantom.labels);

    VolumeViewer viewer;
    viewer.resize(900, 400);
    viewer.show();
    QVERIFY(QTest::qWaitForWindowExposed(&viewer));
    QVERIFY(!viewer.mask_toggle_enabled());
    QCOMPARE(viewer.open_image(image), QString());
    QVERIFY(!viewer.mask_toggle_enabled());  // no mask yet: nothing to toggle
    QCOMPARE(viewer.plane_title(Plane::axial), QString("Axial — slice 17 of 32"));
    // The voxel under the middle of the axial view, and its value.
    const QRect shown = viewer.picture_rect(Plane::axial);
    QVERIFY(!shown.isEmpty());
    const QString readout = viewer.readout_at(Plane::axial, shown.center());
    const QRegularExpressionMatch m =
        QRegularExpression(R"(^voxel \((\d+), (\d+), (\d+)\): (\S+)$)").match(readout);
    QVERIFY2(m.hasMatch(), qPrintable(readout));
    const int vx = m.captured(1).toInt(), vy = m.captured(2).toInt(), vz = m.captured(3).toInt();
    QVERIFY2(std::abs(vx - 16) <= 1 && std::abs(vy - 16) <= 1 && vz == 16, qPrintable(readout));  // the middle
    QCOMPARE(m.captured(4), QString::number(phantom.image.at(vx, vy, vz), 'g', 5));
    QVERIFY(viewer.readout_at(Plane::axial, QPoint(-5, -5)).isEmpty());
    for (Plane p : {Plane::axial, Plane::coronal, Plane::sagittal}) QCOMPARE(viewer.picture(p).size(), QSize(32, 32));
    const auto [x, y] = voxel_of_class(phantom.labels, m3d::kOrganClass);
    QVERIFY(x >= 0);
    const QRgb before = viewer.picture(Plane::axial).pixel(x, y);
    QCOMPARE(qRed(before), qGreen(before));  // grey: no mask yet

    QCOMPARE(viewer.open_mask(labels), QString());
    QVERIFY(viewer.mask_toggle_enabled());
    QVERIFY2(viewer.legend_text().contains("■</span> 1") && viewer.legend_text().contains("■</span> 2"),
             qPrintable(viewer.legend_text()));
    QVERIFY(viewer.readout_at(Plane::axial, shown.center()).contains(", class "));
    const QRgb organ = viewer.picture(Plane::axial).pixel(x, y);
    QVERIFY2(qRed(organ) > qGreen(organ) + 40, "the liver is tinted red");
    const auto [lx, ly] = voxel_of_class(phantom.labels, 0);
    const QRgb background = viewer.picture(Plane::axial).pixel(lx, ly);
    QCOMPARE(qRed(background), qGreen(background));

    // A narrower window makes the same tissue brighter or darker, never the same grey.
    viewer.set_window(40.0, 60.0);
    QVERIFY(viewer.picture(Plane::axial) != QImage());
    viewer.set_slice(Plane::axial, 0);
    QVERIFY(viewer.error_text().isEmpty());
  }

  void MismatchedMaskAndBrokenFilesGiveMessages() {
    QTemporaryDir tmp;
    VolumeViewer viewer;
    QVERIFY(viewer.open_mask(tmp.filePath("m.nii")).contains("open an image first"));
    const QString image = tmp.filePath("a.nii"), other = tmp.filePath("b.nii.gz");
    m3d::write_nifti(image.toStdString(), m3d::make_phantom(m3d::PhantomKind::mri, 32, 1).image);
    m3d::write_nifti(other.toStdString(), m3d::make_phantom(m3d::PhantomKind::mri, 40, 1).labels);
    QCOMPARE(viewer.open_image(image), QString());
    QVERIFY2(viewer.open_mask(other).contains("differs from the image's"), qPrintable(viewer.error_text()));
    gui_test::write_text(tmp.filePath("bad.nii").toStdString(), "not a nifti file at all");
    QVERIFY(!viewer.open_image(tmp.filePath("bad.nii")).isEmpty());
    QVERIFY(viewer.has_image());  // the volume shown before stays
    QCOMPARE(viewer.picture(Plane::axial).size(), QSize(32, 32));
  }
};

QTEST_MAIN(VolumeViewerTest)
#include "volume_viewer_test.moc"
