//! Collective sizes and bus bandwidth as nccl-tests define them (`doc/PERFORMANCE.md` of
//! NVIDIA/nccl-tests): the algorithm bandwidth is `S / t`, the bus bandwidth that bandwidth
//! times a factor of the op and the rank count n that makes it comparable with the hardware's
//! link bandwidth whatever n is. `S` is the op's buffer: the (in = out) buffer of all-reduce,
//! the gathered output of all-gather, the input of reduce-scatter, the whole send buffer of
//! all-to-all (n chunks). Used by `calibrate::measure` (collectives into the measurement file) and
//! the CUDA backend (call sizes). Depends on `error` only.

use crate::error::{Error, Result};

fn calib(message: String) -> Error {
    Error::Calibration { message }
}

/// The collectives a calibration measures where the backend has them.
pub const OPS: [&str; 4] = ["all-reduce", "all-gather", "reduce-scatter", "all-to-all"];

/// nccl-tests' bus-bandwidth factor of `op` over `ranks` ranks: 2(n−1)/n for all-reduce
/// (reduce-scatter then all-gather: each byte crosses 2(n−1)/n links' worth), (n−1)/n for
/// all-gather, reduce-scatter and all-to-all, 1 for broadcast and send/recv.
pub fn bus_factor(op: &str, ranks: usize) -> Result<f64> {
    if ranks == 0 {
        return Err(calib("a collective needs at least one rank".into()));
    }
    let n = ranks as f64;
    match op {
        "all-reduce" => Ok(2.0 * (n - 1.0) / n),
        "all-gather" | "reduce-scatter" | "all-to-all" => Ok((n - 1.0) / n),
        "broadcast" | "send-recv" => Ok(1.0),
        _ => Err(calib(format!(
            "unknown collective '{op}' (all-reduce, all-gather, reduce-scatter, all-to-all, \
             broadcast, send-recv)"
        ))),
    }
}

/// Bus bandwidth of one call of `op` over `ranks` ranks moving `bytes` (the op's `S`) in
/// `seconds`: `S / t × bus_factor`.
pub fn bus_bytes_per_s(op: &str, ranks: usize, bytes: u64, seconds: f64) -> Result<f64> {
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(calib(format!(
            "{op}: time {seconds} is not a positive time"
        )));
    }
    Ok(bytes as f64 / seconds * bus_factor(op, ranks)?)
}

/// Elements of `elem_bytes` each that one rank passes to the library call for `op` with buffer
/// `bytes` over `ranks` ranks: the whole buffer for all-reduce; one rank's chunk (S/n) as the
/// send count of all-gather, the receive count of reduce-scatter and the per-peer count of
/// all-to-all. `None` unless S divides into whole chunks of whole elements.
pub fn call_count(op: &str, ranks: usize, bytes: u64, elem_bytes: u64) -> Option<u64> {
    if ranks == 0 || elem_bytes == 0 || !bytes.is_multiple_of(elem_bytes) {
        return None;
    }
    let elems = bytes / elem_bytes;
    match op {
        "all-reduce" | "broadcast" | "send-recv" => Some(elems),
        "all-gather" | "reduce-scatter" | "all-to-all" => {
            (elems.is_multiple_of(ranks as u64)).then_some(elems / ranks as u64)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calib_bus_bandwidth_follows_nccl_tests() {
        // PERFORMANCE.md: all-reduce busbw = algbw · 2(n−1)/n; with 8 ranks, 1 GB in 10 ms is
        // an algbw of 100 GB/s and a busbw of 175 GB/s.
        let bw = bus_bytes_per_s("all-reduce", 8, 1_000_000_000, 0.01).unwrap();
        assert!((bw - 175e9).abs() < 1.0, "{bw}");
        // all-gather / reduce-scatter / all-to-all: (n−1)/n; 2 ranks halve the algbw.
        for op in ["all-gather", "reduce-scatter", "all-to-all"] {
            assert_eq!(bus_factor(op, 2).unwrap(), 0.5);
            assert_eq!(bus_factor(op, 4).unwrap(), 0.75);
        }
        assert_eq!(bus_factor("all-reduce", 2).unwrap(), 1.0);
        assert_eq!(bus_factor("send-recv", 2).unwrap(), 1.0);
        assert!(bus_factor("all-sum", 2).is_err());
        assert!(bus_bytes_per_s("all-reduce", 2, 1, 0.0).is_err());
    }

    #[test]
    fn calib_call_counts_split_the_buffer() {
        // 1 MiB of bf16 over 4 ranks: all-reduce passes all 524288 elements, all-gather each
        // rank's 131072.
        assert_eq!(call_count("all-reduce", 4, 1 << 20, 2), Some(1 << 19));
        assert_eq!(call_count("all-gather", 4, 1 << 20, 2), Some(1 << 17));
        assert_eq!(call_count("all-to-all", 3, 1 << 20, 2), None);
        assert_eq!(call_count("all-reduce", 4, 3, 2), None);
    }
}
