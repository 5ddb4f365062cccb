//! The attention unit on p virtual devices: METP's two-level loop and, for comparison, Megatron
//! TP.
//!
//! **METP** (DESIGN §1), device i of p, c = s/p local tokens, head group g of a/p heads
//! (h/p columns):
//! - static: its weight shard W_qkv\[i\] (h × 3h/p, columns `[Q_i | K_i | V_i]`) and W_o\[i\]
//!   (h/p × h), bf16, and their fp32 main gradients;
//! - forward, outer loop over g = 0..p: obtain W\[g\] (own, or received: broadcast from its owner
//!   or relayed along the ring; with two receive buffers the receive of W\[g+1\] is posted before
//!   computing group g), `QKV = X_i · W_qkv[g]`, then the inner ring over the p sequence blocks:
//!   the K/V block travels i → i+1 (the next receive posted before computing with the current
//!   block when double buffered), each step computes one attention block — fused (online
//!   softmax over per-head tiles; only the fp32 output accumulator and the log-sum-exp are
//!   device memory) or unfused (the block's scores, probabilities, block log-sum-exp and block
//!   output materialised) — and merges it into the running output through the log-sum-exp.
//!   Causal: token positions are global (device i holds tokens i·c .. (i+1)·c); blocks above
//!   the diagonal are skipped (their K/V still travel). Finally `out_i += O[i,g] · W_o[g]`.
//!   Stored for backward: X_i, every O\[i,g\] (bf16) and every group's log-sum-exp (fp32).
//! - backward, the same outer loop (weights fetched again): `dO = dOut_i · W_o[g]ᵀ`, QKV
//!   recomputed, `D = rowsum(dO ∘ O)` per head, then ring-attention backward: K/V (bf16) and the
//!   fp32 dK/dV accumulators travel together (K/V sent before the step's compute, dK/dV after
//!   it; p steps plus a final hop of dK/dV back to the owner). `dX_i += dQKV · W_qkv[g]ᵀ`;
//!   weight gradients are reduced to the shard owner g: every other device sends its fp32
//!   contribution (`X_iᵀ·dQKV`, `O[i,g]ᵀ·dOut_i`), the owner adds them into its main gradient
//!   through `recv_buffers` receive buffers.
//!
//! **TP**: every device holds the full X (replicated), heads of group i, computes attention
//! over all s tokens for its heads (one block of s × s per head), `partial = O_i · W_o[i]`,
//! ring all-reduce; backward recomputes the probabilities from the stored log-sum-exp (as the
//! fused kernel does), weight gradients stay local, `dX` partials are all-reduced.

use std::collections::VecDeque;

use nalgebra::DMatrixView;

use super::device::{
    accumulator_hop, data_hop, gemm_tn, tr_mul, Device, Dtype, Hop, Mat, Pending, Phase, Tag,
    Tracked,
};
use super::rng::SplitMix64;
use super::{gather_rows, local_rows, random_mat, ExecMethod, RunSpec, Shape, WeightExchange};
use crate::error::Result;

type V<'a> = DMatrixView<'a, f32>;
const BF16: Dtype = Dtype::Bf16;
const FP32: Dtype = Dtype::Fp32;

/// What the attention programs need from a [`RunSpec`].
#[derive(Debug, Clone, Copy)]
pub struct AttnCfg {
    /// Sizes.
    pub shape: Shape,
    /// Causal mask.
    pub causal: bool,
    /// Fused attention blocks.
    pub fused: bool,
    /// Receive buffers per traveling tensor (1 or 2).
    pub rb: usize,
    /// Weight-shard exchange.
    pub exchange: WeightExchange,
}

impl AttnCfg {
    /// From a run spec.
    pub fn from_spec(spec: &RunSpec) -> AttnCfg {
        AttnCfg {
            shape: spec.shape,
            causal: spec.causal,
            fused: spec.fused,
            rb: spec.recv_buffers,
            exchange: spec.weight_exchange,
        }
    }
}

/// Global inputs: X and dOut ((b·s) × h), W_qkv (h × 3h), W_o (h × h).
#[derive(Debug, Clone)]
pub struct AttnData {
    /// Input.
    pub x: Mat,
    /// QKV projection.
    pub wqkv: Mat,
    /// Output projection.
    pub wo: Mat,
    /// Upstream gradient.
    pub dout: Mat,
}

