//! GEMM time from its shape (DESIGN §4), the way cuBLAS-like libraries run it.
//!
//! The output is cut into tiles of `T × 2T`, `2T × T` or `T × T` (T = `kernels.gemm.tile`,
//! 128 on Ampere and Hopper); one thread block computes a tile by walking k in steps of
//! `k_step`. Thread blocks run in waves over the GPU's `sm_count` SMs, one per SM:
//!
//! ```text
//! tiles    = batch · ⌈m / tm⌉ · ⌈n / tn⌉ · split
//! waves    = ⌈tiles / sm_count⌉
//! step     = 2·tm·tn·k_step / (mma_fraction · peak / sm_count)
//! tile     = tile_s + ⌈⌈k / split⌉ / k_step⌉ · step
//! waves    = waves · tile  (+ split-K's fp32 partial sums: batch·m·n·(8·split + 2) bytes / HBM)
//! stream-K = ⌈batch·⌈m/tm⌉·⌈n/tn⌉·⌈k/k_step⌉ / sm_count⌉ · step + 2·tile_s + batch·m·n·8 / HBM
//! boost    = the fastest of these over the tile shapes and split-K factors (stream-K only
//!            where the profile's `stream_k` is 1 and the tiles do not fill whole waves)
//! capped   = 2·batch·m·n·k / (power_fraction · peak)            (the power plateau)
//! compute  = boost + (capped − boost) · boost / (boost + power_time_s)   if capped > boost
//!          = boost                                                      otherwise
//! device   = max(compute, 2·batch·(mk + kn + mn) / HBM) + call_s
//! ```
//!
//! The library picks the fastest tile, split-K factor (1 to 4, each split at least four
//! k-steps deep) or stream-K decomposition per shape, and so does the model. A skinny GEMM is
//! slower per FLOP than a square one of the same FLOPs because its tiles fill the last wave
//! poorly (stream-K recovers part of that, at the cost of its fix-up), its short k leaves
//! `tile_s` a larger share, or it is bound by memory. A long GEMM at full tile rate draws more
//! than the GPU's power limit allows, and the clock falls until the rate is `power_fraction`
//! of the peak: a call of boost time `T` runs at the tile rate for about `power_time_s`
//! (the power controller's response) and at the capped rate after it, which the last line
//! interpolates smoothly (the H200 measurements: ~800 TFLOP/s for ~1 ms GEMMs, ~690 for
//! 5 ms ones).
//!
//! FP8 GEMMs (the layers' linear GEMMs under `--linear-dtype fp8`) run the same model at the
//! FP8 peak with their own two fractions ([`peak_flops_per_s`], `device_at_clock_s`). A share
//! of a GEMM (`Gemm::parts` > 1) costs the whole call's time over its shares.
//!
//! Those figures are fitted to calls timed in short bursts (ten calls after three warm-ups),
//! which is what [`device_s`] prices. Inside a training step GEMMs run back to back for
//! seconds, and the clock they hold there is the profile's `step_clock_fraction` of the
//! calibrated one ([`step_device_s`]: the tensor-core peak, and so the tile rate and the power
//! plateau, scaled by it; memory traffic and the fixed call time are not) — in a job of many
//! GPUs, the slowest GPU's share of it (`config::fleet`), since the job waits for that GPU.

use crate::config::{Hardware, LinearDtype};
use crate::schedule::{Gemm, GemmDtype};

/// Largest split-K factor considered.
const MAX_SPLIT: u64 = 4;

/// Device seconds of one GEMM call at the calibrated clock (a call timed alone).
pub fn device_s(hw: &Hardware, g: &Gemm) -> f64 {
    device_at_clock_s(hw, g, 1.0)
}

/// Device seconds of one GEMM call inside a training step: at the profile's
/// `step_clock_fraction` of the calibrated clock (1 when the profile has none).
pub fn step_device_s(hw: &Hardware, g: &Gemm) -> f64 {
    device_at_clock_s(hw, g, step_clock_fraction(hw))
}

