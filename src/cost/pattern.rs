//! The transfers of one step of a collective, from its pattern: the one place that says who
//! sends what to whom. The simulator moves these transfers as flows; the analytic twin prices
//! the same transfers by the load they put on each link ([`super::collective::step_s`]).
//!
//! A group is a list of devices in ring order; its *segments* are the runs of consecutive
//! positions on one node. Where a pattern moves data between nodes it spreads the traffic over
//! the rails the two segments share, as NCCL's channels do: member `m` of one segment sends to
//! member `m` of the next, through the NIC of its rail (rail-optimised fabrics keep such a
//! flow on one leaf).

use crate::schedule::DeviceId;

/// One transfer of a step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transfer {
    /// Sender.
    pub src: DeviceId,
    /// Receiver.
    pub dst: DeviceId,
    /// Bytes on the wire (the protocol's overhead included).
    pub bytes: f64,
}

/// What the members of a node do inside it in a hierarchical step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Intra {
    /// Nothing (one member per node).
    None,
    /// Every member sends this many bytes to every other member of its node (NVLS's traffic
    /// through the switch, as the ports see it).
    Pairs(f64),
    /// A chain reduced upwards and broadcast downwards at once: every member sends this many
    /// bytes to the one before it and to the one after it (NCCL's tree inside a node).
    UpDown(f64),
}

/// Who sends what to whom in each step of a phase. Positions are indices into the group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pattern {
    /// Every position sends `bytes` to the next (the last to the first). Where the ring leaves
    /// a segment for the next, the crossing is split over the rails the two share.
    Ring {
        /// Bytes per position and step.
        bytes: f64,
    },
    /// Step `k`: position `i` sends to position `i + k + 1` (a pairwise exchange; send/recv
    /// with one step). Bytes by whether the pair shares a node.
    Shift {
        /// Bytes to a peer on the same node.
        intra: f64,
        /// Bytes to a peer on another node.
        inter: f64,
    },
    /// Every position sends to every other at once.
    Pairs {
        /// Bytes to each peer on the same node.
        intra: f64,
        /// Bytes to each peer on another node.
        inter: f64,
    },
    /// The root sends `bytes` to every other position (or receives from each, `reduce`).
    Star {
        /// Root position.
        root: u32,
        /// Towards the root.
        reduce: bool,
        /// Bytes per peer.
        bytes: f64,
    },
    /// A pipelined chain from the root around the ring (towards it, `reduce`); every hop
    /// carries `bytes`, all hops at once.
    Chain {
        /// Root position.
        root: u32,
        /// Towards the root.
        reduce: bool,
        /// Bytes per hop.
        bytes: f64,
    },
    /// One level of a binomial tree rooted at `root`: broadcast level `k` sends from relative
    /// rank `r < 2^k` to `r + 2^k`; reduce level `k` from `r` with `r mod 2^(k+1) = 2^k` to
    /// `r − 2^k`.
    Binomial {
        /// Root position.
        root: u32,
        /// Towards the root.
        reduce: bool,
        /// The level.
        level: u32,
        /// Bytes per hop.
        bytes: f64,
    },
    /// Inside every node what `intra` says; between consecutive segments (cyclically) `inter`
    /// bytes per node and direction, over the rails the two share.
    Hier {
        /// Inside a node.
        intra: Intra,
        /// Bytes a node sends to the next segment's node.
        inter: f64,
    },
}

/// Runs of consecutive positions of a group on one node: `starts[s]` is the first position of
/// segment `s`, and a final entry is the group's size.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Segments {
    starts: Vec<u32>,
}

impl Segments {
    /// The segments of `group` with `gpus_per_node` devices per node (devices are numbered node
    /// by node).
    pub fn of(group: &[DeviceId], gpus_per_node: u64) -> Segments {
        let gpn = gpus_per_node.max(1);
        let mut starts = Vec::new();
        let mut last = None;
        for (i, &d) in group.iter().enumerate() {
            let node = d as u64 / gpn;
            if last != Some(node) {
                starts.push(i as u32);
                last = Some(node);
            }
        }
        starts.push(group.len() as u32);
        Segments { starts }
    }

