//! A sweep read back from a shard file (`metp-sim merge`) is input like any other: the spec
//! goes through the checks of the files and flags it came from, and every point of a part is
//! checked against the workload the spec gives at its place — its memory against the
//! inventory, its closed-form time against the closed form, its throughput, MFU and exposed
//! share against its step time, and its step against what is physical
//! (`evaluate::check_reported`); the longest sequences against the search. Each refusal is one
//! line naming the file and the entry.

use std::path::Path;

use rayon::prelude::*;

use super::{jobs, maxseq_rows, workload, Point, Status, SweepResult, SweepSpec};
use crate::config::limits;
use crate::error::{Error, Result};
use crate::evaluate::{check_reported, check_reported_memory, Evaluation, Reported, Timing};
use crate::memory;
use crate::shard::Shard;

/// Puts a model or profile file's own field error under `at` (`data.spec.models[0]`).
fn under(at: String, e: Error) -> Error {
    match e {
        Error::InvalidField {
            path,
            field,
            message,
        } => Error::InvalidField {
            path,
            field: format!("{at}.{field}"),
            message,
        },
        other => other,
    }
}

/// Checks a sweep's spec read from `path` (its fields under `at`): every model and profile
/// through the checks of a model or profile file, names distinct, at least one of each axis,
/// every size positive, the points within [`limits::MAX_SWEEP_POINTS`], and the attention
/// implementation the options ask for on every profile.
pub fn check_spec(spec: &SweepSpec, path: &Path, at: &str) -> Result<()> {
    let bad = |field: String, message: String| Error::InvalidField {
        path: path.to_path_buf(),
        field: format!("{at}.{field}"),
        message,
    };
    for (i, m) in spec.models.iter().enumerate() {
        m.validate(path)
            .map_err(|e| under(format!("{at}.models[{i}]"), e))?;
    }
    for (i, hw) in spec.hardware.iter().enumerate() {
        hw.validate(path)
            .map_err(|e| under(format!("{at}.hardware[{i}]"), e))?;
    }
    let distinct = |field: &str, names: Vec<&str>| -> Result<()> {
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(bad(
                    format!("{field}[{i}].name"),
                    format!("'{n}' is listed twice"),
                ));
            }
        }
        Ok(())
    };
    distinct(
        "models",
        spec.models.iter().map(|m| m.name.as_str()).collect(),
    )?;
    distinct(
        "hardware",
        spec.hardware.iter().map(|h| h.name.as_str()).collect(),
    )?;
    for (field, len) in [
        ("models", spec.models.len()),
        ("hardware", spec.hardware.len()),
        ("methods", spec.methods.len()),
        ("degrees", spec.degrees.len()),
        ("outer", spec.outer.len()),
        ("seqs", spec.seqs.len()),
    ] {
        if len == 0 {
            return Err(bad(
                field.into(),
                "is empty: a sweep has at least one".into(),
            ));
        }
    }
    let total = [
        spec.models.len(),
        spec.hardware.len(),
        spec.methods.len(),
        spec.degrees.len(),
        spec.outer.len(),
        spec.seqs.len(),
    ]
    .iter()
    .try_fold(1u64, |acc, &n| acc.checked_mul(n as u64))
    .unwrap_or(u64::MAX);
    if total > limits::MAX_SWEEP_POINTS {
        return Err(bad(
            "seqs".into(),
            format!(
                "the sweep has {total} points, more than {} (config::limits)",
                limits::MAX_SWEEP_POINTS
            ),
        ));
    }
    let positive = |field: &str, values: &[u64]| -> Result<()> {
        match values.iter().position(|&v| v == 0) {
            Some(i) => Err(bad(format!("{field}[{i}]"), "must be positive".into())),
            None => Ok(()),
        }
    };
    positive("degrees", &spec.degrees)?;
    positive("seqs", &spec.seqs)?;
    positive("micro_batch", &[spec.micro_batch])?;
    for (i, o) in spec.outer.iter().enumerate() {
        positive(&format!("outer[{i}]"), &[o.pp, o.interleave, o.cp])?;
    }
    for hw in &spec.hardware {
        hw.kernels
            .clone()
            .select_attention(spec.options.attention_kernel(hw), &hw.name)
            .map_err(|e| bad("options.attention".into(), e.to_string()))?;
    }
    Ok(())
}

