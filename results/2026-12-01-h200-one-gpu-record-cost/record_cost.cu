// Host cost of the per-collective stream operations a timing instrument can
// use, per call, on this machine: cuEventRecord (timing and non-timing
// events), cuStreamWriteValue32 to host-mapped memory, and cuLaunchKernel of
// an empty kernel, against a loop that only reads the host clock. Each is
// measured in batches of 256 calls, twice: with the stream held behind a
// spinning kernel (pure enqueue cost) and on an idle stream (the device
// consumes while the host enqueues). Prints, per operation and condition, the
// median and p90 over batches of the mean ns per call, and the p50/p99 of
// single calls. Build and run: results/2026-12-01-h200-one-gpu-record-cost/record-cost.sh OUT_DIR.
#include <cuda.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                             \
  do {                                                                    \
    CUresult r_ = (x);                                                    \
    if (r_ != CUDA_SUCCESS) {                                             \
      const char* s_ = nullptr;                                           \
      cuGetErrorString(r_, &s_);                                          \
      std::fprintf(stderr, "%s failed: %s\n", #x, s_ ? s_ : "?");         \
      std::exit(2);                                                       \
    }                                                                     \
  } while (0)

static const char* kPtx = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry empty() { ret; }
.visible .entry spin_ns(.param .u64 p) {
  .reg .pred %p<2>; .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [p];
  mov.u64 %rd2, %globaltimer;
  add.u64 %rd3, %rd2, %rd1;
L: mov.u64 %rd4, %globaltimer;
  setp.lt.u64 %p1, %rd4, %rd3;
  @%p1 bra L;
  ret;
}
)";

static double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, (size_t)(p * (v.size() - 1) + 0.5));
  return v[i];
}

int main() {
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CK(cuModuleLoadData(&mod, kPtx));
  CUfunction empty, spin;
  CK(cuModuleGetFunction(&empty, mod, "empty"));
  CK(cuModuleGetFunction(&spin, mod, "spin_ns"));
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  const int kBatch = 256, kBatches = 40;
  std::vector<CUevent> timing(kBatch), plain(kBatch);
  for (int i = 0; i < kBatch; i++) {
    CK(cuEventCreate(&timing[i], CU_EVENT_DEFAULT));
    CK(cuEventCreate(&plain[i], CU_EVENT_DISABLE_TIMING));
  }
  unsigned* host_word = nullptr;
  CK(cuMemHostAlloc((void**)&host_word, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CUdeviceptr dev_word;
  CK(cuMemHostGetDevicePointer(&dev_word, host_word, 0));
  const char* names[] = {"clock read only", "cuEventRecord (timing event)", "cuEventRecord (DISABLE_TIMING)",
                         "cuStreamWriteValue32 (mapped host word)", "cuLaunchKernel (empty kernel, 1 block)"};
  std::printf("per-call host cost, ns: %d batches of %d calls per row\n", kBatches, kBatch);
  std::printf("%-42s %-8s %10s %10s %10s %10s\n", "operation", "stream", "batch p50", "batch p90", "call p50", "call p99");
  for (int held = 1; held >= 0; held--) {
    for (int op = 0; op < 5; op++) {
      std::vector<double> batch_mean, calls;
      for (int b = 0; b < kBatches + 2; b++) {
        if (held) {
          unsigned long long ns = 3000000ull;  // 3 ms: longer than any batch
          void* args[] = {&ns};
          CK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, s, args, nullptr));
        }
        double t0 = now_ns(), prev = t0;
        for (int i = 0; i < kBatch; i++) {
          switch (op) {
            case 0: break;
            case 1: CK(cuEventRecord(timing[i], s)); break;
            case 2: CK(cuEventRecord(plain[i], s)); break;
            case 3: CK(cuStreamWriteValue32(s, dev_word, (unsigned)i, CU_STREAM_WRITE_VALUE_DEFAULT)); break;
            case 4: CK(cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr)); break;
          }
          double t = now_ns();
          if (b >= 2) calls.push_back(t - prev);
          prev = t;
        }
        if (b >= 2) batch_mean.push_back((prev - t0) / kBatch);
        CK(cuStreamSynchronize(s));
      }
      std::printf("%-42s %-8s %10.0f %10.0f %10.0f %10.0f\n", names[op], held ? "held" : "idle", pct(batch_mean, 0.5), pct(batch_mean, 0.9),
                  pct(calls, 0.5), pct(calls, 0.99));
    }
  }
  return 0;
}
