//! The recurrence monitor: proves, while a graph runs, that a declared run of rounds
//! ([`Periodic`]) repeats exactly — so that a step with more such rounds is this one with whole
//! periods inserted, and needs no simulation.
//!
//! The engine is invariant under a shift of time: every duration it computes is a difference
//! of integer picoseconds or a function of the work left, never of the absolute clock. So if
//! the *whole* state of the simulation at the start of round j + 1 equals its state at the
//! start of round j — with every task of the declared segments read one round later — and
//! every round from j on is the previous one shifted (checked task by task when the engine is
//! built: device, stream, kind, duration or bytes, dependencies, message peer, collective
//! members), then round j + 1 runs as round j did, one period later, and so does every round
//! after it, until the run ends. The state compared is everything the future depends on:
//! per stream the task at its head and that task's progress (dependencies left, work left,
//! whether it runs slowed), per device its running kernels and communications in flight, every
//! transfer in flight (its step, and each flow's route, bytes left, rate and the order in which
//! the max-min solver meets it on each link), and every pending event with its time relative
//! to now and its place among equal times (stale events too, so that even the event count
//! repeats). Memory does not steer the simulation; its live bytes are tracked beside it.
//!
//! A round "starts" at the first instant a task of the reference segment's round starts; the
//! snapshot is taken when that instant has been fully processed (every start and completion at
//! it, and the flows' rates resolved). Nothing here changes what the engine does.

use super::*;
use crate::schedule::Periodic;

/// What one period of a proven run adds, and where the run was proven ([`SimResult::periodic`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeriodProof {
    /// The first round of the two whose starts were found equal.
    pub round: u32,
    /// Rounds per period (the two starts are this many rounds apart).
    pub rounds: u32,
    /// When the second of them started (ps): from here on, a step with more rounds is this one
    /// shifted by whole periods.
    pub at_ps: SimTime,
    /// The period (ps).
    pub period_ps: SimTime,
    /// Per device, what one period adds to its compute, communication and exposed time (ps).
    pub compute_ps: Vec<SimTime>,
    /// See `compute_ps`.
    pub comm_ps: Vec<SimTime>,
    /// See `compute_ps`.
    pub exposed_ps: Vec<SimTime>,
    /// Per device, what one period adds to its live bytes.
    pub live_bytes: Vec<i128>,
    /// Per device, its memory high-water mark up to `at_ps`.
    pub high_before: Vec<u128>,
    /// Per device, its highest live bytes during the period.
    pub high_period: Vec<u128>,
    /// Per device, its highest live bytes from `at_ps` to the next proof's instant (or the end).
    pub high_after: Vec<u128>,
    /// Events one period takes off the queue.
    pub events: u64,
    /// Tasks one period completes.
    pub tasks: u64,
}

/// A snapshot at the start of a round.
#[derive(Debug)]
struct Snap {
    round: u32,
    at: SimTime,
    state: Vec<u64>,
    /// Per segment, the lowest and highest round the state refers to.
    span: Vec<(i64, i64)>,
    compute: Vec<SimTime>,
    comm: Vec<SimTime>,
    exposed: Vec<SimTime>,
    live: Vec<u128>,
    high: Vec<u128>,
    events: u64,
    done: u64,
}

#[derive(Debug)]
struct RegionMon {
    segments: Vec<Segment>,
    /// Per segment, `iso[i][k]`: its round k is its round k − 1 shifted (k ≥ 1).
    iso: Vec<Vec<bool>>,
    /// The last round whose start was seen.
    entered: Option<u32>,
    /// A start seen at this instant, to snapshot at its end.
    due: Option<u32>,
    /// The latest snapshots (at most [`MAX_PERIOD`]), oldest first, each with the highest live
    /// bytes per device since it was taken.
    history: std::collections::VecDeque<(Snap, Vec<u128>)>,
    /// Rounds the step has beyond this graph's ([`Periodic::insert`]): a period of k rounds
    /// can stand for them only if k divides them.
    insert: u64,
    /// Proven (or given up).
    closed: bool,
}

