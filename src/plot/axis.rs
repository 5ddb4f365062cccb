//! Axis ranges, tick positions and human tick labels.
//!
//! Charts are drawn in "plot space": the data value on a linear axis, log2 or log10 of it on a
//! log axis. Ticks are chosen here (in data space, so they land on round values: 4k, 8k, 10 GiB,
//! 1 ms) and handed to plotters as fixed key points with their labels.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;

/// How the numbers on an axis are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AxisFormat {
    /// A plain number (degree p, a count): `8`, `0.25`.
    #[default]
    Plain,
    /// A number of tokens, binary prefixes as on the command line: `4k` = 4096, `1M` = 2^20.
    Tokens,
    /// Bytes, binary units: `512 MiB`, `80 GiB`.
    Bytes,
    /// Seconds: `1.5 s`, `20 ms`, `300 µs`.
    Seconds,
    /// A fraction printed as a percentage: `0.4` → `40%`.
    Percent,
    /// Tokens per second, decimal prefixes: `12k/s`, `1.5M/s`.
    TokensPerSecond,
}

/// How data values map to plot space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scale {
    Linear,
    Log2,
    Log10,
}

impl Scale {
    pub(crate) fn to_plot(self, v: f64) -> f64 {
        match self {
            Scale::Linear => v,
            Scale::Log2 => v.log2(),
            Scale::Log10 => v.log10(),
        }
    }

    fn to_data(self, p: f64) -> f64 {
        match self {
            Scale::Linear => p,
            Scale::Log2 => p.exp2(),
            Scale::Log10 => 10f64.powf(p),
        }
    }

    /// Whether `v` can be drawn on this scale.
    pub(crate) fn accepts(self, v: f64) -> bool {
        v.is_finite() && (self == Scale::Linear || v > 0.0)
    }
}

impl AxisFormat {
    /// The log scale that suits values of this kind: powers of two for tokens and bytes (4k, 8k,
    /// …; 1 GiB, 2 GiB, …), powers of ten for the rest.
    pub(crate) fn log_scale(self) -> Scale {
        match self {
            AxisFormat::Tokens | AxisFormat::Bytes => Scale::Log2,
            _ => Scale::Log10,
        }
    }

    /// The unit (divisor, suffix) for values of about `magnitude`.
    fn unit(self, magnitude: f64) -> (f64, &'static str) {
        let m = magnitude.abs();
        match self {
            AxisFormat::Plain => (1.0, ""),
            AxisFormat::Percent => (0.01, "%"),
            AxisFormat::Tokens => pick(m, &[(1048576.0, "M"), (1024.0, "k")], (1.0, "")),
            AxisFormat::Bytes => pick(
                m,
                &[
                    (1099511627776.0, " TiB"),
                    (1073741824.0, " GiB"),
                    (1048576.0, " MiB"),
                    (1024.0, " KiB"),
                ],
                (1.0, " B"),
            ),
            AxisFormat::Seconds => pick(
                m,
                &[(1.0, " s"), (1e-3, " ms"), (1e-6, " µs")],
                (1e-9, " ns"),
            ),
            AxisFormat::TokensPerSecond => {
                pick(m, &[(1e9, "G/s"), (1e6, "M/s"), (1e3, "k/s")], (1.0, "/s"))
            }
        }
    }

    /// One value printed in the unit that suits it, with at most two decimals: `1.5 GiB`, `4k`,
    /// `250 µs`.
    pub fn format_value(self, v: f64) -> String {
        if v == 0.0 {
            return "0".to_string();
        }
        let (div, suffix) = self.unit(v);
        format!("{}{suffix}", trim(&format!("{:.2}", v / div)))
    }
}

