//! A plan read back from a shard file (`metp-sim merge`) is input like any other: the spec goes
//! through the checks of the files and flags it came from, and every part through the checks of
//! what a part can hold — counts that agree, a pool of valid configurations of this plan that
//! fit, and every simulated row's numbers against its configuration (memory against the
//! inventory, the closed form against the closed form, throughput, MFU and exposed share
//! against the step time, the step against what is physical: `evaluate::check_reported`).
//! Each refusal is one line naming the file and the entry.

use std::path::Path;

use super::rank::{plan_hardware, pool_size};
use super::{PlanPart, PlanSpec, Ranked, RejectCategory, Rejection};
use crate::config::limits;
use crate::error::{Error, Result};
use crate::evaluate::{check_reported, check_reported_memory, Evaluation, Reported};
use crate::shard::Shard;

/// Puts a model or profile file's own field error, or a usage error of the spec, under `at`.
fn under(path: &Path, at: String, e: Error) -> Error {
    match e {
        Error::InvalidField { field, message, .. } => Error::InvalidField {
            path: path.to_path_buf(),
            field: format!("{at}.{field}"),
            message,
        },
        Error::InvalidArgument { flag, message } => Error::InvalidField {
            path: path.to_path_buf(),
            field: format!("{at} ({flag})"),
            message,
        },
        other => other,
    }
}

/// Checks a plan's spec read from `path` (its fields under `at`): the model and the profile
/// through the checks of their files, the spec through the checks of the flags it came from
/// ([`PlanSpec::check`]), and the attention implementation it asks for.
pub fn check_spec(spec: &PlanSpec, path: &Path, at: &str) -> Result<()> {
    spec.model
        .validate(path)
        .map_err(|e| under(path, format!("{at}.model"), e))?;
    spec.hardware
        .validate(path)
        .map_err(|e| under(path, format!("{at}.hardware"), e))?;
    spec.check().map_err(|e| under(path, at.to_string(), e))?;
    let hw = &spec.hardware;
    hw.kernels
        .clone()
        .select_attention(spec.options.attention_kernel(hw), &hw.name)
        .map_err(|e| under(path, format!("{at}.options"), e))?;
    Ok(())
}

/// Checks part `shard` of the plan `spec` read from `path` (its fields under `at`; module
/// docs).
pub fn check_part(
    spec: &PlanSpec,
    shard: Shard,
    part: &PlanPart,
    path: &Path,
    at: &str,
) -> Result<()> {
    let bad = |field: String, message: String| Error::InvalidField {
        path: path.to_path_buf(),
        field: format!("{at}.{field}"),
        message,
    };
    if part.feasible > part.evaluated {
        return Err(bad(
            "feasible".into(),
            format!(
                "{} configurations fit, but only {} were evaluated",
                part.feasible, part.evaluated
            ),
        ));
    }
    let pool = pool_size(spec).min(part.feasible);
    if part.pool.len() != pool {
        return Err(bad(
            "pool".into(),
            format!(
                "{} configurations, but a plan with {} that fit simulates its best {pool}",
                part.pool.len(),
                part.feasible
            ),
        ));
    }
    let hw = plan_hardware(spec);
    let capacity = hw.memory_bytes();
    for (i, c) in part.pool.iter().enumerate() {
        let field = format!("pool[{i}]");
        if part.pool[..i].iter().any(|o| o.key() == c.key()) {
            return Err(bad(field, format!("{} is in the pool twice", c.label())));
        }
        if !spec.methods.contains(&c.method) {
            return Err(bad(
                field,
                format!("{} is not one of the plan's methods", c.method),
            ));
        }
        if c.zero > 3 {
            return Err(bad(field, format!("ZeRO stage {} (0 to 3)", c.zero)));
        }
        let v = c.workload(spec, &hw).validate().map_err(|e| {
            bad(
                field.clone(),
                format!("{}: not a valid configuration: {e}", c.label()),
            )
        })?;
        if v.devices() != spec.gpus {
            return Err(bad(
                field,
                format!(
                    "{} runs on {} GPUs, not the plan's {}",
                    c.label(),
                    v.devices(),
                    spec.gpus
                ),
            ));
        }
    }
    for (i, s) in part.simulated.iter().enumerate() {
        let field = |f: &str| format!("simulated[{i}].{f}");
        match &s.outcome {
            Ok(r) => {
                if r.candidate != s.candidate {
                    return Err(bad(
                        field("outcome.candidate"),
                        "is not the simulated configuration".into(),
                    ));
                }
                check_ranked(spec, &hw, r)
                    .map_err(|(f, m)| bad(field(&format!("outcome.{f}")), m))?
            }
            Err(r) => check_rejection(r, capacity)
                .map_err(|(f, m)| bad(field(&format!("outcome.{f}")), m))?,
        }
    }
    if shard.index != 0 && !part.rejected.is_empty() {
        return Err(bad(
            "rejected".into(),
            format!(
                "{} rejections in part {shard}: the rejections are part 0's",
                part.rejected.len()
            ),
        ));
    }
    for (i, r) in part.rejected.iter().enumerate() {
        check_rejection(r, capacity).map_err(|(f, m)| bad(format!("rejected[{i}].{f}"), m))?;
    }
    Ok(())
}

