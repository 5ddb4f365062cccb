//! The CUDA backend's plan: what `calibrate --backend cuda` measures ([`measurement_plan`]: a [`Plan`] with a time
//! [`Budget`]) and the units it runs ([`units`]); `calibrate::measure` measures it like any
//! plan. Always built: tested without a GPU.
//!
//! **The grid** covers what the schedules issue on a GPU for LLaMA-2 7B- and 13B-like layers
//! (h = 4096/5120, f = 11008/13824, 32/40 heads, d = 128) at degree p = 1…8: GEMMs of
//! tokens-per-device 512…64k × the projections' model dimensions / p — forward (T × N × K) and
//! the two backward shapes (T × K × N for the input gradient, K × N × T for the weight
//! gradient) — plus squares 1k…16k (the plateau the peak is read from); fused attention
//! forward and backward over batch × heads 1…64, 256…64k tokens, causal and not, head
//! dimension 64 and 128, and the twelve calls of the shared H200 file (PyTorch's
//! FlashAttention, for a side-by-side comparison); copies and element-wise passes 64 KiB…4 GiB
//! (the shared file's sizes among them); the per-op host
//! overhead; with two GPUs or more, point-to-point messages between every pair, all-reduce,
//! all-gather, reduce-scatter and all-to-all over 2, 4 and 8 GPUs, and a GEMM's slowdown while
//! an all-reduce runs (one GPU: while copies run on a second stream — an emulation, labelled).
//! Calls above a FLOP cap are left out so that the whole grid fits its budget ([`estimate_s`]
//! prices it with H200 figures; the test keeps it well under the budget).
//!
//! Depends on the plan and budget of `calibrate` and the backend's shapes and unit specs
//! (`backend`); never on the CUDA backend itself (`backend::cuda`): a plan is data.

use crate::backend::unit::{ExecMethod, RunSpec, Shape, Unit};
use crate::backend::{AttnCall, GemmShape, Pass};
use crate::calibrate::budget::{Budget, Prior};
use crate::calibrate::measure::Plan;

/// LLaMA-2-like layers the grid covers: (name, hidden h, MLP width f, heads a); d = h/a = 128.
pub const MODELS: [(&str, usize, usize, usize); 2] = [
    ("llama-2-7b", 4096, 11008, 32),
    ("llama-2-13b", 5120, 13824, 40),
];

/// GEMMs a layer's projections issue on one device: forward T×N×K (N the output width, K the
/// input width), input gradient T×K×N, weight gradient K×N×T.
pub(super) fn projection_gemms(t: usize, n: usize, k: usize) -> [GemmShape; 3] {
    [
        GemmShape::new(t, n, k),
        GemmShape::new(t, k, n),
        GemmShape::new(k, n, t),
    ]
}

/// Message sizes between every pair of GPUs, collectives over up to this many.
const COLLECTIVE_RANKS: [usize; 3] = [2, 4, 8];

/// A plan from the grid's sizes: copy and element-wise passes over the same buffers (`copy`:
/// buffer bytes; a plan counts bytes moved, read and write), the units of `devices` devices.
#[allow(clippy::too_many_arguments)]
fn plan(
    gemms: Vec<GemmShape>,
    attention: Vec<AttnCall>,
    copy: Vec<u64>,
    transfer_bytes: Vec<u64>,
    pair_bytes: Vec<u64>,
    collective_bytes: Vec<u64>,
    collective_ranks: Vec<usize>,
    slowdown: (GemmShape, u64, usize),
    budget_s: f64,
    devices: usize,
    quick: bool,
) -> Plan {
    let moved: Vec<u64> = copy.iter().map(|b| 2 * b).collect();
    Plan {
        gemms,
        attention,
        elementwise_bytes: moved.clone(),
        copy_bytes: moved,
        transfer_bytes,
        pair_bytes,
        collective_bytes,
        collective_ranks,
        slowdown,
        units: units(devices, quick),
        budget: Some(Budget {
            seconds: budget_s,
            prior: PRIOR,
            quick,
        }),
    }
}

