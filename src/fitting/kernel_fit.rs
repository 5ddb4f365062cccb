//! The one fit: [`fit_profile`] turns a file of kernel measurements and a base hardware profile
//! into a fitted profile. Every backend measures into [`KernelMeasurements`] and comes here;
//! `metp-sim calibrate --fit FILE --base PROFILE` calls it on a file alone.
//!
//! What is fitted, kind by kind, from that kind's samples (each priced as the file's timing
//! says: an isolated call, or the device alone):
//! - memory-bound kernels (copies, element-wise passes): `gpu.hbm_bytes_per_s`,
//!   `kernels.memory.{latency_s, elementwise_fraction}`, and for isolated timings the host's
//!   `isolated_gap_s` and `isolated_floor_s`;
//! - GEMMs: `kernels.gemm.{mma_fraction, tile_s, call_s, power_fraction, power_time_s}` — and,
//!   when the file joins GEMMs of several measurement sessions (`session`, numbered by
//!   `gpu-check merge`), one clock factor per later session ([`SessionFactor`]: its GEMMs are
//!   priced at factor × the tensor-core peak), each searched by golden section on its log
//!   with the GEMM parameters refitted at every trial. The profile is the first session's
//!   clock; the factors are reported, never written into it. (Two H200 sessions timed the same
//!   square GEMMs 15–21% apart while their attention calls and copies agreed within 5%.)
//! - attention forward and backward: `kernels.attention_*.{mma_fraction, tile_s, call_s,
//!   extra_bytes_per_element, isolated_extra_s}` (the last only for isolated timings);
//! - the host's time per eager op, when the file has `eager_op_s`; the SM count, when it has
//!   `sm_count`; the intra-node link from `p2p` messages and collectives (`link_fit`); the
//!   overlap slowdown from `overlap` samples. Everything else is kept from the base.
//!
//! A parameter whose base value is 0 is a term the profile leaves out and stays 0. The fit is
//! least squares on the log of predicted over measured time. A first pass moves every
//! parameter of the kind with a weak pull (weight [`PRIOR_WEIGHT`] on the squared log ratio)
//! towards its base value; there the Jacobian tells which parameters the data determines on
//! its own — whose effect on the predictions is not (nearly) a combination of the others'
//! (leave-one-out residual of its column at least [`DETERMINED_RESIDUAL`]). The final fit,
//! without the pull, moves those freely; the others, which the data fixes only in
//! combination, all start from their base values and scale by one common factor (each of their
//! terms of the time × s), so the base's proportions between them are kept and a refit from
//! the result gives the result again. Their sources say so. (When every attention call of a
//! file has the same batch × tokens × heads — the shared H200 file — a per-call time, a
//! per-block time and per-element bytes all act as one constant.) Deterministic: a fixed
//! simplex search, no randomness.
//!
//! Every parameter is searched, on its own scale, only inside the range its profile figure may
//! take (rates within `PROFILE_RATE_RANGE`, times and byte counts from 1e-9 to below
//! `MAX_KERNEL_FIGURE`, fractions within 1e-9 of (0, 1)), and so is the link's fit: the fit
//! never produces a profile that validation refuses. A parameter (or a joint group's common
//! factor) with which the fit is no worse at an edge of that range than where the search
//! stopped is not determined by the data — e.g. a bandwidth that latency-bound copies drive
//! upwards without limit, since its term vanishes: it is held at that edge, its status is
//! [`Status::Unbounded`] and its source says so. (One without effect at the first stage's
//! value, not at an edge, keeps that value, as above.)

use serde::Serialize;

use super::fit::{self, LinkFit};
use super::fit_params::{figure_mut, groups, Scale};
use super::measurements::{KernelMeasurements, Sample, Timing};
use super::price::{kind_errors, KindErrors};
use super::sessions::{
    session_factors, session_search_fits, session_words, SessionClocks, SessionFactor,
    SESSION_FACTOR_RANGE,
};
use crate::config::limits::MAX_FIT_SEARCH_WORK;
use crate::config::{Figure, Hardware};
use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::schedule::KernelKind;

/// Weight of the pull towards the base value (per parameter, on the squared log ratio).
pub const PRIOR_WEIGHT: f64 = 1e-3;

/// A parameter is determined by the data alone when the part of its Jacobian column that the
/// other parameters' columns cannot reproduce is at least this share of the column. A fifth:
/// below it a handful of samples pins the parameter only through small differences between
/// samples (on the shared H200 file the GEMMs' per-tile time, at 12%, would be read off four
/// square GEMMs whose k grows with their tiles).
pub const DETERMINED_RESIDUAL: f64 = 0.2;

