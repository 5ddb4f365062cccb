//! Megatron-TP attention on one device: its heads over the whole sequence, ring all-reduce of
//! the output and the input gradient.

use super::block::*;
use super::*;
use crate::memory::names;

/// Megatron-TP attention forward and backward on one device (see the module docs).
pub fn tp(dev: &mut Device, cfg: &AttnCfg, data: &AttnData) -> Result<AttnOut> {
    let sh = cfg.shape;
    let i = dev.rank;
    let (b, s, h, hg, ag) = (sh.b, sh.s, sh.h, sh.hg(), sh.ag());
    let rows = b * s;
    let (wkv, wq) = (cfg.wkv(), cfg.wq());
    let geo = block_shape(&sh, s, cfg.rep());
    let vis = visibility(cfg.causal, 0, 0);

    let wqkv = dev.track(names::ATTN_WEIGHTS, BF16, qkv_shard(&data.wqkv, cfg, i));
    let wo = dev.track(
        names::ATTN_WEIGHTS,
        BF16,
        data.wo.rows(i * hg, hg).into_owned(),
    );
    let mut grad_wqkv = dev.zeros(names::OPTIMIZER_MAIN_GRADS_FP32, FP32, h, wq);
    let mut grad_wo = dev.zeros(names::OPTIMIZER_MAIN_GRADS_FP32, FP32, hg, h);
    // Stored (replicated): the input; stored (split): Q, K, V, the log-sum-exp, O.
    let x = dev.track(names::ATTN_QKV_INPUT, BF16, data.x.clone());
    let qkv = dev.track(names::ATTN_QKV, BF16, &*x * &*wqkv);
    let mut acc = dev.zeros(names::ATTN_OUTPUT_ACC_FP32, FP32, rows, hg);
    let mut lse = dev.track(
        names::ATTN_LSE,
        FP32,
        Mat::from_element(rows, ag, f32::NEG_INFINITY),
    );
    {
        let (q, k, v) = (
            qkv.columns(0, hg),
            qkv.columns(hg, wkv),
            qkv.columns(hg + wkv, wkv),
        );
        if cfg.fused {
            fwd_fused(&geo, &q, &k, &v, vis, &mut acc, &mut lse);
        } else {
            fwd_unfused(dev, &geo, &q, &k, &v, vis, &mut acc, &mut lse);
        }
    }
    let o = dev.track(names::ATTN_PROJ_INPUT, BF16, acc.clone_owned());
    drop(acc);
    let mut partial = dev.track(names::ATTN_OUTPUT_PARTIAL, BF16, &*o * &*wo);
    dev.all_reduce_sum(&mut partial, BF16, 0)?;
    let out = partial.into_inner();

    let dout = dev.track(names::GRAD_LAYER_OUTPUT, BF16, data.dout.clone());
    let dog = dev.track(names::ATTN_GRAD_OUTPUT_LOCAL, BF16, &*dout * wo.transpose());
    gemm_tn(&mut grad_wo, 1.0, &o, &*dout, 1.0);
    let delta = dev.track(
        names::ATTN_DELTA_FP32,
        FP32,
        row_dot_per_head(&dog, &o, ag, sh.d()),
    );
    let mut dq = dev.zeros(names::ATTN_DQ_ACC_FP32, FP32, rows, hg);
    let mut dk = dev.zeros(names::ATTN_DKV_ACC_FP32, FP32, rows, wkv);
    let mut dv = dev.zeros(names::ATTN_DKV_ACC_FP32, FP32, rows, wkv);
    {
        let input = BwdIn {
            q: qkv.columns(0, hg),
            k: qkv.columns(hg, wkv),
            v: qkv.columns(hg + wkv, wkv),
            dout: &dog,
            lse: &lse,
            delta: &delta,
        };
        if cfg.fused {
            bwd_fused(&geo, &input, vis, &mut dq, &mut dk, &mut dv);
        } else {
            bwd_unfused(dev, &geo, &input, vis, &mut dq, &mut dk, &mut dv);
        }
    }
    let mut dqkv_m = Mat::zeros(rows, wq);
    dqkv_m.columns_mut(0, hg).copy_from(&*dq);
    dqkv_m.columns_mut(hg, wkv).copy_from(&*dk);
    dqkv_m.columns_mut(hg + wkv, wkv).copy_from(&*dv);
    let dqkv = dev.track(names::GRAD_QKV, BF16, dqkv_m);
    drop((dq, dk, dv, delta, dog));
    gemm_tn(&mut grad_wqkv, 1.0, &x, &*dqkv, 1.0);
    let mut dx = dev.track(names::GRAD_LAYER_INPUT, BF16, &*dqkv * wqkv.transpose());
    drop(dqkv);
    dev.all_reduce_sum(&mut dx, BF16, 1)?;
    Ok(AttnOut {
        out,
        dx: dx.into_inner(),
        dwqkv: grad_wqkv.into_inner(),
        dwo: grad_wo.into_inner(),
    })
}
