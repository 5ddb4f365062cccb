//! What each algorithm moves and what its latency is, before a protocol is chosen: the
//! phases of a collective at payload bytes (`Skeleton`) and how a protocol's figures make their
//! step latency. `super::plan` prices every candidate from these and keeps the fastest.

use super::{log2_ceil, Intra, Op, Pattern, Segments};
use crate::config::{Algorithm, ProtocolFigures};
use crate::cost::{CostModel, LinkClass};
use crate::schedule::{CollectiveOp, DeviceId};

/// How a protocol's figures make a phase's per-step latency.
#[derive(Debug, Clone, Copy)]
pub(super) enum Lat {
    /// A ring of `steps` steps, `inter` of them leaving a node.
    Ring { steps: u32, inter: u32 },
    /// `steps` steps, each inside a node or crossing the network.
    PerStep { steps: u32, crosses: bool },
    /// One step: a chain of hops.
    Chain { intra: u32, inter: u32 },
    /// One step: NCCL's tree over `g` GPUs per node and `nodes` nodes.
    Tree { g: u32, nodes: u32 },
    /// One step: NVLS (NVLSTree over `nodes` nodes).
    Nvls { nodes: u32 },
}

/// A phase before a protocol is applied: the pattern at payload bytes and its latency shape.
pub(super) struct Skeleton {
    pub(super) steps: u32,
    pub(super) pattern: Pattern,
    pub(super) lat: Lat,
}

pub(super) fn scale(p: Pattern, by: f64) -> Pattern {
    match p {
        Pattern::Ring { bytes } => Pattern::Ring { bytes: bytes * by },
        Pattern::Shift { intra, inter } => Pattern::Shift {
            intra: intra * by,
            inter: inter * by,
        },
        Pattern::Pairs { intra, inter } => Pattern::Pairs {
            intra: intra * by,
            inter: inter * by,
        },
        Pattern::Star {
            root,
            reduce,
            bytes,
        } => Pattern::Star {
            root,
            reduce,
            bytes: bytes * by,
        },
        Pattern::Chain {
            root,
            reduce,
            bytes,
        } => Pattern::Chain {
            root,
            reduce,
            bytes: bytes * by,
        },
        Pattern::Binomial {
            root,
            reduce,
            level,
            bytes,
        } => Pattern::Binomial {
            root,
            reduce,
            level,
            bytes: bytes * by,
        },
        Pattern::Hier { intra, inter } => Pattern::Hier {
            intra: match intra {
                Intra::None => Intra::None,
                Intra::Pairs(b) => Intra::Pairs(b * by),
                Intra::UpDown(b) => Intra::UpDown(b * by),
            },
            inter: inter * by,
        },
    }
}

