// Process-wide allocator policy for training processes.
#pragma once

namespace diloco {

/// Keeps model-sized buffers (frames, gradients, parameter copies: hundreds of kB to MBs, made
/// and freed every step) in the heap instead of letting glibc map and unmap each one: a fresh
/// mapping faults its pages in on first touch, which doubled the CPU time of a ddp step on the
/// actor runtime. Call once at the start of main(); a no-op where the C library is not glibc.
void keep_large_buffers_in_heap();

}  // namespace diloco