/// Step of the fit's finite differences, on the parameters' log (or logit) scale.
const LM_STEP: f64 = 1e-3;

/// Most Levenberg–Marquardt iterations per stage.
const LM_ITERATIONS: usize = 200;

/// How a parameter came out of the fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Least squares on the measurements alone.
    Fitted,
    /// The measurements fix only a combination with other parameters: these all scale by one
    /// common factor from their base values.
    Joint,
    /// No measurement of its kind, no effect on them, or a term the base leaves out.
    Kept,
    /// Read directly from the file (`eager_op_s`, `sm_count`).
    Measured,
    /// Not determined by the data: the fit is no worse at an edge of the range its profile
    /// figure may take (a bandwidth that latency-bound samples drive upwards without limit,
    /// a time they drive to the floor) — or, for parameters fitted jointly, their common
    /// factor is — and it is held at that edge.
    Unbounded,
}

/// One parameter's fit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParamFit {
    /// Dotted field name in the profile.
    pub field: String,
    /// Base value.
    pub base: f64,
    /// Fitted value.
    pub value: f64,
    /// How it was obtained.
    pub status: Status,
}

/// What [`fit_profile`] produced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitReport {
    /// The fitted profile (validated).
    pub profile: Hardware,
    /// Every kernel-model parameter, base and fitted.
    pub params: Vec<ParamFit>,
    /// Per kind: the fitted model's errors on the measurements.
    pub errors: Vec<KindErrors>,
    /// The link fit, if the file has messages.
    pub link: Option<LinkFit>,
    /// The overlap slowdown, if the file has overlap samples.
    pub slowdown_fraction: Option<f64>,
    /// Each later measurement session's GEMM clock factor (empty for a file of one session).
    pub sessions: Vec<SessionFactor>,
}

/// A sample's time as the model prices it under the file's timing.
pub fn predicted_s(hw: &Hardware, timing: Timing, s: &Sample) -> f64 {
    let cost = CostModel::new(hw);
    match timing {
        Timing::Isolated => cost.isolated_s(&s.shape),
        Timing::Device => cost.device_s(&s.shape),
    }
}

/// Log of predicted over measured time per sample; a sample of session k > 0 is priced on
/// `hw` at `factors[k − 1]` × its clock.
pub(super) fn log_residuals(
    hw: &Hardware,
    timing: Timing,
    samples: &[Sample],
    factors: &[f64],
) -> Vec<f64> {
    let clocks = SessionClocks::new(hw, factors);
    samples
        .iter()
        .map(|s| {
            let p = predicted_s(clocks.of(s.session), timing, s);
            if p > 0.0 && p.is_finite() {
                (p / s.measured_s).ln()
            } else {
                1e3
            }
        })
        .collect()
}

