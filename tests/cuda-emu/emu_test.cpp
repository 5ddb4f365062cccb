// Runs metp-sim's CUDA kernels (src/backend/cuda/kernels) on the host emulator (emu.h) and
// compares them with double-precision references on the same bf16 inputs. Prints one line
// per check and "emu: N checks, M failed"; exits 1 if any failed.
#include "emu.h"

#include <cstdio>
#include <string>

#include "../../src/backend/cuda/kernels/common.cuh"
#include "../../src/backend/cuda/kernels/elementwise.cu"
#include "../../src/backend/cuda/kernels/flash_fwd.cu"
#include "../../src/backend/cuda/kernels/flash_bwd.cu"

static int checks = 0, failed = 0;

static void check(const std::string& what, double err, double tol) {
    checks++;
    bool ok = std::isfinite(err) && err <= tol;
    if (!ok) failed++;
    std::printf("%s %-70s error %.3e (tolerance %.1e)\n", ok ? "ok  " : "FAIL", what.c_str(), err,
                tol);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double uniform() {  // [-1, 1)
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return ((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0 - 1.0;
}
static bf16_t h2bf(float f) { return f2bf(f); }
static float hbf(bf16_t x) { return bf2f(x); }

static std::vector<bf16_t> random_bf(size_t n, double scale) {
    std::vector<bf16_t> v(n);
    for (auto& x : v) x = h2bf((float)(uniform() * scale));
    return v;
}

// ‖got − want‖ / ‖want‖.
static double rel(const std::vector<double>& got, const std::vector<double>& want) {
    double d = 0, w = 0;
    for (size_t i = 0; i < got.size(); i++) {
        d += (got[i] - want[i]) * (got[i] - want[i]);
        w += want[i] * want[i];
    }
    return w > 0 ? std::sqrt(d / w) : std::sqrt(d);
}

struct Attn {
    int b, heads, nq, nkv, D;
    bool causal;
    int kvh = 0;  // K/V heads (grouped-query attention); 0: one per query head
    int kv() const { return kvh ? kvh : heads; }
    int rep() const { return heads / kv(); }
    long long ldq() const { return (long long)heads * D; }
    long long ldk() const { return (long long)kv() * D; }
};

// Reference forward (double) over keys [k_lo, k_hi) of each sample: O and lse per (row, head).
static void ref_forward(const Attn& a, const std::vector<bf16_t>& q, const std::vector<bf16_t>& k,
                        const std::vector<bf16_t>& v, int k_lo, int k_hi, std::vector<double>& o,
                        std::vector<double>& lse) {
    int W = a.heads * a.D, Wk = (int)a.ldk();
    double scale = 1.0 / std::sqrt((double)a.D);
    o.assign((size_t)a.b * a.nq * W, 0.0);
    lse.assign((size_t)a.b * a.nq * a.heads, -INFINITY);
    for (int beta = 0; beta < a.b; beta++)
        for (int h = 0; h < a.heads; h++)
            for (int i = 0; i < a.nq; i++) {
                std::vector<double> s;
                std::vector<int> js;
                for (int j = k_lo; j < k_hi; j++) {
                    if (a.causal && j > i + a.nkv - a.nq) continue;
                    double dot = 0;
                    for (int c = 0; c < a.D; c++)
                        dot += (double)hbf(q[((size_t)beta * a.nq + i) * W + h * a.D + c]) *
                               hbf(k[((size_t)beta * a.nkv + j) * Wk + (h / a.rep()) * a.D + c]);
                    s.push_back(dot * scale);
                    js.push_back(j);
                }
                if (s.empty()) continue;
                double m = -INFINITY;
                for (double x : s) m = std::max(m, x);
                double sum = 0;
                for (double x : s) sum += std::exp(x - m);
                double l = m + std::log(sum);
                lse[((size_t)beta * a.nq + i) * a.heads + h] = l;
                for (size_t n = 0; n < s.size(); n++) {
                    double p = std::exp(s[n] - l);
                    for (int c = 0; c < a.D; c++)
                        o[((size_t)beta * a.nq + i) * W + h * a.D + c] +=
                            p * hbf(v[((size_t)beta * a.nkv + js[n]) * Wk + (h / a.rep()) * a.D + c]);
                }
            }
}

static void run_fwd(const Attn& a, const std::vector<bf16_t>& q, const bf16_t* k, const bf16_t* v,
                    int nkv, std::vector<float>& acc, std::vector<float>& lse) {
    long long ld = a.ldq(), ldk = a.ldk();
    dim3 grid{(unsigned)((a.nq + FA_BR - 1) / FA_BR), (unsigned)(a.b * a.heads), 1};
    size_t smem = 2 * (FA_BC * (a.D + FA_PAD) + a.D * (FA_BC + FA_PAD));
    float scale = 1.0f / std::sqrt((float)a.D);
    emu::launch(grid, dim3{FA_THREADS, 1, 1}, smem, [&] {
        if (a.D == 64)
            flash_fwd_d64(q.data(), k, v, ld, ldk, ldk, acc.data(), ld, lse.data(), a.heads, a.nq,
                          nkv, scale, a.causal, a.rep());
        else
            flash_fwd_d128(q.data(), k, v, ld, ldk, ldk, acc.data(), ld, lse.data(), a.heads, a.nq,
                           nkv, scale, a.causal, a.rep());
    });
}

static std::vector<double> to_d(const std::vector<float>& v) { return {v.begin(), v.end()}; }

static std::string name(const char* what, const Attn& a) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s b=%d heads=%d/%d q=%d kv=%d d=%d%s", what, a.b, a.heads,
                  a.kv(), a.nq, a.nkv, a.D, a.causal ? " causal" : "");
    return buf;
}

// Forward alone and as a merge of two key blocks (non-causal), backward against the reference
// gradients (accumulated onto non-zero dq/dk/dv).
static void test_attention(const Attn& a) {
    int W = a.heads * a.D, Wk = (int)a.ldk();
    size_t nq_el = (size_t)a.b * a.nq * W, nkv_el = (size_t)a.b * a.nkv * Wk;
    auto q = random_bf(nq_el, 1.0), k = random_bf(nkv_el, 1.0), v = random_bf(nkv_el, 1.0);
    auto dout = random_bf(nq_el, 1.0);
    std::vector<double> ro, rl;
    ref_forward(a, q, k, v, 0, a.nkv, ro, rl);

    std::vector<float> acc(nq_el, 7.0f), lse((size_t)a.b * a.nq * a.heads, METP_NEG_INF);
    run_fwd(a, q, k.data(), v.data(), a.nkv, acc, lse);
    // Rows that see no key keep their (garbage) accumulator: compare the others only.
    std::vector<double> got, want;
    double lse_err = 0;
    for (int r = 0; r < a.b * a.nq; r++)
        for (int h = 0; h < a.heads; h++) {
            double wl = rl[(size_t)r * a.heads + h], gl = lse[(size_t)r * a.heads + h];
            if (std::isinf(wl)) {
                if (!(std::isinf(gl) && gl < 0)) lse_err = INFINITY;
                continue;
            }
            lse_err = std::max(lse_err, std::fabs(gl - wl));
            for (int c = 0; c < a.D; c++) {
                got.push_back(acc[(size_t)r * W + h * a.D + c]);
                want.push_back(ro[(size_t)r * W + h * a.D + c]);
            }
        }
    check(name("flash fwd out", a), rel(got, want), 1e-2);
    check(name("flash fwd lse", a), lse_err, 2e-2);

    if (!a.causal && a.nkv >= 2) {
        // Two blocks of keys merged by the kernel through (acc, lse). The blocks are separate
        // K/V arrays with nkv1 and nkv2 rows per sample.
        int n1 = a.nkv / 3 + 1, n2 = a.nkv - n1;
        std::vector<bf16_t> k1, v1, k2, v2;
        for (int beta = 0; beta < a.b; beta++)
            for (int j = 0; j < a.nkv; j++)
                for (int c = 0; c < Wk; c++) {
                    size_t at = ((size_t)beta * a.nkv + j) * Wk + c;
                    (j < n1 ? k1 : k2).push_back(k[at]);
                    (j < n1 ? v1 : v2).push_back(v[at]);
                }
        std::vector<float> acc2(nq_el, 3.0f), lse2((size_t)a.b * a.nq * a.heads, METP_NEG_INF);
        Attn a1 = a;
        a1.nkv = n1;
        run_fwd(a1, q, k1.data(), v1.data(), n1, acc2, lse2);
        Attn a2 = a;
        a2.nkv = n2;
        run_fwd(a2, q, k2.data(), v2.data(), n2, acc2, lse2);
        check(name("flash fwd two merged blocks out", a), rel(to_d(acc2), ro), 1e-2);
    }

    // Backward: O stored in bf16, D from the attn_delta kernel, lse from the forward.
    std::vector<bf16_t> o_bf(nq_el);
    for (size_t i = 0; i < nq_el; i++) o_bf[i] = h2bf(acc[i]);
    for (int r = 0; r < a.b * a.nq; r++)
        for (int h = 0; h < a.heads; h++)
            if (std::isinf(rl[(size_t)r * a.heads + h]))
                for (int c = 0; c < a.D; c++) o_bf[(size_t)r * W + h * a.D + c] = 0;
    std::vector<float> delta((size_t)a.b * a.nq * a.heads);
    int rows = a.b * a.nq;
    emu::launch(dim3{(unsigned)((rows * a.heads + 3) / 4), 1, 1}, dim3{128, 1, 1}, 0, [&] {
        attn_delta(dout.data(), o_bf.data(), delta.data(), rows, a.heads, a.D, W, W);
    });
    std::vector<float> dq(nq_el, 0.5f), dk(nkv_el, -0.25f), dv(nkv_el, 0.125f);
    long long ld = W, ldk = Wk;
    int rep = a.rep();
    int BQ = a.D == 64 ? 64 : 32;
    size_t smem = FB_SMEM_BYTES(a.D, BQ);
    dim3 grid{(unsigned)((a.nkv + FB_BK - 1) / FB_BK), (unsigned)(a.b * a.heads), 1};
    float scale = 1.0f / std::sqrt((float)a.D);
    emu::launch(grid, dim3{FB_THREADS, 1, 1}, smem, [&] {
        if (a.D == 64)
            flash_bwd_d64(q.data(), k.data(), v.data(), dout.data(), ld, ldk, ldk, ld, lse.data(),
                          delta.data(), dq.data(), dk.data(), dv.data(), ld, ldk, ldk, a.heads,
                          a.nq, a.nkv, scale, a.causal, rep);
        else
            flash_bwd_d128(q.data(), k.data(), v.data(), dout.data(), ld, ldk, ldk, ld, lse.data(),
                           delta.data(), dq.data(), dk.data(), dv.data(), ld, ldk, ldk, a.heads,
                           a.nq, a.nkv, scale, a.causal, rep);
    });
    // Reference gradients from the reference probabilities.
    std::vector<double> rdq(nq_el, 0), rdk(nkv_el, 0), rdv(nkv_el, 0);
    double sc = 1.0 / std::sqrt((double)a.D);
    for (int beta = 0; beta < a.b; beta++)
        for (int h = 0; h < a.heads; h++)
            for (int i = 0; i < a.nq; i++) {
                size_t qi = ((size_t)beta * a.nq + i) * W + h * a.D;
                double l = rl[((size_t)beta * a.nq + i) * a.heads + h];
                if (std::isinf(l)) continue;
                double dl = 0;
                for (int c = 0; c < a.D; c++) dl += (double)hbf(dout[qi + c]) * ro[qi + c];
                for (int j = 0; j < a.nkv; j++) {
                    if (a.causal && j > i + a.nkv - a.nq) continue;
                    size_t kj = ((size_t)beta * a.nkv + j) * Wk + (h / rep) * a.D;
                    double s = 0, dp = 0;
                    for (int c = 0; c < a.D; c++) {
                        s += (double)hbf(q[qi + c]) * hbf(k[kj + c]);
                        dp += (double)hbf(dout[qi + c]) * hbf(v[kj + c]);
                    }
                    double p = std::exp(s * sc - l);
                    double ds = p * (dp - dl);
                    for (int c = 0; c < a.D; c++) {
                        rdq[qi + c] += sc * ds * hbf(k[kj + c]);
                        rdk[kj + c] += sc * ds * hbf(q[qi + c]);
                        rdv[kj + c] += p * hbf(dout[qi + c]);
                    }
                }
            }
    auto minus = [](const std::vector<float>& x, float c) {
        std::vector<double> r(x.size());
        for (size_t i = 0; i < x.size(); i++) r[i] = (double)x[i] - c;
        return r;
    };
    check(name("flash bwd dq", a), rel(minus(dq, 0.5f), rdq), 2e-2);
    check(name("flash bwd dk", a), rel(minus(dk, -0.25f), rdk), 2e-2);
    check(name("flash bwd dv", a), rel(minus(dv, 0.125f), rdv), 2e-2);
}

// softmax_rows, probs_from_lse, grad_scores and lse_merge against direct host computations.
static void test_unfused() {
    int b = 2, heads = 3, q = 5, kv = 37;
    for (int causal = 0; causal < 2; causal++) {
        int rows = b * heads * q;
        auto s = random_bf((size_t)rows * kv, 4.0);
        std::vector<bf16_t> p((size_t)rows * kv);
        std::vector<float> blse((size_t)b * q * heads);
        float scale = 0.7f;
        emu::launch(dim3{(unsigned)((rows + 3) / 4), 1, 1}, dim3{128, 1, 1}, 0, [&] {
            softmax_rows(s.data(), p.data(), blse.data(), rows, q, kv, heads, scale, causal);
        });
        std::vector<double> got, want;
        double lerr = 0;
        for (int r = 0; r < rows; r++) {
            int i = r % q, hd = (r / q) % heads, beta = r / (q * heads);
            int last = causal ? i + kv - q : kv - 1;
            double m = -INFINITY, sum = 0;
            for (int j = 0; j <= last; j++) m = std::max(m, (double)hbf(s[(size_t)r * kv + j]) * scale);
            for (int j = 0; j <= last; j++) sum += std::exp(hbf(s[(size_t)r * kv + j]) * scale - m);
            double l = m + std::log(sum);
            lerr = std::max(lerr, std::fabs(l - blse[((size_t)beta * q + i) * heads + hd]));
            for (int j = 0; j < kv; j++) {
                got.push_back(hbf(p[(size_t)r * kv + j]));
                want.push_back(j <= last ? std::exp(hbf(s[(size_t)r * kv + j]) * scale - l) : 0.0);
            }
        }
        check(std::string("softmax_rows probabilities") + (causal ? " causal" : ""), rel(got, want), 1e-2);
        check(std::string("softmax_rows log-sum-exp") + (causal ? " causal" : ""), lerr, 1e-4);
        // probs_from_lse on the raw scores reproduces the probabilities.
        auto s2 = s;
        emu::launch(dim3{(unsigned)((rows + 3) / 4), 1, 1}, dim3{128, 1, 1}, 0, [&] {
            probs_from_lse(s2.data(), blse.data(), rows, q, kv, heads, scale, causal);
        });
        std::vector<double> a2, b2;
        for (size_t i = 0; i < s2.size(); i++) {
            a2.push_back(hbf(s2[i]));
            b2.push_back(hbf(p[i]));
        }
        check(std::string("probs_from_lse") + (causal ? " causal" : ""), rel(a2, b2), 1e-2);
        // grad_scores
        auto dp = random_bf((size_t)rows * kv, 1.0);
        std::vector<float> delta((size_t)b * q * heads);
        for (auto& x : delta) x = (float)uniform();
        std::vector<bf16_t> ds((size_t)rows * kv);
        emu::launch(dim3{(unsigned)((rows + 3) / 4), 1, 1}, dim3{128, 1, 1}, 0, [&] {
            grad_scores(p.data(), dp.data(), delta.data(), ds.data(), rows, q, kv, heads);
        });
        std::vector<double> g3, w3;
        for (int r = 0; r < rows; r++) {
            int i = r % q, hd = (r / q) % heads, beta = r / (q * heads);
            for (int j = 0; j < kv; j++) {
                size_t at = (size_t)r * kv + j;
                g3.push_back(hbf(ds[at]));
                w3.push_back((double)hbf(p[at]) *
                             (hbf(dp[at]) - delta[((size_t)beta * q + i) * heads + hd]));
            }
        }
        check(std::string("grad_scores") + (causal ? " causal" : ""), rel(g3, w3), 1e-2);
    }
    // lse_merge of two blocks equals the softmax over both.
    int rows = 7, h = 2, d = 16, W = h * d;
    std::vector<float> acc((size_t)rows * W, 0.0f), lse((size_t)rows * h, METP_NEG_INF);
    std::vector<double> num((size_t)rows * W, 0.0), den((size_t)rows * h, 0.0);
    for (int blk = 0; blk < 2; blk++) {
        auto ob = random_bf((size_t)rows * W, 1.0);
        std::vector<float> bl((size_t)rows * h);
        for (auto& x : bl) x = (float)(uniform() * 3.0);
        emu::launch(dim3{1, 1, 1}, dim3{128, 1, 1}, 0,
                    [&] { lse_merge(acc.data(), lse.data(), ob.data(), bl.data(), rows, h, d, W, W); });
        for (int r = 0; r < rows; r++)
            for (int hd = 0; hd < h; hd++) {
                double w = std::exp((double)bl[(size_t)r * h + hd]);
                den[(size_t)r * h + hd] += w;
                for (int c = 0; c < d; c++) num[(size_t)r * W + hd * d + c] += w * hbf(ob[(size_t)r * W + hd * d + c]);
            }
    }
    std::vector<double> want;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < W; c++) want.push_back(num[(size_t)r * W + c] / den[(size_t)r * h + c / d]);
    check("lse_merge of two blocks", rel(to_d(acc), want), 1e-5);
}