/// The plan of `calibrate --backend cuda` on `devices` GPUs (or virtual devices on one GPU;
/// `quick`: a few sizes of each kind, seconds).
pub fn measurement_plan(devices: usize, quick: bool) -> Plan {
    if quick {
        return plan(
            vec![
                GemmShape::new(1024, 1024, 1024),
                GemmShape::new(4096, 4096, 4096),
                GemmShape::new(2048, 1536, 4096),
            ],
            [(1, 4, 1024, 64, false), (1, 8, 2048, 128, true)]
                .iter()
                .map(|&(batch, heads, s, d, causal)| AttnCall {
                    batch,
                    heads,
                    q_tokens: s,
                    kv_tokens: s,
                    head_dim: d,
                    causal,
                })
                .collect(),
            vec![1 << 16, 1 << 24, 1 << 28],
            vec![1 << 16, 1 << 22, 1 << 26],
            vec![1 << 22],
            vec![1 << 22],
            vec![2],
            (GemmShape::new(4096, 4096, 4096), 1 << 26, 2),
            12.0,
            devices,
            true,
        );
    }
    // Squares 1k…16k: where the GEMM rate plateaus.
    let mut gemms: Vec<GemmShape> = [1024, 2048, 4096, 8192, 16384]
        .iter()
        .map(|&n| GemmShape::new(n, n, n))
        .collect();
    // The projections of LLaMA-2 7B/13B layers at p = 1, 2, 4, 8, tokens per device
    // 512…64k; calls above 8·10¹² FLOPs (10 ms at the H200's plateau) are left out.
    let cap_flops = 8.0e12;
    let mut sched = Vec::new();
    for &(_, h, f, _) in &MODELS {
        for p in [1usize, 2, 4, 8] {
            for t in [512usize, 1024, 2048, 4096, 8192, 16384, 32768, 65536] {
                // QKV, attention output, MLP up (f/p), MLP down.
                for (n, k) in [(3 * h / p, h), (h, h / p), (f / p, h), (h, f / p)] {
                    for g in projection_gemms(t, n, k) {
                        if g.flops() <= cap_flops {
                            sched.push(g);
                        }
                    }
                }
            }
        }
    }
    sched.sort();
    sched.dedup();
    sched.retain(|g| !gemms.contains(g));
    gemms.extend(sched);

    // Attention: batch × heads 1…64, 256…64k tokens, causal and not, d = 64 and 128; calls
    // above 1.2·10¹² forward FLOPs (about 8 ms forward, 20 ms backward for this kernel) are
    // left out, and so are the smallest of the many-head calls.
    let fwd_cap = 1.2e12;
    let mut attention = Vec::new();
    for (batch, heads) in [(1usize, 1usize), (1, 4), (1, 8), (1, 16), (1, 32), (2, 32)] {
        for s in [256usize, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536] {
            for d in [64usize, 128] {
                for causal in [false, true] {
                    let call = AttnCall {
                        batch,
                        heads,
                        q_tokens: s,
                        kv_tokens: s,
                        head_dim: d,
                        causal,
                    };
                    if call.flops(Pass::Forward) <= fwd_cap {
                        attention.push(call);
                    }
                }
            }
        }
    }
    // The shapes of the shared H200 file (PyTorch's FlashAttention, 16 heads of 128, b·s =
    // 16k tokens): the same calls, measured on the same kind of GPU, side by side.
    for (batch, s) in [
        (32usize, 512usize),
        (16, 1024),
        (8, 2048),
        (4, 4096),
        (2, 8192),
        (1, 16384),
    ] {
        for causal in [false, true] {
            attention.push(AttnCall {
                batch,
                heads: 16,
                q_tokens: s,
                kv_tokens: s,
                head_dim: 128,
                causal,
            });
        }
    }
    // Blocks whose queries and keys differ in length (bottom-right aligned causal mask).
    for (q, kv) in [(1024usize, 4096usize), (4096, 1024)] {
        for causal in [false, true] {
            attention.push(AttnCall {
                batch: 1,
                heads: 8,
                q_tokens: q,
                kv_tokens: kv,
                head_dim: 128,
                causal,
            });
        }
    }
    plan(
        gemms,
        attention,
        (0..9).map(|i| (1u64 << 16) << (2 * i)).collect(), // 64 KiB … 4 GiB
        (0..9).map(|i| (1u64 << 12) << (2 * i)).collect(), // 4 KiB … 256 MiB
        vec![1 << 20, 1 << 26],
        vec![1 << 20, 1 << 24, 1 << 28],
        COLLECTIVE_RANKS.to_vec(),
        (GemmShape::new(8192, 8192, 8192), 1 << 28, 3),
        100.0,
        devices,
        false,
    )
}

