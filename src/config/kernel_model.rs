//! The kernel model's parameters in a hardware profile (`kernels`: host, memory-bound, GEMM and
//! fused-attention figures, DESIGN §4), each a [`Figure`] with its source, and their dotted
//! field names for validation, fitting and reports, and the choice among a profile's attention
//! implementations (`select_attention`, …). The formulas that use them live in `cost`; the
//! checks on their values in `hardware`; the fused-attention figures and the implementations'
//! set in `attention`. Depends on serde, `figure`, `attention` and `error`.

use serde::{Deserialize, Serialize};

use super::attention::{AttentionKernel, AttentionSet};
pub use super::attention::{AttentionModel, AttentionTiles};
use super::figure::Figure;
use crate::error::{Error, Result};

/// How long the host takes per kernel, and what an isolated, event-timed call sees on top of
/// the device time (the kernel model's host part; see `cost`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostModel {
    /// Host time to issue one eager op: in a training step the host runs ahead of the GPU, so a
    /// kernel costs `max(op_s, device time)`.
    pub op_s: Figure,
    /// What a call timed alone (CUDA events around one call) adds to its device time: the
    /// launch latency the GPU waits for.
    pub isolated_gap_s: Figure,
    /// The shortest time an isolated call is ever measured at (host-bound calls).
    pub isolated_floor_s: Figure,
}

/// Memory-bound kernels (copies, element-wise passes, reductions): `latency_s + bytes moved /
/// gpu.hbm_bytes_per_s` for copies, at `elementwise_fraction` of that bandwidth for element-wise
/// passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryModel {
    /// Fixed device time of one kernel (launch, DRAM latency, tail).
    pub latency_s: Figure,
    /// Share of the copy bandwidth an element-wise pass reaches.
    pub elementwise_fraction: Figure,
}

/// Dense GEMMs (cuBLAS-like): output tiles of `tile`×2·`tile`, 2·`tile`×`tile` or
/// `tile`×`tile`, waves of `gpu.sm_count` tiles, each tile `tile_s` plus its k-steps at
/// `mma_fraction` of an SM's peak; the library's best tile (and split-K) per shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmModel {
    /// Short edge of the output tiles (rows).
    pub tile: Figure,
    /// Depth of one k-step (elements of k loaded per pipeline stage).
    pub k_step: Figure,
    /// Fraction of one SM's peak FLOP rate reached inside a tile's k-loop.
    pub mma_fraction: Figure,
    /// Fixed time per tile (prologue, epilogue not hidden by the next tile).
    pub tile_s: Figure,
    /// Fixed device time per call.
    pub call_s: Figure,
    /// The sustained fraction of `gpu.peak_bf16_flops_per_s` a long GEMM keeps once the GPU
    /// holds its power cap by lowering its clock; absent: no cap (`src/cost/gemm.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_fraction: Option<Figure>,
    /// How long a GEMM runs at its tile rate before the power cap takes over (the time
    /// constant of the clock's response); required with `power_fraction`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_time_s: Option<Figure>,
    /// The fraction of the calibrated clock GEMMs hold inside a training step: the kernel
    /// model is fitted to calls timed in short bursts, while a step runs kernels back to back
    /// for seconds at the GPU's power and thermal limits (`cost::gemm`); absent: 1, the
    /// calibrated clock. Applies to GEMMs in a step only, never to a call timed alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_clock_fraction: Option<Figure>,
    /// How that step clock spreads over a fleet's GPUs: the relative standard deviation of the
    /// clock each GPU holds at its power limit (`config::fleet`). A job synchronises all its
    /// GPUs every step and advances at its slowest one's pace, so its GEMMs run at the slowest
    /// of its N GPUs' clock, `1 − spread·E[max of N standard normals]` of the step clock;
    /// absent: 0, every GPU alike. Applies to the GEMMs of a training step of N > 1 GPUs only,
    /// as the step clock does (the kernels that hold the power limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet_clock_spread: Option<Figure>,
    /// That slowest GPU's fraction of the step clock for the job being evaluated, resolved once
    /// by [`crate::config::Workload::validate`] from `fleet_clock_spread` and the job's GPUs;
    /// never read from or written to a profile. None: 1 (a profile on its own, a call timed
    /// alone, one GPU).
    #[serde(skip)]
    pub job_clock_fraction: Option<f64>,
    /// 1: the library may run stream-K (every tile's k-steps spread evenly over the SMs, with
    /// fp32 partial tiles fixed up) when tiles quantize badly; 0 or absent: it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_k: Option<Figure>,
    /// FP8 GEMMs' own figures where they differ from bf16's (`cost::gemm`); absent: FP8 GEMMs
    /// reach the bf16 fractions of the FP8 peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8: Option<Fp8GemmModel>,
}

