//! Kernels shared by the methods' plans: projections, attention cores, MLPs, norms, the head
//! and the optimizer — forward and backward, as the calls the GPU runs (shapes, not only FLOPs).
//!
//! A linear layer's backward is two GEMMs (input and weight gradients). Fused attention is one
//! call per pass (FlashAttention-2: the backward recomputes QKᵀ, 2.5× the forward's FLOPs);
//! unfused attention is its batched GEMMs (QKᵀ and P·V forward; dV, dP, dQ, dK backward) and
//! its softmax passes over the materialised scores. A causal mask changes a fused call's shape
//! (the blocks above the diagonal are skipped) but not the unfused GEMMs, which compute every
//! score and mask them in the softmax, as Megatron's fused scale-mask-softmax does.

use super::shape::{Attention, AttnPass};
use super::stage::{CausalBlocks, Kernel};
use crate::config::{Activation, Model, OptimizerDtype};

/// Linear layer forward: rows × k_in times k_in × n_out.
pub fn linear_fwd(name: &'static str, rows: f64, n_out: f64, k_in: f64) -> Kernel {
    Kernel::gemm(name, rows, n_out, k_in)
}

/// Linear layer backward: input gradient and weight gradient GEMMs.
pub fn linear_bwd(name: &'static str, rows: f64, n_out: f64, k_in: f64) -> [Kernel; 2] {
    [
        Kernel::gemm(name, rows, k_in, n_out),
        Kernel::gemm(name, k_in, n_out, rows),
    ]
}

/// Shape of one attention core call.
#[derive(Debug, Clone, Copy)]
pub struct AttnShape {
    /// Micro-batch.
    pub b: f64,
    /// Query rows (tokens) per sample.
    pub sq: f64,
    /// Key columns per sample.
    pub sk: f64,
    /// Heads in the call.
    pub heads: f64,
    /// Head dimension.
    pub d: f64,
    /// KV heads in the call.
    pub kv_heads: f64,
    /// Causal mask (queries and keys aligned at their ends).
    pub causal: bool,
}

impl AttnShape {
    fn score_elems(&self) -> f64 {
        self.b * self.heads * self.sq * self.sk
    }

    /// The fused call of a pass.
    pub fn fused(&self, pass: AttnPass) -> Attention {
        let n = |x: f64| x.round().max(0.0) as u64;
        Attention {
            batch: n(self.b),
            heads: n(self.heads),
            kv_heads: n(self.kv_heads),
            q_tokens: n(self.sq),
            kv_tokens: n(self.sk),
            head_dim: n(self.d),
            causal: self.causal,
            pass,
        }
    }

    /// The same call on `sq` queries and `sk` keys, causal or not.
    pub fn with(self, sq: f64, sk: f64, causal: bool) -> AttnShape {
        AttnShape {
            sq,
            sk,
            causal,
            ..self
        }
    }

    /// Query elements (b × sq × heads × d).
    pub fn q_elems(&self) -> f64 {
        self.b * self.sq * self.heads * self.d
    }
}

/// The calls of one unfused attention pass of `a`'s shape, without dropout: what `--no-flash`
/// issues in place of the fused call (`metp-sim kernels` prices an `unfused` entry so).
pub fn unfused_attention(a: &Attention) -> Vec<super::KernelShape> {
    let s = AttnShape {
        b: a.batch as f64,
        sq: a.q_tokens as f64,
        sk: a.kv_tokens as f64,
        heads: a.heads as f64,
        d: a.head_dim as f64,
        kv_heads: a.kv_heads as f64,
        causal: a.causal,
    };
    let ks = match a.pass {
        AttnPass::Fwd => attention_fwd(s, false, false),
        AttnPass::Bwd => attention_bwd(s, false, false),
    };
    ks.into_iter().map(|k| k.shape).collect()
}

/// Attention core forward: one fused kernel, or QKᵀ, softmax (+dropout) and P·V.
pub fn attention_fwd(s: AttnShape, flash: bool, dropout: bool) -> Vec<Kernel> {
    if flash {
        return vec![Kernel::attention("attn-core", s.fused(AttnPass::Fwd))];
    }
    let bh = s.b * s.heads;
    vec![
        Kernel::batched_gemm("attn-qk", bh, s.sq, s.sk, s.d),
        Kernel::elementwise("softmax", s.score_elems(), if dropout { 2.0 } else { 1.0 }),
        Kernel::batched_gemm("attn-pv", bh, s.sq, s.d, s.sk),
    ]
}

/// Attention core backward: one fused kernel, or dV = Pᵀ·dO, dP = dO·Vᵀ, the softmax (and
/// dropout) backward, dQ = dS·K and dK = dSᵀ·Q.
pub fn attention_bwd(s: AttnShape, flash: bool, dropout: bool) -> Vec<Kernel> {
    if flash {
        return vec![Kernel::attention("attn-core-bwd", s.fused(AttnPass::Bwd))];
    }
    let bh = s.b * s.heads;
    vec![
        Kernel::batched_gemm("attn-bwd-dv", bh, s.sk, s.d, s.sq),
        Kernel::batched_gemm("attn-bwd-dp", bh, s.sq, s.sk, s.d),
        Kernel::elementwise(
            "softmax-bwd",
            s.score_elems(),
            if dropout { 3.0 } else { 2.0 },
        ),
        Kernel::batched_gemm("attn-bwd-dq", bh, s.sq, s.d, s.sk),
        Kernel::batched_gemm("attn-bwd-dk", bh, s.sk, s.d, s.sq),
    ]
}