/// The fraction of the calibrated clock GEMMs hold in a training step: the profile's step
/// clock, times the share of it the job's slowest GPU holds ([`job_clock_fraction`]).
pub fn step_clock_fraction(hw: &Hardware) -> f64 {
    hw.kernels
        .gemm
        .step_clock_fraction
        .as_ref()
        .map_or(1.0, |f| f.value)
        * job_clock_fraction(hw)
}

/// The share of the step clock the slowest GPU of the job being evaluated holds
/// (`config::fleet`, resolved by the workload from the profile's `fleet_clock_spread`): 1 for a
/// profile on its own or a call timed alone.
pub fn job_clock_fraction(hw: &Hardware) -> f64 {
    hw.kernels.gemm.job_clock_fraction.unwrap_or(1.0)
}

/// The dense tensor-core peak for `dtype`'s operands ([`Hardware::peak_flops_per_s`]: the
/// bf16 one where the profile has no FP8 peak; validation refuses FP8 training there).
pub fn peak_flops_per_s(hw: &Hardware, dtype: GemmDtype) -> f64 {
    hw.peak_flops_per_s(linear_dtype(dtype))
}

/// The linear layers' dtype whose GEMMs have operands of `dtype`.
pub fn linear_dtype(dtype: GemmDtype) -> LinearDtype {
    match dtype {
        GemmDtype::Bf16 => LinearDtype::Bf16,
        GemmDtype::Fp8 => LinearDtype::Fp8,
    }
}

