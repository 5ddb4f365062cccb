//! Where a device sits in the cluster, and what each pipeline stage runs (DESIGN §2 "Outer
//! axes").
//!
//! A device's place is (data-parallel replica r, pipeline stage s, context-parallel rank c,
//! method rank i). Cluster ranks follow Megatron's default order (`tp-cp-dp-pp`: the method's
//! ranks vary fastest, then the context-parallel ranks, then the replicas, then the stages):
//!
//! ```text
//! rank = i + p·(c + cp·(r + dp·s))          node = rank / GPUs per node
//! ```
//!
//! so a method group of up to a node's GPUs stays inside one node, and pipeline stages sit on
//! different nodes once a stage spans a node. With pp = cp = 1 this is the numbering every
//! earlier version used (`replica · p + rank`).
//!
//! **Pipeline.** The L layers are split over pp · v virtual stages (v = `--pp-interleave`);
//! virtual stage `u = chunk · pp + stage` is model chunk `chunk` of stage `stage` (Megatron's
//! interleaving), the first virtual stage also runs the embedding, the last the output head and
//! the loss. When pp · v does not divide L the extra layers go to the middle virtual stages
//! first (1, 2, …), then to the last and the first, which already carry the head and the
//! embedding ([`virtual_stage_layers`]). Each stage runs Megatron's 1F1B order
//! ([`pipeline_order`]): non-interleaved, `min(pp − s − 1, m)` warm-up forwards, then one
//! forward and one backward alternately, then the remaining backwards; interleaved, the
//! warm-up is `(pp − s − 1)·2 + (v − 1)·pp` virtual micro-batches (all of them when m = pp),
//! forward k runs chunk `(k mod pp·v) / pp` of micro-batch `(k / pp·v)·pp + k mod pp`, and
//! backward k the chunk `v − 1 −` that (Megatron-LM `schedules.py`,
//! `forward_backward_pipelining_with_interleaving`). LLaMA 3's flexible schedule
//! ([`flexible_order`], `--pp-round N`) runs N micro-batches per chunk in a row instead of pp
//! (`config::runtime`).

use serde::{Deserialize, Serialize};

/// The parallel axes outside the method's own degree p.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OuterAxes {
    /// Pipeline stages (1: no pipeline).
    pub pp: u64,
    /// Virtual stages per device, Megatron's interleaved 1F1B (1: plain 1F1B).
    pub interleave: u64,
    /// Context-parallel ranks (Megatron CP for `tp-sp`: ring attention across them; 1: none).
    pub cp: u64,
}

impl Default for OuterAxes {
    fn default() -> Self {
        OuterAxes {
            pp: 1,
            interleave: 1,
            cp: 1,
        }
    }
}

/// A device's coordinates (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Coord {
    /// Data-parallel replica.
    pub replica: u32,
    /// Pipeline stage.
    pub stage: u32,
    /// Context-parallel rank.
    pub cp: u32,
    /// Rank within the method's group of p.
    pub rank: u32,
}

/// The sizes of every axis: the method's degree p and the outer axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Axes {
    /// Method degree.
    pub p: u32,
    /// Context-parallel ranks.
    pub cp: u32,
    /// Data-parallel replicas.
    pub dp: u32,
    /// Pipeline stages.
    pub pp: u32,
}

impl Axes {
    /// All devices: p · cp · dp · pp.
    pub fn devices(&self) -> u32 {
        self.p * self.cp * self.dp * self.pp
    }

    /// The cluster rank of a device (module docs).
    pub fn rank_of(&self, c: Coord) -> u32 {
        c.rank + self.p * (c.cp + self.cp * (c.replica + self.dp * c.stage))
    }

    /// The coordinates of a cluster rank.
    pub fn coord_of(&self, rank: u32) -> Coord {
        let i = rank % self.p;
        let rest = rank / self.p;
        let c = rest % self.cp;
        let rest = rest / self.cp;
        Coord {
            replica: rest % self.dp,
            stage: rest / self.dp,
            cp: c,
            rank: i,
        }
    }
}