/// Least squares of one group: returns each parameter's status. Every parameter's search is
/// bounded, on its own scale, to the range [`Scale::range`] its figure may take.
pub(super) fn fit_group(
    hw: &mut Hardware,
    timing: Timing,
    samples: &[Sample],
    params: &[(String, Scale)],
    factors: &[f64],
) -> Vec<Status> {
    let scales: Vec<Scale> = params.iter().map(|p| p.1).collect();
    let bounds: Vec<(f64, f64)> = scales.iter().map(|sc| sc.x_range()).collect();
    let x0: Vec<f64> = params
        .iter()
        .map(|(f, sc)| sc.to_x(figure_mut(hw, f).value))
        .collect();
    let set = |hw: &mut Hardware, x: &[f64], which: &[usize]| {
        for &j in which {
            figure_mut(hw, &params[j].0).value = scales[j].value(x[j]);
        }
    };
    let all: Vec<usize> = (0..params.len()).collect();
    let data_res = |x: &[f64]| -> Vec<f64> {
        let mut h = hw.clone();
        set(&mut h, x, &all);
        log_residuals(&h, timing, samples, factors)
    };
    // Stage 1: every parameter, pulled weakly towards the base.
    let res1 = |x: &[f64]| -> Vec<f64> {
        let mut r = data_res(x);
        r.extend(
            x.iter()
                .zip(&x0)
                .map(|(a, b)| PRIOR_WEIGHT.sqrt() * (a - b)),
        );
        r
    };
    let (x1, _) = fit::levenberg_marquardt(&res1, &x0, &bounds, LM_STEP, LM_ITERATIONS);
    // Which parameters the data determines alone: the Jacobian of the log residuals.
    let h = 1e-4;
    let cols: Vec<Vec<f64>> = (0..params.len())
        .map(|j| {
            let mut up = x1.clone();
            let mut dn = x1.clone();
            up[j] += h;
            dn[j] -= h;
            let (mut a, mut b) = (hw.clone(), hw.clone());
            set(&mut a, &up, &all);
            set(&mut b, &dn, &all);
            let ra = log_residuals(&a, timing, samples, factors);
            let rb = log_residuals(&b, timing, samples, factors);
            ra.iter()
                .zip(&rb)
                .map(|(p, q)| (p - q) / (2.0 * h))
                .collect()
        })
        .collect();
    let n = samples.len() as f64;
    let no_effect: Vec<bool> = cols
        .iter()
        .map(|c| c.iter().map(|v| v * v).sum::<f64>() < 1e-10 * n)
        .collect();
    let mut status: Vec<Status> = (0..params.len())
        .map(|j| {
            if no_effect[j] {
                // No effect here: either it never had one (kept from the base), or the data
                // drove it to where it has none (a floor below every sample, a term at its
                // lower bound) — then the first stage's value is the fit.
                return if (x1[j] - x0[j]).abs() > 1e-3 {
                    Status::Fitted
                } else {
                    Status::Kept
                };
            }
            let others: Vec<&Vec<f64>> = (0..params.len())
                .filter(|&i| i != j)
                .map(|i| &cols[i])
                .filter(|c| c.iter().map(|v| v * v).sum::<f64>() >= 1e-10 * n)
                .collect();
            if residual_share(&cols[j], &others) >= DETERMINED_RESIDUAL {
                Status::Fitted
            } else {
                Status::Joint
            }
        })
        .collect();
    // Stage 2, without the pull: the determined parameters freely; the jointly determined
    // ones all from their base values, every one of their terms of the time scaled by one
    // common factor (times and byte counts × s, rates' fractions ÷ s) — so the base's
    // proportions are kept and a refit from the result is the result; the parameters without
    // effect at their base values.
    let free: Vec<usize> = (0..params.len())
        .filter(|&j| status[j] == Status::Fitted)
        .collect();
    let joint: Vec<usize> = (0..params.len())
        .filter(|&j| status[j] == Status::Joint)
        .collect();
    let base_values: Vec<f64> = x0.iter().zip(&scales).map(|(&x, sc)| sc.value(x)).collect();
    let assemble = |y: &[f64], from: &[f64]| -> Vec<f64> {
        let mut z = from.to_vec();
        for (k, &j) in free.iter().enumerate() {
            z[j] = y[k];
        }
        if !joint.is_empty() {
            let u = y[free.len()];
            for &j in &joint {
                let v = match scales[j] {
                    Scale::Rate | Scale::Log => base_values[j] * u.exp(),
                    Scale::Logit => (base_values[j] * (-u).exp()).min(1.0 - 1e-9),
                };
                z[j] = scales[j].to_x(v);
            }
        }
        z
    };
    // Stage 2's ranges: the free parameters' own; for the common factor, the factors that
    // keep every jointly fitted parameter inside its range (the base values are inside all).
    let mut y_bounds: Vec<(f64, f64)> = free.iter().map(|&j| bounds[j]).collect();
    if !joint.is_empty() {
        let (mut lo, mut hi) = (f64::NEG_INFINITY, f64::INFINITY);
        for &j in &joint {
            let (vlo, vhi) = scales[j].range();
            let b = base_values[j];
            let (a, c) = match scales[j] {
                Scale::Rate | Scale::Log => ((vlo / b).ln(), (vhi / b).ln()),
                Scale::Logit => ((b / vhi).ln(), (b / vlo).ln()),
            };
            lo = lo.max(a);
            hi = hi.min(c);
        }
        y_bounds.push((lo.min(0.0), hi.max(0.0)));
    }
    let mut start = x0.clone();
    for &j in &free {
        start[j] = x1[j];
    }
    let mut y0: Vec<f64> = free.iter().map(|&j| x1[j]).collect();
    if !joint.is_empty() {
        // The common factor's starting point: the mean log shift stage 1 gave the group.
        let u0 = joint
            .iter()
            .map(|&j| {
                let (v1, v0) = (scales[j].value(x1[j]), base_values[j]);
                match scales[j] {
                    Scale::Rate | Scale::Log => (v1 / v0).ln(),
                    Scale::Logit => (v0 / v1).ln(),
                }
            })
            .sum::<f64>()
            / joint.len() as f64;
        y0.push(u0);
    }
    let x = if y0.is_empty() {
        start
    } else {
        let res2 = |y: &[f64]| data_res(&assemble(y, &start));
        let (mut y, _) = fit::levenberg_marquardt(&res2, &y0, &y_bounds, LM_STEP, LM_ITERATIONS);
        // What the data does not bound: a stage-2 coordinate (a parameter the data acts on,
        // or the common factor) with which the fit is no worse at an edge of its range than
        // where the search stopped — a bandwidth that latency-bound samples drive upwards
        // until its term vanishes, a time driven to the floor. It is held at that edge, and
        // said to be so ([`Status::Unbounded`]), rather than reported as a fitted value.
        let ss = |y: &[f64]| res2(y).iter().map(|e| e * e).sum::<f64>();
        let mut cost = ss(&y);
        for k in 0..y.len() {
            if k < free.len()
                && no_effect[free[k]]
                && scales[free[k]].edge(scales[free[k]].value(y[k])).is_none()
            {
                // Without effect at the first stage's value: that value is the fit (above).
                continue;
            }
            let mut best: Option<(f64, f64)> = None;
            for edge in [y_bounds[k].0, y_bounds[k].1] {
                let mut t = y.clone();
                t[k] = edge;
                let c = ss(&t);
                if c <= cost * (1.0 + 1e-9) + 1e-30 && best.is_none_or(|b| c < b.1) {
                    best = Some((edge, c));
                }
            }
            if let Some((edge, c)) = best {
                y[k] = edge;
                cost = c;
                if k < free.len() {
                    status[free[k]] = Status::Unbounded;
                } else {
                    for &j in &joint {
                        status[j] = Status::Unbounded;
                    }
                }
            }
        }
        assemble(&y, &start)
    };
    set(hw, &x, &all);
    status
}

