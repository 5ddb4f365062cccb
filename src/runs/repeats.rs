//! Published runs of one configuration measured more than once: the same model, hardware,
//! layout, knobs and dtype on the same GPUs, published by different sources (a benchmark's
//! successive releases, or two tables of one vendor). The tool prices such runs alike, so what
//! their measured steps differ by is what a publication of one configuration varies by — the
//! software release, the day, the cluster — and the floor under any goal a prediction is held
//! to.
//!
//! Reads [`RunResult`]s (and `config::LinearDtype`, their dtype) only.

use serde::Serialize;

use super::sources::{group_by, low_median_high, short};
use super::RunResult;

/// One measurement of a repeated configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Repeat {
    /// The run.
    pub id: String,
    /// Its source (the paper or release, shortened as `runs::by_source` does).
    pub source: String,
    /// Its measured step.
    pub measured_step_s: f64,
    /// Its predicted step.
    pub predicted_step_s: f64,
}

/// One configuration published by more than one source.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Repeated {
    /// The configuration in one line: model, profile, layout.
    pub configuration: String,
    /// Its GPUs.
    pub gpus: u64,
    /// Its measurements, one per source (the first run of each), in report order.
    pub runs: Vec<Repeat>,
}

impl Repeated {
    /// The longest measured step over the shortest, less one: how far the publications of this
    /// one configuration lie apart.
    pub fn measured_spread(&self) -> f64 {
        spread(self.runs.iter().map(|r| r.measured_step_s))
    }

    /// The same over the predicted steps (zero where the tool priced every run alike).
    pub fn predicted_spread(&self) -> f64 {
        spread(self.runs.iter().map(|r| r.predicted_step_s))
    }
}

fn spread(steps: impl Iterator<Item = f64> + Clone) -> f64 {
    let hi = steps.clone().fold(f64::MIN, f64::max);
    let lo = steps.fold(f64::MAX, f64::min);
    if lo > 0.0 && hi >= lo {
        hi / lo - 1.0
    } else {
        0.0
    }
}

/// Every configuration among `runs` that more than one source published (the same model,
/// profile, layout with every knob and dtype, and GPUs), in order of its first run.
pub fn repeats(runs: &[RunResult]) -> Vec<Repeated> {
    let groups = group_by(runs, |r| {
        (
            r.precision_twin.as_str(),
            r.linear_dtype,
            r.gpus,
            r.micro_batches,
        )
    });
    let mut out = Vec::new();
    for ((configuration, _, gpus, _), members) in groups {
        let mut firsts: Vec<Repeat> = Vec::new();
        for r in members {
            let source = short(&r.source.paper);
            if firsts.iter().all(|f| f.source != source) {
                firsts.push(Repeat {
                    id: r.id.clone(),
                    source: source.to_string(),
                    measured_step_s: r.measured_step_s,
                    predicted_step_s: r.predicted_step_s,
                });
            }
        }
        if firsts.len() > 1 {
            out.push(Repeated {
                configuration: configuration.to_string(),
                gpus,
                runs: firsts,
            });
        }
    }
    out
}

/// The groups' measured spreads ([`Repeated::measured_spread`]): lowest, median, highest (zeros
/// when there are none).
pub fn spread_summary(groups: &[Repeated]) -> (f64, f64, f64) {
    low_median_high(groups.iter().map(Repeated::measured_spread).collect())
}
