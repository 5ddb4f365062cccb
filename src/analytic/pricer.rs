//! The pricer of the closed form: a method's stages priced on the representative device's
//! timeline ([`Clock`]), its collectives and kernels each priced once per configuration (and
//! collectives once per profile: `cost::memo`), and the accumulated [`PartTimes`] the step is
//! composed of. Depends on `config`, `cost` and `schedule`'s plan types; never on `sim`.

use super::*;

/// α and rate of a message between ring neighbours of a group.
#[derive(Debug, Clone, Copy)]
pub(super) struct PathFigures {
    pub(super) latency_s: f64,
    pub(super) flow_bytes_per_s: f64,
}

pub(super) fn path_of(cost: &CostModel, devices: &[u32]) -> PathFigures {
    let (latency_s, flow_bytes_per_s) = cost.group_p2p(devices);
    PathFigures {
        latency_s,
        flow_bytes_per_s,
    }
}

/// Accumulated times of a part of the step.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PartTimes {
    pub(super) wall: f64,
    /// Kernel time at full speed.
    pub(super) compute: f64,
    /// Wall time with compute running (kernels slowed by overlapped communication last longer).
    pub(super) busy: f64,
    pub(super) comm: f64,
}

impl PartTimes {
    /// `s` of kernels alone (nothing in flight).
    pub(super) fn computing(s: f64) -> PartTimes {
        PartTimes {
            wall: s,
            compute: s,
            busy: s,
            comm: 0.0,
        }
    }

    /// `s` of communication the compute stream waits for (nothing to overlap it with).
    /// `k` of these in a row.
    pub(super) fn times(self, k: f64) -> PartTimes {
        PartTimes {
            wall: self.wall * k,
            compute: self.compute * k,
            busy: self.busy * k,
            comm: self.comm * k,
        }
    }

    pub(super) fn waiting_on_comm(s: f64) -> PartTimes {
        PartTimes {
            wall: s,
            compute: 0.0,
            busy: 0.0,
            comm: s,
        }
    }
}

impl std::ops::AddAssign for PartTimes {
    fn add_assign(&mut self, o: PartTimes) {
        self.wall += o.wall;
        self.compute += o.compute;
        self.busy += o.busy;
        self.comm += o.comm;
    }
}

pub(crate) struct Pricer<'a> {
    pub(super) cost: CostModel<'a>,
    pub(super) p: u64,
    /// The devices of the representative group: the method group spanning the most nodes.
    pub(super) group: Vec<u32>,
    /// The links a transfer between the group's members crosses, at their narrowest.
    pub(super) path: PathFigures,
    /// Context-parallel ranks (device i of each group of p: 0, p, 2p, …), and the links their
    /// ring crosses at the narrowest.
    pub(super) cp: u64,
    pub(super) cp_path: PathFigures,
    pub(super) sigma: f64,
    /// Collective times already priced: this configuration's (a step prices the same
    /// collective once per layer), then every configuration's on this profile
    /// (`cost::memo`: a plan's configurations share most of their collectives).
    collectives:
        std::cell::RefCell<std::collections::HashMap<crate::cost::collective::CollectiveKey, f64>>,
    pub(super) memo: std::sync::Arc<crate::cost::memo::Memo>,
    /// Kernel times already priced (a ring's steps and a step's layers repeat their shapes).
    pub(super) kernel_times: std::cell::RefCell<std::collections::HashMap<KernelShape, f64>>,
}

impl<'a> Pricer<'a> {
    /// A pricer for the p devices of `w`'s group (and its cp context-parallel ranks).
    pub(super) fn new(w: &'a ValidWorkload) -> Self {
        let cost = CostModel::new(&w.hardware);
        // The groups that span the most nodes: where nodes do not divide the layout, a step
        // waits for a straddling group, not for device 0's (`config::groups`).
        let group = w.widest_method_group();
        let cp = w.outer.cp;
        let cp_group = w.widest_context_group();
        Pricer {
            cost,
            p: w.p,
            path: path_of(&cost, &group),
            group,
            cp,
            cp_path: path_of(&cost, &cp_group),
            sigma: cost.overlap_slowdown(),
            collectives: Default::default(),
            memo: crate::cost::memo::memo(&w.hardware),
            kernel_times: Default::default(),
        }
    }

