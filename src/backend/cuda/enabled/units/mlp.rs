//! The MLP unit `out = GeLU(X·W1)·W2` (or SwiGLU: `W1 = [gate | up]`, `backend::unit::mlp`) on
//! the GPU, forward and backward: METP's one-level ring of (W1[j], W2[j]) shard pairs with
//! traveling fp32 gradient accumulators, and Megatron TP — ports of
//! `crate::backend::cpu::units::mlp` with the same buffers, names and order on every device.

use crate::memory::names;
use std::rc::Rc;

use crate::backend::unit::device::{Dtype, Phase, Tag};
use crate::backend::unit::local_rows;
use crate::backend::unit::mlp::{w1_shard, MlpCfg, MlpData, MlpOut};
use crate::config::Activation;

use super::super::gpu::{Op, Ty};
use super::super::mem::{Buf, Phys};
use super::super::xfer::{Part, Pending};
use super::super::Result;
use super::world::{download, rm, World};

const BF: Dtype = Dtype::Bf16;
const FP: Dtype = Dtype::Fp32;

/// Outputs handed out of the devices (untracked), downloaded after the timed run.
pub(super) struct Handed {
    out: Rc<Phys>,
    dx: Rc<Phys>,
    dw1: Rc<Phys>,
    dw2: Rc<Phys>,
}

impl Handed {
    /// The device's [`MlpOut`] (rows = its output rows; W1's shard has `ufp` columns).
    pub fn fetch(&self, rows: usize, h: usize, fp: usize, ufp: usize) -> Result<MlpOut> {
        Ok(MlpOut {
            out: download(&self.out, BF, rows, h)?,
            dx: download(&self.dx, BF, rows, h)?,
            dw1: download(&self.dw1, FP, h, ufp)?,
            dw2: download(&self.dw2, FP, fp, h)?,
        })
    }
}

fn pair<'a>(own: &'a [Buf; 2], cur: &'a Option<Vec<Buf>>) -> (&'a Buf, &'a Buf) {
    match cur {
        Some(s) => (&s[0], &s[1]),
        None => (&own[0], &own[1]),
    }
}

/// `hpre = X·W1` (rows × u·fp) then its activation `act` (rows × fp: GeLU, or SwiGLU of the
/// `[gate | up]` halves) on device `i`; returns (hpre, act).
fn up(
    w: &World,
    i: usize,
    cfg: &MlpCfg,
    (rows, h, fp): (usize, usize, usize),
    x: &Buf,
    w1: &Buf,
    names: (&'static str, &'static str),
) -> Result<(Buf, Buf)> {
    let ufp = cfg.u() * fp;
    let hpre = w.buf(i, names.0, BF, rows * ufp)?;
    w.gemm(
        i,
        (rows, ufp, h),
        Op::n(x.ptr(), h),
        Op::n(w1.ptr(), ufp),
        Op::n(hpre.ptr(), ufp),
        Ty::Bf16,
        1.0,
        0.0,
        1,
    )?;
    let act = w.buf(i, names.1, BF, rows * fp)?;
    match cfg.activation {
        Activation::Gelu => w.gpu(i).gelu_fwd(hpre.ptr(), act.ptr(), rows * fp)?,
        Activation::Swiglu => w.gpu(i).swiglu_fwd(hpre.ptr(), act.ptr(), rows, fp)?,
    }
    Ok((hpre, act))
}

/// The activation-input gradient `dh` (rows × u·fp) on device `i`, from dOut, W2 and hpre:
/// GeLU — `dOut·W2ᵀ` times GeLU'(hpre); SwiGLU — `dA = dOut·W2ᵀ` into the up half, then both
/// halves in place (the CPU runtime's `act_grad`).
fn act_grad(
    w: &World,
    i: usize,
    cfg: &MlpCfg,
    (rows, h, fp): (usize, usize, usize),
    (dout, w2, hpre): (&Buf, &Buf, &Buf),
    name: &'static str,
) -> Result<Buf> {
    let ufp = cfg.u() * fp;
    let dh = w.buf(i, name, BF, rows * ufp)?;
    let (into, ld) = match cfg.activation {
        Activation::Gelu => (dh.ptr(), fp),
        Activation::Swiglu => (dh.at(fp), ufp),
    };
    w.gemm(
        i,
        (rows, fp, h),
        Op::n(dout.ptr(), h),
        Op::t(w2.ptr(), h),
        Op::n(into, ld),
        Ty::Bf16,
        1.0,
        0.0,
        1,
    )?;
    match cfg.activation {
        Activation::Gelu => w.gpu(i).gelu_bwd(dh.ptr(), hpre.ptr(), rows * fp)?,
        Activation::Swiglu => w.gpu(i).swiglu_bwd(dh.ptr(), hpre.ptr(), rows, fp)?,
    }
    Ok(dh)
}

