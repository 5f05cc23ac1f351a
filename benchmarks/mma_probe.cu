// Tensor-core probe for benchmarks/gpu_mma_check.py: one fp8 instruction per tile on the
// GPU, its D tiles written to a file for comparison with fp8kit.mma's models.
//
//   nvcc -O2 -arch=sm_90a -o mma_probe mma_probe.cu     (sm_89 for mma alone)
//   mma_probe MODE IN OUT [VARIANT]
//
// MODE  mma:   mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 (sm_89+), M = 16
//       wgmma: wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 (sm_90a), M = 64
// IN    int32 T, then T tiles of A codes (M x 32 bytes, row-major), T tiles of B codes
//       (32 x 8 bytes, row-major K x N), T tiles of C (M x 8 float32, row-major)
// OUT   T tiles of D (M x 8 float32, row-major)
// VARIANT (wgmma) 0: the matrix descriptors' leading byte offset steps along K and the
//       stride byte offset along M/N, as the PTX ISA's "Matrix Descriptor Format" says for
//       K-major operands without swizzling; 1: the two swapped (a fallback the script tries
//       if its exact-integer calibration tiles fail with 0).
//
// Exit status: 0 done, 2 bad arguments or input, 3 CUDA error, 4 the instruction is not
// compiled for this GPU (the kernel reports it through a flag).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#define CHECK(call)                                                                        \
  do {                                                                                     \
    cudaError_t err_ = (call);                                                             \
    if (err_ != cudaSuccess) {                                                             \
      fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(err_), __FILE__,     \
              __LINE__, cudaGetErrorString(err_));                                         \
      return 3;                                                                            \
    }                                                                                      \
  } while (0)

// Four bytes, the lowest-indexed in the lowest bits (PTX: "elements low to high").
__device__ __forceinline__ uint32_t pack4(uint8_t b0, uint8_t b1, uint8_t b2, uint8_t b3) {
  return uint32_t(b0) | (uint32_t(b1) << 8) | (uint32_t(b2) << 16) | (uint32_t(b3) << 24);
}

// ---------------------------------------------------------------------------- mma.sync
// One warp per tile.  PTX ISA, "Matrix Fragments for mma.m16n8k32" (the 8-bit layouts,
// shared by .e4m3/.e5m2), with g = lane / 4 (groupID) and t = lane % 4:
//   A (16 x 32, row): a[r] holds row g + 8 * (r & 1), k = 16 * (r >> 1) + 4t .. + 3
//   B (32 x 8, col):  b[r] holds column g, k = 16 * r + 4t .. + 3
//   C/D (16 x 8):     c0, c1 row g, columns 2t, 2t + 1; c2, c3 row g + 8, the same columns
__global__ void mma_kernel(const uint8_t* A, const uint8_t* B, const float* C, float* D,
                           int* unsupported) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
  const int tile = blockIdx.x, lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  const uint8_t* a = A + size_t(tile) * 16 * 32;
  const uint8_t* b = B + size_t(tile) * 32 * 8;
  const float* c = C + size_t(tile) * 16 * 8;
  float* d = D + size_t(tile) * 16 * 8;
  uint32_t ra[4], rb[2];
  for (int r = 0; r < 4; ++r) {
    const uint8_t* p = a + (g + 8 * (r & 1)) * 32 + 16 * (r >> 1) + 4 * t;
    ra[r] = pack4(p[0], p[1], p[2], p[3]);
  }
  for (int r = 0; r < 2; ++r) {
    const int k = 16 * r + 4 * t;
    rb[r] = pack4(b[k * 8 + g], b[(k + 1) * 8 + g], b[(k + 2) * 8 + g], b[(k + 3) * 8 + g]);
  }
  float c0 = c[g * 8 + 2 * t], c1 = c[g * 8 + 2 * t + 1];
  float c2 = c[(g + 8) * 8 + 2 * t], c3 = c[(g + 8) * 8 + 2 * t + 1];
  float d0, d1, d2, d3;
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
      : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]), "f"(c0),
        "f"(c1), "f"(c2), "f"(c3));
  d[g * 8 + 2 * t] = d0;
  d[g * 8 + 2 * t + 1] = d1;
  d[(g + 8) * 8 + 2 * t] = d2;
  d[(g + 8) * 8 + 2 * t + 1] = d3;
#else
  if (threadIdx.x == 0 && blockIdx.x == 0) *unsupported = 1;
#endif
}

// ---------------------------------------------------------------------------- wgmma
// One warpgroup (128 threads) per tile; A and B from shared memory through matrix
// descriptors, no swizzling: both K-major (fp8 wgmma takes no transpose), stored as "core
// matrices" of 8 rows x 16 bytes, each 128 contiguous bytes (row r at byte 16 r).
//   A (64 x 32): core matrix (M block i, K block j) at byte 128 * (2 i + j)
//   B (8 x 32, B's columns as rows): core matrix (0, K block j) at byte 128 j
// so a step along K is 128 bytes and a step of 8 rows along M is 256 bytes.
//   D (64 x 8): warp w of the group holds rows 16 w .. 16 w + 15 as mma's C/D above.
__device__ __forceinline__ uint64_t descriptor(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  uint64_t desc = 0;
  desc |= uint64_t((addr & 0x3FFFF) >> 4);         // bits 0-13: start address / 16
  desc |= uint64_t((lbo & 0x3FFFF) >> 4) << 16;    // bits 16-29: leading byte offset / 16
  desc |= uint64_t((sbo & 0x3FFFF) >> 4) << 32;    // bits 32-45: stride byte offset / 16
  return desc;                                     // base offset 0, swizzle mode 0 (none)
}

