//! Candidates: one configuration each (method, degree, data parallelism, batch split,
//! recomputation, ZeRO, FlashAttention), their enumeration and the pair-level checks.

use serde::{Deserialize, Serialize};

use super::spec::Constraints;
use super::{
    PlanSpec, RejectCategory, Rejection, MAX_CP, MAX_INTERLEAVE, MAX_PP, MICRO_BATCHES, RECOMPUTE,
    ZERO,
};
use crate::config::{
    Hardware, MethodId, Options, OuterAxes, ParamGather, Recompute, Runtime, Workload, Zero3Gather,
    ZeroStage,
};
use crate::error::Result;

/// One configuration: method, degree, data parallelism, batch split and memory options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidate {
    /// Method.
    pub method: MethodId,
    /// Degree.
    pub p: u64,
    /// Data-parallel replicas.
    pub dp: u64,
    /// Pipeline stages, interleaving and context-parallel ranks.
    pub outer: OuterAxes,
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
    /// The tie-break key: method, p, cp, pp, interleave, dp, recomputation, micro-batch, ZeRO,
    /// flash on first.
    #[allow(clippy::type_complexity)]
    pub fn key(&self) -> (MethodId, u64, u64, u64, u64, u64, u8, u64, u8, bool) {
        (
            self.method,
            self.p,
            self.outer.cp,
            self.outer.pp,
            self.outer.interleave,
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
            outer: self.outer,
            seq: spec.seq,
            micro_batch: self.micro_batch,
            micro_batches: self.micro_batches,
            options: Options {
                flash: self.flash,
                recompute: self.recompute,
                zero: Some(zero_stage(self.zero)),
                // The candidates' stages already follow the placement asked for.
                optimizer_state: None,
                // Only sequence parallelism has the collectives TE overlaps, and only among
                // ranks of one NVLink domain (`Workload::validate`); the other candidates
                // expose them.
                tp_comm_overlap: spec.options.tp_comm_overlap
                    && self.method == MethodId::TpSp
                    && self.p > 1
                    && hardware.gpus_per_node.is_multiple_of(self.p),
                // How ZeRO-3's gathers become parameters concerns only ZeRO-3 candidates; when
                // a sharded optimizer state's updated weights are gathered, only ZeRO 1 and 2.
                runtime: Runtime {
                    zero3_gather: if zero_stage(self.zero) == ZeroStage::Zero3 {
                        spec.options.runtime.zero3_gather
                    } else {
                        Zero3Gather::Flat
                    },
                    param_gather: if matches!(
                        zero_stage(self.zero),
                        ZeroStage::Zero1 | ZeroStage::Zero2
                    ) {
                        spec.options.runtime.param_gather
                    } else {
                        ParamGather::AfterStep
                    },
                    ..spec.options.runtime
                },
                ..spec.options
            },
        }
    }

    /// `metp p=8 dp=1 b=1×1 recompute=none zero=0` (with `cp=`, `pp=`, `v=` where they are
    /// not 1, and `no-flash` when off).
    pub fn label(&self) -> String {
        format!(
            "{} p={}{} dp={} b={}×{} recompute={} zero={}{}",
            self.method,
            self.p,
            outer_label(self.outer),
            self.dp,
            self.micro_batch,
            self.micro_batches,
            recompute_name(self.recompute),
            self.zero,
            if self.flash { "" } else { " no-flash" }
        )
    }
}

/// ` cp=2 pp=4 v=2`, each axis only where it is not 1.
pub fn outer_label(o: OuterAxes) -> String {
    let mut s = String::new();
    if o.cp > 1 {
        s.push_str(&format!(" cp={}", o.cp));
    }
    if o.pp > 1 {
        s.push_str(&format!(" pp={}", o.pp));
    }
    if o.interleave > 1 {
        s.push_str(&format!(" v={}", o.interleave));
    }
    s
}