/// The steps of `op` with `algorithm` at payload bytes, or `None` where the algorithm cannot
/// run the operation.
pub(super) fn skeleton(
    cost: &CostModel,
    algorithm: Algorithm,
    op: Op,
    group: &[DeviceId],
    segs: &Segments,
    bytes: u64,
) -> Option<Vec<Skeleton>> {
    let hw = cost.hardware();
    let n = group.len() as u32;
    let m = bytes as f64;
    let share = m / n as f64;
    let nodes = segs.count() as u32;
    let crosses = nodes > 1;
    let (min_len, max_len) = segs.min_max_len();
    let tree_traffic = if nodes == 2 { m } else { 2.0 * m };
    let root_of = |op: CollectiveOp| match op {
        CollectiveOp::Broadcast { root } | CollectiveOp::Reduce { root } => {
            group.iter().position(|&d| d == root).unwrap_or(0) as u32
        }
        _ => 0,
    };
    let one = |pattern: Pattern, lat: Lat| {
        Some(vec![Skeleton {
            steps: 1,
            pattern,
            lat,
        }])
    };
    let Op::Collective(c) = op else {
        // Send/recv: each rank sends M to the next, at the library's point-to-point rate — or
        // its channels' where a send inside one node gets fewer than the port needs.
        let link = cost.link_bytes_per_s(LinkClass::IntraNode);
        let p2p = intra_send_rate(cost, m, 1, n as u64, !crosses);
        return one(
            Pattern::Shift {
                intra: m * link / p2p,
                inter: m,
            },
            Lat::PerStep { steps: 1, crosses },
        );
    };
    let reduce = matches!(c, CollectiveOp::Reduce { .. });
    // NCCL and RCCL run all-to-all as grouped sends and receives: inside a node at the
    // library's point-to-point rate, or its channels' (a ring step sends to one peer, the
    // direct exchange to every peer of the node at once).
    let link = cost.link_bytes_per_s(LinkClass::IntraNode);
    let peers = u64::from(max_len.saturating_sub(1)).max(1);
    let a2a_ring_intra = share * link / intra_send_rate(cost, share, 1, n as u64, !crosses);
    let a2a_intra = share * link / intra_send_rate(cost, share, peers, n as u64, !crosses);
    let ring_inter = |per: u32| if crosses { per * (nodes - 1) } else { 0 };
    match (algorithm, c) {
        (Algorithm::Ring, CollectiveOp::AllReduce) => {
            let steps = 2 * (n - 1);
            Some(vec![Skeleton {
                steps,
                pattern: Pattern::Ring { bytes: share },
                lat: Lat::Ring {
                    steps,
                    inter: ring_inter(2),
                },
            }])
        }
        (Algorithm::Ring, CollectiveOp::AllGather | CollectiveOp::ReduceScatter) => {
            Some(vec![Skeleton {
                steps: n - 1,
                pattern: Pattern::Ring { bytes: share },
                lat: Lat::Ring {
                    steps: n - 1,
                    inter: ring_inter(1),
                },
            }])
        }
        (Algorithm::Ring, CollectiveOp::AllToAll) => Some(vec![Skeleton {
            steps: n - 1,
            pattern: Pattern::Shift {
                intra: a2a_ring_intra,
                inter: share,
            },
            lat: Lat::PerStep {
                steps: n - 1,
                crosses,
            },
        }]),
        (Algorithm::Ring, CollectiveOp::Broadcast { .. } | CollectiveOp::Reduce { .. }) => {
            let root = root_of(c);
            let first = if reduce { root + 1 } else { root };
            let inter = (0..n - 1)
                .filter(|h| {
                    let a = group[((first + h) % n) as usize];
                    let b = group[((first + h + 1) % n) as usize];
                    cost.link_class(a, b) == LinkClass::InterNode
                })
                .count() as u32;
            one(
                Pattern::Chain {
                    root,
                    reduce,
                    bytes: m,
                },
                Lat::Chain {
                    intra: n - 1 - inter,
                    inter,
                },
            )
        }
        (Algorithm::Direct, CollectiveOp::Broadcast { .. } | CollectiveOp::Reduce { .. }) => one(
            Pattern::Star {
                root: root_of(c),
                reduce,
                bytes: m,
            },
            Lat::PerStep { steps: 1, crosses },
        ),
        (Algorithm::Direct, _) => {
            let steps = if c == CollectiveOp::AllReduce { 2 } else { 1 };
            let intra = if c == CollectiveOp::AllToAll {
                a2a_intra
            } else {
                share
            };
            Some(vec![Skeleton {
                steps,
                pattern: Pattern::Pairs {
                    intra,
                    inter: share,
                },
                lat: Lat::PerStep { steps, crosses },
            }])
        }
        (Algorithm::Tree, CollectiveOp::AllReduce) => one(
            Pattern::Hier {
                intra: if max_len > 1 {
                    Intra::UpDown(m)
                } else {
                    Intra::None
                },
                inter: tree_traffic,
            },
            Lat::Tree { g: max_len, nodes },
        ),
        (Algorithm::Tree, CollectiveOp::Broadcast { .. } | CollectiveOp::Reduce { .. }) => {
            let root = root_of(c);
            let levels = log2_ceil(n as u64) as u32;
            let mut v = Vec::new();
            for i in 0..levels {
                // A broadcast spreads from the root (level 0 first); a reduce gathers from the
                // leaves (pairs first, level 0 too).
                let level = i;
                let pattern = Pattern::Binomial {
                    root,
                    reduce,
                    level,
                    bytes: m,
                };
                let mut t = Vec::new();
                crate::cost::pattern::transfers(&pattern, 0, group, segs, 1, None, &mut t);
                let crosses = t
                    .iter()
                    .any(|x| cost.link_class(x.src, x.dst) == LinkClass::InterNode);
                v.push(Skeleton {
                    steps: 1,
                    pattern,
                    lat: Lat::PerStep {
                        steps: levels,
                        crosses,
                    },
                });
            }
            Some(v)
        }
        (Algorithm::Tree, _) => None,
        (Algorithm::Nvls, CollectiveOp::AllReduce) => {
            let nv = hw.collective_library.as_ref()?.nvls.as_ref()?;
            if min_len < 3 {
                return None;
            }
            let (nf, g) = (n as f64, min_len as f64);
            let mut algbw = nv.bus_bytes_per_s.value * nf / (2.0 * (nf - 1.0));
            if let Some(p) = &nv.port_bytes_per_s {
                algbw = algbw.min(p.value * g / (g + 1.0));
            }
            let port = hw.intra_node.bytes_per_s_per_direction.value;
            let per_pair = m * port / algbw / (g - 1.0);
            one(
                Pattern::Hier {
                    intra: Intra::Pairs(per_pair),
                    inter: if crosses { tree_traffic } else { 0.0 },
                },
                Lat::Nvls { nodes },
            )
        }
        (Algorithm::Nvls, _) => None,
    }
}

