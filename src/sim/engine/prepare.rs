//! Preparation: one pass over the graph validates it, indexes streams, prices kernels,
//! flattens dependencies and matches sends with receives and collective members.

use super::*;

impl<'g> Engine<'g> {
    pub(super) fn new(
        g: &'g TaskGraph,
        hw: &Hardware,
        model: LinkModel,
        opts: SimOptions,
    ) -> Result<Self, Error> {
        let n = g.tasks.len();
        if n >= NONE as usize {
            return Err(invalid(format!(
                "{n} tasks is more than the simulator handles"
            )));
        }
        let cluster = g.cluster_devices();
        if g.devices > MAX_DEVICES || cluster > MAX_DEVICES {
            return Err(invalid(format!(
                "{} devices is more than the simulator handles ({MAX_DEVICES})",
                cluster.max(g.devices)
            )));
        }
        if let Some(p) = &g.placement {
            if p.ranks.len() != g.devices as usize
                || p.ranks.iter().any(|&r| r >= cluster)
                || p.representative.iter().any(|&d| d >= g.devices)
            {
                return Err(invalid(format!(
                    "the placement of {} simulated devices over {cluster} ranks is inconsistent",
                    g.devices
                )));
            }
        }
        let cost = CostModel::new(hw);
        let net = Network::new(hw, cluster);
        let flows = FlowSet::new(&net, model);
        // Kernel durations, once per distinct shape in the graph's table.
        let mut durations = Vec::with_capacity(g.kernels.len());
        for (i, k) in g.kernels.iter().enumerate() {
            let s = cost.kernel_s(k);
            if !(s.is_finite() && (0.0..1e6).contains(&s)) {
                return Err(invalid(format!(
                    "kernel {i} ({k:?}) would take {s:.3e} s, more than the simulator's \
                     picosecond clock holds for one kernel (10^6 s)"
                )));
            }
            durations.push(secs_to_ps(s));
        }

        // One pass over the graph: validate, index streams (dense, in order of first
        // appearance), price kernels, flatten dependencies, collect rendezvous keys.
        // Per device, its streams seen so far as (stream code, dense index); a device has few.
        let mut stream_idx: Vec<Vec<(u16, u32)>> = vec![Vec::new(); g.devices as usize];
        let mut stream_key = Vec::new();
        let mut ts = Vec::with_capacity(n);
        let mut dep_count = vec![0u32; n];
        // Sized up front: large graphs otherwise spend a visible share of their preparation
        // growing and copying these lists.
        let (mut total_deps, mut n_send, mut n_recv, mut n_coll) = (0, 0, 0, 0);
        for t in &g.tasks {
            total_deps += t.deps.len();
            match t.work {
                Work::Send { .. } => n_send += 1,
                Work::Recv { .. } => n_recv += 1,
                Work::Collective { .. } => n_coll += 1,
                _ => {}
            }
        }
        let mut dep_flat: Vec<u32> = Vec::with_capacity(total_deps);
        let mut sends = Vec::with_capacity(n_send);
        let mut recvs = Vec::with_capacity(n_recv);
        let mut coll_keys = Vec::with_capacity(n_coll);
        for (i, t) in g.tasks.iter().enumerate() {
            if t.device >= g.devices {
                return Err(invalid(format!(
                    "task {i} runs on device {} of {}",
                    t.device, g.devices
                )));
            }
            let code = match t.stream {
                Stream::Compute => 0,
                Stream::Comm(c) => 1 + c as u16,
            };
            let known = &mut stream_idx[t.device as usize];
            let stream = match known.iter().find(|e| e.0 == code) {
                Some(e) => e.1,
                None => {
                    let idx = stream_key.len() as u32;
                    known.push((code, idx));
                    stream_key.push((t.device, t.stream));
                    idx
                }
            };
            for &d in &t.deps {
                if d as usize >= i {
                    return Err(invalid(format!("task {i} depends on later task {d}")));
                }
                dep_count[d as usize] += 1;
            }
            dep_flat.extend_from_slice(&t.deps);
            let mut work = 0;
            let kind = match &t.work {
                Work::Compute { kernel } => {
                    work = *durations.get(*kernel as usize).ok_or_else(|| {
                        invalid(format!(
                            "task {i} runs kernel {kernel} of a table of {}",
                            g.kernels.len()
                        ))
                    })?;
                    Kind::Compute
                }
                Work::Send { to, tag, bytes } => {
                    work = *bytes;
                    let to = g.device_of(*to).ok_or_else(|| {
                        invalid(format!("task {i} sends to rank {to} of {cluster}"))
                    })?;
                    sends.push((p2p_key(t.device, to, *tag), i as u32, *bytes));
                    Kind::Send
                }
                Work::Recv { from, tag, bytes } => {
                    let from = g.device_of(*from).ok_or_else(|| {
                        invalid(format!("task {i} receives from rank {from} of {cluster}"))
                    })?;
                    recvs.push((p2p_key(from, t.device, *tag), i as u32, *bytes));
                    Kind::Recv
                }
                Work::Collective { id, .. } => {
                    coll_keys.push((*id, i as u32));
                    Kind::Collective
                }
                Work::Alloc { bytes, .. } | Work::Free { bytes, .. } => {
                    work = u64::try_from(*bytes).map_err(|_| {
                        invalid(format!("task {i}: {bytes} bytes is more than 2^64"))
                    })?;
                    if matches!(t.work, Work::Alloc { .. }) {
                        Kind::Alloc
                    } else {
                        Kind::Free
                    }
                }
            };
            ts.push(TaskState {
                work,
                last: 0,
                device: t.device,
                stream,
                deps_left: t.deps.len() as u32,
                gen: 0,
                peer: NONE,
                kind,
                state: NOT_STARTED,
                slow: false,
            });
        }

        // Dependents (CSR), filled from the flattened dependency lists.
        let mut dependents_off = Vec::with_capacity(n + 1);
        let mut acc = 0u32;
        for c in &dep_count {
            dependents_off.push(acc);
            acc += c;
        }
        dependents_off.push(acc);
        let mut fill = dependents_off.clone();
        let mut dependents = vec![0u32; acc as usize];
        let mut k = 0;
        for (i, st) in ts.iter().enumerate() {
            for &d in &dep_flat[k..k + st.deps_left as usize] {
                dependents[fill[d as usize] as usize] = i as u32;
                fill[d as usize] += 1;
            }
            k += st.deps_left as usize;
        }

        // Streams (CSR, tasks in insertion order).
        let ns = stream_key.len();
        let mut stream_off = vec![0u32; ns + 1];
        for st in &ts {
            stream_off[st.stream as usize + 1] += 1;
        }
        for s in 0..ns {
            stream_off[s + 1] += stream_off[s];
        }
        let mut fill = stream_off.clone();
        let mut stream_tasks = vec![0u32; n];
        for (i, st) in ts.iter().enumerate() {
            stream_tasks[fill[st.stream as usize] as usize] = i as u32;
            fill[st.stream as usize] += 1;
        }
        let cursor = stream_off[..ns].to_vec();

        // Send/recv matching: sort both sides by key and walk them together. Any mismatch is
        // reported with the graph's own check when it finds one.
        sends.sort_unstable_by_key(|x| x.0);
        recvs.sort_unstable_by_key(|x| x.0);
        let mismatch = |fallback: String| invalid(g.check().err().unwrap_or(fallback));
        if sends.len() != recvs.len() {
            return Err(mismatch(format!(
                "{} sends but {} recvs",
                sends.len(),
                recvs.len()
            )));
        }
        for (k, (s, r)) in sends.iter().zip(&recvs).enumerate() {
            let dup = k > 0 && (sends[k - 1].0 == s.0 || recvs[k - 1].0 == r.0);
            if s.0 != r.0 || dup {
                return Err(mismatch(format!(
                    "send task {} and recv task {} do not match",
                    s.1, r.1
                )));
            }
            let (sb, rb) = (s.2, r.2);
            if sb != rb {
                return Err(mismatch(format!(
                    "send task {} carries {sb} bytes but recv task {} expects {rb}",
                    s.1, r.1
                )));
            }
            ts[s.1 as usize].peer = r.1;
            ts[r.1 as usize].peer = s.1;
        }

        // Collectives: group member tasks by id and check them against the group; collectives
        // of equal op, group and size form one class (their plan and senders made once).
        coll_keys.sort_unstable();
        let mut colls = Vec::new();
        let mut coll_tasks = Vec::with_capacity(coll_keys.len());
        let mut classes: Vec<CollClass> = Vec::new();
        let mut class_senders: Vec<u32> = Vec::new();
        let mut class_groups: Vec<DeviceId> = Vec::new();
        let mut class_of: std::collections::HashMap<(CollectiveOp, u64, &[DeviceId]), u32> =
            std::collections::HashMap::new();
        let mut k = 0;
        while k < coll_keys.len() {
            let id = coll_keys[k].0;
            let begin = coll_tasks.len() as u32;
            while k < coll_keys.len() && coll_keys[k].0 == id {
                let t = coll_keys[k].1;
                ts[t as usize].peer = colls.len() as u32;
                coll_tasks.push(t);
                k += 1;
            }
            let members = begin..coll_tasks.len() as u32;
            Self::check_collective(g, id, &coll_tasks[members.start as usize..])?;
            let Work::Collective {
                op,
                ref group,
                bytes,
                ..
            } = g.tasks[coll_tasks[begin as usize] as usize].work
            else {
                unreachable!("collected from collectives")
            };
            let class = *class_of.entry((op, bytes, group)).or_insert_with(|| {
                let start = class_senders.len() as u32;
                if g.placement.is_some() {
                    class_senders.extend(
                        group
                            .iter()
                            .enumerate()
                            .filter(|&(_, &r)| g.is_canonical(r))
                            .map(|(i, _)| i as u32),
                    );
                }
                let at = class_groups.len() as u32;
                class_groups.extend_from_slice(group);
                classes.push(CollClass {
                    senders: start..class_senders.len() as u32,
                    plan: None,
                    op,
                    bytes,
                    group: at..class_groups.len() as u32,
                    flows: Vec::new(),
                });
                classes.len() as u32 - 1
            });
            colls.push(Coll {
                members,
                started: 0,
                class,
            });
        }
        drop(class_of);

        let slow_rate = 1.0 - cost.overlap_slowdown();
        let links = net.links().len();
        let mut e = Engine {
            g,
            net,
            flows,
            q: EventQueue::new(),
            now: 0,
            ts,
            dependents_off,
            dependents,
            started_at: if opts.trace { vec![0; n] } else { Vec::new() },
            stream_off,
            stream_tasks,
            cursor,
            stream_key,
            colls,
            coll_tasks,
            classes,
            class_senders,
            class_groups,
            class_flows: Vec::new(),
            ops: Vec::new(),
            dev: vec![Dev::default(); g.devices as usize],
            running: vec![Vec::new(); g.devices as usize],
            slow_rate,
            slowdown: slow_rate < 1.0,
            actions: VecDeque::new(),
            transfers: Vec::new(),
            link_count: vec![0; links],
            routes: Vec::new(),
            changed: Vec::new(),
            devs: Vec::new(),
            done: 0,
            events: 0,
            spans: opts.trace.then(Vec::new),
            trace_device: opts.trace_device,
            flow_traced: Vec::new(),
            mon: None,
        };
        if opts.periodic {
            // The monitor compares rounds' dependencies from the flattened lists (compact,
            // where the graph's tasks are not).
            let mut dep_off = Vec::with_capacity(n + 1);
            let mut acc = 0u32;
            dep_off.push(0);
            for st in &e.ts {
                acc += st.deps_left;
                dep_off.push(acc);
            }
            e.mon = e.monitor_new(&dep_off, &dep_flat);
        }
        Ok(e)
    }

