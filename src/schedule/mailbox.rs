//! The messages between the virtual stages of a pipeline, as a walk of the 1F1B orders sees
//! them (`analytic::pipeline`, `sim::compose`): one queue per direction and receiving virtual
//! stage. Megatron's orders send a virtual stage's activations (and gradients) in micro-batch
//! order and consume them in the same order, so each queue is first in, first out — no map
//! keyed by micro-batch, and only the messages in flight are held.

use std::collections::VecDeque;

use crate::config::PipeOp;

/// A message: its micro-batch, when it leaves and when it arrives.
type Message = (u32, f64, f64);

/// The queues (module docs).
#[derive(Debug, Clone)]
pub struct Mailboxes {
    queues: Vec<VecDeque<Message>>,
    virtual_stages: usize,
}

impl Mailboxes {
    /// Empty queues for `virtual_stages` virtual stages.
    pub fn new(virtual_stages: u64) -> Mailboxes {
        let n = virtual_stages as usize;
        Mailboxes {
            queues: vec![VecDeque::new(); 2 * n],
            virtual_stages: n,
        }
    }

    fn queue(&mut self, gradient: bool, at: u64) -> &mut VecDeque<Message> {
        let i = usize::from(gradient) * self.virtual_stages + at as usize;
        &mut self.queues[i]
    }

    /// Posts micro-batch `mb`'s activation (or, `gradient`, its gradient) to virtual stage
    /// `to`, leaving and arriving at the times given.
    pub fn post(&mut self, gradient: bool, mb: u32, to: u64, leaves: f64, arrives: f64) {
        self.queue(gradient, to).push_back((mb, leaves, arrives));
    }

    /// Takes micro-batch `mb`'s message to virtual stage `at`: `(leaves, arrives)`, or `None`
    /// when it has not been sent yet.
    pub fn take(&mut self, gradient: bool, mb: u32, at: u64) -> Option<(f64, f64)> {
        let q = self.queue(gradient, at);
        match q.front() {
            Some(&(m, leaves, arrives)) if m == mb => {
                q.pop_front();
                Some((leaves, arrives))
            }
            _ => None,
        }
    }

    /// What op `op` of virtual stage `u` (of `0..=last_u`) receives before it can start: `None`
    /// while its input has not been sent; `Some(None)` when it needs none (the first virtual
    /// stage's forwards, the last one's backwards); else the message, taken.
    pub fn input(&mut self, op: &PipeOp, u: u64, last_u: u64) -> Option<Option<(f64, f64)>> {
        let needs = if op.forward { u > 0 } else { u < last_u };
        if !needs {
            return Some(None);
        }
        // Each message is consumed once: the queues hold the ones in flight only.
        self.take(!op.forward, op.micro_batch, u).map(Some)
    }
}