/// The kernels of one block of a causal ring, built by `block(sq, sk, causal)` for each block a
/// device can hold: its own block under the mask, and (zig-zag) the two half blocks. `c` is the
/// block's token count.
pub fn causal_blocks(
    c: f64,
    zigzag: bool,
    block: &dyn Fn(f64, f64, bool) -> Vec<Kernel>,
) -> CausalBlocks {
    let half = (c / 2.0).floor();
    CausalBlocks {
        zigzag,
        diagonal: block(c, c, true),
        key_half: if zigzag {
            block(c, half, false)
        } else {
            Vec::new()
        },
        query_half: if zigzag {
            block(c - half, c, false)
        } else {
            Vec::new()
        },
    }
}

/// A normalisation (LayerNorm or RMSNorm) over `rows` × `h`: reads and writes each bf16
/// element once, 4 bytes.
pub fn norm(name: &'static str, rows: f64, h: f64) -> Kernel {
    Kernel::elementwise(name, rows * h, 1.0)
}

/// A normalisation's backward: reads the input and the output gradient, writes the input
/// gradient, 6 bytes per element (the weight gradients' reductions are small).
pub fn norm_bwd(name: &'static str, rows: f64, h: f64) -> Kernel {
    Kernel::memory(name, 6.0 * rows * h)
}

/// The residual connection that closes a block, fused as Megatron does (bias, dropout when the
/// model has it, add): reads the block's output and the residual stream, writes the sum (and a
/// 1-byte dropout mask): 6 or 7 bytes per element.
pub fn residual_fwd(name: &'static str, rows: f64, h: f64, dropout: bool) -> Kernel {
    Kernel::memory(name, (if dropout { 7.0 } else { 6.0 }) * rows * h)
}

/// The residual connection's backward: the two gradient paths added (6 bytes per element) and,
/// with dropout, the dropout's backward (reads the gradient and the mask, writes the block
/// output's gradient: 5 bytes).
pub fn residual_bwd(name: &'static str, rows: f64, h: f64, dropout: bool) -> Kernel {
    Kernel::memory(name, (if dropout { 11.0 } else { 6.0 }) * rows * h)
}

/// MLP forward over `rows` local tokens and `f` local columns.
pub fn mlp_fwd(rows: f64, h: f64, f: f64, act: Activation) -> Vec<Kernel> {
    let up = match act {
        Activation::Gelu => f,
        Activation::Swiglu => 2.0 * f,
    };
    vec![
        linear_fwd("fc1", rows, up, h),
        Kernel::memory("act", rows * f * act_bytes(act).0),
        linear_fwd("fc2", rows, h, f),
    ]
}

/// Bytes per MLP column and token of the activation's forward and backward, as the fused
/// kernels move them (Megatron's bias-GeLU, Transformer Engine's `gelu`/`swiglu` and their
/// `dgelu`/`dswiglu`, all bf16). GeLU: the forward reads and writes f values (4 bytes), the
/// backward reads the output gradient and the input and writes the input gradient (6).
/// SwiGLU: the forward reads the 2f gate and up values and writes their f products (6 bytes),
/// the backward reads the f output gradients and the 2f inputs and writes 2f input gradients
/// (10).
fn act_bytes(act: Activation) -> (f64, f64) {
    match act {
        Activation::Gelu => (4.0, 6.0),
        Activation::Swiglu => (6.0, 10.0),
    }
}

/// Rotary position embedding over `rows` tokens of `q_cols` local query and `k_cols` local
/// key columns, as Transformer Engine's and Apex's fused RoPE kernels run it: each query and
/// key value read and written once (4 bytes), the rotation's sines and cosines (one row per
/// position, shared by every head) left out. Its backward rotates the gradients back, the
/// same bytes. Nothing where the model does not rotate (`Model::rotary`).
pub fn rope(
    model: &Model,
    name: &'static str,
    rows: f64,
    q_cols: f64,
    k_cols: f64,
) -> Option<Kernel> {
    model
        .rotary
        .then(|| Kernel::elementwise(name, rows * (q_cols + k_cols), 1.0))
}

/// MLP backward.
pub fn mlp_bwd(rows: f64, h: f64, f: f64, act: Activation) -> Vec<Kernel> {
    let up = match act {
        Activation::Gelu => f,
        Activation::Swiglu => 2.0 * f,
    };
    let mut k = linear_bwd("fc2-bwd", rows, h, f).to_vec();
    k.push(Kernel::memory("act-bwd", rows * f * act_bytes(act).1));
    k.extend(linear_bwd("fc1-bwd", rows, up, h));
    k
}

