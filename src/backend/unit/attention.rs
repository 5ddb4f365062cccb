//! The attention unit on p virtual devices — METP's two-level loop and, for comparison, Megatron
//! TP — as every backend runs it: the algorithm (below), the inputs, each device's results and
//! their assembly into the global output, and which blocks a causal mask leaves. The programs:
//! `backend::cpu::units::attention` (CPU), the CUDA units (feature `cuda`).
//!
//! **METP** (DESIGN §1), device i of p, c = s/p local tokens, head group g of a/p heads
//! (h/p columns):
//! - static: its weight shard W_qkv\[i\] (h × 3h/p, columns `[Q_i | K_i | V_i]`) and W_o\[i\]
//!   (h/p × h), bf16, and their fp32 main gradients;
//! - forward, outer loop over g = 0..p: obtain W\[g\] (own, or received: broadcast from its owner
//!   or relayed along the ring; with two receive buffers the receive of W\[g+1\] is posted before
//!   computing group g), `QKV = X_i · W_qkv[g]`, then the inner ring over the p sequence blocks:
//!   the K/V block travels i → i+1 (the next receive posted before computing with the current
//!   block when double buffered), each step computes one attention block — fused (online
//!   softmax over per-head tiles; only the fp32 output accumulator and the log-sum-exp are
//!   device memory) or unfused (the block's scores, probabilities, block log-sum-exp and block
//!   output materialised) — and merges it into the running output through the log-sum-exp.
//!   Causal: token positions are global (device i holds tokens i·c .. (i+1)·c); blocks above
//!   the diagonal are skipped (their K/V still travel). Finally `out_i += O[i,g] · W_o[g]`.
//!   Stored for backward: X_i, every O\[i,g\] (bf16) and every group's log-sum-exp (fp32).
//! - backward, the same outer loop (weights fetched again): `dO = dOut_i · W_o[g]ᵀ`, QKV
//!   recomputed, `D = rowsum(dO ∘ O)` per head, then ring-attention backward: K/V (bf16) and the
//!   fp32 dK/dV accumulators travel together (K/V sent before the step's compute, dK/dV after
//!   it; p steps plus a final hop of dK/dV back to the owner). `dX_i += dQKV · W_qkv[g]ᵀ`;
//!   weight gradients are reduced to the shard owner g: every other device sends its fp32
//!   contribution (`X_iᵀ·dQKV`, `O[i,g]ᵀ·dOut_i`), the owner adds them into its main gradient
//!   through `recv_buffers` receive buffers.
//!
//! **Grouped-query attention** (kv_heads < a, a multiple of p: whole K/V heads per group, the
//! memory layer's rule): W_qkv is `[Q (h) | K (kv·d) | V (kv·d)]`, head group g's shard
//! `[Q_g | K_g | V_g]` (h × (h/p + 2·kv·d/p), [`qkv_shard`]), query head k attends with K/V
//! head `k / (a/kv)`; the K/V ring carries the group's kv/p K/V heads, and the dK/dV
//! accumulators gather every query head's gradient into the K/V head it shares.
//!
//! **TP**: every device holds the full X (replicated), heads of group i, computes attention
//! over all s tokens for its heads (one block of s × s per head), `partial = O_i · W_o[i]`,
//! ring all-reduce; backward recomputes the probabilities from the stored log-sum-exp (as the
//! fused kernel does), weight gradients stay local, `dX` partials are all-reduced.

use super::device::Mat;
use super::rng::SplitMix64;
use super::{gather_rows, random_mat, ExecMethod, RunSpec, Shape, WeightExchange};

/// What the attention programs need from a [`RunSpec`].
#[derive(Debug, Clone, Copy)]
pub struct AttnCfg {
    /// Sizes.
    pub shape: Shape,
    /// K/V heads (grouped-query attention when fewer than `shape.a`; a multiple of p).
    pub kv_heads: usize,
    /// Causal mask.
    pub causal: bool,
    /// Fused attention blocks.
    pub fused: bool,
    /// Receive buffers per traveling tensor (1 or 2).
    pub rb: usize,
    /// Weight-shard exchange.
    pub exchange: WeightExchange,
}

impl AttnCfg {
    /// From a run spec.
    pub fn from_spec(spec: &RunSpec) -> AttnCfg {
        AttnCfg {
            shape: spec.shape,
            kv_heads: spec.kv_heads,
            causal: spec.causal,
            fused: spec.fused,
            rb: spec.metp.recv_buffers as usize,
            exchange: spec.metp.weight_exchange,
        }
    }
}

impl AttnCfg {
    /// Columns of one head group's K (and of its V): kv_heads/p heads of d.
    pub fn wkv(&self) -> usize {
        self.kv_heads / self.shape.p * self.shape.d()
    }

    /// Columns of one head group's `[Q | K | V]`.
    pub fn wq(&self) -> usize {
        self.shape.hg() + 2 * self.wkv()
    }

