// Element-wise and row-wise kernels of the CUDA units and measurements (after common.cuh).
// Grid-stride loops: any launch size covers any n.

#define METP_GRID_STRIDE(i, n)                                                       \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (u64)gridDim.x * blockDim.x)

// sqrt(2/pi): the tanh approximation of GeLU, as backend/unit/mlp.rs.
#define METP_GELU_K 0.7978845608028654f

// y = GeLU(x), tanh form.
extern "C" __global__ void gelu_fwd(const bf16_t* x, bf16_t* y, u64 n) {
    METP_GRID_STRIDE(i, n) {
        float v = bf2f(x[i]);
        float t = tanhf(METP_GELU_K * (v + 0.044715f * v * v * v));
        y[i] = f2bf(0.5f * v * (1.0f + t));
    }
}

// g *= GeLU'(z): the activation gradient from the activation input z.
extern "C" __global__ void gelu_bwd(bf16_t* g, const bf16_t* z, u64 n) {
    METP_GRID_STRIDE(i, n) {
        float v = bf2f(z[i]);
        float th = tanhf(METP_GELU_K * (v + 0.044715f * v * v * v));
        float d = 0.5f * (1.0f + th) +
                  0.5f * v * (1.0f - th * th) * METP_GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
        g[i] = f2bf(bf2f(g[i]) * d);
    }
}

// SwiGLU's output a = SiLU(g)·u of its input h, whose rows are [gate | up] (2·fp columns);
// a has fp columns; n = rows·fp (backend/unit/mlp.rs).
extern "C" __global__ void swiglu_fwd(const bf16_t* h, bf16_t* a, u64 fp, u64 n) {
    METP_GRID_STRIDE(i, n) {
        u64 r = i / fp, c = i % fp, base = r * 2 * fp;
        float g = bf2f(h[base + c]), u = bf2f(h[base + fp + c]);
        a[i] = f2bf(g / (1.0f + expf(-g)) * u);
    }
}

// SwiGLU's backward, in place: each row of dh is [· | dA] on entry (dA = dOut·W2ᵀ in the up
// half) and [dA·u·SiLU'(g) | dA·SiLU(g)] on exit, from the input h = [gate | up]; n = rows·fp.
extern "C" __global__ void swiglu_bwd(bf16_t* dh, const bf16_t* h, u64 fp, u64 n) {
    METP_GRID_STRIDE(i, n) {
        u64 r = i / fp, c = i % fp, base = r * 2 * fp;
        float g = bf2f(h[base + c]), u = bf2f(h[base + fp + c]);
        float da = bf2f(dh[base + fp + c]);
        float s = 1.0f / (1.0f + expf(-g));
        dh[base + c] = f2bf(da * u * s * (1.0f + g * (1.0f - s)));
        dh[base + fp + c] = f2bf(da * g * s);
    }
}

// y = c·x (the element-wise pass of the measurements: one bf16 input, one bf16 output).
extern "C" __global__ void scale_bf16(const bf16_t* x, bf16_t* y, float c, u64 n) {
    METP_GRID_STRIDE(i, n) { y[i] = f2bf(c * bf2f(x[i])); }
}

// y = bf16(x).
extern "C" __global__ void f32_to_bf16(const float* x, bf16_t* y, u64 n) {
    METP_GRID_STRIDE(i, n) { y[i] = f2bf(x[i]); }
}

// x = v.
extern "C" __global__ void fill_f32(float* x, float v, u64 n) {
    METP_GRID_STRIDE(i, n) { x[i] = v; }
}

// acc += x (fp32).
extern "C" __global__ void add_f32(float* acc, const float* x, u64 n) {
    METP_GRID_STRIDE(i, n) { acc[i] += x[i]; }
}

// acc += x (bf16 storage, fp32 arithmetic).
extern "C" __global__ void add_bf16(bf16_t* acc, const bf16_t* x, u64 n) {
    METP_GRID_STRIDE(i, n) { acc[i] = f2bf(bf2f(acc[i]) + bf2f(x[i])); }
}