/// Prior rates for the time guard before a kind has been measured, and for [`estimate_s`]:
/// one H200 (../shared/gpu-data/h200-2026-11-30.json: ~790 TFLOP/s bf16 GEMM plateau, 4.2 TB/s
/// copies) and this backend's own attention kernel, assumed at 150 TFLOP/s forward and
/// 60 TFLOP/s backward (counted as 2.5× the forward FLOPs) — slower than FlashAttention's
/// 278–352 TFLOP/s, so the budget holds if the kernel is that slow.
pub const PRIOR: Prior = Prior {
    gemm_flops_per_s: 6.0e14,
    attn_fwd_flops_per_s: 1.5e14,
    attn_bwd_flops_per_s: 6.0e13,
    copy_bytes_per_s: 3.0e12,
    link_bytes_per_s: 1.0e11,
    call_s: 2.0e-5,
};

/// Seconds a plan's measurements take on one GPU at the prior rates (no pairs or
/// collectives).
pub fn estimate_s(plan: &Plan) -> f64 {
    let Some(b) = plan.budget else {
        return 0.0;
    };
    let p = b.prior;
    let mut t = 0.0;
    for g in &plan.gemms {
        t += b.measurement_s(p.call_s + g.flops() / p.gemm_flops_per_s);
    }
    for c in &plan.attention {
        t += b.measurement_s(b.attention_call_s(c, Pass::Forward, p.attn_fwd_flops_per_s));
        t += b.measurement_s(b.attention_call_s(c, Pass::Backward, p.attn_bwd_flops_per_s));
    }
    for &n in plan.copy_bytes.iter().chain(&plan.elementwise_bytes) {
        t += b.measurement_s(p.call_s + n as f64 / p.copy_bytes_per_s);
    }
    for &n in &plan.transfer_bytes {
        // One GPU: messages are copies.
        t += b.measurement_s(p.call_s + 2.0 * n as f64 / p.copy_bytes_per_s);
    }
    let (g, _, n) = plan.slowdown;
    t += 2.0 * n as f64 * b.measurement_s(p.call_s + g.flops() / p.gemm_flops_per_s);
    t
}

