// What a simulated run pins so that one binary replays a seed bit for bit on every machine it
// runs on. Three libraries choose code by the CPU at run time, and their choices round
// differently: glibc's libm (exp, log, pow, cos: FMA variants on CPUs with FMA and AVX2),
// OpenBLAS (a kernel and a blocking per CPU), and Eigen's products (blocking from the cache sizes
// it reads off the CPU). What the compiler chose (-march=native) is fixed in the binary.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace diloco {

/// The environment a replayable process starts with: glibc's libm without its FMA, FMA4 and AVX2
/// variants (GLIBC_TUNABLES glibc.cpu.hwcaps; the process's other tunables are kept),
/// OpenBLAS's baseline kernels (OPENBLAS_CORETYPE=Prescott) and libtorch's default kernels
/// (ATEN_CPU_CAPABILITY=default) for TorchScript chips, and DILOCO_REPLAY_PINNED=1, the mark that
/// they were set before the process started. `tunables` is the current GLIBC_TUNABLES, or null.
/// These take effect only when a process starts: glibc and OpenBLAS choose while loading.
std::vector<std::pair<std::string, std::string>> replay_environment(const char* tunables);

/// True when this process started with replay_environment() set (DILOCO_REPLAY_PINNED=1).
bool replay_environment_pinned();

/// In this process, from now on: the built-in models' products on Eigen's GEMM (compiled into
/// the binary) instead of OpenBLAS, and Eigen's blocking computed from fixed cache sizes instead
/// of the CPU's. Call before the first product of a run.
void pin_products_for_replay();

}  // namespace diloco
