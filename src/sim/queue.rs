//! Deterministic event queue over integer simulated time.
//!
//! Time is a `u64` count of picoseconds ([`SimTime`]); 2^64 ps is about 213 days, far beyond any
//! training step. Events due at the same time come out in the order they were pushed (FIFO), by
//! a per-queue insertion sequence number, so a run never depends on heap internals
//! (NeXosim's `(time, epoch)` key). `push` and `pop` are O(log n).

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

#[derive(Clone, Copy)]
struct Entry<E> {
    /// `time << 64 | seq`: one integer orders by time, then FIFO; unique per queue.
    key: u128,
    event: E,
}

impl<E> Entry<E> {
    fn time(&self) -> SimTime {
        (self.key >> 64) as SimTime
    }
}

/// Children per node of the heap: a 4-ary heap is half as deep as a binary one and a node's
/// children share a cache line or two, which the engine's pop-heavy loop feels.
const ARITY: usize = 4;

/// A priority queue of events keyed by `(time, insertion sequence)`: an implicit 4-ary
/// min-heap over the packed key (every key is distinct, so the order is total and the same
/// whatever the heap's shape). Events are small `Copy` values, moved through the heap's holes.
pub struct EventQueue<E> {
    heap: Vec<Entry<E>>,
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

impl<E: Copy> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Copy> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        EventQueue {
            heap: Vec::new(),
            seq: 0,
        }
    }

    /// Schedules `event` at `time`.
    pub fn push(&mut self, time: SimTime, event: E) {
        let entry = Entry {
            key: u128::from(time) << 64 | u128::from(self.seq),
            event,
        };
        self.seq += 1;
        // Sift up: parents move down into the hole, the entry is written once.
        let mut i = self.heap.len();
        self.heap.push(entry);
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if self.heap[parent].key <= entry.key {
                break;
            }
            self.heap[i] = self.heap[parent];
            i = parent;
        }
        self.heap[i] = entry;
    }

    /// Removes and returns the earliest event (FIFO among equal times).
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        let last = self.heap.pop()?;
        let Some(&top) = self.heap.first() else {
            return Some((last.time(), last.event));
        };
        // Sift the last entry down from the root: smaller children move up into the hole.
        let n = self.heap.len();
        let mut i = 0;
        loop {
            let first = ARITY * i + 1;
            if first >= n {
                break;
            }
            let (mut m, mut mk) = (first, self.heap[first].key);
            for c in first + 1..(first + ARITY).min(n) {
                let k = self.heap[c].key;
                if k < mk {
                    (m, mk) = (c, k);
                }
            }
            if mk >= last.key {
                break;
            }
            self.heap[i] = self.heap[m];
            i = m;
        }
        self.heap[i] = last;
        Some((top.time(), top.event))
    }

    /// Time of the earliest event, if any.
    pub fn peek_time(&self) -> Option<SimTime> {
        self.heap.first().map(Entry::time)
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
        v.sort_unstable_by_key(|e| e.key);
        v.into_iter().map(|e| (e.time(), &e.event)).collect()
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

    proptest::proptest! {
        /// Interleaved pushes and pops come out as a sort by (time, push order) would give
        /// them, whatever the heap's shape.
        #[test]
        fn pops_follow_time_then_push_order(
            ops in proptest::collection::vec((0u64..40, proptest::bool::ANY), 0..300)
        ) {
            let mut q = EventQueue::new();
            let mut reference: Vec<(u64, usize)> = Vec::new();
            for (i, &(time, pop)) in ops.iter().enumerate() {
                if pop {
                    reference.sort_unstable();
                    let want = (!reference.is_empty()).then(|| reference.remove(0));
                    proptest::prop_assert_eq!(q.pop(), want);
                } else {
                    q.push(time, i);
                    reference.push((time, i));
                }
                proptest::prop_assert_eq!(q.len(), reference.len());
            }
            reference.sort_unstable();
            let rest: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
            proptest::prop_assert_eq!(rest, reference);
        }
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