/// The rate of a GPU's sends inside a node, `bytes` to each of `peers` peers at once, in a
/// communicator of `ranks` ranks: the library's point-to-point rate, or — where the profile
/// says how the library spreads a send over its channels and the group is one node — the
/// channels' rate when that is lower (`peers` × [`crate::config::P2pChannels::channels_for`] × the rate of
/// one channel). Across nodes NCCL sizes a send's parts by the network's chunk: the
/// point-to-point rate.
pub(super) fn intra_send_rate(
    cost: &CostModel,
    bytes: f64,
    peers: u64,
    ranks: u64,
    one_node: bool,
) -> f64 {
    let p2p = cost.p2p_bytes_per_s(LinkClass::IntraNode);
    let channels = cost
        .hardware()
        .collective_library
        .as_ref()
        .and_then(|l| l.p2p_channels.as_ref());
    match channels {
        Some(ch) if one_node => {
            let n = ch.channels_for(bytes, ranks) as f64;
            p2p.min(peers as f64 * n * ch.bytes_per_s_per_channel.value)
        }
        _ => p2p,
    }
}

pub(super) fn latency_s(
    lat: Lat,
    p: &ProtocolFigures,
    nvls_latency_s: f64,
    simple_inter_s: f64,
) -> f64 {
    let (base, intra, inter) = (
        p.base_latency_s.value,
        p.intra_step_latency_s.value,
        p.inter_step_latency_s.value,
    );
    match lat {
        Lat::Ring { steps, inter: i } => {
            (base + (steps - i) as f64 * intra + i as f64 * inter) / steps.max(1) as f64
        }
        Lat::PerStep { steps, crosses } => {
            base / steps.max(1) as f64 + if crosses { inter } else { intra }
        }
        Lat::Chain { intra: a, inter: b } => base + a as f64 * intra + b as f64 * inter,
        Lat::Tree { g, nodes } => {
            base + 2.0
                * ((g.saturating_sub(1)) as f64 * intra + log2_ceil(nodes as u64) as f64 * inter)
        }
        Lat::Nvls { nodes } => {
            nvls_latency_s + 2.0 * log2_ceil(nodes as u64) as f64 * simple_inter_s
        }
    }
}
