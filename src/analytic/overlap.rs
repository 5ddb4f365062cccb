//! METP's full-overlap condition (DESIGN §1, claim C3), derived in closed form.
//!
//! A ring step hides its transfer when its compute takes at least as long:
//!
//! - attention inner ring (per head group of a/G heads, c = s/p local tokens): compute
//!   `4·b·c²·(h/G) / F` against the K/V block `α + 2·2·b·c·w_kv / B` (w_kv = the group's K
//!   width, h/G for MHA). Without the latency term this is `c ≥ (F/B)·(w_kv·G/h)` — `s/p ≥ F/B`
//!   for MHA; with it, the positive root of `A·c² − β·c − α = 0`, `A = 4·b·(h/G)/F`,
//!   `β = 4·b·w_kv/B`: `c* = (β + √(β² + 4Aα)) / 2A`.
//! - causal attention: contiguous blocks leave each step's pace to the device with a full
//!   block (same threshold) while the others idle; zig-zag order gives every device half a
//!   block per step, so A halves and the threshold doubles.
//! - MLP weight ring: compute `2·m·b·c·h·(f/p) / F` (m = 2 matrices for GeLU, 3 for SwiGLU)
//!   against the shard `α + 2·m·h·(f/p) / B`: `b·c ≥ F/B + α·F·p / (2·m·h·f)`.
//!
//! F is the device's best GEMM rate (peak × the kernel model's `gemm.mma_fraction`: a full wave
//! of long-k tiles with no fixed costs), B the per-direction bandwidth of the link the ring
//! crosses, α its message latency.

use serde::Serialize;

use crate::config::{Activation, Workload};
use crate::cost::CostModel;

/// Thresholds on local tokens c = s/p above which each ring hides its transfers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Thresholds {
    /// Effective compute rate F used.
    pub flops_per_s: f64,
    /// Link bandwidth B used.
    pub bytes_per_s: f64,
    /// Message latency α used.
    pub latency_s: f64,
    /// F/B in tokens.
    pub f_over_b: f64,
    /// Attention ring, non-causal (and causal with contiguous blocks, for the pacing device).
    pub attention_local_seq: f64,
    /// Attention ring, causal with zig-zag (load-balanced) blocks.
    pub attention_causal_zigzag_local_seq: f64,
    /// MLP weight ring (local tokens × micro-batch must exceed it; reported as tokens per
    /// sample for the workload's micro-batch).
    pub mlp_local_seq: f64,
}

fn positive_root(a: f64, beta: f64, alpha: f64) -> f64 {
    (beta + (beta * beta + 4.0 * a * alpha).sqrt()) / (2.0 * a)
}

/// The thresholds for a workload's model, hardware, degree and micro-batch.
pub fn thresholds(w: &Workload) -> Thresholds {
    let cost = CostModel::new(&w.hardware);
    let hw = &w.hardware;
    let f_rate = cost.best_gemm_flops_per_s();
    let devices: Vec<u32> = (0..w.p as u32).collect();
    let class = cost.group_class(&devices);
    let (b_rate, alpha) = match class {
        crate::cost::LinkClass::Local => (hw.intra_node.bytes_per_s_per_direction.value, 0.0),
        c => (cost.p2p_bytes_per_s(c), cost.p2p_latency_s(c)),
    };
    let m = &w.model;
    let (b, h, f, p) = (
        w.micro_batch as f64,
        m.hidden as f64,
        m.ffn_hidden as f64,
        w.p as f64,
    );
    let groups = w.options.metp.head_groups.unwrap_or(w.p) as f64;
    let kv_w = (m.kv_heads as f64 / groups).max(1.0) * m.head_dim() as f64;
    let a_coef = 4.0 * b * (h / groups) / f_rate;
    let beta = 4.0 * b * kv_w / b_rate;
    let mats = match m.activation {
        Activation::Gelu => 2.0,
        Activation::Swiglu => 3.0,
    };
    let mlp_tokens = f_rate / b_rate + alpha * f_rate * p / (2.0 * mats * h * f);
    Thresholds {
        flops_per_s: f_rate,
        bytes_per_s: b_rate,
        latency_s: alpha,
        f_over_b: f_rate / b_rate,
        attention_local_seq: positive_root(a_coef, beta, alpha),
        attention_causal_zigzag_local_seq: positive_root(a_coef / 2.0, beta, alpha),
        mlp_local_seq: mlp_tokens / b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load_hardware, load_model, MethodId, Options};

    #[test]
    fn dgx_a100_f_over_b_is_about_a_thousand_tokens() {
        // DESIGN §1: F/B ≈ 250e12 / 240e9 ≈ 1,000 tokens per device on a DGX-A100.
        let w = Workload {
            model: load_model("gpt3-13b").unwrap(),
            hardware: load_hardware("dgx-a100-80gb").unwrap(),
            method: MethodId::Metp,
            p: 8,
            dp: 1,
            outer: crate::config::OuterAxes::default(),
            seq: 65536,
            micro_batch: 1,
            micro_batches: 1,
            options: Options::default(),
        };
        let t = thresholds(&w);
        // F = 312 TFLOP/s × 0.838 (the profile's GEMM fit to published A100 GEMMs) ≈ 261
        // TFLOP/s; B = 195 GB/s (NCCL's send/recv rate on 8 A100s, the profile's
        // collective_library.p2p_bytes_per_s): F/B ≈ 1,340 tokens — DESIGN §1's "about 1,000" with 250 TFLOP/s and 240 GB/s.
        assert!((1200.0..1500.0).contains(&t.f_over_b), "{}", t.f_over_b);
        // At the threshold a step's compute equals its transfer: 4·b·c²·(h/G)/F = α + 4·b·c·w/B
        // (MHA: w = h/G = 640 for h = 5120, p = G = 8). The latency adds α·F/(4·b·h/G) ≈ 300
        // tokens here, so the threshold sits above F/B.
        let (hg, c) = (5120.0 / 8.0, t.attention_local_seq);
        let compute = 4.0 * c * c * hg / t.flops_per_s;
        let transfer = t.latency_s + 4.0 * c * hg / t.bytes_per_s;
        assert!(
            (compute / transfer - 1.0).abs() < 1e-9,
            "{compute} vs {transfer}"
        );
        assert!(c > t.f_over_b && c < t.f_over_b + 1.01 * t.latency_s * t.flops_per_s / (4.0 * hg));
        // Zig-zag halves each step's compute: the threshold roughly doubles.
        let ratio = t.attention_causal_zigzag_local_seq / t.attention_local_seq;
        assert!((1.5..2.01).contains(&ratio), "{ratio}");
        // MLP: b·c = F/B + α·F·p/(2·m·h·f), m = 2, f = 4h.
        let expect =
            t.f_over_b + t.latency_s * t.flops_per_s * 8.0 / (2.0 * 2.0 * 5120.0 * 20480.0);
        assert!((t.mlp_local_seq / expect - 1.0).abs() < 1e-12);
    }
}