    /// Number of segments.
    pub fn count(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// First position and length of segment `s`.
    pub fn get(&self, s: usize) -> (u32, u32) {
        (self.starts[s], self.starts[s + 1] - self.starts[s])
    }

    /// The segment of position `i` and `i`'s offset in it.
    pub fn locate(&self, i: u32) -> (usize, u32) {
        let s = self.starts.partition_point(|&x| x <= i) - 1;
        (s, i - self.starts[s])
    }

    /// The smallest and largest segment.
    pub fn min_max_len(&self) -> (u32, u32) {
        (0..self.count())
            .map(|s| self.get(s).1)
            .fold((u32::MAX, 0), |(lo, hi), l| (lo.min(l), hi.max(l)))
    }

    /// Rails between segment `s` and the next (cyclically): the members both have, at most
    /// `nics`.
    pub fn rails(&self, s: usize, nics: u64) -> u32 {
        let next = (s + 1) % self.count();
        let a = self.get(s).1;
        let b = self.get(next).1;
        (a.min(b) as u64).min(nics.max(1)) as u32
    }
}

/// The transfers of step `k` of `pattern` over `group`, written to `out` (cleared first). With
/// `senders` (ascending positions) a ring, shift or hierarchical step lists only the transfers
/// those positions send (a folded simulation moves only its canonical ranks'); other patterns
/// are written whole and the caller filters them.
pub fn transfers(
    pattern: &Pattern,
    k: u32,
    group: &[DeviceId],
    segs: &Segments,
    nics: u64,
    senders: Option<&[u32]>,
    out: &mut Vec<Transfer>,
) {
    out.clear();
    let n = group.len() as u32;
    if n <= 1 {
        return;
    }
    let at = |i: u32| group[(i % n) as usize];
    let mut push = |src: u32, dst: u32, bytes: f64| {
        if bytes > 0.0 {
            out.push(Transfer {
                src: at(src),
                dst: at(dst),
                bytes,
            })
        }
    };
    let every: Vec<u32>;
    let from: &[u32] = match senders {
        Some(s) => s,
        None => {
            every = (0..n).collect();
            &every
        }
    };
    let same_node = |a: u32, b: u32| segs.locate(a % n).0 == segs.locate(b % n).0;
    match *pattern {
        Pattern::Ring { bytes } => {
            let many = segs.count() > 1;
            for &i in from {
                let (s, m) = segs.locate(i);
                let (_, len) = segs.get(s);
                if !many {
                    push(i, i + 1, bytes);
                    continue;
                }
                if m + 1 < len {
                    push(i, i + 1, bytes);
                }
                let rails = segs.rails(s, nics);
                if m < rails {
                    let (next, _) = segs.get((s + 1) % segs.count());
                    push(i, next + m, bytes / rails as f64);
                }
            }
        }
        Pattern::Shift { intra, inter } => {
            for &i in from {
                let j = i + k + 1;
                push(i, j, if same_node(i, j) { intra } else { inter });
            }
        }
        Pattern::Pairs { intra, inter } => {
            for &i in from {
                for d in 1..n {
                    let j = i + d;
                    push(i, j, if same_node(i, j) { intra } else { inter });
                }
            }
        }
        Pattern::Star {
            root,
            reduce,
            bytes,
        } => {
            for d in 1..n {
                if reduce {
                    push(root + d, root, bytes);
                } else {
                    push(root, root + d, bytes);
                }
            }
        }
        Pattern::Chain {
            root,
            reduce,
            bytes,
        } => {
            let first = if reduce { root + 1 } else { root };
            for h in 0..n - 1 {
                push(first + h, first + h + 1, bytes);
            }
        }
        Pattern::Binomial {
            root,
            reduce,
            level,
            bytes,
        } => {
            let half = 1u32 << level.min(31);
            for r in 0..n {
                if reduce {
                    if r % half.saturating_mul(2) == half {
                        push(root + r, root + r - half, bytes);
                    }
                } else if r < half && r + half < n {
                    push(root + r, root + r + half, bytes);
                }
            }
        }
        Pattern::Hier { intra, inter } => {
            let many = segs.count() > 1;
            for &i in from {
                let (s, m) = segs.locate(i);
                let (start, len) = segs.get(s);
                match intra {
                    Intra::None => {}
                    Intra::Pairs(b) => {
                        for o in 0..len {
                            if o != m {
                                push(i, start + o, b);
                            }
                        }
                    }
                    Intra::UpDown(b) => {
                        if m > 0 {
                            push(i, i - 1, b);
                        }
                        if m + 1 < len {
                            push(i, i + 1, b);
                        }
                    }
                }
                if many {
                    let rails = segs.rails(s, nics);
                    if m < rails {
                        let (next, _) = segs.get((s + 1) % segs.count());
                        push(i, next + m, inter / rails as f64);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &Pattern, k: u32, group: &[u32], gpn: u64, nics: u64) -> Vec<(u32, u32, f64)> {
        let segs = Segments::of(group, gpn);
        let mut out = Vec::new();
        transfers(p, k, group, &segs, nics, None, &mut out);
        out.iter().map(|t| (t.src, t.dst, t.bytes)).collect()
    }

    #[test]
    fn segments_follow_the_nodes_along_the_ring() {
        let s = Segments::of(&[0, 1, 2, 8, 9, 10], 8);
        assert_eq!(s.count(), 2);
        assert_eq!(s.get(1), (3, 3));
        assert_eq!(s.locate(4), (1, 1));
        assert_eq!(s.rails(0, 8), 3);
        assert_eq!(s.rails(0, 2), 2);
        assert_eq!(Segments::of(&[5], 8).count(), 1);
    }

    #[test]
    fn a_ring_splits_its_node_crossing_over_the_shared_rails() {
        // Two nodes of 2: 0 -> 1 inside node 0, then node 0 -> node 1 over 2 rails (0 -> 8,
        // 1 -> 9, 50 each), 8 -> 9, and back over 2 rails.
        let got = pairs(&Pattern::Ring { bytes: 100.0 }, 0, &[0, 1, 8, 9], 8, 8);
        assert_eq!(
            got,
            [
                (0, 1, 100.0),
                (0, 8, 50.0),
                (1, 9, 50.0),
                (8, 9, 100.0),
                (8, 0, 50.0),
                (9, 1, 50.0)
            ]
        );
        // One node: a plain ring.
        let got = pairs(&Pattern::Ring { bytes: 10.0 }, 3, &[4, 5, 6], 8, 8);
        assert_eq!(got, [(4, 5, 10.0), (5, 6, 10.0), (6, 4, 10.0)]);
    }

    #[test]
    fn shifts_pairs_chains_and_trees() {
        let g = [10, 11, 12, 13];
        let got = pairs(
            &Pattern::Shift {
                intra: 100.0,
                inter: 1.0,
            },
            1,
            &g,
            8,
            8,
        );
        assert_eq!(
            got,
            [
                (10, 12, 100.0),
                (11, 13, 100.0),
                (12, 10, 100.0),
                (13, 11, 100.0)
            ]
        );
        let got = pairs(
            &Pattern::Chain {
                root: 2,
                reduce: true,
                bytes: 400.0,
            },
            0,
            &g,
            8,
            8,
        );
        assert_eq!(got, [(13, 10, 400.0), (10, 11, 400.0), (11, 12, 400.0)]);
        let bc = |level| {
            pairs(
                &Pattern::Binomial {
                    root: 1,
                    reduce: false,
                    level,
                    bytes: 1.0,
                },
                0,
                &g,
                8,
                8,
            )
        };
        assert_eq!(bc(0), [(11, 12, 1.0)]);
        assert_eq!(bc(1), [(11, 13, 1.0), (12, 10, 1.0)]);
        assert_eq!(
            pairs(
                &Pattern::Pairs {
                    intra: 1.0,
                    inter: 2.0
                },
                0,
                &[0, 8],
                8,
                8
            ),
            [(0, 8, 2.0), (8, 0, 2.0)]
        );
    }

    #[test]
    fn a_hierarchical_step_works_inside_nodes_and_between_rails() {
        let got = pairs(
            &Pattern::Hier {
                intra: Intra::UpDown(10.0),
                inter: 6.0,
            },
            0,
            &[0, 1, 2, 8, 9, 10],
            8,
            2,
        );
        assert_eq!(
            got,
            [
                (0, 1, 10.0),
                (0, 8, 3.0),
                (1, 0, 10.0),
                (1, 2, 10.0),
                (1, 9, 3.0),
                (2, 1, 10.0),
                (8, 9, 10.0),
                (8, 0, 3.0),
                (9, 8, 10.0),
                (9, 10, 10.0),
                (9, 1, 3.0),
                (10, 9, 10.0)
            ]
        );
    }
}
