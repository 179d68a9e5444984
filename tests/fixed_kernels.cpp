// Linked into every test binary: convolutions by the fixed rule (QUARTET_CONV_KERNEL=rule)
// unless the environment says otherwise, set before main, so that a test's outcome never
// depends on this machine's kernel table, however the binary is started (ctest or by
// hand), and the processes it starts inherit it. The table's own tests give their
// processes a file of their own.

#include <cstdlib>

namespace {

const bool fixed_kernels = [] {
  setenv("QUARTET_CONV_KERNEL", "rule", /*overwrite=*/0);
  return true;
}();

}  // namespace
