//! What a kernel is, as the GPU runs it: the shape of the call (GEMM m, n, k; a fused attention
//! call's batch, heads, query and key tokens, head dimension, mask and pass; the bytes a
//! memory-bound kernel moves). The cost model prices shapes, not FLOP counts, because the time
//! of a call depends on how its work is cut into thread blocks (DESIGN §4). Plain data; depends
//! on nothing.

use serde::{Deserialize, Serialize};

/// The operand precision of a GEMM's tensor-core products (its output is bf16 either way).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum GemmDtype {
    /// bf16 operands (the default).
    #[default]
    Bf16,
    /// FP8 operands (E4M3 or E5M2, one byte each, per-tensor scales), as Transformer Engine's
    /// FP8 linear layers run them: the tensor-core peak doubles and operands move half the
    /// bytes. Turning bf16 tensors into FP8 is kernels of its own (`schedule`'s FP8 pass).
    Fp8,
}

impl GemmDtype {
    /// Whether this is the default, bf16 (serde's `skip_serializing_if` takes a reference).
    pub fn is_bf16(&self) -> bool {
        *self == GemmDtype::Bf16
    }

    /// Bytes per operand element.
    pub fn operand_bytes(self) -> f64 {
        match self {
            GemmDtype::Bf16 => 2.0,
            GemmDtype::Fp8 => 1.0,
        }
    }
}

/// A (batched) GEMM: `batch` independent products of an m×k and a k×n matrix, bf16 unless
/// `dtype` says FP8; or, where `parts` > 1, one of `parts` equal shares of such a GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Gemm {
    /// Independent products in the call (1 for a plain GEMM).
    pub batch: u64,
    /// Rows of the output.
    pub m: u64,
    /// Columns of the output.
    pub n: u64,
    /// Inner dimension.
    pub k: u64,
    /// Operand precision (absent from JSON when bf16).
    #[serde(default, skip_serializing_if = "GemmDtype::is_bf16")]
    pub dtype: GemmDtype,
    /// The equal shares the call's time and work are counted in (1: the call itself). A GEMM
    /// that runs whole beside a collective, as Transformer Engine's `bulk` overlap runs it, is
    /// priced as a ring of steps; each step carries one share of the whole call (its time, its
    /// FLOPs and its bytes divided by `parts`), not a smaller GEMM, whose tiles and k-loop would
    /// run at another rate (`schedule::tp_sp`). Absent from JSON when 1.
    #[serde(default = "Gemm::whole", skip_serializing_if = "Gemm::is_whole")]
    pub parts: u64,
}

impl Gemm {
    /// A bf16 GEMM of `batch` m×k by k×n products.
    pub fn bf16(batch: u64, m: u64, n: u64, k: u64) -> Gemm {
        Gemm {
            batch,
            m,
            n,
            k,
            dtype: GemmDtype::Bf16,
            parts: 1,
        }
    }

    /// One of `parts` equal shares of this GEMM (see [`Gemm::parts`]).
    pub fn share(self, parts: u64) -> Gemm {
        Gemm {
            parts: parts.max(1),
            ..self
        }
    }

    /// The part of the whole call this GEMM stands for: 1 / `parts` (a `parts` of 0, which only
    /// a hand-written JSON can hold, counts as the whole call).
    pub fn share_fraction(&self) -> f64 {
        1.0 / self.parts.max(1) as f64
    }

    fn whole() -> u64 {
        1
    }

    fn is_whole(parts: &u64) -> bool {
        *parts == 1
    }

    /// 2·batch·m·n·k, over `parts`.
    pub fn flops(&self) -> f64 {
        2.0 * self.batch as f64
            * self.m as f64
            * self.n as f64
            * self.k as f64
            * self.share_fraction()
    }

    /// Bytes read and written once: the operands at their precision and the bf16 output,
    /// batch·(e·(mk + kn) + 2·mn) with e = 2 (bf16) or 1 (FP8), over `parts`.
    pub fn bytes(&self) -> f64 {
        let (m, n, k) = (self.m as f64, self.n as f64, self.k as f64);
        let e = self.dtype.operand_bytes();
        self.batch as f64 * (e * (m * k + k * n) + 2.0 * m * n) * self.share_fraction()
    }
}