/// The outer axes to try for `method` at degree p on N GPUs: context parallelism (tp-sp only)
/// over divisors of N/p up to [`MAX_CP`], pipeline stages over divisors of N/(p·cp) up to
/// [`MAX_PP`] and the layers (split as evenly as possible, Megatron's uneven split: the middle
/// stages take the remainder, as LLaMA 3 405B's 126 layers over 16 stages), and every
/// interleave v ≥ 2 that divides the layers of the fullest stage (with pp·v virtual stages no
/// more than the layers, up to [`MAX_INTERLEAVE`]) — each restricted to the values the user
/// fixed ([`Constraints`]).
fn outer_axes(method: MethodId, p: u64, n: u64, layers: u64, spec: &PlanSpec) -> Vec<OuterAxes> {
    let c = &spec.constraints;
    let divisors = |x: u64| (1..=x).filter(move |d| x.is_multiple_of(*d));
    let cps: Vec<u64> = if method == MethodId::TpSp && spec.outer_axes {
        divisors(n / p)
            .filter(|&x| (x <= MAX_CP || c.cp.is_some()) && Constraints::allows(&c.cp, &x))
            .collect()
    } else {
        vec![1]
    };
    let mut out = Vec::new();
    for cp in cps {
        let pps: Vec<u64> = if spec.outer_axes {
            divisors(n / (p * cp))
                .filter(|&s| {
                    (s <= MAX_PP || c.pp.is_some()) && s <= layers && Constraints::allows(&c.pp, &s)
                })
                .collect()
        } else {
            vec![1]
        };
        for pp in pps {
            let fullest = layers.div_ceil(pp);
            for v in 1..=fullest.min(
                MAX_INTERLEAVE.max(
                    c.interleave
                        .as_ref()
                        .map_or(0, |l| l.iter().copied().max().unwrap_or(0)),
                ),
            ) {
                let usable = v == 1 || (pp >= 2 && fullest.is_multiple_of(v) && pp * v <= layers);
                if !usable || !Constraints::allows(&c.interleave, &v) {
                    continue;
                }
                out.push(OuterAxes {
                    pp,
                    interleave: v,
                    cp,
                });
            }
        }
    }
    out
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
    let c = &spec.constraints;
    let g = spec.global_batch_or_default();
    let recomputes: Vec<Recompute> = RECOMPUTE
        .into_iter()
        .filter(|r| Constraints::allows(&c.recompute, r))
        .collect();
    let zeros: Vec<ZeroStage> = ZERO
        .into_iter()
        .filter(|&z| Constraints::allows(&c.zero, &zero_number(z)))
        .collect();
    let micro_batches: Vec<u64> = c
        .micro_batch
        .clone()
        .unwrap_or_else(|| MICRO_BATCHES.to_vec());
    for &method in &spec.methods {
        for p in (1..=n).filter(|p| n.is_multiple_of(*p) && Constraints::allows(&c.p, p)) {
            if let Err(reason) = method.check_degree(&spec.model, p, &spec.options) {
                rejected.push(Rejection::pair(
                    method,
                    p,
                    n / p,
                    OuterAxes::default(),
                    RejectCategory::InvalidDegree,
                    reason,
                ));
                continue;
            }
            for outer in outer_axes(method, p, n, spec.model.layers, spec) {
                let dp = n / (p * outer.cp * outer.pp);
                if !Constraints::allows(&c.dp, &dp) {
                    continue;
                }
                // Sequences per replica: the global batch's share (the same global batch for
                // every configuration).
                let share = match g {
                    g if g.is_multiple_of(dp) => g / dp,
                    g => {
                        rejected.push(Rejection::pair(
                            method,
                            p,
                            dp,
                            outer,
                            RejectCategory::GlobalBatch,
                            format!("global batch {g} is not a multiple of dp = {dp}"),
                        ));
                        continue;
                    }
                };
                for &flash in flashes {
                    // The sequence granule of the method at p, times cp (Workload::seq_multiple).
                    let multiple = Candidate {
                        method,
                        p,
                        dp,
                        outer,
                        micro_batch: 1,
                        micro_batches: 1,
                        recompute: Recompute::None,
                        zero: 0,
                        flash,
                    }
                    .workload(spec, &spec.hardware)
                    .seq_multiple();
                    if !spec.seq.is_multiple_of(multiple) {
                        let mut r = Rejection::pair(
                            method,
                            p,
                            dp,
                            outer,
                            RejectCategory::SeqMultiple,
                            format!(
                                "sequence length {} is not a multiple of {multiple} ({method} at \
                                 p = {p}{})",
                                spec.seq,
                                outer_label(outer)
                            ),
                        );
                        if spec.include_no_flash {
                            r.flash = Some(flash);
                        }
                        rejected.push(r);
                        continue;
                    }
                    // The group ZeRO shards over (memory::params): the dp · cp replicas for the
                    // methods that shard weights, times p for those that replicate them.
                    let zero_group = if method.shards_weights() {
                        dp * outer.cp
                    } else {
                        dp * outer.cp * p
                    };
                    for &recompute in &recomputes {
                        for &b in micro_batches.iter().filter(|b| share.is_multiple_of(**b)) {
                            let micro_batches = share / b;
                            // Interleaving needs the micro-batches to be a multiple of pp.
                            if outer.interleave > 1 && !micro_batches.is_multiple_of(outer.pp) {
                                continue;
                            }
                            for &z in &zeros {
                                if z != ZeroStage::Zero0 && zero_group == 1 && c.zero.is_none() {
                                    skipped += 1;
                                    continue;
                                }
                                // Only the stages the optimizer-state placement asked for
                                // (over one rank, sharded and replicated are the same).
                                let o = Options {
                                    zero: Some(z),
                                    ..spec.options
                                };
                                if zero_group > 1
                                    && Workload::optimizer_state_conflict(&o).is_some()
                                {
                                    skipped += 1;
                                    continue;
                                }
                                out.push(Candidate {
                                    method,
                                    p,
                                    dp,
                                    outer,
                                    micro_batch: b,
                                    micro_batches,
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
    }
    Ok((out, rejected, skipped))
}
