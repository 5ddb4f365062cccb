//! Fused attention time from its shape (DESIGN §4), the way FlashAttention-2 runs it.
//!
//! Forward: one thread block per (sequence, head, block of `block_q` queries); it walks the key
//! blocks of `block_k` keys its queries can see. Backward: one thread block per (sequence,
//! head, block of `block_k` keys); it walks the query blocks that see those keys. Under the
//! causal mask (queries and keys aligned at their ends) the blocks are unequal — forward query
//! block i visits about (i + 1)·block_q keys, backward key block j the queries at or below it —
//! and a partly masked block costs a whole one. `ctas_per_sm` blocks share an SM:
//!
//! ```text
//! slots   = sm_count · ctas_per_sm
//! pair    = (4 fwd | 10 bwd) · block_q · block_k · head_dim / (mma_fraction · peak / sm_count / ctas_per_sm)
//! w_i     = tile_s + pairs_i · pair                   (one thread block)
//! N, W    = the number and the sum of the w_i over batch × heads × blocks
//! span    = max w_i                    if N ≤ slots   (one block per slot: the longest bounds the call)
//!         = ⌈N / slots⌉ · w            if all w_i are equal (waves)
//!         = max(max w_i, W / slots + ½ max w_i)   otherwise (greedy list scheduling: the
//!                                        fluid time plus half a long block of tail)
//! device  = span + call_s + extra_bytes_per_element · batch·q_tokens·heads·head_dim / HBM
//! ```
//!
//! With few heads the grid under-fills the GPU and the last query block bounds the call, so a
//! causal call gains little from its mask; with many heads causal work is about half. Forward
//! and backward have their own parameters (`kernels.attention_fwd`, `kernels.attention_bwd`);
//! the backward's `extra_bytes_per_element` are its memory-bound passes (dO·O row sums, the fp32
//! dQ accumulator). The ½-block tail is the mean of the greedy schedule's overshoot over the
//! fluid time for FlashAttention's launch order (checked against a direct simulation of that
//! schedule in the tests below).

use crate::config::{AttentionModel, Hardware};
use crate::schedule::{Attention, AttnPass};

/// The parameters of a pass.
pub fn model(hw: &Hardware, pass: AttnPass) -> &AttentionModel {
    match pass {
        AttnPass::Fwd => &hw.kernels.attention_fwd,
        AttnPass::Bwd => &hw.kernels.attention_bwd,
    }
}

/// Block-pair visits of each thread block of one (sequence, head), in launch order (the tests'
/// reference for [`pair_stats`]).
#[cfg(test)]
fn pairs_per_block(a: &Attention, bq: u64, bk: u64) -> Vec<u64> {
    let (q, kv) = (a.q_tokens, a.kv_tokens);
    // Query i sees keys [0, i + 1 + kv − q) (end-aligned causal mask), clipped to [0, kv].
    let lead = kv as i64 - q as i64;
    match a.pass {
        AttnPass::Fwd => {
            let nkb = kv.div_ceil(bk);
            (0..q.div_ceil(bq))
                .map(|i| {
                    if !a.causal {
                        return nkb;
                    }
                    let last_query = ((i + 1) * bq).min(q) as i64 - 1;
                    let keys = (last_query + 1 + lead).clamp(0, kv as i64) as u64;
                    keys.div_ceil(bk)
                })
                .collect()
        }
        AttnPass::Bwd => {
            let nqb = q.div_ceil(bq);
            (0..kv.div_ceil(bk))
                .map(|j| {
                    if !a.causal {
                        return nqb;
                    }
                    // The first query that sees key j·bk: i + 1 + lead > j·bk.
                    let first = (j as i64 * bk as i64 - lead).clamp(0, q as i64) as u64;
                    (q - first).div_ceil(bq)
                })
                .collect()
        }
    }
}

