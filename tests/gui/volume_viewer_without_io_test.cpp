// A build without NIfTI support (QUARTET_MEDICAL_IO off, or libnifti2 and DCMTK not
// found): the slice viewer cannot open files and says what is missing and how to get it;
// a volume handed to it is shown as usual.

#include <QtTest>

#include "gui/volume_viewer.h"
#include "medical3d/phantom.h"

using namespace quartet::gui;
namespace m3d = quartet::medical3d;

class VolumeViewerWithoutIoTest : public QObject {
  Q_OBJECT

 private slots:
  void OpeningAFileSaysWhatIsMissing() {
    VolumeViewer viewer;
    const QString problem = viewer.open_image("ct.nii.gz");
    QCOMPARE(problem, QString("The volume viewer needs Quartet built with NIfTI support (apt install libnifti2-dev "
                              "libdcmtk-dev, then rebuild)"));
    QVERIFY(!viewer.has_image());
    const m3d::Sample phantom = m3d::make_phantom(m3d::PhantomKind::ct, 32, 7);
    QCOMPARE(viewer.set_volume(phantom.image, phantom.labels), QString());
    QVERIFY(viewer.open_mask("mask.nii.gz").startsWith("The volume viewer needs Quartet built with NIfTI support"));
    QCOMPARE(viewer.picture(Plane::axial).size(), QSize(32, 32));
  }
};

QTEST_MAIN(VolumeViewerWithoutIoTest)
#include "volume_viewer_without_io_test.moc"
