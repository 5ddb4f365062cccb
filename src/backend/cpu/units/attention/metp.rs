//! METP attention on one device: head groups outer (weights fetched by broadcast or ring
//! relay), the K/V ring inner, backward with traveling dK/dV and weight gradients reduced to
//! the shard owner.

use super::block::*;
use super::*;
use crate::memory::names;

/// K and V of the current ring block (`wkv` columns each): the device's own (columns of its
/// `[Q | K | V]`, Q of `hg` columns) or received.
pub(super) fn kv_views<'a>(
    qkv: &'a Mat,
    cur: &'a Option<Vec<Tracked<Mat>>>,
    hg: usize,
    wkv: usize,
) -> (MatView<'a>, MatView<'a>) {
    match cur {
        None => (qkv.columns(hg, wkv), qkv.columns(hg + wkv, wkv)),
        Some(s) => (s[0].columns(0, wkv), s[1].columns(0, wkv)),
    }
}

/// Obtains the weight shard of each head group in turn, by broadcast from its owner or relayed
/// along the ring, single or double buffered.
pub(super) struct WeightFetch {
    bwd: bool,
    rb: usize,
    exchange: WeightExchange,
    pending: Option<Pending>,
    shapes: [(usize, usize, Dtype); 2],
}

impl WeightFetch {
    fn new(cfg: &AttnCfg, bwd: bool) -> WeightFetch {
        let (h, hg) = (cfg.shape.h, cfg.shape.hg());
        WeightFetch {
            bwd,
            rb: cfg.rb,
            exchange: cfg.exchange,
            pending: None,
            shapes: [(h, cfg.wq(), BF16), (hg, h, BF16)],
        }
    }

    fn tag(&self, g: usize) -> Tag {
        Tag::AttnWeights {
            bwd: self.bwd,
            g: g as u32,
        }
    }

    fn src(&self, dev: &Device, g: usize) -> usize {
        match self.exchange {
            WeightExchange::Broadcast => g,
            WeightExchange::Ring => dev.prev(),
        }
    }

    fn send_own(&self, dev: &mut Device, wqkv: &Mat, wo: &Mat) -> Result<()> {
        let parts = || vec![(wqkv.clone(), BF16), (wo.clone(), BF16)];
        let tag = self.tag(dev.rank);
        match self.exchange {
            WeightExchange::Broadcast => {
                let (p, rank) = (dev.p, dev.rank);
                for j in (0..p).filter(|&j| j != rank) {
                    dev.send(j, tag, parts())?;
                }
            }
            WeightExchange::Ring => {
                if dev.p > 1 {
                    let next = dev.next();
                    dev.send(next, tag, parts())?;
                }
            }
        }
        Ok(())
    }

    /// The shard of group `g`: `None` when it is the device's own, else the filled receive
    /// buffers. Posts the receive of group g+1 when double buffered.
    fn acquire(
        &mut self,
        dev: &mut Device,
        g: usize,
        own_wqkv: &Mat,
        own_wo: &Mat,
    ) -> Result<Option<Vec<Tracked<Mat>>>> {
        let (p, i) = (dev.p, dev.rank);
        // The owner sends when the others post their receive: one group ahead when double
        // buffered (group 0 before the loop), at the group itself otherwise.
        if i == g && (self.rb == 1 || g == 0) {
            self.send_own(dev, own_wqkv, own_wo)?;
        }
        if self.rb == 2 && g + 1 < p && i == g + 1 {
            self.send_own(dev, own_wqkv, own_wo)?;
        }
        let slot = if g == i {
            None
        } else {
            let pending = match self.pending.take() {
                Some(pd) => pd,
                None => dev.post(
                    self.src(dev, g),
                    self.tag(g),
                    names::ATTN_WEIGHT_RECV,
                    &self.shapes,
                ),
            };
            let got = dev.wait(pending)?;
            if self.exchange == WeightExchange::Ring && dev.next() != g {
                let next = dev.next();
                dev.send(
                    next,
                    self.tag(g),
                    vec![(got[0].clone_owned(), BF16), (got[1].clone_owned(), BF16)],
                )?;
            }
            Some(got)
        };
        if self.rb == 2 && g + 1 < p && g + 1 != i {
            self.pending = Some(dev.post(
                self.src(dev, g + 1),
                self.tag(g + 1),
                names::ATTN_WEIGHT_RECV,
                &self.shapes,
            ));
        }
        Ok(slot)
    }
}

