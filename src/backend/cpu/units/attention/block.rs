//! Attention block kernels one device runs: scores, online-softmax merge, fused and unfused
//! forward and backward blocks, and a timed block for calibration.

use super::*;
use crate::memory::names;

/// Geometry of one attention block: `b` samples × `ag` query heads, `c` query rows × `c` key
/// columns, head dimension `d`; `rep` query heads share one K/V head (grouped-query
/// attention; 1 without).
#[derive(Debug, Clone, Copy)]
pub(super) struct BlockShape {
    pub(super) b: usize,
    pub(super) c: usize,
    pub(super) ag: usize,
    pub(super) d: usize,
    pub(super) rep: usize,
    pub(super) scale: f32,
}

impl BlockShape {
    fn heads(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.b).flat_map(move |beta| (0..self.ag).map(move |hd| (beta, hd)))
    }
    fn at(&self, beta: usize, hd: usize) -> ((usize, usize), (usize, usize)) {
        ((beta * self.c, hd * self.d), (self.c, self.d))
    }
    /// Where query head `hd`'s K/V head is in the K and V blocks.
    fn kv_at(&self, beta: usize, hd: usize) -> ((usize, usize), (usize, usize)) {
        ((beta * self.c, (hd / self.rep) * self.d), (self.c, self.d))
    }
}

/// Scaled, masked scores of one head: c × c.
pub(super) fn head_scores(
    geo: &BlockShape,
    q: &MatView,
    k: &MatView,
    beta: usize,
    hd: usize,
    vis: Visibility,
) -> Mat {
    let (at, size) = geo.at(beta, hd);
    let (kv_at, _) = geo.kv_at(beta, hd);
    let mut s = Mat::zeros(geo.c, geo.c);
    s.gemm(
        geo.scale,
        &q.view(at, size),
        &k.view(kv_at, size).transpose(),
        0.0,
    );
    if vis == Visibility::Diagonal {
        for r in 0..geo.c {
            for col in r + 1..geo.c {
                s[(r, col)] = f32::NEG_INFINITY;
            }
        }
    }
    s
}