    fn check_collective(g: &TaskGraph, id: u64, members: &[u32]) -> Result<(), Error> {
        let first = &g.tasks[members[0] as usize];
        let Work::Collective {
            op, group, bytes, ..
        } = &first.work
        else {
            unreachable!("collected from collectives")
        };
        let fail = |m: String| Err(invalid(g.check().err().unwrap_or(m)));
        if let Some(&d) = group.iter().find(|&&d| d >= g.cluster_devices()) {
            return fail(format!(
                "collective {id}: group names device {d} of {}",
                g.cluster_devices()
            ));
        }
        let expected = g.collective_members(group);
        if members.len() != expected.len() {
            return fail(format!(
                "collective {id} has {} participating tasks for a group of {}",
                members.len(),
                expected.len()
            ));
        }
        if let CollectiveOp::Broadcast { root } | CollectiveOp::Reduce { root } = op {
            if !group.contains(root) {
                return fail(format!("collective {id}: root {root} is not in its group"));
            }
        }
        let mut devs: Vec<u32> = Vec::with_capacity(members.len());
        for &m in members {
            let t = &g.tasks[m as usize];
            let Work::Collective {
                op: o,
                group: gr,
                bytes: b,
                ..
            } = &t.work
            else {
                unreachable!("collected from collectives")
            };
            if o != op || gr != group || b != bytes {
                return fail(format!(
                    "collective {id}: task {m} disagrees with task {} on op, group or size",
                    members[0]
                ));
            }
            devs.push(t.device);
        }
        devs.sort_unstable();
        let mut want = expected;
        want.sort_unstable();
        if devs != want {
            return fail(format!(
                "collective {id}: its tasks run on devices {devs:?} but its group is {group:?}"
            ));
        }
        Ok(())
    }
}
