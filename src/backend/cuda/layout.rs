//! Where the CUDA attention units put things, computed on the host and built with or without the
//! `cuda` feature, so that CI checks it without a GPU: the stacked `[Q | K | V]` layout of a
//! head group's weight shard, activations and gradients (and the batched GEMMs over its parts),
//! the head batches of the unfused attention block's strided-batched GEMMs under grouped-query
//! attention, and the bytes Megatron TP's attention unit holds on a device.
//!
//! **Stacked parts.** A device's W_qkv shard (h × (hg + 2·wkv)) is held as three row-major
//! blocks one after another — Q (h × hg), K (h × wkv), V (h × wkv) — and its Q, K, V
//! activations likewise (R × hg, R × wkv, R × wkv), so that a K/V block is one contiguous
//! region that travels as one message. Without grouped-query attention the three parts are of
//! one width and one GEMM batched over three covers them; with it, Q is one GEMM and K, V one
//! batched over two ([`QkvParts::batches`]).
//!
//! **Head batches.** cuBLAS's strided-batched GEMM steps every operand by a fixed stride; query
//! head k's K/V head is k / rep, which no single stride reaches when rep > 1. The unfused block
//! therefore runs rep batched GEMMs, batch r over the query heads r, r + rep, r + 2·rep, … (one
//! per K/V head, so that within one batch no two entries add into the same dK/dV head)
//! ([`head_batches`]).
//!
//! Depends on `backend::unit` (the attention configuration, matrices); never on `backend::cpu`
//! or on the GPU parts of `backend::cuda`.

use crate::backend::unit::attention::AttnCfg;
use crate::backend::unit::device::Mat;
use crate::backend::unit::Shape;

/// Column widths of one head group's `[Q | K | V]`: Q of `q` columns (the group's query heads),
/// K and V of `kv` columns each (its K/V heads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QkvParts {
    /// Columns of Q: hg = h/p.
    pub q: usize,
    /// Columns of K (and of V): kv_heads/p heads of d (hg without grouped-query attention).
    pub kv: usize,
}

impl QkvParts {
    /// The parts of `cfg`'s head groups.
    pub fn of(cfg: &AttnCfg) -> QkvParts {
        QkvParts {
            q: cfg.shape.hg(),
            kv: cfg.wkv(),
        }
    }

    /// Columns of part `part` (0 Q, 1 K, 2 V).
    pub fn width(&self, part: usize) -> usize {
        if part == 0 {
            self.q
        } else {
            self.kv
        }
    }

    /// Columns of the three parts together.
    pub fn columns(&self) -> usize {
        self.q + 2 * self.kv
    }

    /// Elements of the three stacked parts of `rows` rows each.
    pub fn len(&self, rows: usize) -> usize {
        rows * self.columns()
    }

    /// Element offset of part `part` in the stacked layout of `rows` rows per part.
    pub fn offset(&self, part: usize, rows: usize) -> usize {
        (0..part).map(|p| rows * self.width(p)).sum()
    }

    /// The batched GEMMs that cover the three parts: (first part, parts, their width) — one of
    /// three parts of one width, or Q alone and K, V together under grouped-query attention.
    /// Consecutive parts of one width are `rows × width` elements apart, the batch stride.
    pub fn batches(&self) -> Vec<(usize, usize, usize)> {
        if self.kv == self.q {
            vec![(0, 3, self.q)]
        } else {
            vec![(0, 1, self.q), (1, 2, self.kv)]
        }
    }

    /// A `[Q | K | V]` matrix (`rows` × [`columns`](Self::columns)) in the stacked layout.
    pub fn stack(&self, m: &Mat) -> Vec<f32> {
        let rows = m.nrows();
        let mut v = Vec::with_capacity(self.len(rows));
        for part in 0..3 {
            let (c0, w) = (self.offset(part, 1), self.width(part));
            for r in 0..rows {
                for c in 0..w {
                    v.push(m[(r, c0 + c)]);
                }
            }
        }
        v
    }

    /// The stacked layout of `rows` rows per part back to a `[Q | K | V]` matrix.
    pub fn unstack(&self, v: &[f32], rows: usize) -> Mat {
        Mat::from_fn(rows, self.columns(), |r, c| {
            let part = if c < self.q {
                0
            } else if c < self.q + self.kv {
                1
            } else {
                2
            };
            let c = c - self.offset(part, 1);
            v[self.offset(part, rows) + r * self.width(part) + c]
        })
    }
}

