//! The MLP unit `out = GeLU(X·W1)·W2` on p virtual devices — METP's one-level ring and, for
//! comparison, Megatron TP — as every backend runs it: the algorithm (below), the GeLU, the
//! inputs, each device's results and their assembly. The programs:
//! `backend::cpu::units::mlp` (CPU), the CUDA units (feature `cuda`).
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

/// What the MLP programs need from a [`RunSpec`].
#[derive(Debug, Clone, Copy)]
pub struct MlpCfg {
    /// Sizes.
    pub shape: Shape,
    /// Receive buffers per traveling tensor (1 or 2).
    pub rb: usize,
}

impl MlpCfg {
    /// From a run spec.
    pub fn from_spec(spec: &RunSpec) -> MlpCfg {
        MlpCfg {
            shape: spec.shape,
            rb: spec.metp.recv_buffers as usize,
        }
    }
}

/// Global inputs: X and dOut ((b·s) × h), W1 (h × f), W2 (f × h).
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
    /// Uniform random inputs; W1 scaled by 1/√h, W2 by 1/√f.
    pub fn random(sh: &Shape, rng: &mut SplitMix64) -> MlpData {
        MlpData {
            x: random_mat(sh.b * sh.s, sh.h, 1.0, rng),
            w1: random_mat(sh.h, sh.f, 1.0 / (sh.h as f64).sqrt(), rng),
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
    /// Gradient of its W1 shard (h × f/p).
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
    let mut dw1 = Mat::zeros(sh.h, sh.f);
    let mut dw2 = Mat::zeros(sh.f, sh.h);
    for (j, o) in outs.iter().enumerate() {
        dw1.columns_mut(j * fp, fp).copy_from(&o.dw1);
        dw2.rows_mut(j * fp, fp).copy_from(&o.dw2);
    }
    MlpOut { out, dx, dw1, dw2 }
}