/// METP MLP forward and backward on every device.
pub(super) fn metp(w: &mut World, cfg: &MlpCfg, data: &MlpData) -> Result<Vec<Handed>> {
    let sh = cfg.shape;
    let p = sh.p;
    let (b, s, h, fp) = (sh.b, sh.s, sh.h, sh.fp());
    let (u, ufp) = (cfg.u(), cfg.u() * sh.fp());
    let r = b * sh.c();
    let next = |i: usize| (i + 1) % p;
    let prev = |i: usize| (i + p - 1) % p;
    let w_shapes = [(h * ufp, BF), (fp * h, BF)];
    let dw_shapes = [(h * ufp, FP), (fp * h, FP)];
    let mut own = Vec::new();
    let mut grad_w1 = Vec::new();
    let mut grad_w2 = Vec::new();
    let mut x = Vec::new();
    let mut dout_stage = Vec::new();
    for i in 0..p {
        own.push([
            w.upload(
                i,
                names::MLP_WEIGHTS,
                &rm(&w1_shard(&data.w1, sh.f, fp, i, u)),
            )?,
            w.upload(
                i,
                names::MLP_WEIGHTS,
                &rm(&data.w2.rows(i * fp, fp).into_owned()),
            )?,
        ]);
        grad_w1.push(w.zeros(i, "optimizer.main_grads_fp32", FP, h * ufp)?);
        grad_w2.push(w.zeros(i, "optimizer.main_grads_fp32", FP, fp * h)?);
        x.push(w.upload(i, names::MLP_INPUT, &rm(&local_rows(&data.x, b, s, p, i)))?);
        dout_stage.push(w.stage(i, &rm(&local_rows(&data.dout, b, s, p, i)))?);
    }
    w.begin()?;

    // ---------------- forward ----------------
    let out = (0..p)
        .map(|i| w.zeros(i, names::MLP_OUTPUT_SUM, BF, r * h))
        .collect::<Result<Vec<_>>>()?;
    let mut cur: Vec<Option<Vec<Buf>>> = (0..p).map(|_| None).collect();
    for t in 0..p {
        let start = w.mark()?;
        let tag = Tag::MlpWeights {
            bwd: false,
            t: (t + 1) as u32,
        };
        let mut pending: Vec<Option<Pending>> = (0..p).map(|_| None).collect();
        if t + 1 < p {
            for i in 0..p {
                let (w1, w2) = pair(&own[i], &cur[i]);
                w.send(i, next(i), tag, vec![Part::all(w1), Part::all(w2)])?;
            }
            if cfg.rb == 2 {
                for (i, pd) in pending.iter_mut().enumerate() {
                    *pd = Some(w.post(i, prev(i), tag, names::MLP_WEIGHT_RECV, &w_shapes)?);
                }
            }
        }
        for i in 0..p {
            let (w1, w2) = pair(&own[i], &cur[i]);
            let (hpre, act) = up(
                w,
                i,
                cfg,
                (r, h, fp),
                &x[i],
                w1,
                (names::MLP_ACT_INPUT_BLOCK, names::MLP_ACT_OUTPUT_BLOCK),
            )?;
            drop(hpre);
            w.gemm(
                i,
                (r, h, fp),
                Op::n(act.ptr(), fp),
                Op::n(w2.ptr(), h),
                Op::n(out[i].ptr(), h),
                Ty::Bf16,
                1.0,
                1.0,
                1,
            )?;
            drop(act);
        }
        let compute_end = w.mark()?;
        if t + 1 < p {
            for i in 0..p {
                let got = match pending[i].take() {
                    Some(pd) => w.wait(pd)?,
                    None => {
                        cur[i] = None;
                        w.recv(i, prev(i), tag, names::MLP_WEIGHT_RECV, &w_shapes)?
                    }
                };
                cur[i] = Some(got);
            }
        }
        let end = w.mark()?;
        w.step(Phase::FwdMlp, 0, t, &start, &compute_end, &end);
    }
    for c in &mut cur {
        *c = None;
    }
    let out_h: Vec<_> = out.into_iter().map(Buf::untrack).collect();

    // ---------------- backward ----------------
    let dout = (0..p)
        .map(|i| w.copy_staged(i, "grad.layer_output", &dout_stage[i]))
        .collect::<Result<Vec<_>>>()?;
    drop(dout_stage);
    let dx = (0..p)
        .map(|i| w.zeros(i, "grad.layer_input", BF, r * h))
        .collect::<Result<Vec<_>>>()?;
    let mut cur_w: Vec<Option<Vec<Buf>>> = (0..p).map(|_| None).collect();
    let mut cur_dw: Vec<Vec<Buf>> = (0..p)
        .map(|i| {
            Ok(vec![
                w.zeros(i, names::MLP_WEIGHT_GRAD_ACC_FP32, FP, h * ufp)?,
                w.zeros(i, names::MLP_WEIGHT_GRAD_ACC_FP32, FP, fp * h)?,
            ])
        })
        .collect::<Result<Vec<_>>>()?;
    for t in 0..p {
        let start = w.mark()?;
        let w_tag = Tag::MlpWeights {
            bwd: true,
            t: (t + 1) as u32,
        };
        let dw_tag = Tag::MlpGrad { t: (t + 1) as u32 };
        if t + 1 < p {
            for i in 0..p {
                let (w1, w2) = pair(&own[i], &cur_w[i]);
                w.send(i, next(i), w_tag, vec![Part::all(w1), Part::all(w2)])?;
            }
        }
        let mut next_w: Vec<Option<Pending>> = (0..p).map(|_| None).collect();
        let mut next_dw: Vec<Option<Pending>> = (0..p).map(|_| None).collect();
        if cfg.rb == 2 && p > 1 {
            for i in 0..p {
                if t + 1 < p {
                    next_w[i] =
                        Some(w.post(i, prev(i), w_tag, names::MLP_WEIGHT_RECV, &w_shapes)?);
                }
                next_dw[i] = Some(w.post(
                    i,
                    prev(i),
                    dw_tag,
                    names::MLP_WEIGHT_GRAD_RECV_FP32,
                    &dw_shapes,
                )?);
            }
        }
        for i in 0..p {
            let (w1, w2) = pair(&own[i], &cur_w[i]);
            let (hpre, act) = up(
                w,
                i,
                cfg,
                (r, h, fp),
                &x[i],
                w1,
                (names::MLP_ACT_INPUT_BLOCK, names::MLP_ACT_OUTPUT_BLOCK),
            )?;
            let dh = act_grad(
                w,
                i,
                cfg,
                (r, h, fp),
                (&dout[i], w2, &hpre),
                "grad.mlp_act_block",
            )?;
            drop(hpre);
            // dW2 += actᵀ·dOut, dW1 += Xᵀ·dH (fp32 accumulators), dX += dH·W1ᵀ.
            w.gemm(
                i,
                (fp, h, r),
                Op::t(act.ptr(), fp),
                Op::n(dout[i].ptr(), h),
                Op::n(cur_dw[i][1].ptr(), h),
                Ty::F32,
                1.0,
                1.0,
                1,
            )?;
            drop(act);
            w.gemm(
                i,
                (h, ufp, r),
                Op::t(x[i].ptr(), h),
                Op::n(dh.ptr(), ufp),
                Op::n(cur_dw[i][0].ptr(), ufp),
                Ty::F32,
                1.0,
                1.0,
                1,
            )?;
            w.gemm(
                i,
                (r, h, ufp),
                Op::n(dh.ptr(), ufp),
                Op::t(w1.ptr(), ufp),
                Op::n(dx[i].ptr(), h),
                Ty::Bf16,
                1.0,
                1.0,
                1,
            )?;
            drop(dh);
        }
        let compute_end = w.mark()?;
        if p > 1 {
            let last = t + 1 == p;
            for i in 0..p {
                let parts = cur_dw[i].iter().map(Part::all).collect();
                w.send(i, next(i), dw_tag, parts)?;
                if cfg.rb == 1 {
                    cur_w[i] = None;
                    cur_dw[i].clear();
                }
            }
            for i in 0..p {
                if !last {
                    let d = match next_w[i].take() {
                        Some(pd) => w.wait(pd)?,
                        None => w.recv(i, prev(i), w_tag, names::MLP_WEIGHT_RECV, &w_shapes)?,
                    };
                    cur_w[i] = Some(d);
                }
                let a = match next_dw[i].take() {
                    Some(pd) => w.wait(pd)?,
                    None => w.recv(
                        i,
                        prev(i),
                        dw_tag,
                        names::MLP_WEIGHT_GRAD_RECV_FP32,
                        &dw_shapes,
                    )?,
                };
                if last {
                    cur_w[i] = None;
                }
                cur_dw[i] = a;
            }
        }
        let end = w.mark()?;
        w.step(Phase::BwdMlp, 0, t, &start, &compute_end, &end);
    }
    // The accumulators of the own pair, back from their trip around the ring.
    for i in 0..p {
        let g = w.gpu(i);
        g.add_f32(grad_w1[i].ptr(), cur_dw[i][0].ptr(), h * ufp)?;
        g.add_f32(grad_w2[i].ptr(), cur_dw[i][1].ptr(), fp * h)?;
        cur_dw[i].clear();
    }
    drop(dout);
    drop(x);
    drop(own);
    Ok(out_h
        .into_iter()
        .zip(dx)
        .zip(grad_w1.into_iter().zip(grad_w2))
        .map(|((out, dx), (g1, g2))| Handed {
            out,
            dx: dx.untrack(),
            dw1: g1.untrack(),
            dw2: g2.untrack(),
        })
        .collect())
}

