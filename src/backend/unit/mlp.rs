//! The MLP unit `out = GeLU(X·W1)·W2` — or, with SwiGLU, `out = (SiLU(X·W1) ∘ (X·W3))·W2` — on
//! p virtual devices — METP's one-level ring and, for comparison, Megatron TP — as every
//! backend runs it: the algorithm (below), the activations, the inputs, each device's results
//! and their assembly. The programs: `backend::cpu::units::mlp` (CPU), the CUDA units (feature
//! `cuda`).
//!
//! **SwiGLU** (Shazeer 2020; LLaMA): the gate W1 and the up projection W3 are one matrix here,
//! `W1 = [W1_gate | W3]` (h × 2f), sharded as `[gate columns of shard j | up columns of shard
//! j]` (h × 2f/p, [`w1_shard`]), so a shard pair is (h × 2f/p, f/p × h) — 3hf/p weights, as the
//! memory layer counts them — and the activation input `H = X·W1[j]` has 2f/p columns: the
//! output is `A = SiLU(H_gate) ∘ H_up` (f/p columns). Backward: `dA = dOut·W2[j]ᵀ` is written
//! into the up half of the activation gradient `dH`, then in place `dH_gate = dA ∘ H_up ∘
//! SiLU'(H_gate)`, `dH_up = dA ∘ SiLU(H_gate)` (one r × 2f/p buffer, as the inventory's
//! `u = 2` counts it); `dW1[j] = Xᵀ·dH`, `dX += dH·W1[j]ᵀ` as for GeLU. SiLU is exact
//! (`x·σ(x)`), in f32 on the devices and f64 in the reference.
//!
//! **GeLU**: the tanh approximation (Hendrycks & Gimpel 2016; GPT-2, Megatron-LM's
//! `bias_gelu`): `GeLU(x) = ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, with its exact
//! derivative. The f64 reference uses the same approximation, so the check measures the
//! parallel schedule and f32 rounding, not the approximation.
//!
//! **METP**, device i of p: static shard pair (W1\[i\] = columns i·f/p.. of W1, W2\[i\] = the same
//! rows of W2; bf16) and its fp32 main gradient. Forward: the pair travels the ring i → i+1
//! (the next receive posted before computing with the current pair when double buffered); at
//! step t the device holds pair j = i − t and computes `out_i += GeLU(X_i·W1[j])·W2[j]`.
//! Stored: X_i only; the GeLU input is recomputed in backward. Backward: the pairs travel again,
//! each with an fp32 gradient accumulator (dW1\[j\], dW2\[j\]) that starts empty at its owner, gains
//! every device's contribution (`X_iᵀ·dH`, `GeLU(H)ᵀ·dOut_i`) and returns to the owner after p
//! steps plus a final hop, where it is added to the main gradient. `dX_i += dH·W1[j]ᵀ` locally.
//!
//! **TP**: X replicated on every device, columns f/p of W1 and rows of W2 per device, the GeLU
//! input and output stored for backward, ring all-reduce of the output (forward) and of dX
//! (backward); weight gradients stay local.

use super::device::Mat;
use super::rng::SplitMix64;
use super::{gather_rows, random_mat, ExecMethod, RunSpec, Shape};
use crate::config::Activation;

/// √(2/π).
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

macro_rules! gelu_impl {
    ($t:ty, $gelu:ident, $grad:ident) => {
        /// Tanh-approximation GeLU.
        pub fn $gelu(x: $t) -> $t {
            let k = SQRT_2_OVER_PI as $t;
            0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
        }

        /// Derivative of the tanh-approximation GeLU.
        pub fn $grad(x: $t) -> $t {
            let k = SQRT_2_OVER_PI as $t;
            let th = (k * (x + 0.044715 * x * x * x)).tanh();
            0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x)
        }
    };
}

gelu_impl!(f32, gelu_f32, gelu_grad_f32);
gelu_impl!(f64, gelu_f64, gelu_grad_f64);

macro_rules! silu_impl {
    ($t:ty, $silu:ident, $grad:ident) => {
        /// SiLU (swish): `x·σ(x)`.
        pub fn $silu(x: $t) -> $t {
            x / (1.0 + (-x).exp())
        }

        /// Derivative of SiLU: `σ(x)·(1 + x·(1 − σ(x)))`.
        pub fn $grad(x: $t) -> $t {
            let s = 1.0 / (1.0 + (-x).exp());
            s * (1.0 + x * (1.0 - s))
        }
    };
}

silu_impl!(f32, silu_f32, silu_grad_f32);
silu_impl!(f64, silu_f64, silu_grad_f64);

/// SwiGLU's activation of one element pair (gate `g`, up `u`): `SiLU(g)·u`.
pub fn swiglu_f32(g: f32, u: f32) -> f32 {
    silu_f32(g) * u
}