/// The longest period looked for, in rounds: a period of two is common where two devices
/// run the same kernels at the same instants and the engine meets their completions in
/// alternating order.
const MAX_PERIOD: u32 = 2;

/// The monitor's state inside the engine.
#[derive(Debug)]
pub(super) struct Monitor {
    regions: Vec<RegionMon>,
    /// Reference segments `(base, end, region)`, by base.
    refs: Vec<(u32, u32, usize)>,
    /// Regions with a snapshot due at the end of this instant.
    due: Vec<usize>,
    /// Regions between their first snapshot and their proof.
    open: Vec<usize>,
    /// Highest live bytes per device since the last proof.
    cut_high: Vec<u128>,
    proofs: Vec<Option<PeriodProof>>,
    /// Index into `proofs` of the latest proof (its `high_after` is still growing).
    latest: Option<usize>,
}

/// An id read relative to round `round` of a region: `[0, id]` outside its segments, else
/// `[1 | segment << 8 | (r − round) << 32, offset]`; `span` widens to the rounds seen.
fn canon(segments: &[Segment], round: u32, x: u32, out: &mut Vec<u64>, span: &mut [(i64, i64)]) {
    for (i, s) in segments.iter().enumerate() {
        if let Some(r) = s.round_of(x) {
            let rel = i64::from(r) - i64::from(round);
            out.push(1 | (i as u64) << 8 | (rel as u64) << 32);
            out.push(u64::from(x - s.base - r * s.stride));
            let e = &mut span[i];
            *e = (e.0.min(i64::from(r)), e.1.max(i64::from(r)));
            return;
        }
    }
    out.push(0);
    out.push(u64::from(x));
}

/// `x` read one round earlier: shifted back by its segment's stride from round 1 on.
fn back(segments: &[Segment], x: u32) -> u32 {
    for s in segments {
        if let Some(r) = s.round_of(x) {
            return if r >= 1 { x - s.stride } else { x };
        }
    }
    x
}

/// [`back`] over many segments: by binary search when they are disjoint (a pipeline declares
/// one per stage, in task order), else by [`back`]'s scan — the same answer either way, as
/// a task lies in at most one of disjoint segments.
struct Backs<'s> {
    segments: &'s [Segment],
    /// The segments by base, when no two overlap.
    sorted: Option<Vec<Segment>>,
}

impl<'s> Backs<'s> {
    fn new(segments: &'s [Segment]) -> Backs<'s> {
        let mut sorted = segments.to_vec();
        sorted.sort_unstable_by_key(|s| s.base);
        let disjoint = sorted.windows(2).all(|w| w[0].end() <= w[1].base);
        Backs {
            segments,
            sorted: disjoint.then_some(sorted),
        }
    }

    fn back(&self, x: u32) -> u32 {
        let Some(sorted) = &self.sorted else {
            return back(self.segments, x);
        };
        let i = sorted.partition_point(|s| s.base <= x);
        match i.checked_sub(1).and_then(|i| {
            let s = &sorted[i];
            s.round_of(x).map(|r| (r, s.stride))
        }) {
            Some((r, stride)) if r >= 1 => x - stride,
            _ => x,
        }
    }
}

impl<'g> Engine<'g> {
    /// The monitor for the graph's declared rounds (with [`SimOptions::periodic`]).
    /// `deps[dep_off[t]..dep_off[t + 1]]` are task `t`'s dependencies, in the graph's order.
    pub(super) fn monitor_new(&self, dep_off: &[u32], deps: &[u32]) -> Option<Box<Monitor>> {
        let declared = &self.g.periodic;
        if declared.is_empty() {
            return None;
        }
        let n = self.g.tasks.len() as u32;
        let mut regions = Vec::with_capacity(declared.len());
        let mut refs = Vec::new();
        for (i, p) in declared.iter().enumerate() {
            let valid = !p.segments.is_empty()
                && p.segments
                    .iter()
                    .all(|s| s.stride > 0 && s.rounds > 0 && s.end() <= n);
            let iso = if valid {
                self.isomorphic_rounds(p, dep_off, deps)
            } else {
                Vec::new()
            };
            if valid {
                let r = p.segments[0];
                refs.push((r.base, r.end(), i));
            }
            regions.push(RegionMon {
                segments: p.segments.clone(),
                iso,
                entered: None,
                due: None,
                history: std::collections::VecDeque::new(),
                insert: p.insert,
                closed: !valid,
            });
        }
        refs.sort_unstable();
        Some(Box::new(Monitor {
            proofs: vec![None; regions.len()],
            regions,
            refs,
            due: Vec::new(),
            open: Vec::new(),
            cut_high: vec![0; self.dev.len()],
            latest: None,
        }))
    }

