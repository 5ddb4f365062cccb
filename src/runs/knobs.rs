//! The knobs a run file may leave unstated, the values one configuration of a run gives them,
//! and every configuration a run tries: the product of the tried values, the run's own first.

use serde::{Deserialize, Serialize};

use super::file::{RunFile, Unstated};
use crate::config::limits::{self, MAX_RUN_CONFIGURATIONS, MAX_TRIED_VALUES};
use crate::config::{AttentionKernel, GradDtype, LayerOps, Recompute, ZeroStage};
use crate::error::{Error, Result};
use crate::evaluate::AttentionFlops;

/// The knobs a run may leave unstated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Knob {
    /// Virtual pipeline stages per device.
    Interleave,
    /// Sequences per micro-batch.
    MicroBatch,
    /// Activation recomputation.
    Recompute,
    /// ZeRO stage.
    Zero,
    /// Attention implementation.
    AttentionKernel,
    /// Gradient dtype.
    GradDtype,
    /// How the paper's FLOP convention counts attention under a causal mask.
    FlopAttention,
    /// Micro-batches per round of LLaMA 3's flexible interleaved schedule (`config::runtime`).
    PpRound,
    /// How the layers' memory-bound passes ran (`config::LayerOps`).
    LayerOps,
}

impl Knob {
    /// The knob's name, as in files and reports.
    pub fn id(self) -> &'static str {
        match self {
            Knob::Interleave => "interleave",
            Knob::MicroBatch => "micro-batch",
            Knob::Recompute => "recompute",
            Knob::Zero => "zero",
            Knob::AttentionKernel => "attention-kernel",
            Knob::GradDtype => "grad-dtype",
            Knob::FlopAttention => "flop-attention",
            Knob::PpRound => "pp-round",
            Knob::LayerOps => "layer-ops",
        }
    }
}

/// The values of every knob one configuration of a run uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Knobs {
    /// Virtual stages per pipeline stage.
    pub interleave: u64,
    /// Sequences per micro-batch.
    pub micro_batch: u64,
    /// Recomputation.
    pub recompute: Recompute,
    /// ZeRO stage.
    pub zero: u64,
    /// Attention implementation.
    pub attention_kernel: AttentionKernel,
    /// Gradient dtype.
    pub grad_dtype: GradDtype,
    /// FLOP convention's attention counting (only for TFLOP/s and MFU figures).
    pub flop_attention: Option<AttentionFlops>,
    /// Micro-batches per round of the interleaved schedule (`None`: pp, Megatron's).
    pub pp_round: Option<u64>,
    /// How the layers' memory-bound passes ran.
    pub layer_ops: LayerOps,
}

