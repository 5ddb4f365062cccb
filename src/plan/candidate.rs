//! Candidates: one configuration each (method, degree, data parallelism, batch split,
//! recomputation, ZeRO, FlashAttention), their enumeration and the pair-level checks.

use serde::Serialize;

use super::{PlanSpec, RejectCategory, Rejection, MICRO_BATCHES, RECOMPUTE, ZERO};
use crate::config::{Hardware, MethodId, Options, Recompute, Workload, ZeroStage};
use crate::error::Result;

/// One configuration: method, degree, data parallelism, batch split and memory options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Candidate {
    /// Method.
    pub method: MethodId,
    /// Degree.
    pub p: u64,
    /// Data-parallel replicas.
    pub dp: u64,
    /// Micro-batch b.
    pub micro_batch: u64,
    /// Micro-batches per replica per step (gradient accumulation).
    pub micro_batches: u64,
    /// Recomputation.
    pub recompute: Recompute,
    /// ZeRO stage (0–3).
    pub zero: u8,
    /// FlashAttention (fused attention kernels).
    pub flash: bool,
}

pub(super) fn recompute_index(r: Recompute) -> u8 {
    match r {
        Recompute::None => 0,
        Recompute::Selective => 1,
        Recompute::Full => 2,
    }
}

pub(super) fn zero_stage(z: u8) -> ZeroStage {
    match z {
        0 => ZeroStage::Zero0,
        1 => ZeroStage::Zero1,
        2 => ZeroStage::Zero2,
        _ => ZeroStage::Zero3,
    }
}

pub(super) fn zero_number(z: ZeroStage) -> u8 {
    match z {
        ZeroStage::Zero0 => 0,
        ZeroStage::Zero1 => 1,
        ZeroStage::Zero2 => 2,
        ZeroStage::Zero3 => 3,
    }
}

impl Candidate {
    /// The tie-break key: method, p, dp, recomputation, micro-batch, ZeRO, flash on first.
    pub fn key(&self) -> (MethodId, u64, u64, u8, u64, u8, bool) {
        (
            self.method,
            self.p,
            self.dp,
            recompute_index(self.recompute),
            self.micro_batch,
            self.zero,
            !self.flash,
        )
    }

    /// The workload of this candidate.
    pub fn workload(&self, spec: &PlanSpec, hardware: &Hardware) -> Workload {
        Workload {
            model: spec.model.clone(),
            hardware: hardware.clone(),
            method: self.method,
            p: self.p,
            dp: self.dp,
            outer: crate::config::OuterAxes::default(),
            seq: spec.seq,
            micro_batch: self.micro_batch,
            micro_batches: self.micro_batches,
            options: Options {
                flash: self.flash,
                recompute: self.recompute,
                zero: Some(zero_stage(self.zero)),
                ..spec.options
            },
        }
    }

    /// `metp p=8 dp=1 b=1×1 recompute=none zero=0` (and `no-flash` when off).
    pub fn label(&self) -> String {
        format!(
            "{} p={} dp={} b={}×{} recompute={} zero={}{}",
            self.method,
            self.p,
            self.dp,
            self.micro_batch,
            self.micro_batches,
            recompute_name(self.recompute),
            self.zero,
            if self.flash { "" } else { " no-flash" }
        )
    }
}

/// `none`, `selective` or `full`.
pub fn recompute_name(r: Recompute) -> &'static str {
    match r {
        Recompute::None => "none",
        Recompute::Selective => "selective",
        Recompute::Full => "full",
    }
}

/// The enumeration of step 1 and the pair-level checks of step 2: the combinations to evaluate,
/// the pair-level rejections, and the number of ZeRO stages skipped as equivalent to 0.
pub fn enumerate(spec: &PlanSpec) -> Result<(Vec<Candidate>, Vec<Rejection>, usize)> {
    spec.check()?;
    let n = spec.gpus;
    let mut out = Vec::new();
    let mut rejected = Vec::new();
    let mut skipped = 0;
    let flashes: &[bool] = if spec.include_no_flash {
        &[true, false]
    } else {
        &[true]
    };
    for &method in &spec.methods {
        for p in (1..=n).filter(|p| n.is_multiple_of(*p)) {
            let dp = n / p;
            if let Err(reason) = method.check_degree(&spec.model, p, &spec.options) {
                rejected.push(Rejection::pair(
                    method,
                    p,
                    dp,
                    RejectCategory::InvalidDegree,
                    reason,
                ));
                continue;
            }
            let share = match spec.global_batch {
                None => 1,
                Some(g) if g.is_multiple_of(dp) => g / dp,
                Some(g) => {
                    rejected.push(Rejection::pair(
                        method,
                        p,
                        dp,
                        RejectCategory::GlobalBatch,
                        format!("global batch {g} is not a multiple of dp = {dp}"),
                    ));
                    continue;
                }
            };
            for &flash in flashes {
                let options = Options {
                    flash,
                    ..spec.options
                };
                let multiple = method.seq_multiple(p, &options);
                if !spec.seq.is_multiple_of(multiple) {
                    let mut r = Rejection::pair(
                        method,
                        p,
                        dp,
                        RejectCategory::SeqMultiple,
                        format!(
                            "sequence length {} is not a multiple of {multiple} ({method} at \
                             p = {p})",
                            spec.seq
                        ),
                    );
                    if spec.include_no_flash {
                        r.flash = Some(flash);
                    }
                    rejected.push(r);
                    continue;
                }
                // The group ZeRO shards over (memory::params): the dp replicas for the methods
                // that shard weights, all p·dp devices for those that replicate them.
                let zero_group = if method.shards_weights() { dp } else { dp * p };
                for recompute in RECOMPUTE {
                    for b in MICRO_BATCHES
                        .into_iter()
                        .filter(|b| share.is_multiple_of(*b))
                    {
                        for z in ZERO {
                            if z != ZeroStage::Zero0 && zero_group == 1 {
                                skipped += 1;
                                continue;
                            }
                            out.push(Candidate {
                                method,
                                p,
                                dp,
                                micro_batch: b,
                                micro_batches: share / b,
                                recompute,
                                zero: zero_number(z),
                                flash,
                            });
                        }
                    }
                }
            }
        }
    }
    Ok((out, rejected, skipped))
}
