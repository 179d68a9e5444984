#pragma once

// A run folder has one writer: `quartet run` makes it whole or not at all, and holds a
// lock on it while it runs, so a second `quartet run --resume` of the same folder is
// refused instead of writing beside the first.

#include <filesystem>
#include <string>

namespace quartet::runner {

// Makes `dir` (and its parents), refusing with InputError when it exists already (a run
// folder is never overwritten) or cannot be made (a read-only file system, say).
void make_run_folder(const std::filesystem::path& dir, const std::string& option);

// An exclusive lock on a run folder (flock on DIR/lock, which says the holder's pid),
// held while this lives. Throws InputError naming the holder's pid when another process
// holds it.
class RunFolderLock {
 public:
  RunFolderLock(const std::filesystem::path& dir, const std::string& option);
  ~RunFolderLock();
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

 private:
  int fd_ = -1;
};

// Removes a run folder made by this run unless dismiss() is called: a run whose set-up
// fails (a bad --init, a full disk) leaves no half-made folder behind.
class UnmadeRunFolder {
 public:
  explicit UnmadeRunFolder(std::filesystem::path dir) : dir_(std::move(dir)) {}
  ~UnmadeRunFolder();
  void dismiss() { dir_.clear(); }

 private:
  std::filesystem::path dir_;
};

}  // namespace quartet::runner
