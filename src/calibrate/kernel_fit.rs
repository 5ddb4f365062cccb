//! The one fit: [`fit_profile`] turns a file of kernel measurements and a base hardware profile
//! into a fitted profile. Every backend measures into [`KernelMeasurements`] and comes here;
//! `metp-sim calibrate --fit FILE --base PROFILE` calls it on a file alone.
//!
//! What is fitted, kind by kind, from that kind's samples (each priced as the file's timing
//! says: an isolated call, or the device alone):
//! - memory-bound kernels (copies, element-wise passes): `gpu.hbm_bytes_per_s`,
//!   `kernels.memory.{latency_s, elementwise_fraction}`, and for isolated timings the host's
//!   `isolated_gap_s` and `isolated_floor_s`;
//! - GEMMs: `kernels.gemm.{mma_fraction, tile_s, call_s}`;
//! - attention forward and backward: `kernels.attention_*.{mma_fraction, tile_s, call_s,
//!   extra_bytes_per_element, isolated_extra_s}` (the last only for isolated timings);
//! - the host's time per eager op, when the file has `eager_op_s`; the SM count, when it has
//!   `sm_count`; the intra-node link from `p2p` messages (least squares on `t = α + n/B`); the
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

use serde::Serialize;

use super::fit::{self, nelder_mead, LinkFit};
use super::measurements::{KernelMeasurements, Sample, Timing};
use super::price::{kind_errors, KindErrors};
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
}

#[derive(Clone, Copy)]
enum Scale {
    /// Positive quantity, fitted as its log.
    Log,
    /// Fraction in (0, 1), fitted as its logit.
    Logit,
}

impl Scale {
    fn to_x(self, v: f64) -> f64 {
        match self {
            Scale::Log => v.ln(),
            Scale::Logit => {
                let v = v.clamp(1e-9, 1.0 - 1e-9);
                (v / (1.0 - v)).ln()
            }
        }
    }
    fn value(self, x: f64) -> f64 {
        match self {
            // Times and byte counts below 1e-9 (s or bytes) are 0 for every purpose; the floor
            // keeps a parameter the data drives to zero from running off to 1e-300.
            Scale::Log => x.exp().max(1e-9),
            Scale::Logit => 1.0 / (1.0 + (-x).exp()),
        }
    }
}

/// The profile figure behind a dotted field name (only names [`groups`] lists: an optional
/// figure is asked for only when the profile has it).
fn figure_mut<'a>(hw: &'a mut Hardware, field: &str) -> &'a mut Figure {
    let k = &mut hw.kernels;
    let present = |f: Option<&'a mut Figure>| {
        f.unwrap_or_else(|| unreachable!("{field} is listed only when the profile has it"))
    };
    match field {
        "gpu.hbm_bytes_per_s" => &mut hw.gpu.hbm_bytes_per_s,
        "kernels.host.isolated_gap_s" => &mut k.host.isolated_gap_s,
        "kernels.host.isolated_floor_s" => &mut k.host.isolated_floor_s,
        "kernels.memory.latency_s" => &mut k.memory.latency_s,
        "kernels.memory.elementwise_fraction" => &mut k.memory.elementwise_fraction,
        "kernels.gemm.mma_fraction" => &mut k.gemm.mma_fraction,
        "kernels.gemm.tile_s" => &mut k.gemm.tile_s,
        "kernels.gemm.call_s" => &mut k.gemm.call_s,
        "kernels.gemm.power_fraction" => present(k.gemm.power_fraction.as_mut()),
        "kernels.gemm.power_time_s" => present(k.gemm.power_time_s.as_mut()),
        other => {
            let (pass, name) = other
                .strip_prefix("kernels.attention_fwd.")
                .map(|n| (&mut k.attention_fwd, n))
                .or_else(|| {
                    other
                        .strip_prefix("kernels.attention_bwd.")
                        .map(|n| (&mut k.attention_bwd, n))
                })
                .unwrap_or_else(|| unreachable!("no profile field {other}"));
            if let Some(rest) = name.strip_prefix("tiles[d=") {
                let (d, f) = rest
                    .split_once("].")
                    .unwrap_or_else(|| unreachable!("no profile field {other}"));
                let d: u64 = d.parse().unwrap_or(0);
                let t = pass
                    .tiles
                    .iter_mut()
                    .find(|t| t.head_dim == d)
                    .unwrap_or_else(|| unreachable!("no profile field {other}"));
                return match f {
                    "mma_fraction" => &mut t.mma_fraction,
                    "solo_fraction" => &mut t.solo_fraction,
                    _ => unreachable!("no profile field {other}"),
                };
            }
            match name {
                "mma_fraction" => &mut pass.mma_fraction,
                "solo_fraction" => present(pass.solo_fraction.as_mut()),
                "tile_s" => &mut pass.tile_s,
                "call_s" => &mut pass.call_s,
                "extra_bytes_per_element" => &mut pass.extra_bytes_per_element,
                "isolated_extra_s" => &mut pass.isolated_extra_s,
                _ => unreachable!("no profile field {other}"),
            }
        }
    }
}

