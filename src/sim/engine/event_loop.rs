//! The event loop: starts and completes tasks, moves flows, slows compute while
//! communication is in flight, and accounts busy and exposed time.

use super::recurrence::{extend, proven, DeviceTotals};
use super::*;

impl<'g> Engine<'g> {
    pub(super) fn run(&mut self) -> Result<(), Error> {
        for s in 0..self.stream_key.len() {
            let h = self.stream_tasks[self.cursor[s] as usize];
            if self.ts[h as usize].deps_left == 0 {
                self.actions.push_back(Action::Start(h));
            }
        }
        loop {
            self.drain()?;
            if self.flows.needs_resolve() && self.q.peek_time().is_none_or(|t| t > self.now) {
                self.resolve_flows();
                continue;
            }
            if self.monitor_due() && self.q.peek_time().is_none_or(|t| t > self.now) {
                self.monitor_instant();
            }
            let Some((t, ev)) = self.q.pop() else { break };
            self.now = t;
            self.events += 1;
            match ev {
                Ev::Compute { task, gen } => {
                    if self.ts[task as usize].gen == gen {
                        self.finish_compute(task);
                    }
                }
                Ev::Latency { op } => self.start_flows(op),
                Ev::Flow { slot, gen } => {
                    if self.flows.get(slot).gen == gen {
                        self.finish_flow(slot);
                    }
                }
            }
        }
        if self.done < self.g.tasks.len() {
            return Err(Error::Deadlock {
                message: self.deadlock_message(),
            });
        }
        Ok(())
    }

    fn resolve_flows(&mut self) {
        let mut changed = std::mem::take(&mut self.changed);
        changed.clear();
        self.flows.resolve(self.now, &mut changed);
        for &slot in &changed {
            if let Some(t) = self.flows.finish_time(slot) {
                let gen = self.flows.get(slot).gen;
                self.q.push(t, Ev::Flow { slot, gen });
            }
        }
        self.changed = changed;
    }

    /// Processes starts and completions that happen at `now` without an event.
    fn drain(&mut self) -> Result<(), Error> {
        while let Some(a) = self.actions.pop_front() {
            match a {
                Action::Start(t) => self.start(t)?,
                Action::Complete(t) => self.complete(t),
            }
        }
        Ok(())
    }

    /// Accounts the device's time since its last change, before its state changes.
    pub(super) fn touch(&mut self, d: u32) {
        let now = self.now;
        let dev = &mut self.dev[d as usize];
        let dt = now - dev.last;
        if dt > 0 {
            if dev.running > 0 {
                dev.compute_busy += dt;
            }
            if dev.comm > 0 {
                dev.comm_busy += dt;
                if dev.running == 0 {
                    dev.exposed += dt;
                }
            }
        }
        dev.last = now;
    }

    fn start(&mut self, t: u32) -> Result<(), Error> {
        if self.mon.is_some() {
            self.monitor_start(t);
        }
        let ti = t as usize;
        let st = &mut self.ts[ti];
        st.state = STARTED;
        let (d, kind) = (st.device, st.kind);
        if !self.started_at.is_empty() {
            self.started_at[ti] = self.now;
        }
        match kind {
            Kind::Compute => {
                self.touch(d);
                let dev = &mut self.dev[d as usize];
                dev.running += 1;
                let slow = self.slowdown && dev.comm > 0;
                if self.slowdown {
                    self.running[d as usize].push(t);
                }
                let st = &mut self.ts[ti];
                st.slow = slow;
                st.last = self.now;
                self.schedule_compute(t);
            }
            Kind::Send | Kind::Recv => {
                let p = self.ts[ti].peer;
                if self.ts[p as usize].state == STARTED {
                    let (send, recv) = if kind == Kind::Send { (t, p) } else { (p, t) };
                    self.begin_op(OpKind::P2p { send, recv }, 1, send);
                }
            }
            Kind::Collective => {
                let c = self.ts[ti].peer;
                let coll = &mut self.colls[c as usize];
                coll.started += 1;
                if coll.started == coll.members.end - coll.members.start {
                    let class = coll.class as usize;
                    if self.classes[class].plan.is_none() {
                        self.plan_class(class);
                    }
                    let steps = self.classes[class].plan.as_ref().map_or(0, |p| p.steps());
                    let rep = self.coll_tasks[self.colls[c as usize].members.start as usize];
                    self.begin_op(OpKind::Coll { coll: c }, steps, rep);
                }
            }
            Kind::Alloc => {
                let dev = &mut self.dev[d as usize];
                dev.live += self.ts[ti].work as u128;
                dev.high = dev.high.max(dev.live);
                if self.mon.is_some() {
                    self.monitor_alloc(d);
                }
                self.actions.push_back(Action::Complete(t));
            }
            Kind::Free => {
                let dev = &mut self.dev[d as usize];
                let bytes = self.ts[ti].work as u128;
                if bytes > dev.live {
                    let Work::Free { tensor, .. } = self.g.tasks[ti].work else {
                        unreachable!("kind follows work")
                    };
                    return Err(invalid(format!(
                        "task {t} frees {bytes} bytes of '{tensor}' on device {d}, which has only {} live",
                        dev.live
                    )));
                }
                dev.live -= bytes;
                self.actions.push_back(Action::Complete(t));
            }
        }
        Ok(())
    }

