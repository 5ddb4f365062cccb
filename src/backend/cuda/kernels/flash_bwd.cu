// Fused attention backward, FlashAttention-2 style (after common.cuh).
//
// One CTA = 4 warps = 64 keys of one (sample, head); each warp owns 16 keys and keeps their
// dK and dV accumulators in registers. K (row-major and transposed) and V stay in shared
// memory; the CTA walks the query tiles of BQ rows (only those that see a key of the tile when
// causal). Per query tile, with Q and dO in shared memory (row-major and transposed):
//   Sᵀ = K·Qᵀ, Pᵀ = exp(scale·Sᵀ − lse) (recomputed from the forward's log-sum-exp),
//   dV += Pᵀ·dO, dPᵀ = V·dOᵀ, dSᵀ = Pᵀ ∘ (dPᵀ − D), dK += dSᵀ·Q,
//   dQ += dS·K through shared memory (dS written transposed) and fp32 atomics.
// D = rowsum(dO ∘ O) comes from the attn_delta pre-pass. All products on bf16 tensor cores
// with fp32 accumulation; the accumulator registers of Pᵀ and dSᵀ are reused as A operands.
//
// Outputs accumulate: dq += (atomics), dk +=, dv += (each CTA owns its keys; with rep > 1 the
// rep query heads of a K/V head add into it with fp32 atomics) — METP's fp32 dQ accumulator and
// traveling dK/dV accumulators. Layouts as flash_fwd.cu (K/V head h/rep); lse and delta are
// [b·nq + i][heads]; dq fp32 with row stride lddq, head h at column h·D; dk/dv fp32 with row
// strides lddk/lddv, K/V head h/rep at column (h/rep)·D.

#define FB_BK 64
#define FB_PAD 8
#define FB_THREADS 128

template <int D, int BQ>
__device__ __forceinline__ void flash_bwd_body(
    const bf16_t* __restrict__ q, const bf16_t* __restrict__ k, const bf16_t* __restrict__ v,
    const bf16_t* __restrict__ dout, long long ldq, long long ldk, long long ldv, long long lddo,
    const float* __restrict__ lse, const float* __restrict__ delta, float* dq, float* dk,
    float* dv, long long lddq, long long lddk, long long lddv, int heads, int nq, int nkv,
    float scale, int causal, int rep) {
    METP_DYN_SMEM(smem);
    const int KS = D + FB_PAD;   // Ks, Vs, Qs, dOs row stride
    const int KTS = FB_BK + FB_PAD;  // Kt row stride
    const int QTS = BQ + FB_PAD;     // Qt, dOt row stride
    const int SS = FB_BK + FB_PAD;   // dSs row stride
    bf16_t* Ks = (bf16_t*)smem;      // [FB_BK][KS]
    bf16_t* Kt = Ks + FB_BK * KS;    // [D][KTS]
    bf16_t* Vs = Kt + D * KTS;       // [FB_BK][KS]
    bf16_t* Qs = Vs + FB_BK * KS;    // [BQ][KS]
    bf16_t* Qt = Qs + BQ * KS;       // [D][QTS]
    bf16_t* dOs = Qt + D * QTS;      // [BQ][KS]
    bf16_t* dOt = dOs + BQ * KS;     // [D][QTS]
    bf16_t* dSs = dOt + D * QTS;     // [BQ][SS]
    float* sL = (float*)(dSs + BQ * SS);  // [BQ]
    float* sD = sL + BQ;                  // [BQ]

    const int ktile = blockIdx.x;
    const int bh = blockIdx.y;
    const int beta = bh / heads, hd = bh % heads;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, t = lane & 3;
    const int off = nkv - nq;
    const int k0 = ktile * FB_BK;
    const int wk = warp * 16;  // this warp's first key within the tile

    const bf16_t* qb = q + (long long)beta * nq * ldq + hd * D;
    const int kvh = hd / rep;
    const bf16_t* kb = k + (long long)beta * nkv * ldk + kvh * D;
    const bf16_t* vb = v + (long long)beta * nkv * ldv + kvh * D;
    const bf16_t* ob = dout + (long long)beta * nq * lddo + hd * D;
    const float* lb = lse + (long long)beta * nq * heads + hd;
    const float* db = delta + (long long)beta * nq * heads + hd;
    float* dqb = dq + (long long)beta * nq * lddq + hd * D;
    float* dkb = dk + (long long)beta * nkv * lddk + kvh * D;
    float* dvb = dv + (long long)beta * nkv * lddv + kvh * D;

    // K (both layouts) and V of the tile, once.
    for (int idx = threadIdx.x; idx < FB_BK * D / 8; idx += FB_THREADS) {
        const int rr = idx / (D / 8), cc = (idx % (D / 8)) * 8;
        const int j = k0 + rr;
        uint4 kx = make_uint4(0u, 0u, 0u, 0u), vx = make_uint4(0u, 0u, 0u, 0u);
        if (j < nkv) {
            kx = *(const uint4*)(kb + (long long)j * ldk + cc);
            vx = *(const uint4*)(vb + (long long)j * ldv + cc);
        }
        *(uint4*)(Ks + rr * KS + cc) = kx;
        *(uint4*)(Vs + rr * KS + cc) = vx;
#pragma unroll
        for (int e = 0; e < 8; e++) Kt[(cc + e) * KTS + rr] = u4_half(kx, e);
    }

    float dka[D / 8][4], dva[D / 8][4];
#pragma unroll
    for (int nd = 0; nd < D / 8; nd++)
#pragma unroll
        for (int e = 0; e < 4; e++) dka[nd][e] = dva[nd][e] = 0.0f;

    int i_start = 0;
    if (causal && k0 - off > 0) i_start = ((k0 - off) / BQ) * BQ;
    const float sl2 = scale * METP_LOG2E;
    // dQ: BQ/16 row tiles; the 4 warps split them, then the columns.
    const int MT = BQ / 16;
    const int NDW = (D / 8) / (4 / MT);
    const int mt = warp % MT;
    const int ndb = (warp / MT) * NDW;

    for (int i0 = i_start; i0 < nq; i0 += BQ) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < BQ * D / 8; idx += FB_THREADS) {
            const int rr = idx / (D / 8), cc = (idx % (D / 8)) * 8;
            const int i = i0 + rr;
            uint4 qx = make_uint4(0u, 0u, 0u, 0u), ox = make_uint4(0u, 0u, 0u, 0u);
            if (i < nq) {
                qx = *(const uint4*)(qb + (long long)i * ldq + cc);
                ox = *(const uint4*)(ob + (long long)i * lddo + cc);
            }
            *(uint4*)(Qs + rr * KS + cc) = qx;
            *(uint4*)(dOs + rr * KS + cc) = ox;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                Qt[(cc + e) * QTS + rr] = u4_half(qx, e);
                dOt[(cc + e) * QTS + rr] = u4_half(ox, e);
            }
        }
        for (int idx = threadIdx.x; idx < BQ; idx += FB_THREADS) {
            const int i = i0 + idx;
            float L = i < nq ? lb[(long long)i * heads] : METP_NEG_INF;
            // A row that saw no key in the forward pass has no probabilities: lse = +inf
            // makes every exp2 below 0.
            sL[idx] = L == METP_NEG_INF ? -METP_NEG_INF : L * METP_LOG2E;
            sD[idx] = i < nq ? db[(long long)i * heads] : 0.0f;
        }
        __syncthreads();

        // Sᵀ = K·Qᵀ: this warp's 16 keys × BQ queries.
        float st[BQ / 8][4], dpt[BQ / 8][4];
