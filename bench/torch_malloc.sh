# Sourced by bench/run and bench/ddp_scaling. torch_malloc_env MODE prints the
# environment, one VAR=value a line, that runs PyTorch with that allocator mode, as
# PyTorch's CPU performance guides tell a careful user to:
#   default   glibc as Debian ships it (nothing)
#   cached    glibc told to keep freed memory, as Quartet's engine does: 32 MiB is glibc's
#             largest mmap threshold, and freed heap memory is then never trimmed
#   jemalloc  jemalloc preloaded (Debian's libjemalloc2)
# Returns 1 for any other mode, 2 when jemalloc is asked for and not installed.
torch_malloc_env() {
  case "$1" in
    default) ;;
    cached) echo "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296" ;;
    jemalloc)
      local lib=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
      [[ -e "$lib" ]] || return 2
      echo "LD_PRELOAD=$lib" ;;
    *) return 1 ;;
  esac
}
