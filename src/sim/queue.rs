//! Deterministic event queue over integer simulated time.
//!
//! Time is a `u64` count of picoseconds ([`SimTime`]); 2^64 ps is about 213 days, far beyond any
//! training step. Events due at the same time come out in the order they were pushed (FIFO), by
//! a per-queue insertion sequence number, so a run never depends on heap internals
//! (NeXosim's `(time, epoch)` key). `push` and `pop` are O(log n).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Simulated time in picoseconds.
pub type SimTime = u64;

/// Picoseconds per second.
pub const PS_PER_S: f64 = 1e12;

/// Seconds to picoseconds, rounded to the nearest picosecond (negative and NaN give 0,
/// values beyond `u64::MAX` saturate).
pub fn secs_to_ps(s: f64) -> SimTime {
    (s * PS_PER_S).round() as SimTime
}

/// Picoseconds to seconds.
pub fn ps_to_secs(t: SimTime) -> f64 {
    t as f64 / PS_PER_S
}

struct Entry<E> {
    time: SimTime,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.time, self.seq) == (other.time, other.seq)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    /// Reversed, so that the max-heap yields the earliest (time, seq) first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

/// A priority queue of events keyed by `(time, insertion sequence)`.
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
}

impl<E> std::fmt::Debug for EventQueue<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventQueue")
            .field("len", &self.heap.len())
            .field("pushed", &self.seq)
            .finish()
    }
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }

    /// Schedules `event` at `time`.
    pub fn push(&mut self, time: SimTime, event: E) {
        let seq = self.seq;
        self.seq += 1;
        self.heap.push(Entry { time, seq, event });
    }

    /// Removes and returns the earliest event (FIFO among equal times).
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        self.heap.pop().map(|e| (e.time, e.event))
    }

    /// Time of the earliest event, if any.
    pub fn peek_time(&self) -> Option<SimTime> {
        self.heap.peek().map(|e| e.time)
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when no event is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Number of events ever pushed.
    pub fn pushed(&self) -> u64 {
        self.seq
    }

    /// The pending events in the order they will come out: `(time, event)`.
    pub fn pending(&self) -> Vec<(SimTime, &E)> {
        let mut v: Vec<&Entry<E>> = self.heap.iter().collect();
        v.sort_unstable_by_key(|e| (e.time, e.seq));
        v.into_iter().map(|e| (e.time, &e.event)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_and_fifo_among_ties() {
        let mut q = EventQueue::new();
        q.push(30, "c");
        q.push(10, "a1");
        q.push(20, "b");
        q.push(10, "a2");
        q.push(10, "a3");
        assert_eq!(q.peek_time(), Some(10));
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![(10, "a1"), (10, "a2"), (10, "a3"), (20, "b"), (30, "c")]
        );
        assert!(q.is_empty());
        assert_eq!(q.pushed(), 5);
    }

    #[test]
    fn fifo_holds_for_events_pushed_while_draining() {
        // An event pushed at the current time after others at that time comes out last.
        let mut q = EventQueue::new();
        q.push(5, 1);
        q.push(5, 2);
        assert_eq!(q.pop(), Some((5, 1)));
        q.push(5, 3);
        assert_eq!(q.pop(), Some((5, 2)));
        assert_eq!(q.pop(), Some((5, 3)));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn time_conversions_round_to_nearest_picosecond() {
        assert_eq!(secs_to_ps(1.0), 1_000_000_000_000);
        assert_eq!(secs_to_ps(3e-6), 3_000_000);
        assert_eq!(secs_to_ps(1.4e-12), 1);
        assert_eq!(secs_to_ps(1.6e-12), 2);
        assert_eq!(secs_to_ps(-1.0), 0);
        assert_eq!(ps_to_secs(2_500_000), 2.5e-6);
    }
}
