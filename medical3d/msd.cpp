#include "medical3d/msd.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "medical3d/nifti.h"

namespace quartet::medical3d {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw std::runtime_error(where + ": " + what);
}

std::string case_name(PhantomKind kind, int64_t index) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%03lld", static_cast<long long>(index));
  return std::string("phantom_") + to_string(kind) + "_" + digits;
}

// dir joined with a dataset.json entry such as "./imagesTr/a.nii.gz".
std::string resolve(const fs::path& dir, std::string entry) {
  if (entry.rfind("./", 0) == 0) entry.erase(0, 2);
  return (dir / entry).string();
}

const json& field(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(where, std::string("has no \"") + key + "\"");
  return *it;
}

std::string string_field(const json& obj, const char* key, const std::string& where) {
  const json& v = field(obj, key, where);
  if (!v.is_string()) fail(where, std::string("\"") + key + "\" is " + v.type_name() + ", expected a string");
  return v.get<std::string>();
}

void check_listed(const std::string& json_path, const std::string& what, const std::string& entry,
                  const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) fail(json_path, what + " lists " + entry + " but " + path + " does not exist");
}

}  // namespace

void write_msd_dataset(const std::string& dir, PhantomKind kind, int64_t count, int64_t size, uint64_t seed) {
  if (count < 1) throw std::invalid_argument("write_msd_dataset: count " + std::to_string(count) + ", expected >= 1");
  if (size < kMinPhantomSize || size > kMaxPhantomSize)
    throw std::invalid_argument("write_msd_dataset: phantom size " + std::to_string(size) + ", expected " +
                                std::to_string(kMinPhantomSize) + " to " + std::to_string(kMaxPhantomSize));
  std::error_code ec;
  const fs::path root(dir);
  if (fs::exists(root, ec)) {
    if (!fs::is_directory(root, ec)) throw std::invalid_argument(dir + ": exists and is not a folder");
    if (!fs::is_empty(root, ec))
      throw std::invalid_argument(dir +
                                  ": folder exists and is not empty; refusing to overwrite it "
                                  "(remove it or name a new folder)");
  }
  for (const char* sub : {"imagesTr", "labelsTr"}) {
    fs::create_directories(root / sub, ec);
    if (ec) fail((root / sub).string(), "cannot create the folder: " + ec.message());
  }

  const bool ct = kind == PhantomKind::ct;
  json training = json::array();
  for (int64_t i = 0; i < count; ++i) {
    const std::string file = case_name(kind, i) + ".nii.gz";
    const Sample s = make_phantom(kind, size, phantom_case_seed(seed, i));
    write_nifti((root / "imagesTr" / file).string(), s.image);
    write_nifti((root / "labelsTr" / file).string(), s.labels);
    training.push_back({{"image", "./imagesTr/" + file}, {"label", "./labelsTr/" + file}});
  }
  const json doc = {
      {"name", ct ? "PhantomCT" : "PhantomMRI"},
      {"description", std::string("Procedural ") + (ct ? "CT" : "MRI") + " abdomen phantoms from Quartet (size " +
                          std::to_string(size) + ", seed " + std::to_string(seed) + ")"},
      {"reference", "Quartet medical3d/phantom.h"},
      {"licence", "CC0-1.0"},
      {"tensorImageSize", "3D"},
      {"modality", {{"0", ct ? "CT" : "MRI"}}},
      {"labels", {{"0", "background"}, {"1", "organ"}, {"2", "lesion"}}},
      {"numTraining", count},
      {"numTest", 0},
      {"training", training},
      {"test", json::array()},
  };

  const fs::path target = root / "dataset.json";
  const fs::path tmp = root / ".dataset.json.tmp";
  {
    std::ofstream out(tmp);
    out << doc.dump(2) << "\n";
    if (!out.flush()) fail(tmp.string(), "cannot be written");
  }
  fs::rename(tmp, target, ec);
  if (ec) fail(target.string(), "cannot be written: " + ec.message());
}

MsdDataset read_msd_dataset(const std::string& dir) {
  std::error_code ec;
  const fs::path root(dir);
  if (!fs::is_directory(root, ec)) fail(dir, "no such folder (expected a Medical Segmentation Decathlon folder)");
  const std::string json_path = (root / "dataset.json").string();
  if (!fs::is_regular_file(json_path, ec))
    fail(dir,
         "has no dataset.json; a Medical Segmentation Decathlon folder holds dataset.json, imagesTr/ and "
         "labelsTr/");

  json doc;
  {
    std::ifstream in(json_path);
    std::stringstream text;
    text << in.rdbuf();
    try {
      doc = json::parse(text.str());
    } catch (const json::parse_error& e) {
      fail(json_path, std::string("not valid JSON: ") + e.what());
    }
  }
  if (!doc.is_object()) fail(json_path, "expected a JSON object");

  MsdDataset out;
  if (doc.contains("name") && doc["name"].is_string()) out.name = doc["name"].get<std::string>();
  if (doc.contains("modality") && doc["modality"].is_object())
    for (const auto& [k, v] : doc["modality"].items())
      if (v.is_string()) out.modality[k] = v.get<std::string>();
  if (doc.contains("labels")) {
    if (!doc["labels"].is_object()) fail(json_path, "\"labels\" is not an object of class index -> name");
    for (const auto& [k, v] : doc["labels"].items()) {
      size_t used = 0;
      int index = -1;
      try {
        index = std::stoi(k, &used);
      } catch (const std::exception&) {
      }
      if (used != k.size() || index < 0 || index > 255 || !v.is_string())
        fail(json_path, "\"labels\" entry \"" + k + "\" is not a class index in [0, 255] with a name");
      out.labels[index] = v.get<std::string>();
    }
  }

  const json& training = field(doc, "training", json_path);
  if (!training.is_array()) fail(json_path, "\"training\" is not a list");
  for (size_t i = 0; i < training.size(); ++i) {
    const std::string where = json_path + ": training[" + std::to_string(i) + "]";
    if (!training[i].is_object()) fail(where, "expected an object with \"image\" and \"label\"");
    const std::string image = string_field(training[i], "image", where);
    const std::string label = string_field(training[i], "label", where);
    MsdCase c{resolve(root, image), resolve(root, label)};
    check_listed(json_path, "training[" + std::to_string(i) + "].image", image, c.image);
    check_listed(json_path, "training[" + std::to_string(i) + "].label", label, c.label);
    out.training.push_back(std::move(c));
  }
  if (doc.contains("numTraining")) {
    const json& n = doc["numTraining"];
    if (!n.is_number_integer() || n.get<int64_t>() != static_cast<int64_t>(training.size()))
      fail(json_path, "numTraining is " + n.dump() + " but \"training\" lists " + std::to_string(training.size()));
  }
  if (doc.contains("test")) {
    if (!doc["test"].is_array()) fail(json_path, "\"test\" is not a list");
    for (size_t i = 0; i < doc["test"].size(); ++i) {
      const json& t = doc["test"][i];
      if (!t.is_string()) fail(json_path, "test[" + std::to_string(i) + "] is not a path");
      const std::string path = resolve(root, t.get<std::string>());
      check_listed(json_path, "test[" + std::to_string(i) + "]", t.get<std::string>(), path);
      out.test.push_back(path);
    }
  }
  return out;
}

}  // namespace quartet::medical3d