    /// Makes the plan of collective class `ci`, and each step's moving transfers with their
    /// routes (what [`Engine::start_flows`] would find for every collective of the class).
    fn plan_class(&mut self, ci: usize) {
        let c = &self.classes[ci];
        let (op, bytes) = (c.op, c.bytes);
        let group = &self.class_groups[c.group.start as usize..c.group.end as usize];
        let senders = &self.class_senders[c.senders.start as usize..c.senders.end as usize];
        let senders = (!senders.is_empty()).then_some(senders);
        let plan = self.net.plan(op, group, bytes);
        let (mut transfers, mut routes) = (Vec::new(), Vec::new());
        let mut offsets = Vec::with_capacity(plan.steps() as usize + 1);
        let mut flows = std::mem::take(&mut self.class_flows);
        offsets.push(flows.len() as u32);
        for k in 0..plan.steps() {
            plan.transfers(k, group, senders, &mut transfers);
            self.moving(&mut transfers, &mut routes);
            flows.extend(transfers.iter().copied().zip(routes.iter().copied()));
            offsets.push(flows.len() as u32);
        }
        self.class_flows = flows;
        let c = &mut self.classes[ci];
        c.plan = Some(plan);
        c.flows = offsets;
    }

    fn schedule_compute(&mut self, t: u32) {
        let ti = t as usize;
        let dur = if self.ts[ti].slow {
            (self.ts[ti].work as f64 / self.slow_rate).ceil() as SimTime
        } else {
            self.ts[ti].work
        };
        self.ts[ti].gen = self.ts[ti].gen.wrapping_add(1);
        self.q.push(
            self.now.saturating_add(dur),
            Ev::Compute {
                task: t,
                gen: self.ts[ti].gen,
            },
        );
    }

    /// Changes the speed of device `d`'s running kernels (communication became busy or idle).
    fn set_device_slow(&mut self, d: u32, slow: bool) {
        let now = self.now;
        for i in 0..self.running[d as usize].len() {
            let t = self.running[d as usize][i] as usize;
            if self.ts[t].slow == slow {
                continue;
            }
            let elapsed = now - self.ts[t].last;
            let done = if self.ts[t].slow {
                (elapsed as f64 * self.slow_rate).round() as SimTime
            } else {
                elapsed
            };
            self.ts[t].work = self.ts[t].work.saturating_sub(done);
            self.ts[t].last = now;
            self.ts[t].slow = slow;
            self.schedule_compute(t as u32);
        }
    }

    fn finish_compute(&mut self, t: u32) {
        let d = self.ts[t as usize].device;
        self.touch(d);
        self.dev[d as usize].running -= 1;
        if self.slowdown {
            let r = &mut self.running[d as usize];
            if let Some(i) = r.iter().position(|&x| x == t) {
                r.swap_remove(i);
            }
        }
        self.complete(t);
    }

