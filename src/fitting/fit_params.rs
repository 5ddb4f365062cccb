//! What the kernel fit moves: each fitted parameter's profile field, the scale its search runs on
//! and the range it may take there (inside what profile validation allows, so no fit yields a
//! profile that is then refused), and the groups of parameters fitted together, kind by kind.
//! Part of the one fit ([`super::kernel_fit`]); depends on `config` and `schedule` only.

use super::measurements::Timing;
use crate::config::limits::{MAX_KERNEL_FIGURE, PROFILE_RATE_RANGE};
use crate::config::{Figure, Hardware};
use crate::schedule::KernelKind;

/// The smallest time (s) or byte count the fit gives: below it they are 0 for every purpose;
/// the floor keeps a parameter the data drives to zero from running off to 1e-300.
const TIME_FLOOR: f64 = 1e-9;

/// How far from 0 and 1 a fitted fraction stays.
const FRACTION_EDGE: f64 = 1e-9;

/// How a parameter is fitted: the scale its search runs on, and the range of values it may
/// take there — inside what the profile's validation allows the figure (`Hardware::validate`),
/// so that no fit can produce a profile that is then refused.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Scale {
    /// A rate (bytes per second), fitted as its log, within [`PROFILE_RATE_RANGE`].
    Rate,
    /// A time (s) or a byte count, fitted as its log, from [`TIME_FLOOR`] to below
    /// [`MAX_KERNEL_FIGURE`].
    Log,
    /// A fraction in (0, 1), fitted as its logit, [`FRACTION_EDGE`] from either end.
    Logit,
}

impl Scale {
    /// The values the fit may give the parameter.
    pub(super) fn range(self) -> (f64, f64) {
        match self {
            Scale::Rate => PROFILE_RATE_RANGE,
            Scale::Log => (TIME_FLOOR, MAX_KERNEL_FIGURE * (1.0 - f64::EPSILON)),
            Scale::Logit => (FRACTION_EDGE, 1.0 - FRACTION_EDGE),
        }
    }
    fn raw_x(self, v: f64) -> f64 {
        match self {
            Scale::Rate | Scale::Log => v.ln(),
            Scale::Logit => (v / (1.0 - v)).ln(),
        }
    }
    /// The range on the fit's own scale: the search is bounded there.
    pub(super) fn x_range(self) -> (f64, f64) {
        let (lo, hi) = self.range();
        (self.raw_x(lo), self.raw_x(hi))
    }
    pub(super) fn to_x(self, v: f64) -> f64 {
        let (lo, hi) = self.range();
        self.raw_x(v.clamp(lo, hi))
    }
    pub(super) fn value(self, x: f64) -> f64 {
        let (lo, hi) = self.range();
        let (xlo, xhi) = self.x_range();
        if x <= xlo {
            return lo;
        }
        if x >= xhi {
            return hi;
        }
        let v = match self {
            Scale::Rate | Scale::Log => x.exp(),
            Scale::Logit => 1.0 / (1.0 + (-x).exp()),
        };
        v.clamp(lo, hi)
    }
    /// Whether `v` is at (within rounding of) an edge of the range: `Some("lower")` or
    /// `Some("upper")`.
    pub(super) fn edge(self, v: f64) -> Option<&'static str> {
        let (lo, hi) = self.range();
        if v <= lo * (1.0 + 1e-9) {
            Some("lower")
        } else if v >= hi * (1.0 - 1e-9) {
            Some("upper")
        } else {
            None
        }
    }
}