    /// Members of a ring's group and the links it crosses at the narrowest.
    pub(super) fn axis(&self, axis: Axis) -> (u64, PathFigures) {
        match axis {
            Axis::Method => (self.p, self.path),
            Axis::Context => (self.cp, self.cp_path),
        }
    }

    /// `α + bytes / B` of one message over a group of `n` crossing `path` (0 for one device).
    pub(super) fn message_over(&self, bytes: u64, n: u64, path: PathFigures) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        path.latency_s + bytes as f64 / path.flow_bytes_per_s
    }

    pub(super) fn kernels(&self, ks: &[Kernel]) -> f64 {
        ks.iter().map(|k| self.kernel_s(&k.shape)).sum()
    }

    /// `CostModel::kernel_s`, each shape priced once.
    pub(super) fn kernel_s(&self, shape: &KernelShape) -> f64 {
        if let Some(&t) = self.kernel_times.borrow().get(shape) {
            return t;
        }
        let t = self.cost.kernel_s(shape);
        self.kernel_times.borrow_mut().insert(*shape, t);
        t
    }

    pub(super) fn message(&self, bytes: u64) -> f64 {
        if self.p <= 1 {
            return 0.0;
        }
        self.path.latency_s + bytes as f64 / self.path.flow_bytes_per_s
    }

    /// A collective over `devices` with the algorithm the profile picks.
    pub(super) fn collective(&self, op: CollectiveOp, devices: &[u32], bytes: u64) -> f64 {
        // A group moved by whole leaves of the fabric (whole nodes without a spine) costs the
        // same: its links, rails and leaves are the same ones shifted. Keyed where it starts in
        // its first leaf, the stages of an aligned pipeline share one price.
        let unit = self.cost.hardware().gpus_per_leaf();
        let shift = devices
            .iter()
            .min()
            .map_or(0, |&d| u64::from(d) / unit * unit) as u32;
        let key = (
            op,
            devices.iter().map(|&d| d - shift).collect::<Vec<u32>>(),
            bytes,
        );
        if let Some(&t) = self.collectives.borrow().get(&key) {
            return t;
        }
        let t = self
            .memo
            .get_or(&key, || self.cost.collective_s(op, &key.1, bytes));
        self.collectives.borrow_mut().insert(key, t);
        t
    }

    pub(super) fn stages(&self, stages: &[Stage]) -> PartTimes {
        let mut c = Clock::default();
        for s in stages {
            self.stage(&mut c, s);
        }
        c.total()
    }

    pub(super) fn stage(&self, c: &mut Clock, s: &Stage) {
        match s {
            Stage::Compute(ks) => {
                for k in ks {
                    let d = self.kernel_s(&k.shape);
                    c.t = c.run(c.t, d, self.sigma);
                }
            }
            Stage::Collective { op, bytes, .. } => {
                if self.p > 1 {
                    let m = self.collective(*op, &self.group, *bytes);
                    c.transfer(c.t, m);
                    c.t += m;
                }
            }
            Stage::Ring(r) => self.ring(c, r),
            Stage::Outer(o) => self.outer(c, o),
        }
    }

    /// A ring, step by step, with the same dependencies as its lowering: step k's kernels wait
    /// for the previous step and for the prefetch of hop k−1; hop k's prefetch starts when hop
    /// k−1 has landed and a receive buffer is free (after step k−1 with two buffers, after
    /// step k with one); the accumulate of step k waits for the accumulator hop k−1; each
    /// accumulator hop follows its accumulate, and the last one returns to the owner.
    pub(super) fn ring(&self, c: &mut Clock, r: &Ring) {
        let steps = r.steps.len();
        let (n, path) = self.axis(r.axis);
        let comm = n > 1;
        let m = self.message_over(r.prefetch_bytes, n, path);
        let ma = if r.accumulator_bytes > 0 {
            self.message_over(r.accumulator_bytes, n, path)
        } else {
            0.0
        };
        let t0 = c.t;
        let (mut prev_main_end, mut prev_end) = (t0, t0);
        let mut pre_arrival: Option<f64> = None;
        let mut acc_arrival: Option<f64> = None;
        for (k, step) in r.steps.iter().enumerate() {
            // The critical device: the one whose block's kernels take longest at this step.
            let busiest = step
                .present(n as usize, k)
                .iter()
                .map(|&b| step.kernels_of(b))
                .max_by(|a, b| self.kernels(a).total_cmp(&self.kernels(b)))
                .unwrap_or(&[]);
            let hop = comm && k + 1 < steps;
            let pre_ready = pre_arrival.unwrap_or(t0);
            if hop && r.buffers >= 2 {
                let start = pre_ready.max(prev_main_end);
                c.transfer(start, m);
            }
            let mut t = prev_end.max(pre_arrival.unwrap_or(t0));
            for kern in busiest {
                let d = self.kernel_s(&kern.shape);
                t = c.run(t, d, self.sigma);
            }
            let main_end = t;
            let this_pre = if hop {
                let start = if r.buffers >= 2 {
                    pre_ready.max(prev_main_end)
                } else {
                    let s = pre_ready.max(main_end);
                    c.transfer(s, m);
                    s
                };
                Some(start + m)
            } else {
                None
            };
            if !step.accumulate.is_empty() || (ma > 0.0 && comm) {
                t = t.max(acc_arrival.unwrap_or(t0));
                for kern in &step.accumulate {
                    let d = self.kernel_s(&kern.shape);
                    t = c.run(t, d, self.sigma);
                }
                if ma > 0.0 && comm {
                    c.transfer(t, ma);
                    acc_arrival = Some(t + ma);
                }
            }
            prev_main_end = main_end;
            prev_end = t;
            if this_pre.is_some() {
                pre_arrival = this_pre;
            }
        }
        c.t = prev_end.max(acc_arrival.unwrap_or(prev_end));
    }

    /// Time to bring one group's weights (or gradients) to every device.
    pub(super) fn fetch(&self, o: &Outer, bytes: u64) -> f64 {
        if self.p <= 1 {
            return 0.0;
        }
        match o.exchange {
            Exchange::Chain => (self.p - 1) as f64 * self.message(bytes),
            Exchange::Broadcast => {
                self.collective(CollectiveOp::Broadcast { root: 0 }, &self.group, bytes)
            }
        }
    }

    /// METP's outer loop with the lowering's dependencies: group g+1's weights start moving
    /// when group g starts (two buffers) or ends (one); group g+1 starts when both its weights
    /// and group g are done; weight gradients go back to their owner after each group.
    ///
    /// A broadcast is a collective: every device takes part for its whole duration. A chain is
    /// a relay along the ring, so successive chains pipeline one hop apart: the first group's
    /// weights take the whole chain, later ones arrive one hop `h` after the previous, and each
    /// device has communication in flight only while it receives and forwards (2h per group).
    /// Gradient returns pipeline the same way, one hop apart, the last one exposed.
    pub(super) fn outer(&self, c: &mut Clock, o: &Outer) {
        let chain = o.exchange == Exchange::Chain;
        let p = self.p;
        let w = self.fetch(o, o.weight_bytes);
        let g = if o.grad_bytes > 0 {
            self.fetch(o, o.grad_bytes)
        } else {
            0.0
        };
        let (hw, hg) = if chain && p > 1 {
            (self.message(o.weight_bytes), self.message(o.grad_bytes))
        } else {
            (w, g)
        };
        let in_flight = |h: f64| if chain && p > 2 { 2.0 * h } else { h };
        c.transfer(c.t, in_flight(hw).min(w));
        let mut ready = c.t + w;
        let mut grad_end = f64::NEG_INFINITY;
        for gi in 0..o.groups {
            let more = gi + 1 < o.groups;
            let start = c.t.max(ready);
            c.t = start;
            let mut next_ready = None;
            if more && o.buffers >= 2 && p > 1 {
                c.transfer(start, in_flight(hw));
                next_ready = Some(start + hw);
            }
            for s in &o.body {
                self.stage(c, s);
            }
            if g > 0.0 && p > 1 {
                c.transfer(c.t, in_flight(hg).min(g));
                grad_end = (c.t + g).max(grad_end + hg);
            }
            ready = match next_ready {
                Some(r) => r,
                None if more && p > 1 => {
                    c.transfer(c.t, in_flight(hw).min(w));
                    c.t + w
                }
                None => c.t,
            };
        }
        c.t = c.t.max(grad_end);
    }
}

