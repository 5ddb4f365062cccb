//! Fitting measurements to the figures of a hardware profile: the link's latency and bandwidth
//! (least squares on `t = α + n/B`), the compute slowdown under a concurrent transfer, and the
//! numerical tools the kernel model's fit uses ([`nelder_mead`]). Pure functions of the
//! numbers; the kernel model's fit itself is in [`super::kernel_fit`].

use serde::Serialize;

/// The median the fits take: the backends' own (`backend::repeat`).
pub(crate) use crate::backend::repeat::median;
use crate::error::{Error, Result};

fn calib_err(message: impl Into<String>) -> Error {
    Error::Calibration {
        message: message.into(),
    }
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

/// Minimises `f` from `x0` with the Nelder–Mead simplex (reflection 1, expansion 2,
/// contraction ½, shrink ½; initial steps `step` along each axis), until the simplex's values
/// agree within `tol` or after `max_evals` evaluations; restarted from the best point until a
/// restart no longer improves it. Deterministic. Returns the best point and its value.
pub fn nelder_mead(
    f: &dyn Fn(&[f64]) -> f64,
    x0: &[f64],
    step: f64,
    tol: f64,
    max_evals: usize,
) -> (Vec<f64>, f64) {
    let mut best = (x0.to_vec(), f(x0));
    for _ in 0..8 {
        let (x, v) = simplex_run(f, &best.0, step, tol, max_evals);
        let improved = v < best.1 - tol.max(1e-300);
        if v < best.1 {
            best = (x, v);
        }
        if !improved {
            break;
        }
    }
    best
}

fn simplex_run(
    f: &dyn Fn(&[f64]) -> f64,
    x0: &[f64],
    step: f64,
    tol: f64,
    max_evals: usize,
) -> (Vec<f64>, f64) {
    let n = x0.len();
    let mut pts: Vec<Vec<f64>> = vec![x0.to_vec()];
    for i in 0..n {
        let mut x = x0.to_vec();
        x[i] += step;
        pts.push(x);
    }
    let mut vals: Vec<f64> = pts.iter().map(|p| f(p)).collect();
    let mut evals = n + 1;
    let at = |c: &[f64], far: &[f64], t: f64| -> Vec<f64> {
        c.iter().zip(far).map(|(a, b)| a + t * (b - a)).collect()
    };
    while evals < max_evals {
        let mut order: Vec<usize> = (0..=n).collect();
        order.sort_by(|&a, &b| vals[a].total_cmp(&vals[b]).then(a.cmp(&b)));
        pts = order.iter().map(|&i| pts[i].clone()).collect();
        vals = order.iter().map(|&i| vals[i]).collect();
        if (vals[n] - vals[0]).abs() <= tol {
            break;
        }
        let centroid: Vec<f64> = (0..n)
            .map(|j| pts[..n].iter().map(|p| p[j]).sum::<f64>() / n as f64)
            .collect();
        let xr = at(&centroid, &pts[n], -1.0);
        let fr = f(&xr);
        evals += 1;
        if fr < vals[0] {
            let xe = at(&centroid, &pts[n], -2.0);
            let fe = f(&xe);
            evals += 1;
            if fe < fr {
                (pts[n], vals[n]) = (xe, fe);
            } else {
                (pts[n], vals[n]) = (xr, fr);
            }
        } else if fr < vals[n - 1] {
            (pts[n], vals[n]) = (xr, fr);
        } else {
            let xc = at(&centroid, &pts[n], 0.5);
            let fc = f(&xc);
            evals += 1;
            if fc < vals[n] {
                (pts[n], vals[n]) = (xc, fc);
            } else {
                for i in 1..=n {
                    pts[i] = at(&pts[0], &pts[i], 0.5);
                    vals[i] = f(&pts[i]);
                }
                evals += n;
            }
        }
    }
    let i = (0..=n)
        .min_by(|&a, &b| vals[a].total_cmp(&vals[b]).then(a.cmp(&b)))
        .unwrap_or(0);
    (pts[i].clone(), vals[i])
}

/// Levenberg–Marquardt least squares of the residuals `r(x)` from `x0`, each parameter kept in
/// its range `bounds[k]` (`x0` is clamped into it): Jacobian by central differences of step
/// `h` (in the parameters' own scale; a step of 10⁻³ on log-scaled parameters smooths over the
/// kinks a tile or wave count leaves in the model; one-sided, inside the range, at an edge),
/// damping adapted step by step, at most `max_iter` iterations. A parameter at an edge whose
/// gradient points out of the range is held there for the step (the step is solved for the
/// others); every step is projected into the ranges. With no parameter at an edge this is the
/// plain, unbounded method. Deterministic. Returns the parameters and the final sum of
/// squares.
pub fn levenberg_marquardt(
    r: &dyn Fn(&[f64]) -> Vec<f64>,
    x0: &[f64],
    bounds: &[(f64, f64)],
    h: f64,
    max_iter: usize,
) -> (Vec<f64>, f64) {
    assert_eq!(x0.len(), bounds.len(), "one range per parameter");
    let ss = |v: &[f64]| v.iter().map(|e| e * e).sum::<f64>();
    let project = |x: &mut [f64]| {
        for (v, &(lo, hi)) in x.iter_mut().zip(bounds) {
            *v = v.clamp(lo, hi);
        }
    };
    let n = x0.len();
    let mut x = x0.to_vec();
    project(&mut x);
    let mut rx = r(&x);
    let mut cost = ss(&rx);
    if n == 0 || !cost.is_finite() {
        return (x, cost);
    }
    let mut lambda = 1e-3;
    for _ in 0..max_iter {
        let m = rx.len();
        let mut j = nalgebra::DMatrix::<f64>::zeros(m, n);
        for k in 0..n {
            let (lo, hi) = bounds[k];
            let (mut up, mut dn) = (x.clone(), x.clone());
            up[k] += h;
            dn[k] -= h;
            // Inside the range: the plain central difference; at an edge, the points inside.
            let width = if up[k] <= hi && dn[k] >= lo {
                2.0 * h
            } else {
                up[k] = up[k].min(hi);
                dn[k] = dn[k].max(lo);
                up[k] - dn[k]
            };
            if width <= 0.0 {
                continue;
            }
            let (a, b) = (r(&up), r(&dn));
            for i in 0..m {
                j[(i, k)] = (a[i] - b[i]) / width;
            }
        }
        let jt = j.transpose();
        let a = &jt * &j;
        let g = &jt * nalgebra::DVector::from_column_slice(&rx);
        // Parameters held at an edge this step: descent (−g) would leave the range.
        let free: Vec<usize> = (0..n)
            .filter(|&k| {
                let (lo, hi) = bounds[k];
                !((x[k] <= lo && g[k] > 0.0) || (x[k] >= hi && g[k] < 0.0))
            })
            .collect();
        if free.is_empty() {
            break;
        }
        let (a, g) = if free.len() == n {
            (a, g)
        } else {
            (
                nalgebra::DMatrix::from_fn(free.len(), free.len(), |p, q| a[(free[p], free[q])]),
                nalgebra::DVector::from_fn(free.len(), |p, _| g[free[p]]),
            )
        };
        let mut accepted = false;
        while lambda < 1e12 {
            let mut damped = a.clone();
            for k in 0..free.len() {
                damped[(k, k)] += lambda * a[(k, k)].max(1e-12);
            }
            let Some(step) = damped.lu().solve(&(-&g)) else {
                lambda *= 4.0;
                continue;
            };
            let mut xn = x.clone();
            for (p, &k) in free.iter().enumerate() {
                xn[k] += step[p];
            }
            project(&mut xn);
            let rn = r(&xn);
            let cn = ss(&rn);
            if cn.is_finite() && cn < cost {
                let gain = cost - cn;
                x = xn;
                rx = rn;
                cost = cn;
                lambda = (lambda / 3.0).max(1e-12);
                accepted = gain > 1e-12 * cost.max(1e-300);
                break;
            }
            lambda *= 4.0;
        }
        if !accepted {
            break;
        }
    }
    (x, cost)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calib_levenberg_marquardt_stays_in_its_ranges() {
        // r = e^(−x0) (driven to +∞) and x1 − 3 (an optimum inside): x0 stops at its upper
        // edge, x1 is still fitted, and a start outside the ranges is brought in.
        let r = |x: &[f64]| vec![(-x[0]).exp(), x[1] - 3.0];
        let (x, _) = levenberg_marquardt(&r, &[0.0, 0.0], &[(-1.0, 5.0), (-10.0, 10.0)], 1e-3, 200);
        assert_eq!(x[0], 5.0, "{x:?}");
        assert!((x[1] - 3.0).abs() < 1e-6, "{x:?}");
        let (x, _) =
            levenberg_marquardt(&r, &[9.0, 20.0], &[(-1.0, 5.0), (-10.0, 10.0)], 1e-3, 200);
        assert!(x[0] <= 5.0 && (x[1] - 3.0).abs() < 1e-6, "{x:?}");
        // Unbounded ranges: the plain method.
        let inf = (f64::NEG_INFINITY, f64::INFINITY);
        let (x, _) = levenberg_marquardt(&r, &[0.0, 0.0], &[inf, inf], 1e-3, 200);
        assert!(x[0] > 5.0 && (x[1] - 3.0).abs() < 1e-6, "{x:?}");
    }

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
    fn nelder_mead_finds_the_minimum_of_a_valley() {
        // Rosenbrock's valley, minimum 0 at (1, 1).
        let f = |x: &[f64]| (1.0 - x[0]).powi(2) + 100.0 * (x[1] - x[0] * x[0]).powi(2);
        let (x, v) = nelder_mead(&f, &[-1.2, 1.0], 0.5, 1e-20, 20_000);
        assert!(v < 1e-12, "{v}");
        assert!(
            (x[0] - 1.0).abs() < 1e-5 && (x[1] - 1.0).abs() < 1e-5,
            "{x:?}"
        );
    }

    #[test]
    fn calib_slowdown_is_median_ratio_clamped() {
        assert!((slowdown(&[(1.0, 1.1), (1.0, 1.3), (1.0, 1.2)]).unwrap() - 0.2).abs() < 1e-12);
        assert_eq!(slowdown(&[(1.0, 0.9)]).unwrap(), 0.0);
        assert_eq!(slowdown(&[(1.0, 3.0)]).unwrap(), 0.95);
    }
}
