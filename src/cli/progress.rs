//! Progress of a long command on stderr (stdout stays deterministic): a bar on a terminal, and
//! — once the first items are done, when the rest will take more than [`ESTIMATE_ABOVE_S`] —
//! one line, terminal or not, with the estimated time left (so a batch job's log says how long
//! it will take). Items of equal cost (a sweep's points) project the first items' time per item
//! over the items left. Items of known, unequal cost (a plan's simulations, weighed by what
//! each will cost the simulator, `evaluate::Evaluation::simulation_cost`: a 128-device ring
//! over 64 replicas costs 25 times a small one) project it over the share of the work
//! they are ([`Progress::weighted`]): the first to
//! finish are then the costliest (the plan starts them first), and a count would say far too
//! much, or, in any other order, far too little. Whenever the end the items done so far project
//! is more than [`REVISE_ABOVE`] times the end last said, one more line says so (at most
//! [`MAX_REVISIONS`] of them).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Estimated remaining time above which a command says how long it will take.
pub const ESTIMATE_ABOVE_S: f64 = 30.0;

/// How much later than last said the projected end must be for a revised estimate.
pub const REVISE_ABOVE: f64 = 1.5;

/// Revised estimates a phase prints at most.
pub const MAX_REVISIONS: u32 = 3;

pub struct Progress {
    bar: indicatif::ProgressBar,
    what: String,
    unit: &'static str,
    total: u64,
    /// The items' cost in all, when they are weighed ([`Progress::weighted`]).
    total_cost: Option<u64>,
    started: Instant,
    /// Items done, and their cost.
    done: Mutex<(u64, u64)>,
    told: AtomicBool,
    /// The end (seconds since the start) the last estimate said, and how many revisions.
    said_end: Mutex<Option<(f64, u32)>>,
}

