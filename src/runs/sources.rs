//! Published runs grouped by their source (the paper, or the benchmark release) and by the
//! size of their model: how many there are, how many meet the goal, and which way and how far
//! the tool is off on them, measured as speed so that iteration times and TFLOP/s figures read
//! alike. A tool that is fast on every run of one source and slow on every run of another has
//! a bias a single run's error does not show, and one whose error follows the model's size
//! across sources misses a cost that weighs more on small models; this says so in numbers.
//!
//! Reads [`RunResult`]s only; depends on nothing else.

use serde::Serialize;

use super::RunResult;

/// The runs of one source.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceSummary {
    /// The source as its run files name it, up to its title or its parenthesis (`Korthikanti
    /// et al. 2022`, `NVIDIA DGX Cloud Benchmarking performance recipes, release 25.02`).
    pub source: String,
    /// Its runs, in report order.
    pub runs: usize,
    /// The hardware profiles they run on, each once, in order of first use.
    pub hardware: Vec<String>,
    /// How many are within the goal.
    pub within_goal: usize,
    /// The median speed error: predicted speed over measured speed − 1 (positive: the tool
    /// says faster), whatever the quantity published.
    pub median_speed_error: f64,
    /// The smallest and the largest speed error.
    pub speed_error_range: (f64, f64),
    /// Runs the tool predicts faster than measured.
    pub faster: usize,
}

/// The runs of one band of model sizes, from every source.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SizeSummary {
    /// The band (`under 10B` … `200B and over`).
    pub band: &'static str,
    /// Its runs.
    pub runs: usize,
    /// How many sources they come from.
    pub sources: usize,
    /// The hardware profiles they run on, each once, in order of first use.
    pub hardware: Vec<String>,
    /// How many are within the goal.
    pub within_goal: usize,
    /// The median speed error (positive: the tool says faster).
    pub median_speed_error: f64,
    /// The smallest and the largest speed error.
    pub speed_error_range: (f64, f64),
    /// Runs the tool predicts faster than measured.
    pub faster: usize,
}

/// The bands of model size (parameters, lower bounds) the runs are grouped by.
pub const SIZE_BANDS: [(&str, u64); 4] = [
    ("under 10B", 0),
    ("10B to 50B", 10_000_000_000),
    ("50B to 200B", 50_000_000_000),
    ("200B and over", 200_000_000_000),
];

/// The runs grouped by their model's size ([`SIZE_BANDS`]), the bands that hold runs in
/// order of size.
pub fn by_size(runs: &[RunResult]) -> Vec<SizeSummary> {
    let band = |params: u64| {
        SIZE_BANDS
            .iter()
            .rev()
            .find(|(_, lo)| params >= *lo)
            .map_or(SIZE_BANDS[0].0, |(name, _)| *name)
    };
    let mut out = Vec::new();
    for (name, _) in SIZE_BANDS {
        let mine: Vec<&RunResult> = runs.iter().filter(|r| band(r.params) == name).collect();
        if mine.is_empty() {
            continue;
        }
        let mut sources: Vec<&str> = Vec::new();
        for r in &mine {
            let s = short(&r.source.paper);
            if !sources.contains(&s) {
                sources.push(s);
            }
        }
        let t = Tally::of(&mine);
        out.push(SizeSummary {
            band: name,
            runs: t.runs,
            sources: sources.len(),
            hardware: t.hardware,
            within_goal: t.within_goal,
            median_speed_error: t.median_speed_error,
            speed_error_range: t.speed_error_range,
            faster: t.faster,
        });
    }
    out
}

/// What every group of runs says of itself (a source's, a size band's): the fields
/// [`SourceSummary`] and [`SizeSummary`] share, computed once.
struct Tally {
    runs: usize,
    hardware: Vec<String>,
    within_goal: usize,
    median_speed_error: f64,
    speed_error_range: (f64, f64),
    faster: usize,
}

impl Tally {
    fn of(runs: &[&RunResult]) -> Tally {
        // The profiles, each once, in order of first use.
        let mut hardware: Vec<String> = Vec::new();
        for r in runs {
            if !hardware.contains(&r.hardware) {
                hardware.push(r.hardware.clone());
            }
        }
        let (low, median, high) = low_median_high(runs.iter().map(|r| speed_error(r)).collect());
        Tally {
            runs: runs.len(),
            hardware,
            within_goal: runs.iter().filter(|r| r.within_goal).count(),
            median_speed_error: median,
            speed_error_range: (low, high),
            faster: runs.iter().filter(|r| speed_error(r) > 0.0).count(),
        }
    }
}

/// A run's speed error: predicted over measured speed − 1, positive when the tool says faster
/// (an iteration time's error turned round).
pub fn speed_error(r: &RunResult) -> f64 {
    if r.quantity.higher_is_faster() {
        r.error
    } else {
        1.0 / (1.0 + r.error) - 1.0
    }
}

/// The source's short name: up to `, "` (a title follows) or ` (` (where it appeared).
pub(crate) fn short(paper: &str) -> &str {
    let cut = [paper.find(", \""), paper.find(" (")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(paper.len());
    paper[..cut].trim_end()
}

/// The lowest, median and highest of `values` (zeros when there are none): the summary every
/// group section of the report gives.
pub(crate) fn low_median_high(mut values: Vec<f64>) -> (f64, f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    (values[0], median, values[n - 1])
}

/// `runs` grouped by `key`, the groups in order of their first run, each group's runs in
/// report order.
pub fn group_by<'a, K: PartialEq>(
    runs: &'a [RunResult],
    key: impl Fn(&'a RunResult) -> K,
) -> Vec<(K, Vec<&'a RunResult>)> {
    let mut groups: Vec<(K, Vec<&RunResult>)> = Vec::new();
    for r in runs {
        let k = key(r);
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, members)) => members.push(r),
            None => groups.push((k, vec![r])),
        }
    }
    groups
}

/// The runs grouped by source, in order of each source's first run.
pub fn by_source(runs: &[RunResult]) -> Vec<SourceSummary> {
    group_by(runs, |r| short(&r.source.paper))
        .into_iter()
        .map(|(name, mine)| {
            let t = Tally::of(&mine);
            SourceSummary {
                source: name.to_string(),
                runs: t.runs,
                hardware: t.hardware,
                within_goal: t.within_goal,
                median_speed_error: t.median_speed_error,
                speed_error_range: t.speed_error_range,
                faster: t.faster,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_stop_at_the_title_or_the_parenthesis() {
        assert_eq!(
            short("Korthikanti et al. 2022, \"Reducing Activation\" (arXiv 2205.05198)"),
            "Korthikanti et al. 2022"
        );
        assert_eq!(
            short("NVIDIA recipes, release 25.02 (github.com/NVIDIA/x, commit 8f5cbb3)"),
            "NVIDIA recipes, release 25.02"
        );
        assert_eq!(short("A source"), "A source");
    }
}