    /// Per segment of `p`, for each round k ≥ 1, whether it is round k − 1 shifted.
    fn isomorphic_rounds(&self, p: &Periodic, dep_off: &[u32], deps: &[u32]) -> Vec<Vec<bool>> {
        let deps_of =
            |t: u32| &deps[dep_off[t as usize] as usize..dep_off[t as usize + 1] as usize];
        let segs = &p.segments;
        let backs = Backs::new(segs);
        let back = |_: &[Segment], x: u32| backs.back(x);
        let mut members = Vec::new();
        let mut members_prev = Vec::new();
        let mut out = Vec::with_capacity(segs.len());
        for s in segs {
            let mut iso = vec![false; s.rounds as usize];
            for k in 1..s.rounds {
                let ok = (0..s.stride).all(|o| {
                    let t = s.base + k * s.stride + o;
                    let u = t - s.stride;
                    let (a, b) = (&self.ts[t as usize], &self.ts[u as usize]);
                    if (a.device, a.stream, a.kind, a.work) != (b.device, b.stream, b.kind, b.work)
                    {
                        return false;
                    }
                    let (da, db) = (deps_of(t), deps_of(u));
                    if da.len() != db.len() || da.iter().zip(db).any(|(&x, &y)| back(segs, x) != y)
                    {
                        return false;
                    }
                    match a.kind {
                        Kind::Send | Kind::Recv => back(segs, a.peer) == b.peer,
                        Kind::Collective => {
                            // Equal classes: equal op, group and size.
                            let ca = &self.colls[a.peer as usize];
                            let cb = &self.colls[b.peer as usize];
                            if ca.class != cb.class {
                                return false;
                            }
                            members.clear();
                            members.extend(
                                self.coll_tasks[ca.members.start as usize..ca.members.end as usize]
                                    .iter()
                                    .map(|&x| back(segs, x)),
                            );
                            members.sort_unstable();
                            members_prev.clear();
                            members_prev.extend_from_slice(
                                &self.coll_tasks
                                    [cb.members.start as usize..cb.members.end as usize],
                            );
                            members_prev.sort_unstable();
                            members == members_prev
                        }
                        _ => true,
                    }
                });
                iso[k as usize] = ok;
            }
            out.push(iso);
        }
        out
    }

    /// A task starts: is it the first of a round of a reference segment?
    pub(super) fn monitor_start(&mut self, t: u32) {
        let Some(m) = self.mon.as_deref_mut() else {
            return;
        };
        // Reference segments are few and disjoint: find the one holding t.
        let i = m.refs.partition_point(|&(base, _, _)| base <= t);
        if i == 0 {
            return;
        }
        let (base, end, r) = m.refs[i - 1];
        if t >= end {
            return;
        }
        let reg = &mut m.regions[r];
        if reg.closed {
            return;
        }
        let round = (t - base) / reg.segments[0].stride;
        if reg.entered.is_none_or(|e| round > e) {
            reg.entered = Some(round);
            if reg.due.is_none() {
                m.due.push(r);
            }
            reg.due = Some(round);
        }
    }

    /// Live bytes of device `d` changed upward.
    pub(super) fn monitor_alloc(&mut self, d: u32) {
        let live = self.dev[d as usize].live;
        let Some(m) = self.mon.as_deref_mut() else {
            return;
        };
        let c = &mut m.cut_high[d as usize];
        *c = (*c).max(live);
        for &r in &m.open {
            for (_, high) in &mut m.regions[r].history {
                let w = &mut high[d as usize];
                *w = (*w).max(live);
            }
        }
    }

