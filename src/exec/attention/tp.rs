//! Megatron-TP attention on one device: its heads over the whole sequence, ring all-reduce of
//! the output and the input gradient.

use super::block::*;
use super::*;

/// Megatron-TP attention forward and backward on one device (see the module docs).
pub fn tp(dev: &mut Device, cfg: &AttnCfg, data: &AttnData) -> Result<AttnOut> {
    let sh = cfg.shape;
    let i = dev.rank;
    let (b, s, h, hg, ag) = (sh.b, sh.s, sh.h, sh.hg(), sh.ag());
    let rows = b * s;
    let geo = block_shape(&sh, s);
    let vis = visibility(cfg.causal, 0, 0);

    let wqkv = dev.track("attn.weights", BF16, qkv_shard(&data.wqkv, h, hg, i));
    let wo = dev.track("attn.weights", BF16, data.wo.rows(i * hg, hg).into_owned());
    let mut grad_wqkv = dev.zeros("optimizer.main_grads_fp32", FP32, h, 3 * hg);
    let mut grad_wo = dev.zeros("optimizer.main_grads_fp32", FP32, hg, h);
    // Stored (replicated): the input; stored (split): Q, K, V, the log-sum-exp, O.
    let x = dev.track("attn.qkv_input", BF16, data.x.clone());
    let qkv = dev.track("attn.qkv", BF16, &*x * &*wqkv);
    let mut acc = dev.zeros("attn.output_acc_fp32", FP32, rows, hg);
    let mut lse = dev.track(
        "attn.lse",
        FP32,
        Mat::from_element(rows, ag, f32::NEG_INFINITY),
    );
    {
        let (q, k, v) = (
            qkv.columns(0, hg),
            qkv.columns(hg, hg),
            qkv.columns(2 * hg, hg),
        );
        if cfg.fused {
            fwd_fused(&geo, &q, &k, &v, vis, &mut acc, &mut lse);
        } else {
            fwd_unfused(dev, &geo, &q, &k, &v, vis, &mut acc, &mut lse);
        }
    }
    let o = dev.track("attn.proj_input", BF16, acc.clone_owned());
    drop(acc);
    let mut partial = dev.track("attn.output_partial", BF16, &*o * &*wo);
    dev.all_reduce_sum(&mut partial, BF16, 0)?;
    let out = partial.into_inner();

    let dout = dev.track("grad.layer_output", BF16, data.dout.clone());
    let dog = dev.track("attn.grad_output_local", BF16, &*dout * wo.transpose());
    gemm_tn(&mut grad_wo, 1.0, &o, &*dout, 1.0);
    let delta = dev.track(
        "attn.delta_fp32",
        FP32,
        row_dot_per_head(&dog, &o, ag, sh.d()),
    );
    let mut dq = dev.zeros("attn.dq_acc_fp32", FP32, rows, hg);
    let mut dk = dev.zeros("attn.dkv_acc_fp32", FP32, rows, hg);
    let mut dv = dev.zeros("attn.dkv_acc_fp32", FP32, rows, hg);
    {
        let input = BwdIn {
            q: qkv.columns(0, hg),
            k: qkv.columns(hg, hg),
            v: qkv.columns(2 * hg, hg),
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
    let mut dqkv_m = Mat::zeros(rows, 3 * hg);
    dqkv_m.columns_mut(0, hg).copy_from(&*dq);
    dqkv_m.columns_mut(hg, hg).copy_from(&*dk);
    dqkv_m.columns_mut(2 * hg, hg).copy_from(&*dv);
    let dqkv = dev.track("grad.qkv", BF16, dqkv_m);
    drop((dq, dk, dv, delta, dog));
    gemm_tn(&mut grad_wqkv, 1.0, &x, &*dqkv, 1.0);
    let mut dx = dev.track("grad.layer_input", BF16, &*dqkv * wqkv.transpose());
    drop(dqkv);
    dev.all_reduce_sum(&mut dx, BF16, 1)?;
    Ok(AttnOut {
        out,
        dx: dx.into_inner(),
        dwqkv: grad_wqkv.into_inner(),
        dwo: grad_wo.into_inner(),
    })
}