/// METP attention forward and backward on one device (see the module docs).
pub fn metp(dev: &mut Device, cfg: &AttnCfg, data: &AttnData) -> Result<AttnOut> {
    let sh = cfg.shape;
    let (p, i) = (sh.p, dev.rank);
    let (b, s, h, hg, ag, c) = (sh.b, sh.s, sh.h, sh.hg(), sh.ag(), sh.c());
    let rows = b * c;
    let (wkv, wq) = (cfg.wkv(), cfg.wq());
    let geo = block_shape(&sh, c, cfg.rep());
    let kv_shapes = [(rows, wkv, BF16), (rows, wkv, BF16)];
    let dkv_shapes = [(rows, wkv, FP32), (rows, wkv, FP32)];

    // Static for the whole run: the own shard (bf16) and its fp32 main gradient.
    let own_wqkv = dev.track(names::ATTN_WEIGHTS, BF16, qkv_shard(&data.wqkv, cfg, i));
    let own_wo = dev.track(
        names::ATTN_WEIGHTS,
        BF16,
        data.wo.rows(i * hg, hg).into_owned(),
    );
    let mut grad_wqkv = dev.zeros(names::OPTIMIZER_MAIN_GRADS_FP32, FP32, h, wq);
    let mut grad_wo = dev.zeros(names::OPTIMIZER_MAIN_GRADS_FP32, FP32, hg, h);
    // Stored: the unit's input.
    let x = dev.track(names::ATTN_INPUT, BF16, local_rows(&data.x, b, s, p, i));

    // ---------------- forward ----------------
    let mut out = dev.zeros(names::ATTN_OUTPUT_SUM, BF16, rows, h);
    let mut stored_o: Vec<Tracked<Mat>> = Vec::with_capacity(p);
    let mut stored_lse: Vec<Tracked<Mat>> = Vec::with_capacity(p);
    let mut wf = WeightFetch::new(cfg, false);
    for g in 0..p {
        let slot = wf.acquire(dev, g, &own_wqkv, &own_wo)?;
        let (wqkv, wo): (&Mat, &Mat) = match &slot {
            Some(sl) => (&sl[0], &sl[1]),
            None => (&own_wqkv, &own_wo),
        };
        let qkv = dev.track(names::ATTN_QKV_GROUP, BF16, &*x * wqkv);
        let mut acc = dev.zeros(names::ATTN_OUTPUT_ACC_FP32, FP32, rows, hg);
        let mut lse = dev.track(
            names::ATTN_LSE,
            FP32,
            Mat::from_element(rows, ag, f32::NEG_INFINITY),
        );
        let mut cur: Option<Vec<Tracked<Mat>>> = None;
        for t in 0..p {
            let step_start = dev.now_s();
            let j = (i + p - t) % p;
            let (next, prev) = (dev.next(), dev.prev());
            let tag = Tag::Kv {
                bwd: false,
                g: g as u32,
                t: (t + 1) as u32,
            };
            let mut pending = None;
            if t + 1 < p {
                let (k, v) = kv_views(&qkv, &cur, hg, wkv);
                let parts = vec![(k.into_owned(), BF16), (v.into_owned(), BF16)];
                dev.send(next, tag, parts)?;
                if cfg.rb == 2 {
                    pending = Some(dev.post(prev, tag, names::COMM_KV_RECV, &kv_shapes));
                }
            }
            let vis = visibility(cfg.causal, i, j);
            if vis != Visibility::Hidden {
                let (k, v) = kv_views(&qkv, &cur, hg, wkv);
                let q = qkv.columns(0, hg);
                if cfg.fused {
                    fwd_fused(&geo, &q, &k, &v, vis, &mut acc, &mut lse);
                } else {
                    fwd_unfused(dev, &geo, &q, &k, &v, vis, &mut acc, &mut lse);
                }
            }
            let compute_end = dev.now_s();
            if t + 1 < p {
                let hop = Hop {
                    tag,
                    name: names::COMM_KV_RECV,
                    shapes: &kv_shapes,
                };
                data_hop(dev, prev, &mut cur, pending, &hop)?;
            }
            dev.record_step(Phase::FwdAttention, g, t, step_start, compute_end);
        }
        drop(cur);
        let o = dev.track(names::ATTN_GROUP_OUTPUTS, BF16, acc.clone_owned());
        drop(acc);
        out.gemm(1.0, &*o, wo, 1.0);
        stored_o.push(o);
        stored_lse.push(lse);
        drop(qkv);
        drop(slot);
    }
    let out = out.into_inner();

    // ---------------- backward ----------------
    let dout = dev.track(
        names::GRAD_LAYER_OUTPUT,
        BF16,
        local_rows(&data.dout, b, s, p, i),
    );
    let mut dx = dev.zeros(names::GRAD_LAYER_INPUT, BF16, rows, h);
    let mut wf = WeightFetch::new(cfg, true);
    for g in 0..p {
        let slot = wf.acquire(dev, g, &own_wqkv, &own_wo)?;
        let (wqkv, wo): (&Mat, &Mat) = match &slot {
            Some(sl) => (&sl[0], &sl[1]),
            None => (&own_wqkv, &own_wo),
        };
        let o_g: &Mat = &stored_o[g];
        let dog = dev.track(names::ATTN_GRAD_GROUP_OUTPUT, BF16, &*dout * wo.transpose());
        let qkv = dev.track(names::ATTN_QKV_GROUP, BF16, &*x * wqkv);
        let delta = dev.track(
            names::ATTN_DELTA_FP32,
            FP32,
            row_dot_per_head(&dog, o_g, ag, sh.d()),
        );
        let mut dq = dev.zeros(names::ATTN_DQ_ACC_FP32, FP32, rows, hg);
        let mut cur_kv: Option<Vec<Tracked<Mat>>> = None;
        let mut cur_dkv: Vec<Tracked<Mat>> = vec![
            dev.zeros(names::ATTN_DKV_ACC_FP32, FP32, rows, wkv),
            dev.zeros(names::ATTN_DKV_ACC_FP32, FP32, rows, wkv),
        ];
        for t in 0..p {
            let step_start = dev.now_s();
            let j = (i + p - t) % p;
            let (next, prev) = (dev.next(), dev.prev());
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
                let (k, v) = kv_views(&qkv, &cur_kv, hg, wkv);
                let parts = vec![(k.into_owned(), BF16), (v.into_owned(), BF16)];
                dev.send(next, kv_tag, parts)?;
            }
            let (mut next_kv, mut next_dkv) = (None, None);
            if cfg.rb == 2 && p > 1 {
                if t + 1 < p {
                    next_kv = Some(dev.post(prev, kv_tag, names::COMM_KV_RECV, &kv_shapes));
                }
                next_dkv = Some(dev.post(prev, dkv_tag, names::COMM_DKV_RECV_FP32, &dkv_shapes));
            }
            let vis = visibility(cfg.causal, i, j);
            if vis != Visibility::Hidden {
                let (k, v) = kv_views(&qkv, &cur_kv, hg, wkv);
                let input = BwdIn {
                    q: qkv.columns(0, hg),
                    k,
                    v,
                    dout: &dog,
                    lse: &stored_lse[g],
                    delta: &delta,
                };
                let (dk, dv) = cur_dkv.split_at_mut(1);
                if cfg.fused {
                    bwd_fused(&geo, &input, vis, &mut dq, &mut dk[0], &mut dv[0]);
                } else {
                    bwd_unfused(dev, &geo, &input, vis, &mut dq, &mut dk[0], &mut dv[0]);
                }
            }
            let compute_end = dev.now_s();
            if p > 1 {
                accumulator_hop(
                    dev,
                    next,
                    prev,
                    t + 1 == p,
                    cfg.rb == 1,
                    &mut cur_kv,
                    &mut cur_dkv,
                    next_kv,
                    next_dkv,
                    &Hop {
                        tag: kv_tag,
                        name: names::COMM_KV_RECV,
                        shapes: &kv_shapes,
                    },
                    &Hop {
                        tag: dkv_tag,
                        name: names::COMM_DKV_RECV_FP32,
                        shapes: &dkv_shapes,
                    },
                )?;
            }
            dev.record_step(Phase::BwdAttention, g, t, step_start, compute_end);
        }
        // cur_dkv now holds the accumulated dK, dV of the device's own block.
        let mut dqkv_m = Mat::zeros(rows, wq);
        dqkv_m.columns_mut(0, hg).copy_from(&*dq);
        dqkv_m.columns_mut(hg, wkv).copy_from(&*cur_dkv[0]);
        dqkv_m.columns_mut(hg + wkv, wkv).copy_from(&*cur_dkv[1]);
        let dqkv = dev.track(names::GRAD_QKV_GROUP, BF16, dqkv_m);
        drop(dq);
        drop(cur_dkv);
        drop(delta);
        drop(cur_kv);
        dx.gemm(1.0, &*dqkv, &wqkv.transpose(), 1.0);
        let wgrad_tag = Tag::AttnWeightGrad { g: g as u32 };
        if i == g {
            gemm_tn(&mut grad_wqkv, 1.0, &x, &*dqkv, 1.0);
            gemm_tn(&mut grad_wo, 1.0, o_g, &*dout, 1.0);
            // Reduce to the owner: contributions arrive in `rb` receive buffers, the next
            // receive posted before the current one is added.
            let others: Vec<usize> = (0..p).filter(|&j| j != i).collect();
            let shapes = [(h, wq, FP32), (hg, h, FP32)];
            let mut queue: VecDeque<Pending> = VecDeque::new();
            let mut posted = 0;
            for _ in 0..others.len() {
                while queue.len() < cfg.rb && posted < others.len() {
                    queue.push_back(dev.post(
                        others[posted],
                        wgrad_tag,
                        names::ATTN_WEIGHT_GRAD_RECV_FP32,
                        &shapes,
                    ));
                    posted += 1;
                }
                if let Some(pd) = queue.pop_front() {
                    let got = dev.wait(pd)?;
                    *grad_wqkv += &*got[0];
                    *grad_wo += &*got[1];
                }
            }
        } else {
            let cq = dev.track(
                names::ATTN_WEIGHT_GRAD_CONTRIB_FP32,
                FP32,
                tr_mul(&x, &dqkv),
            );
            let co = dev.track(
                names::ATTN_WEIGHT_GRAD_CONTRIB_FP32,
                FP32,
                tr_mul(o_g, &dout),
            );
            dev.send(
                g,
                wgrad_tag,
                vec![(cq.into_inner(), FP32), (co.into_inner(), FP32)],
            )?;
        }
        drop(dqkv);
        drop(dog);
        drop(qkv);
        drop(slot);
    }
    drop(stored_o);
    drop(stored_lse);
    drop(dout);
    drop(x);
    drop(own_wqkv);
    drop(own_wo);
    Ok(AttnOut {
        out,
        dx: dx.into_inner(),
        dwqkv: grad_wqkv.into_inner(),
        dwo: grad_wo.into_inner(),
    })
}
