//! The clock a job of many GPUs runs its tensor-core kernels at: the slowest GPU's.
//!
//! GPUs of one model and power limit do not hold the same clock under load: silicon and the
//! power manager differ from chip to chip (Sinha et al., SC'22, "Not All GPUs Are Created
//! Equal", ~8% performance variation within one cluster). A training step synchronises every
//! GPU of its job (tensor-parallel collectives inside each layer, the pipeline's hand-offs, the
//! data-parallel reduction), so the job advances at its slowest GPU's pace. With each GPU's
//! clock a draw of `1 + spread·z`, z standard normal, the slowest of N sits at
//! `1 − spread·E[max of N standard normals]` of the typical one. The spread is the profile's
//! `kernels.gemm.fleet_clock_spread`; what a step's kernels make of the resolved fraction is
//! `cost`'s: GEMMs run at it, as they run at the profile's step clock — they are the kernels
//! that hold the power limit, where clocks differ from chip to chip (attention and copies kept
//! their clock between the H200 sessions whose GEMMs did not: `kernels.gemm.step_clock_fraction`).
//!
//! Plain numerics; depends on nothing else in the crate. Deterministic: a fixed quadrature,
//! memoised per GPU count.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The expected largest of `n` independent standard normal draws (0 for `n` ≤ 1): 0.5642 for
/// 2, 1.4236 for 8, 3.4418 for 2048, 4.87 for 2^20.
///
/// E[max] = ∫ (1 − Φ(x)ⁿ) dx over [0, ∞) − ∫ Φ(x)ⁿ dx over (−∞, 0], each half by Simpson's
/// rule on 12 standard deviations (the integrand jumps by 1 at 0). Φ(x)ⁿ is exp(n·ln Φ(x))
/// with ln Φ from the upper tail, `ln_1p(−erfc(x/√2)/2)`, so that it stays exact where Φ is
/// within 1e-16 of 1; with 384 steps of 1/32 per half the error is below 1e-8 up to 2^20 (768
/// `erfc` calls: a workload resolves it once, a plan once per candidate).
pub fn expected_max_of_normals(n: u64) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    // A plan validates thousands of candidates over a few GPU counts: each count's quadrature
    // is done once per process (a pure function, so the memo changes no result; at most
    // MEMO_MAX counts are kept).
    const MEMO_MAX: usize = 4096;
    static MEMO: OnceLock<Mutex<HashMap<u64, f64>>> = OnceLock::new();
    let memo = MEMO.get_or_init(Default::default);
    let lock = || memo.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(&e) = lock().get(&n) {
        return e;
    }
    let e = quadrature(n);
    let mut m = lock();
    if m.len() < MEMO_MAX {
        m.insert(n, e);
    }
    e
}

/// [`expected_max_of_normals`] computed, for `n` ≥ 2.
fn quadrature(n: u64) -> f64 {
    let n = n as f64;
    let ln_cdf = |x: f64| (-0.5 * libm::erfc(x / std::f64::consts::SQRT_2)).ln_1p();
    let below = |x: f64| -(n * ln_cdf(x)).exp(); // −Φⁿ on [−12, 0]
    let above = |x: f64| -(n * ln_cdf(x)).exp_m1(); // 1 − Φⁿ on [0, 12]
    const HALF_WIDTH: f64 = 12.0;
    const STEPS: u32 = 12 * 32; // per half, even for Simpson's rule
    let h = HALF_WIDTH / STEPS as f64;
    let simpson = |f: &dyn Fn(f64) -> f64, lo: f64| -> f64 {
        let mut sum = f(lo) + f(lo + HALF_WIDTH);
        for i in 1..STEPS {
            sum += if i % 2 == 1 { 4.0 } else { 2.0 } * f(lo + i as f64 * h);
        }
        sum * h / 3.0
    };
    simpson(&below, -HALF_WIDTH) + simpson(&above, 0.0)
}

/// The fraction of a fleet's typical clock the slowest of `gpus` GPUs holds when their clocks
/// spread with relative standard deviation `spread`: `1 − spread·E[max of gpus normals]`
/// (1 for one GPU or no spread). Profile validation bounds `spread` to [0, 0.1] and the tool
/// to 2^20 GPUs, where E[max] is 4.87: the fraction stays above one half.
pub fn slowest_clock_fraction(spread: f64, gpus: u64) -> f64 {
    if spread <= 0.0 || gpus <= 1 {
        return 1.0;
    }
    1.0 - spread * expected_max_of_normals(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_maxima_match_the_published_table() {
        // E[max of n standard normals] (Tippett 1925; Harter 1961's table): n = 2 is 1/√π.
        for (n, e) in [
            (2, 1.0 / std::f64::consts::PI.sqrt()),
            (3, 0.846_284),
            (5, 1.162_964),
            (8, 1.423_600),
            (10, 1.538_753),
            (100, 2.507_594),
        ] {
            let got = expected_max_of_normals(n);
            assert!((got - e).abs() < 2e-6, "n = {n}: {got} against {e}");
        }
        assert_eq!(expected_max_of_normals(1), 0.0);
        assert_eq!(expected_max_of_normals(0), 0.0);
    }

    #[test]
    fn the_slowest_of_more_gpus_is_slower_and_grows_like_the_log() {
        let mut last = 0.0;
        for k in 1..=20 {
            let e = expected_max_of_normals(1 << k);
            assert!(e > last, "2^{k}");
            // Below √(2 ln n), the extreme-value asymptote, and within a point of it.
            let asymptote = (2.0 * ((1u64 << k) as f64).ln()).sqrt();
            assert!(
                e < asymptote && e > asymptote - 1.0,
                "2^{k}: {e} vs {asymptote}"
            );
            last = e;
        }
        assert!((expected_max_of_normals(1 << 20) - 4.8723).abs() < 1e-3);
    }

    #[test]
    fn one_gpu_or_no_spread_keeps_the_clock() {
        assert_eq!(slowest_clock_fraction(0.0, 16384), 1.0);
        assert_eq!(slowest_clock_fraction(0.03, 1), 1.0);
        let f = slowest_clock_fraction(0.03, 8);
        assert!((f - (1.0 - 0.03 * 1.423_600)).abs() < 1e-6);
        assert!(slowest_clock_fraction(0.1, 1 << 20) > 0.5);
    }
}