/// The output head over `rows` tokens and a `vocab` slice, forward and backward: the logits GEMM,
/// the cross-entropy over the logits, and the two backward GEMMs.
pub fn head(rows: f64, vocab: f64, h: f64) -> Vec<Kernel> {
    let mut k = vec![
        linear_fwd("head", rows, vocab, h),
        Kernel::elementwise("cross-entropy", rows * vocab, 2.0),
    ];
    k.extend(linear_bwd("head-bwd", rows, vocab, h));
    k
}

/// The optimizer step over `params` local parameters.
///
/// With fp32 state, as Megatron's mixed-precision optimizer runs it (multi-tensor kernels over
/// the fp32 gradient buffer): the gradient norm for clipping (reads the fp32 gradients, 4 bytes
/// per parameter), Adam (reads gradient, fp32 master weight and both moments, writes weight and
/// moments: 28 bytes), the copy of the master weights to the bf16 weights (6 bytes) and the
/// zeroing of the gradient buffer for the next step (4 bytes) — 42 bytes per parameter in all.
///
/// Without an fp32 master copy (`OptimizerDtype::Fp32Remainders`: fp32 moments and the 16-bit
/// remainders of the master weights; `OptimizerDtype::Bf16`: bf16 moments) over gradients of
/// `grad_bytes`: the norm reads the gradients, Adam reads the gradient and reads and writes
/// the bf16 weight with the state (grad_bytes + 2·(2 + state bytes): the fp32 master weight,
/// where there is one, rebuilt from the bf16 weight and its remainder), nothing to copy (the
/// bf16 weight is written in place), and the buffer is zeroed — with bf16 gradients 30 bytes
/// per parameter with remainders, 18 in bf16.
pub fn optimizer(params: f64, state: OptimizerDtype, grad_bytes: f64) -> Vec<Kernel> {
    match state {
        OptimizerDtype::Fp32 => vec![
            Kernel::memory("grad-norm", 4.0 * params),
            Kernel::memory("adam", 28.0 * params),
            Kernel::memory("param-copy", 6.0 * params),
            Kernel::memory("zero-grad", 4.0 * params),
        ],
        OptimizerDtype::Fp32Remainders | OptimizerDtype::Bf16 => {
            let weight_and_state = 2.0 + state.bytes_per_param() as f64;
            vec![
                Kernel::memory("grad-norm", grad_bytes * params),
                Kernel::memory("adam", (grad_bytes + 2.0 * weight_and_state) * params),
                Kernel::memory("zero-grad", grad_bytes * params),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::shape::KernelShape;
    use super::*;

    fn bytes(ks: &[Kernel]) -> u64 {
        ks.iter()
            .map(|k| match k.shape {
                KernelShape::Elementwise { bytes } => bytes,
                _ => panic!("{}: not a memory-bound pass", k.name),
            })
            .sum()
    }

    /// The activation passes move what the fused kernels read and write per MLP column and
    /// token: GeLU 4 bytes forward and 6 backward, SwiGLU 6 (2f read, f written) and 10 (f
    /// gradients and 2f inputs read, 2f written) — not SwiGLU's 2f columns read and written
    /// twice over.
    #[test]
    fn activation_passes_move_what_the_fused_kernels_read_and_write() {
        let (rows, h, f) = (10.0, 64.0, 100.0);
        let pass = |ks: &[Kernel], name: &str| {
            bytes(
                &ks.iter()
                    .filter(|k| k.name == name)
                    .copied()
                    .collect::<Vec<_>>(),
            )
        };
        let gelu_f = mlp_fwd(rows, h, f, Activation::Gelu);
        let gelu_b = mlp_bwd(rows, h, f, Activation::Gelu);
        assert_eq!(pass(&gelu_f, "act"), 4_000);
        assert_eq!(pass(&gelu_b, "act-bwd"), 6_000);
        let swiglu_f = mlp_fwd(rows, h, f, Activation::Swiglu);
        let swiglu_b = mlp_bwd(rows, h, f, Activation::Swiglu);
        assert_eq!(pass(&swiglu_f, "act"), 6_000);
        assert_eq!(pass(&swiglu_b, "act-bwd"), 10_000);
    }

    /// Megatron's fp32 step moves 42 bytes per parameter whatever the gradients' dtype; the
    /// others move the gradients three times (norm, Adam, zeroing) and Adam's reads and writes:
    /// with remainders 30 bytes with bf16 gradients, bf16 state 18 (24 with fp32 gradients).
    #[test]
    fn the_optimizer_step_moves_the_bytes_of_its_state() {
        let n = 1000.0;
        assert_eq!(bytes(&optimizer(n, OptimizerDtype::Fp32, 2.0)), 42_000);
        assert_eq!(bytes(&optimizer(n, OptimizerDtype::Fp32, 4.0)), 42_000);
        assert_eq!(
            bytes(&optimizer(n, OptimizerDtype::Fp32Remainders, 2.0)),
            30_000
        );
        assert_eq!(bytes(&optimizer(n, OptimizerDtype::Bf16, 2.0)), 18_000);
        assert_eq!(bytes(&optimizer(n, OptimizerDtype::Bf16, 4.0)), 24_000);
    }
}
