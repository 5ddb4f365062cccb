//! Attention implementations in a profile's kernel model (`kernels.attention`): which fused
//! kernels the profile has figures for (PyTorch SDPA / FlashAttention-2, FlashAttention-3,
//! cuDNN, …), which one `kernels.attention_fwd` / `attention_bwd` describe, which one a workload
//! runs unless told otherwise, and the choice of one (`--attention-kernel`).
//!
//! `unfused` is every profile's: softmax(QKᵀ)·V as two GEMMs and memory-bound passes over the
//! materialised scores, priced with the profile's GEMM and memory-bound figures (the schedule's
//! `--no-flash` kernels). Choosing an implementation swaps its figures into `attention_fwd` /
//! `attention_bwd`, so every pricing path (`cost`, the analytic twin, the simulator, `kernels`)
//! sees the chosen one without knowing there were others. Depends only on serde and `error`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::kernel_model::{AttentionModel, KernelModel};
use crate::error::{Error, Result};

/// An attention implementation, by its command-line name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AttentionKernel {
    /// Scores and probabilities materialised: two GEMMs and element-wise passes (`--no-flash`).
    #[serde(rename = "unfused")]
    Unfused,
    /// A profile's one fused kernel when its kernel model names none (`kernels.attention`
    /// absent, e.g. a profile written by `calibrate`).
    #[serde(rename = "fused")]
    Fused,
    /// PyTorch `scaled_dot_product_attention`'s flash backend (FlashAttention-2).
    #[serde(rename = "sdpa-fa2")]
    SdpaFa2,
    /// FlashAttention-2 (Dao-AILab `flash_attn`).
    #[serde(rename = "fa2")]
    Fa2,
    /// FlashAttention-3 (Hopper: warp specialisation, wgmma, TMA).
    #[serde(rename = "fa3")]
    Fa3,
    /// FlashAttention-4 (Blackwell: tcgen05, tensor memory).
    #[serde(rename = "fa4")]
    Fa4,
    /// cuDNN fused attention (as Transformer Engine and PyTorch's cuDNN SDPA backend call it).
    #[serde(rename = "cudnn")]
    Cudnn,
    /// Composable Kernel / AITER flash attention on AMD Instinct.
    #[serde(rename = "ck")]
    Ck,
    /// Triton flash attention.
    #[serde(rename = "triton")]
    Triton,
}

impl AttentionKernel {
    /// Every implementation, in the order they are listed.
    pub const ALL: [AttentionKernel; 9] = [
        AttentionKernel::SdpaFa2,
        AttentionKernel::Fa2,
        AttentionKernel::Fa3,
        AttentionKernel::Fa4,
        AttentionKernel::Cudnn,
        AttentionKernel::Ck,
        AttentionKernel::Triton,
        AttentionKernel::Fused,
        AttentionKernel::Unfused,
    ];

    /// The command-line name.
    pub fn id(self) -> &'static str {
        match self {
            AttentionKernel::Unfused => "unfused",
            AttentionKernel::Fused => "fused",
            AttentionKernel::SdpaFa2 => "sdpa-fa2",
            AttentionKernel::Fa2 => "fa2",
            AttentionKernel::Fa3 => "fa3",
            AttentionKernel::Fa4 => "fa4",
            AttentionKernel::Cudnn => "cudnn",
            AttentionKernel::Ck => "ck",
            AttentionKernel::Triton => "triton",
        }
    }

    /// The implementation named `text` (its command-line name), if there is one.
    pub fn parse(text: &str) -> Option<AttentionKernel> {
        Self::ALL.into_iter().find(|k| k.id() == text)
    }

    /// Whether it is a fused (FlashAttention-style) kernel.
    pub fn is_fused(self) -> bool {
        self != AttentionKernel::Unfused
    }
}

impl fmt::Display for AttentionKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// One fused implementation besides the one in `attention_fwd` / `attention_bwd`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionImpl {
    /// Where its figures come from (the measurements, the derivation, what is assumed).
    pub source: String,
    /// What of it is not derived from a measurement on this GPU (absent: all of it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placeholder: Option<String>,
    /// Forward pass.
    pub fwd: AttentionModel,
    /// Backward pass.
    pub bwd: AttentionModel,
}

/// The attention implementations of a kernel model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionSet {
    /// The implementation `kernels.attention_fwd` / `attention_bwd` describe.
    pub fused: AttentionKernel,
    /// Where those figures come from, in a line (each figure has its own source too).
    pub fused_source: String,
    /// What of the fused one is not derived from a measurement on this GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fused_placeholder: Option<String>,
    /// The implementation a workload runs unless `--attention-kernel` (or `--no-flash`) says
    /// otherwise.
    pub default: AttentionKernel,
    /// Why that one.
    pub default_source: String,
    /// The other fused implementations, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub implementations: BTreeMap<AttentionKernel, AttentionImpl>,
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

