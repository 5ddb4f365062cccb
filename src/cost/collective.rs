//! Collectives as NCCL and RCCL run them: which algorithm and protocol the library picks for an
//! operation, a group and a size, and what each step moves and costs. The one place that
//! decides; the simulator runs the chosen [`Plan`]'s steps as flows (`sim::collective`), the
//! analytic twin takes its time ([`Plan::time_s`]), both from the same transfers
//! ([`super::pattern`]).
//!
//! **Choice.** Like NCCL's tuner (`src/graph/tuning.cc`), every enabled (algorithm, protocol)
//! pair is priced and the fastest wins: the ring always; the algorithms of the profile's rule
//! table that match the operation, scope and size (tree, direct); direct for all-to-all (NCCL
//! and RCCL post all of an all-to-all's sends at once); NVLS for all-reduce where the profile's
//! library has it and every node holds at least three of the group's GPUs (NVLSTree across
//! nodes). A protocol costs a latency and a share of the bandwidth
//! ([`crate::config::ProtocolFigures`]): small sizes go LL, mid sizes LL128, large Simple.
//!
//! **Steps.** `M` is the buffer as nccl-tests sizes it, `n` the ranks, `N` the nodes the group
//! spans, `g` its GPUs per node, `f` a protocol's bandwidth fraction:
//!
//! | algorithm | op | steps × pattern |
//! |---|---|---|
//! | ring | all-reduce | 2(n−1) × every rank sends M/n to the next |
//! | ring | all-gather, reduce-scatter | (n−1) × the same |
//! | ring | all-to-all | (n−1) × step k: rank i sends M/n to rank i+k+1 (point-to-point rate) |
//! | ring | broadcast, reduce | 1 × a pipelined chain, every hop M |
//! | direct | all-gather, reduce-scatter, all-to-all | 1 × every rank sends M/n to every other (all-to-all at the point-to-point rate) |
//! | direct | all-reduce | 2 × the same (reduce-scatter, then all-gather) |
//! | direct | broadcast, reduce | 1 × the root sends M to (receives M from) every other |
//! | tree | broadcast, reduce | ⌈log2 n⌉ × one binomial level, every hop M |
//! | tree | all-reduce | 1 × NCCL's tree: a chain up and down inside each node (M each way), M·t per node to the next node |
//! | nvls | all-reduce | 1 × NVLS inside each node, M·t per node to the next node (NVLSTree) |
//! | send/recv | nccl-tests' sendrecv | 1 × every rank sends M to the next |
//!
//! Every transfer carries its bytes divided by `f`. Where a ring or a tree leaves a node, its
//! traffic is spread over the rails the two nodes share (NCCL runs a channel per rail), so a
//! ring across nodes runs at min(GPU port, rails × NIC) rather than one NIC's rate. A tree
//! between two nodes moves M per node and direction (t = 1), more nodes 2M (t = 2): NCCL's
//! double binary tree, which on two nodes beats the network's ring bound (nccl-tests #196).
//!
//! NVLS moves, as a GPU's port sees it, the buffer once each way; its rate is the profile's:
//! algbw = min(B_nvls,bus × n/(2(n−1)), B_nvls,port × g/(g+1)) (NCCL's tuner holds the NVLS
//! bus bandwidth constant in n; the port bound is what fewer GPUs per node reach). The step's
//! transfers put that load on the ports as an exchange among a node's GPUs (each GPU sends
//! M·B_port/algbw spread over its g−1 peers), so NVLS traffic shares the ports with anything
//! else in flight.
//!
//! **Latency** (per collective, as NCCL's tuner charges it; `base`, `intra`, `inter` the
//! protocol's figures): ring `base + (S−I)·intra + I·inter` over its S steps, I of them leaving
//! a node (2(N−1) for all-reduce, N−1 otherwise); tree `base + 2((g−1)·intra +
//! ⌈log2 N⌉·inter)`; NVLS the profile's NVLS latency `+ 2⌈log2 N⌉·inter`; a chain
//! `base + Σ` its hops' step latencies; direct and send/recv `base` plus one step. Spread evenly
//! over a phase's steps, so the simulator charges each step its share.
//!
//! **Step time.** A step lasts its latency plus the time its slowest transfer takes when every
//! link is shared equally among the step's transfers that cross it ([`step_s`]) — what max-min
//! sharing gives these symmetric steps, and what the simulator gives an uncontended collective
//! under either link model.