impl AttnData {
    /// Uniform random inputs; weights scaled by 1/√h.
    pub fn random(sh: &Shape, rng: &mut SplitMix64) -> AttnData {
        let w = 1.0 / (sh.h as f64).sqrt();
        AttnData {
            x: random_mat(sh.b * sh.s, sh.h, 1.0, rng),
            wqkv: random_mat(sh.h, 3 * sh.h, w, rng),
            wo: random_mat(sh.h, sh.h, w, rng),
            dout: random_mat(sh.b * sh.s, sh.h, 1.0, rng),
        }
    }
}

/// One device's results: METP — its rows of out and dX and the gradients of the shard it owns;
/// TP — the full (replicated) out and dX and its shard's gradients.
#[derive(Debug, Clone)]
pub struct AttnOut {
    /// Output rows.
    pub out: Mat,
    /// Input-gradient rows.
    pub dx: Mat,
    /// Gradient of its W_qkv shard (h × 3h/p).
    pub dwqkv: Mat,
    /// Gradient of its W_o shard (h/p × h).
    pub dwo: Mat,
}

/// Columns of head group `g` of W_qkv: `[Q_g | K_g | V_g]`, h × 3h/p.
fn qkv_shard(w: &Mat, h: usize, hg: usize, g: usize) -> Mat {
    let mut out = Mat::zeros(w.nrows(), 3 * hg);
    for part in 0..3 {
        out.columns_mut(part * hg, hg)
            .copy_from(&w.columns(part * h + g * hg, hg));
    }
    out
}

/// The global output and gradients from every device's [`AttnOut`].
pub(crate) fn assemble(cfg: &AttnCfg, method: ExecMethod, outs: &[&AttnOut]) -> AttnOut {
    let sh = cfg.shape;
    let (h, hg) = (sh.h, sh.hg());
    let (out, dx) = match method {
        ExecMethod::Metp => (
            gather_rows(&outs.iter().map(|o| &o.out).collect::<Vec<_>>(), sh.b, sh.s),
            gather_rows(&outs.iter().map(|o| &o.dx).collect::<Vec<_>>(), sh.b, sh.s),
        ),
        ExecMethod::Tp => (outs[0].out.clone(), outs[0].dx.clone()),
    };
    let mut dwqkv = Mat::zeros(h, 3 * h);
    let mut dwo = Mat::zeros(h, h);
    for (g, o) in outs.iter().enumerate() {
        for part in 0..3 {
            dwqkv
                .columns_mut(part * h + g * hg, hg)
                .copy_from(&o.dwqkv.columns(part * hg, hg));
        }
        dwo.rows_mut(g * hg, hg).copy_from(&o.dwo);
    }
    AttnOut {
        out,
        dx,
        dwqkv,
        dwo,
    }
}

/// Geometry of one attention block: `b` samples × `ag` heads, `c` query rows × `c` key
/// columns, head dimension `d`.
#[derive(Debug, Clone, Copy)]
struct Geo {
    b: usize,
    c: usize,
    ag: usize,
    d: usize,
    scale: f32,
}

impl Geo {
    fn heads(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.b).flat_map(move |beta| (0..self.ag).map(move |hd| (beta, hd)))
    }
    fn at(&self, beta: usize, hd: usize) -> ((usize, usize), (usize, usize)) {
        ((beta * self.c, hd * self.d), (self.c, self.d))
    }
}

/// Which part of a key block a query block sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Vis {
    Full,
    Diagonal,
    Hidden,
}

fn visibility(causal: bool, query_block: usize, key_block: usize) -> Vis {
    if !causal || key_block < query_block {
        Vis::Full
    } else if key_block == query_block {
        Vis::Diagonal
    } else {
        Vis::Hidden
    }
}

/// Scaled, masked scores of one head: c × c.
fn head_scores(geo: &Geo, q: &V, k: &V, beta: usize, hd: usize, vis: Vis) -> Mat {
    let (at, size) = geo.at(beta, hd);
    let mut s = Mat::zeros(geo.c, geo.c);
    s.gemm(
        geo.scale,
        &q.view(at, size),
        &k.view(at, size).transpose(),
        0.0,
    );
    if vis == Vis::Diagonal {
        for r in 0..geo.c {
            for col in r + 1..geo.c {
                s[(r, col)] = f32::NEG_INFINITY;
            }
        }
    }
    s
}