    fn complete(&mut self, t: u32) {
        let ti = t as usize;
        self.ts[ti].state = DONE;
        self.done += 1;
        let d = self.ts[ti].device as usize;
        self.dev[d].finish = self.now;
        let s = self.ts[ti].stream as usize;
        if self.stream_key[s].1 == Stream::Compute {
            // The compute stream's last task so far (kernels, and the joins ending each phase).
            self.touch(d as u32);
            let dev = &mut self.dev[d];
            dev.kernels_end = self.now;
            dev.exposed_at_kernels_end = dev.exposed;
        }
        // With SimOptions::trace_device, only that device's spans. (The graph's task is read
        // only for a trace: untraced, the loop keeps to its own compact per-task state.)
        if let Some(spans) = &mut self.spans {
            let task = &self.g.tasks[ti];
            if self.trace_device.is_some_and(|d| d != task.device) {
                return self.complete_untraced(ti, s);
            }
            spans.push(Span {
                track: Track::Stream {
                    device: task.device,
                    stream: task.stream,
                },
                start_ps: self.started_at[ti],
                end_ps: self.now,
                task: t,
                label: task.label,
                collective_step: None,
            });
        }
        self.complete_untraced(ti, s);
    }

    /// The rest of [`Engine::complete`]: the stream moves on, dependents are released.
    fn complete_untraced(&mut self, ti: usize, s: usize) {
        self.cursor[s] += 1;
        if self.cursor[s] < self.stream_off[s + 1] {
            let h = self.stream_tasks[self.cursor[s] as usize];
            if self.ts[h as usize].deps_left == 0 {
                self.actions.push_back(Action::Start(h));
            }
        }
        for k in self.dependents_off[ti]..self.dependents_off[ti + 1] {
            let x = self.dependents[k as usize];
            let left = &mut self.ts[x as usize].deps_left;
            *left -= 1;
            if *left == 0 {
                let sx = self.ts[x as usize].stream as usize;
                if self.stream_tasks[self.cursor[sx] as usize] == x
                    && self.ts[x as usize].state == NOT_STARTED
                {
                    self.actions.push_back(Action::Start(x));
                }
            }
        }
    }

    /// Devices taking part in an op, written to `out`.
    fn op_devices(&self, kind: OpKind, out: &mut Vec<u32>) {
        out.clear();
        match kind {
            OpKind::P2p { send, recv } => {
                out.push(self.ts[send as usize].device);
                out.push(self.ts[recv as usize].device);
            }
            OpKind::Coll { coll } => {
                let c = &self.colls[coll as usize];
                for &m in &self.coll_tasks[c.members.start as usize..c.members.end as usize] {
                    out.push(self.ts[m as usize].device);
                }
            }
        }
    }

    fn set_comm(&mut self, kind: OpKind, delta: i32) {
        let mut devs = std::mem::take(&mut self.devs);
        self.op_devices(kind, &mut devs);
        for &d in &devs {
            self.touch(d);
            let c = &mut self.dev[d as usize].comm;
            let before = *c;
            *c = before.wrapping_add_signed(delta);
            let after = *c;
            if self.slowdown && (before == 0) != (after == 0) {
                self.set_device_slow(d, after > 0);
            }
        }
        self.devs = devs;
    }

    fn begin_op(&mut self, kind: OpKind, steps: u32, rep: u32) {
        let op = self.ops.len() as u32;
        self.ops.push(Op {
            kind,
            step: 0,
            steps,
            flows_left: 0,
            rep,
        });
        self.set_comm(kind, 1);
        self.begin_step(op);
    }

    /// The latency of the op's current step: a message's α, or the step latency of the
    /// collective's plan.
    fn step_latency(&self, op: u32) -> SimTime {
        let o = self.ops[op as usize];
        match o.kind {
            OpKind::P2p { send, .. } => {
                let Work::Send { to, .. } = self.g.tasks[send as usize].work else {
                    unreachable!("p2p ops start from a send")
                };
                self.net
                    .latency_ps(self.g.rank_of(self.ts[send as usize].device), to)
            }
            OpKind::Coll { coll } => self.classes[self.colls[coll as usize].class as usize]
                .plan
                .as_ref()
                .and_then(|p| p.phase_of(o.step))
                .map_or(0, |(phase, _)| secs_to_ps(phase.step_latency_s)),
        }
    }