pub use super::pattern::{Intra, Pattern, Segments, Transfer};
mod algorithms;

use super::route::LinkKey;
use super::CostModel;
use crate::config::{Algorithm, CollectiveKind, Protocol};
use crate::schedule::{CollectiveOp, DeviceId};
use algorithms::{latency_s, scale, skeleton, Skeleton};

/// The operation's kind in the profile's rule table.
pub fn kind(op: CollectiveOp) -> CollectiveKind {
    match op {
        CollectiveOp::AllReduce => CollectiveKind::AllReduce,
        CollectiveOp::AllGather => CollectiveKind::AllGather,
        CollectiveOp::ReduceScatter => CollectiveKind::ReduceScatter,
        CollectiveOp::AllToAll => CollectiveKind::AllToAll,
        CollectiveOp::Broadcast { .. } => CollectiveKind::Broadcast,
        CollectiveOp::Reduce { .. } => CollectiveKind::Reduce,
    }
}

/// ⌈log2 n⌉ for n ≥ 1.
pub fn log2_ceil(n: u64) -> u64 {
    if n <= 1 {
        0
    } else {
        64 - (n - 1).leading_zeros() as u64
    }
}

/// The ring's steps of `op` over `n` ranks: (steps, bytes each rank sends per step) — all-reduce
/// 2(n−1) × M/n, all-gather, reduce-scatter and all-to-all (n−1) × M/n, broadcast and reduce
/// (n−1) × M/(n−1) (a pipelined chain's time, M/B, plus (n−1) latencies).
pub fn collective_steps(op: CollectiveOp, n: u64, bytes: u64) -> (u64, u64) {
    use CollectiveOp as C;
    if n <= 1 {
        return (0, 0);
    }
    match op {
        C::AllReduce => (2 * (n - 1), bytes.div_ceil(n)),
        C::AllGather | C::ReduceScatter | C::AllToAll => (n - 1, bytes.div_ceil(n)),
        C::Broadcast { .. } | C::Reduce { .. } => (n - 1, bytes.div_ceil(n - 1)),
    }
}

/// A collective as a memo key: operation, group (ring order), buffer bytes.
pub type CollectiveKey = (CollectiveOp, Vec<DeviceId>, u64);

/// What a collective library runs: a graph's collective, or nccl-tests' `sendrecv` (every rank
/// sends its buffer to the next and receives from the previous).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A collective.
    Collective(CollectiveOp),
    /// nccl-tests' send/recv ring.
    SendRecv,
}

/// Steps that share a pattern and a latency.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// Number of steps.
    pub steps: u32,
    /// Latency charged before each step's transfers start.
    pub step_latency_s: f64,
    /// Who sends what in each step.
    pub pattern: Pattern,
}

/// A collective as the library runs it: the algorithm and protocol it picked and the steps.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The protocol.
    pub protocol: Protocol,
    /// The steps, phase by phase.
    pub phases: Vec<Phase>,
    /// The group's node segments.
    pub segments: Segments,
    /// NICs per node (the rails a crossing can spread over).
    pub nics: u64,
    /// Seconds the collective takes uncontended (the analytic twin's figure).
    pub time_s: f64,
}

impl Plan {
    fn empty() -> Plan {
        Plan {
            algorithm: Algorithm::Ring,
            protocol: Protocol::Simple,
            phases: Vec::new(),
            segments: Segments::default(),
            nics: 1,
            time_s: 0.0,
        }
    }

    /// Steps in all.
    pub fn steps(&self) -> u32 {
        self.phases.iter().map(|p| p.steps).sum()
    }

