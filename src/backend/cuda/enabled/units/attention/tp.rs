//! Megatron TP's attention unit on the GPU (the CPU runtime's `backend::cpu::units::attention::tp`, ported buffer for buffer).

use super::*;

/// Megatron-TP attention forward and backward on every device (as the CPU runtime's).
pub(in super::super) fn tp(w: &mut World, cfg: &AttnCfg, data: &AttnData) -> Result<Vec<Handed>> {
    let sh = cfg.shape;
    let p = sh.p;
    let (b, s, h, hg, ag, d) = (sh.b, sh.s, sh.h, sh.hg(), sh.ag(), sh.d());
    let r = b * s;
    let parts = QkvParts::of(cfg);
    let (wq, wkv, rep) = (parts.columns(), parts.kv, cfg.rep());
    let geo = AttnCall {
        batch: b,
        heads: ag,
        q_tokens: s,
        kv_tokens: s,
        head_dim: d,
        causal: visibility(cfg.causal, 0, 0) == Visibility::Diagonal,
    };
    let mut wqkv = Vec::new();
    let mut wo = Vec::new();
    let mut grad_wqkv = Vec::new();
    let mut grad_wo = Vec::new();
    let mut x = Vec::new();
    let xs = rm(&data.x);
    let dout_host = rm(&data.dout);
    let mut dout_stage = Vec::new();
    for i in 0..p {
        wqkv.push(w.upload(i, names::ATTN_WEIGHTS, &qkv_shard(&data.wqkv, cfg, i))?);
        wo.push(w.upload(
            i,
            names::ATTN_WEIGHTS,
            &rm(&data.wo.rows(i * hg, hg).into_owned()),
        )?);
        grad_wqkv.push(w.zeros(i, "optimizer.main_grads_fp32", FP, h * wq)?);
        grad_wo.push(w.zeros(i, "optimizer.main_grads_fp32", FP, hg * h)?);
        x.push(w.upload(i, names::ATTN_QKV_INPUT, &xs)?);
        dout_stage.push(w.stage(i, &dout_host)?);
    }
    w.begin()?;
    let mut qkv = Vec::new();
    let mut partial = Vec::new();
    let mut o_all = Vec::new();
    for i in 0..p {
        let q = w.buf(i, names::ATTN_QKV, BF, r * wq)?;
        project_qkv(w, i, (r, h, parts), &x[i], wqkv[i].ptr(), &q)?;
        let acc = w.zeros(i, names::ATTN_OUTPUT_ACC_FP32, FP, r * hg)?;
        let lse = w.filled(i, names::ATTN_LSE, r * ag, f32::NEG_INFINITY)?;
        let io = BlockIo {
            q: DevMat::new(q.ptr(), hg),
            k: DevMat::new(q.at(parts.offset(1, r)), wkv),
            v: DevMat::new(q.at(parts.offset(2, r)), wkv),
            rep,
        };
        block_fwd(w, i, cfg.fused, &geo, &io, &acc, &lse)?;
        let o = w.buf(i, names::ATTN_PROJ_INPUT, BF, r * hg)?;
        w.gpu(i).to_bf16(acc.ptr(), o.ptr(), r * hg)?;
        drop(acc);
        let pt = w.buf(i, names::ATTN_OUTPUT_PARTIAL, BF, r * h)?;
        w.gemm(
            i,
            (r, h, hg),
            Op::n(o.ptr(), hg),
            Op::n(wo[i].ptr(), h),
            Op::n(pt.ptr(), h),
            Ty::Bf16,
            1.0,
            0.0,
            1,
        )?;
        qkv.push((q, lse));
        o_all.push(o);
        partial.push(pt);
    }
    w.all_reduce_sum(&partial, 0)?;
    let out_h: Vec<_> = partial.into_iter().map(Buf::untrack).collect();
    let mut dx = Vec::new();
    let mut douts = Vec::new();
    for i in 0..p {
        let dout = w.copy_staged(i, "grad.layer_output", &dout_stage[i])?;
        let dog = w.buf(i, names::ATTN_GRAD_OUTPUT_LOCAL, BF, r * hg)?;
        w.gemm(
            i,
            (r, hg, h),
            Op::n(dout.ptr(), h),
            Op::t(wo[i].ptr(), h),
            Op::n(dog.ptr(), hg),
            Ty::Bf16,
            1.0,
            0.0,
            1,
        )?;
        w.gemm(
            i,
            (hg, h, r),
            Op::t(o_all[i].ptr(), hg),
            Op::n(dout.ptr(), h),
            Op::n(grad_wo[i].ptr(), h),
            Ty::F32,
            1.0,
            1.0,
            1,
        )?;
        let delta = w.buf(i, names::ATTN_DELTA_FP32, FP, r * ag)?;
        w.gpu(i).attn_delta(
            DevMat::new(dog.ptr(), hg),
            DevMat::new(o_all[i].ptr(), hg),
            delta.ptr(),
            r,
            ag,
            d,
        )?;
        let dq = w.zeros(i, names::ATTN_DQ_ACC_FP32, FP, r * hg)?;
        let dk = w.zeros(i, names::ATTN_DKV_ACC_FP32, FP, r * wkv)?;
        let dv = w.zeros(i, names::ATTN_DKV_ACC_FP32, FP, r * wkv)?;
        let (q, lse) = &qkv[i];
        let io = BlockIo {
            q: DevMat::new(q.ptr(), hg),
            k: DevMat::new(q.at(parts.offset(1, r)), wkv),
            v: DevMat::new(q.at(parts.offset(2, r)), wkv),
            rep,
        };
        let gx = BwdIo {
            dout: DevMat::new(dog.ptr(), hg),
            lse: lse.ptr(),
            delta: delta.ptr(),
            dq: DevMat::new(dq.ptr(), hg),
            dk: DevMat::new(dk.ptr(), wkv),
            dv: DevMat::new(dv.ptr(), wkv),
        };
        block_bwd(w, i, cfg.fused, &geo, &io, &gx)?;
        let dqkv = w.buf(i, "grad.qkv", BF, r * wq)?;
        dqkv_to_bf16(w, i, (r, parts), [&dq, &dk, &dv], &dqkv)?;
        drop((dq, dk, dv, delta, dog));
        weight_grad_qkv(w, i, (r, h, parts), &x[i], &dqkv, &grad_wqkv[i], 1.0)?;
        let dxi = w.buf(i, "grad.layer_input", BF, r * h)?;
        input_grad_qkv(w, i, (r, h, parts), &dqkv, wqkv[i].ptr(), &dxi, 0.0)?;
        drop(dqkv);
        douts.push(dout);
        dx.push(dxi);
    }
    w.all_reduce_sum(&dx, 1)?;
    drop(douts);
    drop(dout_stage);
    drop(qkv);
    drop(o_all);
    drop(x);
    drop(wqkv);
    drop(wo);
    Ok(out_h
        .into_iter()
        .zip(dx)
        .zip(grad_wqkv.into_iter().zip(grad_wo))
        .map(|((out, dx), (gq, go))| Handed {
            out,
            dx: dx.untrack(),
            dwqkv: gq.untrack(),
            dwo: go.untrack(),
        })
        .collect())
}
