#pragma once

// MNIST-format idx files (http://yann.lecun.com/exdb/mnist/): a big-endian header
// (magic 0x0000 08 ND, then ND sizes) followed by the unsigned bytes it promises.
// Files named *.gz are read through zlib, others as they are.
//
// Every reader validates before it trusts: the magic, sizes >= 1, and that the file
// holds exactly the bytes its header promises. A plain file's size is checked against
// the header before anything is allocated; a gzip stream is read in chunks and refused at
// its end, so a header claiming 2^32 images never reaches the allocator. Errors are
// std::runtime_error naming the file and what is wrong with it.

#include <cstdint>
#include <string>
#include <vector>

#include "workloads/dataset.h"

namespace quartet::workloads {

// Where Debian's dataset-fashion-mnist package installs the four .gz files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct IdxImages {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols bytes, row-major per image
};

// An idx3-ubyte image file (magic 0x00000803).
IdxImages read_idx_images(const std::string& path);
// An idx1-ubyte label file (magic 0x00000801).
std::vector<uint8_t> read_idx_labels(const std::string& path);

// One split: images and labels of equal count, every label in [0, num_classes).
// Pixels are one channel; normalised with kFashionMnistNormalization when gathered.
ImageDataset load_idx_pair(const std::string& images_path, const std::string& labels_path,
                           int num_classes = 10);

// The four files of an MNIST-format folder: {train,t10k}-{images-idx3,labels-idx1}-ubyte,
// each plain or .gz (plain wins when both exist). Throws std::runtime_error when the
// folder or a file is missing, saying how to get Fashion-MNIST.
DatasetSplits load_idx_folder(const std::string& dir = kFashionMnistDir, int num_classes = 10);

}  // namespace quartet::workloads
