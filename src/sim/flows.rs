//! The flows in flight over a [`Network`] and their rates: with [`LinkModel::Ideal`] a flow always
//! gets the bandwidth of the narrowest link on its route, whatever else is in flight (at most
//! the share the engine gives it among the flows of its own step); with
//! [`LinkModel::MaxMin`] concurrent flows share links max-min fairly ([`super::maxmin`]), and
//! rates are recomputed only for the connected component (links linked by shared flows) that a
//! flow entered or left, once per simulated instant. Knows routes and link capacities, not how
//! a route is chosen (`network`) nor what a flow is for (the engine).

use super::maxmin::MaxMinSolver;
use super::network::{LinkModel, Network, Route};
use super::queue::{SimTime, PS_PER_S};

/// One flow in flight.
#[derive(Debug, Clone)]
pub(crate) struct Flow {
    pub(crate) route: Route,
    /// Bytes still to move as of `last`.
    remaining: f64,
    /// Current rate in bytes/s (0 until first resolved).
    rate: f64,
    /// Time `remaining` refers to.
    last: SimTime,
    /// Bumped every time the completion time is rescheduled; stale events carry an old value.
    pub(crate) gen: u32,
    /// Whom the engine notifies at completion.
    pub(crate) owner: u32,
    /// When the flow entered the network.
    pub(crate) start: SimTime,
    /// Its place among the flows its owner started together (a collective step's transfers).
    pub(crate) index: u32,
    /// In flight (a slot on the free list is not).
    pub(crate) alive: bool,
    /// Ideal model: the rate the flow may not exceed (its share of the links it has in common
    /// with the other flows of its step); infinite for none.
    cap: f64,
    scheduled: bool,
}

/// The flows in flight over a [`Network`] and their current rates.
#[derive(Debug)]
pub(crate) struct FlowSet {
    model: LinkModel,
    caps: Vec<f64>,
    flows: Vec<Flow>,
    free: Vec<u32>,
    /// Flows to (re)schedule at the next [`FlowSet::resolve`] (Ideal model).
    pending: Vec<u32>,
    /// Active flows per link (MaxMin model).
    link_flows: Vec<Vec<u32>>,
    dirty: Vec<u32>,
    link_dirty: Vec<bool>,
    // Component search and solver scratch (MaxMin).
    epoch: u32,
    link_mark: Vec<u32>,
    flow_mark: Vec<u32>,
    local: Vec<u32>,
    stack: Vec<u32>,
    comp_links: Vec<u32>,
    comp_flows: Vec<u32>,
    comp_caps: Vec<f64>,
    comp_offsets: Vec<u32>,
    comp_routes: Vec<u32>,
    comp_rates: Vec<f64>,
    solver: MaxMinSolver,
}

impl FlowSet {
    pub(crate) fn new(net: &Network, model: LinkModel) -> FlowSet {
        let n = net.links().len();
        FlowSet {
            model,
            caps: net.links().iter().map(|l| l.bytes_per_s).collect(),
            flows: Vec::new(),
            free: Vec::new(),
            pending: Vec::new(),
            link_flows: vec![Vec::new(); n],
            dirty: Vec::new(),
            link_dirty: vec![false; n],
            epoch: 0,
            link_mark: vec![0; n],
            flow_mark: Vec::new(),
            local: vec![0; n],
            stack: Vec::new(),
            comp_links: Vec::new(),
            comp_flows: Vec::new(),
            comp_caps: Vec::new(),
            comp_offsets: Vec::new(),
            comp_routes: Vec::new(),
            comp_rates: Vec::new(),
            solver: MaxMinSolver::default(),
        }
    }

    /// The link model.
    pub(crate) fn model(&self) -> LinkModel {
        self.model
    }

    pub(crate) fn get(&self, slot: u32) -> &Flow {
        &self.flows[slot as usize]
    }

