//! METP's attention unit on the GPU (the CPU runtime's `backend::cpu::units::attention::metp`, ported buffer for buffer).

use super::*;

/// METP attention forward and backward on every device (see the module docs); the timed
/// region starts after the static buffers are in place.
pub(in super::super) fn metp(w: &mut World, cfg: &AttnCfg, data: &AttnData) -> Result<Vec<Handed>> {
    let sh = cfg.shape;
    let p = sh.p;
    let (b, s, h, hg, ag, c, d) = (sh.b, sh.s, sh.h, sh.hg(), sh.ag(), sh.c(), sh.d());
    let r = b * c;
    let next = |i: usize| (i + 1) % p;
    let prev = |i: usize| (i + p - 1) % p;
    let parts = QkvParts::of(cfg);
    let (wq, wkv, rep) = (parts.columns(), parts.kv, cfg.rep());
    let kv_shapes = [(r * wkv, BF), (r * wkv, BF)];
    let dkv_shapes = [(r * wkv, FP), (r * wkv, FP)];

    // Static: own shard and its fp32 main gradient; stored: the input.
    let mut own = Vec::new();
    let mut grad_wqkv = Vec::new();
    let mut grad_wo = Vec::new();
    let mut x = Vec::new();
    let mut dout_stage = Vec::new();
    for i in 0..p {
        own.push([
            w.upload(i, names::ATTN_WEIGHTS, &qkv_shard(&data.wqkv, cfg, i))?,
            w.upload(
                i,
                names::ATTN_WEIGHTS,
                &rm(&data.wo.rows(i * hg, hg).into_owned()),
            )?,
        ]);
        grad_wqkv.push(w.zeros(i, "optimizer.main_grads_fp32", FP, h * wq)?);
        grad_wo.push(w.zeros(i, "optimizer.main_grads_fp32", FP, hg * h)?);
        x.push(w.upload(i, names::ATTN_INPUT, &rm(&local_rows(&data.x, b, s, p, i)))?);
        dout_stage.push(w.stage(i, &rm(&local_rows(&data.dout, b, s, p, i)))?);
    }
    w.begin()?;

    // ---------------- forward ----------------
    let mut out = (0..p)
        .map(|i| w.zeros(i, names::ATTN_OUTPUT_SUM, BF, r * h))
        .collect::<Result<Vec<_>>>()?;
    let mut stored_o: Vec<Vec<Buf>> = (0..p).map(|_| Vec::new()).collect();
    let mut stored_lse: Vec<Vec<Buf>> = (0..p).map(|_| Vec::new()).collect();
    let mut wf = Fetch::new(cfg, false);
    for g in 0..p {
        let mut slots = wf.acquire(w, g, &own)?;
        let mut qkv = Vec::new();
        let mut acc = Vec::new();
        let mut lse = Vec::new();
        for i in 0..p {
            let (wqkv, _) = weights(&own[i], &slots[i]);
            let q = w.buf(i, names::ATTN_QKV_GROUP, BF, r * wq)?;
            project_qkv(w, i, (r, h, parts), &x[i], wqkv, &q)?;
            qkv.push(Some(q));
            acc.push(Some(w.zeros(i, names::ATTN_OUTPUT_ACC_FP32, FP, r * hg)?));
            lse.push(Some(w.filled(
                i,
                names::ATTN_LSE,
                r * ag,
                f32::NEG_INFINITY,
            )?));
        }
        let mut cur: Vec<Option<Vec<Buf>>> = (0..p).map(|_| None).collect();
        for t in 0..p {
            let start = w.mark()?;
            let tag = Tag::Kv {
                bwd: false,
                g: g as u32,
                t: (t + 1) as u32,
            };
            let mut pending: Vec<Option<Pending>> = (0..p).map(|_| None).collect();
            if t + 1 < p {
                for i in 0..p {
                    w.send(i, next(i), tag, kv_parts(some(&qkv[i])?, r, parts, &cur[i]))?;
                }
                if cfg.rb == 2 {
                    for (i, pd) in pending.iter_mut().enumerate() {
                        *pd = Some(w.post(i, prev(i), tag, "comm.kv_recv", &kv_shapes)?);
                    }
                }
            }
            for i in 0..p {
                let j = (i + p - t) % p;
                let vis = visibility(cfg.causal, i, j);
                if vis == Visibility::Hidden {
                    continue;
                }
                let q = some(&qkv[i])?;
                let (k, v) = kv_of(q, r, parts, &cur[i]);
                let geo = AttnCall {
                    batch: b,
                    heads: ag,
                    q_tokens: c,
                    kv_tokens: c,
                    head_dim: d,
                    causal: vis == Visibility::Diagonal,
                };
                let io = BlockIo {
                    q: DevMat::new(q.ptr(), hg),
                    k: DevMat::new(k, wkv),
                    v: DevMat::new(v, wkv),
                    rep,
                };
                block_fwd(w, i, cfg.fused, &geo, &io, some(&acc[i])?, some(&lse[i])?)?;
            }
            let compute_end = w.mark()?;
            if t + 1 < p {
                for i in 0..p {
                    let got = match pending[i].take() {
                        Some(pd) => w.wait(pd)?,
                        None => {
                            cur[i] = None;
                            w.recv(i, prev(i), tag, "comm.kv_recv", &kv_shapes)?
                        }
                    };
                    cur[i] = Some(got);
                }
            }
            let end = w.mark()?;
            w.step(Phase::FwdAttention, g, t, &start, &compute_end, &end);
        }
        for i in 0..p {
            cur[i] = None;
            let (_, wo) = weights(&own[i], &slots[i]);
            let o = w.buf(i, names::ATTN_GROUP_OUTPUTS, BF, r * hg)?;
            w.gpu(i).to_bf16(some(&acc[i])?.ptr(), o.ptr(), r * hg)?;
            acc[i] = None;
            w.gemm(
                i,
                (r, h, hg),
                Op::n(o.ptr(), hg),
                Op::n(wo, h),
                Op::n(out[i].ptr(), h),
                Ty::Bf16,
                1.0,
                1.0,
                1,
            )?;
            stored_o[i].push(o);
            stored_lse[i].push(take(&mut lse[i])?);
            qkv[i] = None;
            slots[i] = None;
        }
    }
    let out_h: Vec<_> = out.drain(..).map(Buf::untrack).collect();

    // ---------------- backward ----------------
    let dout = (0..p)
        .map(|i| w.copy_staged(i, "grad.layer_output", &dout_stage[i]))
        .collect::<Result<Vec<_>>>()?;
    drop(dout_stage);
    let dx = (0..p)
        .map(|i| w.zeros(i, "grad.layer_input", BF, r * h))
        .collect::<Result<Vec<_>>>()?;
    let mut wf = Fetch::new(cfg, true);
    for g in 0..p {
        let slots = wf.acquire(w, g, &own)?;
        let mut dog = Vec::new();
        let mut qkv = Vec::new();
        let mut delta = Vec::new();
        let mut dq = Vec::new();
        let mut cur_kv: Vec<Option<Vec<Buf>>> = (0..p).map(|_| None).collect();
        let mut cur_dkv: Vec<Vec<Buf>> = Vec::new();
        for i in 0..p {
            let (wqkv, wo) = weights(&own[i], &slots[i]);
            let dg = w.buf(i, names::ATTN_GRAD_GROUP_OUTPUT, BF, r * hg)?;
            w.gemm(
                i,
                (r, hg, h),
                Op::n(dout[i].ptr(), h),
                Op::t(wo, h),
                Op::n(dg.ptr(), hg),
                Ty::Bf16,
                1.0,
                0.0,
                1,
            )?;
            let q = w.buf(i, names::ATTN_QKV_GROUP, BF, r * wq)?;
            project_qkv(w, i, (r, h, parts), &x[i], wqkv, &q)?;
            let de = w.buf(i, names::ATTN_DELTA_FP32, FP, r * ag)?;
            w.gpu(i).attn_delta(
                DevMat::new(dg.ptr(), hg),
                DevMat::new(stored_o[i][g].ptr(), hg),
                de.ptr(),
                r,
                ag,
                d,
            )?;
            dog.push(Some(dg));
            qkv.push(Some(q));
            delta.push(Some(de));
            dq.push(Some(w.zeros(i, names::ATTN_DQ_ACC_FP32, FP, r * hg)?));
            cur_dkv.push(vec![
                w.zeros(i, names::ATTN_DKV_ACC_FP32, FP, r * wkv)?,
                w.zeros(i, names::ATTN_DKV_ACC_FP32, FP, r * wkv)?,
            ]);
        }
        for t in 0..p {
            let start = w.mark()?;
            let kv_tag = Tag::Kv {
                bwd: true,
                g: g as u32,
                t: (t + 1) as u32,
            };
            let dkv_tag = Tag::Dkv {
                g: g as u32,
                t: (t + 1) as u32,
            };
            if t + 1 < p {
                for i in 0..p {
                    w.send(
                        i,
                        next(i),
                        kv_tag,
                        kv_parts(some(&qkv[i])?, r, parts, &cur_kv[i]),
                    )?;
                }
            }
            let mut next_kv: Vec<Option<Pending>> = (0..p).map(|_| None).collect();
            let mut next_dkv: Vec<Option<Pending>> = (0..p).map(|_| None).collect();
            if cfg.rb == 2 && p > 1 {
                for i in 0..p {
                    if t + 1 < p {
                        next_kv[i] =
                            Some(w.post(i, prev(i), kv_tag, "comm.kv_recv", &kv_shapes)?);
                    }
                    next_dkv[i] =
                        Some(w.post(i, prev(i), dkv_tag, "comm.dkv_recv_fp32", &dkv_shapes)?);
                }
            }
            for i in 0..p {
                let j = (i + p - t) % p;
                let vis = visibility(cfg.causal, i, j);
                if vis == Visibility::Hidden {
                    continue;
                }
                let q = some(&qkv[i])?;
                let (k, v) = kv_of(q, r, parts, &cur_kv[i]);
                let geo = AttnCall {
                    batch: b,
                    heads: ag,
                    q_tokens: c,
                    kv_tokens: c,
                    head_dim: d,
                    causal: vis == Visibility::Diagonal,
                };
                let io = BlockIo {
                    q: DevMat::new(q.ptr(), hg),
                    k: DevMat::new(k, wkv),
                    v: DevMat::new(v, wkv),
                    rep,
                };
                let gx = BwdIo {
                    dout: DevMat::new(some(&dog[i])?.ptr(), hg),
                    lse: stored_lse[i][g].ptr(),
                    delta: some(&delta[i])?.ptr(),
                    dq: DevMat::new(some(&dq[i])?.ptr(), hg),
                    dk: DevMat::new(cur_dkv[i][0].ptr(), wkv),
                    dv: DevMat::new(cur_dkv[i][1].ptr(), wkv),
                };
                block_bwd(w, i, cfg.fused, &geo, &io, &gx)?;
            }
            let compute_end = w.mark()?;
            if p > 1 {
                let last = t + 1 == p;
                for i in 0..p {
                    let parts = cur_dkv[i].iter().map(Part::all).collect();
                    w.send(i, next(i), dkv_tag, parts)?;
                    if cfg.rb == 1 {
                        cur_kv[i] = None;
                        cur_dkv[i].clear();
                    }
                }
                for i in 0..p {
                    if !last {
                        let d = match next_kv[i].take() {
                            Some(pd) => w.wait(pd)?,
                            None => w.recv(i, prev(i), kv_tag, "comm.kv_recv", &kv_shapes)?,
                        };
                        cur_kv[i] = Some(d);
                    }
                    let a = match next_dkv[i].take() {
                        Some(pd) => w.wait(pd)?,
                        None => w.recv(i, prev(i), dkv_tag, "comm.dkv_recv_fp32", &dkv_shapes)?,
                    };
                    if last {
                        cur_kv[i] = None;
                    }
                    cur_dkv[i] = a;
                }
            }
            let end = w.mark()?;
            w.step(Phase::BwdAttention, g, t, &start, &compute_end, &end);
        }
        // cur_dkv holds the accumulated dK, dV of each device's own block.
        let mut dqkv = Vec::new();
        for i in 0..p {
            let m = w.buf(i, "grad.qkv_group", BF, r * wq)?;
            dqkv_to_bf16(
                w,
                i,
                (r, parts),
                [some(&dq[i])?, &cur_dkv[i][0], &cur_dkv[i][1]],
                &m,
            )?;
            dq[i] = None;
            cur_dkv[i].clear();
            delta[i] = None;
            cur_kv[i] = None;
            let (wqkv, _) = weights(&own[i], &slots[i]);
            input_grad_qkv(w, i, (r, h, parts), &m, wqkv, &dx[i], 1.0)?;
            dqkv.push(Some(m));
        }
        let wgrad_tag = Tag::AttnWeightGrad { g: g as u32 };
        // Every device but the owner: its fp32 contribution, sent to the owner.
        let mut slots = slots;
        for i in (0..p).filter(|&i| i != g) {
            let cq = w.buf(i, names::ATTN_WEIGHT_GRAD_CONTRIB_FP32, FP, h * wq)?;
            weight_grad_qkv(w, i, (r, h, parts), &x[i], some(&dqkv[i])?, &cq, 0.0)?;
            let co = w.buf(i, names::ATTN_WEIGHT_GRAD_CONTRIB_FP32, FP, hg * h)?;
            w.gemm(
                i,
                (hg, h, r),
                Op::t(stored_o[i][g].ptr(), hg),
                Op::n(dout[i].ptr(), h),
                Op::n(co.ptr(), h),
                Ty::F32,
                1.0,
                0.0,
                1,
            )?;
            w.send(i, g, wgrad_tag, vec![Part::all(&cq), Part::all(&co)])?;
            drop(cq);
            drop(co);
            dqkv[i] = None;
            dog[i] = None;
            qkv[i] = None;
            slots[i] = None;
        }
        // The owner: its own contribution, then the others' through `rb` receive buffers.
        {
            let i = g;
            weight_grad_qkv(
                w,
                i,
                (r, h, parts),
                &x[i],
                some(&dqkv[i])?,
                &grad_wqkv[i],
                1.0,
            )?;
            w.gemm(
                i,
                (hg, h, r),
                Op::t(stored_o[i][g].ptr(), hg),
                Op::n(dout[i].ptr(), h),
                Op::n(grad_wo[i].ptr(), h),
                Ty::F32,
                1.0,
                1.0,
                1,
            )?;
            let others: Vec<usize> = (0..p).filter(|&j| j != i).collect();
            let shapes = [(h * wq, FP), (hg * h, FP)];
            let mut queue: VecDeque<Pending> = VecDeque::new();
            let mut posted = 0;
            for _ in 0..others.len() {
                while queue.len() < cfg.rb && posted < others.len() {
                    queue.push_back(w.post(
                        i,
                        others[posted],
                        wgrad_tag,
                        names::ATTN_WEIGHT_GRAD_RECV_FP32,
                        &shapes,
                    )?);
                    posted += 1;
                }
                if let Some(pd) = queue.pop_front() {
                    let got = w.wait(pd)?;
                    let gpu = w.gpu(i);
                    gpu.add_f32(grad_wqkv[i].ptr(), got[0].ptr(), h * wq)?;
                    gpu.add_f32(grad_wo[i].ptr(), got[1].ptr(), hg * h)?;
                }
            }
            dqkv[i] = None;
            dog[i] = None;
            qkv[i] = None;
            slots[i] = None;
        }
    }
    drop(stored_o);
    drop(stored_lse);
    drop(dout);
    drop(x);
    drop(own);
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
