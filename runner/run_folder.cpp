#include "runner/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "runner/wiring.h"

namespace quartet::runner {

namespace fs = std::filesystem;

void make_run_folder(const fs::path& dir, const std::string& option) {
  std::error_code ec;
  if (!dir.parent_path().empty()) fs::create_directories(dir.parent_path(), ec);
  // create_directory, not create_directories: exactly one of two runs racing for the name makes it.
  const bool made = !ec && fs::create_directory(dir, ec);
  if (ec) throw InputError(option + " " + dir.string() + ": cannot make the run folder: " + ec.message());
  if (!made)
    throw InputError(option + " " + dir.string() + " exists; a run folder is never overwritten (choose another, or "
                     "--resume it)");
}

RunFolderLock::RunFolderLock(const fs::path& dir, const std::string& option) {
  const fs::path file = dir / "lock";
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw InputError(option + " " + dir.string() + ": cannot open " + file.string() + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    (void)!::pread(fd_, pid, sizeof pid - 1, 0);
    ::close(fd_);
    fd_ = -1;
    std::string holder(pid);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    throw InputError(option + " " + dir.string() + ": the run folder is in use by another quartet run (pid " +
                     (holder.empty() ? std::string("unknown") : holder) +
                     "); a run folder has one writer: wait for that run to end, or stop it");
  }
  // The file names the holder in the next one's message; a full disk loses only that.
  const std::string mine = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, mine.data(), mine.size(), 0);
}

RunFolderLock::~RunFolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

UnmadeRunFolder::~UnmadeRunFolder() {
  if (dir_.empty()) return;
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

}  // namespace quartet::runner
