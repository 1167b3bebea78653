// Micro-experiment: which clock do CUPTI's kernel activity timestamps use, and where is
// it against the host's clocks? (issue 11: anchoring device time within 2 µs).
//  1. Kernels of one block stamp %globaltimer at entry and exit; CUPTI records the same
//     kernels. Prints CUPTI start - entry stamp and CUPTI end - exit stamp over N kernels:
//     a constant near 0 with sub-µs spread means CUPTI reports %globaltimer itself.
//  2. cuptiGetTimestamp between two host reads of CLOCK_REALTIME and CLOCK_MONOTONIC.
//  3. %globaltimer against CLOCK_REALTIME and CLOCK_MONOTONIC: a kernel spinning on a
//     mapped host word stamps the timer when the host releases it and acknowledges; the
//     narrowest round trip brackets the offset.
// Build (results/2026-12-01-h200-one-gpu-kernel-anchor/cupti-clock.sh): nvcc -O2 -arch=sm_90 -DKREC=CUpti_ActivityKernelN
//   -I<cupti include> cupti_clock.cu -lcuda -L<cupti lib> -lcupti
// Exit: 0 ok, 2 CUDA or CUPTI error, 3 a kernel did not acknowledge in time.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <time.h>
#include <unistd.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  printf("FATAL %s:%d: %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_)); fflush(stdout); _exit(2); } } while (0)
#define CP(x) do { CUptiResult r_ = (x); if (r_ != CUPTI_SUCCESS) { const char* s_ = "?"; cuptiGetResultString(r_, &s_); \
  printf("FATAL %s:%d: %s -> %s\n", __FILE__, __LINE__, #x, s_); fflush(stdout); _exit(2); } } while (0)

constexpr int N = 400;  // stamped kernels
constexpr int T = 400;  // host-clock trips

__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }

__global__ void k_stamp(unsigned long long* out, int i, unsigned long long spin_ns) {
  unsigned long long t0 = gtime();
  if (threadIdx.x == 0) out[2 * i] = t0;
  while (gtime() - t0 < spin_ns) {}
  __syncthreads();
  if (threadIdx.x == 0) out[2 * i + 1] = gtime();
}

// spin until *rel == v, stamp, acknowledge (2 s device timeout)
__global__ void k_release(volatile uint32_t* rel, volatile uint32_t* ack, volatile unsigned long long* ts, uint32_t v) {
  unsigned long long s = gtime();
  while (*rel != v) { if (gtime() - s > 2000000000ULL) return; }
  *ts = gtime();
  __threadfence_system();
  *ack = v;
}

static int64_t now(clockid_t c) { timespec t; clock_gettime(c, &t); return int64_t(t.tv_sec) * 1000000000LL + t.tv_nsec; }

struct Rec { uint64_t start, end; uint32_t corr; };
static std::vector<Rec> g_recs;
static void CUPTIAPI requested(uint8_t** b, size_t* size, size_t* maxr) {
  *size = 8 << 20; *b = (uint8_t*)aligned_alloc(8, *size); *maxr = 0; }
static void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* b, size_t, size_t valid) {
  CUpti_Activity* r = nullptr;
  while (cuptiActivityGetNextRecord(b, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const KREC* k = (const KREC*)r;
      g_recs.push_back({k->start, k->end, k->correlationId});
    }
  }
  free(b);
}

static void stats(const char* what, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto q = [&](double p) { return v[std::min(v.size() - 1, size_t(p * (v.size() - 1) + 0.5))]; };
  printf("%-58s n=%zu min %.0f p1 %.0f p50 %.0f p99 %.0f max %.0f ns\n", what, v.size(), v.front(), q(0.01), q(0.5), q(0.99), v.back());
}