/// Forward or backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttnPass {
    /// Forward: O and the log-sum-exp from Q, K, V.
    Fwd,
    /// Backward: dQ, dK, dV from dO (recomputing the scores).
    Bwd,
}

/// One fused attention call (FlashAttention-2-like) over `batch` sequences × `heads` query
/// heads. Under a causal mask queries and keys are aligned at their ends, as FlashAttention
/// does: query i of q sees keys up to i + kv − q.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Attention {
    /// Sequences in the call.
    pub batch: u64,
    /// Query heads.
    pub heads: u64,
    /// Key/value heads (grouped-query attention shares them).
    pub kv_heads: u64,
    /// Query tokens per sequence.
    pub q_tokens: u64,
    /// Key/value tokens per sequence.
    pub kv_tokens: u64,
    /// Head dimension.
    pub head_dim: u64,
    /// Causal mask.
    pub causal: bool,
    /// Pass.
    pub pass: AttnPass,
}

impl Attention {
    /// Query–key pairs the mask leaves, per sequence and head.
    pub fn visible_pairs(&self) -> f64 {
        let (q, kv) = (self.q_tokens as f64, self.kv_tokens as f64);
        if !self.causal {
            return q * kv;
        }
        // Query i (0-based) sees a = i + 1 + kv − q keys (a ≤ kv, the last query sees all),
        // none when a ≤ 0: the sum of a over max(kv − q, 0) < a ≤ kv.
        let tri = |n: f64| n * (n + 1.0) / 2.0;
        tri(kv) - tri((kv - q).max(0.0))
    }

    /// FLOPs as usually counted: forward 4·pairs·d per head (QKᵀ and P·V), backward 2.5× that
    /// (five products, one of them recomputing QKᵀ).
    pub fn flops(&self) -> f64 {
        let fwd = 4.0
            * self.batch as f64
            * self.heads as f64
            * self.visible_pairs()
            * self.head_dim as f64;
        match self.pass {
            AttnPass::Fwd => fwd,
            AttnPass::Bwd => 2.5 * fwd,
        }
    }

    /// bf16 bytes of Q, K, V and O read or written once (doubled in backward for the
    /// gradients).
    pub fn bytes(&self) -> f64 {
        let io = 2.0
            * self.batch as f64
            * self.head_dim as f64
            * (2.0 * self.q_tokens as f64 * self.heads as f64
                + 2.0 * self.kv_tokens as f64 * self.kv_heads as f64);
        match self.pass {
            AttnPass::Fwd => io,
            AttnPass::Bwd => 2.0 * io,
        }
    }
}

/// The shape of one kernel call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum KernelShape {
    /// A GEMM.
    Gemm(Gemm),
    /// A fused attention call.
    Attention(Attention),
    /// An element-wise or reduction pass moving `bytes` (read plus written).
    Elementwise {
        /// Bytes read plus bytes written.
        bytes: u64,
    },
    /// A device-local copy moving `bytes` (an N-byte buffer moves 2N).
    Copy {
        /// Bytes read plus bytes written.
        bytes: u64,
    },
}

/// The kinds the cost model fits separately and `kernels --compare` reports on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelKind {
    /// GEMMs.
    Gemm,
    /// Fused attention forward.
    AttentionFwd,
    /// Fused attention backward.
    AttentionBwd,
    /// Copies.
    Copy,
    /// Element-wise passes.
    Elementwise,
}

impl KernelKind {
    /// Every kind, in report order.
    pub const ALL: [KernelKind; 5] = [
        KernelKind::Gemm,
        KernelKind::AttentionFwd,
        KernelKind::AttentionBwd,
        KernelKind::Copy,
        KernelKind::Elementwise,
    ];

    /// Name in reports.
    pub fn name(self) -> &'static str {
        match self {
            KernelKind::Gemm => "gemm",
            KernelKind::AttentionFwd => "attention fwd",
            KernelKind::AttentionBwd => "attention bwd",
            KernelKind::Copy => "copy",
            KernelKind::Elementwise => "elementwise",
        }
    }
}

