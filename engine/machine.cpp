#include "engine/machine.h"

#include <unistd.h>

namespace quartet::engine {

int64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{1} << 62;
}

}  // namespace quartet::engine