/// Σ_{i<n} ⌊(a·i + b) / m⌋ for a, b ≥ 0, m > 0, in O(log) steps (the classic floor-sum
/// recursion), exact in u128.
fn floor_sum(mut n: u128, mut m: u128, mut a: u128, mut b: u128) -> u128 {
    let mut ans = 0u128;
    if n == 0 {
        return 0;
    }
    loop {
        if a >= m {
            ans += n * (n - 1) / 2 * (a / m);
            a %= m;
        }
        if b >= m {
            ans += n * (b / m);
            b %= m;
        }
        let y = a * n + b;
        if y < m {
            break;
        }
        n = y / m;
        b = y % m;
        std::mem::swap(&mut m, &mut a);
    }
    ans
}

/// Thread blocks of one (sequence, head) and their block-pair visits: (blocks, Σ pairs, fewest,
/// most). Closed form (no loop over blocks, so a call of 2^40 tokens costs nothing to price):
/// forward block i < last sees x_i = (i + 1)·block_q + kv − q keys, clipped to [0, kv], the
/// last sees all; backward block j is seen by kv − j·block_k queries, clipped to [0, q]; the
/// sums of the ceilings are floor sums.
fn pair_stats(a: &Attention, bq: u64, bk: u64) -> (u64, f64, u64, u64) {
    let (q, kv) = (a.q_tokens as i128, a.kv_tokens as i128);
    let (bq, bk) = (bq as i128, bk as i128);
    let ceil = |x: i128, d: i128| (x.max(0) + d - 1) / d;
    // Σ over i in [i0, i1) of ⌈(step·i + c) / d⌉, where step·i + c > 0 on the range.
    let sum_ceil = |i0: i128, i1: i128, step: i128, c: i128, d: i128| -> u128 {
        if i1 <= i0 {
            return 0;
        }
        floor_sum(
            (i1 - i0) as u128,
            d as u128,
            step as u128,
            (step * i0 + c + d - 1) as u128,
        )
    };
    match a.pass {
        AttnPass::Fwd => {
            let (nqb, nkb) = (ceil(q, bq), ceil(kv, bk));
            if !a.causal {
                return (nqb as u64, (nqb * nkb) as f64, nkb as u64, nkb as u64);
            }
            let lead = kv - q;
            // Blocks 0..nqb−1 see x_i = bq·i + (bq + lead) keys; the last sees all kv.
            let c = bq + lead;
            let last = nqb - 1;
            // x_i ≤ 0 for i < i_pos; 0 < x_i < kv for i_pos ≤ i < i_full; x_i ≥ kv after.
            let i_pos = if c > 0 { 0 } else { (-c) / bq + 1 };
            let i_full = if kv - c <= 0 {
                0
            } else {
                (kv - c + bq - 1) / bq
            };
            let (i_pos, i_full) = (i_pos.min(last), i_full.clamp(i_pos.min(last), last));
            let partial = sum_ceil(i_pos, i_full, bq, c, bk);
            let full = (last - i_full) as u128 * nkb as u128 + nkb as u128;
            let first = ceil(c.clamp(0, kv), bk);
            let fewest = if nqb == 1 { nkb } else { first };
            (
                nqb as u64,
                (partial + full) as f64,
                fewest as u64,
                nkb as u64,
            )
        }
        AttnPass::Bwd => {
            let (nqb, nkb) = (ceil(q, bq), ceil(kv, bk));
            if !a.causal {
                return (nkb as u64, (nkb * nqb) as f64, nqb as u64, nqb as u64);
            }
            let lead = kv - q;
            // Block j is seen by count_j = clamp(kv − j·bk, 0, q) queries: all q while
            // j·bk ≤ lead, none once j·bk ≥ kv.
            let j_all = if lead < 0 {
                0
            } else {
                (lead / bk + 1).min(nkb)
            };
            let j_none = ((kv + bk - 1) / bk).min(nkb);
            let all = j_all as u128 * nqb as u128;
            // For j in [j_all, j_none): ⌈(kv − j·bk) / bq⌉; reversed, j' = j_none − 1 − j.
            let n = (j_none - j_all).max(0);
            let partial = if n == 0 {
                0
            } else {
                let c = kv - bk * (j_none - 1);
                sum_ceil(0, n, bk, c, bq)
            };
            let most = if j_all > 0 { nqb } else { ceil(kv.min(q), bq) };
            let fewest = if j_none < nkb {
                0
            } else {
                ceil((kv - bk * (nkb - 1)).clamp(0, q), bq)
            };
            (
                nkb as u64,
                (all + partial) as f64,
                fewest as u64,
                most as u64,
            )
        }
    }
}