impl KernelShape {
    /// A plain GEMM.
    pub fn gemm(m: u64, n: u64, k: u64) -> KernelShape {
        KernelShape::Gemm(Gemm::bf16(1, m, n, k))
    }

    /// Floating-point operations (0 for memory-bound kernels).
    pub fn flops(&self) -> f64 {
        match self {
            KernelShape::Gemm(g) => g.flops(),
            KernelShape::Attention(a) => a.flops(),
            KernelShape::Elementwise { .. } | KernelShape::Copy { .. } => 0.0,
        }
    }

    /// Bytes moved to and from device memory (at least once).
    pub fn bytes(&self) -> f64 {
        match self {
            KernelShape::Gemm(g) => g.bytes(),
            KernelShape::Attention(a) => a.bytes(),
            KernelShape::Elementwise { bytes } | KernelShape::Copy { bytes } => *bytes as f64,
        }
    }

    /// Kind.
    pub fn kind(&self) -> KernelKind {
        match self {
            KernelShape::Gemm(_) => KernelKind::Gemm,
            KernelShape::Attention(a) if a.pass == AttnPass::Fwd => KernelKind::AttentionFwd,
            KernelShape::Attention(_) => KernelKind::AttentionBwd,
            KernelShape::Elementwise { .. } => KernelKind::Elementwise,
            KernelShape::Copy { .. } => KernelKind::Copy,
        }
    }

    /// Whether the call does no work at all (a GEMM or attention call with an empty
    /// dimension, a pass over no bytes).
    pub fn is_empty(&self) -> bool {
        match self {
            KernelShape::Gemm(g) => g.batch == 0 || g.m == 0 || g.n == 0 || g.k == 0,
            KernelShape::Attention(a) => a.flops() == 0.0,
            KernelShape::Elementwise { bytes } | KernelShape::Copy { bytes } => *bytes == 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attn(q: u64, kv: u64, causal: bool) -> Attention {
        Attention {
            batch: 1,
            heads: 1,
            kv_heads: 1,
            q_tokens: q,
            kv_tokens: kv,
            head_dim: 128,
            causal,
            pass: AttnPass::Fwd,
        }
    }

    /// Brute force over every query of the end-aligned causal mask.
    fn pairs_by_count(q: u64, kv: u64) -> f64 {
        (0..q)
            .map(|i| (i as i64 + 1 + kv as i64 - q as i64).clamp(0, kv as i64) as f64)
            .sum()
    }

    #[test]
    fn causal_pairs_follow_the_end_aligned_mask() {
        // Square: s(s+1)/2 pairs.
        assert_eq!(attn(8, 8, true).visible_pairs(), 36.0);
        assert_eq!(attn(8, 8, false).visible_pairs(), 64.0);
        for (q, kv) in [
            (4, 8),
            (8, 4),
            (1, 9),
            (9, 1),
            (5, 5),
            (3, 7),
            (7, 3),
            (16, 128),
        ] {
            assert_eq!(
                attn(q, kv, true).visible_pairs(),
                pairs_by_count(q, kv),
                "q={q} kv={kv}"
            );
        }
    }

    #[test]
    fn flops_follow_the_usual_counts() {
        // 4·b·s²·heads·d forward, halved (plus the diagonal) under the causal mask, ×2.5 backward.
        let a = Attention {
            batch: 2,
            heads: 16,
            kv_heads: 16,
            q_tokens: 1024,
            kv_tokens: 1024,
            head_dim: 128,
            causal: false,
            pass: AttnPass::Fwd,
        };
        assert_eq!(a.flops(), 4.0 * 2.0 * 1024.0 * 1024.0 * 16.0 * 128.0);
        let b = Attention {
            pass: AttnPass::Bwd,
            ..a
        };
        assert_eq!(b.flops(), 2.5 * a.flops());
        let g = KernelShape::gemm(3, 5, 7);
        assert_eq!(g.flops(), 210.0);
        assert_eq!(g.bytes(), 2.0 * (21.0 + 35.0 + 15.0));
    }
}