/// A group fitted together: the kinds whose samples fit it, and its parameters.
type Group = (&'static [KernelKind], Vec<(String, Scale)>);

/// The groups fitted one after the other, with the parameters `hw` has: per attention kernel
/// (head dimension) its rate and its lone block's share of it.
fn groups(timing: Timing, hw: &Hardware) -> Vec<Group> {
    let iso = timing == Timing::Isolated;
    let named = |v: &[(&str, Scale)]| -> Vec<(String, Scale)> {
        v.iter().map(|&(n, s)| (n.to_string(), s)).collect()
    };
    let mut memory = named(&[
        ("gpu.hbm_bytes_per_s", Scale::Log),
        ("kernels.memory.latency_s", Scale::Log),
        ("kernels.memory.elementwise_fraction", Scale::Logit),
    ]);
    if iso {
        memory.push(("kernels.host.isolated_gap_s".into(), Scale::Log));
        memory.push(("kernels.host.isolated_floor_s".into(), Scale::Log));
    }
    let mut gemm = named(&[
        ("kernels.gemm.mma_fraction", Scale::Logit),
        ("kernels.gemm.tile_s", Scale::Log),
        ("kernels.gemm.call_s", Scale::Log),
    ]);
    if hw.kernels.gemm.power_fraction.is_some() {
        gemm.push(("kernels.gemm.power_fraction".into(), Scale::Logit));
        gemm.push(("kernels.gemm.power_time_s".into(), Scale::Log));
    }
    let attention = |pass: &str, a: &crate::config::AttentionModel| {
        let mut v: Vec<(String, Scale)> = Vec::new();
        if a.tiles.is_empty() {
            v.push((format!("kernels.{pass}.mma_fraction"), Scale::Logit));
            if a.solo_fraction.is_some() {
                v.push((format!("kernels.{pass}.solo_fraction"), Scale::Logit));
            }
        }
        for t in &a.tiles {
            for f in ["mma_fraction", "solo_fraction"] {
                v.push((
                    format!("kernels.{pass}.tiles[d={}].{f}", t.head_dim),
                    Scale::Logit,
                ));
            }
        }
        let mut rest = vec!["tile_s", "call_s", "extra_bytes_per_element"];
        if iso {
            rest.push("isolated_extra_s");
        }
        for f in rest {
            v.push((format!("kernels.{pass}.{f}"), Scale::Log));
        }
        v
    };
    vec![
        (&[KernelKind::Copy, KernelKind::Elementwise][..], memory),
        (&[KernelKind::Gemm][..], gemm),
        (
            &[KernelKind::AttentionFwd][..],
            attention("attention_fwd", &hw.kernels.attention_fwd),
        ),
        (
            &[KernelKind::AttentionBwd][..],
            attention("attention_bwd", &hw.kernels.attention_bwd),
        ),
    ]
}

/// A sample's time as the model prices it under the file's timing.
pub fn predicted_s(hw: &Hardware, timing: Timing, s: &Sample) -> f64 {
    let cost = CostModel::new(hw);
    match timing {
        Timing::Isolated => cost.isolated_s(&s.shape),
        Timing::Device => cost.device_s(&s.shape),
    }
}

fn log_residuals(hw: &Hardware, timing: Timing, samples: &[Sample]) -> Vec<f64> {
    samples
        .iter()
        .map(|s| {
            let p = predicted_s(hw, timing, s);
            if p > 0.0 && p.is_finite() {
                (p / s.measured_s).ln()
            } else {
                1e3
            }
        })
        .collect()
}

/// Least squares of one group: returns each parameter's status.
fn fit_group(
    hw: &mut Hardware,
    timing: Timing,
    samples: &[Sample],
    params: &[(String, Scale)],
) -> Vec<Status> {
    let scales: Vec<Scale> = params.iter().map(|p| p.1).collect();
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
        log_residuals(&h, timing, samples)
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
    let (x1, _) = fit::levenberg_marquardt(&res1, &x0, LM_STEP, LM_ITERATIONS);
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
            let ra = log_residuals(&a, timing, samples);
            let rb = log_residuals(&b, timing, samples);
            ra.iter()
                .zip(&rb)
                .map(|(p, q)| (p - q) / (2.0 * h))
                .collect()
        })
        .collect();
    let n = samples.len() as f64;
    let status: Vec<Status> = (0..params.len())
        .map(|j| {
            let norm2: f64 = cols[j].iter().map(|v| v * v).sum();
            if norm2 < 1e-10 * n {
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
                    Scale::Log => base_values[j] * u.exp(),
                    Scale::Logit => (base_values[j] * (-u).exp()).min(1.0 - 1e-9),
                };
                z[j] = scales[j].to_x(v);
            }
        }
        z
    };
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
                    Scale::Log => (v1 / v0).ln(),
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
        let (y, _) = fit::levenberg_marquardt(&res2, &y0, LM_STEP, LM_ITERATIONS);
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

