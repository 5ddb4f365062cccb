//! The topology part of a hardware profile beyond "a switch per node, a rail-optimised
//! non-blocking network between nodes": how nodes' NICs reach each other (rail or per-node leaf
//! switches, a spine and its oversubscription) and which collective algorithm the communication
//! library runs, by operation, scope and size. (Per-pair links of a full mesh are a kind of
//! [`super::IntraNode`].)
//!
//! Every field is optional in the file and defaults to what the profiles said before these
//! fields existed — rail wiring, no spine, ring collectives — so an older profile loads and
//! prices exactly as before. Plain data: the cost model and the simulator give it meaning.

use serde::{Deserialize, Serialize};

use super::Figure;

/// How a node's NICs are wired to the leaf switches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Wiring {
    /// Rail-optimised: NIC `r` of every node goes to the leaf switch of rail `r`, so traffic
    /// between the same rails of two nodes stays on one leaf (DGX SuperPOD style).
    #[default]
    Rail,
    /// Every NIC of a node goes to the same leaf switch (top-of-rack style).
    Node,
}

impl Wiring {
    /// True for the default (rail), which the file may leave out.
    pub fn is_default(&self) -> bool {
        *self == Wiring::Rail
    }
}

/// A two-tier fat tree between the nodes: leaf switches hold the NICs of `nodes_per_leaf`
/// consecutive nodes (per rail with rail wiring), and each leaf reaches the others through a
/// spine whose capacity per leaf, each direction, is the leaf's NIC bandwidth divided by
/// `oversubscription`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spine {
    /// Nodes whose NICs share one leaf switch (per rail with rail wiring).
    pub nodes_per_leaf: u64,
    /// Leaf downlink bandwidth over uplink bandwidth: 1 is non-blocking, 2 is a 2:1 spine.
    pub oversubscription: Figure,
}

/// A collective algorithm (see `cost::collective` for what each moves and costs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// NCCL's ring: n−1 (or 2(n−1)) steps of one chunk to the ring successor; broadcast and
    /// reduce as a pipelined chain.
    Ring,
    /// A binomial tree: ⌈log2 n⌉ steps of the whole buffer (broadcast, reduce; all-reduce as a
    /// reduce then a broadcast).
    Tree,
    /// Every rank exchanges with every other at once, in one step (two for all-reduce).
    Direct,
    /// NVLink SHARP: the switch reduces and multicasts (NVLSTree across nodes). Not a rule of
    /// the table: a profile has it with `collective_library.nvls`.
    Nvls,
}

impl Algorithm {
    /// The name in profiles and outputs.
    pub fn id(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Tree => "tree",
            Algorithm::Direct => "direct",
            Algorithm::Nvls => "nvls",
        }
    }
}

/// Which collective operations a rule covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CollectiveKind {
    /// Every operation (a tree rule passes over those a tree cannot run).
    Any,
    /// All-reduce.
    AllReduce,
    /// All-gather.
    AllGather,
    /// Reduce-scatter.
    ReduceScatter,
    /// All-to-all.
    AllToAll,
    /// Broadcast.
    Broadcast,
    /// Reduce.
    Reduce,
}

/// Where a collective's group lies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Anywhere.
    #[default]
    Any,
    /// Every rank in one node (one switch domain or mesh).
    Intra,
    /// Ranks on more than one node.
    Inter,
}

impl Scope {
    fn is_default(&self) -> bool {
        *self == Scope::Any
    }
}

/// One line of the algorithm table: the first rule that matches a collective picks its
/// algorithm; a collective no rule matches runs as a ring.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveRule {
    /// Operations covered.
    pub op: CollectiveKind,
    /// Where the group must lie.
    #[serde(default, skip_serializing_if = "Scope::is_default")]
    pub scope: Scope,
    /// Largest buffer (bytes, as nccl-tests sizes the operation) the rule covers; none: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Why (the library's tuning, a measurement, an assumption).
    pub source: String,
}

impl CollectiveRule {
    /// Whether the rule covers `op` on a group that is (or is not) inside one node, with a
    /// buffer of `bytes`.
    pub fn matches(&self, op: CollectiveKind, intra: bool, bytes: u64) -> bool {
        let op_ok = self.op == CollectiveKind::Any || self.op == op;
        let tree_ok = self.algorithm != Algorithm::Tree || tree_runs(op);
        let scope_ok = match self.scope {
            Scope::Any => true,
            Scope::Intra => intra,
            Scope::Inter => !intra,
        };
        op_ok && tree_ok && scope_ok && self.max_bytes.is_none_or(|m| bytes <= m)
    }
}

/// Whether a binomial tree can run `op` (all-reduce, broadcast, reduce).
pub fn tree_runs(op: CollectiveKind) -> bool {
    matches!(
        op,
        CollectiveKind::AllReduce | CollectiveKind::Broadcast | CollectiveKind::Reduce
    )
}

/// The algorithm `rules` pick for `op` (ring when none matches).
pub fn choose_algorithm(
    rules: &[CollectiveRule],
    op: CollectiveKind,
    intra: bool,
    bytes: u64,
) -> Algorithm {
    rules
        .iter()
        .find(|r| r.matches(op, intra, bytes))
        .map_or(Algorithm::Ring, |r| r.algorithm)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(op: CollectiveKind, scope: Scope, max: Option<u64>, a: Algorithm) -> CollectiveRule {
        CollectiveRule {
            op,
            scope,
            max_bytes: max,
            algorithm: a,
            source: "test".into(),
        }
    }

    #[test]
    fn first_matching_rule_wins_and_ring_is_the_default() {
        let rules = vec![
            rule(
                CollectiveKind::AllReduce,
                Scope::Inter,
                Some(1 << 20),
                Algorithm::Tree,
            ),
            rule(CollectiveKind::Any, Scope::Intra, None, Algorithm::Direct),
        ];
        use CollectiveKind as K;
        assert_eq!(
            choose_algorithm(&rules, K::AllReduce, false, 1 << 20),
            Algorithm::Tree
        );
        assert_eq!(
            choose_algorithm(&rules, K::AllReduce, false, (1 << 20) + 1),
            Algorithm::Ring
        );
        assert_eq!(
            choose_algorithm(&rules, K::AllGather, true, 1 << 30),
            Algorithm::Direct
        );
        assert_eq!(
            choose_algorithm(&rules, K::AllToAll, false, 1),
            Algorithm::Ring
        );
        assert_eq!(
            choose_algorithm(&[], K::Broadcast, true, 1),
            Algorithm::Ring
        );
    }

    #[test]
    fn a_tree_rule_passes_over_operations_a_tree_cannot_run() {
        let rules = vec![rule(CollectiveKind::Any, Scope::Any, None, Algorithm::Tree)];
        assert_eq!(
            choose_algorithm(&rules, CollectiveKind::AllGather, true, 8),
            Algorithm::Ring
        );
        assert_eq!(
            choose_algorithm(&rules, CollectiveKind::Broadcast, true, 8),
            Algorithm::Tree
        );
    }
}
