//! Rejected configurations: the category and the reason, in words.

use serde::{Deserialize, Serialize};

use super::candidate::recompute_index;
use super::Candidate;
use crate::config::{MethodId, OuterAxes, Recompute};

/// Why a configuration was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RejectCategory {
    /// The memory inventory's peak exceeds device memory.
    OutOfMemory,
    /// The sequence length is not a multiple of the method's granule at this degree.
    SeqMultiple,
    /// The global batch is not a multiple of dp.
    GlobalBatch,
    /// The model does not allow this degree for this method (heads, widths not divisible, …).
    InvalidDegree,
    /// Any other reason the workload cannot be built, estimated or simulated.
    Invalid,
}

impl RejectCategory {
    /// Kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            RejectCategory::OutOfMemory => "out-of-memory",
            RejectCategory::SeqMultiple => "seq-multiple",
            RejectCategory::GlobalBatch => "global-batch",
            RejectCategory::InvalidDegree => "invalid-degree",
            RejectCategory::Invalid => "invalid",
        }
    }
}

/// A rejected configuration. Rejections of a (method, degree) pair as a whole (degree, global
/// batch, sequence granule) leave the per-combination fields empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rejection {
    /// Method.
    pub method: MethodId,
    /// Degree.
    pub p: u64,
    /// Data-parallel replicas.
    pub dp: u64,
    /// Pipeline stages, interleaving and context-parallel ranks.
    pub outer: OuterAxes,
    /// Micro-batch.
    pub micro_batch: Option<u64>,
    /// Micro-batches per replica.
    pub micro_batches: Option<u64>,
    /// Recomputation.
    pub recompute: Option<Recompute>,
    /// ZeRO stage.
    pub zero: Option<u8>,
    /// FlashAttention.
    pub flash: Option<bool>,
    /// Category.
    pub category: RejectCategory,
    /// The reason, in words.
    pub reason: String,
    /// Peak bytes per device, when the inventory could be built.
    pub peak_bytes: Option<u128>,
    /// Device memory, when the inventory could be built.
    pub capacity_bytes: Option<u128>,
    /// Whether the peak fits in device memory, when the inventory could be built (`false` for
    /// every out-of-memory rejection).
    pub fits: Option<bool>,
}

impl Rejection {
    pub(super) fn pair(
        method: MethodId,
        p: u64,
        dp: u64,
        outer: OuterAxes,
        category: RejectCategory,
        reason: String,
    ) -> Self {
        Rejection {
            method,
            p,
            dp,
            outer,
            micro_batch: None,
            micro_batches: None,
            recompute: None,
            zero: None,
            flash: None,
            category,
            reason,
            peak_bytes: None,
            capacity_bytes: None,
            fits: None,
        }
    }

    pub(super) fn of(
        c: &Candidate,
        category: RejectCategory,
        reason: String,
        memory: Option<(u128, u128)>,
    ) -> Self {
        Rejection {
            method: c.method,
            p: c.p,
            dp: c.dp,
            outer: c.outer,
            micro_batch: Some(c.micro_batch),
            micro_batches: Some(c.micro_batches),
            recompute: Some(c.recompute),
            zero: Some(c.zero),
            flash: Some(c.flash),
            category,
            reason,
            peak_bytes: memory.map(|m| m.0),
            capacity_bytes: memory.map(|m| m.1),
            fits: memory.map(|(peak, capacity)| peak <= capacity),
        }
    }

    /// `metp p=8 dp=1 …` as far as the rejection names it.
    pub fn label(&self) -> String {
        match (
            self.micro_batch,
            self.micro_batches,
            self.recompute,
            self.zero,
        ) {
            (Some(b), Some(n), Some(r), Some(z)) => Candidate {
                method: self.method,
                p: self.p,
                dp: self.dp,
                outer: self.outer,
                micro_batch: b,
                micro_batches: n,
                recompute: r,
                zero: z,
                flash: self.flash.unwrap_or(true),
            }
            .label(),
            _ => format!(
                "{} p={}{} dp={}",
                self.method,
                self.p,
                super::candidate::outer_label(self.outer),
                self.dp
            ),
        }
    }

    /// Output order: by category, out-of-memory nearest misses first, then the tie-break key.
    pub(super) fn sort_key(&self) -> impl Ord {
        (
            self.category,
            self.peak_bytes.unwrap_or(0),
            self.method,
            self.p,
            self.outer.cp,
            self.outer.pp,
            self.outer.interleave,
            self.dp,
            self.recompute.map(recompute_index),
            self.micro_batch,
            self.zero,
            self.flash.map(|f| !f),
        )
    }
}