/// One strided-batched GEMM of the unfused attention block: `count` query heads, the first
/// `head` and each `head_step` after the one before; a query head's Q (dO, O, dQ) columns start
/// at `q_col` and step by `q_step`, its K/V head's K (V, dK, dV) columns at `kv_col` by
/// `kv_step`; its score block is number `head` (stepping by `head_step`) of the `ag` blocks of
/// a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadBatch {
    /// The first query head.
    pub head: usize,
    /// Query heads between consecutive entries.
    pub head_step: usize,
    /// Entries of the batch.
    pub count: usize,
    /// Column of the first query head's Q.
    pub q_col: usize,
    /// Columns between consecutive entries' Q.
    pub q_step: usize,
    /// Column of the first entry's K/V head.
    pub kv_col: usize,
    /// Columns between consecutive entries' K/V heads.
    pub kv_step: usize,
}

/// The batched GEMMs over `ag` query heads of dimension `d`, `rep` of them per K/V head: one
/// over every head without grouped-query attention, else `rep` (batch r: query heads r, r +
/// rep, …, on K/V heads 0, 1, …).
pub fn head_batches(ag: usize, rep: usize, d: usize) -> Vec<HeadBatch> {
    let rep = rep.max(1);
    (0..rep)
        .map(|r| HeadBatch {
            head: r,
            head_step: rep,
            count: ag / rep,
            q_col: r * d,
            q_step: rep * d,
            kv_col: 0,
            kv_step: d,
        })
        .collect()
}