/// log Σ exp of each row (−∞ for a fully masked row).
fn row_lse(s: &Mat) -> Vec<f32> {
    (0..s.nrows())
        .map(|r| {
            let m = s.row(r).iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            if m == f32::NEG_INFINITY {
                return m;
            }
            m + s.row(r).iter().map(|&x| (x - m).exp()).sum::<f32>().ln()
        })
        .collect()
}

/// `s ← exp(s − lse(row))`: probabilities from scores.
fn exp_shift(s: &mut Mat, lse: impl Fn(usize) -> f32) {
    for r in 0..s.nrows() {
        let l = lse(r);
        for c in 0..s.ncols() {
            s[(r, c)] = (s[(r, c)] - l).exp();
        }
    }
}

fn log_add_exp(x: f32, y: f32) -> f32 {
    let m = x.max(y);
    if m == f32::NEG_INFINITY {
        return m;
    }
    m + ((x - m).exp() + (y - m).exp()).ln()
}

/// Merges one head's normalised block output `o` (c × d) with block log-sum-exp `blse` into the
/// running normalised output `acc` and log-sum-exp `lse`.
fn merge(geo: &Geo, acc: &mut Mat, lse: &mut Mat, beta: usize, hd: usize, o: &V, blse: &[f32]) {
    for r in 0..geo.c {
        let row = beta * geo.c + r;
        let old = lse[(row, hd)];
        let new = log_add_exp(old, blse[r]);
        if new == f32::NEG_INFINITY {
            continue;
        }
        let (wa, wb) = ((old - new).exp(), (blse[r] - new).exp());
        for col in 0..geo.d {
            let a = &mut acc[(row, hd * geo.d + col)];
            *a = *a * wa + o[(r, col)] * wb;
        }
        lse[(row, hd)] = new;
    }
}

/// One forward block, fused: per (sample, head) tile, nothing of the block in device memory.
#[allow(clippy::too_many_arguments)]
fn fwd_fused(geo: &Geo, q: &V, k: &V, v: &V, vis: Vis, acc: &mut Mat, lse: &mut Mat) {
    for (beta, hd) in geo.heads() {
        let mut s = head_scores(geo, q, k, beta, hd, vis);
        let blse = row_lse(&s);
        exp_shift(&mut s, |r| blse[r]);
        let (at, size) = geo.at(beta, hd);
        let o = &s * v.view(at, size);
        merge(geo, acc, lse, beta, hd, &o.view((0, 0), o.shape()), &blse);
    }
}

/// One forward block, unfused: scores (bf16), block log-sum-exp (fp32), probabilities (bf16)
/// and the block output (bf16) of all a/p heads materialised, in this order; scores freed once
/// the probabilities exist, probabilities once the block output exists.
#[allow(clippy::too_many_arguments)]
fn fwd_unfused(
    dev: &Device,
    geo: &Geo,
    q: &V,
    k: &V,
    v: &V,
    vis: Vis,
    acc: &mut Mat,
    lse: &mut Mat,
) {
    let heads: Vec<(usize, usize)> = geo.heads().collect();
    let scores = dev.track(
        "attn.block_scores",
        BF16,
        heads
            .iter()
            .map(|&(beta, hd)| head_scores(geo, q, k, beta, hd, vis))
            .collect::<Vec<Mat>>(),
    );
    let mut blse = dev.zeros("attn.block_lse_fp32", FP32, geo.b * geo.c, geo.ag);
    for (n, &(beta, hd)) in heads.iter().enumerate() {
        for (r, l) in row_lse(&scores[n]).into_iter().enumerate() {
            blse[(beta * geo.c + r, hd)] = l;
        }
    }
    let probs = dev.track(
        "attn.block_probs",
        BF16,
        heads
            .iter()
            .enumerate()
            .map(|(n, &(beta, hd))| {
                let mut pm = scores[n].clone();
                exp_shift(&mut pm, |r| blse[(beta * geo.c + r, hd)]);
                pm
            })
            .collect::<Vec<Mat>>(),
    );
    drop(scores);
    let mut ob = dev.zeros("attn.block_out", BF16, geo.b * geo.c, geo.ag * geo.d);
    for (n, &(beta, hd)) in heads.iter().enumerate() {
        let (at, size) = geo.at(beta, hd);
        ob.view_mut(at, size)
            .gemm(1.0, &probs[n], &v.view(at, size), 0.0);
    }
    drop(probs);
    for &(beta, hd) in &heads {
        let (at, size) = geo.at(beta, hd);
        let bl: Vec<f32> = (0..geo.c).map(|r| blse[(beta * geo.c + r, hd)]).collect();
        merge(geo, acc, lse, beta, hd, &ob.view(at, size), &bl);
    }
}

