//! Predicted against measured, row by row, and the check an operator wants on a new node:
//! does the measured curve fall short of the profile? The verdict is computed from the data —
//! the median, over the sizes from [`VERDICT_FROM_BYTES`] up, of how far the measured bus
//! bandwidth falls below the predicted — and says "short" when that exceeds
//! [`SHORTFALL_THRESHOLD`], naming the size from which every size is that far below.

use serde::Serialize;

/// A measured curve whose median shortfall exceeds this fraction is flagged. Healthy
/// published runs land within about 10% of their profiles (README, `collectives`); an
/// unhealthy fabric or a misconfigured run (NVLS off, a NIC at a quarter of its speed) sits
/// 30–70% below.
pub const SHORTFALL_THRESHOLD: f64 = 0.25;

/// The verdict looks at sizes from 64 MiB up, where the curve approaches its plateau and
/// latency no longer dominates.
pub const VERDICT_FROM_BYTES: u64 = 64 << 20;

/// Where a measured curve stands against the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Standing {
    /// Within the threshold of the model.
    Healthy,
    /// Below the model by more than the threshold.
    Short,
    /// Above the model by more than the threshold: the profile underestimates the fabric.
    Above,
    /// No size from [`VERDICT_FROM_BYTES`] up to judge.
    NoVerdict,
}

/// The verdict on a measured curve.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// Where it stands.
    pub standing: Standing,
    /// Median over the judged sizes of 1 − measured/predicted bus bandwidth (negative: faster
    /// than predicted).
    pub median_shortfall: f64,
    /// Median over the judged sizes of |predicted/measured − 1|.
    pub median_abs_error: f64,
    /// Sizes judged.
    pub sizes: usize,
    /// The threshold.
    pub threshold: f64,
    /// The smallest size from which every measured size is more than the threshold below the
    /// model (short curves only).
    pub short_from_bytes: Option<u64>,
    /// The sentence.
    pub text: String,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Human size: `64 MiB`, `8 GiB`, `512 B`.
pub fn human_bytes(b: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{} {unit}", b >> shift);
        }
    }
    format!("{b} B")
}

/// The verdict on rows of (size, predicted busbw, measured busbw), in size order.
pub fn verdict(rows: &[(u64, f64, f64)]) -> Verdict {
    let judged: Vec<&(u64, f64, f64)> = rows
        .iter()
        .filter(|r| r.0 >= VERDICT_FROM_BYTES && r.1 > 0.0 && r.2 > 0.0)
        .collect();
    let t = SHORTFALL_THRESHOLD;
    if judged.is_empty() {
        return Verdict {
            standing: Standing::NoVerdict,
            median_shortfall: f64::NAN,
            median_abs_error: f64::NAN,
            sizes: 0,
            threshold: t,
            short_from_bytes: None,
            text: format!(
                "no verdict: the log has no size from {} up",
                human_bytes(VERDICT_FROM_BYTES)
            ),
        };
    }
    let shortfall = median(judged.iter().map(|r| 1.0 - r.2 / r.1).collect());
    let abs = median(judged.iter().map(|r| (r.1 / r.2 - 1.0).abs()).collect());
    // The smallest size from which every size (of the whole log) is more than t below.
    let mut from = None;
    for r in rows.iter().rev() {
        if r.1 > 0.0 && r.2 > 0.0 && 1.0 - r.2 / r.1 > t {
            from = Some(r.0);
        } else if r.1 > 0.0 && r.2 > 0.0 {
            break;
        }
    }
    let over = format!(
        "median over the {} sizes from {} up",
        judged.len(),
        human_bytes(VERDICT_FROM_BYTES)
    );
    let (standing, text) = if shortfall > t {
        (
            Standing::Short,
            format!(
                "below the model by {:.0}% ({over}{}): an unhealthy fabric or a misconfiguration \
                 (more than {:.0}% below is flagged)",
                100.0 * shortfall,
                from.map_or(String::new(), |b| format!(
                    "; every size from {} up is more than {:.0}% below",
                    human_bytes(b),
                    100.0 * t
                )),
                100.0 * t
            ),
        )
    } else if -shortfall > t {
        (
            Standing::Above,
            format!(
                "above the model by {:.0}% ({over}): the profile underestimates this fabric \
                 (fit it: calibrate --fit-links)",
                -100.0 * shortfall
            ),
        )
    } else {
        (
            Standing::Healthy,
            format!(
                "healthy: measured busbw within {:.1}% of the model ({over}; {} by {:.1}%); a \
                 shortfall of more than {:.0}% would be flagged",
                100.0 * abs,
                if shortfall >= 0.0 { "below" } else { "above" },
                100.0 * shortfall.abs(),
                100.0 * t
            ),
        )
    };
    Verdict {
        standing,
        median_shortfall: shortfall,
        median_abs_error: abs,
        sizes: judged.len(),
        threshold: t,
        short_from_bytes: if standing == Standing::Short {
            from
        } else {
            None
        },
        text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1 << 20;

    #[test]
    fn a_curve_far_below_the_model_is_flagged_and_a_close_one_is_not() {
        let healthy = [
            (16 * M, 300.0, 250.0),
            (64 * M, 450.0, 420.0),
            (1024 * M, 480.0, 470.0),
        ];
        let v = verdict(&healthy);
        assert_eq!(v.standing, Standing::Healthy, "{}", v.text);
        let short = [
            (8 * M, 300.0, 250.0),
            (16 * M, 400.0, 120.0),
            (64 * M, 450.0, 140.0),
            (1024 * M, 480.0, 150.0),
        ];
        let v = verdict(&short);
        assert_eq!(v.standing, Standing::Short);
        assert_eq!(v.short_from_bytes, Some(16 * M));
        assert!(
            v.text.contains("below the model by 69%") && v.text.contains("from 16 MiB"),
            "{}",
            v.text
        );
        let fast = [(64 * M, 100.0, 200.0)];
        assert_eq!(verdict(&fast).standing, Standing::Above);
        assert_eq!(verdict(&[(M, 1.0, 1.0)]).standing, Standing::NoVerdict);
        assert_eq!(human_bytes(64 * M), "64 MiB");
        assert_eq!(human_bytes(1000), "1000 B");
    }
}