// x = uniform values in [-1, 1) from a hash of (seed, i): measurement inputs that are not all
// zero (a GEMM on zeros draws less power and runs faster than on real data).
extern "C" __global__ void random_bf16(bf16_t* x, u64 seed, u64 n) {
    METP_GRID_STRIDE(i, n) {
        u64 z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        x[i] = f2bf((float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
}

// Does nothing: the per-launch host overhead measurement.
extern "C" __global__ void empty_kernel() {}

// Unfused attention, forward: one warp per score row. Scores are [b][heads][q][kv] (bf16);
// row r = (beta·heads + hd)·q + i. Writes probabilities exp(scale·s − lse) into `probs` and the
// row's log-sum-exp into blse[(beta·q + i)·heads + hd]. Causal: key j is visible to query i
// iff j ≤ i + kv − q (bottom-right aligned). A row with no visible key has lse −inf and
// probabilities 0.
extern "C" __global__ void softmax_rows(const bf16_t* scores, bf16_t* probs, float* blse, int rows,
                                        int q, int kv, int heads, float scale, int causal) {
    int warp = (int)((blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32);
    int lane = threadIdx.x % 32;
    if (warp >= rows) return;
    int i = warp % q;
    int bh = warp / q;
    int hd = bh % heads, beta = bh / heads;
    int last = causal ? i + kv - q : kv - 1;
    const bf16_t* row = scores + (u64)warp * kv;
    bf16_t* out = probs + (u64)warp * kv;
    float m = METP_NEG_INF;
    for (int j = lane; j < kv; j += 32)
        if (j <= last) m = fmaxf(m, bf2f(row[j]) * scale);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0.0f;
    if (m != METP_NEG_INF)
        for (int j = lane; j < kv; j += 32)
            if (j <= last) sum += __expf(bf2f(row[j]) * scale - m);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float l = m == METP_NEG_INF ? METP_NEG_INF : m + logf(sum);
    for (int j = lane; j < kv; j += 32) {
        float p = (j <= last && l != METP_NEG_INF) ? __expf(bf2f(row[j]) * scale - l) : 0.0f;
        out[j] = f2bf(p);
    }
    if (lane == 0) blse[((u64)beta * q + i) * heads + hd] = l;
}

// Unfused attention, backward: probabilities recomputed in place from the stored log-sum-exp
// (`s` holds the raw scores on entry, the probabilities on return); same layout and mask as
// softmax_rows.
extern "C" __global__ void probs_from_lse(bf16_t* s, const float* lse, int rows, int q, int kv,
                                          int heads, float scale, int causal) {
    int warp = (int)((blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32);
    int lane = threadIdx.x % 32;
    if (warp >= rows) return;
    int i = warp % q;
    int bh = warp / q;
    int hd = bh % heads, beta = bh / heads;
    int last = causal ? i + kv - q : kv - 1;
    float l = lse[((u64)beta * q + i) * heads + hd];
    bf16_t* row = s + (u64)warp * kv;
    for (int j = lane; j < kv; j += 32) {
        float p = (j <= last && l != METP_NEG_INF) ? __expf(bf2f(row[j]) * scale - l) : 0.0f;
        row[j] = f2bf(p);
    }
}

// Unfused attention, backward: dS = P ∘ (dP − D[row]) (same layout as softmax_rows; D is
// [b·q][heads] fp32).
extern "C" __global__ void grad_scores(const bf16_t* p, const bf16_t* dp, const float* delta,
                                       bf16_t* ds, int rows, int q, int kv, int heads) {
    int warp = (int)((blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32);
    int lane = threadIdx.x % 32;
    if (warp >= rows) return;
    int i = warp % q;
    int bh = warp / q;
    int hd = bh % heads, beta = bh / heads;
    float dl = delta[((u64)beta * q + i) * heads + hd];
    u64 base = (u64)warp * kv;
    for (int j = lane; j < kv; j += 32)
        ds[base + j] = f2bf(bf2f(p[base + j]) * (bf2f(dp[base + j]) - dl));
}

// Merges a block's normalised output `ob` (rows × heads·d, bf16, row stride ldo) with its
// log-sum-exp blse ([row][heads]) into the running normalised output acc (fp32, row stride
// lda) and log-sum-exp lse ([row][heads]). One thread per (row, head).
extern "C" __global__ void lse_merge(float* acc, float* lse, const bf16_t* ob, const float* blse,
                                     int rows, int heads, int d, long long lda, long long ldo) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= rows * heads) return;
    int r = t / heads, hd = t % heads;
    float old = lse[t];
    float b = blse[t];
    float m = fmaxf(old, b);
    if (m == METP_NEG_INF) return;
    float nw = m + logf(__expf(old - m) + __expf(b - m));
    float wa = __expf(old - nw), wb = __expf(b - nw);
    float* a = acc + (u64)r * lda + (u64)hd * d;
    const bf16_t* o = ob + (u64)r * ldo + (u64)hd * d;
    for (int c = 0; c < d; c++) a[c] = a[c] * wa + bf2f(o[c]) * wb;
    lse[t] = nw;
}

// D[row][hd] = Σ_c dO[row][hd·d + c] · O[row][hd·d + c] (bf16 inputs, row strides lda/ldb):
// the backward pre-pass. One warp per (row, head).
extern "C" __global__ void attn_delta(const bf16_t* dout, const bf16_t* o, float* delta, int rows,
                                      int heads, int d, long long lda, long long ldb) {
    int warp = (int)((blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32);
    int lane = threadIdx.x % 32;
    if (warp >= rows * heads) return;
    int r = warp / heads, hd = warp % heads;
    const bf16_t* a = dout + (u64)r * lda + (u64)hd * d;
    const bf16_t* b = o + (u64)r * ldb + (u64)hd * d;
    float s = 0.0f;
    for (int c = lane; c < d; c += 32) s += bf2f(a[c]) * bf2f(b[c]);
    for (int k = 16; k > 0; k >>= 1) s += __shfl_xor_sync(0xffffffffu, s, k);
    if (lane == 0) delta[warp] = s;
}
