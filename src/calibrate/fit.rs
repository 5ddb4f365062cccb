//! Fitting measurements to the figures of a hardware profile: efficiency tables (size →
//! fraction of a fitted peak), link latency and bandwidth (least squares on `t = α + n/B`), and
//! the compute slowdown under a concurrent transfer. Pure functions of the numbers.

use serde::Serialize;

use super::measure::Measurements;
use crate::error::{Error, Result};

fn calib_err(message: impl Into<String>) -> Error {
    Error::Calibration {
        message: message.into(),
    }
}

/// An efficiency table fitted from `(size, achieved rate)` points.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EfficiencyFit {
    /// The fitted peak: the best rate achieved over all points.
    pub peak: f64,
    /// `(size, rate / peak)` sorted by size; equal sizes (within 0.1%) averaged.
    pub points: Vec<(f64, f64)>,
}

/// Fits an efficiency table: the peak is the best achieved rate (so the best point has fraction
/// 1), each point's fraction is its rate over that peak. Sizes that agree within 0.1% are
/// merged (their rates averaged) so that the sizes increase strictly, as the profile requires.
pub fn efficiency(what: &str, samples: &[(f64, f64)]) -> Result<EfficiencyFit> {
    let mut pts: Vec<(f64, f64)> = samples.to_vec();
    if pts.is_empty() {
        return Err(calib_err(format!("{what}: no measurements")));
    }
    for &(size, rate) in &pts {
        if !(size.is_finite() && size > 0.0 && rate.is_finite() && rate > 0.0) {
            return Err(calib_err(format!(
                "{what}: bad measurement (size {size}, rate {rate})"
            )));
        }
    }
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64, usize)> = Vec::new();
    for (size, rate) in pts {
        match merged.last_mut() {
            Some((s, r, n)) if (size - *s).abs() <= 1e-3 * *s => {
                *r += rate;
                *n += 1;
            }
            _ => merged.push((size, rate, 1)),
        }
    }
    let rates: Vec<(f64, f64)> = merged
        .into_iter()
        .map(|(s, r, n)| (s, r / n as f64))
        .collect();
    let peak = rates.iter().map(|&(_, r)| r).fold(0.0, f64::max);
    Ok(EfficiencyFit {
        peak,
        points: rates.iter().map(|&(s, r)| (s, r / peak)).collect(),
    })
}

/// Ordinary least squares `y = a + b·x`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Line {
    /// Intercept a.
    pub intercept: f64,
    /// Slope b.
    pub slope: f64,
    /// Coefficient of determination.
    pub r2: f64,
}

/// Least-squares line through `(x, y)` points (at least two distinct x).
pub fn line(points: &[(f64, f64)]) -> Result<Line> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return Err(calib_err("a line fit needs at least two points"));
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    if sxx <= 0.0 {
        return Err(calib_err("a line fit needs at least two distinct sizes"));
    }
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let r2 = if syy > 0.0 {
        (sxy * sxy) / (sxx * syy)
    } else {
        1.0
    };
    Ok(Line {
        intercept,
        slope,
        r2,
    })
}

/// A link's `α + n/B` fitted from `(bytes, seconds)` messages.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinkFit {
    /// α: seconds per message (the intercept; clamped at 0 when noise makes it negative).
    pub latency_s: f64,
    /// B: bytes per second (1 / slope).
    pub bytes_per_s: f64,
    /// The raw intercept before clamping.
    pub raw_intercept_s: f64,
    /// Coefficient of determination of the fit.
    pub r2: f64,
}

/// Fits `t = α + n/B` by least squares over `(bytes, seconds)`.
pub fn link(samples: &[(f64, f64)]) -> Result<LinkFit> {
    let l = line(samples)?;
    if !(l.slope > 0.0 && l.slope.is_finite()) {
        return Err(calib_err(format!(
            "link: transfer time does not grow with size (slope {} s/byte); the measurements are \
             dominated by noise — use larger sizes",
            l.slope
        )));
    }
    Ok(LinkFit {
        latency_s: l.intercept.max(0.0),
        bytes_per_s: 1.0 / l.slope,
        raw_intercept_s: l.intercept,
        r2: l.r2,
    })
}

