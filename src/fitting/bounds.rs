//! Physical bounds on measurements read from disk (kernel measurement files, kernel lists):
//! what no GPU run can produce is refused in one line naming the entry, before anything is
//! fitted or priced (`config::limits` holds every bound):
//!
//! - **shapes** within the documented limits (GEMM m, n, k and attention tokens up to
//!   [`MAX_KERNEL_DIM`], operands within [`MAX_KERNEL_BYTES`]), K/V heads that divide the query
//!   heads;
//! - **times** from a clock tick to a day ([`MEASURED_TIME_RANGE_S`]);
//! - **rates** no faster than any profile may describe ([`PROFILE_RATE_RANGE`]) and — with the
//!   profile the file is fitted onto or priced with ([`check_against`]) — no faster than its
//!   peak FLOP/s by more than [`MEASURED_PEAK_MARGIN`] (every attention implementation runs on
//!   the same tensor cores, so the GPU's peak bounds each of them), nor its HBM rate by more
//!   than [`MEASURED_BANDWIDTH_FACTOR`] for copies and element-wise passes;
//! - **repeats**: one shape timed more than once (the slowdown experiment's GEMMs apart: they
//!   are timed their own way, beside traffic on purpose), slowest within [`MAX_REPEAT_SPREAD`]
//!   of the fastest;
//! - **links**: a point-to-point message between two different devices, a collective of a
//!   known operation over 2 to [`MAX_GPUS`] ranks, a bus bandwidth that is a rate.
//!
//! The file walks its entries (`measurements`, `price`); this module holds the bounds. Depends on
//! `config` (limits, the profile), `schedule`'s kernel shapes and `cost::gemm`'s peak per GEMM
//! dtype.

use std::collections::HashMap;

use crate::config::limits::{
    check_text, MAX_GPUS, MAX_KERNEL_BATCH, MAX_KERNEL_BYTES, MAX_KERNEL_DIM, MAX_KERNEL_HEAD_DIM,
    MAX_PROFILE_LATENCY_S, MAX_REPEAT_SPREAD, MEASURED_BANDWIDTH_FACTOR, MEASURED_PEAK_MARGIN,
    MEASURED_TIME_RANGE_S, PROFILE_RATE_RANGE,
};
use crate::config::Hardware;
use crate::schedule::KernelShape;

/// `Err((entry, what is wrong))`: the entry as the file names it (`gemm[3].s`).
pub type Refusal = (String, String);

/// A shape within the documented limits (module docs).
pub fn check_shape(shape: &KernelShape) -> Result<(), String> {
    let dim = |what: &str, v: u64, max: u64| {
        if v == 0 || v > max {
            Err(format!("{what} is {v}; it must be from 1 to {max}"))
        } else {
            Ok(())
        }
    };
    match shape {
        KernelShape::Gemm(g) => {
            dim("batch", g.batch, MAX_KERNEL_BATCH)?;
            for (what, v) in [("m", g.m), ("n", g.n), ("k", g.k)] {
                dim(what, v, MAX_KERNEL_DIM)?;
            }
        }
        KernelShape::Attention(a) => {
            dim("batch", a.batch, MAX_KERNEL_BATCH)?;
            dim("heads", a.heads, crate::config::limits::MAX_HEADS)?;
            dim("kv_heads", a.kv_heads, a.heads)?;
            if a.heads % a.kv_heads != 0 {
                return Err(format!(
                    "{} K/V heads do not divide the {} query heads (each K/V head serves a \
                     whole group of query heads)",
                    a.kv_heads, a.heads
                ));
            }
            dim("q_tokens", a.q_tokens, MAX_KERNEL_DIM)?;
            dim("kv_tokens", a.kv_tokens, MAX_KERNEL_DIM)?;
            dim("head_dim", a.head_dim, MAX_KERNEL_HEAD_DIM)?;
        }
        KernelShape::Copy { bytes } | KernelShape::Elementwise { bytes } => {
            if *bytes == 0 {
                return Err("bytes must be positive".into());
            }
        }
    }
    if shape.bytes() > 2.0 * MAX_KERNEL_BYTES {
        return Err(format!(
            "it moves {:.3e} bytes, more than any device holds (2^40 per operand)",
            shape.bytes()
        ));
    }
    Ok(())
}