/// The intra-node link from the file's messages. Point-to-point messages alone: the
/// least-squares line `t = α + bytes/B` ([`fit::link`]). With collectives: least squares on the
/// log error of every message, each collective priced as the ring steps the simulator runs
/// (`cost::collective_steps`: all-reduce `2(n−1)·(α + M/(nB))`, …) and each point-to-point
/// message as `α + bytes/B`.
fn fit_link(
    m: &KernelMeasurements,
    hw: &mut Hardware,
    origin: &dyn Fn(&str) -> String,
) -> Result<Option<LinkFit>> {
    use crate::schedule::CollectiveOp;
    if m.p2p.is_empty() && m.collectives.is_empty() {
        return Ok(None);
    }
    let mut msgs: Vec<(f64, f64, f64)> = m.p2p.iter().map(|p| (1.0, p.bytes as f64, p.s)).collect();
    for (i, c) in m.collectives.iter().enumerate() {
        let op = match c.op.as_str() {
            "all-reduce" => CollectiveOp::AllReduce,
            "all-gather" => CollectiveOp::AllGather,
            "reduce-scatter" => CollectiveOp::ReduceScatter,
            "all-to-all" => CollectiveOp::AllToAll,
            "broadcast" => CollectiveOp::Broadcast { root: 0 },
            other => {
                return Err(Error::Calibration {
                    message: format!(
                        "collectives[{i}].op: unknown collective \"{other}\" (all-reduce, \
                         all-gather, reduce-scatter, all-to-all, broadcast)"
                    ),
                })
            }
        };
        let (steps, chunk) = crate::cost::collective_steps(op, c.ranks as u64, c.bytes);
        msgs.push((steps as f64, chunk as f64, c.s));
    }
    let (l, how) = if m.collectives.is_empty() {
        let pts: Vec<(f64, f64)> = m.p2p.iter().map(|p| (p.bytes as f64, p.s)).collect();
        let l = fit::link(&pts)?;
        let how = format!(
            "least-squares fit t = α + bytes/B over {} point-to-point messages (r² = {:.4})",
            pts.len(),
            l.r2
        );
        (l, how)
    } else {
        let loss = |x: &[f64]| -> f64 {
            let (a, b) = (x[0].exp(), x[1].exp());
            msgs.iter()
                .map(|&(steps, chunk, t)| (steps * (a + chunk / b) / t).ln().powi(2))
                .sum()
        };
        let x0 = [
            hw.intra_node.p2p_latency_s.value.max(1e-7).ln(),
            hw.intra_node.bytes_per_s_per_direction.value.ln(),
        ];
        let (x, ss_res) = nelder_mead(&loss, &x0, 0.3, 1e-20, 20_000);
        // r² of the log times.
        let logs: Vec<f64> = msgs.iter().map(|m| m.2.ln()).collect();
        let mean = logs.iter().sum::<f64>() / logs.len() as f64;
        let ss_tot: f64 = logs.iter().map(|v| (v - mean).powi(2)).sum();
        let l = LinkFit {
            latency_s: x[0].exp(),
            bytes_per_s: x[1].exp(),
            raw_intercept_s: x[0].exp(),
            r2: if ss_tot > 0.0 {
                1.0 - ss_res / ss_tot
            } else {
                1.0
            },
        };
        let how = format!(
            "least squares on log(predicted / measured) over {} point-to-point messages and {} \
             collectives, each collective priced as the simulator's ring steps (all-reduce: \
             2(n−1)·(α + M/(nB)))",
            m.p2p.len(),
            m.collectives.len()
        );
        (l, how)
    };
    // A one-GPU calibration's messages are copies standing in for a link: say so.
    let emulated = m
        .p2p
        .iter()
        .filter(|p| p.via.as_deref() == Some("copy-emulation"))
        .count();
    let how = if emulated > 0 {
        format!(
            "{how}; {emulated} of the messages were emulated by device-to-device copies on one \
             GPU, so this is a copy rate, not a link's"
        )
    } else {
        how
    };
    hw.intra_node.bytes_per_s_per_direction = Figure {
        value: l.bytes_per_s,
        source: origin(&format!("B of a {how}")),
    };
    hw.intra_node.p2p_latency_s = Figure {
        value: l.latency_s,
        source: origin(&format!(
            "α of the same fit (raw intercept {:.3e} s, clamped at 0)",
            l.raw_intercept_s
        )),
    };
    Ok(Some(l))
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
        k.attention_fwd = super::cuda::sources::attention_model(&k.attention_fwd, AttnPass::Fwd);
        k.attention_bwd = super::cuda::sources::attention_model(&k.attention_bwd, AttnPass::Bwd);
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
        let ss: Vec<Sample> = samples
            .iter()
            .filter(|s| kinds.contains(&s.shape.kind()))
            .copied()
            .collect();
        // Terms the base leaves out (0) stay out.
        let active: Vec<(String, Scale)> = group
            .iter()
            .filter(|(f, _)| figure_mut(&mut hw, f).value > 0.0)
            .cloned()
            .collect();
        let status = if ss.is_empty() || active.is_empty() {
            vec![Status::Kept; active.len()]
        } else {
            fit_group(&mut hw, timing, &ss, &active)
        };
        let names = kinds
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(" and ");
        for (j, (field, _)) in active.iter().enumerate() {
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
                        "least squares on log(predicted / measured) over {} {names} samples",
                        ss.len()
                    ))
                }
                Status::Joint => {
                    fig.source = origin(&format!(
                        "fitted together with {} over {} {names} samples, which fix only their \
                         combined effect: each of these terms of the time scaled by one common \
                         factor from its base value {:.4e} ({})",
                        joint.join(", "),
                        ss.len(),
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
    let link = fit_link(m, &mut hw, origin)?;
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
    let priced: Vec<(KernelKind, f64, f64)> = samples
        .iter()
        .map(|s| (s.shape.kind(), predicted_s(&hw, timing, s), s.measured_s))
        .collect();
    Ok(FitReport {
        profile: hw,
        params,
        errors: kind_errors(&priced),
        link,
        slowdown_fraction,
    })
}
