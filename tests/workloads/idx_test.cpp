#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "workloads/idx.h"

namespace quartet::workloads {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> be32(uint32_t v) {
  return {static_cast<uint8_t>(v >> 24), static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 8),
          static_cast<uint8_t>(v)};
}

// Header (magic, sizes) followed by `body`.
std::vector<uint8_t> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& body) {
  std::vector<uint8_t> out = be32(magic);
  for (uint32_t d : dims) {
    auto b = be32(d);
    out.insert(out.end(), b.begin(), b.end());
  }
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

std::vector<uint8_t> images_bytes(uint32_t count, uint32_t rows, uint32_t cols) {
  std::vector<uint8_t> body(static_cast<size_t>(count) * rows * cols);
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<uint8_t>(i * 7 + 3);
  return idx_bytes(0x803, {count, rows, cols}, body);
}

std::vector<uint8_t> labels_bytes(uint32_t count, int classes = 10) {
  std::vector<uint8_t> body(count);
  for (uint32_t i = 0; i < count; ++i) body[i] = static_cast<uint8_t>(i % classes);
  return idx_bytes(0x801, {count}, body);
}

void write_plain(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_gz(const fs::path& p, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("quartet-idx-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs f and returns the std::runtime_error message it threw ("" if none).
  template <class F>
  static std::string error_of(F f) {
    try {
      f();
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(IdxTest, ReadsPlainImagesAndLabelsItWrote) {
  write_plain(dir_ / "img", images_bytes(5, 4, 3));
  write_plain(dir_ / "lab", labels_bytes(5));
  const IdxImages images = read_idx_images((dir_ / "img").string());
  EXPECT_EQ(images.count, 5);
  EXPECT_EQ(images.rows, 4);
  EXPECT_EQ(images.cols, 3);
  const auto bytes = images_bytes(5, 4, 3);
  EXPECT_EQ(images.pixels, std::vector<uint8_t>(bytes.begin() + 16, bytes.end()));
  EXPECT_EQ(read_idx_labels((dir_ / "lab").string()), (std::vector<uint8_t>{0, 1, 2, 3, 4}));
}

TEST_F(IdxTest, ReadsGzipImagesAndLabelsItWrote) {
  write_gz(dir_ / "img.gz", images_bytes(7, 28, 28));
  write_gz(dir_ / "lab.gz", labels_bytes(7));
  const ImageDataset d = load_idx_pair((dir_ / "img.gz").string(), (dir_ / "lab.gz").string());
  EXPECT_EQ(d.size(), 7);
  EXPECT_EQ(d.sample_shape(), (engine::Shape{1, 28, 28}));
  const auto bytes = images_bytes(7, 28, 28);
  EXPECT_TRUE(std::equal(bytes.begin() + 16, bytes.end(), d.pixels(0)));
  EXPECT_EQ(d.labels(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
}

TEST_F(IdxTest, LoadsAFolderOfPlainAndGzipFiles) {
  write_gz(dir_ / "train-images-idx3-ubyte.gz", images_bytes(12, 28, 28));
  write_gz(dir_ / "train-labels-idx1-ubyte.gz", labels_bytes(12));
  write_plain(dir_ / "t10k-images-idx3-ubyte", images_bytes(3, 28, 28));
  write_plain(dir_ / "t10k-labels-idx1-ubyte", labels_bytes(3));
  const DatasetSplits d = load_idx_folder(dir_.string());
  EXPECT_EQ(d.train.size(), 12);
  EXPECT_EQ(d.test.size(), 3);
  EXPECT_EQ(d.train.num_classes(), 10);
}

TEST_F(IdxTest, TruncatedPlainFileIsRefusedNamingTheFile) {
  auto bytes = images_bytes(4, 28, 28);
  bytes.resize(bytes.size() - 100);
  write_plain(dir_ / "img", bytes);
  const std::string msg = error_of([&] { read_idx_images((dir_ / "img").string()); });
  EXPECT_NE(msg.find((dir_ / "img").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST_F(IdxTest, TruncatedGzipContentIsRefused) {
  auto bytes = labels_bytes(50);
  bytes.resize(bytes.size() - 1);
  write_gz(dir_ / "lab.gz", bytes);
  const std::string msg = error_of([&] { read_idx_labels((dir_ / "lab.gz").string()); });
  EXPECT_NE(msg.find("lab.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST_F(IdxTest, GzipFileCutShortIsRefused) {
  write_gz(dir_ / "img.gz", images_bytes(40, 28, 28));
  fs::resize_file(dir_ / "img.gz", fs::file_size(dir_ / "img.gz") / 2);
  const std::string msg = error_of([&] { read_idx_images((dir_ / "img.gz").string()); });
  EXPECT_NE(msg.find("img.gz"), std::string::npos) << msg;
}

TEST_F(IdxTest, TrailingBytesAreRefused) {
  auto bytes = labels_bytes(5);
  bytes.push_back(1);
  write_plain(dir_ / "lab", bytes);
  write_gz(dir_ / "lab.gz", bytes);
  EXPECT_NE(error_of([&] { read_idx_labels((dir_ / "lab").string()); }).find("1 more"), std::string::npos);
  EXPECT_NE(error_of([&] { read_idx_labels((dir_ / "lab.gz").string()); }).find("goes on"), std::string::npos);
}

TEST_F(IdxTest, BadMagicIsRefused) {
  write_plain(dir_ / "lab", labels_bytes(5));
  const std::string msg = error_of([&] { read_idx_images((dir_ / "lab").string()); });
  EXPECT_NE(msg.find("bad magic 0x00000801, expected 0x00000803"), std::string::npos) << msg;
}

TEST_F(IdxTest, GzipDataWithoutTheGzSuffixIsNamedAsSuch) {
  write_gz(dir_ / "lab", labels_bytes(5));
  const std::string msg = error_of([&] { read_idx_labels((dir_ / "lab").string()); });
  EXPECT_NE(msg.find("gzip-compressed: name it *.gz"), std::string::npos) << msg;
}

TEST_F(IdxTest, CountMismatchBetweenImagesAndLabelsIsRefused) {
  write_plain(dir_ / "img", images_bytes(5, 28, 28));
  write_plain(dir_ / "lab", labels_bytes(6));
  const std::string msg = error_of([&] { load_idx_pair((dir_ / "img").string(), (dir_ / "lab").string()); });
  EXPECT_NE(msg.find("holds 5 images"), std::string::npos) << msg;
  EXPECT_NE(msg.find("holds 6 labels"), std::string::npos) << msg;
}

TEST_F(IdxTest, LabelOutsideTheClassesIsRefused) {
  write_plain(dir_ / "img", images_bytes(12, 28, 28));
  write_plain(dir_ / "lab", labels_bytes(12, 12));
  const std::string msg = error_of([&] { load_idx_pair((dir_ / "img").string(), (dir_ / "lab").string(), 10); });
  EXPECT_NE(msg.find("label 10 of sample 10"), std::string::npos) << msg;
}

// Caps the address space near its current size while alive, so a reader that trusted a
// forged header would hit std::bad_alloc rather than our std::runtime_error.
class AddressSpaceCap {
 public:
  explicit AddressSpaceCap(long long headroom) {
    getrlimit(RLIMIT_AS, &saved_);
    long pages = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    rlimit cap = saved_;
    cap.rlim_cur = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + headroom;
    active_ = pages > 0 && setrlimit(RLIMIT_AS, &cap) == 0;
  }
  ~AddressSpaceCap() {
    if (active_) setrlimit(RLIMIT_AS, &saved_);
  }

 private:
  rlimit saved_{};
  bool active_ = false;
};

TEST_F(IdxTest, HugeClaimedCountIsRefusedWithoutAllocating) {
  // 2^32 - 1 one-pixel images: 4 GiB promised, 64 bytes present.
  const auto bytes = idx_bytes(0x803, {0xffffffffu, 1, 1}, std::vector<uint8_t>(64, 9));
  write_plain(dir_ / "img", bytes);
  write_gz(dir_ / "img.gz", bytes);
  AddressSpaceCap cap(256LL << 20);
  for (const char* name : {"img", "img.gz"}) {
    std::string msg;
    EXPECT_NO_THROW(msg = error_of([&] { read_idx_images((dir_ / name).string()); })) << name;
    EXPECT_NE(msg.find("header promises 4294967295 images"), std::string::npos) << msg;
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  }
}

TEST_F(IdxTest, MissingFolderMessageNamesTheDebianPackage) {
  const std::string msg = error_of([&] { load_idx_folder((dir_ / "nowhere").string()); });
  EXPECT_EQ(msg, "dataset folder " + (dir_ / "nowhere").string() +
                     " does not exist; install the Debian package dataset-fashion-mnist "
                     "(apt-get install dataset-fashion-mnist) or name an MNIST-format folder");
}

TEST_F(IdxTest, MissingFileIsNamed) {
  write_gz(dir_ / "train-images-idx3-ubyte.gz", images_bytes(2, 28, 28));
  write_gz(dir_ / "train-labels-idx1-ubyte.gz", labels_bytes(2));
  write_gz(dir_ / "t10k-images-idx3-ubyte.gz", images_bytes(2, 28, 28));
  const std::string msg = error_of([&] { load_idx_folder(dir_.string()); });
  EXPECT_NE(msg.find("has no t10k-labels-idx1-ubyte"), std::string::npos) << msg;
}

}  // namespace
}  // namespace quartet::workloads