/// A measured time: finite, from a clock tick to a day.
pub fn check_time(t: f64) -> Result<(), String> {
    let (lo, hi) = MEASURED_TIME_RANGE_S;
    if t.is_finite() && (lo..=hi).contains(&t) {
        Ok(())
    } else {
        Err(format!(
            "{t:e} s is not a measured time (from {lo:e} s, a clock tick, to {hi} s)"
        ))
    }
}

/// A kernel's time against every profile: its FLOP/s and bytes/s within what a profile may
/// describe at all.
pub fn check_rate(shape: &KernelShape, t: f64) -> Result<(), String> {
    let hi = PROFILE_RATE_RANGE.1;
    let (flops, bytes) = (shape.flops() / t, shape.bytes() / t);
    if flops > hi {
        return Err(format!(
            "{flops:.3e} FLOP/s in {t:e} s: faster than any GPU ({hi:e} FLOP/s)"
        ));
    }
    if bytes > hi {
        return Err(format!(
            "{bytes:.3e} B/s in {t:e} s: faster than any memory ({hi:e} B/s)"
        ));
    }
    Ok(())
}

/// A kernel's time against the profile `hw` it is fitted onto or priced with (module docs).
pub fn check_against(hw: &Hardware, shape: &KernelShape, t: f64) -> Result<(), String> {
    // An FP8 GEMM against the FP8 peak (`kernels` prices and compares such calls).
    let peak = match shape {
        KernelShape::Gemm(g) => crate::cost::gemm::peak_flops_per_s(hw, g.dtype),
        _ => hw.gpu.peak_bf16_flops_per_s.value,
    };
    let flops = shape.flops() / t;
    if flops > peak * (1.0 + MEASURED_PEAK_MARGIN) {
        return Err(format!(
            "{flops:.3e} FLOP/s in {t:e} s, {:.1}× the peak of '{}' ({peak:.3e} FLOP/s): no \
             kernel runs faster than its GPU",
            flops / peak,
            hw.name
        ));
    }
    if matches!(
        shape,
        KernelShape::Copy { .. } | KernelShape::Elementwise { .. }
    ) {
        let hbm = hw.gpu.hbm_bytes_per_s.value;
        let rate = shape.bytes() / t;
        if rate > hbm * MEASURED_BANDWIDTH_FACTOR {
            return Err(format!(
                "{rate:.3e} B/s in {t:e} s, {:.1}× the HBM rate of '{}' ({hbm:.3e} B/s; at \
                 most {MEASURED_BANDWIDTH_FACTOR}×, what a buffer in L2 reaches)",
                rate / hbm,
                hw.name
            ));
        }
    }
    Ok(())
}

/// One shape timed more than once: slowest within [`MAX_REPEAT_SPREAD`] of the fastest. The
/// `kernels` are (entry, shape, seconds); the refusal names the fastest and the slowest.
pub fn check_repeats(kernels: &[(String, KernelShape, f64)]) -> Result<(), Refusal> {
    let mut by_shape: HashMap<KernelShape, (usize, usize)> = HashMap::new();
    for (i, (_, shape, t)) in kernels.iter().enumerate() {
        let e = by_shape.entry(*shape).or_insert((i, i));
        if *t < kernels[e.0].2 {
            e.0 = i;
        }
        if *t > kernels[e.1].2 {
            e.1 = i;
        }
    }
    let mut worst: Vec<(usize, usize)> = by_shape
        .into_values()
        .filter(|&(lo, hi)| kernels[hi].2 > MAX_REPEAT_SPREAD * kernels[lo].2)
        .collect();
    worst.sort_unstable();
    match worst.first() {
        Some(&(lo, hi)) => Err((
            kernels[hi].0.clone(),
            format!(
                "{:e} s, {:.1}× the {:e} s of the same kernel at {} (one shape timed twice \
                 must agree within {MAX_REPEAT_SPREAD}×)",
                kernels[hi].2,
                kernels[hi].2 / kernels[lo].2,
                kernels[lo].2,
                kernels[lo].0
            ),
        )),
        None => Ok(()),
    }
}