/// The implementation named on the command line: a known name, else a usage error listing the
/// names there are (whether a profile has it is checked against the profile).
pub fn parse_attention_kernel(text: &str) -> Result<AttentionKernel> {
    AttentionKernel::parse(text).ok_or_else(|| {
        Error::arg(
            "--attention-kernel",
            format!(
                "unknown implementation '{text}'; known: {}",
                AttentionKernel::ALL.map(AttentionKernel::id).join(", ")
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_hardware;

    /// A profile's attention section is checked: no `unfused`/`fused` or the fused one among
    /// the others, a default the profile has, an unknown name refused by the schema.
    #[test]
    fn bad_attention_sections_are_refused_with_the_field() {
        let path = std::path::Path::new("h.json");
        let hw = load_hardware("dgx-h100").unwrap();
        let set = |hw: &mut crate::config::Hardware| hw.kernels.attention.as_mut().unwrap().clone();
        let mut bad = hw.clone();
        let mut s = set(&mut bad);
        let fa3 = s.implementations[&AttentionKernel::Fa3].clone();
        s.implementations
            .insert(AttentionKernel::Unfused, fa3.clone());
        bad.kernels.attention = Some(s);
        let e = bad.validate(path).unwrap_err().to_string();
        assert!(
            e.contains("kernels.attention.implementations.unfused"),
            "{e}"
        );
        let mut bad = hw.clone();
        let mut s = set(&mut bad);
        s.implementations.insert(AttentionKernel::SdpaFa2, fa3);
        bad.kernels.attention = Some(s);
        let e = bad.validate(path).unwrap_err().to_string();
        assert!(e.contains("implementations.sdpa-fa2"), "{e}");
        let mut bad = hw.clone();
        let mut s = set(&mut bad);
        s.default = AttentionKernel::Ck;
        bad.kernels.attention = Some(s);
        let e = bad.validate(path).unwrap_err().to_string();
        assert!(
            e.contains("kernels.attention.default") && e.contains("'ck'"),
            "{e}"
        );
        let mut bad = hw.clone();
        let mut s = set(&mut bad);
        s.implementations
            .get_mut(&AttentionKernel::Fa3)
            .unwrap()
            .fwd
            .mma_fraction
            .value = 1.5;
        bad.kernels.attention = Some(s);
        let e = bad.validate(path).unwrap_err().to_string();
        assert!(
            e.contains("kernels.attention.implementations.fa3.fwd.mma_fraction"),
            "{e}"
        );
        let json = serde_json::to_string(&hw)
            .unwrap()
            .replace("\"default\":\"sdpa-fa2\"", "\"default\":\"fa9\"");
        assert!(serde_json::from_str::<crate::config::Hardware>(&json).is_err());
        hw.validate(path).unwrap();
    }

    #[test]
    fn names_round_trip() {
        for k in AttentionKernel::ALL {
            assert_eq!(AttentionKernel::parse(k.id()), Some(k));
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.id()));
        }
        assert!(parse_attention_kernel("fa5").is_err());
    }

    /// Selecting an implementation swaps its figures in; selecting the first one back restores
    /// the profile exactly; a name the profile lacks is refused with what it has.
    #[test]
    fn selection_swaps_and_restores() {
        let hw = load_hardware("dgx-h100").unwrap();
        let k = &hw.kernels;
        let fused = k.fused_attention();
        let other = k
            .attention_kernels()
            .into_iter()
            .find(|&x| x != fused && x != AttentionKernel::Unfused)
            .expect("dgx-h100 has a second fused implementation");
        let mut m = k.clone();
        m.select_attention(other, "dgx-h100").unwrap();
        assert_eq!(m.fused_attention(), other);
        assert_ne!(m.attention_fwd, k.attention_fwd);
        assert_eq!(m.attention_kernels().len(), k.attention_kernels().len());
        m.select_attention(fused, "dgx-h100").unwrap();
        assert_eq!(&m, k);
        m.select_attention(AttentionKernel::Unfused, "dgx-h100")
            .unwrap();
        assert_eq!(&m, k);
        let e = m
            .select_attention(AttentionKernel::Ck, "dgx-h100")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--attention-kernel: 'ck' is not in dgx-h100's kernel model; it has: ")
                && e.contains("(default)")
                && e.ends_with("unfused"),
            "{e}"
        );
    }
}