    /// Fills `self.transfers` with the message of a point-to-point op (a collective's steps
    /// come from its class, [`Engine::plan_class`]).
    fn step_transfers(&mut self, op: u32) {
        let o = self.ops[op as usize];
        self.transfers.clear();
        if let OpKind::P2p { send, .. } = o.kind {
            let Work::Send { to, .. } = self.g.tasks[send as usize].work else {
                unreachable!("p2p ops start from a send")
            };
            let src = self.g.rank_of(self.ts[send as usize].device);
            let bytes = self.ts[send as usize].work as f64;
            self.transfers.push(Transfer {
                src,
                dst: to,
                bytes: self.net.p2p_wire_bytes(src, to, bytes),
            });
        }
    }

    fn begin_step(&mut self, op: u32) {
        let o = self.ops[op as usize];
        if o.step >= o.steps {
            self.finish_op(op);
            return;
        }
        let lat = self.step_latency(op);
        if lat > 0 {
            self.q
                .push(self.now.saturating_add(lat), Ev::Latency { op });
        } else {
            self.start_flows(op);
        }
    }

    /// Keeps of `transfers` those that move and writes their routes to `routes`. Of a
    /// collective's transfers, those of mirrored ranks are images of a simulated rank's (graph
    /// module docs): only the canonical senders' move, and a transfer to a mirrored rank loads
    /// that rank's representative's links instead.
    fn moving(&self, transfers: &mut Vec<Transfer>, routes: &mut Vec<crate::sim::network::Route>) {
        routes.clear();
        let mut kept = 0;
        for i in 0..transfers.len() {
            let x = transfers[i];
            if !self.g.is_canonical(x.src) {
                continue;
            }
            let route = if self.g.is_canonical(x.dst) {
                self.net.route(x.src, x.dst)
            } else {
                let mirror = self.g.device_of(x.dst).map_or(x.dst, |d| self.g.rank_of(d));
                self.net.route_mirrored(x.src, x.dst, mirror)
            };
            transfers[kept] = x;
            routes.push(route);
            kept += 1;
        }
        transfers.truncate(kept);
    }

    fn start_flows(&mut self, op: u32) {
        let o = self.ops[op as usize];
        match o.kind {
            OpKind::P2p { .. } => {
                self.step_transfers(op);
                let (mut transfers, mut routes) = (
                    std::mem::take(&mut self.transfers),
                    std::mem::take(&mut self.routes),
                );
                self.moving(&mut transfers, &mut routes);
                (self.transfers, self.routes) = (transfers, routes);
            }
            OpKind::Coll { coll } => {
                // The class's step, found when its plan was made.
                let c = &self.classes[self.colls[coll as usize].class as usize];
                let (a, b) = (
                    c.flows[o.step as usize] as usize,
                    c.flows[o.step as usize + 1] as usize,
                );
                self.transfers.clear();
                self.routes.clear();
                for &(x, r) in &self.class_flows[a..b] {
                    self.transfers.push(x);
                    self.routes.push(r);
                }
            }
        }
        // Ideal links: no contention with other operations, but the flows of one step share
        // the links they have in common equally (a step is never faster than its busiest
        // link: what the cost model's step time assumes).
        let ideal = self.flows.model() == LinkModel::Ideal;
        if ideal {
            for r in &self.routes {
                for &l in r.links() {
                    self.link_count[l as usize] += 1;
                }
            }
        }
        let mut n = 0;
        for i in 0..self.transfers.len() {
            let (x, route) = (self.transfers[i], self.routes[i]);
            let cap = if ideal {
                route
                    .links()
                    .iter()
                    .map(|&l| {
                        self.net.links()[l as usize].bytes_per_s
                            / self.link_count[l as usize] as f64
                    })
                    .fold(f64::INFINITY, f64::min)
            } else {
                f64::INFINITY
            };
            let slot = self.flows.add(self.now, route, x.bytes, op, n, cap) as usize;
            if let Some(d) = self.trace_device {
                if self.flow_traced.len() <= slot {
                    self.flow_traced.resize(slot + 1, false);
                }
                // The traced device's own flows: it sends, or it (or a rank it stands for)
                // receives.
                self.flow_traced[slot] =
                    x.src == self.g.rank_of(d) || self.g.device_of(x.dst) == Some(d);
            }
            n += 1;
        }
        if ideal {
            for r in &self.routes {
                for &l in r.links() {
                    self.link_count[l as usize] = 0;
                }
            }
        }
        self.ops[op as usize].flows_left = n;
        if n == 0 {
            self.ops[op as usize].step += 1;
            self.begin_step(op);
        }
    }