/// ‖c − its least-squares projection on `others`‖ / ‖c‖.
fn residual_share(c: &[f64], others: &[&Vec<f64>]) -> f64 {
    let norm = c.iter().map(|v| v * v).sum::<f64>().sqrt();
    if others.is_empty() || norm == 0.0 {
        return 1.0;
    }
    let a = nalgebra::DMatrix::from_fn(c.len(), others.len(), |i, j| others[j][i]);
    let b = nalgebra::DVector::from_column_slice(c);
    let Ok(coef) = a.clone().svd(true, true).solve(&b, 1e-12) else {
        return 1.0;
    };
    (b - a * coef).norm() / norm
}

/// The samples a kind's parameter search runs on: all of them while the search's work —
/// samples × the full fits it runs (1, plus the session clocks' trials) — stays within
/// [`MAX_FIT_SEARCH_WORK`]; else an even share, every session keeping its part (at least one),
/// each taken evenly across its sizes. Deterministic.
pub(super) fn search_samples(ss: &[Sample]) -> Vec<Sample> {
    let fits = 1 + session_search_fits(ss);
    let keep = (MAX_FIT_SEARCH_WORK / fits).max(1);
    if ss.len() <= keep {
        return ss.to_vec();
    }
    let size = |s: &Sample| s.shape.flops().max(s.shape.bytes());
    let mut sessions: Vec<u32> = ss.iter().map(|s| s.session).collect();
    sessions.sort_unstable();
    sessions.dedup();
    let mut out = Vec::with_capacity(keep);
    for k in sessions {
        let mut mine: Vec<&Sample> = ss.iter().filter(|s| s.session == k).collect();
        mine.sort_by(|a, b| {
            size(a)
                .total_cmp(&size(b))
                .then(a.measured_s.total_cmp(&b.measured_s))
        });
        let share = (keep * mine.len() / ss.len()).clamp(1, mine.len());
        out.extend((0..share).map(|i| {
            let at = if share == 1 {
                0
            } else {
                i * (mine.len() - 1) / (share - 1)
            };
            *mine[at]
        }));
    }
    out
}

/// ", searched on N of its M samples (…)" for a source when the search ran on a share.
fn search_words(used: usize, all: usize) -> String {
    if used == all {
        String::new()
    } else {
        format!(
            " (the search on {used} of them, an even share across sessions and sizes: the fit's \
             work bound, config::limits::MAX_FIT_SEARCH_WORK; errors over all {all})"
        )
    }
}