/// The units `calibrate --backend cuda` runs on `p` devices: LLaMA-2 7B- and 13B-like
/// layers (d = 128; a GeLU MLP of the model's width), METP and TP, attention and MLP,
/// forward and backward, non-causal, at s/p = 2048 (7B) and 1024 (13B) tokens per
/// device — seconds on one GPU even with p devices emulated one after the other. `quick`:
/// s/p = 512, 4 heads of 64, for the GPU tests. The heads and MLP width must divide by p:
/// 13B's 40 heads need p ∈ {1, 2, 4, 5, 8, 10, …}; other degrees get 7B only.
pub fn units(p: usize, quick: bool) -> Vec<RunSpec> {
    let p = p.max(1);
    let mut shapes = Vec::new();
    if quick {
        shapes.push(Shape {
            b: 1,
            s: 512 * p,
            h: 4 * 64 * p,
            a: 4 * p,
            f: 4 * 4 * 64 * p,
            p,
        });
    } else {
        for (i, &(_, h, f, a)) in MODELS.iter().enumerate() {
            // s/p = 4096 took 24–41 s per unit on an H200 (p devices emulated one after the other
            // on one GPU; reports/gpu/nvidia-h200-2026-11-30/run1): half that fits the check's budget.
            let c = if i == 0 { 2048 } else { 1024 };
            let sh = Shape {
                b: 1,
                s: c * p,
                h,
                a,
                f,
                p,
            };
            if a.is_multiple_of(p) && f.is_multiple_of(p) {
                shapes.push(sh);
            }
        }
    }
    let mut v = Vec::new();
    for sh in shapes {
        for method in [ExecMethod::Metp, ExecMethod::Tp] {
            for unit in [Unit::Attention, Unit::Mlp] {
                v.push(RunSpec::new(unit, method, sh));
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calib_cuda_grid_covers_the_schedules_and_fits_its_budget() {
        let g = measurement_plan(1, false);
        // Squares 1k…16k first.
        assert_eq!(g.gemms[0], GemmShape::new(1024, 1024, 1024));
        assert!(g.gemms.contains(&GemmShape::new(16384, 16384, 16384)));
        // METP's QKV projection of a 7B layer at p = 4 with 4096 tokens per device, and its
        // two backward shapes.
        for s in projection_gemms(4096, 3 * 4096 / 4, 4096) {
            assert!(g.gemms.contains(&s), "{s:?}");
        }
        // Tokens per device from 512 to 64k.
        assert!(g.gemms.iter().any(|s| s.m == 512));
        assert!(g.gemms.iter().any(|s| s.m == 65536));
        // Attention: 1…64 sequences × heads, 256…64k tokens, d 64 and 128, causal and not,
        // plus the shared H200 file's 16-head calls (up to 32 × 16 = 512).
        let bh: Vec<usize> = g.attention.iter().map(|c| c.batch * c.heads).collect();
        assert_eq!(bh.iter().min(), Some(&1));
        assert!(bh.contains(&64) && bh.contains(&512));
        assert!(g.attention.iter().any(|c| c.q_tokens == 256));
        assert!(g.attention.iter().any(|c| c.q_tokens == 65536));
        assert!(g.attention.iter().any(|c| c.head_dim == 64 && c.causal));
        assert!(g.attention.iter().any(|c| c.head_dim == 128 && !c.causal));
        assert!(g.attention.iter().any(|c| c.q_tokens != c.kv_tokens));
        // Copies and element-wise passes over buffers of 64 KiB … 4 GiB (bytes moved: twice).
        assert_eq!(g.copy_bytes.first(), Some(&(128 << 10)));
        assert_eq!(g.copy_bytes.last(), Some(&(8 << 30)));
        assert_eq!(g.copy_bytes, g.elementwise_bytes);
        // At the prior (H200) rates the one-GPU grid takes at most 85% of its budget.
        let est = estimate_s(&g);
        let budget_s = g.budget.unwrap().seconds;
        eprintln!(
            "grid: {} GEMMs, {} attention calls, estimated {est:.1} s of {budget_s} s",
            g.gemms.len(),
            g.attention.len(),
        );
        assert!(est <= 0.85 * budget_s, "estimated {est:.1} s");
        let q = measurement_plan(1, true);
        assert!(estimate_s(&q) <= 0.85 * q.budget.unwrap().seconds);
        assert_eq!(q.units, units(1, true));
    }

    #[test]
    fn calib_cuda_units_are_llama_layers() {
        let u = units(4, false);
        assert_eq!(u.len(), 8);
        assert!(u.iter().all(|s| s.shape.d() == 128));
        assert!(u.iter().any(|s| s.shape.h == 4096 && s.shape.c() == 2048));
        // Neither layer's heads and MLP width divide by 3.
        assert!(units(3, false).is_empty());
        assert_eq!(units(8, false).len(), 8);
        for s in units(2, true) {
            s.shape.check(s.unit, s.method).unwrap();
        }
    }
}
