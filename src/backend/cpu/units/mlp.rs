//! The MLP unit `out = GeLU(X·W1)·W2` on p virtual devices: METP's one-level ring and, for
//! comparison, Megatron TP.
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

use super::rng::SplitMix64;
use super::{gather_rows, local_rows, random_mat, ExecMethod, RunSpec, Shape};
use crate::backend::cpu::device::{
    accumulator_hop, data_hop, gemm_tn, Device, Dtype, Hop, Mat, Phase, Tag, Tracked,
};
use crate::error::Result;
use crate::memory::names;

const BF16: Dtype = Dtype::Bf16;
const FP32: Dtype = Dtype::Fp32;

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
pub(crate) fn assemble(cfg: &MlpCfg, method: ExecMethod, outs: &[&MlpOut]) -> MlpOut {
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

fn pair<'a>(own: &'a [Tracked<Mat>; 2], cur: &'a Option<Vec<Tracked<Mat>>>) -> (&'a Mat, &'a Mat) {
    match cur {
        Some(s) => (&s[0], &s[1]),
        None => (&own[0], &own[1]),
    }
}

/// METP MLP forward and backward on one device (see the module docs).
pub fn metp(dev: &mut Device, cfg: &MlpCfg, data: &MlpData) -> Result<MlpOut> {
    let sh = cfg.shape;
    let (p, i) = (sh.p, dev.rank);
    let (b, s, h, fp) = (sh.b, sh.s, sh.h, sh.fp());
    let rows = b * sh.c();
    let w_shapes = [(h, fp, BF16), (fp, h, BF16)];
    let dw_shapes = [(h, fp, FP32), (fp, h, FP32)];

    let own = [
        dev.track(
            names::MLP_WEIGHTS,
            BF16,
            data.w1.columns(i * fp, fp).into_owned(),
        ),
        dev.track(
            names::MLP_WEIGHTS,
            BF16,
            data.w2.rows(i * fp, fp).into_owned(),
        ),
    ];
    let mut grad_w1 = dev.zeros(names::OPTIMIZER_MAIN_GRADS_FP32, FP32, h, fp);
    let mut grad_w2 = dev.zeros(names::OPTIMIZER_MAIN_GRADS_FP32, FP32, fp, h);
    let x = dev.track(names::MLP_INPUT, BF16, local_rows(&data.x, b, s, p, i));

    // ---------------- forward ----------------
    let mut out = dev.zeros(names::MLP_OUTPUT_SUM, BF16, rows, h);
    let mut cur: Option<Vec<Tracked<Mat>>> = None;
    for t in 0..p {
        let step_start = dev.now_s();
        let (next, prev) = (dev.next(), dev.prev());
        let tag = Tag::MlpWeights {
            bwd: false,
            t: (t + 1) as u32,
        };
        let mut pending = None;
        if t + 1 < p {
            let (w1, w2) = pair(&own, &cur);
            let parts = vec![(w1.clone(), BF16), (w2.clone(), BF16)];
            dev.send(next, tag, parts)?;
            if cfg.rb == 2 {
                pending = Some(dev.post(prev, tag, names::MLP_WEIGHT_RECV, &w_shapes));
            }
        }
        {
            let (w1, w2) = pair(&own, &cur);
            let hpre = dev.track(names::MLP_ACT_INPUT_BLOCK, BF16, &*x * w1);
            let act = dev.track(names::MLP_ACT_OUTPUT_BLOCK, BF16, hpre.map(gelu_f32));
            drop(hpre);
            out.gemm(1.0, &*act, w2, 1.0);
        }
        let compute_end = dev.now_s();
        if t + 1 < p {
            let hop = Hop {
                tag,
                name: names::MLP_WEIGHT_RECV,
                shapes: &w_shapes,
            };
            data_hop(dev, prev, &mut cur, pending, &hop)?;
        }
        dev.record_step(Phase::FwdMlp, 0, t, step_start, compute_end);
    }
    drop(cur);
    let out = out.into_inner();

    // ---------------- backward ----------------
    let dout = dev.track(
        names::GRAD_LAYER_OUTPUT,
        BF16,
        local_rows(&data.dout, b, s, p, i),
    );
    let mut dx = dev.zeros(names::GRAD_LAYER_INPUT, BF16, rows, h);
    let mut cur_w: Option<Vec<Tracked<Mat>>> = None;
    let mut cur_dw: Vec<Tracked<Mat>> = vec![
        dev.zeros(names::MLP_WEIGHT_GRAD_ACC_FP32, FP32, h, fp),
        dev.zeros(names::MLP_WEIGHT_GRAD_ACC_FP32, FP32, fp, h),
    ];
    for t in 0..p {
        let step_start = dev.now_s();
        let (next, prev) = (dev.next(), dev.prev());
        let w_tag = Tag::MlpWeights {
            bwd: true,
            t: (t + 1) as u32,
        };
        let dw_tag = Tag::MlpGrad { t: (t + 1) as u32 };
        if t + 1 < p {
            let (w1, w2) = pair(&own, &cur_w);
            let parts = vec![(w1.clone(), BF16), (w2.clone(), BF16)];
            dev.send(next, w_tag, parts)?;
        }
        let (mut next_w, mut next_dw) = (None, None);
        if cfg.rb == 2 && p > 1 {
            if t + 1 < p {
                next_w = Some(dev.post(prev, w_tag, names::MLP_WEIGHT_RECV, &w_shapes));
            }
            next_dw = Some(dev.post(prev, dw_tag, names::MLP_WEIGHT_GRAD_RECV_FP32, &dw_shapes));
        }
        {
            let (w1, w2) = pair(&own, &cur_w);
            let hpre = dev.track(names::MLP_ACT_INPUT_BLOCK, BF16, &*x * w1);
            let act = dev.track(names::MLP_ACT_OUTPUT_BLOCK, BF16, hpre.map(gelu_f32));
            let mut dh = dev.track(names::GRAD_MLP_ACT_BLOCK, BF16, &*dout * w2.transpose());
            dh.zip_apply(&*hpre, |g, z| *g *= gelu_grad_f32(z));
            drop(hpre);
            gemm_tn(&mut cur_dw[1], 1.0, &act, &*dout, 1.0);
            drop(act);
            gemm_tn(&mut cur_dw[0], 1.0, &x, &*dh, 1.0);
            dx.gemm(1.0, &*dh, &w1.transpose(), 1.0);
        }
        let compute_end = dev.now_s();
        if p > 1 {
            accumulator_hop(
                dev,
                next,
                prev,
                t + 1 == p,
                cfg.rb == 1,
                &mut cur_w,
                &mut cur_dw,
                next_w,
                next_dw,
                &Hop {
                    tag: w_tag,
                    name: names::MLP_WEIGHT_RECV,
                    shapes: &w_shapes,
                },
                &Hop {
                    tag: dw_tag,
                    name: names::MLP_WEIGHT_GRAD_RECV_FP32,
                    shapes: &dw_shapes,
                },
            )?;
        }
        dev.record_step(Phase::BwdMlp, 0, t, step_start, compute_end);
    }
    // cur_dw: the accumulator of the own pair, back from its trip around the ring.
    *grad_w1 += &*cur_dw[0];
    *grad_w2 += &*cur_dw[1];
    drop(cur_dw);
    drop(dout);
    drop(x);
    drop(own);
    Ok(MlpOut {
        out,
        dx: dx.into_inner(),
        dw1: grad_w1.into_inner(),
        dw2: grad_w2.into_inner(),
    })
}

