// A host emulator of just enough CUDA to run metp-sim's kernels on the CPU (tests/it/cuda_emu.rs
// compiles and runs tests/cuda-emu/emu_test.cpp with g++ when one is installed).
//
// Each CUDA thread of a block is an OS thread; blocks run one after the other. __syncthreads is
// a barrier over the block, warp shuffles and mma.sync a barrier over the warp with the lanes'
// values exchanged through memory. The bf16 MMA is computed from the fragment layout as the PTX
// ISA states it for mma.m16n8k16 with .bf16 (row/column formulas of "Matrix Fragments for
// mma.m16n8k16 with floating point type"), so a kernel that puts its operands in the wrong
// registers computes the wrong product here too. Products of bf16 values are exact in fp32;
// the summation order differs from the hardware's.
#pragma once

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define METP_EMU 1
#define __device__
#define __global__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(x)
#define __align__(x) alignas(x)

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct uint4 {
    unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }

namespace emu {
inline thread_local dim3 tid, bid;
inline dim3 bdim, gdim;
inline std::vector<unsigned char> smem;
inline std::unique_ptr<std::barrier<>> block_bar;
inline std::vector<std::unique_ptr<std::barrier<>>> warp_bar;
// Per warp: 32 lanes' shuffle values and MMA operands.
inline std::vector<float> shfl;
inline std::vector<uint32_t> mma_a, mma_b;
}  // namespace emu

#define threadIdx (emu::tid)
#define blockIdx (emu::bid)
#define blockDim (emu::bdim)
#define gridDim (emu::gdim)
#define METP_DYN_SMEM(name) unsigned char* name = emu::smem.data()

inline float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}
inline float __uint_as_float(unsigned u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline unsigned __float_as_uint(float f) {
    unsigned u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float __expf(float x) { return std::exp(x); }
using std::max;
using std::min;

inline void __syncthreads() { emu::block_bar->arrive_and_wait(); }

inline unsigned emu_warp() { return emu::tid.x / 32; }
inline unsigned emu_lane() { return emu::tid.x % 32; }

inline float __shfl_xor_sync(unsigned, float v, int o) {
    unsigned w = emu_warp(), l = emu_lane();
    emu::shfl[w * 32 + l] = v;
    emu::warp_bar[w]->arrive_and_wait();
    float r = emu::shfl[w * 32 + (l ^ o)];
    emu::warp_bar[w]->arrive_and_wait();
    return r;
}

inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }

inline float emu_bf(uint32_t word, int half) {
    uint32_t h = half ? (word >> 16) : (word & 0xffffu);
    return __uint_as_float(h << 16);
}

// D += A·B, m16n8k16, bf16 in, fp32 accumulate; fragments as the PTX ISA lays them out.
inline void mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b) {
    unsigned w = emu_warp(), l = emu_lane();
    for (int r = 0; r < 4; r++) emu::mma_a[(w * 32 + l) * 4 + r] = a[r];
    for (int r = 0; r < 2; r++) emu::mma_b[(w * 32 + l) * 2 + r] = b[r];
    emu::warp_bar[w]->arrive_and_wait();
    float A[16][16], B[16][8];
    for (int lane = 0; lane < 32; lane++) {
        int groupID = lane >> 2, tig = lane % 4;
        for (int i = 0; i < 8; i++) {
            int row = ((0 <= i && i < 2) || (4 <= i && i < 6)) ? groupID : groupID + 8;
            int col = i < 4 ? (tig * 2) + (i & 0x1) : (tig * 2) + (i & 0x1) + 8;
            A[row][col] = emu_bf(emu::mma_a[(w * 32 + lane) * 4 + i / 2], i % 2);
        }
        for (int i = 0; i < 4; i++) {
            int row = i < 2 ? (tig * 2) + (i & 0x1) : (tig * 2) + (i & 0x1) + 8;
            int col = groupID;
            B[row][col] = emu_bf(emu::mma_b[(w * 32 + lane) * 2 + i / 2], i % 2);
        }
    }
    emu::warp_bar[w]->arrive_and_wait();
    int groupID = l >> 2, tig = l % 4;
    for (int i = 0; i < 4; i++) {
        int row = i < 2 ? groupID : groupID + 8;
        int col = (tig * 2) + (i & 0x1);
        float s = 0.0f;
        for (int k = 0; k < 16; k++) s += A[row][k] * B[k][col];
        d[i] += s;
    }
}

namespace emu {
// Runs `kernel` over the grid, one block at a time, each thread of a block on its own OS thread.
inline void launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()>& kernel) {
    gdim = grid;
    bdim = block;
    unsigned n = block.x * block.y * block.z;
    unsigned warps = (n + 31) / 32;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                smem.assign(smem_bytes + 16, 0xA5);  // garbage, as on a GPU
                block_bar = std::make_unique<std::barrier<>>(n);
                warp_bar.clear();
                for (unsigned w = 0; w < warps; w++)
                    warp_bar.push_back(std::make_unique<std::barrier<>>(std::min(32u, n - 32 * w)));
                shfl.assign(warps * 32, 0.0f);
                mma_a.assign(warps * 32 * 4, 0u);
                mma_b.assign(warps * 32 * 2, 0u);
                std::vector<std::thread> threads;
                for (unsigned t = 0; t < n; t++)
                    threads.emplace_back([&, t, bx, by, bz] {
                        tid = dim3{t, 0, 0};
                        bid = dim3{bx, by, bz};
                        kernel();
                    });
                for (auto& th : threads) th.join();
            }
}
}  // namespace emu