#pragma unroll
        for (int n = 0; n < BQ / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) st[n][e] = dpt[n][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            const int ar = (wk + g) * KS + kk * 16 + 2 * t;
            u32 ka[4], va[4];
            ka[0] = ld_pair(Ks, ar);
            ka[1] = ld_pair(Ks, ar + 8 * KS);
            ka[2] = ld_pair(Ks, ar + 8);
            ka[3] = ld_pair(Ks, ar + 8 * KS + 8);
            va[0] = ld_pair(Vs, ar);
            va[1] = ld_pair(Vs, ar + 8 * KS);
            va[2] = ld_pair(Vs, ar + 8);
            va[3] = ld_pair(Vs, ar + 8 * KS + 8);
#pragma unroll
            for (int n = 0; n < BQ / 8; n++) {
                const int br = (n * 8 + g) * KS + kk * 16 + 2 * t;
                u32 b[2];
                b[0] = ld_pair(Qs, br);
                b[1] = ld_pair(Qs, br + 8);
                mma_bf16_16816(st[n], ka, b);
                // dPᵀ = V·dOᵀ
                b[0] = ld_pair(dOs, br);
                b[1] = ld_pair(dOs, br + 8);
                mma_bf16_16816(dpt[n], va, b);
            }
        }

        // Pᵀ and dSᵀ = Pᵀ ∘ (dPᵀ − D).
#pragma unroll
        for (int n = 0; n < BQ / 8; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int j = k0 + wk + g + 8 * (e >> 1);
                const int col = n * 8 + 2 * t + (e & 1);
                const int i = i0 + col;
                const bool ok = j < nkv && i < nq && (!causal || j <= i + off);
                const float p = ok ? exp2f(st[n][e] * sl2 - sL[col]) : 0.0f;
                st[n][e] = p;
                dpt[n][e] = p * (dpt[n][e] - sD[col]);
            }
        }

        // dV += Pᵀ·dO and dK += dSᵀ·Q (k = the BQ queries).