/// The gradient inputs of a backward block.
struct BwdIn<'a> {
    q: V<'a>,
    k: V<'a>,
    v: V<'a>,
    dout: &'a Mat,
    lse: &'a Mat,
    delta: &'a Mat,
}

/// Probabilities of one head, recomputed from the stored log-sum-exp.
fn head_probs(geo: &Geo, x: &BwdIn, beta: usize, hd: usize, vis: Vis) -> Mat {
    let mut s = head_scores(geo, &x.q, &x.k, beta, hd, vis);
    exp_shift(&mut s, |r| x.lse[(beta * geo.c + r, hd)]);
    s
}

fn head_dp(geo: &Geo, x: &BwdIn, beta: usize, hd: usize) -> Mat {
    let (at, size) = geo.at(beta, hd);
    x.dout.view(at, size) * x.v.view(at, size).transpose()
}

fn head_ds(geo: &Geo, x: &BwdIn, p: &Mat, dp: &Mat, beta: usize, hd: usize) -> Mat {
    Mat::from_fn(geo.c, geo.c, |r, c| {
        p[(r, c)] * (dp[(r, c)] - x.delta[(beta * geo.c + r, hd)])
    })
}

/// dQ += scale·dS·K, dK += scale·dSᵀ·Q, dV += Pᵀ·dO for one head.
#[allow(clippy::too_many_arguments)]
fn head_accumulate(
    geo: &Geo,
    x: &BwdIn,
    p: &Mat,
    ds: &Mat,
    beta: usize,
    hd: usize,
    dq: &mut Mat,
    dk: &mut Mat,
    dv: &mut Mat,
) {
    let (at, size) = geo.at(beta, hd);
    dq.view_mut(at, size)
        .gemm(geo.scale, ds, &x.k.view(at, size), 1.0);
    gemm_tn(
        &mut dk.view_mut(at, size),
        geo.scale,
        ds,
        &x.q.view(at, size),
        1.0,
    );
    gemm_tn(
        &mut dv.view_mut(at, size),
        1.0,
        p,
        &x.dout.view(at, size),
        1.0,
    );
}

fn bwd_fused(geo: &Geo, x: &BwdIn, vis: Vis, dq: &mut Mat, dk: &mut Mat, dv: &mut Mat) {
    for (beta, hd) in geo.heads() {
        let p = head_probs(geo, x, beta, hd, vis);
        let dp = head_dp(geo, x, beta, hd);
        let ds = head_ds(geo, x, &p, &dp, beta, hd);
        head_accumulate(geo, x, &p, &ds, beta, hd, dq, dk, dv);
    }
}

/// Unfused backward block: probabilities (recomputed), their gradient and the score gradient of
/// all a/p heads materialised (bf16 each); the probability gradient is freed once the score
/// gradient exists.
#[allow(clippy::too_many_arguments)]
fn bwd_unfused(
    dev: &Device,
    geo: &Geo,
    x: &BwdIn,
    vis: Vis,
    dq: &mut Mat,
    dk: &mut Mat,
    dv: &mut Mat,
) {
    let heads: Vec<(usize, usize)> = geo.heads().collect();
    let probs = dev.track(
        "attn.block_probs",
        BF16,
        heads
            .iter()
            .map(|&(beta, hd)| head_probs(geo, x, beta, hd, vis))
            .collect::<Vec<Mat>>(),
    );
    let dp = dev.track(
        "attn.block_grad_probs",
        BF16,
        heads
            .iter()
            .map(|&(beta, hd)| head_dp(geo, x, beta, hd))
            .collect::<Vec<Mat>>(),
    );
    let ds = dev.track(
        "attn.block_grad_scores",
        BF16,
        heads
            .iter()
            .enumerate()
            .map(|(n, &(beta, hd))| head_ds(geo, x, &probs[n], &dp[n], beta, hd))
            .collect::<Vec<Mat>>(),
    );
    drop(dp);
    for (n, &(beta, hd)) in heads.iter().enumerate() {
        head_accumulate(geo, x, &probs[n], &ds[n], beta, hd, dq, dk, dv);
    }
}

