//! Progress of a long command on stderr (stdout stays deterministic): a bar on a terminal, and
//! — once the first items are done, when the rest will take more than [`ESTIMATE_ABOVE_S`] —
//! one line, terminal or not, with the estimated time left: the first items' measured time per
//! item × the items left (so a batch job's log says how long it will take). Items run in
//! parallel and the first to finish are the quickest, so when the items differ in cost (a
//! plan's simulations: a 128-device ring over 64 replicas costs forty times a small one) the
//! first estimate is low: whenever the end the items done so far project is more than
//! [`REVISE_ABOVE`] times the end last said, one more line says so (at most
//! [`MAX_REVISIONS`] of them).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    started: Instant,
    done: AtomicU64,
    told: AtomicBool,
    /// The end (seconds since the start) the last estimate said, and how many revisions.
    said_end: Mutex<Option<(f64, u32)>>,
}

impl Progress {
    /// `what` names the work in the estimate line (`sweep`, `plan: simulation`), `unit` its
    /// items (`points`).
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
            started: Instant::now(),
            done: AtomicU64::new(0),
            told: AtomicBool::new(false),
            said_end: Mutex::new(None),
        }
    }

    /// One item done (`msg` names it on the bar); after the first ones (two per worker thread),
    /// the estimate line if the rest is long.
    pub fn tick(&self, msg: impl FnOnce() -> String) {
        if !self.bar.is_hidden() {
            self.bar.set_message(msg());
        }
        self.bar.inc(1);
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        let threads = rayon::current_num_threads() as u64;
        let elapsed_s = self.started.elapsed().as_secs_f64();
        let line = estimate(&self.what, self.unit, self.total, done, elapsed_s, threads);
        if let Some(line) = line {
            if !self.told.swap(true, Ordering::Relaxed) {
                if let Ok(mut said) = self.said_end.lock() {
                    *said = Some((projected_end_s(self.total, done, elapsed_s), 0));
                }
                self.bar.suspend(|| eprintln!("{line}"));
            }
            return;
        }
        let Ok(mut said) = self.said_end.lock() else {
            return;
        };
        if let Some((end_s, revisions)) = *said {
            if let Some(line) = revision(
                &self.what, self.unit, self.total, done, elapsed_s, end_s, revisions,
            ) {
                *said = Some((projected_end_s(self.total, done, elapsed_s), revisions + 1));
                self.bar.suspend(|| eprintln!("{line}"));
            }
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// The estimate line when `done` items (of `total`) are the sample — two per worker thread,
/// at least 4 — and the rest at their pace takes more than [`ESTIMATE_ABOVE_S`].
fn estimate(
    what: &str,
    unit: &str,
    total: u64,
    done: u64,
    elapsed_s: f64,
    threads: u64,
) -> Option<String> {
    let sample = (2 * threads).max(4);
    if done != sample.min(total) || done >= total {
        return None;
    }
    let left = elapsed_s / done as f64 * (total - done) as f64;
    (left > ESTIMATE_ABOVE_S).then(|| {
        format!(
            "{what}: {total} {unit}; the first {done} took {elapsed_s:.1} s, so about {} more \
             on this machine ({threads} threads)",
            human_duration(left)
        )
    })
}

/// When `done` of `total` items took `elapsed_s`, the end (seconds since the start) at their
/// pace.
fn projected_end_s(total: u64, done: u64, elapsed_s: f64) -> f64 {
    elapsed_s / done.max(1) as f64 * total as f64
}

/// The revised estimate line, when the end the items done so far project is more than
/// [`REVISE_ABOVE`] times `said_end_s` (the end last said), the rest takes more than
/// [`ESTIMATE_ABOVE_S`], and fewer than [`MAX_REVISIONS`] revisions were said.
fn revision(
    what: &str,
    unit: &str,
    total: u64,
    done: u64,
    elapsed_s: f64,
    said_end_s: f64,
    revisions: u32,
) -> Option<String> {
    if done >= total || revisions >= MAX_REVISIONS {
        return None;
    }
    let end = projected_end_s(total, done, elapsed_s);
    let left = end - elapsed_s;
    (end > REVISE_ABOVE * said_end_s && left > ESTIMATE_ABOVE_S).then(|| {
        format!(
            "{what}: {done} of {total} {unit} took {elapsed_s:.1} s, so about {} more (the \
             later ones cost more than the first)",
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
        let line = estimate("sweep", "points", 1000, 4, 2.0, 2).unwrap();
        assert_eq!(
            line,
            "sweep: 1000 points; the first 4 took 2.0 s, so about 8 min more on this machine \
             (2 threads)"
        );
        assert_eq!(estimate("sweep", "points", 1000, 3, 2.0, 2), None);
        assert_eq!(estimate("sweep", "points", 1000, 5, 2.0, 2), None);
        assert_eq!(estimate("sweep", "points", 20, 4, 2.0, 2), None);
        assert_eq!(estimate("sweep", "points", 4, 4, 100.0, 2), None);
    }

    /// A phase whose later items cost more says so again, each time the projected end moves
    /// past 1.5 times the one last said, at most three times, never once the rest is short.
    #[test]
    fn a_low_first_estimate_is_revised_when_the_later_items_cost_more() {
        // 30 simulations; the first 4 took 8 s: said end 60 s. After 10 in 60 s the end is
        // 180 s: said again.
        let said = projected_end_s(30, 4, 8.0);
        assert_eq!(said, 60.0);
        let line = revision("plan: simulation", "simulations", 30, 10, 60.0, said, 0).unwrap();
        assert_eq!(
            line,
            "plan: simulation: 10 of 30 simulations took 60.0 s, so about 2 min more (the later \
             ones cost more than the first)"
        );
        // Not while the projection stays within 1.5 times, nor past three revisions, nor when
        // the rest is short, nor at the end.
        assert_eq!(revision("p", "s", 30, 10, 25.0, said, 0), None);
        assert_eq!(revision("p", "s", 30, 10, 60.0, said, 3), None);
        assert_eq!(revision("p", "s", 30, 29, 100.0, said, 0), None);
        assert_eq!(revision("p", "s", 30, 30, 600.0, said, 0), None);
    }

    #[test]
    fn durations_read_in_the_unit_that_fits() {
        assert_eq!(human_duration(45.2), "45 s");
        assert_eq!(human_duration(720.0), "12 min");
        assert_eq!(human_duration(12600.0), "3.5 h");
    }
}
