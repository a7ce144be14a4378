// keep_large_buffers_in_heap (memory.hpp).
#include "diloco/memory.hpp"

#include <cstdlib>  // defines __GLIBC__ on glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace diloco {

void keep_large_buffers_in_heap() {
#if defined(__GLIBC__)
  // Allocations below 32 MiB (glibc's largest mmap threshold) come from the heap, and up to
  // 512 MiB of freed heap stay with the process for reuse; heaps grow 64 MiB at a time.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
#endif
}

}  // namespace diloco
