//! The MLP unit's programs on the CPU's virtual devices: METP's one-level ring ([`metp`]) and
//! Megatron TP ([`tp`]), GeLU or SwiGLU, as `backend::unit::mlp` describes them.

use crate::backend::cpu::device::{accumulator_hop, data_hop, gemm_tn, Device, Hop, Tracked};
use crate::backend::unit::device::{Dtype, Mat, Phase, Tag};
use crate::backend::unit::local_rows;
use crate::backend::unit::mlp::{gelu_f32, gelu_grad_f32, swiglu_f32, swiglu_grad_f32, w1_shard};
use crate::backend::unit::mlp::{MlpCfg, MlpData, MlpOut};
use crate::config::Activation;
use crate::error::Result;
use crate::memory::names;

const BF16: Dtype = Dtype::Bf16;
const FP32: Dtype = Dtype::Fp32;

/// The activation output (rows × fp) of its input `hpre` (rows × u·fp).
fn activate(hpre: &Mat, cfg: &MlpCfg, fp: usize) -> Mat {
    match cfg.activation {
        Activation::Gelu => hpre.map(gelu_f32),
        Activation::Swiglu => Mat::from_fn(hpre.nrows(), fp, |r, c| {
            swiglu_f32(hpre[(r, c)], hpre[(r, fp + c)])
        }),
    }
}

/// The activation-input gradient dH (rows × u·fp), tracked as `name`: GeLU — `dOut·W2ᵀ`, then
/// times GeLU'(H); SwiGLU — `dA = dOut·W2ᵀ` into the up half, then both halves in place
/// (`backend::unit::mlp`).
fn act_grad(
    dev: &Device,
    name: &'static str,
    cfg: &MlpCfg,
    (dout, w2, hpre): (&Mat, &Mat, &Mat),
    fp: usize,
) -> Tracked<Mat> {
    match cfg.activation {
        Activation::Gelu => {
            let mut dh = dev.track(name, BF16, dout * w2.transpose());
            dh.zip_apply(hpre, |g, z| *g *= gelu_grad_f32(z));
            dh
        }
        Activation::Swiglu => {
            let mut dh = dev.zeros(name, BF16, dout.nrows(), 2 * fp);
            dh.columns_mut(fp, fp).gemm(1.0, dout, &w2.transpose(), 0.0);
            for r in 0..dh.nrows() {
                for c in 0..fp {
                    let (dg, du) =
                        swiglu_grad_f32(dh[(r, fp + c)], hpre[(r, c)], hpre[(r, fp + c)]);
                    dh[(r, c)] = dg;
                    dh[(r, fp + c)] = du;
                }
            }
            dh
        }
    }
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
    let ufp = cfg.u() * fp;
    let rows = b * sh.c();
    let w_shapes = [(h, ufp, BF16), (fp, h, BF16)];
    let dw_shapes = [(h, ufp, FP32), (fp, h, FP32)];

    let own = [
        dev.track(
            names::MLP_WEIGHTS,
            BF16,
            w1_shard(&data.w1, sh.f, fp, i, cfg.u()),
        ),
        dev.track(
            names::MLP_WEIGHTS,
            BF16,
            data.w2.rows(i * fp, fp).into_owned(),
        ),
    ];
    let mut grad_w1 = dev.zeros(names::OPTIMIZER_MAIN_GRADS_FP32, FP32, h, ufp);
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
            let act = dev.track(names::MLP_ACT_OUTPUT_BLOCK, BF16, activate(&hpre, cfg, fp));
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
        dev.zeros(names::MLP_WEIGHT_GRAD_ACC_FP32, FP32, h, ufp),
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
            let act = dev.track(names::MLP_ACT_OUTPUT_BLOCK, BF16, activate(&hpre, cfg, fp));
            let dh = act_grad(dev, names::GRAD_MLP_ACT_BLOCK, cfg, (&dout, w2, &hpre), fp);
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
    let ufp = cfg.u() * fp;
    let w1 = dev.track(
        names::MLP_WEIGHTS,
        BF16,
        w1_shard(&data.w1, sh.f, fp, i, cfg.u()),
    );
    let w2 = dev.track(
        names::MLP_WEIGHTS,
        BF16,
        data.w2.rows(i * fp, fp).into_owned(),
    );
    let mut grad_w1 = dev.zeros(names::OPTIMIZER_MAIN_GRADS_FP32, FP32, h, ufp);
    let mut grad_w2 = dev.zeros(names::OPTIMIZER_MAIN_GRADS_FP32, FP32, fp, h);
    let x = dev.track(names::MLP_FC1_INPUT, BF16, data.x.clone());
    let hpre = dev.track(names::MLP_ACT_INPUT, BF16, &*x * &*w1);
    let act = dev.track(names::MLP_FC2_INPUT, BF16, activate(&hpre, cfg, fp));
    let mut partial = dev.track(names::MLP_OUTPUT_PARTIAL, BF16, &*act * &*w2);
    dev.all_reduce_sum(&mut partial, BF16, 0)?;
    let out = partial.into_inner();

    let dout = dev.track(names::GRAD_LAYER_OUTPUT, BF16, data.dout.clone());
    let dh = act_grad(dev, names::GRAD_MLP_ACT, cfg, (&dout, &w2, &hpre), fp);
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