#pragma unroll
        for (int kq = 0; kq < BQ / 16; kq++) {
            u32 pa[4], sa[4];
            pa[0] = pack_bf2(st[2 * kq][0], st[2 * kq][1]);
            pa[1] = pack_bf2(st[2 * kq][2], st[2 * kq][3]);
            pa[2] = pack_bf2(st[2 * kq + 1][0], st[2 * kq + 1][1]);
            pa[3] = pack_bf2(st[2 * kq + 1][2], st[2 * kq + 1][3]);
            sa[0] = pack_bf2(dpt[2 * kq][0], dpt[2 * kq][1]);
            sa[1] = pack_bf2(dpt[2 * kq][2], dpt[2 * kq][3]);
            sa[2] = pack_bf2(dpt[2 * kq + 1][0], dpt[2 * kq + 1][1]);
            sa[3] = pack_bf2(dpt[2 * kq + 1][2], dpt[2 * kq + 1][3]);
#pragma unroll
            for (int nd = 0; nd < D / 8; nd++) {
                const int br = (nd * 8 + g) * QTS + kq * 16 + 2 * t;
                u32 b[2];
                b[0] = ld_pair(dOt, br);
                b[1] = ld_pair(dOt, br + 8);
                mma_bf16_16816(dva[nd], pa, b);
                b[0] = ld_pair(Qt, br);
                b[1] = ld_pair(Qt, br + 8);
                mma_bf16_16816(dka[nd], sa, b);
            }
        }

        // dS (queries × keys) into shared memory for dQ.
#pragma unroll
        for (int n = 0; n < BQ / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                dSs[(n * 8 + 2 * t + (e & 1)) * SS + wk + g + 8 * (e >> 1)] = f2bf(dpt[n][e]);
        __syncthreads();

        // dQ[i0 .. i0+BQ) += scale·dS·K: row tile mt, column tiles ndb .. ndb+NDW.
        float dqa[NDW][4];
#pragma unroll
        for (int n = 0; n < NDW; n++) dqa[n][0] = dqa[n][1] = dqa[n][2] = dqa[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < FB_BK / 16; kk++) {
            const int ar = (mt * 16 + g) * SS + kk * 16 + 2 * t;
            u32 a[4];
            a[0] = ld_pair(dSs, ar);
            a[1] = ld_pair(dSs, ar + 8 * SS);
            a[2] = ld_pair(dSs, ar + 8);
            a[3] = ld_pair(dSs, ar + 8 * SS + 8);
#pragma unroll
            for (int n = 0; n < NDW; n++) {
                const int br = ((ndb + n) * 8 + g) * KTS + kk * 16 + 2 * t;
                u32 b[2];
                b[0] = ld_pair(Kt, br);
                b[1] = ld_pair(Kt, br + 8);
                mma_bf16_16816(dqa[n], a, b);
            }
        }
#pragma unroll
        for (int n = 0; n < NDW; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = i0 + mt * 16 + g + 8 * (e >> 1);
                const int col = (ndb + n) * 8 + 2 * t + (e & 1);
                if (i < nq) atomicAdd(dqb + (long long)i * lddq + col, dqa[n][e] * scale);
            }
        }
    }

#pragma unroll
    for (int nd = 0; nd < D / 8; nd++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int j = k0 + wk + g + 8 * (e >> 1);
            const int col = nd * 8 + 2 * t + (e & 1);
            if (j < nkv && rep == 1) {
                dkb[(long long)j * lddk + col] += dka[nd][e] * scale;
                dvb[(long long)j * lddv + col] += dva[nd][e];
            } else if (j < nkv) {
                atomicAdd(dkb + (long long)j * lddk + col, dka[nd][e] * scale);
                atomicAdd(dvb + (long long)j * lddv + col, dva[nd][e]);
            }
        }
    }
}

// Bytes of dynamic shared memory flash_bwd_body<D, BQ> needs (mirrored by the host).
#define FB_SMEM_BYTES(D, BQ)                                                                  \
    (2 * (2 * FB_BK * ((D) + FB_PAD) + (D) * (FB_BK + FB_PAD) + 2 * (BQ) * ((D) + FB_PAD) +      \
          2 * (D) * ((BQ) + FB_PAD) + (BQ) * (FB_BK + FB_PAD)) +                                 \
     8 * (BQ))

extern "C" __global__ void __launch_bounds__(FB_THREADS)
    flash_bwd_d64(const bf16_t* q, const bf16_t* k, const bf16_t* v, const bf16_t* dout,
                  long long ldq, long long ldk, long long ldv, long long lddo, const float* lse,
                  const float* delta, float* dq, float* dk, float* dv, long long lddq,
                  long long lddk, long long lddv, int heads, int nq, int nkv, float scale,
                  int causal, int rep) {
    flash_bwd_body<64, 64>(q, k, v, dout, ldq, ldk, ldv, lddo, lse, delta, dq, dk, dv, lddq, lddk,
                           lddv, heads, nq, nkv, scale, causal, rep);
}

extern "C" __global__ void __launch_bounds__(FB_THREADS)
    flash_bwd_d128(const bf16_t* q, const bf16_t* k, const bf16_t* v, const bf16_t* dout,
                   long long ldq, long long ldk, long long ldv, long long lddo, const float* lse,
                   const float* delta, float* dq, float* dk, float* dv, long long lddq,
                   long long lddk, long long lddv, int heads, int nq, int nkv, float scale,
                   int causal, int rep) {
    flash_bwd_body<128, 32>(q, k, v, dout, ldq, ldk, ldv, lddo, lse, delta, dq, dk, dv, lddq,
                            lddk, lddv, heads, nq, nkv, scale, causal, rep);
}
