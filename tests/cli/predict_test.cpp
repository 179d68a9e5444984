// `quartet predict` and the msd-folder workload through the `quartet` binary: the mask
// of an image on an oblique grid, bad input, and a Decathlon folder trained under the
// runner whose weights then segment one of its images. Real processes, so labelled
// multirank and run serially.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/safetensors.h"
#include "medical3d/nifti.h"
#include "medical3d/phantom.h"
#include "medical3d/read_limits.h"
#include "tests/cli/cli_util.h"
#include "tests/medical3d/nifti_files.h"
#include "workloads/models.h"
#include "workloads/segmentation.h"

namespace {

namespace fs = std::filesystem;
using namespace quartet;
using cli_util::file_bytes;
using cli_util::quartet;
using cli_util::Result;
using nlohmann::json;

class PredictCli : public cli_util::FolderTest {
 protected:
  PredictCli() : FolderTest("cli_predict") {}

};

std::vector<json> all_records(const fs::path& file) {
  std::vector<json> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

// A CT-like image on an oblique, anisotropic grid of a size no window divides: a
// phantom's voxels, cropped, on a grid turned 30 degrees about z.
medical3d::Volume oblique_ct() {
  const medical3d::Sample ph = medical3d::make_phantom(medical3d::PhantomKind::ct, 40, 4);
  medical3d::Grid g;
  g.dims = {40, 36, 28};
  g.spacing = {0.8, 0.9, 2.5};
  g.origin = {-10.0, 20.0, 35.0};
  const double c = std::cos(M_PI / 6), s = std::sin(M_PI / 6);
  g.direction = {c, -s, 0, s, c, 0, 0, 0, 1};
  medical3d::Volume v(g);
  for (int64_t z = 0; z < 28; ++z)
    for (int64_t y = 0; y < 36; ++y)
      for (int64_t x = 0; x < 40; ++x) v.at(x, y, z) = ph.image.at(x, y, z + 6);
  return v;
}

// Header fields of a plain NIfTI-1 file: datatype (offset 70) and bitpix (72).
std::pair<int16_t, int16_t> nifti1_datatype(const fs::path& p) {
  const std::string bytes = file_bytes(p);
  int16_t datatype = 0, bitpix = 0;
  std::memcpy(&datatype, bytes.data() + 70, 2);
  std::memcpy(&bitpix, bytes.data() + 72, 2);
  return {datatype, bitpix};
}

TEST_F(PredictCli, WritesAUint8MaskOnTheImageGridAsTheWorkloadSegmentsIt) {
  const fs::path weights = dir_ / "unet3d.safetensors", image = dir_ / "ct.nii.gz", mask = dir_ / "mask.nii";
  const std::shared_ptr<engine::Model> model = workloads::make_model("unet3d", 3);
  engine::save_safetensors(weights.string(), model->state_dict());
  medical3d::write_nifti(image.string(), oblique_ct());

  const Result r = quartet({"predict", weights.string(), image.string(), "--out", mask.string(), "--kind", "ct",
                            "--patch", "16", "--batch", "2"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("wrote " + mask.string() + ": 40x36x28 voxels;"), std::string::npos) << r.out;

  EXPECT_EQ(nifti1_datatype(mask), std::make_pair(int16_t{2}, int16_t{8})) << "DT_UINT8, 8 bits";
  const medical3d::Volume read_image = medical3d::read_nifti(image.string());
  const medical3d::LabelVolume got = medical3d::read_nifti_labels(mask.string());
  EXPECT_TRUE(medical3d::same_grid(got.grid, read_image.grid)) << "the mask keeps the image's geometry";
  for (uint8_t v : got.voxels) ASSERT_LT(v, medical3d::kPhantomClasses);
  // The same windows, normalisation and argmax as the workloads' evaluation.
  const medical3d::LabelVolume want = workloads::segment_volume(
      *model, workloads::normalise_image(medical3d::PhantomKind::ct, read_image), 16, 0.5, 2);
  EXPECT_EQ(got.voxels, want.voxels);
}

TEST_F(PredictCli, BadInputExitsWith2AndOneMessage) {
  const fs::path weights = dir_ / "unet3d.safetensors", image = dir_ / "ct.nii.gz";
  const std::string out = (dir_ / "mask.nii.gz").string();
  engine::save_safetensors(weights.string(), workloads::make_model("unet3d", 3)->state_dict());
  medical3d::write_nifti(image.string(), oblique_ct());
  const fs::path cnn = dir_ / "cnn.safetensors", junk = dir_ / "junk.nii";
  engine::save_safetensors(cnn.string(), workloads::make_model("cnn", 3)->state_dict());
  std::ofstream(junk) << "not a NIfTI file";

  auto expect_one_line = [&](const std::vector<std::string>& args, const std::string& fragment) {
    const Result r = quartet(args, dir_);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(fragment), std::string::npos) << "output: " << r.out << "\nexpected: " << fragment;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_FALSE(fs::exists(out)) << "nothing is written on bad input";
  };
  const std::string w = weights.string(), img = image.string();
  expect_one_line({"predict", (dir_ / "none.safetensors").string(), img, "--out", out}, "none.safetensors");
  expect_one_line({"predict", cnn.string(), img, "--out", out}, "cnn.safetensors: ");
  expect_one_line({"predict", w, img, "--out", out, "--model", "cnn"}, "--model: cnn does not segment volumes");
  expect_one_line({"predict", w, img, "--out", out, "--model", "vnet"}, "--model: unknown model \"vnet\"");
  expect_one_line({"predict", w, img, "--out", out, "--kind", "pet"}, "--kind: ");
  expect_one_line({"predict", w, img, "--out", out, "--patch", "18"},
                  "--patch: expected 1 to 1024 voxels and, for unet3d, a multiple of 4, got 18");
  expect_one_line({"predict", w, img, "--out", (dir_ / "mask.png").string()}, "--out: expected a name ending in .nii");
  expect_one_line({"predict", w, (dir_ / "none.nii.gz").string(), "--out", out}, "none.nii.gz");
  expect_one_line({"predict", w, junk.string(), "--out", out}, "junk.nii");
  expect_one_line({"predict", w, img, "--out", (dir_ / "no" / "such" / "mask.nii.gz").string()},
                  "--out: the folder " + (dir_ / "no" / "such").string() + " of ");
}

// A Decathlon folder as `quartet phantom` writes it trains under the runner, and the
// trained weights segment one of its images.
TEST_F(PredictCli, MsdFolderTrainsUnderTheRunnerAndItsWeightsPredict) {
  const fs::path data = dir_ / "Task00_Phantom";
  const Result ph = quartet({"phantom", "--kind", "mri", "--count", "4", "--size", "32", "--out", data.string()}, dir_);
  ASSERT_EQ(ph.code, 0) << ph.out;
  const json spec = {
      {"name", "cli-msd"},
      {"workload",
       {{"name", "msd-folder"}, {"model", "unet3d"}, {"data_dir", data.string()}, {"test_volumes", 1}, {"patch", 16}}},
      {"seed", 3},
      {"threads", 1},
      {"train", {{"epochs", 1}, {"batch", 1}, {"max_steps", 2}, {"eval_batch", 8}}},
      {"arms", {{{"name", "single"}, {"regime", "single"}}}}};
  std::ofstream(dir_ / "spec.json") << spec.dump(2);
  const Result r =
      quartet({"run", (dir_ / "spec.json").string(), "--out", (dir_ / "r").string(), "--progress=none"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::vector<json> steps = all_records(dir_ / "r" / "single" / "roles" / "trainer.jsonl");
  ASSERT_EQ(steps.size(), 2u);
  ASSERT_TRUE(steps.back().contains("eval"));
  EXPECT_EQ(steps.back()["eval"]["metric"], "dice");
  EXPECT_EQ(steps.back()["eval"]["samples"], 1);

  const fs::path mask = dir_ / "mask.nii.gz";
  const Result p = quartet({"predict", (dir_ / "r" / "single" / "final.safetensors").string(),
                            (data / "imagesTr" / "phantom_mri_003.nii.gz").string(), "--out", mask.string(), "--kind",
                            "mri", "--patch", "16"}, dir_);
  ASSERT_EQ(p.code, 0) << p.out;
  EXPECT_NE(p.out.find("32x32x32 voxels"), std::string::npos) << p.out;
  EXPECT_TRUE(fs::exists(mask));
}

// Images with forged headers: `quartet predict`, and `quartet run` and `quartet eval` on a
// Decathlon folder holding one, exit with code 2 and one line naming the file and the
// field, and write nothing.
class VolumeCliHostile : public PredictCli {
 protected:
  // `image` rewritten with its header changed by `patch`, gzipped when its name says so.
  void forge(const fs::path& image, const std::function<void(nifti_1_header&)>& patch) {
    const fs::path plain = dir_ / "plain.nii";
    medical3d::write_nifti(plain.string(), medical3d::read_nifti(image.string()));
    const std::string bytes = medical3d::testing::patched_nifti1(file_bytes(plain), patch);
    if (image.string().ends_with(".gz"))
      medical3d::testing::write_gzipped(image.string(), bytes);
    else
      std::ofstream(image, std::ios::binary) << bytes;
    fs::remove(plain);
  }
};

TEST_F(VolumeCliHostile, PredictRefusesAForgedImageAndWritesNoMask) {
  const fs::path weights = dir_ / "unet3d.safetensors", image = dir_ / "ct.nii";
  const std::string mask = (dir_ / "mask.nii.gz").string();
  engine::save_safetensors(weights.string(), workloads::make_model("unet3d", 3)->state_dict());
  for (const auto& [patch, fragment] : std::vector<std::pair<std::function<void(nifti_1_header&)>, std::string>>{
           {[](nifti_1_header& h) { h.vox_offset = 1e12f; }, "ct.nii: vox_offset is 1e+12, past the end of the file"},
           {[](nifti_1_header& h) { h.pixdim[2] = 0; }, "ct.nii: pixdim[2] (the spacing along y) is 0; allowed:"},
           {[](nifti_1_header& h) { h.pixdim[1] = std::numeric_limits<float>::quiet_NaN(); }, "pixdim[1]"}}) {
    medical3d::write_nifti(image.string(), oblique_ct());
    forge(image, patch);
    const Result r = quartet({"predict", weights.string(), image.string(), "--out", mask, "--patch", "16"}, dir_);
    cli_util::expect_exit2_with(r, fragment);
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_FALSE(fs::exists(mask)) << "no mask of a refused image";
  }
}

// A 600^3 volume (a 210 KB .nii.gz) cost predict more than the readers' 32 bytes a voxel:
// its cap counts predict's own working set for the model's classes, and an image over it
// is refused from its header, before anything is allocated or inferred.
TEST_F(VolumeCliHostile, PredictRefusesAnImageItsWorkingSetCannotHoldBeforeReadingIt) {
  const medical3d::ReadLimits cap =
      medical3d::ReadLimits::of_this_machine("--max-voxels", medical3d::predict_bytes_per_voxel(3));
  if (cap.max_voxels >= 1'000'000'000) GTEST_SKIP() << "this machine's memory holds 1000^3 voxels: " << cap.basis;
  EXPECT_EQ(medical3d::predict_bytes_per_voxel(3), 28);  // 4 + 3 x 4 + 4 + 1, 7 to spare
  const fs::path weights = dir_ / "unet3d.safetensors", image = dir_ / "big.nii.gz", mask = dir_ / "mask.nii";
  engine::save_safetensors(weights.string(), workloads::make_model("unet3d", 3)->state_dict());
  medical3d::write_nifti(image.string(), oblique_ct());
  forge(image, [](nifti_1_header& h) { h.dim[1] = h.dim[2] = h.dim[3] = 1000; });
  ASSERT_LT(fs::file_size(image), 1'000'000u);
  const auto started = std::chrono::steady_clock::now();
  cli_util::expect_exit2_with(quartet({"predict", weights.string(), image.string(), "--out", mask.string()}, dir_),
                              "dim[1..3] is 1000x1000x1000, 1000000000 voxels; allowed: at most " +
                                  std::to_string(cap.max_voxels) + " voxels (half of this machine's ");
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(60)) << "read or inferred first";
  EXPECT_FALSE(fs::exists(mask));
}

// A NaN voxel or a NaN weight gave an all-background mask and exit 0: both are refused,
// the voxels counted, the tensor named; --nan-as reads such voxels as a value.
TEST_F(VolumeCliHostile, NonFiniteVoxelsAndWeightsAreRefused) {
  const fs::path weights = dir_ / "unet3d.safetensors", image = dir_ / "ct.nii", mask = dir_ / "mask.nii";
  const std::shared_ptr<engine::Model> model = workloads::make_model("unet3d", 3);
  engine::save_safetensors(weights.string(), model->state_dict());
  medical3d::Volume v = oblique_ct();
  v.voxels[5] = std::numeric_limits<float>::quiet_NaN();
  v.voxels[77] = std::numeric_limits<float>::infinity();
  medical3d::write_nifti(image.string(), v);
  const std::vector<std::string> args = {"predict", weights.string(), image.string(), "--out", mask.string(),
                                         "--patch", "16"};
  cli_util::expect_exit2_with(quartet(args, dir_),
                              "ct.nii: 2 of 40320 voxels are not finite (NaN or infinite); allowed: finite voxels, or "
                              "--nan-as VALUE to read them as VALUE");
  EXPECT_FALSE(fs::exists(mask));
  std::vector<std::string> with_value = args;
  with_value.insert(with_value.end(), {"--nan-as", "-1024"});
  const Result ok = quartet(with_value, dir_);
  ASSERT_EQ(ok.code, 0) << ok.out;
  medical3d::Volume mended = medical3d::read_nifti(image.string());
  medical3d::replace_non_finite(mended, -1024.0f);
  EXPECT_EQ(medical3d::read_nifti_labels(mask.string()).voxels,
            workloads::segment_volume(*model, workloads::normalise_image(medical3d::PhantomKind::ct, mended), 16, 0.5,
                                      4)
                .voxels);

  // One NaN weight: refused naming the tensor.
  engine::NamedTensors state = model->state_dict();
  std::vector<float> values = state.front().second.to_vector();
  values[0] = std::numeric_limits<float>::quiet_NaN();
  state.front().second = engine::Tensor::from_vector(state.front().second.shape(), values);
  engine::save_safetensors((dir_ / "nan.safetensors").string(), state);
  fs::remove(mask);
  cli_util::expect_exit2_with(
      quartet({"predict", (dir_ / "nan.safetensors").string(), image.string(), "--out", mask.string(), "--nan-as", "0"},
              dir_),
      "tensor '" + state.front().first + "' holds 1 of ");
  EXPECT_FALSE(fs::exists(mask));
}

TEST_F(VolumeCliHostile, RunAndEvalRefuseADecathlonFolderWithAForgedImage) {
  // 20 cases: what `quartet eval` asks of a workload (WorkloadConfig's default volumes).
  const fs::path data = dir_ / "Task00_Phantom";
  const Result ph = quartet({"phantom", "--kind", "mri", "--count", "20", "--size", "32", "--out", data.string()}, dir_);
  ASSERT_EQ(ph.code, 0) << ph.out;
  const fs::path bad = data / "imagesTr" / "phantom_mri_001.nii.gz";
  forge(bad, [](nifti_1_header& h) { h.pixdim[3] = -1; });
  const std::string fragment = bad.string() + ": pixdim[3] (the spacing along z) is -1; allowed:";

  const json spec = {
      {"name", "cli-msd-forged"},
      {"workload", {{"name", "msd-folder"}, {"model", "unet3d"}, {"data_dir", data.string()}, {"test_volumes", 1},
                    {"patch", 16}}},
      {"train", {{"epochs", 1}, {"batch", 1}}},
      {"arms", {{{"name", "single"}, {"regime", "single"}}}}};
  std::ofstream(dir_ / "spec.json") << spec.dump(2);
  const Result run =
      quartet({"run", (dir_ / "spec.json").string(), "--out", (dir_ / "r").string(), "--progress=none"}, dir_);
  cli_util::expect_exit2_with(run, fragment);
  EXPECT_FALSE(fs::exists(dir_ / "r")) << "a refused workload creates no run folder";

  const Result eval = quartet({"eval", (dir_ / "w.safetensors").string(), "--workload", "msd-folder", "--model",
                               "unet3d", "--data-dir", data.string()}, dir_);
  cli_util::expect_exit2_with(eval, fragment);
}

}  // namespace