fn pick(
    m: f64,
    units: &[(f64, &'static str)],
    smallest: (f64, &'static str),
) -> (f64, &'static str) {
    units
        .iter()
        .copied()
        .find(|&(div, _)| m >= div)
        .unwrap_or(smallest)
}

/// Drops trailing zeros of a decimal: `2.50` → `2.5`, `3.00` → `3`, `-0` → `0`.
fn trim(s: &str) -> String {
    let t = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    };
    if t == "-0" {
        "0".to_string()
    } else {
        t.to_string()
    }
}

/// 1, 2 or 5 times a power of ten, the smallest at least `x`.
fn nice_step(x: f64) -> f64 {
    let p = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&s| s >= x * (1.0 - 1e-9))
        .unwrap_or(10.0 * p)
}

/// An axis: its scale, its range in plot space, and its ticks (plot-space position, label).
#[derive(Debug, Clone)]
pub(crate) struct Axis {
    pub(crate) scale: Scale,
    pub(crate) lo: f64,
    pub(crate) hi: f64,
    pub(crate) ticks: Vec<(f64, String)>,
}

impl Axis {
    /// An axis covering data values `data_lo..=data_hi` (which `scale` must accept), with a small
    /// margin at both ends, `top_pad` (a fraction of the span) added at the top, and 0 as the
    /// bottom of a linear axis over non-negative data when `from_zero` is set.
    pub(crate) fn new(
        format: AxisFormat,
        scale: Scale,
        data_lo: f64,
        data_hi: f64,
        from_zero: bool,
        top_pad: f64,
    ) -> Axis {
        let (mut lo, mut hi) = (scale.to_plot(data_lo), scale.to_plot(data_hi));
        if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
            // One value: give it room (a factor of 2 either side on a log axis).
            let half = match scale {
                Scale::Linear if lo != 0.0 => lo.abs() * 0.1,
                Scale::Linear => 1.0,
                Scale::Log2 => 1.0,
                Scale::Log10 => 0.3,
            };
            lo -= half;
            hi += half;
        }
        // The span the margins are relative to: from 0 when the axis starts at 0.
        let (plot_lo, span) = if scale == Scale::Linear && from_zero && data_lo >= 0.0 {
            (0.0, hi)
        } else {
            (lo - 0.04 * (hi - lo), hi - lo)
        };
        let plot_hi = hi + (0.04 + top_pad) * span;
        let ticks = match scale {
            Scale::Linear => linear_ticks(format, plot_lo, plot_hi),
            Scale::Log2 | Scale::Log10 => log_ticks(format, scale, plot_lo, plot_hi),
        };
        Axis {
            scale,
            lo: plot_lo,
            hi: plot_hi,
            ticks,
        }
    }

    /// The plotters coordinate for this axis.
    pub(crate) fn coord(&self) -> Keyed {
        Keyed::new(
            self.lo,
            self.hi,
            self.ticks.iter().map(|&(p, _)| p).collect(),
        )
    }

    /// The label of the tick at plot-space position `p` (the nearest one).
    pub(crate) fn label(&self, p: f64) -> String {
        self.ticks
            .iter()
            .min_by(|a, b| (a.0 - p).abs().total_cmp(&(b.0 - p).abs()))
            .map(|(_, l)| l.clone())
            .unwrap_or_default()
    }

    /// The longest tick label (for sizing the label area).
    pub(crate) fn longest_label(&self) -> &str {
        self.ticks
            .iter()
            .map(|(_, l)| l.as_str())
            .max_by_key(|l| l.chars().count())
            .unwrap_or("")
    }
}

/// A linear plotters coordinate over `lo..hi` whose grid lines and ticks are exactly `keys`
/// (plotters' own `WithKeyPoints` cannot be used with custom label formatters on `f64`).
pub(crate) struct Keyed {
    inner: RangedCoordf64,
    keys: Vec<f64>,
}

impl Keyed {
    pub(crate) fn new(lo: f64, hi: f64, keys: Vec<f64>) -> Keyed {
        Keyed {
            inner: (lo..hi).into(),
            keys,
        }
    }
}

impl Ranged for Keyed {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.keys.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }
}

/// About six round ticks between `lo` and `hi` (data space = plot space), all in one unit chosen
/// by the span, with as many decimals as the step needs.
pub(crate) fn linear_ticks(format: AxisFormat, lo: f64, hi: f64) -> Vec<(f64, String)> {
    linear_ticks_n(format, lo, hi, 6.0)
}

/// Like [`linear_ticks`], aiming at `about` ticks (the step is the next 1-2-5 value up).
pub(crate) fn linear_ticks_n(
    format: AxisFormat,
    lo: f64,
    hi: f64,
    about: f64,
) -> Vec<(f64, String)> {
    let span = hi - lo;
    if !span.is_finite() || span <= 0.0 {
        return vec![];
    }
    // The unit suits the values, unless they are far larger than the span (a window late in a
    // timeline): then it suits ten spans, so that labels stay short (1202 ms, not 1.202 s).
    let (div, suffix) = format.unit(span.max(hi.abs().min(span * 10.0)));
    let step_u = nice_step(span / div / about.max(1.0));
    let decimals = (-step_u.log10().floor()).clamp(0.0, 9.0) as usize;
    let first = (lo / div / step_u).ceil() as i64;
    let last = (hi / div / step_u).floor() as i64;
    (first..=last)
        .map(|k| {
            let v_u = k as f64 * step_u;
            let label = trim_fixed(&format!("{v_u:.decimals$}"));
            (v_u * div, format!("{label}{suffix}"))
        })
        .collect()
}

/// `-0.0` → `0.0` and friends, keeping the fixed number of decimals otherwise.
fn trim_fixed(s: &str) -> String {
    if s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.') {
        s[1..].to_string()
    } else {
        s.to_string()
    }
}

