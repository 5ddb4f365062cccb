//! GEMM time from its shape (DESIGN §4), the way cuBLAS-like libraries run it.
//!
//! The output is cut into tiles of `T × 2T`, `2T × T` or `T × T` (T = `kernels.gemm.tile`,
//! 128 on Ampere and Hopper); one thread block computes a tile by walking k in steps of
//! `k_step`. Thread blocks run in waves over the GPU's `sm_count` SMs, one per SM:
//!
//! ```text
//! tiles    = batch · ⌈m / tm⌉ · ⌈n / tn⌉ · split
//! waves    = ⌈tiles / sm_count⌉
//! tile     = tile_s + ⌈⌈k / split⌉ / k_step⌉ · 2·tm·tn·k_step / (mma_fraction · peak / sm_count)
//! compute  = waves · tile  (+ split-K's fp32 partial sums: batch·m·n·(8·split + 2) bytes / HBM)
//! device   = max(compute, 2·batch·(mk + kn + mn) / HBM) + call_s
//! ```
//!
//! The library picks the fastest tile and split-K factor (1 to 4, each split at least four
//! k-steps deep) per shape, and so does the model. A skinny GEMM is slower per FLOP than a
//! square one of the same FLOPs because its tiles fill the last wave poorly, its short k leaves
//! `tile_s` a larger share, or it is bound by memory.

use crate::config::Hardware;
use crate::schedule::Gemm;

/// Largest split-K factor considered.
const MAX_SPLIT: u64 = 4;

/// Device seconds of one GEMM call.
pub fn device_s(hw: &Hardware, g: &Gemm) -> f64 {
    let p = &hw.kernels.gemm;
    let sms = hw.gpu.sm_count.value.max(1.0);
    let hbm = hw.gpu.hbm_bytes_per_s.value;
    let t = (p.tile.value as u64).max(1);
    let bk = (p.k_step.value as u64).max(1);
    let rate_sm = hw.gpu.peak_bf16_flops_per_s.value / sms * p.mma_fraction.value;
    let mut best = f64::INFINITY;
    for (tm, tn) in [(t, 2 * t), (2 * t, t), (t, t)] {
        let per_matrix = g.m.div_ceil(tm) as f64 * g.n.div_ceil(tn) as f64;
        let step_s = 2.0 * tm as f64 * tn as f64 * bk as f64 / rate_sm;
        for split in 1..=MAX_SPLIT {
            let k_part = g.k.div_ceil(split);
            if split > 1 && k_part < 4 * bk {
                break;
            }
            let tiles = g.batch as f64 * per_matrix * split as f64;
            let waves = (tiles / sms).ceil();
            let tile_s = p.tile_s.value + k_part.div_ceil(bk) as f64 * step_s;
            let mut time = waves * tile_s;
            if split > 1 {
                time += g.batch as f64 * g.m as f64 * g.n as f64 * (8.0 * split as f64 + 2.0) / hbm;
            }
            best = best.min(time);
        }
    }
    best.max(g.bytes() / hbm) + p.call_s.value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_hardware;

    fn gemm(m: u64, n: u64, k: u64) -> Gemm {
        Gemm { batch: 1, m, n, k }
    }

    #[test]
    fn waves_quantize_time() {
        // Without fixed costs, an output of exactly one wave of 128×256 tiles (one per SM)
        // takes one tile time t. One tile row more needs a second wave with 128×256 or
        // 256×128 tiles (2t), or three waves of 128×128 tiles of t/2 each (1.5t): the
        // library's choice, and the model's, is 1.5t.
        // (k = 448: seven k-steps, too short to split; memory made free.)
        let mut hw = load_hardware("hgx-h200").unwrap();
        hw.kernels.gemm.call_s.value = 0.0;
        hw.kernels.gemm.tile_s.value = 0.0;
        hw.gpu.hbm_bytes_per_s.value = 1e30;
        let sms = hw.gpu.sm_count.value as u64;
        let full = device_s(&hw, &gemm(128 * sms, 256, 448));
        let over = device_s(&hw, &gemm(128 * (sms + 1), 256, 448));
        assert!((over / full - 1.5).abs() < 1e-9, "{full} {over}");
    }

    #[test]
    fn split_k_helps_only_small_outputs_with_long_k() {
        let hw = load_hardware("hgx-h200").unwrap();
        // 256×256 output, k = 64k: 2–4 tiles on 132 SMs, so split-K must beat the unsplit time.
        let g = gemm(256, 256, 65536);
        let p = &hw.kernels.gemm;
        let rate_sm =
            hw.gpu.peak_bf16_flops_per_s.value / hw.gpu.sm_count.value * p.mma_fraction.value;
        let unsplit = p.tile_s.value
            + (65536.0 / p.k_step.value) * 2.0 * 128.0 * 256.0 * p.k_step.value / rate_sm
            + p.call_s.value;
        assert!(device_s(&hw, &g) < unsplit);
    }
}