/// One forward or backward of one micro-batch through one model chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct PipeOp {
    /// Forward (else backward).
    pub forward: bool,
    /// Micro-batch.
    pub micro_batch: u32,
    /// Model chunk (0 without interleaving).
    pub chunk: u32,
}

/// Layers per virtual stage, in virtual-stage order: `layers / stages` each, and the remainder
/// to the middle virtual stages first, then the last, then the first (module docs).
pub fn virtual_stage_layers(layers: u64, stages: u64) -> Vec<u64> {
    let stages = stages.max(1);
    let base = layers / stages;
    let mut out = vec![base; stages as usize];
    let mut extra = layers % stages;
    let n = stages as usize;
    let mut order: Vec<usize> = (1..n.saturating_sub(1)).collect();
    if n > 1 {
        order.push(n - 1);
    }
    order.push(0);
    for u in order {
        if extra == 0 {
            break;
        }
        out[u] += 1;
        extra -= 1;
    }
    out
}

/// The 1F1B order of one stage (module docs): `pp` stages, `v` chunks per stage, `m`
/// micro-batches, Megatron's interleaving (each chunk runs `pp` micro-batches in a row; v > 1
/// needs m to be a multiple of pp, validated).
pub fn pipeline_order(pp: u32, v: u32, m: u32, stage: u32) -> Vec<PipeOp> {
    let pp = pp.max(1);
    let v = v.max(1);
    let warmup = warmup_forwards(pp, v, m, stage);
    interleaved_order(pp.min(m.max(1)), v, m, warmup)
}

/// The order of LLaMA 3's flexible interleaved schedule (`config::runtime`): each chunk runs
/// `round` micro-batches in a row (m a multiple of it, validated), and stage `stage` warms up
/// with (v − 1)·round + 2·(pp − 1 − stage) forwards, as PyTorch's `ScheduleInterleaved1F1B`
/// does. With round = pp it is Megatron's order except when m = pp (Megatron then runs every
/// forward first). Validation allows round ≥ pp, or one round of fewer micro-batches than
/// stages: several rounds shorter than the pipeline deadlock in this order.
pub fn flexible_order(pp: u32, v: u32, m: u32, round: u32, stage: u32) -> Vec<PipeOp> {
    let (round, warmup) = flexible_round_warmup(pp, v, m, round, stage);
    interleaved_order(round, v.max(1), m, warmup)
}

/// The `k`-th op of [`flexible_order`], without building the order.
pub fn flexible_op(pp: u32, v: u32, m: u32, round: u32, stage: u32, k: u32) -> PipeOp {
    let (round, warmup) = flexible_round_warmup(pp, v, m, round, stage);
    interleaved_op(round, v.max(1), m, warmup, k)
}

/// The flexible schedule's round (at most every micro-batch) and stage `stage`'s warm-up.
fn flexible_round_warmup(pp: u32, v: u32, m: u32, round: u32, stage: u32) -> (u32, u32) {
    let (pp, v) = (pp.max(1), v.max(1));
    let round = round.clamp(1, m.max(1));
    (round, ((v - 1) * round + 2 * (pp - 1 - stage)).min(m * v))
}

/// Forwards and backwards in rounds of `round` micro-batches per chunk: `warmup` forwards,
/// then one forward and one backward alternately, then the remaining backwards.
fn interleaved_order(round: u32, v: u32, m: u32, warmup: u32) -> Vec<PipeOp> {
    (0..2 * m * v)
        .map(|k| interleaved_op(round, v, m, warmup, k))
        .collect()
}

