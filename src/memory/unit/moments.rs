//! Live sets and where their moments go: the tensors a device holds, one entry per name, and
//! the sinks that collect every moment, a device's peak, or each phase's largest working set.

use super::{At, Kind, Moment, Phase, Tensor, Unit};
use crate::memory::Block;

pub(super) fn sum(it: impl Iterator<Item = u128>) -> u128 {
    it.fold(0u128, |a, b| a.saturating_add(b))
}

pub(super) type Entry = (&'static str, Kind, u128);

/// Room for the distinct tensor names a device holds at once (under 20, in the attention
/// backward; `Held::push` panics rather than lose one).
pub(super) const MAX_NAMES: usize = 24;

/// Tensors held, one entry per name, in order of first allocation (a fixed array: states are
/// copied for every ring step visited, so they stay off the heap).
#[derive(Clone, Copy)]
pub(super) struct Held {
    items: [Entry; MAX_NAMES],
    len: usize,
}

impl Held {
    pub(super) fn new() -> Held {
        Held {
            items: [("", Kind::Static, 0); MAX_NAMES],
            len: 0,
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.items[..self.len].iter()
    }

    pub(super) fn position(&self, name: &str) -> Option<usize> {
        self.iter().position(|e| e.0 == name)
    }

    pub(super) fn push(&mut self, e: Entry) {
        assert!(self.len < MAX_NAMES, "more than {MAX_NAMES} tensor names");
        self.items[self.len] = e;
        self.len += 1;
    }

    pub(super) fn remove(&mut self, k: usize) {
        self.items.copy_within(k + 1..self.len, k);
        self.len -= 1;
    }
}

/// What a device holds while a piece of the unit runs.
#[derive(Clone)]
pub(super) struct Live {
    pub(super) rank: u64,
    pub(super) phase: Phase,
    pub(super) at: At,
    pub(super) held: Held,
    /// Something was allocated since the last release: the live set is at a local maximum
    /// until the next release.
    pub(super) rising: bool,
}

impl Live {
    pub(super) fn new(rank: u64, phase: Phase, group: Option<u64>, step: Option<u64>) -> Live {
        Live {
            rank,
            phase,
            at: At {
                group,
                step,
                event: "start",
            },
            held: Held::new(),
            rising: false,
        }
    }

    /// Holds `bytes` more of `name` (reconstructing a state; not an event).
    pub(super) fn add(&mut self, name: &'static str, kind: Kind, bytes: u128) {
        if bytes == 0 {
            return;
        }
        match self.held.position(name) {
            Some(k) => {
                let e = &mut self.held.items[k];
                e.2 = e.2.saturating_add(bytes);
            }
            None => self.held.push((name, kind, bytes)),
        }
    }

    /// Stops holding `bytes` of `name` (reconstructing a state; not an event).
    pub(super) fn remove(&mut self, name: &'static str, bytes: u128) {
        if let Some(k) = self.held.position(name) {
            let e = &mut self.held.items[k];
            debug_assert!(e.2 >= bytes, "{name}: releasing more than held");
            e.2 = e.2.saturating_sub(bytes);
            if e.2 == 0 {
                self.held.remove(k);
            }
        } else {
            debug_assert!(bytes == 0, "{name}: released but not held");
        }
    }

    pub(super) fn alloc(&mut self, name: &'static str, kind: Kind, bytes: u128) {
        self.add(name, kind, bytes);
        self.rising = true;
    }

    pub(super) fn free(&mut self, name: &'static str, bytes: u128, sink: &mut dyn Sink) {
        if self.rising {
            sink.moment(self);
            self.rising = false;
        }
        self.remove(name, bytes);
    }

    pub(super) fn finish(&mut self, sink: &mut dyn Sink) {
        if self.rising {
            sink.moment(self);
            self.rising = false;
        }
    }

    pub(super) fn event(&mut self, event: &'static str) {
        self.at.event = event;
    }

    pub(super) fn total(&self) -> u128 {
        sum(self.held.iter().map(|e| e.2))
    }

    pub(super) fn transient(&self) -> u128 {
        sum(self
            .held
            .iter()
            .filter(|e| e.1 == Kind::Transient)
            .map(|e| e.2))
    }

    pub(super) fn moment(&self, unit: Unit) -> Moment {
        let mut tensors: Vec<Tensor> = self
            .held
            .iter()
            .map(|&(name, kind, bytes)| Tensor {
                name,
                block: if name.starts_with("optimizer.") {
                    Block::Optimizer
                } else if unit == Unit::Attention {
                    Block::Attention
                } else {
                    Block::Mlp
                },
                kind,
                bytes_each: bytes,
                count: 1,
                replicated: false,
                per_layer: false,
                phases: if kind == Kind::Transient {
                    vec![self.phase]
                } else {
                    Vec::new()
                },
            })
            .collect();
        tensors.sort_by_key(|t| t.kind);
        Moment {
            rank: self.rank,
            phase: self.phase,
            at: self.at,
            tensors,
        }
    }
}

pub(super) trait Sink {
    fn moment(&mut self, live: &Live);
}

pub(super) struct Collect {
    pub(super) unit: Unit,
    pub(super) out: Vec<Moment>,
}

impl Sink for Collect {
    fn moment(&mut self, live: &Live) {
        self.out.push(live.moment(self.unit));
    }
}

/// The first moment with the most bytes.
#[derive(Default)]
pub(super) struct DevicePeak {
    pub(super) best: Option<(u128, Live)>,
}

impl Sink for DevicePeak {
    fn moment(&mut self, live: &Live) {
        let bytes = live.total();
        if self.best.as_ref().is_none_or(|b| bytes > b.0) {
            self.best = Some((bytes, live.clone()));
        }
    }
}

/// Per phase, the first moment with the most transient bytes.
#[derive(Default)]
pub(super) struct PhasePeaks {
    pub(super) best: Vec<(u128, Live)>,
}

impl PhasePeaks {
    pub(super) fn moments(&self, unit: Unit) -> Vec<Moment> {
        let mut out: Vec<Moment> = self.best.iter().map(|(_, l)| l.moment(unit)).collect();
        out.sort_by_key(|m| m.phase);
        out
    }
}

impl Sink for PhasePeaks {
    fn moment(&mut self, live: &Live) {
        let bytes = live.transient();
        match self.best.iter_mut().find(|b| b.1.phase == live.phase) {
            Some(b) if bytes > b.0 => *b = (bytes, live.clone()),
            Some(_) => {}
            None => self.best.push((bytes, live.clone())),
        }
    }
}

/// The values of `at` in `0..n`, in order.
pub(super) fn exactly(n: u64, at: &[i128]) -> Vec<u64> {
    near_by(n, at, 0)
}

/// The values in `0..n` at distance at most 1 from one of `around`, in order.
pub(super) fn near(n: u64, around: &[i128]) -> Vec<u64> {
    near_by(n, around, 1)
}

pub(super) fn near_by(n: u64, around: &[i128], by: i128) -> Vec<u64> {
    let mut v: Vec<u64> = around
        .iter()
        .flat_map(|&x| (x - by)..=(x + by))
        .filter(|&y| y >= 0 && y < n as i128)
        .map(|y| y as u64)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}