    /// Adds a flow of `bytes` over `route` at `now`, the `index`-th its owner starts at once;
    /// its rate is set by the next `resolve`. With the ideal model its rate is the narrowest
    /// link of its route, at most `cap` (the engine's share for flows of one step that cross
    /// the same link).
    pub(crate) fn add(
        &mut self,
        now: SimTime,
        route: Route,
        bytes: f64,
        owner: u32,
        index: u32,
        cap: f64,
    ) -> u32 {
        let flow = Flow {
            route,
            remaining: bytes,
            rate: 0.0,
            last: now,
            gen: 0,
            owner,
            start: now,
            index,
            alive: true,
            cap,
            scheduled: false,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                let gen = self.flows[s as usize].gen.wrapping_add(1);
                self.flows[s as usize] = Flow { gen, ..flow };
                s
            }
            None => {
                self.flows.push(flow);
                self.flow_mark.push(0);
                (self.flows.len() - 1) as u32
            }
        };
        if self.model == LinkModel::Ideal || route.links().is_empty() {
            self.pending.push(slot);
        } else {
            for &l in route.links() {
                self.link_flows[l as usize].push(slot);
                self.mark_dirty(l);
            }
        }
        slot
    }

    fn mark_dirty(&mut self, l: u32) {
        if !self.link_dirty[l as usize] {
            self.link_dirty[l as usize] = true;
            self.dirty.push(l);
        }
    }

    /// Removes a finished flow.
    pub(crate) fn remove(&mut self, slot: u32) {
        let f = &mut self.flows[slot as usize];
        f.gen = f.gen.wrapping_add(1);
        f.alive = false;
        let route = f.route;
        if self.model == LinkModel::MaxMin {
            for &l in route.links() {
                let v = &mut self.link_flows[l as usize];
                if let Some(i) = v.iter().position(|&s| s == slot) {
                    v.remove(i);
                }
                self.mark_dirty(l);
            }
        }
        self.free.push(slot);
    }

    /// True when some flow needs a rate before time may advance.
    pub(crate) fn needs_resolve(&self) -> bool {
        !self.pending.is_empty() || !self.dirty.is_empty()
    }

    /// Gives rates to new flows and, with max-min sharing, recomputes the rates of every flow
    /// in a component that changed. Appends to `changed` each flow whose completion time must be
    /// (re)scheduled; its `gen` has been bumped.
    pub(crate) fn resolve(&mut self, now: SimTime, changed: &mut Vec<u32>) {
        for i in 0..self.pending.len() {
            let slot = self.pending[i];
            let f = &self.flows[slot as usize];
            let rate = f
                .route
                .links()
                .iter()
                .map(|&l| self.caps[l as usize])
                .fold(f.cap, f64::min);
            self.set_rate(slot, rate, now, changed);
        }
        self.pending.clear();
        if self.dirty.is_empty() {
            return;
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.link_mark.iter_mut().for_each(|m| *m = 0);
            self.flow_mark.iter_mut().for_each(|m| *m = 0);
            self.epoch = 1;
        }
        let epoch = self.epoch;
        for i in 0..self.dirty.len() {
            let seed = self.dirty[i];
            self.link_dirty[seed as usize] = false;
            if self.link_mark[seed as usize] == epoch {
                continue;
            }
            // Collect the component of `seed`.
            self.comp_links.clear();
            self.comp_flows.clear();
            self.link_mark[seed as usize] = epoch;
            self.stack.push(seed);
            while let Some(l) = self.stack.pop() {
                self.local[l as usize] = self.comp_links.len() as u32;
                self.comp_links.push(l);
                for &s in &self.link_flows[l as usize] {
                    if self.flow_mark[s as usize] != epoch {
                        self.flow_mark[s as usize] = epoch;
                        self.comp_flows.push(s);
                        for &m in self.flows[s as usize].route.links() {
                            if self.link_mark[m as usize] != epoch {
                                self.link_mark[m as usize] = epoch;
                                self.stack.push(m);
                            }
                        }
                    }
                }
            }
            if self.comp_flows.is_empty() {
                continue;
            }
            if let [slot] = self.comp_flows[..] {
                // A flow alone in its component (the common case: a ring step's one moving
                // transfer on its own ports) gets what the solver's first round would give it,
                // to the bit: the smallest share of its links, each offered whole (a route
                // with a repeated link goes to the solver, which counts it twice).
                let links = self.flows[slot as usize].route.links();
                let distinct = links
                    .iter()
                    .enumerate()
                    .all(|(i, l)| !links[..i].contains(l));
                if distinct {
                    let rate = links
                        .iter()
                        .map(|&l| self.caps[l as usize].max(0.0) / 1.0)
                        .fold(f64::INFINITY, f64::min);
                    self.set_rate(slot, rate, now, changed);
                    continue;
                }
            }
            self.comp_caps.clear();
            for &l in &self.comp_links {
                self.comp_caps.push(self.caps[l as usize]);
            }
            self.comp_offsets.clear();
            self.comp_routes.clear();
            self.comp_offsets.push(0);
            for &s in &self.comp_flows {
                for &l in self.flows[s as usize].route.links() {
                    self.comp_routes.push(self.local[l as usize]);
                }
                self.comp_offsets.push(self.comp_routes.len() as u32);
            }
            self.solver.solve(
                &self.comp_caps,
                &self.comp_offsets,
                &self.comp_routes,
                &mut self.comp_rates,
            );
            for k in 0..self.comp_flows.len() {
                let (slot, rate) = (self.comp_flows[k], self.comp_rates[k]);
                self.set_rate(slot, rate, now, changed);
            }
        }
        self.dirty.clear();
    }

    fn set_rate(&mut self, slot: u32, rate: f64, now: SimTime, changed: &mut Vec<u32>) {
        let f = &mut self.flows[slot as usize];
        if f.scheduled && f.rate == rate {
            return;
        }
        if f.scheduled && f.rate > 0.0 && f.rate.is_finite() {
            let moved = f.rate * (now - f.last) as f64 / PS_PER_S;
            f.remaining = (f.remaining - moved).max(0.0);
        }
        f.last = now;
        f.rate = rate;
        f.scheduled = true;
        f.gen = f.gen.wrapping_add(1);
        changed.push(slot);
    }

    /// The slots of the flows in flight, in slot order.
    pub(crate) fn alive(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.flows.len() as u32).filter(|&s| self.flows[s as usize].alive)
    }

    /// What decides a flow's future, as words relative to `now`: bytes left and rate (their
    /// bits), time since they were last settled, whether it has a rate yet.
    pub(crate) fn state_words(&self, slot: u32, now: SimTime) -> [u64; 5] {
        let f = &self.flows[slot as usize];
        [
            f.remaining.to_bits(),
            f.rate.to_bits(),
            f.cap.to_bits(),
            now - f.last,
            u64::from(f.scheduled),
        ]
    }

    /// The flows in flight over link `l` in the order the max-min solver visits them (empty
    /// with ideal links, which keep no such lists).
    pub(crate) fn on_link(&self, l: u32) -> &[u32] {
        self.link_flows.get(l as usize).map_or(&[], Vec::as_slice)
    }

    /// When the flow in `slot` completes at its current rate; `None` if it never does (rate 0).
    pub(crate) fn finish_time(&self, slot: u32) -> Option<SimTime> {
        let f = &self.flows[slot as usize];
        if f.remaining <= 0.0 || f.rate == f64::INFINITY {
            return Some(f.last);
        }
        if f.rate <= 0.0 {
            return None;
        }
        let ps = (f.remaining / f.rate * PS_PER_S).ceil();
        Some(f.last.saturating_add(ps as SimTime))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ideal_flows_ignore_each_other_and_maxmin_flows_share() {
        let hw = crate::sim::test_hardware();
        let net = Network::new(&hw, 4);
        for (model, want_rate) in [(LinkModel::Ideal, 230e9), (LinkModel::MaxMin, 115e9)] {
            let mut fs = FlowSet::new(&net, model);
            let a = fs.add(0, net.route(0, 1), 230e6, 0, 0, f64::INFINITY);
            let b = fs.add(0, net.route(0, 2), 230e6, 1, 0, f64::INFINITY);
            let mut changed = Vec::new();
            fs.resolve(0, &mut changed);
            assert_eq!(changed.len(), 2);
            // 230 MB at 230 GB/s = 1 ms; at half the rate 2 ms.
            let want = (230e6 / want_rate * 1e12) as u64;
            assert_eq!(fs.finish_time(a), Some(want));
            assert_eq!(fs.finish_time(b), Some(want));
        }
    }

    #[test]
    fn maxmin_speeds_up_the_survivor_when_a_flow_leaves() {
        // Two flows share gpu0's egress (115 GB/s each). Flow a (115 MB) ends at 1 ms; then b,
        // with 230 - 115 = 115 MB left, runs alone at 230 GB/s and ends at 1.5 ms.
        let hw = crate::sim::test_hardware();
        let net = Network::new(&hw, 4);
        let mut fs = FlowSet::new(&net, LinkModel::MaxMin);
        let a = fs.add(0, net.route(0, 1), 115e6, 0, 0, f64::INFINITY);
        let b = fs.add(0, net.route(0, 2), 230e6, 1, 0, f64::INFINITY);
        let mut changed = Vec::new();
        fs.resolve(0, &mut changed);
        let t_a = fs.finish_time(a).unwrap();
        assert_eq!(t_a, 1_000_000_000);
        fs.remove(a);
        changed.clear();
        fs.resolve(t_a, &mut changed);
        assert_eq!(changed, vec![b]);
        let t_b = fs.finish_time(b).unwrap();
        assert!(t_b.abs_diff(1_500_000_000) <= 1, "{t_b}");
    }
}