/// Megatron-TP MLP forward and backward on one device (see the module docs).
pub fn tp(dev: &mut Device, cfg: &MlpCfg, data: &MlpData) -> Result<MlpOut> {
    let sh = cfg.shape;
    let i = dev.rank;
    let (h, fp) = (sh.h, sh.fp());
    let w1 = dev.track(
        names::MLP_WEIGHTS,
        BF16,
        data.w1.columns(i * fp, fp).into_owned(),
    );
    let w2 = dev.track(
        names::MLP_WEIGHTS,
        BF16,
        data.w2.rows(i * fp, fp).into_owned(),
    );
    let mut grad_w1 = dev.zeros(names::OPTIMIZER_MAIN_GRADS_FP32, FP32, h, fp);
    let mut grad_w2 = dev.zeros(names::OPTIMIZER_MAIN_GRADS_FP32, FP32, fp, h);
    let x = dev.track(names::MLP_FC1_INPUT, BF16, data.x.clone());
    let hpre = dev.track(names::MLP_ACT_INPUT, BF16, &*x * &*w1);
    let act = dev.track(names::MLP_FC2_INPUT, BF16, hpre.map(gelu_f32));
    let mut partial = dev.track(names::MLP_OUTPUT_PARTIAL, BF16, &*act * &*w2);
    dev.all_reduce_sum(&mut partial, BF16, 0)?;
    let out = partial.into_inner();

    let dout = dev.track(names::GRAD_LAYER_OUTPUT, BF16, data.dout.clone());
    let mut dh = dev.track(names::GRAD_MLP_ACT, BF16, &*dout * w2.transpose());
    dh.zip_apply(&*hpre, |g, z| *g *= gelu_grad_f32(z));
    gemm_tn(&mut grad_w2, 1.0, &act, &*dout, 1.0);
    gemm_tn(&mut grad_w1, 1.0, &x, &*dh, 1.0);
    let mut dx = dev.track(names::GRAD_LAYER_INPUT, BF16, &*dh * w1.transpose());
    drop((dh, act, hpre));
    dev.all_reduce_sum(&mut dx, BF16, 1)?;
    Ok(MlpOut {
        out,
        dx: dx.into_inner(),
        dw1: grad_w1.into_inner(),
        dw2: grad_w2.into_inner(),
    })
}