/// SwiGLU's backward of one element pair: from the output gradient `da`, the gradients of the
/// gate and the up input.
pub fn swiglu_grad_f32(da: f32, g: f32, u: f32) -> (f32, f32) {
    (da * u * silu_grad_f32(g), da * silu_f32(g))
}

/// What the MLP programs need from a [`RunSpec`].
#[derive(Debug, Clone, Copy)]
pub struct MlpCfg {
    /// Sizes.
    pub shape: Shape,
    /// Receive buffers per traveling tensor (1 or 2).
    pub rb: usize,
    /// The activation (GeLU or SwiGLU).
    pub activation: Activation,
}

impl MlpCfg {
    /// From a run spec.
    pub fn from_spec(spec: &RunSpec) -> MlpCfg {
        MlpCfg {
            shape: spec.shape,
            rb: spec.metp.recv_buffers as usize,
            activation: spec.activation,
        }
    }

    /// Columns of the activation input per output column: 1 (GeLU) or 2 (SwiGLU: gate, up).
    pub fn u(&self) -> usize {
        inputs_per_output(self.activation)
    }
}

/// Columns of the activation input per output column: 1 (GeLU) or 2 (SwiGLU).
pub fn inputs_per_output(activation: Activation) -> usize {
    match activation {
        Activation::Gelu => 1,
        Activation::Swiglu => 2,
    }
}

/// Shard `j` (of width `fp`) of W1, whose f columns per activation input are side by side
/// (SwiGLU: `[gate | up]`, `u` = 2): h × u·fp, `[gate columns | up columns]`.
pub fn w1_shard(w1: &Mat, f: usize, fp: usize, j: usize, u: usize) -> Mat {
    let mut out = Mat::zeros(w1.nrows(), u * fp);
    for part in 0..u {
        out.columns_mut(part * fp, fp)
            .copy_from(&w1.columns(part * f + j * fp, fp));
    }
    out
}

/// Global inputs: X and dOut ((b·s) × h), W1 (h × f; SwiGLU: h × 2f, `[gate | up]`), W2 (f × h).
#[derive(Debug, Clone)]
pub struct MlpData {
    /// Input.
    pub x: Mat,
    /// First projection.
    pub w1: Mat,
    /// Second projection.
    pub w2: Mat,
    /// Upstream gradient.
    pub dout: Mat,
}

impl MlpData {
    /// Uniform random inputs; W1 scaled by 1/√h, W2 by 1/√f. SwiGLU's W1 has both halves.
    pub fn random(sh: &Shape, activation: Activation, rng: &mut SplitMix64) -> MlpData {
        let u = inputs_per_output(activation);
        MlpData {
            x: random_mat(sh.b * sh.s, sh.h, 1.0, rng),
            w1: random_mat(sh.h, u * sh.f, 1.0 / (sh.h as f64).sqrt(), rng),
            w2: random_mat(sh.f, sh.h, 1.0 / (sh.f as f64).sqrt(), rng),
            dout: random_mat(sh.b * sh.s, sh.h, 1.0, rng),
        }
    }
}

/// One device's results (METP: its rows; TP: the replicated full matrices) and the gradients of
/// the shard pair it owns.
#[derive(Debug, Clone)]
pub struct MlpOut {
    /// Output.
    pub out: Mat,
    /// Input gradient.
    pub dx: Mat,
    /// Gradient of its W1 shard (h × f/p; SwiGLU h × 2f/p, `[gate | up]`).
    pub dw1: Mat,
    /// Gradient of its W2 shard (f/p × h).
    pub dw2: Mat,
}

/// The global output and gradients from every device's [`MlpOut`].
pub fn assemble(cfg: &MlpCfg, method: ExecMethod, outs: &[&MlpOut]) -> MlpOut {
    let sh = cfg.shape;
    let fp = sh.fp();
    let (out, dx) = match method {
        ExecMethod::Metp => (
            gather_rows(&outs.iter().map(|o| &o.out).collect::<Vec<_>>(), sh.b, sh.s),
            gather_rows(&outs.iter().map(|o| &o.dx).collect::<Vec<_>>(), sh.b, sh.s),
        ),
        ExecMethod::Tp => (outs[0].out.clone(), outs[0].dx.clone()),
    };
    let u = cfg.u();
    let mut dw1 = Mat::zeros(sh.h, u * sh.f);
    let mut dw2 = Mat::zeros(sh.f, sh.h);
    for (j, o) in outs.iter().enumerate() {
        for part in 0..u {
            dw1.columns_mut(part * sh.f + j * fp, fp)
                .copy_from(&o.dw1.columns(part * fp, fp));
        }
        dw2.rows_mut(j * fp, fp).copy_from(&o.dw2);
    }
    MlpOut { out, dx, dw1, dw2 }
}