/// The profile figure behind a dotted field name (only names [`groups`] lists: an optional
/// figure is asked for only when the profile has it).
pub(super) fn figure_mut<'a>(hw: &'a mut Hardware, field: &str) -> &'a mut Figure {
    let k = &mut hw.kernels;
    let present = |f: Option<&'a mut Figure>| {
        f.unwrap_or_else(|| unreachable!("{field} is listed only when the profile has it"))
    };
    match field {
        "gpu.hbm_bytes_per_s" => &mut hw.gpu.hbm_bytes_per_s,
        "kernels.host.isolated_gap_s" => &mut k.host.isolated_gap_s,
        "kernels.host.isolated_floor_s" => &mut k.host.isolated_floor_s,
        "kernels.memory.latency_s" => &mut k.memory.latency_s,
        "kernels.memory.elementwise_fraction" => &mut k.memory.elementwise_fraction,
        "kernels.gemm.mma_fraction" => &mut k.gemm.mma_fraction,
        "kernels.gemm.tile_s" => &mut k.gemm.tile_s,
        "kernels.gemm.call_s" => &mut k.gemm.call_s,
        "kernels.gemm.power_fraction" => present(k.gemm.power_fraction.as_mut()),
        "kernels.gemm.power_time_s" => present(k.gemm.power_time_s.as_mut()),
        other => {
            let (pass, name) = other
                .strip_prefix("kernels.attention_fwd.")
                .map(|n| (&mut k.attention_fwd, n))
                .or_else(|| {
                    other
                        .strip_prefix("kernels.attention_bwd.")
                        .map(|n| (&mut k.attention_bwd, n))
                })
                .unwrap_or_else(|| unreachable!("no profile field {other}"));
            if let Some(rest) = name.strip_prefix("tiles[d=") {
                let (d, f) = rest
                    .split_once("].")
                    .unwrap_or_else(|| unreachable!("no profile field {other}"));
                let d: u64 = d.parse().unwrap_or(0);
                let t = pass
                    .tiles
                    .iter_mut()
                    .find(|t| t.head_dim == d)
                    .unwrap_or_else(|| unreachable!("no profile field {other}"));
                return match f {
                    "mma_fraction" => &mut t.mma_fraction,
                    "solo_fraction" => &mut t.solo_fraction,
                    _ => unreachable!("no profile field {other}"),
                };
            }
            match name {
                "mma_fraction" => &mut pass.mma_fraction,
                "solo_fraction" => present(pass.solo_fraction.as_mut()),
                "tile_s" => &mut pass.tile_s,
                "call_s" => &mut pass.call_s,
                "extra_bytes_per_element" => &mut pass.extra_bytes_per_element,
                "isolated_extra_s" => &mut pass.isolated_extra_s,
                _ => unreachable!("no profile field {other}"),
            }
        }
    }
}

/// A group fitted together: the kinds whose samples fit it, and its parameters.
pub(super) type Group = (&'static [KernelKind], Vec<(String, Scale)>);

/// The groups fitted one after the other, with the parameters `hw` has: per attention kernel
/// (head dimension) its rate and its lone block's share of it.
pub(super) fn groups(timing: Timing, hw: &Hardware) -> Vec<Group> {
    let iso = timing == Timing::Isolated;
    let named = |v: &[(&str, Scale)]| -> Vec<(String, Scale)> {
        v.iter().map(|&(n, s)| (n.to_string(), s)).collect()
    };
    let mut memory = named(&[
        ("gpu.hbm_bytes_per_s", Scale::Rate),
        ("kernels.memory.latency_s", Scale::Log),
        ("kernels.memory.elementwise_fraction", Scale::Logit),
    ]);
    if iso {
        memory.push(("kernels.host.isolated_gap_s".into(), Scale::Log));
        memory.push(("kernels.host.isolated_floor_s".into(), Scale::Log));
    }
    let mut gemm = named(&[
        ("kernels.gemm.mma_fraction", Scale::Logit),
        ("kernels.gemm.tile_s", Scale::Log),
        ("kernels.gemm.call_s", Scale::Log),
    ]);
    if hw.kernels.gemm.power_fraction.is_some() {
        gemm.push(("kernels.gemm.power_fraction".into(), Scale::Logit));
        gemm.push(("kernels.gemm.power_time_s".into(), Scale::Log));
    }
    let attention = |pass: &str, a: &crate::config::AttentionModel| {
        let mut v: Vec<(String, Scale)> = Vec::new();
        if a.tiles.is_empty() {
            v.push((format!("kernels.{pass}.mma_fraction"), Scale::Logit));
            if a.solo_fraction.is_some() {
                v.push((format!("kernels.{pass}.solo_fraction"), Scale::Logit));
            }
        }
        for t in &a.tiles {
            for f in ["mma_fraction", "solo_fraction"] {
                v.push((
                    format!("kernels.{pass}.tiles[d={}].{f}", t.head_dim),
                    Scale::Logit,
                ));
            }
        }
        let mut rest = vec!["tile_s", "call_s", "extra_bytes_per_element"];
        if iso {
            rest.push("isolated_extra_s");
        }
        for f in rest {
            v.push((format!("kernels.{pass}.{f}"), Scale::Log));
        }
        v
    };
    vec![
        (&[KernelKind::Copy, KernelKind::Elementwise][..], memory),
        (&[KernelKind::Gemm][..], gemm),
        (
            &[KernelKind::AttentionFwd][..],
            attention("attention_fwd", &hw.kernels.attention_fwd),
        ),
        (
            &[KernelKind::AttentionBwd][..],
            attention("attention_bwd", &hw.kernels.attention_bwd),
        ),
    ]
}
