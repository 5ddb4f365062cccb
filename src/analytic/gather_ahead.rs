//! ZeRO-3's weight all-gathers one layer ahead of the compute, in closed form (the lowering's
//! `schedule::lower::sync`): a run of layers gathers its first layer's weights before
//! computing it, then, as layer l starts, layer l+1's on a stream of its own, after layer l's
//! gather and the compute before it. So layer l starts at `s_l = max(e_{l−1}, G_l)`, where its
//! gather ended at `G_l = s_{l−1} + g` (the first at `g`), and the next gather flows over
//! `[s_l, s_l + g]` while it computes, slowing its kernels by σ where they overlap (`sim`'s
//! compute rate under communication in flight, as the other overlaps of the closed form price
//! it): in steady state a layer lasts `max(c + σ·min(g, c)·busy/wall, g)`.
//!
//! Depends on the pricer's [`PartTimes`] only.

use super::pricer::PartTimes;

/// Where a layer's compute starts and what flows beside it: the walk over a run of layers.
#[derive(Debug, Clone, Copy)]
pub(super) struct GatherAhead {
    /// Seconds of one layer's gather.
    gather: f64,
    /// When the gather of the layer about to start ends.
    arrives: f64,
}

impl GatherAhead {
    /// A run starting at `now`: its first layer's gather is issued then.
    pub(super) fn start(gather: f64, now: f64) -> GatherAhead {
        GatherAhead {
            gather,
            arrives: now + gather,
        }
    }

    /// The next layer, whose previous compute ended at `now`: when it starts, and the
    /// interval of the following layer's gather flowing beside it (`None` for the run's last
    /// layer, or without gathers).
    pub(super) fn layer(&mut self, now: f64, more: bool) -> (f64, Option<(f64, f64)>) {
        let start = now.max(self.arrives);
        let next = (more && self.gather > 0.0).then_some((start, start + self.gather));
        if let Some((_, end)) = next {
            self.arrives = end;
        }
        (start, next)
    }
}

/// Adds to `into` a run of `n` layers of `layer` each, with nothing else in flight: the first
/// gather exposed, the others flowing beside the compute (module docs). Returns how long
/// gathers flowed beside the compute (what else in flight cannot slow it again). Without
/// gathers the layers are added one by one, as the closed form always summed them.
pub(super) fn add_run(
    into: &mut PartTimes,
    n: u64,
    gather: f64,
    layer: PartTimes,
    sigma: f64,
) -> f64 {
    if gather <= 0.0 {
        for _ in 0..n {
            *into += layer;
        }
        return 0.0;
    }
    let (times, beside) = run(n, gather, layer, sigma);
    *into += times;
    beside
}

/// [`add_run`] for a run whose first layer's gather was issued before it, and arrives
/// `first_arrives` seconds after the run starts (0: already there).
pub(super) fn add_run_from(
    into: &mut PartTimes,
    n: u64,
    (gather, first_arrives): (f64, f64),
    layer: PartTimes,
    sigma: f64,
) -> f64 {
    add_chained_run(into, n, (gather, first_arrives), layer, sigma, false).0
}

/// [`add_run_from`] for a run whose last layer also issues a gather as it starts, for the
/// first layer of the run after it (a chain over runs, as the updated weights' gathers run
/// over a pipeline stage's chunks: `schedule::lower::pipeline`), when `chain`. Returns how
/// long gathers flowed beside the compute and, when `chain`, when that gather arrives,
/// seconds after the run's start.
pub(super) fn add_chained_run(
    into: &mut PartTimes,
    n: u64,
    (gather, first_arrives): (f64, f64),
    layer: PartTimes,
    sigma: f64,
    chain: bool,
) -> (f64, Option<f64>) {
    if gather <= 0.0 {
        return (add_run(into, n, gather, layer, sigma), None);
    }
    let (times, beside, chained) = run_from(n, gather, first_arrives, layer, sigma, chain);
    *into += times;
    (beside, chained)
}

/// A run of `n` layers with gathers (`gather` > 0), as [`add_run`] adds it.
fn run(n: u64, gather: f64, layer: PartTimes, sigma: f64) -> (PartTimes, f64) {
    let (times, beside, _) = run_from(n, gather, gather, layer, sigma, false);
    (times, beside)
}

/// [`run`] with the first layer's gather arriving at `first_arrives`, and, when `chain`, the
/// last layer issuing one more ([`add_chained_run`]).
fn run_from(
    n: u64,
    gather: f64,
    first_arrives: f64,
    layer: PartTimes,
    sigma: f64,
    chain: bool,
) -> (PartTimes, f64, Option<f64>) {
    let busy_ratio = if layer.wall > 0.0 {
        layer.busy / layer.wall
    } else {
        0.0
    };
    let mut walk = GatherAhead {
        gather,
        arrives: first_arrives.max(0.0),
    };
    let (mut now, mut slowed, mut beside) = (0.0f64, 0.0f64, 0.0f64);
    let mut chained = None;
    for l in 0..n {
        let (start, next) = walk.layer(now, l + 1 < n || chain);
        let hidden = next.map_or(0.0, |(a, b)| overlap(a, b, start, start + layer.wall));
        let ext = sigma * hidden.min(layer.wall) * busy_ratio;
        beside += hidden;
        slowed += ext;
        now = start + layer.wall + ext;
        if l + 1 == n {
            chained = next.map(|(_, arrives)| arrives);
        }
    }
    let k = n as f64;
    let times = PartTimes {
        wall: now,
        compute: k * layer.compute,
        busy: k * layer.busy + slowed,
        comm: k * (gather + layer.comm),
    };
    (times, beside, chained.filter(|_| chain))
}

/// How long [a0, a1] and [b0, b1] overlap.
pub(super) fn overlap(a0: f64, a1: f64, b0: f64, b1: f64) -> f64 {
    (a1.min(b1) - a0.max(b0)).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(wall: f64) -> PartTimes {
        PartTimes::computing(wall)
    }

    /// Gathers shorter than the compute hide behind it but the first; longer ones pace the
    /// run; none leaves the layers' sum.
    #[test]
    fn a_run_hides_all_gathers_but_the_first_behind_longer_compute() {
        let (r, beside) = run(4, 1.0, layer(3.0), 0.0);
        assert_eq!(r.wall, 1.0 + 4.0 * 3.0);
        assert_eq!(r.comm, 4.0);
        assert_eq!(beside, 3.0);
        let (r, _) = run(4, 3.0, layer(1.0), 0.0);
        assert_eq!(r.wall, 3.0 * 4.0 + 1.0);
        let mut r = PartTimes::default();
        let beside = add_run(&mut r, 4, 0.0, layer(2.0), 0.1);
        assert_eq!((r.wall, beside), (8.0, 0.0));
        // σ slows each layer but the last by σ × the gather beside it.
        let (r, _) = run(3, 1.0, layer(3.0), 0.5);
        assert!(
            (r.wall - (1.0 + 3.0 * 3.0 + 2.0 * 0.5)).abs() < 1e-12,
            "{}",
            r.wall
        );
        assert!((r.busy - (9.0 + 1.0)).abs() < 1e-12);
    }
}
