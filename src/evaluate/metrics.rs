//! What a step's times mean for the people who run it: throughput, model FLOPs utilisation,
//! exposed-communication share, overlap efficiency, and whether the configuration fits. Every
//! command reports these from here, simulated or closed form alike.

use serde::Serialize;

use crate::config::{limits, ValidWorkload, Workload};
use crate::error::{Error, Result};
use crate::memory::Inventory;
use crate::schedule::StepTimes;

/// Metrics of one step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Metrics {
    /// Step time.
    pub step_time_s: f64,
    /// Compute time on the critical device.
    pub compute_s: f64,
    /// Communication time on the critical device (overlapped or not).
    pub communication_s: f64,
    /// Communication the compute stream waits for, on the critical device.
    pub exposed_communication_s: f64,
    /// `exposed / step`.
    pub exposed_share: f64,
    /// Share of communication hidden behind compute: `1 − exposed / communication`, within
    /// [0, 1]; 1 without communication.
    pub overlap_efficiency: f64,
    /// Tokens trained per second over all devices.
    pub tokens_per_s: f64,
    /// Model FLOPs utilisation: [`model_flops`] / (step time × peak × devices).
    pub mfu: f64,
    /// Peak bytes per device (the memory inventory's).
    pub peak_bytes: u128,
    /// Device memory.
    pub capacity_bytes: u128,
    /// `capacity − peak`, 0 when it does not fit.
    pub headroom_bytes: u128,
    /// Whether the peak fits in device memory.
    pub fits: bool,
}

impl Metrics {
    /// The metrics of `times` for workload `w` with memory inventory `inventory`. A step time
    /// that is not positive and finite gives zero throughput and MFU rather than an infinity.
    pub fn new(w: &ValidWorkload, times: &StepTimes, inventory: &Inventory) -> Metrics {
        let step = times.step_time_s;
        let ok = step.is_finite() && step > 0.0;
        let per_step = |x: f64| if ok { x / step } else { 0.0 };
        let peak_flops = w.peak_flops_per_s() * w.devices() as f64;
        Metrics {
            step_time_s: step,
            compute_s: times.compute_s,
            communication_s: times.communication_s,
            exposed_communication_s: times.exposed_communication_s,
            exposed_share: per_step(times.exposed_communication_s),
            overlap_efficiency: if times.communication_s > 0.0 {
                (1.0 - times.exposed_communication_s / times.communication_s).clamp(0.0, 1.0)
            } else {
                1.0
            },
            tokens_per_s: per_step(w.tokens_per_step() as f64),
            mfu: per_step(model_flops(w)) / peak_flops,
            peak_bytes: inventory.peak_bytes,
            capacity_bytes: inventory.capacity_bytes,
            headroom_bytes: inventory
                .capacity_bytes
                .saturating_sub(inventory.peak_bytes),
            fits: inventory.fits,
        }
    }
}

impl Metrics {
    /// `Err` unless every number is one the tool may report: finite and non-negative times, a
    /// positive step no longer than the simulator's clock holds (`limits::MAX_SIM_PS`, the
    /// same bound for closed-form times), and an MFU of at most 1 — a step faster than the
    /// hardware's peak means the inputs are outside what the model describes. `what` names
    /// the times ("simulated", "closed-form").
    pub fn check(&self, what: &str) -> Result<()> {
        let impossible = |message: String| Err(Error::Impossible { message });
        for (name, v) in [
            ("step time", self.step_time_s),
            ("compute time", self.compute_s),
            ("communication time", self.communication_s),
            ("exposed communication", self.exposed_communication_s),
            ("tokens/s", self.tokens_per_s),
            ("MFU", self.mfu),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return impossible(format!("the {what} {name} is {v}"));
            }
        }
        if self.step_time_s <= 0.0 {
            return impossible(format!("the {what} step time is {} s", self.step_time_s));
        }
        let max_s = limits::MAX_SIM_PS as f64 / 1e12;
        if self.step_time_s > max_s {
            return Err(Error::TooLarge {
                message: format!(
                    "the {what} step time is {:.3e} s, more than {max_s:.3e} s (2^62 ps, about \
                     53 days, what the simulator's clock holds); shorten the sequence or use \
                     more devices",
                    self.step_time_s
                ),
            });
        }
        if self.mfu > 1.0 {
            return impossible(format!(
                "the {what} MFU is {:.4} (> 1): the step would run faster than the hardware's \
                 peak; check the profile's gpu.peak_bf16_flops_per_s (peak_fp8_flops_per_s for FP8) and \
                 kernel model",
                self.mfu
            ));
        }
        Ok(())
    }
}

/// How attention scores count in a FLOP convention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttentionFlops {
    /// Every score of the s × s matrix, causal mask or not (Megatron's 72·B·s·L·h²·(1 +
    /// s/6h + …), PaLM's 6N + 12·L·H·Q·T).
    Full,
    /// Halved under a causal mask (the work a fused kernel that skips masked blocks does).
    Causal,
}

