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
        let peak_flops = w.hardware.gpu.peak_bf16_flops_per_s.value * w.devices() as f64;
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
                 peak; check the profile's gpu.peak_bf16_flops_per_s and kernel model",
                self.mfu
            ));
        }
        Ok(())
    }
}

/// Model FLOPs of one step (no recomputation): 6 FLOPs per parameter per token for the GEMMs
/// (layers and head), plus attention scores 12·b·s²·h per layer (4 forward, 8 backward),
/// halved under causal masking.
pub fn model_flops(w: &Workload) -> f64 {
    let m = &w.model;
    // In floats: the factors are bounded (config::limits), and no integer product may wrap.
    let tokens = w.seq as f64 * w.micro_batch as f64 * w.micro_batches as f64 * w.dp as f64;
    let gemm_params = m.layers as f64
        * (m.attention_params_per_layer() as f64 + m.mlp_params_per_layer() as f64)
        + m.vocab as f64 * m.hidden as f64;
    let causal = if w.options.causal { 0.5 } else { 1.0 };
    let s = w.seq as f64;
    let attn = 12.0
        * s
        * s
        * m.hidden as f64
        * m.layers as f64
        * causal
        * (w.micro_batch as f64 * w.micro_batches as f64 * w.dp as f64);
    6.0 * gemm_params * tokens + attn
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