/// The same thresholds solved with the profile's own kernel timings: the smallest local
/// sequence c at which one ring step's kernels (the calls the plan issues, priced by the kernel
/// model with its wave quantization and fixed costs, slowed by σ while the transfer runs) last
/// at least as long as the step's transfer `α + bytes / B`. This is the condition the simulator
/// obeys; the closed forms above assume every kernel runs at the best GEMM rate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SolvedThresholds {
    /// Attention ring (non-causal, or causal contiguous for the pacing device).
    pub attention_local_seq: u64,
    /// Attention ring, causal zig-zag.
    pub attention_causal_zigzag_local_seq: u64,
    /// MLP weight ring.
    pub mlp_local_seq: u64,
}

/// Solves the thresholds for a workload's model, hardware, degree and micro-batch by bisection
/// on c (step compute grows faster in c than the transfer, so the predicate is monotone).
pub fn solve_thresholds(w: &Workload) -> SolvedThresholds {
    use crate::schedule::{attention_fwd, AttnShape, Kernel};
    let cost = CostModel::new(&w.hardware);
    let sigma = cost.overlap_slowdown();
    let m = &w.model;
    let devices: Vec<u32> = (0..w.p as u32).collect();
    let class = cost.group_class(&devices);
    let msg = |bytes: f64| match class {
        crate::cost::LinkClass::Local => 0.0,
        c => cost.p2p_latency_s(c) + bytes / cost.p2p_bytes_per_s(c),
    };
    let (b, h, d) = (w.micro_batch as f64, m.hidden as f64, m.head_dim() as f64);
    let g = w.options.metp.head_groups.unwrap_or(w.p) as f64;
    let heads = m.heads as f64 / g;
    let kv = (m.kv_heads as f64 / g).max(1.0);
    let flash = w.options.flash;
    let price = |ks: &[Kernel]| -> f64 { ks.iter().map(|k| cost.kernel_s(&k.shape)).sum() };
    // One forward ring step of one head group: the block's attention kernels and the
    // log-sum-exp merge of its queries. Zig-zag: the larger of the two half blocks.
    let block = |sq: f64, sk: f64| -> f64 {
        let shape = AttnShape {
            b,
            sq,
            sk,
            heads,
            d,
            kv_heads: kv,
            causal: false,
        };
        let mut ks = attention_fwd(shape, flash, false);
        ks.push(Kernel::elementwise("lse-merge", b * sq * heads * d, 1.0));
        price(&ks)
    };
    let attn_step = |c: f64, zigzag: bool| -> (f64, f64) {
        let compute = if zigzag {
            let half = (c / 2.0).floor();
            block(c, half).max(block(c - half, c))
        } else {
            block(c, c)
        };
        (compute, msg(2.0 * 2.0 * b * c * kv * d))
    };
    let f_p = m.ffn_hidden as f64 / w.p as f64;
    let mats = match m.activation {
        Activation::Gelu => 2.0,
        Activation::Swiglu => 3.0,
    };
    let mlp_step = |c: f64| -> (f64, f64) {
        let rows = b * c;
        let up = (mats - 1.0) * f_p;
        let ks = [
            Kernel::gemm("fc1", rows, up, h),
            Kernel::elementwise("act", rows * up, 1.0),
            Kernel::gemm("fc2", rows, h, f_p),
        ];
        (price(&ks), msg(2.0 * mats * h * f_p))
    };
    let solve = |step: &dyn Fn(f64) -> (f64, f64)| -> u64 {
        let hides = |c: u64| {
            let (comp, comm) = step(c as f64);
            comp / (1.0 - sigma) >= comm
        };
        if hides(1) {
            return 1;
        }
        let (mut lo, mut hi) = (1u64, 2u64);
        while !hides(hi) {
            lo = hi;
            hi *= 2;
            if hi > 1 << 40 {
                return u64::MAX;
            }
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if hides(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    };
    SolvedThresholds {
        attention_local_seq: solve(&|c| attn_step(c, false)),
        attention_causal_zigzag_local_seq: solve(&|c| attn_step(c, true)),
        mlp_local_seq: solve(&mlp_step),
    }
}
