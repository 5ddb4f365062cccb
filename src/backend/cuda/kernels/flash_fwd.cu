// Fused attention forward, FlashAttention-2 style, merging into a running output (after
// common.cuh).
//
// One CTA = 4 warps = 64 query rows of one (sample, head); each warp owns 16 rows. The keys are
// visited in tiles of 64: K (row-major) and V (transposed) in shared memory; S = Q·Kᵀ and
// O += P·V on bf16 tensor cores (mma.m16n8k16, fp32 accumulation), the softmax online in
// registers (base-2 exponentials of log2(e)-scaled scores). P is reused from the S accumulator
// registers as the A operand of P·V (the accumulator layout of two adjacent 16×8 tiles is the
// A layout of one 16×16 tile).
//
// The running state is read from and written back to (acc, lse): acc is the normalised fp32
// output of the blocks merged so far and lse their log-sum-exp (−inf: nothing merged yet). A
// block merges by starting the online softmax from m = lse, l = 1, o = acc — the log-sum-exp
// merge METP does between ring steps, fused into the kernel. A row that sees no key of this
// block is left as it was.
//
// Layouts: q/k/v rows of sample b start at b·tokens (row strides ldq/ldk/ldv, elements);
// query head h at column h·D of q, its K/V head h/rep at column (h/rep)·D of k and v (rep
// query heads share a K/V head: grouped-query attention; rep = 1 without). acc: row stride
// lda, head h at column h·D; lse: [b·nq + i][heads].
// Causal: key j is visible to query i iff j ≤ i + nkv − nq (bottom-right aligned).
// Requirements (checked by the host): row strides multiples of 8 elements, base pointers 16-byte
// aligned.

#define FA_BR 64
#define FA_BC 64
#define FA_PAD 8
#define FA_THREADS 128

template <int D>
__device__ __forceinline__ void flash_fwd_body(const bf16_t* __restrict__ q,
                                               const bf16_t* __restrict__ k,
                                               const bf16_t* __restrict__ v, long long ldq,
                                               long long ldk, long long ldv, float* acc,
                                               long long lda, float* lse, int heads, int nq,
                                               int nkv, float scale, int causal, int rep) {
    METP_DYN_SMEM(smem);
    const int KS = D + FA_PAD;      // Ks row stride
    const int VS = FA_BC + FA_PAD;  // Vt row stride
    bf16_t* Ks = (bf16_t*)smem;     // [FA_BC][KS]
    bf16_t* Vt = Ks + FA_BC * KS;   // [D][VS]

    const int tile = blockIdx.x;
    const int bh = blockIdx.y;
    const int beta = bh / heads, hd = bh % heads;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, t = lane & 3;
    const int off = nkv - nq;
    const int r0 = tile * FA_BR + warp * 16 + g, r1 = r0 + 8;

    const bf16_t* qb = q + (long long)beta * nq * ldq + hd * D;
    const bf16_t* kb = k + (long long)beta * nkv * ldk + (hd / rep) * D;
    const bf16_t* vb = v + (long long)beta * nkv * ldv + (hd / rep) * D;
    float* ab = acc + (long long)beta * nq * lda + hd * D;
    float* lb = lse + (long long)beta * nq * heads + hd;

    // This warp's Q rows as A fragments, one per 16 columns.
    u32 qa[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const int c = kk * 16 + 2 * t;
        qa[kk][0] = r0 < nq ? ld_pair(qb, (long long)r0 * ldq + c) : 0u;
        qa[kk][1] = r1 < nq ? ld_pair(qb, (long long)r1 * ldq + c) : 0u;
        qa[kk][2] = r0 < nq ? ld_pair(qb, (long long)r0 * ldq + c + 8) : 0u;
        qa[kk][3] = r1 < nq ? ld_pair(qb, (long long)r1 * ldq + c + 8) : 0u;
    }

    // Running state of rows r0 (index 0) and r1 (index 1): max m (log2 domain), this lane's
    // part of the sum l, this lane's output columns o.
    float m[2], l[2];
    float o[D / 8][4];
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const int row = rr ? r1 : r0;
        const float old = row < nq ? lb[(long long)row * heads] : METP_NEG_INF;
        const bool have = old != METP_NEG_INF;
        m[rr] = have ? old * METP_LOG2E : METP_NEG_INF;
        l[rr] = (have && t == 0) ? 1.0f : 0.0f;
#pragma unroll
        for (int nd = 0; nd < D / 8; nd++) {
            const int col = nd * 8 + 2 * t;
            o[nd][2 * rr] = have ? ab[(long long)row * lda + col] : 0.0f;
            o[nd][2 * rr + 1] = have ? ab[(long long)row * lda + col + 1] : 0.0f;
        }
    }

    const int cta_last = min(tile * FA_BR + FA_BR - 1, nq - 1);
    const int kv_end = causal ? min(nkv, cta_last + off + 1) : nkv;
    const float sl2 = scale * METP_LOG2E;

    for (int j0 = 0; j0 < kv_end; j0 += FA_BC) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < FA_BC * D / 8; idx += FA_THREADS) {
            const int rr = idx / (D / 8), cc = (idx % (D / 8)) * 8;
            const int j = j0 + rr;
            uint4 kx = make_uint4(0u, 0u, 0u, 0u), vx = make_uint4(0u, 0u, 0u, 0u);
            if (j < nkv) {
                kx = *(const uint4*)(kb + (long long)j * ldk + cc);
                vx = *(const uint4*)(vb + (long long)j * ldv + cc);
            }
            *(uint4*)(Ks + rr * KS + cc) = kx;
#pragma unroll
            for (int e = 0; e < 8; e++) Vt[(cc + e) * VS + rr] = u4_half(vx, e);
        }
        __syncthreads();

        // S = Q·Kᵀ for this warp's 16 rows × 64 keys.
        float s[FA_BC / 8][4];