    /// Whether flow `slot` of `o` goes into the trace: always, unless the trace is of one
    /// device — then a message it sends or receives, and of a collective only the flows from or
    /// to it (a ring collective's other flows would be most of the trace).
    fn traces_flow(&self, o: &Op, slot: u32) -> bool {
        let Some(d) = self.trace_device else {
            return true;
        };
        match o.kind {
            OpKind::P2p { send, recv } => {
                self.g.tasks[send as usize].device == d || self.g.tasks[recv as usize].device == d
            }
            OpKind::Coll { .. } => self
                .flow_traced
                .get(slot as usize)
                .copied()
                .unwrap_or(false),
        }
    }

    fn finish_flow(&mut self, slot: u32) {
        let (op, start, route) = {
            let f = self.flows.get(slot);
            (f.owner, f.start, f.route)
        };
        self.flows.remove(slot);
        let o = self.ops[op as usize];
        let traced = self.spans.is_some() && self.traces_flow(&o, slot);
        if let (Some(spans), true) = (&mut self.spans, traced) {
            let label = self.g.tasks[o.rep as usize].label;
            let step = matches!(o.kind, OpKind::Coll { .. }).then_some(o.step);
            for &l in route.links() {
                spans.push(Span {
                    track: Track::Link { link: l },
                    start_ps: start,
                    end_ps: self.now,
                    task: o.rep,
                    label,
                    collective_step: step,
                });
            }
        }
        let o = &mut self.ops[op as usize];
        o.flows_left -= 1;
        if o.flows_left == 0 {
            o.step += 1;
            self.begin_step(op);
        }
    }

    fn finish_op(&mut self, op: u32) {
        let kind = self.ops[op as usize].kind;
        self.set_comm(kind, -1);
        match kind {
            OpKind::P2p { send, recv } => {
                self.actions.push_back(Action::Complete(send));
                self.actions.push_back(Action::Complete(recv));
            }
            OpKind::Coll { coll } => {
                let c = &self.colls[coll as usize];
                for k in c.members.clone() {
                    let m = self.coll_tasks[k as usize];
                    self.actions.push_back(Action::Complete(m));
                }
            }
        }
    }

    pub(super) fn result(mut self) -> SimResult {
        for d in 0..self.dev.len() as u32 {
            self.touch(d);
        }
        let periodic = self.monitor_finish();
        let mut totals: Vec<DeviceTotals> = self
            .dev
            .iter()
            .map(|d| DeviceTotals {
                compute: d.compute_busy,
                comm: d.comm_busy,
                exposed: d.exposed,
                finish: d.finish,
                high: d.high,
                kernels_end: d.kernels_end,
                exposed_at_kernels_end: d.exposed_at_kernels_end,
            })
            .collect();
        let (mut events, mut tasks) = (self.events, self.done as u64);
        let inserts: Vec<u64> = self.g.periodic.iter().map(|p| p.insert).collect();
        if inserts.iter().any(|&n| n > 0) && proven(&periodic, &inserts) {
            (events, tasks) = extend(&mut totals, &periodic, &inserts, events, tasks);
        }
        let makespan = totals.iter().map(|d| d.finish).max().unwrap_or(0);
        SimResult {
            step_time_s: ps_to_secs(makespan),
            makespan_ps: makespan,
            devices: totals
                .iter()
                .map(|d| DeviceStats {
                    compute_busy_s: ps_to_secs(d.compute),
                    comm_busy_s: ps_to_secs(d.comm),
                    exposed_comm_s: ps_to_secs(d.exposed),
                    memory_high_water_bytes: d.high,
                    finish_s: ps_to_secs(d.finish),
                    kernels_end_s: ps_to_secs(d.kernels_end),
                    exposed_to_kernels_end_s: ps_to_secs(d.exposed_at_kernels_end),
                })
                .collect(),
            events,
            tasks,
            periodic,
            trace: self.spans.take().map(|spans| Trace {
                spans,
                links: self.net.links().iter().map(|l| l.name()).collect(),
                devices: Vec::new(),
            }),
        }
    }
}
