//! Checks METP's published claims (DESIGN §1, C1–C4) against the memory model, the analytic
//! model and the simulator, and says under which assumptions each holds.
//!
//! Input: the bundled models and hardware profiles. Output: [`Claim`]s with a verdict, the
//! numbers behind it and the assumptions that flip it; `report` renders them as `claims.md`,
//! `claims.json` and plots. Depends on `config`, `memory`, `search`, `schedule`, `analytic`, `sim`,
//! `evaluate` and `error`; never on `report` or `cli`.

mod c1;
mod c2;
mod c3;
mod c4;
pub mod overlap;

use serde::Serialize;

use crate::config::Hardware;
use crate::error::{Error, Result};

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
    /// The check ran but judged nothing: no case could decide either way (say, no length
    /// simulated reaches a ring's condition). Never read as "does not hold".
    NotEstablished,
    /// None of the profiles it was asked to run on can run its check (`validate --hw`); the
    /// summary says why.
    NotChecked,
}

impl Verdict {
    /// Words for reports.
    pub fn words(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::HoldsUnderAssumptions => "holds only under stated assumptions",
            Verdict::DoesNotHold => "does not hold",
            Verdict::NotEstablished => "not established",
            Verdict::NotChecked => "not checked on these profiles",
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

/// What a claim's rule changed (issue 21): the previous round's rule (as of commit `a48eb17`) run on
/// this round's numbers, so the report can say whether the verdict moved
/// and why — computed, not written once.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Revision {
    /// The verdict the previous rule gives on these numbers.
    pub previous: Verdict,
    /// The previous rule, in words.
    pub previous_rule: String,
    /// Why the verdict moved or stayed, from the numbers.
    pub why: String,
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
    /// The rule that gave the verdict, in words, with its thresholds.
    pub rule: String,
    /// What the verdict rests on: the deciding numbers, in one sentence.
    pub basis: String,
    /// What would flip the verdict, computed from the numbers.
    pub would_flip: String,
    /// What this round's rule changed: the verdict the previous rule gives on the same
    /// numbers, and why the two differ (`None` when the check did not run).
    pub revision: Option<Revision>,
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

/// Checks all four claims on the bundled inputs.
pub fn check_all() -> Result<Vec<Claim>> {
    Ok(vec![c1::check()?, c2::check()?, c3::check()?, c4::check()?])
}

/// Checks all four claims with `profiles` in place of the bundled hardware (`validate --hw`);
/// models, lengths and degrees stay the bundled ones. C3 and C4 run on every profile with a
/// node of their degree's GPUs; C1 and C2, which take one profile, on the first. A claim that
/// cannot run on a profile says why in its report instead of failing the command; each
/// summary opens by saying what it was checked on in place of what.
pub fn check_on(profiles: &[Hardware]) -> Result<Vec<Claim>> {
    let Some(first) = profiles.first() else {
        return Err(Error::arg("--hw", "no hardware profile given"));
    };
    let names = |hws: &[&Hardware]| and_list(hws.iter().map(|h| h.name.to_uppercase()));
    let first_of = if profiles.len() > 1 {
        " (the first profile given; C1 takes one)"
    } else {
        ""
    };

    let default1 = c1::Inputs::bundled()?;
    let c1 = c1::Inputs::on(first).and_then(|inp| {
        let mut c = c1::check_with(&inp)?;
        let nodes = match inp.hardware.nodes {
            1 => String::new(),
            n => format!(
                " ({n} nodes, for p up to {})",
                inp.degrees.last().unwrap_or(&0)
            ),
        };
        c.summary = format!(
            "Checked on {}{nodes}{first_of} in place of the bundled {}. {}",
            first.name.to_uppercase(),
            default1.hardware.name.to_uppercase(),
            c.summary
        );
        Ok(c)
    });
    let c1 = c1.unwrap_or_else(|e| Claim::failed("C1", c1::CLAIM, &first.name, &e));

    let default2 = c2::Inputs::bundled()?;
    let c2 = c2::Inputs::on(first).and_then(|inp| {
        let mut c = c2::check_with(&inp)?;
        c.summary = format!(
            "Checked on {}{} in place of the bundled {}. {}",
            first.name.to_uppercase(),
            first_of.replace("C1", "C2"),
            names(&default2.profiles.iter().collect::<Vec<_>>()),
            c.summary
        );
        Ok(c)
    });
    let c2 = c2.unwrap_or_else(|e| Claim::failed("C2", c2::CLAIM, &first.name, &e));

    let default3 = c3::Inputs::bundled()?;
    let mut inp3 = default3.clone();
    inp3.profiles = profiles.to_vec();
    let all = profiles.iter().collect::<Vec<_>>();
    let c3 = c3::check_with(&inp3).map(|mut c| {
        if c.verdict != Verdict::NotChecked {
            c.summary = format!(
                "Checked on {} in place of the bundled {}. {}",
                names(&all),
                names(&default3.profiles.iter().collect::<Vec<_>>()),
                c.summary
            );
        }
        c
    });
    let c3 = c3.unwrap_or_else(|e| Claim::failed("C3", c3::CLAIM, &names(&all), &e));

    let default4 = c4::Inputs::bundled()?;
    let mut inp4 = default4.clone();
    inp4.profiles = profiles.to_vec();
    let c4 = c4::check_with(&inp4).map(|mut c| {
        if c.verdict != Verdict::NotChecked {
            c.summary = format!(
                "The claim is about {} A100 GPUs; this check ran on {} GPUs of {} in place of the \
                 bundled {}, so its ratios say whether METP's advantage carries over to that \
                 hardware, not whether the published figure is reproduced. {}",
                default4.p,
                inp4.p,
                names(&all),
                names(&default4.profiles.iter().collect::<Vec<_>>()),
                c.summary
            );
        }
        c
    });
    let c4 = c4.unwrap_or_else(|e| Claim::failed("C4", c4::CLAIM, &names(&all), &e));
    Ok(vec![c1, c2, c3, c4])
}

impl Claim {
    /// A claim whose check could not run: one line of reason per profile (or set of profiles)
    /// it was asked to run on is its summary and its `measured`.
    fn not_checked(id: &'static str, claim: &str, reasons: &[(String, String)]) -> Claim {
        let (sentence, measured) = left_out(reasons);
        Claim {
            id,
            claim: claim.into(),
            verdict: Verdict::NotChecked,
            rule: String::new(),
            basis: String::new(),
            would_flip: String::new(),
            revision: None,
            summary: sentence.trim_start().to_string(),
            measured: serde_json::json!({ "not_checked": measured }),
            assumptions: vec![],
            tables: vec![],
            plots: vec![],
        }
    }

    /// [`Claim::not_checked`] for an error of the check on `on`.
    fn failed(id: &'static str, claim: &str, on: &str, why: &Error) -> Claim {
        let reason = why.to_string().replace('\n', " ");
        Claim::not_checked(id, claim, &[(on.to_string(), reason)])
    }
}

/// The profiles of `profiles` with a node of `p` GPUs, and a one-line reason for each other one.
fn one_node_of(profiles: &[Hardware], p: u64) -> (Vec<Hardware>, Vec<(String, String)>) {
    let mut runnable = Vec::new();
    let mut skipped = Vec::new();
    for h in profiles {
        if h.gpus_per_node >= p {
            runnable.push(h.clone());
        } else {
            skipped.push((
                h.name.clone(),
                format!(
                    "it has {} GPUs per node, fewer than the p = {p} this check runs within one \
                     node",
                    h.gpus_per_node
                ),
            ));
        }
    }
    (runnable, skipped)
}

/// The sentence and the `measured` entry that list the profiles a check left out, with their
/// reasons (an empty sentence when none is).
fn left_out(skipped: &[(String, String)]) -> (String, serde_json::Value) {
    if skipped.is_empty() {
        return (String::new(), serde_json::Value::Null);
    }
    let sentence = skipped
        .iter()
        .map(|(n, r)| format!("on {n}, {r}"))
        .collect::<Vec<_>>()
        .join("; ");
    let map: serde_json::Map<String, serde_json::Value> = skipped
        .iter()
        .map(|(n, r)| (n.clone(), serde_json::Value::from(r.clone())))
        .collect();
    (
        format!(" Not checked {sentence}."),
        serde_json::Value::Object(map),
    )
}

/// `A`, `A and B`, `A, B and C`.
fn and_list(items: impl Iterator<Item = String>) -> String {
    let v: Vec<String> = items.collect();
    match v.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => v.join(""),
    }
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
