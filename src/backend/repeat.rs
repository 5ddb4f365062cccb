//! How a backend times a call: untimed warm-ups, then timed repetitions — as many as make
//! ~30 ms of calls (the CUDA backend; `calibrate::budget` estimates a measurement's cost from
//! the same policy) — and the median of them (every backend, and the fits' robust statistics).
//! Depends on nothing.

/// Timed repetitions of a call that takes `call_s`: enough for ~30 ms of calls (10 ms quick),
/// at least 3, at most 25.
pub fn repetitions(call_s: f64, quick: bool) -> usize {
    let target = if quick { 0.01 } else { 0.03 };
    if !(call_s.is_finite() && call_s > 0.0) {
        return 3;
    }
    ((target / call_s).ceil() as usize).clamp(3, 25)
}

/// Untimed warm-up calls before the repetitions: 2 for calls under 1 ms, else 1.
pub fn warmups(call_s: f64) -> usize {
    if call_s < 1e-3 {
        2
    } else {
        1
    }
}

/// Median (sorts in place; mean of the middle two for an even count).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calib_repetitions_shrink_for_long_calls() {
        assert_eq!(repetitions(1e-5, false), 25);
        assert_eq!(repetitions(2e-3, false), 15);
        assert_eq!(repetitions(0.5, false), 3);
        assert_eq!(repetitions(f64::NAN, false), 3);
        assert_eq!(warmups(1e-4), 2);
        assert_eq!(warmups(1e-2), 1);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }
}
