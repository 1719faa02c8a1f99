// Enough of CUDA for g++ to run a kernel file on the CPU, for tests on
// machines without a GPU (src/solver/projection/cuda/emulated.rs): a launch
// runs each block's threads as std::threads, `__syncthreads` a barrier
// among them, `__shared__` variables static (the blocks run one at a time).
// Atomics and warp shuffles are not emulated.
#include <algorithm>
#include <barrier>
#include <cstddef>
#include <cmath>
#include <math.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
std::barrier<>* block_barrier = nullptr;

#define __syncthreads() block_barrier->arrive_and_wait()
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __launch_bounds__(...)
inline int __popc(unsigned v) { return __builtin_popcount(v); }
template <class T> T __shfl_down_sync(unsigned, T, int) { std::abort(); }
inline unsigned atomicAdd(unsigned*, unsigned) { std::abort(); }
inline void __threadfence() {}
template <class T> T __ldcg(const T* p) { return *p; }
inline float __int_as_float(int v) { float f; std::memcpy(&f, &v, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned v; std::memcpy(&v, &f, 4); return v; }
inline float __uint_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
inline unsigned atomicMax(unsigned*, unsigned) { std::abort(); }
struct alignas(16) float4 {
    float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct alignas(8) uint2 {
    unsigned x, y;
};
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
struct alignas(4) uchar4 {
    unsigned char x, y, z, w;
};
using std::isnan;
using std::max;
using std::min;

template <class F> void launch(dim3 grid, dim3 block, F kernel) {
    gridDim = grid;
    blockDim = block;
    unsigned threads = block.x * block.y * block.z;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                std::barrier<> barrier(threads);
                block_barrier = &barrier;
                std::vector<std::thread> team;
                for (unsigned t = 0; t < threads; t++)
                    team.emplace_back([=] {
                        blockIdx = {bx, by, bz};
                        threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
                        kernel();
                    });
                for (auto& t : team) t.join();
            }
}

// The harnesses' input (read whole from a file) and output: arrays one
// after another, each padded to whole 4-byte words (emulated.rs's `put`).
static std::vector<char> input;
static size_t input_at = 0;

inline bool read_input(const char* path) {
    FILE* f = std::fopen(path, "rb");
    if (!f) return false;
    char buf[1 << 16];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) input.insert(input.end(), buf, buf + got);
    std::fclose(f);
    return true;
}

template <class T> std::vector<T> take(size_t n) {
    std::vector<T> v(n);
    std::memcpy(v.data(), input.data() + input_at, n * sizeof(T));
    input_at += (n * sizeof(T) + 3) / 4 * 4;
    return v;
}

inline bool write_output(const char* path, const std::vector<float>& out) {
    FILE* o = std::fopen(path, "wb");
    if (!o) return false;
    bool whole = std::fwrite(out.data(), 4, out.size(), o) == out.size();
    return std::fclose(o) == 0 && whole;
}

inline unsigned up(unsigned n, unsigned d) { return (n + d - 1) / d; }
