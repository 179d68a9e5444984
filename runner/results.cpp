#include "runner/results.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace quartet::runner {

using nlohmann::json;

void write_file_atomically(const std::filesystem::path& path, const std::string& text, mode_t mode) {
  const std::filesystem::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  ::unlink(tmp.c_str());  // a leftover of a crash would keep its own mode
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) throw std::runtime_error(tmp.string() + ": cannot create: " + std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error(tmp.string() + ": write failed: " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error(tmp.string() + ": cannot flush to disk");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(path.string() + ": cannot replace: " + std::strerror(err));
  }
}

void write_json_atomically(const std::filesystem::path& path, const json& j) {
  write_file_atomically(path, j.dump(2) + "\n");
}

}  // namespace quartet::runner