/// Ticks at powers of the base inside `lo..=hi` (plot space), thinned to at most ten; when the
/// range holds fewer than two powers, round linear ticks instead (1-2-5 on log10).
fn log_ticks(format: AxisFormat, scale: Scale, lo: f64, hi: f64) -> Vec<(f64, String)> {
    let (first, last) = (lo.ceil() as i64, hi.floor() as i64);
    let count = (last - first + 1).max(0);
    let mut values: Vec<f64> = if count > 10 {
        let stride = (count + 9) / 10;
        (first..=last)
            .filter(|e| (e - first) % stride == 0)
            .map(|e| scale.to_data(e as f64))
            .collect()
    } else {
        (first..=last).map(|e| scale.to_data(e as f64)).collect()
    };
    if scale == Scale::Log10 && count <= 2 {
        values = (first - 1..=last)
            .flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e as i32)))
            .filter(|&v| {
                let p = v.log10();
                p >= lo - 1e-12 && p <= hi + 1e-12
            })
            .collect();
    }
    if values.len() < 2 {
        let (dlo, dhi) = (scale.to_data(lo), scale.to_data(hi));
        return linear_ticks(format, dlo, dhi)
            .into_iter()
            .filter(|&(v, _)| v > 0.0)
            .map(|(v, l)| (scale.to_plot(v), l))
            .collect();
    }
    values
        .into_iter()
        .map(|v| (scale.to_plot(v), format.format_value(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(ticks: &[(f64, String)]) -> Vec<&str> {
        ticks.iter().map(|(_, l)| l.as_str()).collect()
    }

    #[test]
    fn values_in_human_units() {
        assert_eq!(AxisFormat::Tokens.format_value(4096.0), "4k");
        assert_eq!(AxisFormat::Tokens.format_value(524288.0), "512k");
        assert_eq!(AxisFormat::Tokens.format_value(1048576.0), "1M");
        assert_eq!(AxisFormat::Tokens.format_value(1000.0), "1000");
        assert_eq!(
            AxisFormat::Bytes.format_value(80.0 * 1073741824.0),
            "80 GiB"
        );
        assert_eq!(AxisFormat::Bytes.format_value(536870912.0), "512 MiB");
        assert_eq!(AxisFormat::Seconds.format_value(0.02), "20 ms");
        assert_eq!(AxisFormat::Seconds.format_value(2.5e-4), "250 µs");
        assert_eq!(AxisFormat::Seconds.format_value(1.5), "1.5 s");
        assert_eq!(AxisFormat::Percent.format_value(0.417), "41.7%");
        assert_eq!(AxisFormat::TokensPerSecond.format_value(12000.0), "12k/s");
        assert_eq!(AxisFormat::Plain.format_value(8.0), "8");
        assert_eq!(AxisFormat::Plain.format_value(0.0), "0");
    }

    #[test]
    fn log2_token_axis_has_power_of_two_ticks() {
        let a = Axis::new(
            AxisFormat::Tokens,
            Scale::Log2,
            4096.0,
            524288.0,
            false,
            0.0,
        );
        assert_eq!(
            labels(&a.ticks),
            ["4k", "8k", "16k", "32k", "64k", "128k", "256k", "512k"]
        );
        assert!(a.lo < 12.0 && a.hi > 19.0);
        assert_eq!(a.label(15.0), "32k");
    }

    #[test]
    fn degree_axis() {
        let a = Axis::new(AxisFormat::Plain, Scale::Log2, 1.0, 16.0, false, 0.0);
        assert_eq!(labels(&a.ticks), ["1", "2", "4", "8", "16"]);
    }

    #[test]
    fn linear_byte_axis_in_gib_from_zero() {
        let gib = 1073741824.0;
        let a = Axis::new(
            AxisFormat::Bytes,
            Scale::Linear,
            3.0 * gib,
            80.0 * gib,
            true,
            0.0,
        );
        assert_eq!(a.lo, 0.0);
        let l = labels(&a.ticks);
        assert_eq!(l[0], "0 GiB");
        assert!(l.contains(&"80 GiB"), "{l:?}");
        assert!(l.len() >= 4 && l.len() <= 12, "{l:?}");
    }

    #[test]
    fn linear_seconds_keep_one_unit_and_enough_decimals() {
        let t = linear_ticks(AxisFormat::Seconds, 1.2, 1.2102);
        let l = labels(&t);
        assert!(l.iter().all(|s| s.ends_with(" ms")), "{l:?}");
        assert!(l.contains(&"1202 ms"), "{l:?}");
        let t = linear_ticks(AxisFormat::Seconds, 0.0, 0.0015);
        assert!(labels(&t).contains(&"0.5 ms"), "{:?}", labels(&t));
    }

    #[test]
    fn log10_axis_on_a_narrow_range_uses_1_2_5() {
        let a = Axis::new(AxisFormat::Seconds, Scale::Log10, 0.011, 0.09, false, 0.0);
        assert_eq!(labels(&a.ticks), ["20 ms", "50 ms"]);
        let a = Axis::new(AxisFormat::Seconds, Scale::Log10, 0.001, 100.0, false, 0.0);
        assert_eq!(
            labels(&a.ticks),
            ["1 ms", "10 ms", "100 ms", "1 s", "10 s", "100 s"]
        );
    }

    #[test]
    fn single_value_and_wide_log_ranges() {
        let a = Axis::new(AxisFormat::Tokens, Scale::Log2, 8192.0, 8192.0, false, 0.0);
        assert!(labels(&a.ticks).contains(&"8k"));
        let a = Axis::new(AxisFormat::Bytes, Scale::Log2, 1.0, 1e15, false, 0.0);
        assert!(a.ticks.len() <= 10 && a.ticks.len() >= 5);
        let a = Axis::new(AxisFormat::Plain, Scale::Linear, 5.0, 5.0, false, 0.0);
        assert!(!a.ticks.is_empty());
    }
}
