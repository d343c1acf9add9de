// libnccl.so.2 opened at run time: MEMPLAN_NCCL_LIBRARY (a path) if set, else the soname through the loader's
// search path (LD_LIBRARY_PATH: e.g. PyTorch's wheel, site-packages/nvidia/nccl/lib).
#include "runtime_allocator/collectives/nccl_library.hpp"

#include <dlfcn.h>

#include <cstdlib>

#include "analysis/error.hpp"

namespace memplan::runtime::cuda {

namespace {

template <class F>
bool bind(void* lib, F& f, const char* name, std::string& error) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f && error.empty()) error = std::string("no symbol ") + name;
  return f != nullptr;
}

NcclLibrary load() {
  NcclLibrary l;
  const char* env = std::getenv("MEMPLAN_NCCL_LIBRARY");
  l.loaded_from = env && *env ? env : "libnccl.so.2";
  // Kept open for the process's life: communicators may be destroyed during static destruction.
  void* lib = dlopen(l.loaded_from.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    l.error = why ? why : "dlopen failed";
    return l;
  }
  std::string missing;
  bind(lib, l.get_version, "ncclGetVersion", missing);
  bind(lib, l.get_unique_id, "ncclGetUniqueId", missing);
  bind(lib, l.comm_init_rank, "ncclCommInitRank", missing);
  bind(lib, l.comm_destroy, "ncclCommDestroy", missing);
  bind(lib, l.comm_abort, "ncclCommAbort", missing);
  bind(lib, l.comm_get_async_error, "ncclCommGetAsyncError", missing);
  bind(lib, l.all_reduce, "ncclAllReduce", missing);
  bind(lib, l.reduce_scatter, "ncclReduceScatter", missing);
  bind(lib, l.all_gather, "ncclAllGather", missing);
  bind(lib, l.get_error_string, "ncclGetErrorString", missing);
  int version = 0;
  if (missing.empty() && l.get_version(&version) == ncclSuccess && version < 21000)
    missing = "version " + std::to_string(version) + " is older than 2.10 (ncclAvg)";
  if (!missing.empty()) l.error = l.loaded_from + ": " + missing;
  return l;
}

}  // namespace

const NcclLibrary& nccl_library() noexcept {
  static const NcclLibrary lib = load();  // dlopen and dlsym do not throw
  return lib;
}

const NcclLibrary& require_nccl() {
  const NcclLibrary& l = nccl_library();
  if (!l.error.empty())
    fail(ErrorKind::unsupported, "NCCL is not loadable (" + l.error +
                                     "): put the directory of libnccl.so.2 on LD_LIBRARY_PATH (PyTorch's wheel has it in "
                                     "site-packages/nvidia/nccl/lib) or set MEMPLAN_NCCL_LIBRARY to its path");
  return l;
}

void check(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess) return;
  const NcclLibrary& l = nccl_library();
  fail(ErrorKind::runtime, "NCCL error in " + what + ": " + (l.get_error_string ? l.get_error_string(r) : std::to_string(r)));
}

}  // namespace memplan::runtime::cuda