/// Span of `groups` copies of `blocks` thread blocks whose times sum to `total` per copy and
/// range from `w_min` to `w_max`, over `slots` slots (module docs).
pub fn span(blocks: f64, total: f64, w_min: f64, w_max: f64, groups: f64, slots: f64) -> f64 {
    let n = groups * blocks;
    if n <= slots {
        return w_max;
    }
    if w_min == w_max {
        return (n / slots).ceil() * w_max;
    }
    w_max.max(groups * total / slots + 0.5 * w_max)
}

/// Device seconds of one fused attention call.
pub fn device_s(hw: &Hardware, a: &Attention) -> f64 {
    let p = model(hw, a.pass);
    let sms = hw.gpu.sm_count.value.max(1.0);
    let ctas = p.ctas_per_sm.value.max(1.0);
    let (bq, bk) = (
        (p.block_q.value as u64).max(1),
        (p.block_k.value as u64).max(1),
    );
    let rate_slot = hw.gpu.peak_bf16_flops_per_s.value / sms * p.mma_fraction.value / ctas;
    let pass_flops = match a.pass {
        AttnPass::Fwd => 4.0,
        AttnPass::Bwd => 10.0,
    };
    let pair_s = pass_flops * bq as f64 * bk as f64 * a.head_dim as f64 / rate_slot;
    let (blocks, pairs, fewest, most) = pair_stats(a, bq, bk);
    let w = |n: u64| p.tile_s.value + n as f64 * pair_s;
    let total = blocks as f64 * p.tile_s.value + pairs * pair_s;
    let groups = a.batch as f64 * a.heads as f64;
    let elements = groups * a.q_tokens as f64 * a.head_dim as f64;
    span(blocks as f64, total, w(fewest), w(most), groups, sms * ctas)
        + p.call_s.value
        + p.extra_bytes_per_element.value * elements / hw.gpu.hbm_bytes_per_s.value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_hardware;

    fn call(b: u64, heads: u64, s: u64, causal: bool, pass: AttnPass) -> Attention {
        Attention {
            batch: b,
            heads,
            kv_heads: heads,
            q_tokens: s,
            kv_tokens: s,
            head_dim: 128,
            causal,
            pass,
        }
    }

    /// Greedy list scheduling in launch order: each block goes to the slot that frees first.
    fn greedy(w: &[f64], groups: usize, slots: usize) -> f64 {
        let mut free = vec![0.0f64; slots];
        for _ in 0..groups {
            for &t in w {
                let (i, _) = free
                    .iter()
                    .enumerate()
                    .min_by(|a, b| a.1.total_cmp(b.1))
                    .unwrap();
                free[i] += t;
            }
        }
        free.into_iter().fold(0.0, f64::max)
    }

    #[test]
    fn span_is_close_to_the_greedy_schedule() {
        // Causal forward blocks of 16 heads at 512…16k tokens (FlashAttention's launch order,
        // queries fastest) on 264 slots: the closed form is within 6% of the schedule.
        for s in [512u64, 2048, 16384] {
            let a = call(16384 / s, 16, s, true, AttnPass::Fwd);
            let w: Vec<f64> = pairs_per_block(&a, 128, 64)
                .into_iter()
                .map(|n| 3.0 + n as f64)
                .collect();
            let g = greedy(&w, (a.batch * a.heads) as usize, 264);
            let (lo, hi) = w
                .iter()
                .fold((f64::MAX, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
            let f = span(
                w.len() as f64,
                w.iter().sum(),
                lo,
                hi,
                (a.batch * a.heads) as f64,
                264.0,
            );
            assert!((f / g - 1.0).abs() < 0.06, "s={s}: {f} vs {g}");
        }
        // Equal blocks: exact waves. Fewer blocks than slots: the longest.
        assert_eq!(span(10.0, 20.0, 2.0, 2.0, 30.0, 132.0), 6.0);
        assert_eq!(span(2.0, 6.0, 1.0, 5.0, 3.0, 132.0), 5.0);
    }

    #[test]
    fn causal_blocks_visit_the_pairs_under_the_mask() {
        // Forward, s = 512, 128-query blocks, 64-key blocks: 2, 4, 6, 8 key blocks.
        let a = call(1, 1, 512, true, AttnPass::Fwd);
        assert_eq!(pairs_per_block(&a, 128, 64), vec![2, 4, 6, 8]);
        // Backward, 128-key blocks, 64-query blocks: key block j is seen by queries ≥ 128j.
        let b = call(1, 1, 512, true, AttnPass::Bwd);
        assert_eq!(pairs_per_block(&b, 64, 128), vec![8, 6, 4, 2]);
        // Zig-zag half blocks are not causal: every block visits every pair.
        let h = Attention {
            q_tokens: 256,
            causal: false,
            ..a
        };
        assert_eq!(pairs_per_block(&h, 128, 64), vec![8, 8]);
        // End alignment: 128 queries against 512 keys see all but the last block's masked part.
        let e = Attention { q_tokens: 128, ..a };
        assert_eq!(pairs_per_block(&e, 128, 64), vec![8]);
    }

    #[test]
    fn closed_form_pair_counts_match_the_block_by_block_count() {
        // Every mask alignment (q < kv, q = kv, q > kv), block sizes that divide each other or
        // not, partial last blocks, both passes.
        for pass in [AttnPass::Fwd, AttnPass::Bwd] {
            for causal in [false, true] {
                for (q, kv) in [
                    (512u64, 512u64),
                    (1000, 1000),
                    (128, 512),
                    (512, 128),
                    (1, 1),
                    (1, 300),
                    (300, 1),
                    (2048, 1024),
                    (1024, 2048),
                    (777, 333),
                ] {
                    for (bq, bk) in [(128u64, 64u64), (64, 128), (8, 8), (96, 40)] {
                        let a = Attention {
                            q_tokens: q,
                            kv_tokens: kv,
                            causal,
                            ..call(1, 1, 1, causal, pass)
                        };
                        let v = pairs_per_block(&a, bq, bk);
                        let want = (
                            v.len() as u64,
                            v.iter().sum::<u64>() as f64,
                            *v.iter().min().unwrap(),
                            *v.iter().max().unwrap(),
                        );
                        assert_eq!(
                            pair_stats(&a, bq, bk),
                            want,
                            "{pass:?} causal={causal} q={q} kv={kv} bq={bq} bk={bk}"
                        );
                    }
                }
            }
        }
        // A 2^40-token causal call prices at once.
        let huge = call(1, 1, 1 << 40, true, AttnPass::Fwd);
        let (blocks, pairs, _, most) = pair_stats(&huge, 128, 64);
        assert_eq!(blocks, 1 << 33);
        assert_eq!(most, 1 << 34);
        assert!(pairs > 0.49 * blocks as f64 * most as f64);
    }

    #[test]
    fn few_heads_gain_little_from_the_mask() {
        // 4 heads of one sequence at 2048 tokens: 64 forward blocks on 264 slots, each alone;
        // the last (longest) bounds the call, so causal saves nothing. 16 heads × 8 sequences
        // fill the GPU many times over and causal saves close to half.
        let hw = load_hardware("hgx-h200").unwrap();
        let small = |c| device_s(&hw, &call(1, 4, 2048, c, AttnPass::Fwd));
        assert!((small(true) / small(false) - 1.0).abs() < 0.01);
        let big = |c| device_s(&hw, &call(8, 16, 2048, c, AttnPass::Fwd));
        assert!(big(true) / big(false) < 0.7);
    }
}