/// The `k`-th op of [`interleaved_order`], without building the order.
fn interleaved_op(round: u32, v: u32, m: u32, warmup: u32, k: u32) -> PipeOp {
    let total = m * v;
    let group = round * v;
    // The n-th forward (or backward) of the stage: micro-batches in rounds of `round`, each
    // round through every chunk (backwards through them in reverse).
    let nth = |forward: bool, n: u32| {
        let chunk = (n % group) / round;
        PipeOp {
            forward,
            micro_batch: (n / group) * round + n % round,
            chunk: if forward { chunk } else { v - 1 - chunk },
        }
    };
    let steady_end = warmup + 2 * (total - warmup);
    if k < warmup {
        nth(true, k)
    } else if k < steady_end {
        let j = (k - warmup) / 2;
        if (k - warmup).is_multiple_of(2) {
            nth(true, j + warmup)
        } else {
            nth(false, j)
        }
    } else {
        nth(false, total - warmup + (k - steady_end))
    }
}

/// The `k`-th op of [`pipeline_order`] (`k < 2 · m · v`), without building the order: a walk
/// of a long step keeps no list of its ops.
pub fn pipeline_op(pp: u32, v: u32, m: u32, stage: u32, k: u32) -> PipeOp {
    let (pp, v) = (pp.max(1), v.max(1));
    interleaved_op(pp.min(m.max(1)), v, m, warmup_forwards(pp, v, m, stage), k)
}

/// The forwards stage `stage` runs before its first backward (Megatron's warm-up; every
/// forward when interleaving with as many micro-batches as stages).
fn warmup_forwards(pp: u32, v: u32, m: u32, stage: u32) -> u32 {
    let (pp, v) = (pp.max(1), v.max(1));
    let total = m * v;
    if v == 1 {
        (pp - stage - 1).min(m)
    } else if m == pp {
        total
    } else {
        ((pp - stage - 1) * 2 + (v - 1) * pp).min(total)
    }
}

/// The steady part of a stage's [`pipeline_order`], cut into rounds that repeat: after the
/// warm-up's forwards, op pairs (a forward, a backward) whose pattern repeats every
/// `pairs_per_round` pairs (one pair without interleaving; pp · v pairs, a group of pp
/// micro-batches through every chunk, with it). `rounds` counts the whole rounds before the
/// first pair that holds a backward of the last micro-batch (which synchronises gradients and
/// so differs from the others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SteadyRounds {
    /// Forwards before the first pair.
    pub warmup: u32,
    /// Pairs per round.
    pub pairs_per_round: u32,
    /// Whole rounds of plain pairs.
    pub rounds: u32,
}