/// The timeline of one phase on the representative device: the current time, the intervals
/// during which it has communication in flight (compute runs at 1 − σ of its speed inside
/// them), and running totals.
#[derive(Debug, Default)]
pub(super) struct Clock {
    pub(super) t: f64,
    pub(super) slow: Vec<(f64, f64)>,
    /// Intervals that ended at or before `retired_before`, moved out of `slow` so that a run
    /// scans only the transfers still in flight (a phase with many ring steps otherwise costs
    /// the square of its transfers); consulted again only by a run that starts earlier.
    pub(super) retired: Vec<(f64, f64)>,
    pub(super) retired_before: f64,
    pub(super) compute: f64,
    pub(super) busy: f64,
    pub(super) comm: f64,
    pub(super) last_end: f64,
}

impl Clock {
    /// Records a transfer in flight over `[start, start + d)`.
    pub(super) fn transfer(&mut self, start: f64, d: f64) {
        if d > 0.0 {
            self.slow.push((start, start + d));
            self.comm += d;
            self.last_end = self.last_end.max(start + d);
        }
    }

    /// Runs `work` seconds of full-speed compute from `start`; returns when it ends.
    pub(super) fn run(&mut self, start: f64, work: f64, sigma: f64) -> f64 {
        self.compute += work;
        if start > self.retired_before {
            let mut retired = std::mem::take(&mut self.retired);
            self.slow.retain(|&x| {
                let keep = x.1 > start;
                if !keep {
                    retired.push(x);
                }
                keep
            });
            self.retired = retired;
            self.retired_before = start;
        }
        let early: &[(f64, f64)] = if start < self.retired_before {
            &self.retired
        } else {
            &[]
        };
        let mut spans: Vec<(f64, f64)> = self
            .slow
            .iter()
            .chain(early)
            .copied()
            .filter(|&(_, b)| b > start)
            .collect();
        spans.sort_by(|x, y| x.0.total_cmp(&y.0));
        let mut merged: Vec<(f64, f64)> = Vec::new();
        for (a, b) in spans {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a.max(start), b)),
            }
        }
        let (mut t, mut left) = (start, work);
        for (a, b) in merged {
            if a > t {
                let free = a - t;
                if left <= free {
                    break;
                }
                left -= free;
                t = a;
            }
            let slow_cap = (b - t) * (1.0 - sigma);
            if left <= slow_cap {
                t += left / (1.0 - sigma);
                left = 0.0;
                break;
            }
            left -= slow_cap;
            t = b;
        }
        let end = t + left;
        self.busy += end - start;
        self.last_end = self.last_end.max(end);
        end
    }

    pub(super) fn total(&self) -> PartTimes {
        PartTimes {
            wall: self.t.max(self.last_end),
            compute: self.compute,
            busy: self.busy,
            comm: self.comm,
        }
    }
}
