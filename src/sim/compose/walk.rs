//! The composition's walk of the stages' 1F1B orders with the simulated programs' times
//! (`sim::compose`'s module docs): each stage's clock, the messages between stages, the
//! gradient synchronisations left in flight.
//!
//! Depends on its parent's `Program` and the schedule's orders and mailboxes; never on the
//! engine.

use super::Program;
use crate::config::{pipeline_op, PipeOp};
use crate::error::{Error, Result};
use crate::schedule::Mailboxes;

/// A stage's clock in the walk.
#[derive(Debug, Clone, Default)]
pub(super) struct Clock {
    /// When the stage's compute is free.
    pub(super) t: f64,
    /// When its last message forward / backward has arrived.
    pub(super) sent: [f64; 2],
    /// End of the gradient synchronisations still in flight.
    pub(super) queue_end: f64,
    /// Per device of the stage: compute, communication, exposed.
    pub(super) compute: Vec<f64>,
    pub(super) comm: Vec<f64>,
    pub(super) exposed: Vec<f64>,
    /// Pipeline messages to or from the stage, `(leaves, arrives)`, that may still overlap its
    /// ops.
    pub(super) flights: Vec<(f64, f64)>,
}

impl Clock {
    /// `self + k·(other − self)`, field by field (a walk extrapolated along its rounds).
    pub(super) fn toward(self, other: &Clock, k: f64) -> Clock {
        let f = |a: f64, b: f64| (a + k * (b - a)).max(0.0);
        let fv = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect();
        Clock {
            t: f(self.t, other.t),
            sent: [
                f(self.sent[0], other.sent[0]),
                f(self.sent[1], other.sent[1]),
            ],
            queue_end: f(self.queue_end, other.queue_end),
            compute: fv(&self.compute, &other.compute),
            comm: fv(&self.comm, &other.comm),
            exposed: fv(&self.exposed, &other.exposed),
            flights: Vec::new(),
        }
    }
}

/// Ops past which a walk is not taken to the end (as `analytic::pipeline`'s).
pub(super) const MAX_WALK_OPS: u64 = 1 << 20;

/// What a walk of the 1F1B orders needs: the programs and the messages' times.
pub(super) struct Walker<'a> {
    pub(super) pp: u32,
    pub(super) v: u32,
    pub(super) sigma: f64,
    /// Simulated devices per stage.
    pub(super) devices: Vec<usize>,
    /// The program of an op of a stage in a step of m micro-batches.
    pub(super) program: &'a dyn Fn(u32, &PipeOp, u32) -> &'a Program,
    /// A message's time from one stage to another.
    pub(super) message: &'a dyn Fn(u32, u32) -> f64,
    /// The receiving group's all-gather after each message, 0 without
    /// (`StepPlan::pipeline_gather_bytes`).
    pub(super) gather: f64,
    /// Per stage: the chunk whose first forward waits for the updated weights' first gather,
    /// issued at the step's start, and its seconds (`config::ParamGather::Overlapped`).
    pub(super) first_gather: Vec<Option<(u32, f64)>>,
}

impl Walker<'_> {
    /// Every stage's clock after its 1F1B order with `m` micro-batches (module docs).
    pub(super) fn walk(&self, m: u32) -> Result<Vec<Clock>> {
        let (pp, v) = (self.pp, self.v);
        let last_u = u64::from(pp) * u64::from(v) - 1;
        let len = 2 * m * v;
        let mut clocks: Vec<Clock> = (0..pp as usize)
            .map(|s| Clock {
                compute: vec![0.0; self.devices[s]],
                comm: vec![0.0; self.devices[s]],
                exposed: vec![0.0; self.devices[s]],
                ..Clock::default()
            })
            .collect();
        let mut arrivals = Mailboxes::new(u64::from(pp) * u64::from(v));
        let mut idx = vec![0u32; pp as usize];
        loop {
            let mut progress = false;
            for s in 0..pp {
                let su = s as usize;
                while idx[su] < len {
                    let op = pipeline_op(pp, v, m, s, idx[su]);
                    let u = u64::from(op.chunk) * u64::from(pp) + u64::from(s);
                    let Some(arrival) = arrivals.input(&op, u, last_u) else {
                        break;
                    };
                    let prog = (self.program)(s, &op, m);
                    let c = &mut clocks[su];
                    let mut t = c.t;
                    if let Some((leaves, arrives)) = arrival {
                        for d in 0..c.exposed.len() {
                            c.comm[d] += arrives - leaves;
                            if arrives > t {
                                c.exposed[d] += arrives - t.max(leaves);
                            }
                        }
                        t = t.max(arrives) + self.gather;
                        for d in 0..c.exposed.len() {
                            c.comm[d] += self.gather;
                            c.exposed[d] += self.gather;
                        }
                    }
                    if let Some((chunk, g)) = self.first_gather[su] {
                        if op.forward && op.micro_batch == 0 && op.chunk == chunk {
                            for d in 0..c.exposed.len() {
                                c.comm[d] += g;
                                c.exposed[d] += (g - t).max(0.0);
                            }
                            t = t.max(g);
                        }
                    }
                    // The op lasts as long as its slowest device; `share`: how much of it
                    // that device computes.
                    let (dur, share) = prog.devices.iter().fold((0.0, 0.0), |acc, x| {
                        if x[0] > acc.0 {
                            let share = if x[0] > 0.0 {
                                (x[2] / x[0]).min(1.0)
                            } else {
                                0.0
                            };
                            (x[0], share)
                        } else {
                            acc
                        }
                    });
                    // The op's kernels run slowed while a pipeline message of this stage (or a
                    // synchronisation left in flight) is, for the share of the op they run.
                    c.flights.retain(|&(_, b)| b > t);
                    let overlap: f64 = c
                        .flights
                        .iter()
                        .map(|&(a, b)| (b.min(t + dur) - a.max(t)).max(0.0))
                        .sum();
                    let slowed = self.sigma * overlap.min(dur) * share;
                    let dur = dur + slowed;
                    let tail = prog.devices.iter().map(|x| x[1] - x[0]).fold(0.0, f64::max);
                    for (d, x) in prog.devices.iter().enumerate() {
                        c.compute[d] += x[2] + slowed;
                        c.comm[d] += x[3];
                        c.exposed[d] += x[4];
                    }
                    t += dur;
                    if tail > 0.0 {
                        let from = c.queue_end.max(t);
                        c.queue_end = from + tail;
                        c.flights.push((from, c.queue_end));
                    }
                    c.t = t;
                    let to = if op.forward {
                        (u < last_u).then(|| u + 1)
                    } else {
                        (u > 0).then(|| u - 1)
                    };
                    if let Some(to) = to {
                        let dir = usize::from(!op.forward);
                        let leaves = t.max(c.sent[dir]);
                        let to_stage = (to % u64::from(pp)) as u32;
                        let arrives = leaves + (self.message)(s, to_stage);
                        c.sent[dir] = arrives;
                        for d in 0..c.comm.len() {
                            c.comm[d] += arrives - leaves;
                        }
                        c.flights.push((leaves, arrives));
                        if to_stage != s {
                            clocks[to_stage as usize].flights.push((leaves, arrives));
                        }
                        arrivals.post(!op.forward, op.micro_batch, to, leaves, arrives);
                    }
                    idx[su] += 1;
                    progress = true;
                }
            }
            if !progress {
                break;
            }
        }
        if idx.iter().any(|&i| i < len) {
            return Err(Error::InvalidGraph {
                message: format!(
                    "the composed pipeline of {pp} stages did not complete its 1F1B orders"
                ),
            });
        }
        Ok(clocks)
    }
}