    /// Query heads per K/V head (1 without grouped-query attention).
    pub fn rep(&self) -> usize {
        self.shape.a / self.kv_heads.max(1)
    }
}

/// Head group `g`'s columns of the global W_qkv (`[Q | K | V]`, K and V of `kv·d` columns
/// each): `[Q_g | K_g | V_g]`, h × (hg + 2·wkv).
pub fn qkv_shard(w: &Mat, cfg: &AttnCfg, g: usize) -> Mat {
    let (h, hg, wkv) = (cfg.shape.h, cfg.shape.hg(), cfg.wkv());
    let kvw = cfg.kv_heads * cfg.shape.d();
    let mut out = Mat::zeros(w.nrows(), hg + 2 * wkv);
    out.columns_mut(0, hg).copy_from(&w.columns(g * hg, hg));
    out.columns_mut(hg, wkv)
        .copy_from(&w.columns(h + g * wkv, wkv));
    out.columns_mut(hg + wkv, wkv)
        .copy_from(&w.columns(h + kvw + g * wkv, wkv));
    out
}

/// Global inputs: X and dOut ((b·s) × h), W_qkv (h × (h + 2·kv·d): `[Q | K | V]`, h × 3h
/// without grouped-query attention), W_o (h × h).
#[derive(Debug, Clone)]
pub struct AttnData {
    /// Input.
    pub x: Mat,
    /// QKV projection.
    pub wqkv: Mat,
    /// Output projection.
    pub wo: Mat,
    /// Upstream gradient.
    pub dout: Mat,
}

impl AttnData {
    /// Uniform random inputs; weights scaled by 1/√h; `kv_heads` K/V heads.
    pub fn random(sh: &Shape, kv_heads: usize, rng: &mut SplitMix64) -> AttnData {
        let w = 1.0 / (sh.h as f64).sqrt();
        AttnData {
            x: random_mat(sh.b * sh.s, sh.h, 1.0, rng),
            wqkv: random_mat(sh.h, sh.h + 2 * kv_heads * sh.d(), w, rng),
            wo: random_mat(sh.h, sh.h, w, rng),
            dout: random_mat(sh.b * sh.s, sh.h, 1.0, rng),
        }
    }
}

/// One device's results: METP — its rows of out and dX and the gradients of the shard it owns;
/// TP — the full (replicated) out and dX and its shard's gradients.
#[derive(Debug, Clone)]
pub struct AttnOut {
    /// Output rows.
    pub out: Mat,
    /// Input-gradient rows.
    pub dx: Mat,
    /// Gradient of its W_qkv shard (h × (h/p + 2·kv·d/p)).
    pub dwqkv: Mat,
    /// Gradient of its W_o shard (h/p × h).
    pub dwo: Mat,
}

/// Which part of a key block a query block sees (contiguous causal blocks; the CUDA units use
/// the same rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Every key visible.
    Full,
    /// The causal diagonal block.
    Diagonal,
    /// Above the diagonal: skipped.
    Hidden,
}

/// What query block `query_block` sees of key block `key_block`.
pub fn visibility(causal: bool, query_block: usize, key_block: usize) -> Visibility {
    if !causal || key_block < query_block {
        Visibility::Full
    } else if key_block == query_block {
        Visibility::Diagonal
    } else {
        Visibility::Hidden
    }
}

/// The global output and gradients from every device's [`AttnOut`].
pub fn assemble(cfg: &AttnCfg, method: ExecMethod, outs: &[&AttnOut]) -> AttnOut {
    let sh = cfg.shape;
    let (h, hg) = (sh.h, sh.hg());
    let (out, dx) = match method {
        ExecMethod::Metp => (
            gather_rows(&outs.iter().map(|o| &o.out).collect::<Vec<_>>(), sh.b, sh.s),
            gather_rows(&outs.iter().map(|o| &o.dx).collect::<Vec<_>>(), sh.b, sh.s),
        ),
        ExecMethod::Tp => (outs[0].out.clone(), outs[0].dx.clone()),
    };
    let (wkv, kvw) = (cfg.wkv(), cfg.kv_heads * sh.d());
    let mut dwqkv = Mat::zeros(h, h + 2 * kvw);
    let mut dwo = Mat::zeros(h, h);
    for (g, o) in outs.iter().enumerate() {
        dwqkv
            .columns_mut(g * hg, hg)
            .copy_from(&o.dwqkv.columns(0, hg));
        dwqkv
            .columns_mut(h + g * wkv, wkv)
            .copy_from(&o.dwqkv.columns(hg, wkv));
        dwqkv
            .columns_mut(h + kvw + g * wkv, wkv)
            .copy_from(&o.dwqkv.columns(hg + wkv, wkv));
        dwo.rows_mut(g * hg, hg).copy_from(&o.dwo);
    }
    AttnOut {
        out,
        dx,
        dwqkv,
        dwo,
    }
}