    /// Whether a snapshot is due at the end of this instant.
    pub(super) fn monitor_due(&self) -> bool {
        self.mon.as_ref().is_some_and(|m| !m.due.is_empty())
    }

    /// The end of an instant with snapshots due: take them and compare.
    pub(super) fn monitor_instant(&mut self) {
        let Some(mut m) = self.mon.take() else {
            return;
        };
        for d in 0..self.dev.len() as u32 {
            self.touch(d);
        }
        let due = std::mem::take(&mut m.due);
        for r in due {
            let Some(round) = m.regions[r].due.take() else {
                continue;
            };
            if m.regions[r].closed {
                continue;
            }
            let snap = self.snapshot(&m.regions[r].segments, round);
            let reg = &mut m.regions[r];
            // An earlier snapshot k rounds back with the same state, and every round the run
            // touches from then on — from the earliest that snapshot refers to, to k past the
            // latest this one does — its predecessor shifted, in every segment.
            let found = reg.history.iter().position(|(prev, _)| {
                let k = round - prev.round;
                let (lo_of, hi_of) = (&prev.span, &snap.span);
                k >= 1
                    && (reg.insert % u64::from(k) == 0)
                    && prev.state == snap.state
                    && reg.iso.iter().enumerate().all(|(i, iso)| {
                        let (lo, hi) = (lo_of[i].0, hi_of[i].1 + i64::from(k));
                        lo > hi
                            || (lo >= 1
                                && hi < iso.len() as i64
                                && (lo..=hi).all(|k| iso[k as usize]))
                    })
            });
            if let Some(i) = found {
                let (prev, high_period) = reg
                    .history
                    .swap_remove_back(i)
                    .unwrap_or_else(|| unreachable!("found in the history"));
                let proof = PeriodProof {
                    round: prev.round,
                    rounds: round - prev.round,
                    at_ps: snap.at,
                    period_ps: snap.at - prev.at,
                    compute_ps: diff(&snap.compute, &prev.compute),
                    comm_ps: diff(&snap.comm, &prev.comm),
                    exposed_ps: diff(&snap.exposed, &prev.exposed),
                    live_bytes: snap
                        .live
                        .iter()
                        .zip(&prev.live)
                        .map(|(&a, &b)| a as i128 - b as i128)
                        .collect(),
                    high_before: snap.high.clone(),
                    high_period,
                    high_after: snap.live.clone(),
                    events: snap.events - prev.events,
                    tasks: snap.done - prev.done,
                };
                reg.closed = true;
                reg.history.clear();
                m.open.retain(|&o| o != r);
                // The previous proof's stretch ends here.
                if let Some(l) = m.latest {
                    if let Some(p) = m.proofs[l].as_mut() {
                        p.high_after = m.cut_high.clone();
                    }
                }
                m.cut_high.clone_from(&snap.live);
                m.proofs[r] = Some(proof);
                m.latest = Some(r);
            } else if round + 1 >= reg.segments[0].rounds {
                // No later round to compare with.
                reg.closed = true;
                reg.history.clear();
                m.open.retain(|&o| o != r);
            } else {
                if reg.history.len() as u32 >= MAX_PERIOD {
                    reg.history.pop_front();
                }
                let live = snap.live.clone();
                reg.history.push_back((snap, live));
                if !m.open.contains(&r) {
                    m.open.push(r);
                }
            }
        }
        self.mon = Some(m);
    }

    /// The proofs, one entry per declared run of rounds (at the end of the run).
    pub(super) fn monitor_finish(&mut self) -> Vec<Option<PeriodProof>> {
        let Some(mut m) = self.mon.take() else {
            return Vec::new();
        };
        if let Some(l) = m.latest {
            if let Some(p) = m.proofs[l].as_mut() {
                p.high_after = m.cut_high.clone();
            }
        }
        m.proofs
    }

