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
use super::stage::{CausalBlocks, Kernel, LinearGemm};
use crate::config::{Activation, CrossEntropy, LayerOps, Norm, OptimizerDtype, Workload};

/// Linear layer forward: rows × k_in times k_in × n_out.
pub fn linear_fwd(name: &'static str, rows: f64, n_out: f64, k_in: f64) -> Kernel {
    Kernel::gemm(name, rows, n_out, k_in).as_linear(LinearGemm::Forward)
}

/// Linear layer backward: input gradient and weight gradient GEMMs.
pub fn linear_bwd(name: &'static str, rows: f64, n_out: f64, k_in: f64) -> [Kernel; 2] {
    [
        Kernel::gemm(name, rows, k_in, n_out).as_linear(LinearGemm::InputGrad),
        Kernel::gemm(name, k_in, n_out, rows).as_linear(LinearGemm::WeightGrad),
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

/// What decides a layer's memory-bound passes: the model's activation, norm and rotary
/// embedding, and how the software runs them (`config::LayerOps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passes {
    pub act: Activation,
    pub norm: Norm,
    pub rotary: bool,
    pub ops: LayerOps,
}

impl Passes {
    /// The passes of `w`'s layers.
    pub fn of(w: &Workload) -> Passes {
        Passes {
            act: w.model.activation,
            norm: w.model.norm,
            rotary: w.model.rotary,
            ops: w.options.runtime.layer_ops,
        }
    }

    /// Whether the norm runs as PyTorch eager ops (`LayerOps::eager_norm`).
    fn eager_norm(self) -> bool {
        self.ops.eager_norm(self.norm)
    }
}

/// Memory-bound kernels over `rows` × `cols` elements, one per entry of `per_elem` (bytes each
/// element moves in that kernel).
fn passes(name: &'static str, rows: f64, cols: f64, per_elem: &[f64]) -> Vec<Kernel> {
    per_elem
        .iter()
        .map(|b| Kernel::memory(name, b * rows * cols))
        .collect()
}

/// The per-row kernels of eager RMSNorm (the mean plus epsilon, its reciprocal square root, and
/// their backward): one FP32 value read and written per row, launch-bound.
fn row_passes(name: &'static str, rows: f64, kernels: usize) -> Vec<Kernel> {
    vec![Kernel::memory(name, 8.0 * rows); kernels]
}

/// A normalisation (LayerNorm or RMSNorm) over `rows` × `h`. Fused: reads and writes each bf16
/// element once, 4 bytes. torchtitan's eager RMSNorm (`x.float()`, `pow(2)`, `mean(-1)`, `+ eps`,
/// `rsqrt`, the product, `type_as`, `* weight`): 6 + 8 + 4 + 8 + 6 + 4 = 36 bytes per element
/// in six kernels, and two per row.
pub fn norm(px: Passes, name: &'static str, rows: f64, h: f64) -> Vec<Kernel> {
    if !px.eager_norm() {
        return vec![Kernel::elementwise(name, rows * h, 1.0)];
    }
    let mut k = passes(name, rows, h, &[6.0, 8.0, 4.0]);
    k.extend(row_passes(name, rows, 2));
    k.extend(passes(name, rows, h, &[8.0, 6.0, 4.0]));
    k
}

/// A normalisation's backward. Fused: reads the input and the output gradient, writes the input
/// gradient, 6 bytes per element (the weight gradients' reductions are small). Eager RMSNorm, as
/// autograd runs the backward of each op of [`norm`] (`tools/autograd/derivatives.yaml`): the
/// weight product (input gradient 4, weight gradient's product 6 and row sum 2), the cast back
/// to FP32 (6), the product with the reciprocal (its input gradient 8, the reciprocal's
/// product 12 and sum 4), the mean's gradient spread over the row (4), the square's
/// (`pow_backward`: a copy, a scale and a product, 8 + 8 + 12), the two gradients of the FP32
/// input added (12) and the cast to bf16 (6): 92 bytes per element in thirteen kernels, and three
/// per row (the reciprocal square root's).
pub fn norm_bwd(px: Passes, name: &'static str, rows: f64, h: f64) -> Vec<Kernel> {
    if !px.eager_norm() {
        return vec![Kernel::memory(name, 6.0 * rows * h)];
    }
    let mut k = passes(name, rows, h, &[4.0, 6.0, 2.0, 6.0, 8.0, 12.0, 4.0]);
    k.extend(row_passes(name, rows, 3));
    k.extend(passes(name, rows, h, &[4.0, 8.0, 8.0, 12.0, 12.0, 6.0]));
    k
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

/// The MLP's input columns: f, or the gate's and the up projection's 2f under SwiGLU.
fn mlp_up(act: Activation, f: f64) -> f64 {
    match act {
        Activation::Gelu => f,
        Activation::Swiglu => 2.0 * f,
    }
}

/// MLP forward over `rows` local tokens and `f` local columns: fc1, the activation, fc2.
pub fn mlp_fwd(px: Passes, rows: f64, h: f64, f: f64) -> Vec<Kernel> {
    let mut k = vec![linear_fwd("fc1", rows, mlp_up(px.act, f), h)];
    k.extend(act_fwd(px, rows, f));
    k.push(linear_fwd("fc2", rows, h, f));
    k
}

/// The activation's forward, in bytes per MLP column and token. Fused (Megatron's bias-GeLU,
/// Transformer Engine's `gelu`/`swiglu`, all bf16): GeLU reads and writes f values (4 bytes);
/// SwiGLU reads the 2f gate and up values and writes their f products (6). Eager: GeLU is one
/// ATen kernel as well; torchtitan's SwiGLU, `silu(w1(x)) * w3(x)`, is two (silu 4, product 6).
pub fn act_fwd(px: Passes, rows: f64, f: f64) -> Vec<Kernel> {
    let per = match (px.act, px.ops.eager()) {
        (Activation::Gelu, _) => &[4.0][..],
        (Activation::Swiglu, false) => &[6.0][..],
        (Activation::Swiglu, true) => &[4.0, 6.0][..],
    };
    passes("act", rows, f, per)
}

/// The activation's backward. Fused (`dgelu`/`dswiglu`): GeLU reads the output gradient and the
/// input and writes the input gradient (6 bytes); SwiGLU reads the f output gradients and the
/// 2f inputs and writes 2f input gradients (10). Eager SwiGLU: the product's two gradients
/// (6 each) and silu's backward (6), three kernels.
pub fn act_bwd(px: Passes, rows: f64, f: f64) -> Vec<Kernel> {
    let per = match (px.act, px.ops.eager()) {
        (Activation::Gelu, _) => &[6.0][..],
        (Activation::Swiglu, false) => &[10.0][..],
        (Activation::Swiglu, true) => &[6.0, 6.0, 6.0][..],
    };
    passes("act-bwd", rows, f, per)
}

/// The passes between the QKV projection and the attention, over `rows` tokens of `q_cols`
/// local query and `k_cols` local key columns (the values have as many as the keys), and
/// their backward, the same bytes each way:
/// - **Rotary embedding** (`Passes::rotary`). Fused (Transformer Engine's and Apex's RoPE): each
///   query and key value read and written once, 4 bytes, the sines and cosines (one row per
///   position, shared by every head) left out. Eager (torchtitan's `apply_rotary_emb`): per
///   tensor, a cast to FP32 (6 bytes), the complex product (8) and the cast back (6); its
///   backward casts the gradient up, multiplies by the conjugate and casts it down, the same.
/// - **K/V expansion**, eager only, under grouped-query attention (`q_cols > k_cols`):
///   torchtitan's `repeat_kv` copies the keys and the values out to every query head before
///   `scaled_dot_product_attention` (read k_cols, write q_cols, bf16), and its backward sums
///   the gradients back (the reverse).
///
/// Nothing for a model without rotary embedding under fused kernels.
pub fn qk_passes(
    px: Passes,
    name: &'static str,
    rows: f64,
    q_cols: f64,
    k_cols: f64,
) -> Vec<Kernel> {
    let mut k = Vec::new();
    if px.rotary {
        if px.ops.eager() {
            for cols in [q_cols, k_cols] {
                k.extend(passes(name, rows, cols, &[6.0, 8.0, 6.0]));
            }
        } else {
            k.push(Kernel::elementwise(name, rows * (q_cols + k_cols), 1.0));
        }
    }
    if px.ops.eager() && q_cols > k_cols {
        for _ in ["keys", "values"] {
            k.push(Kernel::memory(name, 2.0 * rows * (q_cols + k_cols)));
        }
    }
    k
}

/// MLP backward: fc2's two gradients, the activation's, fc1's two.
pub fn mlp_bwd(px: Passes, rows: f64, h: f64, f: f64) -> Vec<Kernel> {
    let mut k = linear_bwd("fc2-bwd", rows, h, f).to_vec();
    k.extend(act_bwd(px, rows, f));
    k.extend(linear_bwd("fc1-bwd", rows, mlp_up(px.act, f), h));
    k
}

/// The output head over `rows` tokens and a `vocab` slice, forward and backward: the logits GEMM,
/// the cross-entropy over the logits as `ce` runs it, and the two backward GEMMs.
pub fn head(rows: f64, vocab: f64, h: f64, ce: CrossEntropy) -> Vec<Kernel> {
    let mut k = vec![
        linear_fwd("head", rows, vocab, h),
        cross_entropy("cross-entropy", rows * vocab, ce),
    ];
    k.extend(linear_bwd("head-bwd", rows, vocab, h));
    k
}

/// The loss's cross-entropy over `logits` logits, forward and backward in one memory-bound
/// pass of the bytes `ce` moves per logit (`config::runtime`).
pub fn cross_entropy(name: &'static str, logits: f64, ce: CrossEntropy) -> Kernel {
    Kernel::memory(name, ce.bytes_per_logit() * logits)
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

    fn passes_of(act: Activation, norm: Norm, rotary: bool, ops: LayerOps) -> Passes {
        Passes {
            act,
            norm,
            rotary,
            ops,
        }
    }

    fn named(ks: &[Kernel], name: &str) -> (u64, usize) {
        let of: Vec<Kernel> = ks.iter().filter(|k| k.name == name).copied().collect();
        (bytes(&of), of.len())
    }

    /// The activation passes move what the fused kernels read and write per MLP column and
    /// token: GeLU 4 bytes forward and 6 backward, SwiGLU 6 (2f read, f written) and 10 (f
    /// gradients and 2f inputs read, 2f written) — not SwiGLU's 2f columns read and written
    /// twice over. Eager SwiGLU is silu and a product (4 + 6) and three backward kernels
    /// (6 each); eager GeLU is one ATen kernel, as fused.
    #[test]
    fn activation_passes_move_what_the_fused_kernels_read_and_write() {
        let (rows, h, f) = (10.0, 64.0, 100.0);
        for (ops, swiglu, gelu) in [
            (
                LayerOps::Fused,
                [(6_000, 1), (10_000, 1)],
                [(4_000, 1), (6_000, 1)],
            ),
            (
                LayerOps::Eager,
                [(10_000, 2), (18_000, 3)],
                [(4_000, 1), (6_000, 1)],
            ),
            (
                LayerOps::EagerFusedNorm,
                [(10_000, 2), (18_000, 3)],
                [(4_000, 1), (6_000, 1)],
            ),
        ] {
            for (act, want) in [(Activation::Swiglu, swiglu), (Activation::Gelu, gelu)] {
                let px = passes_of(act, Norm::Rmsnorm, false, ops);
                assert_eq!(
                    named(&mlp_fwd(px, rows, h, f), "act"),
                    want[0],
                    "{ops:?} {act:?}"
                );
                assert_eq!(
                    named(&mlp_bwd(px, rows, h, f), "act-bwd"),
                    want[1],
                    "{ops:?} {act:?}"
                );
            }
        }
    }

    /// Eager RMSNorm moves 36 bytes per element forward in six kernels (plus two per row, 8
    /// bytes each) and 92 backward in twelve (plus three per row); LayerNorm, and RMSNorm under
    /// fused kernels or `eager-fused-norm`, move 4 and 6 in one kernel each way.
    #[test]
    fn eager_rmsnorm_moves_each_ops_bytes_and_layernorm_stays_one_kernel() {
        let (rows, h) = (10.0, 64.0);
        let px = passes_of(Activation::Swiglu, Norm::Rmsnorm, false, LayerOps::Eager);
        assert_eq!(
            named(&norm(px, "ln", rows, h), "ln"),
            (36 * 640 + 2 * 80, 8)
        );
        assert_eq!(
            named(&norm_bwd(px, "ln-bwd", rows, h), "ln-bwd"),
            (92 * 640 + 3 * 80, 16)
        );
        for (n, ops) in [
            (Norm::Layernorm, LayerOps::Eager),
            (Norm::Rmsnorm, LayerOps::EagerFusedNorm),
            (Norm::Rmsnorm, LayerOps::Fused),
        ] {
            let px = passes_of(Activation::Swiglu, n, false, ops);
            assert_eq!(named(&norm(px, "ln", rows, h), "ln"), (4 * 640, 1));
            assert_eq!(
                named(&norm_bwd(px, "ln-bwd", rows, h), "ln-bwd"),
                (6 * 640, 1)
            );
        }
    }

    /// Between the QKV projection and the attention: fused RoPE reads and writes each query
    /// and key value once (4 bytes); eager RoPE casts, rotates and casts back each tensor
    /// (20 bytes, three kernels per tensor); eager grouped-query attention copies K and V out
    /// to every query head (read k, write q columns, bf16), which MHA does not; a model
    /// without rotary embedding has nothing under fused kernels.
    #[test]
    fn qk_passes_rotate_and_expand_as_the_software_writes_them() {
        let (rows, q, k) = (10.0, 64.0, 16.0);
        let rope = |rotary, ops| {
            named(
                &qk_passes(
                    passes_of(Activation::Swiglu, Norm::Rmsnorm, rotary, ops),
                    "r",
                    rows,
                    q,
                    k,
                ),
                "r",
            )
        };
        assert_eq!(rope(true, LayerOps::Fused), (4 * 800, 1));
        assert_eq!(rope(false, LayerOps::Fused), (0, 0));
        let expand = 2 * 2 * 800;
        assert_eq!(rope(true, LayerOps::Eager), (20 * 800 + expand, 8));
        assert_eq!(rope(false, LayerOps::EagerFusedNorm), (expand, 2));
        let mha = qk_passes(
            passes_of(Activation::Swiglu, Norm::Rmsnorm, true, LayerOps::Eager),
            "r",
            rows,
            q,
            q,
        );
        assert_eq!(named(&mha, "r"), (20 * 1280, 6));
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