/// Megatron-TP MLP forward and backward on every device (the CPU runtime's `mlp::tp`).
pub(super) fn tp(w: &mut World, cfg: &MlpCfg, data: &MlpData) -> Result<Vec<Handed>> {
    let sh = cfg.shape;
    let p = sh.p;
    let (h, fp) = (sh.h, sh.fp());
    let (u, ufp) = (cfg.u(), cfg.u() * sh.fp());
    let r = sh.b * sh.s;
    let xs = rm(&data.x);
    let dout_host = rm(&data.dout);
    let mut w1 = Vec::new();
    let mut w2 = Vec::new();
    let mut grad_w1 = Vec::new();
    let mut grad_w2 = Vec::new();
    let mut x = Vec::new();
    let mut dout_stage = Vec::new();
    for i in 0..p {
        w1.push(w.upload(
            i,
            names::MLP_WEIGHTS,
            &rm(&w1_shard(&data.w1, sh.f, fp, i, u)),
        )?);
        w2.push(w.upload(
            i,
            names::MLP_WEIGHTS,
            &rm(&data.w2.rows(i * fp, fp).into_owned()),
        )?);
        grad_w1.push(w.zeros(i, "optimizer.main_grads_fp32", FP, h * ufp)?);
        grad_w2.push(w.zeros(i, "optimizer.main_grads_fp32", FP, fp * h)?);
        x.push(w.upload(i, names::MLP_FC1_INPUT, &xs)?);
        dout_stage.push(w.stage(i, &dout_host)?);
    }
    w.begin()?;
    let mut kept = Vec::new();
    let mut partial = Vec::new();
    for i in 0..p {
        let (hpre, act) = up(
            w,
            i,
            cfg,
            (r, h, fp),
            &x[i],
            &w1[i],
            (names::MLP_ACT_INPUT, names::MLP_FC2_INPUT),
        )?;
        let pt = w.buf(i, names::MLP_OUTPUT_PARTIAL, BF, r * h)?;
        w.gemm(
            i,
            (r, h, fp),
            Op::n(act.ptr(), fp),
            Op::n(w2[i].ptr(), h),
            Op::n(pt.ptr(), h),
            Ty::Bf16,
            1.0,
            0.0,
            1,
        )?;
        kept.push((hpre, act));
        partial.push(pt);
    }
    w.all_reduce_sum(&partial, 0)?;
    let out_h: Vec<_> = partial.into_iter().map(Buf::untrack).collect();
    let mut dx = Vec::new();
    let mut douts = Vec::new();
    for i in 0..p {
        let dout = w.copy_staged(i, "grad.layer_output", &dout_stage[i])?;
        let (hpre, act) = &kept[i];
        let dh = act_grad(w, i, cfg, (r, h, fp), (&dout, &w2[i], hpre), "grad.mlp_act")?;
        w.gemm(
            i,
            (fp, h, r),
            Op::t(act.ptr(), fp),
            Op::n(dout.ptr(), h),
            Op::n(grad_w2[i].ptr(), h),
            Ty::F32,
            1.0,
            1.0,
            1,
        )?;
        w.gemm(
            i,
            (h, ufp, r),
            Op::t(x[i].ptr(), h),
            Op::n(dh.ptr(), ufp),
            Op::n(grad_w1[i].ptr(), ufp),
            Ty::F32,
            1.0,
            1.0,
            1,
        )?;
        let dxi = w.buf(i, "grad.layer_input", BF, r * h)?;
        w.gemm(
            i,
            (r, h, ufp),
            Op::n(dh.ptr(), ufp),
            Op::t(w1[i].ptr(), ufp),
            Op::n(dxi.ptr(), h),
            Ty::Bf16,
            1.0,
            0.0,
            1,
        )?;
        drop(dh);
        dx.push(dxi);
        douts.push(dout);
    }
    // The CPU runtime's mlp::tp releases (dh, act, hpre) before the all-reduce of dX.
    drop(kept);
    w.all_reduce_sum(&dx, 1)?;
    drop(douts);
    drop(dout_stage);
    drop(x);
    drop(w1);
    drop(w2);
    Ok(out_h
        .into_iter()
        .zip(dx)
        .zip(grad_w1.into_iter().zip(grad_w2))
        .map(|((out, dx), (g1, g2))| Handed {
            out,
            dx: dx.untrack(),
            dw1: g1.untrack(),
            dw2: g2.untrack(),
        })
        .collect())
}