/// `D[row, head] = Σ_d dO ∘ O` over the head's columns.
fn row_dot_per_head(a: &Mat, b: &Mat, heads: usize, d: usize) -> Mat {
    Mat::from_fn(a.nrows(), heads, |r, hd| {
        (0..d)
            .map(|c| a[(r, hd * d + c)] * b[(r, hd * d + c)])
            .sum()
    })
}

/// K and V of the current ring block: the device's own (columns of its QKV) or received.
fn kv_views<'a>(qkv: &'a Mat, cur: &'a Option<Vec<Tracked<Mat>>>, hg: usize) -> (V<'a>, V<'a>) {
    match cur {
        None => (qkv.columns(hg, hg), qkv.columns(2 * hg, hg)),
        Some(s) => (s[0].columns(0, hg), s[1].columns(0, hg)),
    }
}

/// Obtains the weight shard of each head group in turn, by broadcast from its owner or relayed
/// along the ring, single or double buffered.
struct WeightFetch {
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
            shapes: [(h, 3 * hg, BF16), (hg, h, BF16)],
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
                    "attn.weight_recv",
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
                "attn.weight_recv",
                &self.shapes,
            ));
        }
        Ok(slot)
    }
}

fn geo_of(sh: &Shape, c: usize) -> Geo {
    Geo {
        b: sh.b,
        c,
        ag: sh.ag(),
        d: sh.d(),
        scale: 1.0 / (sh.d() as f32).sqrt(),
    }
}