    /// The state at the end of this instant, read relative to round `round` of `segments`
    /// (module docs), with the accumulated totals beside it.
    fn snapshot(&self, segments: &[Segment], round: u32) -> Snap {
        let now = self.now;
        let mut s: Vec<u64> = Vec::new();
        let span = std::cell::RefCell::new(vec![(i64::MAX, i64::MIN); segments.len()]);
        let map = |x: u32, s: &mut Vec<u64>| canon(segments, round, x, s, &mut span.borrow_mut());
        // Streams: the head and its progress.
        for st in 0..self.stream_key.len() {
            let c = self.cursor[st];
            if c >= self.stream_off[st + 1] {
                s.push(u64::MAX);
                continue;
            }
            let h = self.stream_tasks[c as usize];
            map(h, &mut s);
            let t = &self.ts[h as usize];
            s.push(u64::from(t.state));
            if t.state == NOT_STARTED {
                s.push(u64::from(t.deps_left));
            } else {
                match t.kind {
                    Kind::Compute => {
                        s.extend([t.work, now - t.last, u64::from(t.slow)]);
                    }
                    Kind::Collective => s.push(u64::from(self.colls[t.peer as usize].started)),
                    _ => {}
                }
            }
        }
        // Devices: running kernels (in the order their slowdown is applied) and
        // communications in flight.
        for (d, dev) in self.dev.iter().enumerate() {
            s.extend([u64::from(dev.running), u64::from(dev.comm)]);
            if let Some(r) = self.running.get(d) {
                s.push(r.len() as u64);
                for &t in r {
                    map(t, &mut s);
                }
            }
        }
        // Transfers in flight: their ops (by the task that started them), steps and flows.
        let op_id = |op: u32, s: &mut Vec<u64>| {
            let o = &self.ops[op as usize];
            match o.kind {
                OpKind::P2p { send, recv } => {
                    s.push(1);
                    map(send, s);
                    map(recv, s);
                }
                OpKind::Coll { .. } => {
                    s.push(2);
                    map(o.rep, s);
                }
            }
            s.extend([
                u64::from(o.step),
                u64::from(o.steps),
                u64::from(o.flows_left),
            ]);
        };
        let mut flows: Vec<(Vec<u64>, u32)> = self
            .flows
            .alive()
            .map(|slot| {
                let f = self.flows.get(slot);
                let mut key = Vec::with_capacity(12);
                op_id(f.owner, &mut key);
                key.push(u64::from(f.index));
                (key, slot)
            })
            .collect();
        flows.sort_unstable();
        let mut links: Vec<u32> = Vec::new();
        s.push(flows.len() as u64);
        for (key, slot) in &flows {
            s.extend_from_slice(key);
            let f = self.flows.get(*slot);
            s.extend(f.route.links().iter().map(|&l| u64::from(l)));
            s.extend(self.flows.state_words(*slot, now));
            links.extend_from_slice(f.route.links());
        }
        links.sort_unstable();
        links.dedup();
        let mut at = vec![u64::MAX; flows.iter().map(|f| f.1 as usize + 1).max().unwrap_or(0)];
        for (i, (_, slot)) in flows.iter().enumerate() {
            at[*slot as usize] = i as u64;
        }
        let position = |slot: u32| at.get(slot as usize).copied().unwrap_or(u64::MAX);
        for l in links {
            s.push(u64::from(l));
            for &slot in self.flows.on_link(l) {
                s.push(position(slot));
            }
        }
        // Pending events, in the order they will come out.
        for (time, ev) in self.q.pending() {
            s.push(time - now);
            match *ev {
                Ev::Compute { task, gen } => {
                    let live = self.ts[task as usize].gen == gen;
                    s.push(if live { 10 } else { 11 });
                    if live {
                        map(task, &mut s);
                    }
                }
                Ev::Latency { op } => {
                    s.push(12);
                    op_id(op, &mut s);
                }
                Ev::Flow { slot, gen } => {
                    let live = self.flows.get(slot).gen == gen;
                    s.push(if live { 13 } else { 14 });
                    if live {
                        s.push(position(slot));
                    }
                }
            }
        }
        Snap {
            round,
            at: now,
            state: s,
            span: span.into_inner(),
            compute: self.dev.iter().map(|d| d.compute_busy).collect(),
            comm: self.dev.iter().map(|d| d.comm_busy).collect(),
            exposed: self.dev.iter().map(|d| d.exposed).collect(),
            live: self.dev.iter().map(|d| d.live).collect(),
            high: self.dev.iter().map(|d| d.high).collect(),
            events: self.events,
            done: self.done as u64,
        }
    }
}

fn diff(a: &[SimTime], b: &[SimTime]) -> Vec<SimTime> {
    a.iter().zip(b).map(|(&x, &y)| x - y).collect()
}

/// A device's totals in picoseconds and bytes, as the run ends.
#[derive(Debug, Clone, Copy)]
pub(super) struct DeviceTotals {
    pub compute: SimTime,
    pub comm: SimTime,
    pub exposed: SimTime,
    pub finish: SimTime,
    pub high: u128,
    pub kernels_end: SimTime,
    pub exposed_at_kernels_end: SimTime,
}

/// Whether every run of rounds the step has more of ([`Periodic::insert`]) was proven periodic.
pub(super) fn proven(proofs: &[Option<PeriodProof>], inserts: &[u64]) -> bool {
    proofs.len() == inserts.len()
        && proofs
            .iter()
            .zip(inserts)
            .all(|(p, &n)| n == 0 || p.is_some())
}

/// The totals of the step with `inserts[i]` more rounds of each proven run `i` (whole periods:
/// the proof checked that its period divides them): each run's periods are inserted at its proof's instant, so everything after that instant moves by
/// whole periods; the totals grow by what the periods add, and the memory high-water mark is
/// the highest of the stretches between proofs, each raised by the live bytes the periods
/// inserted before it left behind. Returns the events and tasks of the longer step.
pub(super) fn extend(
    totals: &mut [DeviceTotals],
    proofs: &[Option<PeriodProof>],
    inserts: &[u64],
    events: u64,
    tasks: u64,
) -> (u64, u64) {
    let mut cuts: Vec<(&PeriodProof, u64)> = proofs
        .iter()
        .zip(inserts)
        .filter_map(|(p, &n)| p.as_ref().map(|p| (p, n)))
        .collect();
    cuts.sort_by_key(|(p, _)| p.at_ps);
    let times = |n: u64, x: SimTime| x.saturating_mul(n);
    for (d, t) in totals.iter_mut().enumerate() {
        let (finish, kernels_end) = (t.finish, t.kernels_end);
        let mut shift: i128 = 0;
        let mut high: i128 = cuts
            .first()
            .map_or(t.high as i128, |(p, _)| p.high_before[d] as i128);
        for (p, n) in &cuts {
            let n = *n / u64::from(p.rounds.max(1));
            t.compute = t.compute.saturating_add(times(n, p.compute_ps[d]));
            t.comm = t.comm.saturating_add(times(n, p.comm_ps[d]));
            t.exposed = t.exposed.saturating_add(times(n, p.exposed_ps[d]));
            if p.at_ps < finish {
                t.finish = t.finish.saturating_add(times(n, p.period_ps));
            }
            if p.at_ps < kernels_end {
                t.kernels_end = t.kernels_end.saturating_add(times(n, p.period_ps));
                t.exposed_at_kernels_end = t
                    .exposed_at_kernels_end
                    .saturating_add(times(n, p.exposed_ps[d]));
            }
            let delta = p.live_bytes[d];
            if n > 0 && delta >= 0 {
                high = high.max(p.high_period[d] as i128 + shift + n as i128 * delta);
            }
            shift += n as i128 * delta;
            high = high.max(p.high_after[d] as i128 + shift);
        }
        t.high = high.max(0) as u128;
    }
    cuts.iter().fold((events, tasks), |(e, k), (p, n)| {
        let n = *n / u64::from(p.rounds.max(1));
        (
            e.saturating_add(p.events.saturating_mul(n)),
            k.saturating_add(p.tasks.saturating_mul(n)),
        )
    })
}