/// What FP8 GEMMs reach of `gpu.peak_fp8_flops_per_s`, where measured FP8 calls say it differs
/// from the bf16 fractions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fp8GemmModel {
    /// Fraction of one SM's FP8 peak reached inside a tile's k-loop.
    pub mma_fraction: Figure,
    /// The sustained fraction of the FP8 peak a long FP8 GEMM keeps at the power cap; absent on
    /// a profile without a power cap (`gemm.power_fraction` absent), where it would go unused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_fraction: Option<Figure>,
}

/// The kernel model's parameters (DESIGN §4; formulas in `src/cost`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelModel {
    /// Host-side costs.
    pub host: HostModel,
    /// Copies and element-wise kernels.
    pub memory: MemoryModel,
    /// GEMMs.
    pub gemm: GemmModel,
    /// Fused attention forward.
    pub attention_fwd: AttentionModel,
    /// Fused attention backward.
    pub attention_bwd: AttentionModel,
    /// The attention implementations: which one `attention_fwd` / `attention_bwd` are, the
    /// default, and the others' figures (`config::attention`); absent: one unnamed fused kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<AttentionSet>,
    /// What of this kernel model is not derived from measurements of this GPU (absent: all of
    /// it is); `list` and every report header repeat it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placeholder: Option<String>,
}

impl KernelModel {
    /// Every figure with its dotted field name (for validation, fitting and reports).
    pub fn figures(&self) -> Vec<(String, &Figure)> {
        let mut v: Vec<(String, &Figure)> = vec![
            ("kernels.host.op_s".into(), &self.host.op_s),
            (
                "kernels.host.isolated_gap_s".into(),
                &self.host.isolated_gap_s,
            ),
            (
                "kernels.host.isolated_floor_s".into(),
                &self.host.isolated_floor_s,
            ),
            ("kernels.memory.latency_s".into(), &self.memory.latency_s),
            (
                "kernels.memory.elementwise_fraction".into(),
                &self.memory.elementwise_fraction,
            ),
            ("kernels.gemm.tile".into(), &self.gemm.tile),
            ("kernels.gemm.k_step".into(), &self.gemm.k_step),
            ("kernels.gemm.mma_fraction".into(), &self.gemm.mma_fraction),
            ("kernels.gemm.tile_s".into(), &self.gemm.tile_s),
            ("kernels.gemm.call_s".into(), &self.gemm.call_s),
        ];
        for (name, f) in [
            ("power_fraction", &self.gemm.power_fraction),
            ("power_time_s", &self.gemm.power_time_s),
            ("stream_k", &self.gemm.stream_k),
            ("step_clock_fraction", &self.gemm.step_clock_fraction),
            ("fleet_clock_spread", &self.gemm.fleet_clock_spread),
        ] {
            if let Some(f) = f {
                v.push((format!("kernels.gemm.{name}"), f));
            }
        }
        if let Some(f8) = &self.gemm.fp8 {
            v.push(("kernels.gemm.fp8.mma_fraction".into(), &f8.mma_fraction));
            if let Some(p) = &f8.power_fraction {
                v.push(("kernels.gemm.fp8.power_fraction".into(), p));
            }
        }
        for (pass, a) in self.attention_passes() {
            for (f, fig) in a.figures() {
                v.push((format!("{pass}.{f}"), fig));
            }
            for (f, fig) in [
                ("solo_fraction", &a.solo_fraction),
                ("max_splits", &a.max_splits),
            ] {
                if let Some(fig) = fig {
                    v.push((format!("{pass}.{f}"), fig));
                }
            }
            for t in &a.tiles {
                for (f, fig) in t.figures() {
                    v.push((format!("{pass}.tiles[d={}].{f}", t.head_dim), fig));
                }
            }
        }
        v
    }
}

impl KernelModel {
    /// Every attention pass model with its dotted field prefix: `attention_fwd`,
    /// `attention_bwd`, then each other implementation's passes.
    pub fn attention_passes(&self) -> Vec<(String, &AttentionModel)> {
        let mut v: Vec<(String, &AttentionModel)> = vec![
            ("kernels.attention_fwd".into(), &self.attention_fwd),
            ("kernels.attention_bwd".into(), &self.attention_bwd),
        ];
        if let Some(set) = &self.attention {
            for (k, i) in &set.implementations {
                v.push((format!("kernels.attention.implementations.{k}.fwd"), &i.fwd));
                v.push((format!("kernels.attention.implementations.{k}.bwd"), &i.bwd));
            }
        }
        v
    }
}