/// Bytes Megatron TP's attention unit holds on one device over a run (the CUDA unit frees
/// little before its end, so the sum of its buffers): W_qkv (h × (hg + 2·wkv)) and W_o (hg × h)
/// in bf16 with their fp32 gradients; X, the output partial, dOut and dX (b·s × h, bf16); Q/K/V,
/// O, dO_local and dQ/dK/dV (bf16) with one hg-wide buffer more for the log-sum-exp and D; the
/// fp32 output accumulator and dQ, dK, dV; unfused, the block's scores, probabilities and their
/// gradients (bf16, b·ag·s² each, three live at once).
pub fn tp_attention_bytes(sh: &Shape, kv_heads: usize, fused: bool) -> u64 {
    let parts = QkvParts {
        q: sh.hg(),
        kv: kv_heads / sh.p.max(1) * sh.d(),
    };
    let (r, h, hg) = ((sh.b * sh.s) as u64, sh.h as u64, sh.hg() as u64);
    let (wq, wkv) = (parts.columns() as u64, parts.kv as u64);
    let blocks = if fused {
        0
    } else {
        3 * 2 * (sh.b * sh.ag().max(1)) as u64 * (sh.s * sh.s) as u64
    };
    6 * h * (wq + hg)
        + 2 * r * h * 4
        + 2 * r * (2 * wq + 3 * hg)
        + 4 * r * (2 * hg + 2 * wkv)
        + blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::unit::attention::{qkv_shard, AttnData};
    use crate::backend::unit::rng::SplitMix64;
    use crate::backend::unit::{ExecMethod, RunSpec, Unit};

    fn cfg(a: usize, kv: usize, p: usize) -> AttnCfg {
        let shape = Shape {
            b: 2,
            s: 16 * p,
            h: a * 8,
            a,
            f: 4 * a * 8,
            p,
        };
        let mut spec = RunSpec::new(Unit::Attention, ExecMethod::Metp, shape);
        spec.kv_heads = kv;
        AttnCfg::from_spec(&spec)
    }

    /// The stacked layout holds each part where the offsets say, and unstacks to the shard the
    /// CPU runtime uses (`unit::attention::qkv_shard`): multi-head and grouped-query.
    #[test]
    fn calib_cuda_layout_stacks_the_cpu_shard_part_by_part() {
        for (a, kv, p) in [(4, 4, 2), (8, 2, 2), (8, 4, 4), (16, 4, 2)] {
            let c = cfg(a, kv, p);
            let parts = QkvParts::of(&c);
            let sh = c.shape;
            assert_eq!(parts.q, sh.h / p);
            assert_eq!(parts.kv, kv / p * sh.d(), "a={a} kv={kv}");
            assert_eq!(parts.columns(), c.wq());
            let mut rng = SplitMix64::new(3);
            let data = AttnData::random(&sh, kv, &mut rng);
            assert_eq!(data.wqkv.ncols(), sh.h + 2 * kv * sh.d());
            for g in 0..p {
                let shard = qkv_shard(&data.wqkv, &c, g);
                let v = parts.stack(&shard);
                assert_eq!(v.len(), parts.len(sh.h));
                // K of the shard, row 1, column 0: the global K/V head g·kv/p's first column.
                let (k0, v0) = (parts.offset(1, sh.h), parts.offset(2, sh.h));
                assert_eq!(k0, sh.h * parts.q);
                assert_eq!(v0, sh.h * (parts.q + parts.kv));
                assert_eq!(v[k0 + parts.kv], data.wqkv[(1, sh.h + g * parts.kv)]);
                let kvw = kv * sh.d();
                assert_eq!(
                    v[v0 + 2 * parts.kv + 1],
                    data.wqkv[(2, sh.h + kvw + g * parts.kv + 1)]
                );
                assert_eq!(parts.unstack(&v, sh.h), shard);
            }
        }
    }

    /// The batched GEMMs over the parts cover each part once, with the stride between parts
    /// of one width.
    #[test]
    fn calib_cuda_layout_batches_cover_the_parts() {
        for (a, kv, p) in [(4, 4, 2), (8, 2, 2), (8, 4, 4)] {
            let parts = QkvParts::of(&cfg(a, kv, p));
            let rows = 5;
            let mut seen = [0; 3];
            for (first, n, width) in parts.batches() {
                for k in 0..n {
                    let part = first + k;
                    seen[part] += 1;
                    assert_eq!(parts.width(part), width);
                    assert_eq!(
                        parts.offset(part, rows),
                        parts.offset(first, rows) + k * rows * width
                    );
                }
            }
            assert_eq!(seen, [1, 1, 1]);
            let expect = if kv == a { 1 } else { 2 };
            assert_eq!(parts.batches().len(), expect);
        }
    }

    /// Every query head is computed once, with its own Q columns and the columns of K/V head
    /// k / rep; within one batch no two entries share a K/V head (their dK/dV adds do not
    /// collide); without grouped-query attention one batch over every head.
    #[test]
    fn calib_cuda_layout_head_batches_pair_each_query_head_with_its_kv_head() {
        for (ag, rep, d) in [(4, 1, 64), (4, 2, 64), (8, 4, 128), (6, 3, 32), (2, 2, 64)] {
            let batches = head_batches(ag, rep, d);
            assert_eq!(batches.len(), rep);
            let mut seen = vec![0; ag];
            for hb in &batches {
                let mut kv_heads = Vec::new();
                for e in 0..hb.count {
                    let head = hb.head + e * hb.head_step;
                    seen[head] += 1;
                    assert_eq!(hb.q_col + e * hb.q_step, head * d);
                    let kv_col = hb.kv_col + e * hb.kv_step;
                    assert_eq!(kv_col, head / rep * d, "ag={ag} rep={rep} head {head}");
                    kv_heads.push(kv_col);
                }
                kv_heads.dedup();
                assert_eq!(kv_heads.len(), hb.count);
            }
            assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
        }
        assert_eq!(
            head_batches(4, 1, 64),
            vec![HeadBatch {
                head: 0,
                head_step: 1,
                count: 4,
                q_col: 0,
                q_step: 64,
                kv_col: 0,
                kv_step: 64
            }]
        );
    }

    /// TP's bytes: the hand count of its buffers, multi-head (the figure before grouped-query
    /// attention: 24·h·hg + 8·r·h + 18·r·hg + 16·r·hg) and grouped-query (K/V of kv/p heads).
    #[test]
    fn calib_cuda_layout_tp_bytes_count_the_buffers() {
        let sh = Shape {
            b: 2,
            s: 128,
            h: 512,
            a: 8,
            f: 2048,
            p: 2,
        };
        let (r, h, hg) = (256u64, 512u64, 256u64);
        let mha = 6 * (4 * h * hg) + 2 * r * h * 4 + 2 * r * hg * 9 + 4 * r * hg * 4;
        assert_eq!(tp_attention_bytes(&sh, 8, true), mha);
        // kv = 2: wkv = 2/2·64 = 64 columns per group.
        let wkv = 64u64;
        let wq = hg + 2 * wkv;
        let weights = 2 * h * (wq + hg) + 4 * h * (wq + hg);
        let wide = 2 * r * h * 4;
        let bf16 = 2 * r * (wq + hg + hg + wq + hg);
        let fp32 = 4 * r * (hg + hg + wkv + wkv);
        assert_eq!(
            tp_attention_bytes(&sh, 2, true),
            weights + wide + bf16 + fp32
        );
        assert!(tp_attention_bytes(&sh, 2, true) < mha);
        let blocks = 3 * 2 * (2 * 4) * 128 * 128;
        assert_eq!(
            tp_attention_bytes(&sh, 2, false),
            weights + wide + bf16 + fp32 + blocks
        );
    }
}