    /// The phase of step `k` and `k`'s index in it.
    pub fn phase_of(&self, mut k: u32) -> Option<(&Phase, u32)> {
        for p in &self.phases {
            if k < p.steps {
                return Some((p, k));
            }
            k -= p.steps;
        }
        None
    }

    /// The same plan with at most `max_steps` steps in each phase whose steps are alike (every
    /// pattern but `Shift`): `k` consecutive steps become one that carries `k` times the bytes
    /// after `k` times the latency. Uncontended it takes exactly the same time (a step is its
    /// latency plus its bytes over shares that do not change within the phase); under
    /// contention the link shares are re-solved at the coarser step boundaries only, and the
    /// latencies fall together before the bytes instead of between them. The simulator runs
    /// collectives so (`sim::network`), so that a ring over many replicas costs it as many
    /// steps as one over a few: its cost follows what is distinct, not the number of GPUs.
    pub fn coalesced(&self, max_steps: u32) -> Plan {
        let max = max_steps.max(1);
        let mut phases = Vec::with_capacity(self.phases.len() + 1);
        for p in &self.phases {
            if p.steps <= max || step_varies(&p.pattern) {
                phases.push(p.clone());
                continue;
            }
            // `steps` as `max` steps: `r` of them carry q + 1 steps' bytes, the others q.
            let (q, r) = (p.steps / max, p.steps % max);
            for (count, k) in [(r, q + 1), (max - r, q)] {
                if count > 0 {
                    phases.push(Phase {
                        steps: count,
                        step_latency_s: p.step_latency_s * f64::from(k),
                        pattern: scale(p.pattern, f64::from(k)),
                    });
                }
            }
        }
        Plan {
            phases,
            ..self.clone()
        }
    }

    /// The transfers of step `k` over `group` (see [`super::pattern::transfers`]).
    pub fn transfers(
        &self,
        k: u32,
        group: &[DeviceId],
        senders: Option<&[u32]>,
        out: &mut Vec<Transfer>,
    ) {
        match self.phase_of(k) {
            Some((p, i)) => super::pattern::transfers(
                &p.pattern,
                i,
                group,
                &self.segments,
                self.nics,
                senders,
                out,
            ),
            None => out.clear(),
        }
    }
}

/// Seconds the transfers of step `k` of `pattern` take when each link is shared equally among
/// the step's transfers that cross it: the slowest transfer's bytes over its narrowest share.
pub fn step_s(
    cost: &CostModel,
    pattern: &Pattern,
    k: u32,
    group: &[DeviceId],
    segs: &Segments,
    nics: u64,
) -> f64 {
    let mut out = Vec::new();
    super::pattern::transfers(pattern, k, group, segs, nics, None, &mut out);
    transfers_s(cost, &out)
}

/// Seconds a set of transfers started together takes with every link shared equally among
/// those that cross it.
pub fn transfers_s(cost: &CostModel, transfers: &[Transfer]) -> f64 {
    // Links counted by sorting (a step has a few thousand at most): cheaper than hashing.
    let routes: Vec<_> = transfers.iter().map(|t| cost.route(t.src, t.dst)).collect();
    let mut links: Vec<LinkKey> = routes
        .iter()
        .flat_map(|r| r.links().iter().copied())
        .collect();
    links.sort_unstable();
    let count = |l: &LinkKey| {
        let lo = links.partition_point(|x| x < l);
        let hi = links.partition_point(|x| x <= l);
        (hi - lo) as f64
    };
    transfers
        .iter()
        .zip(&routes)
        .map(|(t, r)| {
            let share = r
                .links()
                .iter()
                .map(|l| cost.capacity(*l) / count(l))
                .fold(f64::INFINITY, f64::min);
            if share.is_finite() {
                t.bytes / share
            } else {
                0.0
            }
        })
        .fold(0.0, f64::max)
}

/// Whether a step of `pattern` can differ from step 0 (so each step is priced on its own).
fn step_varies(p: &Pattern) -> bool {
    matches!(p, Pattern::Shift { .. })
}

