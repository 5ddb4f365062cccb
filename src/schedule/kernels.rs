//! Kernel shapes shared by the methods' plans: projections, attention cores, MLPs, norms, the
//! head and the optimizer — forward and backward, with FLOPs and bytes.
//!
//! FLOP counts follow the usual accounting (Narayanan et al. 2021): a GEMM is 2mnk; attention
//! forward is 4·b·sq·sk·(heads·d) (QKᵀ and P·V); its backward is twice that for unfused
//! kernels (four GEMMs over stored probabilities) and 2.5 times for fused kernels, which also
//! recompute QKᵀ; a linear layer's backward is two GEMMs (input and weight gradients).

use super::stage::Kernel;
use crate::config::Activation;
use crate::schedule::OpKind;

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
}

impl AttnShape {
    fn fwd_flops(&self) -> f64 {
        4.0 * self.b * self.sq * self.sk * self.heads * self.d
    }
    fn io_bytes(&self) -> f64 {
        2.0 * self.b * self.d * (2.0 * self.sq * self.heads + 2.0 * self.sk * self.kv_heads)
    }
    fn score_elems(&self) -> f64 {
        self.b * self.heads * self.sq * self.sk
    }
}

/// Attention core forward: one fused kernel, or QKᵀ, softmax (+dropout) and P·V.
pub fn attention_fwd(s: AttnShape, flash: bool, dropout: bool) -> Vec<Kernel> {
    if flash {
        return vec![Kernel {
            name: "attn-core",
            op: OpKind::Attention,
            flops: s.fwd_flops(),
            bytes: s.io_bytes(),
        }];
    }
    let half = Kernel {
        name: "attn-qk",
        op: OpKind::Gemm,
        flops: s.fwd_flops() / 2.0,
        bytes: s.io_bytes() / 2.0 + 2.0 * s.score_elems(),
    };
    vec![
        half,
        Kernel::elementwise("softmax", s.score_elems(), if dropout { 2.0 } else { 1.0 }),
        Kernel {
            name: "attn-pv",
            ..half
        },
    ]
}

/// Attention core backward.
pub fn attention_bwd(s: AttnShape, flash: bool, dropout: bool) -> Vec<Kernel> {
    if flash {
        return vec![Kernel {
            name: "attn-core-bwd",
            op: OpKind::Attention,
            flops: 2.5 * s.fwd_flops(),
            bytes: 2.0 * s.io_bytes(),
        }];
    }
    let quarter = Kernel {
        name: "attn-bwd-gemm",
        op: OpKind::Gemm,
        flops: s.fwd_flops() / 2.0,
        bytes: s.io_bytes() / 2.0 + 2.0 * s.score_elems(),
    };
    vec![
        quarter,
        quarter,
        Kernel::elementwise(
            "softmax-bwd",
            s.score_elems(),
            if dropout { 3.0 } else { 2.0 },
        ),
        quarter,
        quarter,
    ]
}

/// A normalisation (LayerNorm or RMSNorm) over `rows` × `h`.
pub fn norm(name: &'static str, rows: f64, h: f64) -> Kernel {
    Kernel::elementwise(name, rows * h, 1.0)
}

/// MLP forward over `rows` local tokens and `f` local columns.
pub fn mlp_fwd(rows: f64, h: f64, f: f64, act: Activation) -> Vec<Kernel> {
    let up = match act {
        Activation::Gelu => f,
        Activation::Swiglu => 2.0 * f,
    };
    vec![
        linear_fwd("fc1", rows, up, h),
        Kernel::elementwise("act", rows * up, 1.0),
        linear_fwd("fc2", rows, h, f),
    ]
}

/// MLP backward.
pub fn mlp_bwd(rows: f64, h: f64, f: f64, act: Activation) -> Vec<Kernel> {
    let up = match act {
        Activation::Gelu => f,
        Activation::Swiglu => 2.0 * f,
    };
    let mut k = linear_bwd("fc2-bwd", rows, h, f).to_vec();
    k.push(Kernel::elementwise("act-bwd", rows * up, 2.0));
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

/// Adam over `params` local parameters: reads gradients, master weights and moments, writes
/// master weights, moments and bf16 weights — about 30 bytes per parameter.
pub fn optimizer(params: f64) -> Kernel {
    Kernel {
        name: "adam",
        op: OpKind::Elementwise,
        flops: 0.0,
        bytes: 30.0 * params,
    }
}

/// Fraction of an (s/p)×(s/p) attention block device `i` computes at ring step `k` under
/// causal masking: contiguous blocks give 1 below the diagonal, ½ on it, 0 above; zig-zag
/// (load-balanced) order gives every device ½ of a block at every step.
pub fn causal_fractions(p: usize, k: usize, zigzag: bool) -> Vec<f64> {
    (0..p)
        .map(|i| {
            if zigzag {
                0.5
            } else {
                // At step k device i holds the K/V block of device (i − k) mod p.
                let src = (i + p - k % p) % p;
                match src.cmp(&i) {
                    std::cmp::Ordering::Less => 1.0,
                    std::cmp::Ordering::Equal => 0.5,
                    std::cmp::Ordering::Greater => 0.0,
                }
            }
        })
        .collect()
}
