// Shared helpers of every metp-sim CUDA kernel (compiled by NVRTC without any header: bf16
// values are handled as raw 16-bit words; tests/cuda-emu compiles the same text on the host).
//
// bf16 <-> f32: a bf16 is the upper half of an f32; f32 -> bf16 rounds to nearest even (NaN
// stays a quiet NaN).

typedef unsigned short bf16_t;
typedef unsigned int u32;
typedef unsigned long long u64;

#define METP_NEG_INF __int_as_float(0xff800000)
#define METP_LOG2E 1.4426950408889634f
#define METP_LN2 0.6931471805599453f

__device__ __forceinline__ float bf2f(bf16_t x) { return __uint_as_float(((u32)x) << 16); }

__device__ __forceinline__ bf16_t f2bf(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)0x7fc0u;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

// Two f32 as a pair of bf16 in one 32-bit word, `lo` in the low half (the order mma operands
// and little-endian memory use).
__device__ __forceinline__ u32 pack_bf2(float lo, float hi) {
    return (u32)f2bf(lo) | ((u32)f2bf(hi) << 16);
}

// D += A·B for one warp: A 16x16 (row-major fragment, 4 words), B 16x8 (column fragment, 2
// words), D 16x8 fp32 (4 floats), bf16 operands, fp32 accumulation (PTX ISA, mma.m16n8k16
// with .bf16: lane = 4·groupID + threadID_in_group; A word r holds rows groupID (+8 for words
// 1 and 3), columns 2·threadID_in_group (+8 for words 2 and 3) and the next one; B word r holds
// rows 2·threadID_in_group (+8 for word 1) and the next one of column groupID; D holds rows
// groupID (floats 0, 1) and groupID + 8 (floats 2, 3), columns 2·threadID_in_group and the
// next one).
#ifndef METP_EMU
// Dynamic shared memory of a kernel, 16-byte aligned.
#define METP_DYN_SMEM(name) extern __shared__ __align__(16) unsigned char name[]

__device__ __forceinline__ void mma_bf16_16816(float* d, const u32* a, const u32* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

// Element e (0..7) of eight bf16 values held in a uint4 (little-endian: x holds 0 and 1).
__device__ __forceinline__ bf16_t u4_half(const uint4& v, int e) {
    const u32 w = e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w;
    return (bf16_t)((e & 1) ? (w >> 16) : (w & 0xffffu));
}

// The 32-bit word at element `i` of a bf16 array (`i` even; 4-byte aligned).
__device__ __forceinline__ u32 ld_pair(const bf16_t* p, long long i) {
    return *(const u32*)(p + i);
}