/// The algorithms the library may run `op` with over a group of `segs`.
fn candidates(cost: &CostModel, op: Op, segs: &Segments, bytes: u64) -> Vec<Algorithm> {
    let hw = cost.hardware();
    let mut v = vec![Algorithm::Ring];
    let Op::Collective(c) = op else {
        return v;
    };
    let intra = segs.count() <= 1;
    for r in &hw.collectives {
        if r.matches(kind(c), intra, bytes) && !v.contains(&r.algorithm) {
            v.push(r.algorithm);
        }
    }
    if c == CollectiveOp::AllToAll && !v.contains(&Algorithm::Direct) {
        v.push(Algorithm::Direct);
    }
    let (min_len, _) = segs.min_max_len();
    if c == CollectiveOp::AllReduce
        && hw
            .collective_library
            .as_ref()
            .is_some_and(|l| l.nvls.is_some())
        && min_len >= 3
    {
        v.push(Algorithm::Nvls);
    }
    v
}

/// The plan the library runs for `op` over `group` (devices in ring order) with a buffer of
/// `bytes` as nccl-tests sizes it: the fastest enabled (algorithm, protocol) and its steps.
pub fn plan(cost: &CostModel, op: Op, group: &[DeviceId], bytes: u64) -> Plan {
    if group.len() <= 1 {
        return Plan::empty();
    }
    let hw = cost.hardware();
    let lib = hw.library();
    let segs = Segments::of(group, hw.gpus_per_node);
    let nics = hw.inter_node.nics_per_node.max(1);
    let simple = &lib.protocols.simple;
    let nvls_latency_s = lib.nvls.as_ref().map_or(0.0, |n| n.latency_s.value);
    let mut best: Option<(f64, Algorithm, Protocol, f64, Vec<Skeleton>)> = None;
    for algorithm in candidates(cost, op, &segs, bytes) {
        let Some(sk) = skeleton(cost, algorithm, op, group, &segs, bytes) else {
            continue;
        };
        // Bandwidth seconds of every phase at payload bytes; a protocol divides them by its
        // fraction (every transfer's bytes scale alike).
        let bw: f64 = sk
            .iter()
            .map(|s| {
                if step_varies(&s.pattern) {
                    (0..s.steps)
                        .map(|k| step_s(cost, &s.pattern, k, group, &segs, nics))
                        .sum()
                } else {
                    s.steps as f64 * step_s(cost, &s.pattern, 0, group, &segs, nics)
                }
            })
            .sum();
        for (protocol, figs) in lib.protocols() {
            if algorithm == Algorithm::Nvls && protocol != Protocol::Simple {
                continue;
            }
            let f = figs.bandwidth_fraction.value;
            let lat: f64 = sk
                .iter()
                .map(|s| {
                    s.steps as f64
                        * latency_s(
                            s.lat,
                            figs,
                            nvls_latency_s,
                            simple.inter_step_latency_s.value,
                        )
                })
                .sum();
            let t = lat + bw / f;
            if best.as_ref().is_none_or(|b| t < b.0) {
                // The skeleton is rebuilt for the winner below; keep only what it needs.
                best = Some((t, algorithm, protocol, f, Vec::new()));
            }
        }
    }
    let Some((time_s, algorithm, protocol, f, _)) = best else {
        return Plan::empty();
    };
    let figs = lib
        .protocols()
        .into_iter()
        .find(|(p, _)| *p == protocol)
        .map(|(_, f)| f.clone())
        .unwrap_or_else(|| simple.clone());
    let phases = skeleton(cost, algorithm, op, group, &segs, bytes)
        .unwrap_or_default()
        .into_iter()
        .map(|s| Phase {
            steps: s.steps,
            step_latency_s: latency_s(
                s.lat,
                &figs,
                nvls_latency_s,
                simple.inter_step_latency_s.value,
            ),
            pattern: scale(s.pattern, 1.0 / f),
        })
        .collect();
    Plan {
        algorithm,
        protocol,
        phases,
        segments: segs,
        nics,
        time_s,
    }
}