/// Fits `base`'s kernel model (and, where the file has them, link and slowdown) to `m`.
/// `origin(what)` makes each changed figure's source.
pub fn fit_profile(
    m: &KernelMeasurements,
    base: &Hardware,
    origin: &dyn Fn(&str) -> String,
) -> Result<FitReport> {
    let timing = m.timing();
    let samples = m.samples();
    let mut hw = base.clone();
    // This crate's own CUDA flash kernels have their own tiles and occupancy.
    let own;
    let base = if m.own_attention_kernels() {
        use crate::schedule::AttnPass;
        let k = &mut hw.kernels;
        k.attention_fwd =
            crate::backend::cuda::sources::attention_model(&k.attention_fwd, AttnPass::Fwd);
        k.attention_bwd =
            crate::backend::cuda::sources::attention_model(&k.attention_bwd, AttnPass::Bwd);
        // Not the base's named implementations: the profile's one unnamed fused kernel.
        k.attention = None;
        own = hw.clone();
        &own
    } else {
        base
    };
    if let Some(sm) = m.sm_count {
        hw.gpu.sm_count = Figure {
            value: sm as f64,
            source: origin("sm_count of the measurement file"),
        };
    }
    let mut params: Vec<ParamFit> = Vec::new();
    let mut sessions: Vec<SessionFactor> = Vec::new();
    if let Some(t) = m.eager_op_s {
        params.push(ParamFit {
            field: "kernels.host.op_s".into(),
            base: base.kernels.host.op_s.value,
            value: t,
            status: Status::Measured,
        });
        hw.kernels.host.op_s = Figure {
            value: t,
            source: origin(&format!(
                "eager_op_s of the measurement file ({:.3e} s): host time per eager op; a \
                 kernel in a step costs max(this, its device time)",
                t
            )),
        };
    }
    for (kinds, group) in groups(timing, base) {
        let all: Vec<Sample> = samples
            .iter()
            .filter(|s| kinds.contains(&s.shape.kind()))
            .copied()
            .collect();
        // The work is estimated before the search starts and bounded (`search_samples`).
        let ss = search_samples(&all);
        let searched = search_words(ss.len(), all.len());
        // Terms the base leaves out (0) stay out.
        let active: Vec<(String, Scale)> = group
            .iter()
            .filter(|(f, _)| figure_mut(&mut hw, f).value > 0.0)
            .cloned()
            .collect();
        let factors = if active.is_empty() {
            Vec::new()
        } else {
            session_factors(&ss, |factors: &[f64]| -> f64 {
                let mut h = hw.clone();
                fit_group(&mut h, timing, &ss, &active, factors);
                log_residuals(&h, timing, &ss, factors)
                    .iter()
                    .map(|e| e * e)
                    .sum()
            })
        };
        let status = if ss.is_empty() || active.is_empty() {
            vec![Status::Kept; active.len()]
        } else {
            fit_group(&mut hw, timing, &ss, &active, &factors)
        };
        let of_sessions = format!("{}{searched}", session_words(&all, &factors));
        for (k, &f) in factors.iter().enumerate() {
            let session = k as u32 + 1;
            sessions.push(SessionFactor {
                session,
                gemm_samples: all.iter().filter(|s| s.session == session).count(),
                rate_factor: f,
                at_edge: [SESSION_FACTOR_RANGE.0, SESSION_FACTOR_RANGE.1]
                    .iter()
                    .any(|e| (f / e).ln().abs() < 1e-3),
            });
        }
        let names = kinds
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(" and ");
        for (j, (field, scale)) in active.iter().enumerate() {
            let base_fig = figure_mut(&mut base.clone(), field).clone();
            let fig = figure_mut(&mut hw, field);
            let joint: Vec<&str> = active
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != j && status[i] == Status::Joint)
                .map(|(_, p)| p.0.as_str())
                .collect();
            match status[j] {
                Status::Fitted => {
                    fig.source = origin(&format!(
                        "least squares on log(predicted / measured) over {} {names} \
                         samples{of_sessions}",
                        all.len()
                    ))
                }
                Status::Joint => {
                    fig.source = origin(&format!(
                        "fitted together with {} over {} {names} samples{of_sessions}, which fix \
                         only their combined effect: each of these terms of the time scaled by \
                         one common factor from its base value {:.4e} ({})",
                        joint.join(", "),
                        all.len(),
                        base_fig.value,
                        base_fig.source
                    ))
                }
                Status::Unbounded => {
                    let how = match scale.edge(fig.value) {
                        Some(side) => {
                            let why = match (scale, side) {
                                (Scale::Rate, "upper") => {
                                    "the samples are latency-bound: its term of the time is \
                                     negligible in every one"
                                }
                                (Scale::Log, "lower") => {
                                    "its term of the time is negligible in every sample"
                                }
                                _ => "the samples do not bound it on that side",
                            };
                            format!(
                                "the fit is no worse at the {side} edge of the range the figure \
                                 may take than where the search stopped ({why}); held at that \
                                 edge"
                            )
                        }
                        None => "fitted together with other parameters, whose common factor \
                                 from their base values the samples do not bound; held where one \
                                 of them reaches the edge of its range"
                            .to_string(),
                    };
                    fig.source = origin(&format!(
                        "NOT determined by the data ({} {names} samples{searched}, least \
                         squares on log(predicted / measured)): {how} (base value {:.4e}: {})",
                        all.len(),
                        base_fig.value,
                        base_fig.source
                    ))
                }
                Status::Kept | Status::Measured => {}
            }
            params.push(ParamFit {
                field: field.clone(),
                base: base_fig.value,
                value: fig.value,
                status: status[j],
            });
        }
    }
    let link = super::link_fit::fit_link(m, &mut hw, origin)?;
    let mut slowdown_fraction = None;
    if !m.overlap.is_empty() {
        let pts: Vec<(f64, f64)> = m
            .overlap
            .iter()
            .map(|o| (o.alone_s, o.with_traffic_s))
            .collect();
        let s = fit::slowdown(&pts)?;
        hw.overlap_compute_slowdown_fraction = Figure {
            value: s,
            source: origin(&format!(
                "GEMM time with messages arriving at its device over GEMM time alone, minus 1 \
                 (median of {} samples, clamped to [0, 0.95])",
                pts.len()
            )),
        };
        slowdown_fraction = Some(s);
    }
    hw.validate(std::path::Path::new("<fitted profile>"))
        .map_err(|e| Error::Calibration {
            message: format!("the fitted profile is invalid: {e}"),
        })?;
    // The fit's own errors: each sample at its session's clock.
    let factors: Vec<f64> = sessions.iter().map(|f| f.rate_factor).collect();
    let clocks = SessionClocks::new(&hw, &factors);
    let priced: Vec<(KernelKind, f64, f64)> = samples
        .iter()
        .map(|s| {
            let h = clocks.of(s.session);
            (s.shape.kind(), predicted_s(h, timing, s), s.measured_s)
        })
        .collect();
    Ok(FitReport {
        profile: hw,
        params,
        errors: kind_errors(&priced),
        link,
        slowdown_fraction,
        sessions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::KernelShape;

    fn gemm(n: u64, session: u32) -> Sample {
        Sample {
            shape: KernelShape::gemm(n, n, n),
            measured_s: n as f64 * 1e-9,
            session,
        }
    }

    /// A kind larger than the fit's work bound is searched on an even share — every session
    /// keeping a part, the smallest and largest sizes in it — the same share every time; a
    /// file under the bound on every sample.
    #[test]
    fn a_large_kind_is_searched_on_an_even_share() {
        let small: Vec<Sample> = (1..=50).map(|n| gemm(64 * n, 0)).collect();
        assert_eq!(search_samples(&small), small);
        let big: Vec<Sample> = (1..=90_000).map(|n| gemm(n, 0)).collect();
        let share = search_samples(&big);
        assert!(share.len() <= MAX_FIT_SEARCH_WORK, "{}", share.len());
        assert_eq!(share[0], big[0]);
        assert_eq!(share.last(), big.last());
        assert_eq!(share, search_samples(&big));
        // Sixteen sessions: every clock search refits the group, so the share is smaller, and
        // every session keeps at least one GEMM.
        let sessions: Vec<Sample> = (0..16 * 200)
            .map(|i| gemm(64 + i as u64, i as u32 % 16))
            .collect();
        let share = search_samples(&sessions);
        let fits = 1 + session_search_fits(&sessions);
        assert!(share.len() * fits <= MAX_FIT_SEARCH_WORK.max(16 * fits));
        for k in 0..16 {
            assert!(share.iter().any(|s| s.session == k), "session {k}");
        }
    }
}
