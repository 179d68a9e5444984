# Sourced by bench/run and bench/ddp_scaling. torch_malloc_env MODE prints the
# environment, one VAR=value a line, that runs PyTorch with that allocator mode:
#   default  glibc as Debian ships it (nothing)
#   cached   glibc told to keep freed memory, as Quartet's engine does: 32 MiB is glibc's
#            largest mmap threshold, and freed heap memory is then never trimmed
# Returns 1 for any other mode.
torch_malloc_env() {
  case "$1" in
    default) ;;
    cached) echo "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296" ;;
    *) return 1 ;;
  esac
}