// GeLU forward and backward (tanh form, as backend/unit/mlp.rs), the pseudo-random fill, conversions.
static void test_elementwise() {
    const unsigned n = 1000;
    auto x = random_bf(n, 3.0), g = random_bf(n, 1.0);
    std::vector<bf16_t> y(n), rnd(n), gb = g;
    emu::launch(dim3{2, 1, 1}, dim3{256, 1, 1}, 0, [&] {
        gelu_fwd(x.data(), y.data(), n);
        gelu_bwd(gb.data(), x.data(), n);
        random_bf16(rnd.data(), 42, n);
    });
    std::vector<double> gy, wy, gg, wg;
    double lo = 1e9, hi = -1e9, mean = 0;
    for (unsigned i = 0; i < n; i++) {
        double v = hbf(x[i]);
        double k = 0.7978845608028654, t = std::tanh(k * (v + 0.044715 * v * v * v));
        gy.push_back(hbf(y[i]));
        wy.push_back(0.5 * v * (1 + t));
        double d = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v);
        gg.push_back(hbf(gb[i]));
        wg.push_back(hbf(g[i]) * d);
        double r = hbf(rnd[i]);
        lo = std::min(lo, r);
        hi = std::max(hi, r);
        mean += r / n;
    }
    check("gelu_fwd (tanh form)", rel(gy, wy), 1e-2);
    check("gelu_bwd", rel(gg, wg), 1e-2);

    // SwiGLU forward and in-place backward (backend/unit/mlp.rs): rows of [gate | up].
    const unsigned rows = 7, fp = 37;
    auto hh = random_bf(rows * 2 * fp, 3.0), da = random_bf(rows * fp, 1.0);
    std::vector<bf16_t> act(rows * fp), dh(rows * 2 * fp);
    for (unsigned r = 0; r < rows; r++)
        for (unsigned c = 0; c < fp; c++) dh[r * 2 * fp + fp + c] = da[r * fp + c];
    emu::launch(dim3{3, 1, 1}, dim3{64, 1, 1}, 0, [&] {
        swiglu_fwd(hh.data(), act.data(), fp, rows * fp);
        swiglu_bwd(dh.data(), hh.data(), fp, rows * fp);
    });
    std::vector<double> ga, wa, gd, wd;
    for (unsigned r = 0; r < rows; r++)
        for (unsigned c = 0; c < fp; c++) {
            double g = hbf(hh[r * 2 * fp + c]), u = hbf(hh[r * 2 * fp + fp + c]);
            double d = hbf(da[r * fp + c]), s = 1.0 / (1.0 + std::exp(-g));
            ga.push_back(hbf(act[r * fp + c]));
            wa.push_back(g * s * u);
            gd.push_back(hbf(dh[r * 2 * fp + c]));
            wd.push_back(d * u * s * (1.0 + g * (1.0 - s)));
            gd.push_back(hbf(dh[r * 2 * fp + fp + c]));
            wd.push_back(d * g * s);
        }
    check("swiglu_fwd", rel(ga, wa), 1e-2);
    check("swiglu_bwd (gate and up gradients, in place)", rel(gd, wd), 1e-2);
    std::printf("random_bf16: min %f max %f mean %f\n", lo, hi, mean);
    check("random_bf16 in [-1, 1] (bf16-rounded), mean near 0",
          (lo >= -1.0 && hi <= 1.0 && hi - lo > 1.8) ? std::fabs(mean) : INFINITY, 0.1);
}

int main() {
    test_elementwise();
    test_unfused();
    for (int D : {64, 128}) {
        test_attention(Attn{2, 2, 80, 80, D, false});
        test_attention(Attn{2, 2, 80, 80, D, true});
        test_attention(Attn{1, 1, 64, 150, D, false});
        test_attention(Attn{1, 1, 64, 150, D, true});
        test_attention(Attn{1, 2, 130, 70, D, true});
        test_attention(Attn{1, 1, 1, 33, D, true});
        // Grouped-query attention: 2 query heads on one K/V head (their dK/dV added with
        // atomics), non-causal with two merged key blocks, and causal with q != kv.
        test_attention(Attn{1, 2, 80, 80, D, false, 1});
        test_attention(Attn{1, 2, 70, 130, D, true, 1});
    }
    std::printf("emu: %d checks, %d failed\n", checks, failed);
    return failed ? 1 : 0;
}
