//! Fused attention time from its shape (DESIGN §4), the way FlashAttention-2 runs it.
//!
//! Forward: one thread block per (sequence, head, block of `block_q` queries); it walks the key
//! blocks of `block_k` keys its queries can see. Backward: one thread block per (sequence,
//! head, block of `block_k` keys); it walks the query blocks that see those keys. Under the
//! causal mask (queries and keys aligned at their ends) the blocks are unequal — forward query
//! block i visits about (i + 1)·block_q keys, backward key block j the queries at or below it —
//! and a partly masked block costs a whole one. Which kernel runs a call — its tiles, how many
//! of its blocks an SM holds (`ctas_per_sm`), its rate — depends on the head dimension
//! (`tiles`, one entry per kernel; a call runs on the smallest kernel head dimension at least
//! its own, padded; the pass-level fields otherwise). With w_i a block's work at the SM's
//! full rate:
//!
//! ```text
//! pair    = (4 fwd | 10 bwd) · block_q · block_k · d_kernel / (mma_fraction · peak / sm_count)
//! w_i     = tile_s + pairs_i · pair                     (one thread block)
//! N, W, B = the blocks, the sum of their w_i, the blocks of one (sequence, head)
//! s       = solo_fraction: a block alone reaches s of the SM's rate; k blocks share it, each
//!           min(1/k, s)                           (default s = 1/ctas_per_sm)
//! u       = max(ctas_per_sm, 1/s)                 (a block's time per unit of work, SM full)
//! span    = N ≤ sm_count·ctas_per_sm (one round): blocks dealt round-robin to the SMs in launch
//!           order, each SM shares its rate among its blocks (processor sharing with the cap s);
//!           the busiest SM bounds the call
//!         = all w_i equal: F·u·w + max(⌈r/sm_count⌉, 1/s)·w, F full rounds, r blocks left
//!         = otherwise: max(w_max/s, W·u/(sm_count·ctas_per_sm) + ½·u·w_max·f)
//!           (greedy list scheduling: the fluid time plus half a long block of tail; f = 1 when
//!           the blocks of a (sequence, head) are launched shortest first — the forward —,
//!           f = max(0, 1 − B/slots) when they are launched longest first — the backward, whose
//!           long blocks start early once one (sequence, head) fills a round)
//! device  = span + call_s + extra_bytes_per_element · batch·q_tokens·heads·head_dim / HBM
//!           (+ the split-KV combine: memory.latency_s + batch·heads·q·(splits·(4d + 4) + 2d)/HBM)
//! ```
//!
//! **Split-KV** (forward, `max_splits` > 1, as FlashAttention-2's `set_params_splitkv` in
//! `flash_api.cpp`): when batch·heads·⌈q/split_block_q⌉ blocks would fill less than 80% of
//! `sm_count·ctas_per_sm`, the keys are split into the fewest of up to `max_splits` parts
//! whose wave efficiency is within 85% of the best (`num_splits_heuristic`); the split kernel
//! (blocks of `split_block_q` × `split_block_k`) runs ⌈q/split_block_q⌉·splits blocks per
//! (sequence, head), each a key range, and a combine kernel merges the partial outputs.
//!
//! With few heads the grid under-fills the GPU and the last query block bounds the call, so a
//! causal call gains little from its mask — unless its blocks share SMs with short ones, which
//! finish and leave the long block the SM's whole rate; with many heads causal work is about
//! half. Forward and backward have their own parameters (`kernels.attention_fwd`,
//! `kernels.attention_bwd`); the backward's `extra_bytes_per_element` are its memory-bound
//! passes (dO·O row sums, the fp32 dQ accumulator). The ½-block tail is the mean of the greedy
//! schedule's overshoot over the fluid time for FlashAttention's launch order (checked against
//! a direct simulation of that schedule in the tests below).

use crate::config::{AttentionModel, Hardware};
use crate::schedule::{Attention, AttnPass};

/// Blocks above which a single round is priced in closed form instead of SM by SM.
const EXPLICIT_BLOCKS: u64 = 4096;

/// The parameters of a pass.
pub fn model(hw: &Hardware, pass: AttnPass) -> &AttentionModel {
    match pass {
        AttnPass::Fwd => &hw.kernels.attention_fwd,
        AttnPass::Bwd => &hw.kernels.attention_bwd,
    }
}

/// The kernel that runs a call: tiles, occupancy and rates for its head dimension.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kernel {
    /// The kernel's head dimension (the call's, padded up to it).
    pub head_dim: u64,
    /// Query rows per block.
    pub block_q: u64,
    /// Key rows per block.
    pub block_k: u64,
    /// Blocks resident per SM.
    pub ctas_per_sm: f64,
    /// Fraction of the SM's peak reached.
    pub mma_fraction: f64,
    /// Share of the SM's rate one block reaches alone.
    pub solo_fraction: f64,
    /// The split-KV kernel's (block_q, block_k), when the pass may split.
    pub split: Option<(u64, u64)>,
}

