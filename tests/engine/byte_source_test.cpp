#include "engine/byte_source.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>
#include <string>

#include "tests/temp_folder.h"

namespace quartet::engine {
namespace {

class ByteSourceTest : public test_util::TempFolderTest {
 protected:
  ByteSourceTest() : TempFolderTest("quartet_byte_source") {}
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // "0123456789" repeated, as plain.bin and gzipped as data.gz.
  std::string write_both(size_t bytes) {
    std::string data(bytes, '\0');
    for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>('0' + i % 10);
    std::ofstream(path("plain.bin"), std::ios::binary) << data;
    gzFile f = gzopen(path("data.gz").c_str(), "wb");
    EXPECT_EQ(gzwrite(f, data.data(), static_cast<unsigned>(data.size())), static_cast<int>(data.size()));
    gzclose(f);
    return data;
  }
};

TEST_F(ByteSourceTest, ReadsPlainAndGzippedFilesAlikeAndShortAtTheEnd) {
  const std::string data = write_both(3 << 20);  // more than one chunk
  for (const auto& [name, gz] : {std::pair{"plain.bin", false}, std::pair{"data.gz", true}}) {
    SCOPED_TRACE(name);
    ByteSource src(path(name), gz);
    EXPECT_EQ(src.compressed(), gz);
    std::string got(data.size() + 10, 'x');
    EXPECT_EQ(src.read(got.data(), got.size()), data.size());
    EXPECT_EQ(got.substr(0, data.size()), data);
    EXPECT_EQ(src.read(got.data(), 1), 0u);
  }
}

TEST_F(ByteSourceTest, SkipMovesOnAndSaysWhenGzippedDataEnds) {
  const std::string data = write_both(5000);
  for (const auto& [name, gz] : {std::pair{"plain.bin", false}, std::pair{"data.gz", true}}) {
    SCOPED_TRACE(name);
    ByteSource src(path(name), gz);
    ASSERT_TRUE(src.skip(1234));
    char c = 0;
    ASSERT_EQ(src.read(&c, 1), 1u);
    EXPECT_EQ(c, data[1234]);
  }
  ByteSource gz(path("data.gz"), true);
  EXPECT_FALSE(gz.skip(5001));
}

TEST_F(ByteSourceTest, TruncatedGzipAndMissingFilesThrowNamingThePath) {
  write_both(1 << 20);
  std::ifstream in(path("data.gz"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(path("cut.gz"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  ByteSource cut(path("cut.gz"), true);
  std::string buf(1 << 20, '\0');
  try {
    cut.read(buf.data(), buf.size());
    ADD_FAILURE() << "a truncated gzip stream read without error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path("cut.gz") + ": corrupt or truncated gzip data"), std::string::npos)
        << e.what();
  }
  try {
    ByteSource missing(path("absent.bin"), false);
    ADD_FAILURE() << "opened a missing file";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path("absent.bin") + ": cannot open: "), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace quartet::engine