/// A host time per eager op: from a clock tick to a latency a profile may hold.
pub fn check_host_op(t: f64) -> Result<(), String> {
    let (lo, _) = MEASURED_TIME_RANGE_S;
    if t.is_finite() && t >= lo && t <= MAX_PROFILE_LATENCY_S {
        Ok(())
    } else {
        Err(format!(
            "{t:e} s is not a host time per op (from {lo:e} to {MAX_PROFILE_LATENCY_S} s)"
        ))
    }
}

/// A free-text field of a file (`what`, a device name, `via`): within `max` characters, no
/// control characters.
pub fn check_words(entry: &str, text: &str, max: usize) -> Result<(), Refusal> {
    check_text(text, max).map_err(|why| (entry.to_string(), why))
}

/// A message's size and time (`entry.bytes`, `entry.s`): 1 byte to 2^40, a measured time, and
/// a rate within what a profile may describe.
fn check_transfer(entry: &str, bytes: u64, t: f64) -> Result<(), Refusal> {
    if bytes == 0 || bytes as f64 > MAX_KERNEL_BYTES {
        return Err((format!("{entry}.bytes"), format!("{bytes}; from 1 to 2^40")));
    }
    check_time(t).map_err(|why| (format!("{entry}.s"), why))?;
    let rate = bytes as f64 / t;
    if rate > PROFILE_RATE_RANGE.1 {
        return Err((
            format!("{entry}.s"),
            format!(
                "{rate:.3e} B/s: faster than any link ({:e} B/s)",
                PROFILE_RATE_RANGE.1
            ),
        ));
    }
    Ok(())
}

/// A point-to-point message: between two different devices numbered below [`MAX_GPUS`], and
/// a transfer ([`check_transfer`]).
pub fn check_message(entry: &str, from: u32, to: u32, bytes: u64, t: f64) -> Result<(), Refusal> {
    if from == to {
        return Err((
            entry.to_string(),
            format!("from device {from} to itself: a message joins two devices"),
        ));
    }
    if u64::from(from.max(to)) >= MAX_GPUS {
        return Err((
            entry.to_string(),
            format!(
                "device {}; devices are numbered below {MAX_GPUS}",
                from.max(to)
            ),
        ));
    }
    check_transfer(entry, bytes, t)
}

/// The collectives a file may hold.
pub const COLLECTIVE_OPS: [&str; 5] = [
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "broadcast",
];

/// A collective: a known operation over 2 to [`MAX_GPUS`] ranks, a bus bandwidth that is a
/// rate, and a transfer ([`check_transfer`]).
pub fn check_collective(
    entry: &str,
    op: &str,
    ranks: u32,
    bytes: u64,
    t: f64,
    bus_bytes_per_s: Option<f64>,
) -> Result<(), Refusal> {
    if !COLLECTIVE_OPS.contains(&op) {
        return Err((
            format!("{entry}.op"),
            format!(
                "\"{}\" is not one of {}",
                op.escape_debug(),
                COLLECTIVE_OPS.join(", ")
            ),
        ));
    }
    if ranks < 2 || u64::from(ranks) > MAX_GPUS {
        return Err((
            format!("{entry}.ranks"),
            format!("{ranks}; a collective runs over 2 to {MAX_GPUS} ranks"),
        ));
    }
    if bus_bytes_per_s.is_some_and(|b| !(b.is_finite() && b > 0.0 && b <= PROFILE_RATE_RANGE.1)) {
        return Err((
            format!("{entry}.bus_bytes_per_s"),
            "not a rate in bytes per second".into(),
        ));
    }
    check_transfer(entry, bytes, t)
}