/// log Σ exp of each row (−∞ for a fully masked row).
pub(super) fn row_lse(s: &Mat) -> Vec<f32> {
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
pub(super) fn exp_shift(s: &mut Mat, lse: impl Fn(usize) -> f32) {
    for r in 0..s.nrows() {
        let l = lse(r);
        for c in 0..s.ncols() {
            s[(r, c)] = (s[(r, c)] - l).exp();
        }
    }
}

pub(super) fn log_add_exp(x: f32, y: f32) -> f32 {
    let m = x.max(y);
    if m == f32::NEG_INFINITY {
        return m;
    }
    m + ((x - m).exp() + (y - m).exp()).ln()
}

/// Merges one head's normalised block output `o` (c × d) with block log-sum-exp `blse` into the
/// running normalised output `acc` and log-sum-exp `lse`.
pub(super) fn merge(
    geo: &BlockShape,
    acc: &mut Mat,
    lse: &mut Mat,
    beta: usize,
    hd: usize,
    o: &MatView,
    blse: &[f32],
) {
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
pub(super) fn fwd_fused(
    geo: &BlockShape,
    q: &MatView,
    k: &MatView,
    v: &MatView,
    vis: Visibility,
    acc: &mut Mat,
    lse: &mut Mat,
) {
    for (beta, hd) in geo.heads() {
        let mut s = head_scores(geo, q, k, beta, hd, vis);
        let blse = row_lse(&s);
        exp_shift(&mut s, |r| blse[r]);
        let (kv_at, size) = geo.kv_at(beta, hd);
        let o = &s * v.view(kv_at, size);
        merge(geo, acc, lse, beta, hd, &o.view((0, 0), o.shape()), &blse);
    }
}

/// One forward block, unfused: scores (bf16), block log-sum-exp (fp32), probabilities (bf16)
/// and the block output (bf16) of all a/p heads materialised, in this order; scores freed once
/// the probabilities exist, probabilities once the block output exists.
#[allow(clippy::too_many_arguments)]
pub(super) fn fwd_unfused(
    dev: &Device,
    geo: &BlockShape,
    q: &MatView,
    k: &MatView,
    v: &MatView,
    vis: Visibility,
    acc: &mut Mat,
    lse: &mut Mat,
) {
    let heads: Vec<(usize, usize)> = geo.heads().collect();
    let scores = dev.track(
        names::ATTN_BLOCK_SCORES,
        BF16,
        heads
            .iter()
            .map(|&(beta, hd)| head_scores(geo, q, k, beta, hd, vis))
            .collect::<Vec<Mat>>(),
    );
    let mut blse = dev.zeros(names::ATTN_BLOCK_LSE_FP32, FP32, geo.b * geo.c, geo.ag);
    for (n, &(beta, hd)) in heads.iter().enumerate() {
        for (r, l) in row_lse(&scores[n]).into_iter().enumerate() {
            blse[(beta * geo.c + r, hd)] = l;
        }
    }
    let probs = dev.track(
        names::ATTN_BLOCK_PROBS,
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
    let mut ob = dev.zeros(names::ATTN_BLOCK_OUT, BF16, geo.b * geo.c, geo.ag * geo.d);
    for (n, &(beta, hd)) in heads.iter().enumerate() {
        let (at, size) = geo.at(beta, hd);
        let (kv_at, _) = geo.kv_at(beta, hd);
        ob.view_mut(at, size)
            .gemm(1.0, &probs[n], &v.view(kv_at, size), 0.0);
    }
    drop(probs);
    for &(beta, hd) in &heads {
        let (at, size) = geo.at(beta, hd);
        let bl: Vec<f32> = (0..geo.c).map(|r| blse[(beta * geo.c + r, hd)]).collect();
        merge(geo, acc, lse, beta, hd, &ob.view(at, size), &bl);
    }
}

/// The gradient inputs of a backward block.
pub(super) struct BwdIn<'a> {
    pub(super) q: MatView<'a>,
    pub(super) k: MatView<'a>,
    pub(super) v: MatView<'a>,
    pub(super) dout: &'a Mat,
    pub(super) lse: &'a Mat,
    pub(super) delta: &'a Mat,
}

/// Probabilities of one head, recomputed from the stored log-sum-exp.
pub(super) fn head_probs(
    geo: &BlockShape,
    x: &BwdIn,
    beta: usize,
    hd: usize,
    vis: Visibility,
) -> Mat {
    let mut s = head_scores(geo, &x.q, &x.k, beta, hd, vis);
    exp_shift(&mut s, |r| x.lse[(beta * geo.c + r, hd)]);
    s
}

pub(super) fn head_dp(geo: &BlockShape, x: &BwdIn, beta: usize, hd: usize) -> Mat {
    let (at, size) = geo.at(beta, hd);
    let (kv_at, _) = geo.kv_at(beta, hd);
    x.dout.view(at, size) * x.v.view(kv_at, size).transpose()
}

pub(super) fn head_ds(
    geo: &BlockShape,
    x: &BwdIn,
    p: &Mat,
    dp: &Mat,
    beta: usize,
    hd: usize,
) -> Mat {
    Mat::from_fn(geo.c, geo.c, |r, c| {
        p[(r, c)] * (dp[(r, c)] - x.delta[(beta * geo.c + r, hd)])
    })
}

/// dQ += scale·dS·K, dK += scale·dSᵀ·Q, dV += Pᵀ·dO for one query head (into its K/V head's
/// columns: the query heads that share it add up there).
#[allow(clippy::too_many_arguments)]
pub(super) fn head_accumulate(
    geo: &BlockShape,
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
    let (kv_at, _) = geo.kv_at(beta, hd);
    dq.view_mut(at, size)
        .gemm(geo.scale, ds, &x.k.view(kv_at, size), 1.0);
    gemm_tn(
        &mut dk.view_mut(kv_at, size),
        geo.scale,
        ds,
        &x.q.view(at, size),
        1.0,
    );
    gemm_tn(
        &mut dv.view_mut(kv_at, size),
        1.0,
        p,
        &x.dout.view(at, size),
        1.0,
    );
}

pub(super) fn bwd_fused(
    geo: &BlockShape,
    x: &BwdIn,
    vis: Visibility,
    dq: &mut Mat,
    dk: &mut Mat,
    dv: &mut Mat,
) {
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
pub(super) fn bwd_unfused(
    dev: &Device,
    geo: &BlockShape,
    x: &BwdIn,
    vis: Visibility,
    dq: &mut Mat,
    dk: &mut Mat,
    dv: &mut Mat,
) {
    let heads: Vec<(usize, usize)> = geo.heads().collect();
    let probs = dev.track(
        names::ATTN_BLOCK_PROBS,
        BF16,
        heads
            .iter()
            .map(|&(beta, hd)| head_probs(geo, x, beta, hd, vis))
            .collect::<Vec<Mat>>(),
    );
    let dp = dev.track(
        names::ATTN_BLOCK_GRAD_PROBS,
        BF16,
        heads
            .iter()
            .map(|&(beta, hd)| head_dp(geo, x, beta, hd))
            .collect::<Vec<Mat>>(),
    );
    let ds = dev.track(
        names::ATTN_BLOCK_GRAD_SCORES,
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
pub(super) fn row_dot_per_head(a: &Mat, b: &Mat, heads: usize, d: usize) -> Mat {
    Mat::from_fn(a.nrows(), heads, |r, hd| {
        (0..d)
            .map(|c| a[(r, hd * d + c)] * b[(r, hd * d + c)])
            .sum()
    })
}

pub(super) fn block_shape(sh: &Shape, c: usize, rep: usize) -> BlockShape {
    BlockShape {
        b: sh.b,
        c,
        ag: sh.ag(),
        d: sh.d(),
        rep,
        scale: 1.0 / (sh.d() as f32).sqrt(),
    }
}

/// One fused attention block on random data, forward and backward separately: what a METP
/// ring step computes (`b·heads` tiles of c × c, head dimension d). For calibration
/// (`crate::calibrate`), which times the very kernels the units run.
pub struct BlockBench {
    geo: BlockShape,
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
        let geo = BlockShape {
            b,
            c,
            ag: heads,
            d,
            rep: 1,
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
            Visibility::Full,
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
            Visibility::Full,
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