__global__ void wgmma_kernel(const uint8_t* A, const uint8_t* B, const float* C, float* D,
                             int variant, int* unsupported) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(128) uint8_t sa[64 * 32];
  __shared__ __align__(128) uint8_t sb[8 * 32];
  const int tile = blockIdx.x, tid = threadIdx.x;
  const uint8_t* a = A + size_t(tile) * 64 * 32;
  const uint8_t* b = B + size_t(tile) * 32 * 8;
  const float* c = C + size_t(tile) * 64 * 8;
  float* d = D + size_t(tile) * 64 * 8;
  for (int i = tid; i < 64 * 32; i += 128) {
    const int m = i / 32, k = i % 32;
    sa[128 * (2 * (m / 8) + k / 16) + 16 * (m % 8) + k % 16] = a[i];
  }
  for (int i = tid; i < 8 * 32; i += 128) {
    const int n = i / 32, k = i % 32;
    sb[128 * (k / 16) + 16 * n + k % 16] = b[k * 8 + n];
  }
  __syncthreads();
  // make the generic-proxy stores visible to wgmma's reads (the async proxy)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const uint32_t along_k = 128, along_mn = 256;
  const uint32_t lbo = variant ? along_mn : along_k, sbo = variant ? along_k : along_mn;
  const uint64_t da = descriptor(sa, lbo, sbo), db = descriptor(sb, lbo, sbo);
  const int w = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int r0 = 16 * w + g, r1 = r0 + 8;
  float d0 = c[r0 * 8 + 2 * t], d1 = c[r0 * 8 + 2 * t + 1];
  float d2 = c[r1 * 8 + 2 * t], d3 = c[r1 * 8 + 2 * t + 1];
  asm volatile("" : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)::"memory");
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3}, %4, %5, p, 1, 1;\n"
      "}\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "l"(da), "l"(db), "r"(1));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  asm volatile("" : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)::"memory");
  d[r0 * 8 + 2 * t] = d0;
  d[r0 * 8 + 2 * t + 1] = d1;
  d[r1 * 8 + 2 * t] = d2;
  d[r1 * 8 + 2 * t + 1] = d3;
#else
  if (threadIdx.x == 0 && blockIdx.x == 0) *unsupported = 1;
#endif
}

// ---------------------------------------------------------------------------- host
static bool read_all(FILE* f, void* p, size_t n) { return fread(p, 1, n, f) == n; }

int main(int argc, char** argv) {
  if (argc < 4 || (strcmp(argv[1], "mma") && strcmp(argv[1], "wgmma"))) {
    fprintf(stderr, "usage: %s mma|wgmma IN OUT [VARIANT]\n", argv[0]);
    return 2;
  }
  const bool wg = !strcmp(argv[1], "wgmma");
  const int variant = argc > 4 ? atoi(argv[4]) : 0;
  const size_t rows = wg ? 64 : 16;
  FILE* in = fopen(argv[2], "rb");
  if (!in) {
    fprintf(stderr, "cannot open %s\n", argv[2]);
    return 2;
  }
  int32_t tiles = 0;
  if (!read_all(in, &tiles, 4) || tiles <= 0 || tiles > (1 << 20)) {
    fprintf(stderr, "bad tile count\n");
    return 2;
  }
  const size_t na = size_t(tiles) * rows * 32, nb = size_t(tiles) * 32 * 8;
  const size_t nc = size_t(tiles) * rows * 8;
  std::vector<uint8_t> ha(na), hb(nb);
  std::vector<float> hc(nc), hd(nc);
  if (!read_all(in, ha.data(), na) || !read_all(in, hb.data(), nb) ||
      !read_all(in, hc.data(), nc * 4)) {
    fprintf(stderr, "short input\n");
    return 2;
  }
  fclose(in);
  uint8_t *da, *db;
  float *dc, *dd;
  int* dflag;
  CHECK(cudaMalloc(&da, na));
  CHECK(cudaMalloc(&db, nb));
  CHECK(cudaMalloc(&dc, nc * 4));
  CHECK(cudaMalloc(&dd, nc * 4));
  CHECK(cudaMalloc(&dflag, sizeof(int)));
  CHECK(cudaMemcpy(da, ha.data(), na, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, hb.data(), nb, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dc, hc.data(), nc * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dd, 0xFF, nc * 4));  // NaN where nothing is written
  CHECK(cudaMemset(dflag, 0, sizeof(int)));
  if (wg)
    wgmma_kernel<<<tiles, 128>>>(da, db, dc, dd, variant, dflag);
  else
    mma_kernel<<<tiles, 32>>>(da, db, dc, dd, dflag);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  int flag = 0;
  CHECK(cudaMemcpy(&flag, dflag, sizeof(int), cudaMemcpyDeviceToHost));
  if (flag) {
    fprintf(stderr, "%s is not compiled for this GPU (build for sm_90a / sm_89+)\n", argv[1]);
    return 4;
  }
  CHECK(cudaMemcpy(hd.data(), dd, nc * 4, cudaMemcpyDeviceToHost));
  FILE* out = fopen(argv[3], "wb");
  if (!out || fwrite(hd.data(), 4, nc, out) != nc) {
    fprintf(stderr, "cannot write %s\n", argv[3]);
    return 2;
  }
  fclose(out);
  return 0;
}
