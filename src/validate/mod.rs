//! Checks METP's published claims (DESIGN §1, C1–C4) against the memory model, the analytic
//! model and the simulator, and says under which assumptions each holds.
//!
//! Input: the bundled models and hardware profiles. Output: [`Claim`]s with a verdict, the
//! numbers behind it and the assumptions that flip it; `report` renders them as `claims.md`,
//! `claims.json` and plots. Depends on `config`, `memory`, `search`, `analytic`, `sim`.

mod c1;
mod c2;
mod c3;
mod c4;
pub mod overlap;

use serde::Serialize;

use crate::error::Result;

/// How a claim fares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The tool's numbers support it as stated.
    Holds,
    /// It holds only under assumptions the claim does not state.
    HoldsUnderAssumptions,
    /// The numbers contradict it.
    DoesNotHold,
}

impl Verdict {
    /// Words for reports.
    pub fn words(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::HoldsUnderAssumptions => "holds only under stated assumptions",
            Verdict::DoesNotHold => "does not hold",
        }
    }
}

/// An assumption and what changing it does.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assumption {
    /// The assumption.
    pub name: String,
    /// What the tool computes when it changes.
    pub effect: String,
}

/// A table of numbers for the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Table {
    /// Caption.
    pub caption: String,
    /// Column headers.
    pub header: Vec<String>,
    /// Rows.
    pub rows: Vec<Vec<String>>,
}

/// A series for a claim's plot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlotSeries {
    /// Legend name.
    pub name: String,
    /// Points.
    pub points: Vec<(f64, f64)>,
}

/// A plot for a claim.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClaimPlot {
    /// File stem.
    pub file: String,
    /// Title.
    pub title: String,
    /// Axis labels.
    pub x_label: String,
    /// Axis labels.
    pub y_label: String,
    /// "bytes", "percent", "tokens", "ratio", "plain".
    pub y_kind: String,
    /// x axis kind: "plain" or "tokens".
    pub x_kind: String,
    /// Log scales.
    pub x_log2: bool,
    /// Log scales.
    pub y_log: bool,
    /// Horizontal reference line.
    pub reference: Option<(f64, String)>,
    /// Series.
    pub series: Vec<PlotSeries>,
}

/// One checked claim (DESIGN §8: `{id, claim, verdict, measured, assumptions}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Claim {
    /// "C1" … "C4".
    pub id: &'static str,
    /// The claim, as the abstract states it.
    pub claim: String,
    /// The verdict.
    pub verdict: Verdict,
    /// One paragraph: what the tool computes and concludes.
    pub summary: String,
    /// The key numbers.
    pub measured: serde_json::Value,
    /// Assumptions and what flips when they change.
    pub assumptions: Vec<Assumption>,
    /// Tables for the Markdown report.
    pub tables: Vec<Table>,
    /// Plots.
    pub plots: Vec<ClaimPlot>,
}

/// Checks all four claims.
pub fn check_all() -> Result<Vec<Claim>> {
    Ok(vec![c1::check()?, c2::check()?, c3::check()?, c4::check()?])
}

/// Least-squares slope of ln(y) against ln(x).
pub fn loglog_slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (lx, ly): (Vec<f64>, Vec<f64>) = points.iter().map(|&(x, y)| (x.ln(), y.ln())).unzip();
    let mx = lx.iter().sum::<f64>() / n;
    let my = ly.iter().sum::<f64>() / n;
    let cov: f64 = lx.iter().zip(&ly).map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = lx.iter().map(|x| (x - mx) * (x - mx)).sum();
    cov / var
}

/// Percent with one decimal.
pub fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// GiB with two decimals.
pub fn gib(b: u128) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

/// Token counts as in the reports: 131072 → `128k`.
pub fn tokens(n: u64) -> String {
    if n >= 1024 && n.is_multiple_of(1024) {
        format!("{}k", n >> 10)
    } else {
        n.to_string()
    }
}
