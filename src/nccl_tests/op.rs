//! The operations nccl-tests (and rccl-tests) time, their names and bus-bandwidth factors
//! (`doc/PERFORMANCE.md` of NVIDIA/nccl-tests), and the element types their tables print.

use crate::cost::collective::Op;
use crate::schedule::CollectiveOp;

/// An operation nccl-tests times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TestOp {
    /// `all_reduce_perf`.
    AllReduce,
    /// `all_gather_perf`.
    AllGather,
    /// `reduce_scatter_perf`.
    ReduceScatter,
    /// `alltoall_perf`.
    AllToAll,
    /// `sendrecv_perf`: every rank sends to the next and receives from the previous.
    SendRecv,
    /// `broadcast_perf`.
    Broadcast,
    /// `reduce_perf`.
    Reduce,
}

impl TestOp {
    /// Every operation.
    pub const ALL: [TestOp; 7] = [
        TestOp::AllReduce,
        TestOp::AllGather,
        TestOp::ReduceScatter,
        TestOp::AllToAll,
        TestOp::SendRecv,
        TestOp::Broadcast,
        TestOp::Reduce,
    ];

    /// The name on the command line and in outputs.
    pub fn id(self) -> &'static str {
        match self {
            TestOp::AllReduce => "all-reduce",
            TestOp::AllGather => "all-gather",
            TestOp::ReduceScatter => "reduce-scatter",
            TestOp::AllToAll => "all-to-all",
            TestOp::SendRecv => "sendrecv",
            TestOp::Broadcast => "broadcast",
            TestOp::Reduce => "reduce",
        }
    }

    /// The nccl-tests binary without `_perf`.
    pub fn binary(self) -> &'static str {
        match self {
            TestOp::AllReduce => "all_reduce",
            TestOp::AllGather => "all_gather",
            TestOp::ReduceScatter => "reduce_scatter",
            TestOp::AllToAll => "alltoall",
            TestOp::SendRecv => "sendrecv",
            TestOp::Broadcast => "broadcast",
            TestOp::Reduce => "reduce",
        }
    }

    /// The operation named `s` (its id or its nccl-tests binary, with or without `_perf`).
    pub fn parse(s: &str) -> Option<TestOp> {
        let s = s.strip_suffix("_mpi").unwrap_or(s);
        let s = s.strip_suffix("_perf").unwrap_or(s);
        TestOp::ALL.into_iter().find(|o| {
            o.id() == s || o.binary() == s || (s == "all_to_all" && *o == TestOp::AllToAll)
        })
    }

    /// nccl-tests' bus-bandwidth factor over `n` ranks: 2(n−1)/n for all-reduce, (n−1)/n for
    /// all-gather, reduce-scatter and all-to-all, 1 otherwise.
    pub fn bus_factor(self, n: u64) -> f64 {
        let n = n.max(1) as f64;
        match self {
            TestOp::AllReduce => 2.0 * (n - 1.0) / n,
            TestOp::AllGather | TestOp::ReduceScatter | TestOp::AllToAll => (n - 1.0) / n,
            _ => 1.0,
        }
    }

    /// The rank count whose bus factor is `ratio` (busbw / algbw), when the factor depends on
    /// the ranks: all-reduce n = 2/(2 − r), the others n = 1/(1 − r). `None` for a factor of 1
    /// (nothing to infer) or a ratio no rank count gives.
    pub fn ranks_from_ratio(self, ratio: f64) -> Option<u64> {
        let n = match self {
            TestOp::AllReduce => 2.0 / (2.0 - ratio),
            TestOp::AllGather | TestOp::ReduceScatter | TestOp::AllToAll => 1.0 / (1.0 - ratio),
            _ => return None,
        };
        (n.is_finite() && (1.0..=(1u64 << 20) as f64).contains(&n.round()))
            .then(|| n.round() as u64)
    }

    /// Elements one rank passes for a table row of `size` bytes: the whole buffer, or one
    /// rank's share for all-gather, reduce-scatter and all-to-all (what nccl-tests prints as
    /// `count`).
    pub fn count(self, size: u64, n: u64, elem_bytes: u64) -> u64 {
        let elems = size / elem_bytes.max(1);
        match self {
            TestOp::AllGather | TestOp::ReduceScatter | TestOp::AllToAll => elems / n.max(1),
            _ => elems,
        }
    }

    /// The size nccl-tests times for a requested `size`: whole elements (and whole shares).
    pub fn effective_size(self, size: u64, n: u64, elem_bytes: u64) -> u64 {
        let c = self.count(size, n, elem_bytes);
        match self {
            TestOp::AllGather | TestOp::ReduceScatter | TestOp::AllToAll => c * n * elem_bytes,
            _ => c * elem_bytes,
        }
    }

    /// What the cost model prices.
    pub fn op(self) -> Op {
        match self {
            TestOp::AllReduce => Op::Collective(CollectiveOp::AllReduce),
            TestOp::AllGather => Op::Collective(CollectiveOp::AllGather),
            TestOp::ReduceScatter => Op::Collective(CollectiveOp::ReduceScatter),
            TestOp::AllToAll => Op::Collective(CollectiveOp::AllToAll),
            TestOp::SendRecv => Op::SendRecv,
            TestOp::Broadcast => Op::Collective(CollectiveOp::Broadcast { root: 0 }),
            TestOp::Reduce => Op::Collective(CollectiveOp::Reduce { root: 0 }),
        }
    }
}

/// Bytes of an element type as nccl-tests names it; `None` for a name it does not print.
pub fn type_bytes(name: &str) -> Option<u64> {
    Some(match name {
        "int8" | "uint8" | "char" | "f8e4m3" | "f8e5m2" | "fp8_e4m3" | "fp8_e5m2" => 1,
        "half" | "float16" | "bfloat16" | "bf16" | "fp16" => 2,
        "int32" | "uint32" | "int" | "float" | "float32" | "fp32" => 4,
        "int64" | "uint64" | "double" | "float64" | "fp64" => 8,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_factors_and_counts_follow_nccl_tests() {
        assert_eq!(TestOp::parse("all_reduce_perf"), Some(TestOp::AllReduce));
        assert_eq!(TestOp::parse("alltoall_perf_mpi"), Some(TestOp::AllToAll));
        assert_eq!(TestOp::parse("all-gather"), Some(TestOp::AllGather));
        assert_eq!(TestOp::parse("hypercube_perf"), None);
        // PERFORMANCE.md: all-reduce busbw = algbw · 2(n−1)/n.
        assert_eq!(TestOp::AllReduce.bus_factor(8), 1.75);
        assert_eq!(TestOp::AllGather.bus_factor(8), 0.875);
        assert_eq!(TestOp::SendRecv.bus_factor(8), 1.0);
        assert_eq!(TestOp::AllReduce.ranks_from_ratio(1.875), Some(16));
        assert_eq!(TestOp::AllToAll.ranks_from_ratio(0.875), Some(8));
        assert_eq!(TestOp::SendRecv.ranks_from_ratio(1.0), None);
        // The B200 all-gather log: 128 B over 8 ranks of float is 4 elements per rank; 16 B
        // is none (printed as size 0).
        assert_eq!(TestOp::AllGather.count(128, 8, 4), 4);
        assert_eq!(TestOp::AllGather.effective_size(16, 8, 4), 0);
        assert_eq!(type_bytes("bfloat16"), Some(2));
    }
}