int main() {
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  CP(cuptiActivityRegisterCallbacks(requested, completed));
  CP(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  unsigned long long* stamps;
  CK(cudaMalloc(&stamps, sizeof(unsigned long long) * 2 * N));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // warm-up (module load, CUPTI set-up), not stamped into the table
  k_stamp<<<1, 32, 0, s>>>(stamps, 0, 1000);
  CK(cudaStreamSynchronize(s));
  CP(cuptiActivityFlushAll(0));
  g_recs.clear();
  // 1. stamped kernels: lengths 0-20 µs, some back to back, some after a host pause
  for (int i = 0; i < N; i++) {
    k_stamp<<<1, 32, 0, s>>>(stamps, i, (unsigned long long)(i % 5) * 5000ULL);
    if (i % 4 == 0) { CK(cudaStreamSynchronize(s)); usleep(50); }
  }
  CK(cudaStreamSynchronize(s));
  CP(cuptiActivityFlushAll(0));
  std::vector<unsigned long long> h(2 * N);
  CK(cudaMemcpy(h.data(), stamps, sizeof(unsigned long long) * 2 * N, cudaMemcpyDeviceToHost));
  std::sort(g_recs.begin(), g_recs.end(), [](const Rec& a, const Rec& b) { return a.corr < b.corr; });
  printf("CUPTI kernel records: %zu of %d kernels\n", g_recs.size(), N);
  if (g_recs.size() == size_t(N)) {
    std::vector<double> ds, de, dur_c, dur_s;
    for (int i = 0; i < N; i++) {
      ds.push_back(double(int64_t(g_recs[i].start - h[2 * i])));
      de.push_back(double(int64_t(g_recs[i].end - h[2 * i + 1])));
      dur_c.push_back(double(g_recs[i].end - g_recs[i].start));
      dur_s.push_back(double(h[2 * i + 1] - h[2 * i]));
    }
    stats("1. CUPTI start - %globaltimer at entry", ds);
    stats("1. CUPTI end - %globaltimer at exit", de);
    std::vector<double> dd;
    for (int i = 0; i < N; i++) dd.push_back(dur_c[i] - dur_s[i]);
    stats("1. CUPTI duration - stamped duration", dd);
  }
  // 2. cuptiGetTimestamp between host reads
  for (clockid_t c : {CLOCK_REALTIME, CLOCK_MONOTONIC}) {
    std::vector<double> off, width;
    for (int i = 0; i < T; i++) {
      int64_t a = now(c); uint64_t ts; CP(cuptiGetTimestamp(&ts)); int64_t b = now(c);
      off.push_back(double(int64_t(ts) - (a + b) / 2)); width.push_back(double(b - a));
    }
    const char* n = c == CLOCK_REALTIME ? "REALTIME" : "MONOTONIC";
    char w[96];
    snprintf(w, sizeof w, "2. cuptiGetTimestamp - CLOCK_%s (midpoint)", n); stats(w, off);
    snprintf(w, sizeof w, "2. its bracket width (CLOCK_%s)", n); stats(w, width);
  }
  // 3. %globaltimer against the host clocks, and against cuptiGetTimestamp
  uint32_t* hw;
  CK(cudaHostAlloc(&hw, 4096, cudaHostAllocMapped));
  volatile uint32_t* rel = hw; volatile uint32_t* ack = hw + 32; volatile unsigned long long* ts = (unsigned long long*)(hw + 64);
  uint32_t* dw; CK(cudaHostGetDevicePointer((void**)&dw, hw, 0));
  for (clockid_t c : {CLOCK_REALTIME, CLOCK_MONOTONIC, (clockid_t)-1}) {
    std::vector<double> lo, hi, width;
    for (uint32_t v = 1; v <= T; v++) {
      k_release<<<1, 1, 0, s>>>((uint32_t*)dw, (uint32_t*)(dw + 32), (unsigned long long*)(dw + 64), v);
      usleep(20);  // let the kernel start spinning
      uint64_t c0 = 0, c1 = 0;
      int64_t a = c == (clockid_t)-1 ? (cuptiGetTimestamp(&c0), int64_t(c0)) : now(c);
      *rel = v;
      int64_t t0 = now(CLOCK_MONOTONIC), b = 0;
      while (*ack != v) { if (now(CLOCK_MONOTONIC) - t0 > 2000000000LL) { printf("FATAL no acknowledgement\n"); fflush(stdout); _exit(3); } }
      b = c == (clockid_t)-1 ? (cuptiGetTimestamp(&c1), int64_t(c1)) : now(c);
      int64_t g = int64_t(*ts);
      lo.push_back(double(g - b)); hi.push_back(double(g - a)); width.push_back(double(b - a));
    }
    CK(cudaStreamSynchronize(s));
    const char* n = c == CLOCK_REALTIME ? "CLOCK_REALTIME" : c == CLOCK_MONOTONIC ? "CLOCK_MONOTONIC" : "cuptiGetTimestamp";
    // offset = globaltimer - host lies in [g - b, g - a] per trip; intersect over trips
    double L = *std::max_element(lo.begin(), lo.end()), H = *std::min_element(hi.begin(), hi.end());
    char w[128];
    snprintf(w, sizeof w, "3. round trip (release -> acknowledgement) on %s", n); stats(w, width);
    printf("3. %%globaltimer - %s: intersection [%.0f, %.0f] ns, half-width %.0f ns%s\n", n, L, H, (H - L) / 2, H < L ? " (EMPTY: the clocks drift or the offset moved)" : "");
  }
  fflush(stdout);
  _exit(0);  // skip CUPTI teardown
}