#pragma unroll
        for (int nt = 0; nt < FA_BC / 8; nt++)
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
            for (int nt = 0; nt < FA_BC / 8; nt++) {
                const int kr = (nt * 8 + g) * KS + kk * 16 + 2 * t;
                u32 b[2];
                b[0] = ld_pair(Ks, kr);
                b[1] = ld_pair(Ks, kr + 8);
                mma_bf16_16816(s[nt], qa[kk], b);
            }
        }

        // Mask and scale; new row maxima (over the 4 lanes holding a row).
        float mt[2] = {m[0], m[1]};
#pragma unroll
        for (int nt = 0; nt < FA_BC / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = (e >> 1) ? r1 : r0;
                const int j = j0 + nt * 8 + 2 * t + (e & 1);
                const bool ok = j < nkv && (!causal || j <= row + off);
                const float x = ok ? s[nt][e] * sl2 : METP_NEG_INF;
                s[nt][e] = x;
                mt[e >> 1] = fmaxf(mt[e >> 1], x);
            }
        }
        float mu[2], alpha[2], ls[2] = {0.0f, 0.0f};
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            mt[rr] = fmaxf(mt[rr], __shfl_xor_sync(0xffffffffu, mt[rr], 1));
            mt[rr] = fmaxf(mt[rr], __shfl_xor_sync(0xffffffffu, mt[rr], 2));
            mu[rr] = mt[rr] == METP_NEG_INF ? 0.0f : mt[rr];
            alpha[rr] = exp2f(m[rr] - mu[rr]);
            m[rr] = mt[rr];
        }
#pragma unroll
        for (int nt = 0; nt < FA_BC / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = exp2f(s[nt][e] - mu[e >> 1]);
                s[nt][e] = p;
                ls[e >> 1] += p;
            }
        }
#pragma unroll
        for (int rr = 0; rr < 2; rr++) l[rr] = l[rr] * alpha[rr] + ls[rr];
#pragma unroll
        for (int nd = 0; nd < D / 8; nd++) {
            o[nd][0] *= alpha[0];
            o[nd][1] *= alpha[0];
            o[nd][2] *= alpha[1];
            o[nd][3] *= alpha[1];
        }

        // O += P·V, P from the S registers (two 16×8 accumulator tiles = one 16×16 A tile).
#pragma unroll
        for (int kk = 0; kk < FA_BC / 16; kk++) {
            u32 pa[4];
            pa[0] = pack_bf2(s[2 * kk][0], s[2 * kk][1]);
            pa[1] = pack_bf2(s[2 * kk][2], s[2 * kk][3]);
            pa[2] = pack_bf2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[3] = pack_bf2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int nd = 0; nd < D / 8; nd++) {
                const int vr = (nd * 8 + g) * VS + kk * 16 + 2 * t;
                u32 b[2];
                b[0] = ld_pair(Vt, vr);
                b[1] = ld_pair(Vt, vr + 8);
                mma_bf16_16816(o[nd], pa, b);
            }
        }
    }

    // Normalise and write back the rows that saw at least one key (now or before).
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
        l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
        const int row = rr ? r1 : r0;
        if (row < nq && l[rr] > 0.0f) {
            const float inv = 1.0f / l[rr];
#pragma unroll
            for (int nd = 0; nd < D / 8; nd++) {
                const int col = nd * 8 + 2 * t;
                ab[(long long)row * lda + col] = o[nd][2 * rr] * inv;
                ab[(long long)row * lda + col + 1] = o[nd][2 * rr + 1] * inv;
            }
            if (t == 0) lb[(long long)row * heads] = (m[rr] + log2f(l[rr])) * METP_LN2;
        }
    }
}

extern "C" __global__ void __launch_bounds__(FA_THREADS)
    flash_fwd_d64(const bf16_t* q, const bf16_t* k, const bf16_t* v, long long ldq, long long ldk,
                  long long ldv, float* acc, long long lda, float* lse, int heads, int nq, int nkv,
                  float scale, int causal, int rep) {
    flash_fwd_body<64>(q, k, v, ldq, ldk, ldv, acc, lda, lse, heads, nq, nkv, scale, causal, rep);
}

extern "C" __global__ void __launch_bounds__(FA_THREADS)
    flash_fwd_d128(const bf16_t* q, const bf16_t* k, const bf16_t* v, long long ldq, long long ldk,
                   long long ldv, float* acc, long long lda, float* lse, int heads, int nq, int nkv,
                   float scale, int causal, int rep) {
    flash_fwd_body<128>(q, k, v, ldq, ldk, ldv, acc, lda, lse, heads, nq, nkv, scale, causal, rep);
}