/// METP attention forward and backward on one device (see the module docs).
pub fn metp(dev: &mut Device, cfg: &AttnCfg, data: &AttnData) -> Result<AttnOut> {
    let sh = cfg.shape;
    let (p, i) = (sh.p, dev.rank);
    let (b, s, h, hg, ag, c) = (sh.b, sh.s, sh.h, sh.hg(), sh.ag(), sh.c());
    let rows = b * c;
    let geo = geo_of(&sh, c);
    let kv_shapes = [(rows, hg, BF16), (rows, hg, BF16)];
    let dkv_shapes = [(rows, hg, FP32), (rows, hg, FP32)];

    // Static for the whole run: the own shard (bf16) and its fp32 main gradient.
    let own_wqkv = dev.track("attn.weights", BF16, qkv_shard(&data.wqkv, h, hg, i));
    let own_wo = dev.track("attn.weights", BF16, data.wo.rows(i * hg, hg).into_owned());
    let mut grad_wqkv = dev.zeros("optimizer.main_grads_fp32", FP32, h, 3 * hg);
    let mut grad_wo = dev.zeros("optimizer.main_grads_fp32", FP32, hg, h);
    // Stored: the unit's input.
    let x = dev.track("attn.input", BF16, local_rows(&data.x, b, s, p, i));

    // ---------------- forward ----------------
    let mut out = dev.zeros("attn.output_sum", BF16, rows, h);
    let mut stored_o: Vec<Tracked<Mat>> = Vec::with_capacity(p);
    let mut stored_lse: Vec<Tracked<Mat>> = Vec::with_capacity(p);
    let mut wf = WeightFetch::new(cfg, false);
    for g in 0..p {
        let slot = wf.acquire(dev, g, &own_wqkv, &own_wo)?;
        let (wqkv, wo): (&Mat, &Mat) = match &slot {
            Some(sl) => (&sl[0], &sl[1]),
            None => (&own_wqkv, &own_wo),
        };
        let qkv = dev.track("attn.qkv_group", BF16, &*x * wqkv);
        let mut acc = dev.zeros("attn.output_acc_fp32", FP32, rows, hg);
        let mut lse = dev.track(
            "attn.lse",
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
                let (k, v) = kv_views(&qkv, &cur, hg);
                let parts = vec![(k.into_owned(), BF16), (v.into_owned(), BF16)];
                dev.send(next, tag, parts)?;
                if cfg.rb == 2 {
                    pending = Some(dev.post(prev, tag, "comm.kv_recv", &kv_shapes));
                }
            }
            let vis = visibility(cfg.causal, i, j);
            if vis != Vis::Hidden {
                let (k, v) = kv_views(&qkv, &cur, hg);
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
                    name: "comm.kv_recv",
                    shapes: &kv_shapes,
                };
                data_hop(dev, prev, &mut cur, pending, &hop)?;
            }
            dev.record_step(Phase::FwdAttention, g, t, step_start, compute_end);
        }
        drop(cur);
        let o = dev.track("attn.group_outputs", BF16, acc.clone_owned());
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
        "grad.layer_output",
        BF16,
        local_rows(&data.dout, b, s, p, i),
    );
    let mut dx = dev.zeros("grad.layer_input", BF16, rows, h);
    let mut wf = WeightFetch::new(cfg, true);
    for g in 0..p {
        let slot = wf.acquire(dev, g, &own_wqkv, &own_wo)?;
        let (wqkv, wo): (&Mat, &Mat) = match &slot {
            Some(sl) => (&sl[0], &sl[1]),
            None => (&own_wqkv, &own_wo),
        };
        let o_g: &Mat = &stored_o[g];
        let dog = dev.track("attn.grad_group_output", BF16, &*dout * wo.transpose());
        let qkv = dev.track("attn.qkv_group", BF16, &*x * wqkv);
        let delta = dev.track(
            "attn.delta_fp32",
            FP32,
            row_dot_per_head(&dog, o_g, ag, sh.d()),
        );
        let mut dq = dev.zeros("attn.dq_acc_fp32", FP32, rows, hg);
        let mut cur_kv: Option<Vec<Tracked<Mat>>> = None;
        let mut cur_dkv: Vec<Tracked<Mat>> = vec![
            dev.zeros("attn.dkv_acc_fp32", FP32, rows, hg),
            dev.zeros("attn.dkv_acc_fp32", FP32, rows, hg),
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
                let (k, v) = kv_views(&qkv, &cur_kv, hg);
                let parts = vec![(k.into_owned(), BF16), (v.into_owned(), BF16)];
                dev.send(next, kv_tag, parts)?;
            }
            let (mut next_kv, mut next_dkv) = (None, None);
            if cfg.rb == 2 && p > 1 {
                if t + 1 < p {
                    next_kv = Some(dev.post(prev, kv_tag, "comm.kv_recv", &kv_shapes));
                }
                next_dkv = Some(dev.post(prev, dkv_tag, "comm.dkv_recv_fp32", &dkv_shapes));
            }
            let vis = visibility(cfg.causal, i, j);
            if vis != Vis::Hidden {
                let (k, v) = kv_views(&qkv, &cur_kv, hg);
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
                        name: "comm.kv_recv",
                        shapes: &kv_shapes,
                    },
                    &Hop {
                        tag: dkv_tag,
                        name: "comm.dkv_recv_fp32",
                        shapes: &dkv_shapes,
                    },
                )?;
            }
            dev.record_step(Phase::BwdAttention, g, t, step_start, compute_end);
        }
        // cur_dkv now holds the accumulated dK, dV of the device's own block.
        let mut dqkv_m = Mat::zeros(rows, 3 * hg);
        dqkv_m.columns_mut(0, hg).copy_from(&*dq);
        dqkv_m.columns_mut(hg, hg).copy_from(&*cur_dkv[0]);
        dqkv_m.columns_mut(2 * hg, hg).copy_from(&*cur_dkv[1]);
        let dqkv = dev.track("grad.qkv_group", BF16, dqkv_m);
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
            let shapes = [(h, 3 * hg, FP32), (hg, h, FP32)];
            let mut queue: VecDeque<Pending> = VecDeque::new();
            let mut posted = 0;
            for _ in 0..others.len() {
                while queue.len() < cfg.rb && posted < others.len() {
                    queue.push_back(dev.post(
                        others[posted],
                        wgrad_tag,
                        "attn.weight_grad_recv_fp32",
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
            let cq = dev.track("attn.weight_grad_contrib_fp32", FP32, tr_mul(&x, &dqkv));
            let co = dev.track("attn.weight_grad_contrib_fp32", FP32, tr_mul(o_g, &dout));
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

/// One fused attention block on random data, forward and backward separately: what a METP
/// ring step computes (`b·heads` tiles of c × c, head dimension d). For calibration
/// (`crate::calibrate`), which times the very kernels the units run.
pub struct BlockBench {
    geo: Geo,
    q: Mat,
    k: Mat,
    v: Mat,
    dout: Mat,
    acc: Mat,
    lse: Mat,
    delta: Mat,
    dq: Mat,
    dk: Mat,
    dv: Mat,
}

impl BlockBench {
    /// Random inputs for `b` samples × `heads` heads, `c` query and key rows, head dim `d`.
    pub fn new(b: usize, c: usize, heads: usize, d: usize, seed: u64) -> BlockBench {
        let mut rng = SplitMix64::new(seed);
        let geo = Geo {
            b,
            c,
            ag: heads,
            d,
            scale: 1.0 / (d.max(1) as f32).sqrt(),
        };
        let (rows, w) = (b * c, heads * d);
        let mut m = |r, c| random_mat(r, c, 1.0, &mut rng);
        let (q, k, v, dout) = (m(rows, w), m(rows, w), m(rows, w), m(rows, w));
        let mut bench = BlockBench {
            geo,
            q,
            k,
            v,
            dout,
            acc: Mat::zeros(rows, w),
            lse: Mat::from_element(rows, heads, f32::NEG_INFINITY),
            delta: Mat::zeros(rows, heads),
            dq: Mat::zeros(rows, w),
            dk: Mat::zeros(rows, w),
            dv: Mat::zeros(rows, w),
        };
        bench.forward();
        bench.delta = row_dot_per_head(&bench.dout, &bench.acc, heads, d);
        bench
    }

    /// Forward FLOPs of one block as the cost model counts them: 4·b·c²·heads·d.
    pub fn forward_flops(&self) -> f64 {
        let g = &self.geo;
        4.0 * (g.b * g.c * g.c * g.ag * g.d) as f64
    }

    /// One forward block (fused: online softmax, merged into a running output).
    pub fn forward(&mut self) {
        self.acc.fill(0.0);
        self.lse.fill(f32::NEG_INFINITY);
        let (q, k, v) = (
            self.q.columns(0, self.q.ncols()),
            self.k.columns(0, self.k.ncols()),
            self.v.columns(0, self.v.ncols()),
        );
        fwd_fused(
            &self.geo,
            &q,
            &k,
            &v,
            Vis::Full,
            &mut self.acc,
            &mut self.lse,
        );
    }

    /// One backward block (fused: probabilities recomputed from the log-sum-exp).
    pub fn backward(&mut self) {
        let x = BwdIn {
            q: self.q.columns(0, self.q.ncols()),
            k: self.k.columns(0, self.k.ncols()),
            v: self.v.columns(0, self.v.ncols()),
            dout: &self.dout,
            lse: &self.lse,
            delta: &self.delta,
        };
        bwd_fused(
            &self.geo,
            &x,
            Vis::Full,
            &mut self.dq,
            &mut self.dk,
            &mut self.dv,
        );
    }

    /// A checksum of the outputs (keeps the work observable).
    pub fn checksum(&self) -> f64 {
        (self.acc.sum() + self.dq.sum() + self.dk.sum() + self.dv.sum()) as f64
    }
}

/// Megatron-TP attention forward and backward on one device (see the module docs).
pub fn tp(dev: &mut Device, cfg: &AttnCfg, data: &AttnData) -> Result<AttnOut> {
    let sh = cfg.shape;
    let i = dev.rank;
    let (b, s, h, hg, ag) = (sh.b, sh.s, sh.h, sh.hg(), sh.ag());
    let rows = b * s;
    let geo = geo_of(&sh, s);
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