/// Checks part `shard` of the sweep `spec` read from `path` (its result under `at`): the points
/// its place in the study gives it, in order, each with the numbers its workload gives (module
/// docs); the longest sequences in part 0 (the search's) and nowhere else.
pub fn check_part(
    spec: &SweepSpec,
    shard: Shard,
    part: &SweepResult,
    path: &Path,
    at: &str,
) -> Result<()> {
    let all = jobs(spec);
    let owners = Shard::owners(shard.count, all.len());
    let mine: Vec<(usize, _)> = all
        .into_iter()
        .enumerate()
        .zip(owners)
        .filter(|(_, o)| *o == shard.index)
        .map(|(j, _)| j)
        .collect();
    if part.points.len() != mine.len() {
        return Err(Error::Merge {
            message: format!(
                "{}: shard {shard} holds {} points, but its part of this sweep has {}",
                path.display(),
                part.points.len(),
                mine.len()
            ),
        });
    }
    let bad = |field: String, message: String| Error::InvalidField {
        path: path.to_path_buf(),
        field: format!("{at}.{field}"),
        message,
    };
    let verdicts: Vec<Option<Error>> = mine
        .par_iter()
        .zip(part.points.par_iter())
        .enumerate()
        .map(|(j, (&(i, (m, hw, method, p, outer, seq)), pt))| {
            let here = pt.model == m.name
                && pt.hardware == hw.name
                && pt.method == method
                && pt.p == p
                && pt.outer == outer
                && pt.seq == seq;
            if !here {
                return Some(Error::Merge {
                    message: format!(
                        "{}: shard {shard} does not hold point {i} of the sweep ({method} p={p} \
                         s={seq} on {} / {}) where it should",
                        path.display(),
                        m.name,
                        hw.name
                    ),
                });
            }
            let w = workload(spec, m, hw, method, p, outer, seq);
            check_point(w, spec.timing, pt)
                .err()
                .map(|(field, message)| bad(format!("points[{j}].{field}"), message))
        })
        .collect();
    if let Some(e) = verdicts.into_iter().flatten().next() {
        return Err(e);
    }
    if shard.index == 0 {
        let want = maxseq_rows(spec);
        if part.maxseq.len() != want.len() {
            return Err(bad(
                "maxseq".into(),
                format!(
                    "{} rows, but the sweep's longest sequences are {} (model × profile × cp × \
                     pp × method × degree)",
                    part.maxseq.len(),
                    want.len()
                ),
            ));
        }
        for (i, (got, want)) in part.maxseq.iter().zip(&want).enumerate() {
            if got != want {
                return Err(bad(
                    format!("maxseq[{i}]"),
                    format!(
                        "{} p={} max_seq {:?}, but the search over the spec gives {} p={} \
                         max_seq {:?}",
                        got.row.method,
                        got.row.p,
                        got.row.max_seq,
                        want.row.method,
                        want.row.p,
                        want.row.max_seq
                    ),
                ));
            }
        }
    } else if !part.maxseq.is_empty() {
        return Err(bad(
            "maxseq".into(),
            format!(
                "{} rows in part {shard}: the longest sequences are part 0's",
                part.maxseq.len()
            ),
        ));
    }
    Ok(())
}

/// One point against its workload `w` (module docs).
fn check_point(
    w: crate::config::Workload,
    timing: Timing,
    pt: &Point,
) -> std::result::Result<(), (&'static str, String)> {
    if pt.capacity_bytes != w.hardware.memory_bytes() {
        return Err((
            "capacity_bytes",
            format!(
                "{}, but the profile '{}' has {} bytes of device memory",
                pt.capacity_bytes,
                w.hardware.name,
                w.hardware.memory_bytes()
            ),
        ));
    }
    if let Some(r) = &pt.reason {
        limits::check_text(r, limits::MAX_TEXT_CHARS).map_err(|m| ("reason", m))?;
    }
    let times = [
        ("step_time_s", pt.step_time_s),
        ("compute_s", pt.compute_s),
        ("communication_s", pt.communication_s),
        ("exposed_communication_s", pt.exposed_communication_s),
        ("exposed_share", pt.exposed_share),
        ("tokens_per_s", pt.tokens_per_s),
        ("mfu", pt.mfu),
        ("analytic_step_time_s", pt.analytic_step_time_s),
    ];
    let untimed = |status: &str| -> std::result::Result<(), (&'static str, String)> {
        match times.iter().find(|(_, v)| v.is_some()) {
            Some((field, _)) => Err((*field, format!("set on a point that is {status}"))),
            None if pt.reason.is_none() => {
                Err(("reason", format!("missing on a point that is {status}")))
            }
            None => Ok(()),
        }
    };
    if pt.status == Status::Invalid {
        if pt.fits.is_some() || pt.peak_bytes.is_some() {
            return Err(("fits", "set on an invalid point".into()));
        }
        return untimed("invalid");
    }
    let v = w.validate().map_err(|e| {
        (
            "status",
            format!(
                "'{:?}', but the point's workload is not valid: {e}",
                pt.status
            ),
        )
    })?;
    let stages = memory::stage_inventories(&v);
    let inv = &stages[memory::critical_stage(&stages)];
    let (Some(peak), Some(fits)) = (pt.peak_bytes, pt.fits) else {
        return Err(("peak_bytes", "missing on a valid point".into()));
    };
    check_reported_memory(inv, peak, pt.capacity_bytes, fits)?;
    if pt.status == Status::OutOfMemory {
        if fits {
            return Err(("status", "out-of-memory, but the point fits".into()));
        }
        return untimed("out of memory");
    }
    if !fits {
        return Err(("status", "ok, but the point does not fit".into()));
    }
    if pt.reason.is_some() {
        return Err(("reason", "set on a point that is ok".into()));
    }
    let [step, compute, comm, exposed, share, tokens, mfu, analytic] = times.map(|(_, v)| v);
    let (
        Some(step_time_s),
        Some(compute_s),
        Some(communication_s),
        Some(exposed_communication_s),
        Some(exposed_share),
        Some(tokens_per_s),
        Some(mfu),
        Some(analytic_step_time_s),
    ) = (step, compute, comm, exposed, share, tokens, mfu, analytic)
    else {
        let (field, _) = times
            .iter()
            .find(|(_, v)| v.is_none())
            .copied()
            .unwrap_or(times[0]);
        return Err((field, "missing on a point that is ok".into()));
    };
    let e = Evaluation::with_stages(v, stages);
    check_reported(
        &e,
        &Reported {
            step_time_s,
            compute_s,
            communication_s,
            exposed_communication_s,
            exposed_share,
            tokens_per_s,
            mfu,
            analytic_step_time_s,
        },
    )?;
    if timing == Timing::Analytic && step_time_s != analytic_step_time_s {
        return Err((
            "step_time_s",
            format!(
                "{step_time_s:?} s, but an analytic sweep's step is the closed form's \
                 ({analytic_step_time_s:?} s)"
            ),
        ));
    }
    Ok(())
}