impl KernelModel {
    /// The implementation `attention_fwd` / `attention_bwd` describe.
    pub fn fused_attention(&self) -> AttentionKernel {
        self.attention
            .as_ref()
            .map_or(AttentionKernel::Fused, |a| a.fused)
    }

    /// The implementation a workload runs unless told otherwise.
    pub fn default_attention(&self) -> AttentionKernel {
        self.attention
            .as_ref()
            .map_or(AttentionKernel::Fused, |a| a.default)
    }

    /// Every implementation the profile can price, default first, `unfused` last.
    pub fn attention_kernels(&self) -> Vec<AttentionKernel> {
        let mut known = vec![self.fused_attention()];
        if let Some(a) = &self.attention {
            known.extend(a.implementations.keys());
        }
        let default = self.default_attention();
        if let Some(i) = known.iter().position(|&k| k == default) {
            known.remove(i);
            known.insert(0, default);
        }
        known.push(AttentionKernel::Unfused);
        known
    }

    /// Whether the profile can price `k`.
    pub fn has_attention(&self, k: AttentionKernel) -> bool {
        self.attention_kernels().contains(&k)
    }

    /// The implementations as `--attention-kernel` lists them: `sdpa-fa2 (default), fa3, …`.
    pub fn attention_list(&self) -> String {
        let default = self.default_attention();
        self.attention_kernels()
            .iter()
            .map(|&k| {
                if k == default {
                    format!("{k} (default)")
                } else {
                    k.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// What of implementation `k` is not derived from a measurement on this GPU, with the
    /// kernel model's own placeholder note (`unfused` is priced with the GEMM and memory-bound
    /// figures, so only the latter applies to it).
    pub fn placeholder_note(&self, k: AttentionKernel) -> Option<String> {
        let attention = self.attention.as_ref().and_then(|a| {
            if k == a.fused {
                a.fused_placeholder.clone()
            } else {
                a.implementations
                    .get(&k)
                    .and_then(|i| i.placeholder.clone())
            }
        });
        match (&self.placeholder, attention) {
            (None, None) => None,
            (Some(p), None) => Some(p.clone()),
            (None, Some(a)) => Some(format!("attention {k}: {a}")),
            (Some(p), Some(a)) => Some(format!("{p}; attention {k}: {a}")),
        }
    }

    /// Makes `k` the implementation `attention_fwd` / `attention_bwd` describe (the one every
    /// fused call is priced with); the one there before joins the others. `unfused` leaves the
    /// fused figures alone (the schedule then issues no fused kernels). A name the profile
    /// lacks is a usage error listing what it has.
    pub fn select_attention(&mut self, k: AttentionKernel, profile: &str) -> Result<()> {
        if k == AttentionKernel::Unfused || k == self.fused_attention() {
            return Ok(());
        }
        if !self.has_attention(k) {
            return Err(Error::arg(
                "--attention-kernel",
                format!(
                    "'{k}' is not in {profile}'s kernel model; it has: {}",
                    self.attention_list()
                ),
            ));
        }
        // `has_attention` found k among the others: the set and the entry are there.
        let Some(set) = self.attention.as_mut() else {
            unreachable!("{k} is listed only when the profile names implementations")
        };
        let Some(mut chosen) = set.implementations.remove(&k) else {
            unreachable!("{k} is listed only when it is one of the implementations")
        };
        std::mem::swap(&mut chosen.fwd, &mut self.attention_fwd);
        std::mem::swap(&mut chosen.bwd, &mut self.attention_bwd);
        std::mem::swap(&mut chosen.source, &mut set.fused_source);
        std::mem::swap(&mut chosen.placeholder, &mut set.fused_placeholder);
        let before = std::mem::replace(&mut set.fused, k);
        set.implementations.insert(before, chosen);
        Ok(())
    }
}

impl KernelModel {
    /// Makes fused implementation `k` the default (and the one in `attention_fwd` /
    /// `attention_bwd`): for commands that build their own workloads from profiles
    /// (`validate --hw … --attention-kernel`). `unfused` cannot be a default.
    pub fn set_default_attention(&mut self, k: AttentionKernel, profile: &str) -> Result<()> {
        if !k.is_fused() {
            return Err(Error::arg(
                "--attention-kernel",
                "the default must be a fused implementation (unfused runs are --no-flash)",
            ));
        }
        self.select_attention(k, profile)?;
        if let Some(set) = self.attention.as_mut() {
            set.default = k;
        }
        Ok(())
    }
}