/// Slowdown fraction from samples: median over samples of `with/alone − 1`, clamped to
/// [0, 0.95] (the profile requires [0, 1); a speed-up under noise counts as 0).
pub fn slowdown(samples: &[(f64, f64)]) -> Result<f64> {
    let mut r: Vec<f64> = samples
        .iter()
        .filter(|(a, w)| *a > 0.0 && w.is_finite())
        .map(|(a, w)| w / a - 1.0)
        .collect();
    if r.is_empty() {
        return Err(calib_err("slowdown: no valid measurements"));
    }
    Ok(median(&mut r).clamp(0.0, 0.95))
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
    fn calib_line_recovers_exact_parameters() {
        // t = 5 µs + n / 2 GB/s, exactly.
        let pts: Vec<(f64, f64)> = [1e3, 1e4, 1e5, 1e6]
            .iter()
            .map(|&n| (n, 5e-6 + n / 2e9))
            .collect();
        let f = link(&pts).unwrap();
        assert!((f.latency_s / 5e-6 - 1.0).abs() < 1e-9, "{f:?}");
        assert!((f.bytes_per_s / 2e9 - 1.0).abs() < 1e-9, "{f:?}");
        assert!((f.r2 - 1.0).abs() < 1e-12);
    }

    #[test]
    fn calib_link_rejects_flat_or_decreasing_times() {
        assert!(link(&[(1.0, 2.0), (2.0, 1.0)]).is_err());
        assert!(link(&[(1.0, 1.0)]).is_err());
        // Negative intercept is clamped, the raw value kept.
        let f = link(&[(1.0, 0.5), (2.0, 1.5)]).unwrap();
        assert_eq!(f.latency_s, 0.0);
        assert!(f.raw_intercept_s < 0.0);
    }

    #[test]
    fn calib_efficiency_normalises_to_best_and_merges_equal_sizes() {
        let f = efficiency("gemm", &[(4.0, 2.0), (1.0, 1.0), (4.0, 4.0), (16.0, 6.0)]).unwrap();
        assert_eq!(f.peak, 6.0);
        assert_eq!(f.points, vec![(1.0, 1.0 / 6.0), (4.0, 0.5), (16.0, 1.0)]);
        assert!(efficiency("gemm", &[]).is_err());
        assert!(efficiency("gemm", &[(1.0, 0.0)]).is_err());
    }

    #[test]
    fn calib_slowdown_is_median_ratio_clamped() {
        assert!((slowdown(&[(1.0, 1.1), (1.0, 1.3), (1.0, 1.2)]).unwrap() - 0.2).abs() < 1e-12);
        assert_eq!(slowdown(&[(1.0, 0.9)]).unwrap(), 0.0);
        assert_eq!(slowdown(&[(1.0, 3.0)]).unwrap(), 0.95);
    }
}

/// The fitted figures.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Fits {
    /// GEMM rates (FLOP/s) by FLOPs of one call; `peak` is the profile's peak.
    pub gemm: EfficiencyFit,
    /// Attention-block rates by FLOPs of one call, as fractions of the GEMM table's peak.
    pub attention: EfficiencyFit,
    /// Element-wise rates (bytes/s) by bytes moved.
    pub elementwise: EfficiencyFit,
    /// Point-to-point link.
    pub link: LinkFit,
    /// Compute slowdown under a concurrent transfer.
    pub slowdown_fraction: f64,
}

/// Fits every figure from the measurements. The peak is the best FLOP rate over GEMMs and
/// attention blocks (so no fraction exceeds 1).
pub fn fit_all(m: &Measurements) -> Result<Fits> {
    let gemm_rates: Vec<(f64, f64)> = m
        .gemm
        .iter()
        .map(|t| (t.what.flops(), t.what.flops() / t.seconds))
        .collect();
    let attn_rates: Vec<(f64, f64)> = m
        .attention
        .iter()
        .map(|t| {
            let flops = t.what.0.flops(t.what.1);
            (flops, flops / t.seconds)
        })
        .collect();
    let gemm = efficiency("gemm", &gemm_rates)?;
    let attention = efficiency("attention", &attn_rates)?;
    let peak = gemm.peak.max(attention.peak);
    let rescale = |f: EfficiencyFit| EfficiencyFit {
        points: f
            .points
            .iter()
            .map(|&(s, e)| (s, e * f.peak / peak))
            .collect(),
        peak,
    };
    let ew_rates: Vec<(f64, f64)> = m
        .elementwise
        .iter()
        .map(|t| (t.what as f64, t.what as f64 / t.seconds))
        .collect();
    let copy_rate = m
        .copies
        .iter()
        .map(|t| t.what as f64 / t.seconds)
        .fold(0.0, f64::max);
    let ew = efficiency("elementwise", &ew_rates)?;
    // Fractions of the memory bandwidth: the best copy (or the best element-wise kernel, if
    // that was faster or no copy was measured).
    let hbm = copy_rate.max(ew.peak);
    let elementwise = EfficiencyFit {
        points: ew
            .points
            .iter()
            .map(|&(s, e)| (s, e * ew.peak / hbm))
            .collect(),
        peak: hbm,
    };
    let link_pts: Vec<(f64, f64)> = m
        .transfers
        .iter()
        .map(|t| (t.what as f64, t.seconds))
        .collect();
    let slow: Vec<(f64, f64)> = m
        .slowdown
        .iter()
        .map(|s| (s.alone_s, s.with_transfer_s))
        .collect();
    Ok(Fits {
        gemm: rescale(gemm),
        attention: rescale(attention),
        elementwise,
        link: link(&link_pts)?,
        slowdown_fraction: slowdown(&slow)?,
    })
}