/// The kernel of `pass` for calls of head dimension `head_dim`.
pub fn kernel(hw: &Hardware, pass: AttnPass, head_dim: u64) -> Kernel {
    let p = model(hw, pass);
    let whole = |v: f64| (v as u64).max(1);
    let may_split = pass == AttnPass::Fwd && p.max_splits.as_ref().is_some_and(|f| f.value > 1.0);
    match p
        .tiles
        .iter()
        .filter(|t| t.head_dim >= head_dim)
        .min_by_key(|t| t.head_dim)
    {
        Some(t) => Kernel {
            head_dim: t.head_dim,
            block_q: whole(t.block_q.value),
            block_k: whole(t.block_k.value),
            ctas_per_sm: t.ctas_per_sm.value.max(1.0),
            mma_fraction: t.mma_fraction.value,
            solo_fraction: t.solo_fraction.value,
            split: match (&t.split_block_q, &t.split_block_k) {
                (Some(q), Some(k)) if may_split => Some((whole(q.value), whole(k.value))),
                _ => None,
            },
        },
        None => {
            let ctas = p.ctas_per_sm.value.max(1.0);
            Kernel {
                head_dim,
                block_q: whole(p.block_q.value),
                block_k: whole(p.block_k.value),
                ctas_per_sm: ctas,
                mma_fraction: p.mma_fraction.value,
                solo_fraction: p.solo_fraction.as_ref().map_or(1.0 / ctas, |f| f.value),
                split: None,
            }
        }
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

/// FlashAttention-2's `num_splits_heuristic`: 1 when `blocks` fill at least 80% of `slots`;
/// otherwise the fewest splits (of those that change the keys per split) whose wave
/// efficiency is at least 85% of the best up to `max_splits`.
pub fn num_splits(blocks: u64, slots: u64, key_blocks: u64, max_splits: u64) -> u64 {
    if blocks as f64 >= 0.8 * slots as f64 || blocks == 0 {
        return 1;
    }
    let most = max_splits.min(slots).min(key_blocks).max(1);
    let eligible = |s: u64| s == 1 || key_blocks.div_ceil(s) != key_blocks.div_ceil(s - 1);
    let efficiency = |s: u64| {
        let waves = (blocks * s) as f64 / slots as f64;
        waves / waves.ceil()
    };
    let best = (1..=most)
        .filter(|&s| eligible(s))
        .map(efficiency)
        .fold(0.0, f64::max);
    (1..=most)
        .find(|&s| eligible(s) && efficiency(s) >= 0.85 * best)
        .unwrap_or(1)
}

/// Key blocks visited by forward query block `i` (or query blocks by backward key block `i`).
fn block_pairs(a: &Attention, bq: u64, bk: u64, i: u64) -> u64 {
    let (q, kv) = (a.q_tokens as i128, a.kv_tokens as i128);
    let lead = kv - q;
    let ceil = |x: i128, d: u64| (x.max(0) as u64).div_ceil(d);
    match a.pass {
        AttnPass::Fwd => {
            if !a.causal {
                return ceil(kv, bk);
            }
            let last_query = ((i as i128 + 1) * bq as i128).min(q) - 1;
            ceil((last_query + 1 + lead).clamp(0, kv), bk)
        }
        AttnPass::Bwd => {
            if !a.causal {
                return ceil(q, bq);
            }
            let first = (i as i128 * bk as i128 - lead).clamp(0, q);
            ceil(q - first, bq)
        }
    }
}

/// Time of blocks of work `w` (at the SM's full rate) sharing one SM, each at most `solo` of
/// its rate: processor sharing, shortest finishing first.
fn shared_sm(w: &mut [f64], solo: f64) -> f64 {
    w.sort_by(f64::total_cmp);
    let (mut t, mut done) = (0.0, 0.0);
    let n = w.len();
    for (i, &x) in w.iter().enumerate() {
        let rate = (1.0 / (n - i) as f64).min(solo);
        t += (x - done) / rate;
        done = x;
    }
    t
}

/// The blocks of one call as the span needs them.
#[derive(Debug, Clone, Copy)]
pub struct Blocks {
    /// Blocks of one (sequence, head).
    pub per_group: f64,
    /// (Sequence, head) groups.
    pub groups: f64,
    /// Sum of the block works of one group.
    pub total: f64,
    /// Fewest and most work of a block.
    pub w_min: f64,
    /// Most work of a block.
    pub w_max: f64,
    /// Blocks of one group are launched longest first.
    pub decreasing: bool,
}

/// Span of a call's blocks on `sms` SMs holding `ctas` blocks each (module docs); `work(i)`
/// is block i of a group's work, for the SM-by-SM pricing of a single round.
pub fn span(b: &Blocks, sms: f64, ctas: f64, solo: f64, work: &dyn Fn(u64) -> f64) -> f64 {
    let n = b.groups * b.per_group;
    let slots = sms * ctas;
    let a = 1.0 / solo;
    let u = ctas.max(a);
    if n <= slots {
        if n <= EXPLICIT_BLOCKS as f64 && b.w_min != b.w_max {
            let (n, sms, per) = (n as u64, sms as u64, b.per_group as u64);
            let mut worst = 0.0f64;
            let mut mine = Vec::new();
            for s in 0..sms.min(n) {
                mine.clear();
                mine.extend((s..n).step_by(sms as usize).map(|i| work(i % per)));
                worst = worst.max(shared_sm(&mut mine, solo));
            }
            return worst;
        }
        // Equal blocks (or too many to deal one by one): the busiest SM holds ⌈N/sms⌉ blocks
        // of the largest work, or at least one block alone.
        let k = (n / sms).ceil();
        return (a * b.w_max).max(b.w_max + (k - 1.0) * b.groups * b.total / n);
    }
    if b.w_min == b.w_max {
        let full = (n / slots).floor();
        let rest = n - full * slots;
        let tail = if rest > 0.0 {
            (rest / sms).ceil().max(a) * b.w_max
        } else {
            0.0
        };
        return full * u * b.w_max + tail;
    }
    let f = if b.decreasing {
        (1.0 - b.per_group / slots).max(0.0)
    } else {
        1.0
    };
    (a * b.w_max).max(b.groups * b.total * u / slots + 0.5 * u * b.w_max * f)
}

/// Device seconds of one fused attention call.
pub fn device_s(hw: &Hardware, a: &Attention) -> f64 {
    let p = model(hw, a.pass);
    let k = kernel(hw, a.pass, a.head_dim);
    let sms = hw.gpu.sm_count.value.max(1.0);
    let hbm = hw.gpu.hbm_bytes_per_s.value;
    let rate_sm = hw.gpu.peak_bf16_flops_per_s.value / sms * k.mma_fraction;
    let pass_flops = match a.pass {
        AttnPass::Fwd => 4.0,
        AttnPass::Bwd => 10.0,
    };
    let groups = a.batch as f64 * a.heads as f64;
    let elements = groups * a.q_tokens as f64 * a.head_dim as f64;
    let tile_s = p.tile_s.value;
    // Split-KV: the split kernel's blocks, when the heuristic splits.
    let splits = match k.split {
        Some((sbq, sbk)) => {
            let blocks = (a.batch * a.heads).saturating_mul(a.q_tokens.div_ceil(sbq));
            let slots = (sms * k.ctas_per_sm) as u64;
            let max = p.max_splits.as_ref().map_or(1, |f| f.value as u64);
            let s = num_splits(blocks, slots, a.kv_tokens.div_ceil(sbk), max);
            (s > 1).then_some((sbq, sbk, s))
        }
        None => None,
    };
    let (bq, bk) = match splits {
        Some((sbq, sbk, _)) => (sbq, sbk),
        None => (k.block_q, k.block_k),
    };
    let pair_s = pass_flops * bq as f64 * bk as f64 * k.head_dim as f64 / rate_sm;
    let w = |n: u64| tile_s + n as f64 * pair_s;
    let (blocks, pairs, fewest, most) = pair_stats(a, bq, bk);
    let (b, combine) = match splits {
        Some((_, _, s)) => {
            // Split j of query block i visits clamp(v_i − j·L, 0, L) of its v_i key blocks.
            let l = a.kv_tokens.div_ceil(bk).div_ceil(s);
            let d = a.head_dim as f64;
            let bytes = groups * a.q_tokens as f64 * (s as f64 * (4.0 * d + 4.0) + 2.0 * d);
            (
                Blocks {
                    per_group: (blocks * s) as f64,
                    groups,
                    total: (blocks * s) as f64 * tile_s + pairs * pair_s,
                    w_min: w(fewest.saturating_sub((s - 1) * l).min(l)),
                    w_max: w(most.min(l)),
                    decreasing: false,
                },
                hw.kernels.memory.latency_s.value + bytes / hbm,
            )
        }
        None => (
            Blocks {
                per_group: blocks as f64,
                groups,
                total: blocks as f64 * tile_s + pairs * pair_s,
                w_min: w(fewest),
                w_max: w(most),
                decreasing: a.pass == AttnPass::Bwd,
            },
            0.0,
        ),
    };
    let work = |i: u64| match splits {
        Some((_, _, s)) => {
            let l = a.kv_tokens.div_ceil(bk).div_ceil(s);
            let (qi, j) = (i % blocks, i / blocks);
            w(block_pairs(a, bq, bk, qi).saturating_sub(j * l).min(l))
        }
        None => w(block_pairs(a, bq, bk, i)),
    };
    span(&b, sms, k.ctas_per_sm, k.solo_fraction, &work)
        + p.call_s.value
        + combine
        + p.extra_bytes_per_element.value * elements / hbm
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

    fn blocks(w: &[f64], groups: f64, decreasing: bool) -> Blocks {
        let (lo, hi) = w
            .iter()
            .fold((f64::MAX, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
        Blocks {
            per_group: w.len() as f64,
            groups,
            total: w.iter().sum(),
            w_min: lo,
            w_max: hi,
            decreasing,
        }
    }

    #[test]
    fn span_is_close_to_the_greedy_schedule() {
        // Causal forward blocks of 16 heads at 512…16k tokens (FlashAttention's launch order,
        // queries fastest) on 264 slots, one block per slot at the slot's rate (solo = 1): the
        // closed form is within 6% of the schedule.
        for s in [512u64, 2048, 16384] {
            let a = call(16384 / s, 16, s, true, AttnPass::Fwd);
            let w: Vec<f64> = pairs_per_block(&a, 128, 64)
                .into_iter()
                .map(|n| 3.0 + n as f64)
                .collect();
            let g = greedy(&w, (a.batch * a.heads) as usize, 264);
            let b = blocks(&w, (a.batch * a.heads) as f64, false);
            let f = span(&b, 264.0, 1.0, 1.0, &|i| w[i as usize]);
            assert!((f / g - 1.0).abs() < 0.06, "s={s}: {f} vs {g}");
        }
        // Backward (longest first) with one (sequence, head) filling several rounds: the tail
        // vanishes, and the closed form is within 3% of the schedule.
        let a = call(1, 1, 65536, true, AttnPass::Bwd);
        let w: Vec<f64> = pairs_per_block(&a, 64, 128)
            .into_iter()
            .map(|n| 3.0 + n as f64)
            .collect();
        let g = greedy(&w, 1, 132);
        let f = span(&blocks(&w, 1.0, true), 132.0, 1.0, 1.0, &|i| w[i as usize]);
        assert!((f / g - 1.0).abs() < 0.03, "bwd: {f} vs {g}");
        // Equal blocks: exact rounds (2 blocks per SM share it: 2 units per round).
        let eq = Blocks {
            per_group: 10.0,
            groups: 30.0,
            total: 20.0,
            w_min: 2.0,
            w_max: 2.0,
            decreasing: false,
        };
        assert_eq!(span(&eq, 66.0, 2.0, 0.5, &|_| 2.0), 6.0 * 2.0);
        // Fewer blocks than SMs, each alone at half the SM's rate: twice the longest.
        let few = [1.0, 5.0];
        assert_eq!(
            span(&blocks(&few, 3.0, false), 132.0, 2.0, 0.5, &|i| few
                [i as usize]),
            10.0
        );
    }

    #[test]
    fn a_long_block_speeds_up_when_its_neighbour_finishes() {
        // Two blocks of work 1 and 3 on one SM, a lone block at 0.8 of the SM: both at ½
        // until the short one ends (t = 2), then the long one alone at 0.8: 2 + 2/0.8 = 4.5.
        assert_eq!(shared_sm(&mut [3.0, 1.0], 0.8), 4.5);
        // Equal blocks: k of them take k·w (or w/solo alone).
        assert_eq!(shared_sm(&mut [2.0, 2.0], 0.8), 4.0);
        assert_eq!(shared_sm(&mut [2.0], 0.5), 4.0);
    }

    #[test]
    fn split_kv_follows_flash_attentions_heuristic() {
        // 4 heads × 32 query blocks of 64 = 128 blocks on 264 slots (< 80%), 16 key blocks:
        // 2 splits fill 256 of 264 (97%), the first within 85% of the best.
        assert_eq!(num_splits(128, 264, 16, 128), 2);
        // Enough blocks: no split. One key block: nothing to split.
        assert_eq!(num_splits(256, 264, 16, 128), 1);
        assert_eq!(num_splits(10, 264, 1, 128), 1);
        // 16 blocks, 32 key blocks: 16 splits fill 256 slots (97%).
        assert_eq!(num_splits(16, 264, 32, 128), 16);
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
