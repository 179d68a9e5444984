#pragma once

// The Medical Segmentation Decathlon folder layout (http://medicaldecathlon.com):
//   DIR/dataset.json
//   DIR/imagesTr/NAME_000.nii.gz   DIR/labelsTr/NAME_000.nii.gz   (same names)
//   DIR/imagesTs/...               (optional, images only)
// dataset.json names the task, its modalities and label classes, and lists the pairs:
//   {"name": "...", "modality": {"0": "CT"}, "labels": {"0": "background", "1": "organ"},
//    "numTraining": 2, "training": [{"image": "./imagesTr/a.nii.gz",
//                                    "label": "./labelsTr/a.nii.gz"}, ...],
//    "test": ["./imagesTs/b.nii.gz"]}

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "medical3d/phantom.h"

namespace quartet::medical3d {

struct MsdCase {
  std::string image;  // a path: the folder joined with dataset.json's entry
  std::string label;
};

struct MsdDataset {
  std::string name;
  std::map<std::string, std::string> modality;  // channel ("0") -> modality ("CT")
  std::map<int, std::string> labels;            // class index -> name
  std::vector<MsdCase> training;
  std::vector<std::string> test;  // image paths
};

// Writes `count` phantoms of `kind` and `size` to `dir` in the layout above: case i is
// make_phantom(kind, size, phantom_case_seed(seed, i)), named phantom_<kind>_<i> (three
// digits at least), the image float32 and the labels uint8, both gzipped; dataset.json
// comes last, so a folder with one is complete.
// requires `dir` not to exist or to be an empty folder; count >= 1; a valid phantom size
// throws std::invalid_argument when a requirement is not met (an existing non-empty
// folder is never touched); std::runtime_error naming the path when a file cannot be
// written.
void write_msd_dataset(const std::string& dir, PhantomKind kind, int64_t count, int64_t size, uint64_t seed);

// Reads dir/dataset.json and checks that every file it lists exists.
// ensures paths are `dir` joined with the entries (a leading "./" dropped)
// throws std::runtime_error naming the path and what is wrong: no folder, no dataset.json,
// JSON that does not parse, a missing or mistyped field ("training", its "image" and
// "label" strings; "labels" keys that are not class indices), numTraining disagreeing
// with the list, or a listed file that does not exist.
MsdDataset read_msd_dataset(const std::string& dir);

}  // namespace quartet::medical3d
