//! What separates the best configuration from the next: their step times split into the same
//! parts on the critical device — compute (with the part of it that recomputes the forward),
//! exposed communication, and the rest of the step, idle (the pipeline bubble and waiting for
//! other devices) — and their memory headroom. Every ranked configuration trains the one global
//! batch, so a step is the same tokens for both and the parts compare directly.

use serde::Serialize;

use super::Ranked;

/// One part of a step, in both configurations.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Part {
    /// What the part is: `compute`, `recomputation`, `exposed communication`, `bubble`.
    pub name: &'static str,
    /// Seconds per step in the best configuration.
    pub best_s: f64,
    /// Seconds per step in the next.
    pub next_s: f64,
}

impl Part {
    /// `next − best`: what the next configuration spends more (negative: less).
    pub fn gap_s(&self) -> f64 {
        self.next_s - self.best_s
    }
}

/// The best against the next (module docs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Step times, best and next.
    pub step_s: (f64, f64),
    /// The parts, largest gap first (by magnitude).
    pub parts: Vec<Part>,
    /// Memory headroom per device, best and next.
    pub headroom_bytes: (u128, u128),
}

impl Comparison {
    /// The comparison of ranked rows `best` and `next`.
    pub fn of(best: &Ranked, next: &Ranked) -> Comparison {
        let parts_of = |r: &Ranked| {
            [
                r.compute_s - r.recompute_s,
                r.recompute_s,
                r.exposed_communication_s,
                r.bubble_s,
            ]
        };
        let (b, n) = (parts_of(best), parts_of(next));
        let names = [
            "compute",
            "recomputation",
            "exposed communication",
            "bubble",
        ];
        let mut parts: Vec<Part> = (0..4)
            .map(|i| Part {
                name: names[i],
                best_s: b[i],
                next_s: n[i],
            })
            .collect();
        parts.sort_by(|x, y| y.gap_s().abs().total_cmp(&x.gap_s().abs()));
        Comparison {
            step_s: (best.step_time_s, next.step_time_s),
            parts,
            headroom_bytes: (best.headroom_bytes, next.headroom_bytes),
        }
    }

    /// The part that differs most.
    pub fn largest(&self) -> &Part {
        &self.parts[0]
    }
}