impl Progress {
    /// `what` names the work in the estimate line (`sweep`, `plan: simulation`), `unit` its
    /// items (`points`), all of one cost.
    pub fn new(what: &str, unit: &'static str, total: u64) -> Progress {
        let bar = if std::io::stderr().is_terminal() {
            indicatif::ProgressBar::new(total)
        } else {
            indicatif::ProgressBar::hidden()
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(&format!(
                "{{bar:40}} {{pos}}/{{len}} {unit}  {{elapsed_precise}}  eta {{eta}}  {{msg}}"
            ))
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Progress {
            bar,
            what: what.to_string(),
            unit,
            total,
            total_cost: None,
            started: Instant::now(),
            done: Mutex::new((0, 0)),
            told: AtomicBool::new(false),
            said_end: Mutex::new(None),
        }
    }

    /// [`Progress::new`] for `total` items costing `total_cost` in all (each one's cost given
    /// to [`Progress::tick_cost`]): the estimate projects the share of the cost done, not of
    /// the items.
    pub fn weighted(what: &str, unit: &'static str, total: u64, total_cost: u64) -> Progress {
        Progress {
            total_cost: Some(total_cost.max(1)),
            ..Progress::new(what, unit, total)
        }
    }

    /// One item done (`msg` names it on the bar); after the first ones (two per worker thread),
    /// the estimate line if the rest is long.
    pub fn tick(&self, msg: impl FnOnce() -> String) {
        self.tick_cost(1, msg);
    }

    /// One item of cost `cost` done ([`Progress::tick`]).
    pub fn tick_cost(&self, cost: u64, msg: impl FnOnce() -> String) {
        if !self.bar.is_hidden() {
            self.bar.set_message(msg());
        }
        self.bar.inc(1);
        let (done, done_cost) = match self.done.lock() {
            Ok(mut d) => {
                d.0 += 1;
                d.1 = d.1.saturating_add(cost);
                *d
            }
            Err(_) => return,
        };
        let work = self.work(done, done_cost);
        let threads = rayon::current_num_threads() as u64;
        let elapsed_s = self.started.elapsed().as_secs_f64();
        let line = estimate(&self.what, self.unit, work, elapsed_s, threads);
        if let Some(line) = line {
            if !self.told.swap(true, Ordering::Relaxed) {
                if let Ok(mut said) = self.said_end.lock() {
                    *said = Some((projected_end_s(work, elapsed_s), 0));
                }
                self.bar.suspend(|| eprintln!("{line}"));
            }
            return;
        }
        let Ok(mut said) = self.said_end.lock() else {
            return;
        };
        if let Some((end_s, revisions)) = *said {
            if let Some(line) = revision(&self.what, self.unit, work, elapsed_s, end_s, revisions) {
                *said = Some((projected_end_s(work, elapsed_s), revisions + 1));
                self.bar.suspend(|| eprintln!("{line}"));
            }
        }
    }

    fn work(&self, done: u64, done_cost: u64) -> Work {
        Work {
            total: self.total,
            done,
            share: match self.total_cost {
                Some(all) => (done_cost as f64 / all as f64).min(1.0),
                None => done as f64 / self.total.max(1) as f64,
            },
            weighted: self.total_cost.is_some(),
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// How far a phase is.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Work {
    /// Items, and items done.
    total: u64,
    done: u64,
    /// The share of the work done: of the items' cost when they are weighed, else of the items.
    share: f64,
    /// Whether the items are weighed by cost.
    weighted: bool,
}

impl Work {
    /// Items of equal cost, `done` of `total`.
    #[cfg(test)]
    fn count(total: u64, done: u64) -> Work {
        Work {
            total,
            done,
            share: done as f64 / total as f64,
            weighted: false,
        }
    }
}

/// The estimate line when the items done are the sample — two per worker thread, at least 4 —
/// and the rest at their pace (per item, or per share of the cost when weighed) takes more than
/// [`ESTIMATE_ABOVE_S`].
fn estimate(what: &str, unit: &str, work: Work, elapsed_s: f64, threads: u64) -> Option<String> {
    let Work {
        total,
        done,
        share,
        weighted,
    } = work;
    let sample = (2 * threads).max(4);
    if done != sample.min(total) || done >= total {
        return None;
    }
    let left = projected_end_s(work, elapsed_s) - elapsed_s;
    let of_the_work = if weighted {
        format!(", {} of the work by size,", percent(share))
    } else {
        ",".to_string()
    };
    (left > ESTIMATE_ABOVE_S).then(|| {
        format!(
            "{what}: {total} {unit}; the first {done} took {elapsed_s:.1} s{of_the_work} so about \
             {} more on this machine ({threads} threads)",
            human_duration(left)
        )
    })
}

/// `37%`, or `<1%` (where `0%` would read as nothing done).
fn percent(share: f64) -> String {
    if share < 0.01 {
        "<1%".to_string()
    } else {
        format!("{:.0}%", 100.0 * share)
    }
}

/// When the share `work.share` of the work took `elapsed_s`, the end (seconds since the start)
/// at that pace.
fn projected_end_s(work: Work, elapsed_s: f64) -> f64 {
    if work.share > 0.0 {
        elapsed_s / work.share
    } else {
        f64::INFINITY
    }
}

/// The revised estimate line, when the end the items done so far project is more than
/// [`REVISE_ABOVE`] times `said_end_s` (the end last said), the rest takes more than
/// [`ESTIMATE_ABOVE_S`], and fewer than [`MAX_REVISIONS`] revisions were said.
fn revision(
    what: &str,
    unit: &str,
    work: Work,
    elapsed_s: f64,
    said_end_s: f64,
    revisions: u32,
) -> Option<String> {
    let Work {
        total,
        done,
        weighted,
        ..
    } = work;
    if done >= total || revisions >= MAX_REVISIONS {
        return None;
    }
    let end = projected_end_s(work, elapsed_s);
    let left = end - elapsed_s;
    let why = if weighted {
        "they take longer than their size said"
    } else {
        "the later ones cost more than the first"
    };
    (end > REVISE_ABOVE * said_end_s && left > ESTIMATE_ABOVE_S && left.is_finite()).then(|| {
        format!(
            "{what}: {done} of {total} {unit} took {elapsed_s:.1} s, so about {} more ({why})",
            human_duration(left)
        )
    })
}

/// `45 s`, `12 min`, `3.5 h`.
pub fn human_duration(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Said once the sample is done, only when the rest is long.
    #[test]
    fn estimates_from_the_first_items_when_the_rest_is_long() {
        let c = Work::count;
        let line = estimate("sweep", "points", c(1000, 4), 2.0, 2).unwrap();
        assert_eq!(
            line,
            "sweep: 1000 points; the first 4 took 2.0 s, so about 8 min more on this machine \
             (2 threads)"
        );
        assert_eq!(estimate("sweep", "points", c(1000, 3), 2.0, 2), None);
        assert_eq!(estimate("sweep", "points", c(1000, 5), 2.0, 2), None);
        assert_eq!(estimate("sweep", "points", c(20, 4), 2.0, 2), None);
        assert_eq!(estimate("sweep", "points", c(4, 4), 100.0, 2), None);
    }

    /// A phase whose later items cost more says so again, each time the projected end moves
    /// past 1.5 times the one last said, at most three times, never once the rest is short.
    #[test]
    fn a_low_first_estimate_is_revised_when_the_later_items_cost_more() {
        let c = Work::count;
        // 30 simulations; the first 4 took 8 s: said end 60 s. After 10 in 60 s the end is
        // 180 s: said again.
        let said = projected_end_s(c(30, 4), 8.0);
        assert_eq!(said, 60.0);
        let line = revision("plan: simulation", "simulations", c(30, 10), 60.0, said, 0).unwrap();
        assert_eq!(
            line,
            "plan: simulation: 10 of 30 simulations took 60.0 s, so about 2 min more (the later \
             ones cost more than the first)"
        );
        // Not while the projection stays within 1.5 times, nor past three revisions, nor when
        // the rest is short, nor at the end.
        assert_eq!(revision("p", "s", c(30, 10), 25.0, said, 0), None);
        assert_eq!(revision("p", "s", c(30, 10), 60.0, said, 3), None);
        assert_eq!(revision("p", "s", c(30, 29), 100.0, said, 0), None);
        assert_eq!(revision("p", "s", c(30, 30), 600.0, said, 0), None);
    }

    /// Items of unequal cost run costliest first on 2 threads (as a plan runs its
    /// simulations), each lasting its cost (durations injected: no clock): the first estimate,
    /// weighed by cost, is not low — the end it projects is at or after the real end, and
    /// within twice it — where counting the items done is over twice too high; run
    /// cheapest first (as they used to finish first), a count is less than half the real end,
    /// the weighed one within 10% of it.
    #[test]
    fn the_weighed_first_estimate_is_not_low_on_items_of_unequal_cost() {
        // A plan's spread: a few 40-unit rings, a middle, many small steps.
        let costs: Vec<u64> = [40, 40, 36, 30, 22, 16, 12, 9, 6, 4, 3, 2, 1, 1, 1, 1]
            .into_iter()
            .collect();
        let total_cost: u64 = costs.iter().sum();
        // Greedy list schedule on 2 threads in the given order, 10 s per unit of cost: each
        // item's end.
        let ends = |order: &[u64]| -> Vec<(f64, u64)> {
            let mut free = [0.0f64; 2];
            let mut ends: Vec<(f64, u64)> = order
                .iter()
                .map(|&c| {
                    let t = if free[0] <= free[1] { 0 } else { 1 };
                    free[t] += 10.0 * c as f64;
                    (free[t], c)
                })
                .collect();
            ends.sort_by(|a, b| a.0.total_cmp(&b.0));
            ends
        };
        // The end projected once the sample (4 items on 2 threads) is done.
        let first_estimate = |ends: &[(f64, u64)], weighted: bool| -> f64 {
            let (at, _) = ends[3];
            let done_cost: u64 = ends[..4].iter().map(|e| e.1).sum();
            let work = Work {
                total: ends.len() as u64,
                done: 4,
                share: if weighted {
                    done_cost as f64 / total_cost as f64
                } else {
                    4.0 / ends.len() as f64
                },
                weighted,
            };
            assert!(estimate("p", "s", work, at, 2).is_some());
            projected_end_s(work, at)
        };
        let heaviest = ends(&costs);
        let real_end = heaviest.last().unwrap().0;
        let weighed = first_estimate(&heaviest, true);
        assert!(
            weighed >= real_end && weighed <= 2.0 * real_end,
            "{weighed} against {real_end}"
        );
        assert!(first_estimate(&heaviest, false) > 2.0 * real_end);
        let mut cheapest = costs.clone();
        cheapest.reverse();
        let lightest = ends(&cheapest);
        let real_end = lightest.last().unwrap().0;
        assert!(first_estimate(&lightest, false) < 0.5 * real_end);
        // The weighed one is then the end of a perfect split of the work (1,120 s of 1,210 s):
        // no order makes it low by more than the threads' imbalance at the end.
        let weighed = first_estimate(&lightest, true);
        assert!(weighed >= 0.9 * real_end, "{weighed} against {real_end}");
        // The line says how much of the work the first items are.
        let work = Work {
            total: 30,
            done: 4,
            share: 0.25,
            weighted: true,
        };
        assert_eq!(
            estimate(
                "plan: simulation of the best",
                "simulations",
                work,
                100.0,
                2
            )
            .unwrap(),
            "plan: simulation of the best: 30 simulations; the first 4 took 100.0 s, 25% of the \
             work by size, so about 5 min more on this machine (2 threads)"
        );
        // A weighed phase revises when the items take longer than their size said.
        let late = Work {
            share: 0.5,
            done: 20,
            ..work
        };
        assert_eq!(
            revision("p", "s", late, 400.0, 300.0, 0).unwrap(),
            "p: 20 of 30 s took 400.0 s, so about 7 min more (they take longer than their size \
             said)"
        );
    }

    #[test]
    fn durations_read_in_the_unit_that_fits() {
        assert_eq!(human_duration(45.2), "45 s");
        assert_eq!(human_duration(720.0), "12 min");
        assert_eq!(human_duration(12600.0), "3.5 h");
    }
}