impl Knobs {
    /// `interleave = 3, micro-batch = 1, …` for the knobs in `which`.
    pub fn describe(&self, which: &[Knob]) -> String {
        which
            .iter()
            .map(|&k| format!("{} = {}", k.id(), self.value_text(k)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// One knob's value as text.
    pub fn value_text(&self, k: Knob) -> String {
        match k {
            Knob::Interleave => self.interleave.to_string(),
            Knob::MicroBatch => self.micro_batch.to_string(),
            Knob::Recompute => recompute_id(self.recompute).to_string(),
            Knob::Zero => self.zero.to_string(),
            Knob::AttentionKernel => self.attention_kernel.id().to_string(),
            Knob::GradDtype => self.grad_dtype.id().to_string(),
            Knob::FlopAttention => match self.flop_attention {
                Some(AttentionFlops::Full) => "full".into(),
                Some(AttentionFlops::Causal) => "causal".into(),
                None => "-".into(),
            },
            Knob::PpRound => self.pp_round.map_or_else(|| "pp".into(), |n| n.to_string()),
            Knob::LayerOps => self.layer_ops.id().to_string(),
        }
    }
}

/// `none`, `selective` or `full`.
pub fn recompute_id(r: Recompute) -> &'static str {
    match r {
        Recompute::None => "none",
        Recompute::Selective => "selective",
        Recompute::Full => "full",
    }
}

/// The ZeRO stage of a number 0–3.
pub fn zero_stage(z: u64) -> ZeroStage {
    match z {
        0 => ZeroStage::Zero0,
        1 => ZeroStage::Zero1,
        2 => ZeroStage::Zero2,
        _ => ZeroStage::Zero3,
    }
}

/// The run's own configuration followed by every other combination of the tried values.
pub(super) fn configurations(
    f: &RunFile,
    bad: &dyn Fn(&str, String) -> Error,
) -> Result<Vec<Knobs>> {
    let own = Knobs {
        interleave: f.interleave,
        micro_batch: f.micro_batch,
        recompute: f.recompute,
        zero: f.zero,
        attention_kernel: f.attention_kernel,
        grad_dtype: f.grad_dtype,
        flop_attention: f.measured.flops.as_ref().map(|fl| fl.attention),
        pp_round: f.pp_round,
        layer_ops: f.layer_ops,
    };
    let mut all = vec![own.clone()];
    let mut seen: Vec<Knob> = Vec::new();
    for (i, u) in f.unstated.iter().enumerate() {
        let field = |rest: &str| format!("unstated[{i}].{rest}");
        check_unstated(u, i, bad)?;
        if seen.contains(&u.knob) {
            return Err(bad(
                &field("knob"),
                format!("'{}' is listed twice", u.knob.id()),
            ));
        }
        seen.push(u.knob);
        if u.knob == Knob::FlopAttention && f.measured.flops.is_none() {
            return Err(bad(
                &field("knob"),
                "flop-attention needs a TFLOP/s or MFU figure with its FLOP convention".into(),
            ));
        }
        let mut values: Vec<Knobs> = Vec::new();
        for (j, v) in u.tried.iter().enumerate() {
            let at = field(&format!("tried[{j}]"));
            let mut k = own.clone();
            set_knob(&mut k, u.knob, v).map_err(|m| bad(&at, m))?;
            if values.contains(&k) {
                return Err(bad(&at, format!("{v} is tried twice")));
            }
            values.push(k);
        }
        if !values.contains(&own) {
            return Err(bad(
                &field("tried"),
                format!(
                    "does not hold the run's own {} ({})",
                    u.knob.id(),
                    own.value_text(u.knob)
                ),
            ));
        }
        let mut next = Vec::new();
        for base in &all {
            for v in &values {
                let mut k = base.clone();
                set_knob_from(&mut k, u.knob, v);
                next.push(k);
            }
        }
        // Own configuration first, the rest in the order tried.
        next.sort_by_key(|k| k != &own);
        next.dedup();
        if next.len() > MAX_RUN_CONFIGURATIONS {
            return Err(bad(
                &field("tried"),
                format!(
                    "the unstated knobs make {} configurations, more than {MAX_RUN_CONFIGURATIONS}",
                    next.len()
                ),
            ));
        }
        all = next;
    }
    Ok(all)
}

fn check_unstated(u: &Unstated, i: usize, bad: &dyn Fn(&str, String) -> Error) -> Result<()> {
    let field = |rest: &str| format!("unstated[{i}].{rest}");
    limits::check_text(&u.why, limits::MAX_TEXT_CHARS).map_err(|m| bad(&field("why"), m))?;
    if u.why.trim().is_empty() {
        return Err(bad(
            &field("why"),
            "must say why the run's value is chosen".into(),
        ));
    }
    if u.tried.is_empty() || u.tried.len() > MAX_TRIED_VALUES {
        return Err(bad(
            &field("tried"),
            format!(
                "must list 1 to {MAX_TRIED_VALUES} values, got {}",
                u.tried.len()
            ),
        ));
    }
    Ok(())
}

/// Sets knob `knob` of `k` from a JSON value, checking it.
fn set_knob(k: &mut Knobs, knob: Knob, v: &serde_json::Value) -> std::result::Result<(), String> {
    let count = |max: u64| -> std::result::Result<u64, String> {
        match v.as_u64() {
            Some(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(format!("must be an integer from 1 to {max}, got {v}")),
        }
    };
    let text = || -> std::result::Result<&str, String> {
        v.as_str()
            .ok_or_else(|| format!("must be a string, got {v}"))
    };
    match knob {
        Knob::Interleave => k.interleave = count(limits::MAX_LAYERS)?,
        Knob::MicroBatch => k.micro_batch = count(limits::MAX_MICRO_BATCH)?,
        Knob::Zero => match v.as_u64() {
            Some(z) if z <= 3 => k.zero = z,
            _ => return Err(format!("must be 0, 1, 2 or 3, got {v}")),
        },
        Knob::Recompute => {
            k.recompute = match text()? {
                "none" => Recompute::None,
                "selective" => Recompute::Selective,
                "full" => Recompute::Full,
                other => return Err(format!("must be none, selective or full, got '{other}'")),
            }
        }
        Knob::AttentionKernel => {
            let name = text()?;
            k.attention_kernel = AttentionKernel::parse(name).ok_or_else(|| {
                format!(
                    "unknown attention implementation '{name}'; known: {}",
                    AttentionKernel::ALL.map(AttentionKernel::id).join(", ")
                )
            })?;
        }
        Knob::GradDtype => {
            k.grad_dtype = match text()? {
                "fp32" => GradDtype::Fp32,
                "bf16" => GradDtype::Bf16,
                other => return Err(format!("must be fp32 or bf16, got '{other}'")),
            }
        }
        Knob::PpRound => k.pp_round = Some(count(u64::from(u32::MAX))?),
        Knob::LayerOps => {
            k.layer_ops = match text()? {
                "fused" => LayerOps::Fused,
                "eager" => LayerOps::Eager,
                "eager-fused-norm" => LayerOps::EagerFusedNorm,
                other => {
                    return Err(format!(
                        "must be fused, eager or eager-fused-norm, got '{other}'"
                    ))
                }
            }
        }
        Knob::FlopAttention => {
            k.flop_attention = Some(match text()? {
                "full" => AttentionFlops::Full,
                "causal" => AttentionFlops::Causal,
                other => return Err(format!("must be full or causal, got '{other}'")),
            })
        }
    }
    Ok(())
}

/// Copies knob `knob` from `from` into `k`.
fn set_knob_from(k: &mut Knobs, knob: Knob, from: &Knobs) {
    match knob {
        Knob::Interleave => k.interleave = from.interleave,
        Knob::MicroBatch => k.micro_batch = from.micro_batch,
        Knob::Recompute => k.recompute = from.recompute,
        Knob::Zero => k.zero = from.zero,
        Knob::AttentionKernel => k.attention_kernel = from.attention_kernel,
        Knob::GradDtype => k.grad_dtype = from.grad_dtype,
        Knob::FlopAttention => k.flop_attention = from.flop_attention,
        Knob::PpRound => k.pp_round = from.pp_round,
        Knob::LayerOps => k.layer_ops = from.layer_ops,
    }
}