/// One simulated row against its configuration.
fn check_ranked(
    spec: &PlanSpec,
    hw: &crate::config::Hardware,
    r: &Ranked,
) -> std::result::Result<(), (&'static str, String)> {
    let c = &r.candidate;
    let v = c
        .workload(spec, hw)
        .validate()
        .map_err(|e| ("candidate", format!("not a valid configuration: {e}")))?;
    let e = Evaluation::new(v);
    check_reported_memory(&e.inventory, r.peak_bytes, r.capacity_bytes, r.fits)?;
    if !r.fits {
        return Err(("fits", "false on a ranked configuration".into()));
    }
    if r.headroom_bytes != r.capacity_bytes - r.peak_bytes {
        return Err((
            "headroom_bytes",
            format!(
                "{}, but capacity − peak is {}",
                r.headroom_bytes,
                r.capacity_bytes - r.peak_bytes
            ),
        ));
    }
    let fraction = r.headroom_bytes as f64 / r.capacity_bytes as f64;
    if (r.headroom_fraction - fraction).abs() > 1e-9 {
        return Err((
            "headroom_fraction",
            format!(
                "{:?}, but headroom / capacity is {fraction:?}",
                r.headroom_fraction
            ),
        ));
    }
    check_reported(
        &e,
        &Reported {
            step_time_s: r.step_time_s,
            compute_s: r.compute_s,
            communication_s: r.communication_s,
            exposed_communication_s: r.exposed_communication_s,
            exposed_share: r.exposed_share,
            tokens_per_s: r.tokens_per_s,
            mfu: r.mfu,
            analytic_step_time_s: r.analytic_step_time_s,
        },
    )?;
    let analytic = e.analytic_metrics().tokens_per_s;
    if (r.analytic_tokens_per_s - analytic).abs() > 1e-9 * analytic.abs() {
        return Err((
            "analytic_tokens_per_s",
            format!(
                "{:?}, but the closed form gives {analytic:?}",
                r.analytic_tokens_per_s
            ),
        ));
    }
    Ok(())
}

/// A rejection's own consistency: its reason as text, a ZeRO stage that exists, memory that
/// agrees with whether it fits and with the profile's capacity.
fn check_rejection(
    r: &Rejection,
    capacity: u128,
) -> std::result::Result<(), (&'static str, String)> {
    limits::check_text(&r.reason, limits::MAX_TEXT_CHARS).map_err(|m| ("reason", m))?;
    if r.zero.is_some_and(|z| z > 3) {
        return Err(("zero", "a ZeRO stage from 0 to 3".into()));
    }
    match (r.peak_bytes, r.capacity_bytes, r.fits) {
        (None, None, None) => {}
        (Some(peak), Some(cap), Some(fits)) => {
            if cap != capacity {
                return Err((
                    "capacity_bytes",
                    format!("{cap}, but the profile's device memory is {capacity}"),
                ));
            }
            if fits != (peak <= cap) {
                return Err((
                    "fits",
                    format!("{fits}, but the peak is {peak} bytes of {cap}"),
                ));
            }
        }
        _ => {
            return Err((
                "fits",
                "peak, capacity and fits come together (or not at all)".into(),
            ))
        }
    }
    if r.category == RejectCategory::OutOfMemory && r.fits != Some(false) {
        return Err((
            "category",
            "out-of-memory, but no peak above the capacity".into(),
        ));
    }
    Ok(())
}