/// [`SteadyRounds`] of stage `stage` (the arguments of [`pipeline_order`]; with `round`,
/// LLaMA 3's flexible order in rounds of that many micro-batches, [`flexible_order`]).
pub fn steady_rounds(pp: u32, v: u32, m: u32, round: Option<u32>, stage: u32) -> SteadyRounds {
    let (order, warmup, group) = match round {
        Some(r) if v > 1 => {
            let (r, warmup) = flexible_round_warmup(pp, v, m, r, stage);
            (flexible_order(pp, v, m, r, stage), warmup, r)
        }
        _ => (
            pipeline_order(pp, v, m, stage),
            warmup_forwards(pp, v, m, stage),
            pp.max(1),
        ),
    };
    let pairs_per_round = if v.max(1) == 1 { 1 } else { group * v };
    let pairs = (m * v.max(1)).saturating_sub(warmup);
    let last_mb = m.saturating_sub(1);
    let mut rounds = 0;
    while (rounds + 1) * pairs_per_round <= pairs {
        let first = warmup + 2 * rounds * pairs_per_round;
        let ops = &order[first as usize..(first + 2 * pairs_per_round) as usize];
        // A round must be forward/backward pairs, none of them the last micro-batch's backward.
        let plain = ops
            .chunks(2)
            .all(|p| p[0].forward && !p[1].forward && p[1].micro_batch != last_mb);
        if !plain {
            break;
        }
        rounds += 1;
    }
    SteadyRounds {
        warmup,
        pairs_per_round,
        rounds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walks every stage's order with unit-time ops and the pipeline's dependencies (a forward
    /// of virtual stage u after u − 1's, a backward after u + 1's); true when every op runs.
    fn completes(orders: &[Vec<PipeOp>], pp: u32, v: u32) -> bool {
        let last = pp * v - 1;
        let mut done = std::collections::HashSet::new();
        let mut idx = vec![0usize; orders.len()];
        loop {
            let mut progress = false;
            for (s, order) in orders.iter().enumerate() {
                while let Some(op) = order.get(idx[s]) {
                    let u = op.chunk * pp + s as u32;
                    let ready = if op.forward {
                        u == 0 || done.contains(&(true, op.micro_batch, u - 1))
                    } else {
                        done.contains(&(true, op.micro_batch, u))
                            && (u == last || done.contains(&(false, op.micro_batch, u + 1)))
                    };
                    if !ready {
                        break;
                    }
                    done.insert((op.forward, op.micro_batch, u));
                    idx[s] += 1;
                    progress = true;
                }
            }
            if !progress {
                return idx.iter().zip(orders).all(|(&i, o)| i == o.len());
            }
        }
    }

    /// LLaMA 3's flexible order: every (micro-batch, chunk) once each way, deadlock-free for
    /// rounds below, at and above pp; at round = pp and m > pp it is Megatron's order; a smaller
    /// round holds fewer forwards before the first backward.
    #[test]
    fn flexible_orders_run_every_op_once_and_complete() {
        for pp in 2..6u32 {
            for v in 2..4u32 {
                for round in 1..=2 * pp {
                    for m in [round, 2 * round, 3 * round] {
                        // Several rounds shorter than the pipeline are refused (validation):
                        // their order deadlocks without the bubbles PyTorch inserts.
                        if round < pp && m > round {
                            continue;
                        }
                        let orders: Vec<_> = (0..pp)
                            .map(|s| flexible_order(pp, v, m, round, s))
                            .collect();
                        for o in &orders {
                            let mut seen: Vec<_> = o
                                .iter()
                                .map(|x| (x.forward, x.micro_batch, x.chunk))
                                .collect();
                            seen.sort();
                            seen.dedup();
                            assert_eq!(
                                seen.len() as u32,
                                2 * m * v,
                                "pp {pp} v {v} N {round} m {m}"
                            );
                        }
                        assert!(completes(&orders, pp, v), "pp {pp} v {v} N {round} m {m}");
                        if round == pp && m > pp {
                            for s in 0..pp {
                                assert_eq!(orders[s as usize], pipeline_order(pp, v, m, s));
                            }
                        }
                    }
                }
            }
        }
        let before_first_bwd = |o: &[PipeOp]| o.iter().take_while(|x| x.forward).count();
        assert_eq!(before_first_bwd(&flexible_order(16, 8, 32, 16, 1)), 141);
        assert_eq!(before_first_bwd(&flexible_order(16, 8, 32, 8, 1)), 85);
        // The Megatron orders complete too.
        for (pp, v, m) in [(4, 1, 6), (4, 2, 8), (4, 2, 4), (3, 3, 9)] {
            let orders: Vec<_> = (0..pp).map(|s| pipeline_order(pp, v, m, s)).collect();
            assert!(completes(&orders, pp, v));
        }
    }

    #[test]
    fn flexible_op_is_the_order_op_by_op() {
        for (pp, v, m, round) in [(4u32, 2u32, 24u32, 6u32), (16, 8, 32, 16), (3, 3, 2, 2)] {
            for stage in 0..pp {
                let order = flexible_order(pp, v, m, round, stage);
                for (k, op) in order.iter().enumerate() {
                    assert_eq!(flexible_op(pp, v, m, round, stage, k as u32), *op);
                }
            }
        }
    }

    #[test]
    fn pipeline_op_is_the_order_op_by_op() {
        for (pp, v, m) in [
            (1, 1, 3),
            (4, 1, 2),
            (4, 1, 9),
            (4, 2, 4),
            (4, 2, 12),
            (3, 3, 6),
        ] {
            for stage in 0..pp {
                let order = pipeline_order(pp, v, m, stage);
                for (k, op) in order.iter().enumerate() {
                    assert_eq!(
                        pipeline_op(pp, v, m, stage, k as u32),
                        *op,
                        "{pp} {v} {m} {k}"
                    );
                }
            }
        }
    }

    #[test]
    fn ranks_and_coordinates_round_trip_in_megatron_order() {
        let a = Axes {
            p: 8,
            cp: 2,
            dp: 3,
            pp: 4,
        };
        assert_eq!(a.devices(), 192);
        for r in 0..a.devices() {
            assert_eq!(a.rank_of(a.coord_of(r)), r);
        }
        // The method's ranks vary fastest, then cp, then replicas, then stages.
        let c = Coord {
            replica: 1,
            stage: 2,
            cp: 1,
            rank: 5,
        };
        assert_eq!(a.rank_of(c), 5 + 8 * (1 + 2 * (1 + 3 * 2)));
    }

    /// 80 layers over 6 virtual stages: 13 each and 2 extra to stages 1 and 2; 7 over 3:
    /// 2 each and the extra one to the middle.
    #[test]
    fn uneven_layers_go_to_the_middle_first() {
        assert_eq!(virtual_stage_layers(80, 6), [13, 14, 14, 13, 13, 13]);
        assert_eq!(virtual_stage_layers(7, 3), [2, 3, 2]);
        assert_eq!(virtual_stage_layers(5, 2), [2, 3]);
        assert_eq!(virtual_stage_layers(96, 24), vec![4; 24]);
        assert_eq!(virtual_stage_layers(4, 1), [4]);
    }

    /// Non-interleaved 1F1B, 4 stages, 6 micro-batches: stage 0 warms up with 3 forwards,
    /// the last stage alternates from the start; every micro-batch runs once each way.
    #[test]
    fn one_f_one_b_orders() {
        let s0 = pipeline_order(4, 1, 6, 0);
        let f = |o: &PipeOp| (o.forward, o.micro_batch);
        let got: Vec<_> = s0.iter().map(f).collect();
        assert_eq!(
            got,
            [
                (true, 0),
                (true, 1),
                (true, 2),
                (true, 3),
                (false, 0),
                (true, 4),
                (false, 1),
                (true, 5),
                (false, 2),
                (false, 3),
                (false, 4),
                (false, 5)
            ]
        );
        let s3: Vec<_> = pipeline_order(4, 1, 6, 3).iter().map(f).collect();
        assert_eq!(&s3[..4], &[(true, 0), (false, 0), (true, 1), (false, 1)]);
        // Fewer micro-batches than stages: warm-up capped at m.
        assert_eq!(pipeline_order(4, 1, 2, 0).len(), 4);
    }

    /// Interleaved, pp = 2, v = 2, m = 4: forward k runs chunk (k mod 4)/2 of micro-batch
    /// (k/4)·2 + k mod 2, backward the other chunk first; stage 0's warm-up is
    /// (2 − 0 − 1)·2 + (2 − 1)·2 = 4 virtual micro-batches.
    #[test]
    fn interleaved_orders_follow_megatron() {
        let s0 = pipeline_order(2, 2, 4, 0);
        let fw: Vec<_> = s0
            .iter()
            .filter(|o| o.forward)
            .map(|o| (o.micro_batch, o.chunk))
            .collect();
        assert_eq!(
            fw,
            [
                (0, 0),
                (1, 0),
                (0, 1),
                (1, 1),
                (2, 0),
                (3, 0),
                (2, 1),
                (3, 1)
            ]
        );
        let bw: Vec<_> = s0
            .iter()
            .filter(|o| !o.forward)
            .map(|o| (o.micro_batch, o.chunk))
            .collect();
        assert_eq!(&bw[..2], &[(0, 1), (1, 1)]);
        assert!(s0[..4].iter().all(|o| o.forward) && !s0[5].forward);
        // m = pp: all forwards first.
        let all = pipeline_order(2, 2, 2, 1);
        assert!(all[..4].iter().all(|o| o.forward));
    }
}
