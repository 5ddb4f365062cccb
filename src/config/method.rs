//! The parallel methods and what each needs of a model and a degree (DESIGN §2): how they split
//! heads, widths and the sequence. These rules decide whether a configuration is valid at all;
//! each method's tensors and step plan live in `memory` and `schedule`.

use serde::{Deserialize, Serialize};

use super::{Model, Options};
use crate::error::{Error, Result};

/// The parallel methods metp-sim compares (DESIGN §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum MethodId {
    /// METP (DESIGN §1).
    #[serde(rename = "metp")]
    Metp,
    /// Megatron tensor parallelism.
    #[serde(rename = "tp")]
    Tp,
    /// Megatron TP + sequence parallelism.
    #[serde(rename = "tp-sp")]
    TpSp,
    /// DeepSpeed-Ulysses.
    #[serde(rename = "ulysses")]
    Ulysses,
    /// Ring attention / context parallelism.
    #[serde(rename = "ring")]
    Ring,
    /// Ring self-attention (Li et al. 2021).
    #[serde(rename = "rsa")]
    Rsa,
}

impl MethodId {
    /// All methods, in the order reports list them.
    pub const ALL: [MethodId; 6] = [
        MethodId::Metp,
        MethodId::Tp,
        MethodId::TpSp,
        MethodId::Ulysses,
        MethodId::Ring,
        MethodId::Rsa,
    ];

    /// The id used on the command line and in outputs.
    pub fn id(self) -> &'static str {
        match self {
            MethodId::Metp => "metp",
            MethodId::Tp => "tp",
            MethodId::TpSp => "tp-sp",
            MethodId::Ulysses => "ulysses",
            MethodId::Ring => "ring",
            MethodId::Rsa => "rsa",
        }
    }

    /// Parses one id.
    pub fn parse(flag: &str, text: &str) -> Result<MethodId> {
        MethodId::ALL
            .into_iter()
            .find(|m| m.id() == text.trim())
            .ok_or_else(|| {
                Error::arg(
                    flag,
                    format!(
                        "unknown method '{text}'; available: {}",
                        MethodId::ALL.map(|m| m.id()).join(", ")
                    ),
                )
            })
    }

    /// Parses `a,b,…` or `all`.
    pub fn parse_list(flag: &str, text: &str) -> Result<Vec<MethodId>> {
        if text.trim() == "all" {
            return Ok(MethodId::ALL.to_vec());
        }
        let mut v: Vec<MethodId> = text
            .split(',')
            .map(|t| MethodId::parse(flag, t))
            .collect::<Result<_>>()?;
        v.sort();
        v.dedup();
        Ok(v)
    }

    /// Whether the method shards the layer weights 1/p (otherwise they are replicated across
    /// the p devices unless ZeRO shards them).
    pub fn shards_weights(self) -> bool {
        matches!(self, MethodId::Metp | MethodId::Tp | MethodId::TpSp)
    }

    /// Checks that degree `p` can split `model` this way, whatever the sequence length: heads
    /// and widths divisible by p, K/V heads divisible by the ways heads are split
    /// ([`kv_heads_split`]), METP's head groups a multiple of p. `Err` carries the reason.
    pub fn check_degree(
        self,
        model: &Model,
        p: u64,
        options: &Options,
    ) -> std::result::Result<(), String> {
        if p == 0 {
            return Err("degree must be positive".into());
        }
        match self {
            MethodId::Metp => {
                let g = options.metp.head_groups(p);
                if g == 0 || !g.is_multiple_of(p) {
                    return Err(format!(
                        "head groups ({g}) must be a positive multiple of p = {p}"
                    ));
                }
                divisible("heads", model.heads, p)?;
                if !model.heads.is_multiple_of(g) {
                    return Err(format!(
                        "heads ({}) is not divisible by head groups ({g})",
                        model.heads
                    ));
                }
                kv_heads_split(model.kv_heads, g, "head groups")?;
                divisible("ffn_hidden", model.ffn_hidden, p)
            }
            // Heads and MLP columns split across the p devices.
            MethodId::Tp | MethodId::TpSp => {
                divisible("heads", model.heads, p)?;
                divisible("ffn_hidden", model.ffn_hidden, p)?;
                kv_heads_split(model.kv_heads, p, "p")
            }
            // The all-to-all hands each device a/p heads.
            MethodId::Ulysses => {
                divisible("heads", model.heads, p)?;
                kv_heads_split(model.kv_heads, p, "p")
            }
            // Only the sequence is split.
            MethodId::Ring | MethodId::Rsa => Ok(()),
        }
    }

    /// The multiple every sequence length must be at degree `p`: the p sequence blocks of the
    /// methods that split the sequence (2p chunks for the K/V rings under zig-zag causal
    /// masking), 1 for TP.
    pub fn seq_multiple(self, p: u64, options: &Options) -> u64 {
        match self {
            MethodId::Tp => 1,
            MethodId::TpSp | MethodId::Ulysses | MethodId::Rsa => p,
            MethodId::Ring | MethodId::Metp => {
                if options.causal && options.causal_zigzag {
                    2 * p
                } else {
                    p
                }
            }
        }
    }
}

/// `Err` with a reason unless `n` is divisible by `p`.
fn divisible(what: &str, n: u64, p: u64) -> std::result::Result<(), String> {
    if n.is_multiple_of(p) {
        Ok(())
    } else {
        Err(format!("{what} ({n}) is not divisible by p = {p}"))
    }
}

/// The one rule for grouped-query attention, in every method that splits heads (`tp`, `tp-sp`
/// and `ulysses` over p devices, `metp` over its head groups) and in the executed units: the
/// K/V heads split evenly, `ways` dividing `kv_heads`. Fewer K/V heads than ways is refused,
/// as Megatron-LM refuses it (`num_query_groups_per_partition = divide(num_query_groups,
/// tp_size)` in `megatron/core/transformer/attention.py` asserts divisibility), rather than
/// replicating K/V heads as inference engines do: replication would duplicate the K/V weights,
/// their gradients and optimizer state, and add an all-reduce of those gradients among the
/// replicas that no training framework this tool models performs.
pub fn kv_heads_split(kv_heads: u64, ways: u64, what: &str) -> std::result::Result<(), String> {
    if ways == 0 || !kv_heads.is_multiple_of(ways) {
        return Err(format!(
            "kv_heads ({kv_heads}) is not divisible by {what} ({ways}): grouped-query attention \
             needs whole K/V heads per device (Megatron refuses replicating them; use a degree \
             that divides {kv_heads}, or ring)"
        ));
    }
    Ok(())
}

impl std::fmt::Display for MethodId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}