/// Which FLOPs a published TFLOP/s or MFU figure counts: the GEMMs at 6 FLOPs per parameter per
/// token (every layer and the output head; the embedding lookup is not a product), attention
/// scores at 12·s²·h per layer and sequence (4 forward, 8 backward) counted [`AttentionFlops`]
/// way, and, when `recomputation` is set, the forward work recomputation repeats (full: the
/// layers' GEMMs and attention once more; selective: the attention scores' forward).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlopConvention {
    /// How attention scores count.
    pub attention: AttentionFlops,
    /// Whether recomputed forward work counts (hardware FLOPs, as Narayanan et al. 2021's
    /// 96·B·s·L·h² does for full recomputation).
    pub recomputation: bool,
}

impl FlopConvention {
    /// The tool's own MFU: causal attention halved, recomputation not counted.
    pub const TOOL: FlopConvention = FlopConvention {
        attention: AttentionFlops::Causal,
        recomputation: false,
    };

    /// One line saying what the convention counts, for reports.
    pub fn words(&self) -> String {
        format!(
            "6 FLOPs per parameter per token (layers and output head) + attention 12·s²·h per \
             layer{}; recomputation {}",
            match self.attention {
                AttentionFlops::Full => ", every score counted (causal or not)",
                AttentionFlops::Causal => ", halved under a causal mask",
            },
            if self.recomputation {
                "counted"
            } else {
                "not counted"
            }
        )
    }
}

/// The tool's MFU convention in words, printed next to every MFU it reports.
pub fn mfu_convention() -> String {
    mfu_convention_with(false)
}

/// [`mfu_convention`], saying where FP8 changes the peak when some MFU it stands next to is of
/// a workload with FP8 linear layers (`fp8`).
pub fn mfu_convention_with(fp8: bool) -> String {
    format!(
        "MFU: {} — of the profile's dense bf16 peak{}",
        FlopConvention::TOOL.words(),
        if fp8 {
            " (its dense FP8 peak where the layers' linear GEMMs run FP8)"
        } else {
            ""
        }
    )
}

/// Model FLOPs of one step as the tool counts them for its MFU ([`FlopConvention::TOOL`]): 6
/// FLOPs per parameter per token for the GEMMs (layers and head), plus attention scores
/// 12·b·s²·h per layer (4 forward, 8 backward), halved under causal masking; no recomputation.
pub fn model_flops(w: &Workload) -> f64 {
    step_flops(w, FlopConvention::TOOL)
}

/// FLOPs of one step of `w` counted by `conv` ([`FlopConvention`]).
pub fn step_flops(w: &Workload, conv: FlopConvention) -> f64 {
    let m = &w.model;
    // In floats: the factors are bounded (config::limits), and no integer product may wrap.
    let sequences = w.micro_batch as f64 * w.micro_batches as f64 * w.dp as f64;
    let tokens = w.seq as f64 * sequences;
    let layer_params =
        m.layers as f64 * (m.attention_params_per_layer() as f64 + m.mlp_params_per_layer() as f64);
    let head_params = m.vocab as f64 * m.hidden as f64;
    let halved = conv.attention == AttentionFlops::Causal && w.options.causal;
    let s = w.seq as f64;
    // Forward attention scores of every layer: QKᵀ and P·V, 2·s²·h each.
    let attn_fwd = 4.0
        * s
        * s
        * m.hidden as f64
        * m.layers as f64
        * sequences
        * if halved { 0.5 } else { 1.0 };
    let mut flops = 6.0 * (layer_params + head_params) * tokens + 3.0 * attn_fwd;
    if conv.recomputation {
        flops += match w.options.recompute {
            crate::config::Recompute::None => 0.0,
            crate::config::Recompute::Selective => attn_fwd,
            crate::config::Recompute::Full => 2.0 * layer_params * tokens + attn_fwd,
        };
    }
    flops
}

/// The time and cost of training a whole run at a step's throughput (`--tokens`,
/// `--gpu-hour-price`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Training {
    /// Tokens trained.
    pub tokens: f64,
    /// Days of training (`tokens / tokens per second`).
    pub days: f64,
    /// GPU-hours (hours × GPUs).
    pub gpu_hours: f64,
    /// GPU-hours × the price per GPU-hour, when one was given.
    pub cost: Option<f64>,
}

impl Training {
    /// A run of `tokens` at `tokens_per_s` on `gpus` GPUs (`None` without a throughput).
    pub fn of(tokens: f64, tokens_per_s: f64, gpus: u64, price: Option<f64>) -> Option<Training> {
        if !(tokens_per_s > 0.0 && tokens_per_s.is_finite() && tokens.is_finite()) {
            return None;
        }
        let seconds = tokens / tokens_per_s;
        let gpu_hours = seconds / 3600.0 * gpus as f64;
        Some(Training {
            tokens,
            days: seconds / 86400.0,
            gpu_hours,
            cost: price.map(|p| p * gpu_hours),
        })
    }
}
