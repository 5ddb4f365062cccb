//! Attention implementations in a profile's kernel model (`kernels.attention`): which fused
//! kernels the profile has figures for (PyTorch SDPA / FlashAttention-2, FlashAttention-3,
//! cuDNN, …), which one `kernels.attention_fwd` / `attention_bwd` describe, which one a workload
//! runs unless told otherwise, and the choice of one (`--attention-kernel`).
//!
//! `unfused` is every profile's: softmax(QKᵀ)·V as two GEMMs and memory-bound passes over the
//! materialised scores, priced with the profile's GEMM and memory-bound figures (the schedule's
//! `--no-flash` kernels). Choosing an implementation swaps its figures into `attention_fwd` /
//! `attention_bwd`, so every pricing path (`cost`, the analytic twin, the simulator, `kernels`)
//! sees the chosen one without knowing there were others. The figures of one fused pass
//! ([`AttentionModel`], per head dimension [`AttentionTiles`]) live here too; choosing among
//! the implementations is `KernelModel`'s (`kernel_model.rs`), which holds the set. Depends on
//! serde, `figure` and `error`; never on `kernel_model` (it depends on this file).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::figure::Figure;
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

/// One head dimension's fused-attention kernel: its tiles, occupancy and rates (the
/// pass-level `block_q`, `block_k`, `ctas_per_sm`, `mma_fraction` and `solo_fraction` are the
/// kernel for head dimensions no entry covers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionTiles {
    /// The kernel's head dimension: it runs calls of head dimension up to this one (padded).
    pub head_dim: u64,
    /// Query rows of one block.
    pub block_q: Figure,
    /// Key rows of one block.
    pub block_k: Figure,
    /// Thread blocks resident on one SM at once.
    pub ctas_per_sm: Figure,
    /// Fraction of one SM's peak FLOP rate the SM reaches inside the block loop.
    pub mma_fraction: Figure,
    /// Share of that rate one thread block reaches alone on an SM.
    pub solo_fraction: Figure,
    /// Query rows of one block of the split-KV kernel (forward, `max_splits` > 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_block_q: Option<Figure>,
    /// Key rows of one block of the split-KV kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_block_k: Option<Figure>,
}

/// Fused attention, one pass (FlashAttention-2-like): thread blocks of `block_q` queries
/// (forward) or `block_k` keys (backward), `ctas_per_sm` of them resident per SM, each visiting
/// the (query block × key block) pairs the mask leaves, `tile_s` + pairs × pair time at
/// `mma_fraction` of the SM's peak shared by its resident blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionModel {
    /// Query rows of one block.
    pub block_q: Figure,
    /// Key rows of one block.
    pub block_k: Figure,
    /// Thread blocks resident on one SM at once.
    pub ctas_per_sm: Figure,
    /// Fraction of one SM's peak FLOP rate reached inside the block loop.
    pub mma_fraction: Figure,
    /// Fixed time per thread block.
    pub tile_s: Figure,
    /// Fixed device time per call.
    pub call_s: Figure,
    /// Bytes of extra memory-bound passes per query element (batch × q_tokens × heads ×
    /// head_dim), e.g. the backward's pre- and post-processing; 0 for none.
    pub extra_bytes_per_element: Figure,
    /// Host time an isolated call spends around its kernels beyond `host.isolated_floor_s`
    /// (a framework's ops, autograd): it raises the isolated call's floor; charged only when
    /// pricing an isolated call, never in a step.
    pub isolated_extra_s: Figure,
    /// Share of the SM's rate one thread block reaches alone (absent: `1 / ctas_per_sm`, a
    /// lone block no faster than a shared one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solo_fraction: Option<Figure>,
    /// Forward only: the most key/value splits FlashAttention-2's split-KV heuristic may
    /// choose when the grid under-fills the GPU (absent or 1: the kernel never splits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_splits: Option<Figure>,
    /// Per head dimension: the kernel that runs it (empty: the fields above for every one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiles: Vec<AttentionTiles>,
}

impl AttentionModel {
    /// The figures with their field names.
    pub fn figures(&self) -> [(&'static str, &Figure); 8] {
        [
            ("block_q", &self.block_q),
            ("block_k", &self.block_k),
            ("ctas_per_sm", &self.ctas_per_sm),
            ("mma_fraction", &self.mma_fraction),
            ("tile_s", &self.tile_s),
            ("call_s", &self.call_s),
            ("extra_bytes_per_element", &self.extra_bytes_per_element),
            ("isolated_extra_s", &self.isolated_extra_s),
        ]
    }
}

impl AttentionTiles {
    /// The figures with their field names.
    pub fn figures(&self) -> Vec<(&'static str, &Figure)> {
        let mut v = vec![
            ("block_q", &self.block_q),
            ("block_k", &self.block_k),
            ("ctas_per_sm", &self.ctas_per_sm),
            ("mma_fraction", &self.mma_fraction),
            ("solo_fraction", &self.solo_fraction),
        ];
        for (f, fig) in [
            ("split_block_q", &self.split_block_q),
            ("split_block_k", &self.split_block_k),
        ] {
            if let Some(fig) = fig {
                v.push((f, fig));
            }
        }
        v
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