/// Every timed kernel of a file — (entry, shape, seconds), its entries named as the file names
/// them — within the bounds that need no profile: shapes, times, rates, and repeats among
/// those `repeats` says are one kind of timing.
pub fn check_kernels(
    kernels: &[(String, KernelShape, f64)],
    repeats: impl Fn(&str) -> bool,
) -> Result<(), Refusal> {
    for (entry, shape, t) in kernels {
        let shape_entry = entry.rsplit_once('.').map_or(entry.as_str(), |(e, _)| e);
        check_shape(shape).map_err(|why| (shape_entry.to_string(), why))?;
        check_time(*t)
            .and_then(|()| check_rate(shape, *t))
            .map_err(|why| (entry.clone(), why))?;
    }
    let alike: Vec<_> = kernels
        .iter()
        .filter(|(entry, _, _)| repeats(entry))
        .cloned()
        .collect();
    check_repeats(&alike)
}

/// Every timed kernel (entry, shape, seconds) against the profile `hw` it is fitted onto or
/// priced with ([`check_against`]).
pub fn check_kernels_against(
    hw: &Hardware,
    kernels: &[(String, KernelShape, f64)],
) -> Result<(), Refusal> {
    for (entry, shape, t) in kernels {
        check_against(hw, shape, *t).map_err(|why| (entry.clone(), why))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fitting::measurements::KernelMeasurements;
    use crate::schedule::{Attention, AttnPass};

    fn shared() -> KernelMeasurements {
        KernelMeasurements::read(
            &std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("hardware-profiles/measurements/h200-pytorch-2026-11-30.json"),
        )
        .unwrap()
    }

    /// Every bundled measurement file passes, against the profile it was fitted onto; each
    /// bound refuses what breaks it.
    #[test]
    fn real_files_pass_and_each_bound_can_refuse() {
        let m = shared();
        let hw = crate::config::load_hardware("hgx-h200").unwrap();
        let path = std::path::Path::new("m.json");
        m.validate(path).unwrap();
        m.check_against(&hw, path).unwrap();
        let e = |m: &KernelMeasurements| match m.validate(path).unwrap_err() {
            crate::error::Error::InvalidField { field, message, .. } => (field, message),
            other => panic!("{other}"),
        };
        let mut x = m.clone();
        x.gemm[0].s = 5e-324;
        assert_eq!(e(&x).0, "gemm[0].s");
        let mut x = m.clone();
        x.gemm[0].m = 1 << 40;
        assert!(e(&x).1.contains("m is"), "{:?}", e(&x));
        let mut x = m.clone();
        x.gemm.push(x.gemm[0].clone());
        x.gemm.last_mut().unwrap().s *= 100.0;
        assert!(e(&x).1.contains("same kernel at gemm[0].s"), "{:?}", e(&x));
        let mut x = m.clone();
        x.attention[0].kv_heads = Some(x.attention[0].heads + 1);
        assert_eq!(e(&x).0, "attention[0]");
        let mut x = m.clone();
        x.attention[0].kv_heads = Some(3);
        x.attention[0].heads = 32;
        assert!(e(&x).1.contains("do not divide"), "{:?}", e(&x));
        // A GEMM at 10^4 × the peak: within any profile's range, not within this GPU's.
        let mut x = m.clone();
        x.gemm[0].s /= 1e4;
        let e = x.check_against(&hw, path).unwrap_err().to_string();
        assert!(
            e.contains("gemm[0].s") && e.contains("faster than its GPU"),
            "{e}"
        );
        let mut x = m.clone();
        x.copy[0].copy_s = Some(1e-9);
        assert!(x.check_against(&hw, path).is_err());
    }

    #[test]
    fn shapes_and_times_have_bounds() {
        let a = |heads, kv_heads| {
            KernelShape::Attention(Attention {
                batch: 1,
                heads,
                kv_heads,
                q_tokens: 128,
                kv_tokens: 128,
                head_dim: 128,
                causal: false,
                pass: AttnPass::Fwd,
            })
        };
        assert!(check_shape(&a(32, 8)).is_ok());
        assert!(check_shape(&a(8, 32)).is_err());
        assert!(check_shape(&a(32, 5)).is_err());
        assert!(check_shape(&KernelShape::gemm(1 << 30, 1, 1)).is_err());
        assert!(check_time(1e-12).is_err() && check_time(1e300).is_err());
        assert!(check_time(f64::NAN).is_err() && check_time(1e-3).is_ok());
        assert!(check_rate(&KernelShape::Copy { bytes: 1 << 30 }, 1e-12).is_err());
    }
}