/// Device seconds of one GEMM call with the tensor-core peak at `clock` × the profile's.
///
/// FP8 runs the same tiles at its own peak with k-steps twice as deep in elements (one byte
/// per operand element: the same bytes staged per step, as Hopper's FP8 kernels take k = 128
/// where bf16 ones take 64), reaching the profile's `kernels.gemm.fp8` fractions of that peak
/// inside a tile and at the power cap; without them, the bf16 fractions. On H100 they are
/// fitted to FP8 calls timed after thousands of warm-up calls, so to the step-clock price
/// ([`step_device_s`]): a tile reaches 0.835 of its FP8 peak (bf16 0.91) and the plateau sits
/// at 0.795 of it (bf16 0.73) at the calibrated clock.
fn device_at_clock_s(hw: &Hardware, g: &Gemm, clock: f64) -> f64 {
    if g.parts > 1 {
        // One share of a GEMM that runs whole (`Gemm::parts`): the whole call's time, shared.
        let whole = Gemm { parts: 1, ..*g };
        return device_at_clock_s(hw, &whole, clock) * g.share_fraction();
    }
    let p = &hw.kernels.gemm;
    let sms = hw.gpu.sm_count.value.max(1.0);
    let hbm = hw.gpu.hbm_bytes_per_s.value;
    let peak = peak_flops_per_s(hw, g.dtype) * clock;
    let t = (p.tile.value as u64).max(1);
    let depth = match g.dtype {
        GemmDtype::Bf16 => 1,
        GemmDtype::Fp8 => 2,
    };
    let bk = (p.k_step.value as u64).max(1) * depth;
    let fp8 = p.fp8.as_ref().filter(|_| g.dtype == GemmDtype::Fp8);
    let mma = fp8.map_or(p.mma_fraction.value, |f| f.mma_fraction.value);
    let rate_sm = peak / sms * mma;
    let stream_k = p.stream_k.as_ref().is_some_and(|f| f.value == 1.0);
    let batch = g.batch as f64;
    let mn = batch * g.m as f64 * g.n as f64;
    let mut best = f64::INFINITY;
    for (tm, tn) in [(t, 2 * t), (2 * t, t), (t, t)] {
        let per_matrix = g.m.div_ceil(tm) as f64 * g.n.div_ceil(tn) as f64;
        let step_s = 2.0 * tm as f64 * tn as f64 * bk as f64 / rate_sm;
        for split in 1..=MAX_SPLIT {
            let k_part = g.k.div_ceil(split);
            if split > 1 && k_part < 4 * bk {
                break;
            }
            let tiles = batch * per_matrix * split as f64;
            let waves = (tiles / sms).ceil();
            let tile_s = p.tile_s.value + k_part.div_ceil(bk) as f64 * step_s;
            let mut time = waves * tile_s;
            if split > 1 {
                time += mn * (8.0 * split as f64 + 2.0) / hbm;
            }
            best = best.min(time);
        }
        let tiles = batch * per_matrix;
        if stream_k && (tiles / sms).fract() != 0.0 {
            let iterations = tiles * g.k.div_ceil(bk) as f64;
            let time = (iterations / sms).ceil() * step_s + 2.0 * p.tile_s.value + mn * 8.0 / hbm;
            best = best.min(time);
        }
    }
    let compute = match (&p.power_fraction, &p.power_time_s) {
        (Some(fraction), Some(tau)) => {
            let fraction = fp8
                .and_then(|f| f.power_fraction.as_ref())
                .map_or(fraction.value, |p| p.value);
            let capped = g.flops() / (peak * fraction);
            if capped > best {
                best + (capped - best) * best / (best + tau.value)
            } else {
                best
            }
        }
        _ => best,
    };
    compute.max(g.bytes() / hbm) + p.call_s.value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_hardware;

    fn gemm(m: u64, n: u64, k: u64) -> Gemm {
        Gemm::bf16(1, m, n, k)
    }

    #[test]
    fn a_share_costs_the_whole_call_over_its_parts() {
        // A GEMM run whole and priced in shares (`Gemm::parts`): each share is the whole call's
        // time (burst and step clock alike, its fixed call time included once in all) over the
        // shares, and carries that part of its FLOPs and bytes — not the price of a GEMM on a
        // p-th of the tokens, which differs.
        let hw = load_hardware("dgx-h100").unwrap();
        let whole = gemm(16384, 13312, 4096);
        let share = whole.share(8);
        for price in [device_s, step_device_s] {
            assert!((8.0 * price(&hw, &share) / price(&hw, &whole) - 1.0).abs() < 1e-12);
        }
        assert!((8.0 * share.flops() / whole.flops() - 1.0).abs() < 1e-12);
        assert!((8.0 * share.bytes() / whole.bytes() - 1.0).abs() < 1e-12);
        let chunk = gemm(16384, 13312, 4096 / 8);
        assert!(8.0 * step_device_s(&hw, &chunk) > 1.1 * step_device_s(&hw, &whole));
        assert_eq!(whole.share(0), whole, "no shares is the whole call");
    }

    #[test]
    fn waves_quantize_time() {
        // Without fixed costs, an output of exactly one wave of 128×256 tiles (one per SM)
        // takes one tile time t. One tile row more needs a second wave with 128×256 or
        // 256×128 tiles (2t), or three waves of 128×128 tiles of t/2 each (1.5t): the
        // library's choice, and the model's, is 1.5t.
        // (k = 448: seven k-steps, too short to split; memory made free; no stream-K, no power
        // cap.)
        let mut hw = load_hardware("hgx-h200").unwrap();
        hw.kernels.gemm.stream_k = None;
        hw.kernels.gemm.power_fraction = None;
        hw.kernels.gemm.power_time_s = None;
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

    #[test]
    fn long_gemms_fall_to_the_power_plateau() {
        // Derivation: with boost time T and capped time C = flops / (power_fraction · peak),
        // compute = T + (C − T)·T/(T + τ): a call far shorter than τ runs at the tile rate, a
        // call far longer at the capped rate. Fixed costs and memory made negligible.
        let mut hw = load_hardware("hgx-h200").unwrap();
        hw.kernels.gemm.call_s.value = 0.0;
        hw.kernels.gemm.tile_s.value = 0.0;
        hw.gpu.hbm_bytes_per_s.value = 1e30;
        let f = hw.kernels.gemm.power_fraction.as_ref().unwrap().value;
        let peak = hw.gpu.peak_bf16_flops_per_s.value;
        let rate = |hw: &Hardware, g: &Gemm| g.flops() / device_s(hw, g);
        let small = gemm(1024 * 4, 2048 * 4, 512);
        let huge = gemm(128 * 132 * 8, 256 * 64, 65536);
        assert!(rate(&hw, &small) > 1.05 * f * peak, "{}", rate(&hw, &small));
        assert!(
            (rate(&hw, &huge) / (f * peak) - 1.0).abs() < 0.02,
            "{}",
            rate(&hw, &huge)
        );
        hw.kernels.gemm.power_fraction = None;
        hw.kernels.gemm.power_time_s = None;
        assert!(rate(&hw, &huge) > 1.05 * f * peak);
    }

    #[test]
    fn stream_k_spreads_a_partial_wave() {
        // 133 tiles of 128×256 with k = 64 k-steps: whole tiles need two waves, 128×128 tiles
        // three half-size waves (1.5 tile times) and split-K pays its partial sums; stream-K
        // shares 133·64 k-steps evenly over 132 SMs (65 steps, ~1.0 tile time) plus two fixed
        // tile times and the fix-up — faster when the profile allows it.
        let mut hw = load_hardware("hgx-h200").unwrap();
        hw.kernels.gemm.power_fraction = None;
        hw.kernels.gemm.power_time_s = None;
        let g = gemm(128 * 133, 256, 64 * 64);
        let with = device_s(&hw, &g);
        hw.kernels.gemm.stream_k = None;
        let without = device_s(&hw, &g);
        assert!(with < 0.85 * without, "{with} {without}");
    }

    #[test]
    fn a_step_runs_gemms_at_the_step_clock_and_a_lone_call_at_the_calibrated_one() {
        // Compute-bound: every compute term scales with 1/clock, the fixed call time does not;
        // bound by memory (a vector times a matrix): the clock does not matter.
        // (Only the tensor-core rate scales: the per-tile fixed time, split-K's and stream-K's
        // memory traffic and the power cap's response time do not, so 1/clock within a few
        // per cent, closer without the cap.)
        let hw = load_hardware("hgx-h200").unwrap();
        let f = step_clock_fraction(&hw);
        assert!(f > 0.8 && f < 0.9, "{f}");
        let call = hw.kernels.gemm.call_s.value;
        let big = gemm(8192, 8192, 8192);
        let ratio = |hw: &Hardware| (step_device_s(hw, &big) - call) / (device_s(hw, &big) - call);
        assert!((ratio(&hw) * f - 1.0).abs() < 0.03, "{}", ratio(&hw));
        let mut uncapped = hw.clone();
        uncapped.kernels.gemm.power_fraction = None;
        uncapped.kernels.gemm.power_time_s = None;
        assert!(
            (ratio(&uncapped) * f - 1.0).abs() < 0.01,
            "{}",
            ratio(&uncapped)
        );
        assert!(ratio(&uncapped) > 1.0 && ratio(&hw) > 1.0);
        let thin = gemm(1, 16384, 16384);
        assert_eq!(device_s(&hw, &thin), step_device_s(&hw, &thin));
        // The cost model: a step's kernel price takes the step clock, a call timed alone not.
        let cost = crate::cost::CostModel::new(&hw);
        let k = crate::schedule::KernelShape::Gemm(big);
        assert!(cost.kernel_s(&k) > cost.short_run_kernel_s(&k));
        assert_eq!(cost.short_run_kernel_s(&k), cost.device_s(&k));
        // Without the figure, both are the calibrated clock.
        let mut plain = hw.clone();
        plain.kernels.gemm.step_clock_fraction = None;
        assert_eq!(step_device_s(&plain, &big), device_s(&plain, &big));
    }
}
