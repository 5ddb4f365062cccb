//! Lowering the stages that move data around a ring: double-buffered rings with traveling
//! accumulators, and METP's outer loop over head groups (weights fetched by broadcast or relay,
//! weight gradients returned to their owner).

use super::*;

impl Lower<'_> {
    pub(super) fn ring(&mut self, ring: &Ring) {
        let steps = ring.steps.len();
        let base = self.fresh() << 20;
        let devs = self.sim_devices();
        // Per device: last prefetch recv, last accumulator recv, end of the previous step.
        let mut pre_recv: Vec<Option<TaskId>> = vec![None; devs];
        let mut acc_recv: Vec<Option<TaskId>> = vec![None; devs];
        let start = self.active_frontier();
        let mut prev_main_end: Vec<Vec<TaskId>> = start.clone();
        for (k, step) in ring.steps.iter().enumerate() {
            self.label.step = Some(k as u32);
            let last = k + 1 == steps;
            let mut main_end: Vec<Vec<TaskId>> = vec![Vec::new(); devs];
            for a in 0..self.active.len() {
                let dev = self.active[a];
                let d = dev as usize;
                let c = self.coords[d];
                let (i, p) = match ring.axis {
                    Axis::Method => (c.rank, self.axes.p),
                    Axis::Context => (c.cp, self.axes.cp),
                };
                let at = |j: u32| match ring.axis {
                    Axis::Method => Coord { rank: j, ..c },
                    Axis::Context => Coord { cp: j, ..c },
                };
                let succ = self.rank_at(at((i + 1) % p));
                let pred = self.rank_at(at((i + p - 1) % p));
                // Prefetch hop k carries what step k + 1 needs.
                let mut recv_k = None;
                if !last && p > 1 {
                    self.label.name = "prefetch-send";
                    // Posted with the receive, as a ring's loop issues both at once (Transformer
                    // Engine's context-parallel attention: send and receive together at the start
                    // of each step): once hop k − 1 has landed and, with two buffers, the
                    // previous step's compute is done. Posting earlier would leave the send
                    // waiting on a receiver still computing, counted in flight (σ) though no
                    // byte moves.
                    let mut send_deps = match pre_recv[d] {
                        Some(r) => vec![r],
                        None => start[d].clone(),
                    };
                    if ring.buffers >= 2 {
                        send_deps.extend_from_slice(&prev_main_end[d]);
                    }
                    let tag = base | ((k as u64) << 2);
                    self.add(
                        dev,
                        PRE_SEND,
                        Work::Send {
                            to: succ,
                            bytes: ring.prefetch_bytes,
                            tag,
                        },
                        send_deps,
                    );
                    let recv_deps = if ring.buffers >= 2 {
                        prev_main_end[d].clone()
                    } else {
                        Vec::new()
                    };
                    // With one buffer the receive also waits for this step's compute (added below).
                    recv_k = Some((pred, tag, recv_deps));
                }
                let block = step.block(p as usize, i as usize, k);
                let extra: Vec<TaskId> = pre_recv[d].into_iter().collect();
                self.kernels(dev, step.kernels_of(block), &extra);
                main_end[d] = self.frontier[d].clone();
                if let Some((from, tag, mut deps)) = recv_k {
                    if ring.buffers < 2 {
                        deps.extend_from_slice(&main_end[d]);
                    }
                    self.label.name = "prefetch-recv";
                    pre_recv[d] = Some(self.add(
                        dev,
                        PRE_RECV,
                        Work::Recv {
                            from,
                            bytes: ring.prefetch_bytes,
                            tag,
                        },
                        deps,
                    ));
                }
                if !step.accumulate.is_empty() || ring.accumulator_bytes > 0 {
                    let extra: Vec<TaskId> = acc_recv[d].into_iter().collect();
                    self.kernels(dev, &step.accumulate, &extra);
                    if ring.accumulator_bytes > 0 && p > 1 {
                        let tag = base | ((k as u64) << 2) | 1;
                        self.label.name = "accumulator-send";
                        let send_deps = self.frontier[d].clone();
                        self.add(
                            dev,
                            ACC_SEND,
                            Work::Send {
                                to: succ,
                                bytes: ring.accumulator_bytes,
                                tag,
                            },
                            send_deps,
                        );
                        // Posted once the ring has started (two buffers) or once this step's
                        // accumulator has left its buffer (one).
                        let recv_deps = if ring.buffers >= 2 {
                            start[d].clone()
                        } else {
                            self.frontier[d].clone()
                        };
                        self.label.name = "accumulator-recv";
                        acc_recv[d] = Some(self.add(
                            dev,
                            ACC_RECV,
                            Work::Recv {
                                from: pred,
                                bytes: ring.accumulator_bytes,
                                tag,
                            },
                            recv_deps,
                        ));
                    }
                }
            }
            prev_main_end = main_end;
        }
        // The final accumulator hop must land before the stage ends.
        for (d, r) in acc_recv.into_iter().enumerate() {
            self.frontier[d].extend(r);
        }
        self.label.step = None;
    }

    pub(super) fn outer(&mut self, outer: &Outer) {
        let p = self.axes.p;
        let devs = self.sim_devices();
        let groups = outer.groups;
        let per_owner = (groups / p).max(1);
        let mut pending: Vec<Vec<TaskId>> = vec![Vec::new(); devs];
        // Weights of group 0 are fetched before the loop (nothing to overlap with).
        let mut ready = self.fetch_weights(outer, 0, &self.active_frontier());
        for gi in 0..groups {
            self.label.outer = Some(gi);
            let group_start = self.active_frontier();
            // Two buffers: the next group's weights move while this group runs.
            let next_ready = if gi + 1 < groups && outer.buffers >= 2 {
                Some(self.fetch_weights(outer, gi + 1, &group_start))
            } else {
                None
            };
            for (f, r) in self.frontier.iter_mut().zip(&ready) {
                f.extend(r.iter().copied());
            }
            for s in &outer.body {
                self.stage(s);
            }
            self.label.outer = Some(gi);
            if outer.grad_bytes > 0 && p > 1 {
                let owner = gi / per_owner;
                let done = self.return_grads(outer, gi, owner);
                for (pd, dn) in pending.iter_mut().zip(done) {
                    pd.extend(dn);
                }
            }
            ready = match next_ready {
                Some(r) => r,
                None if gi + 1 < groups => {
                    self.fetch_weights(outer, gi + 1, &self.active_frontier())
                }
                None => vec![Vec::new(); devs],
            };
        }
        for (f, pd) in self.frontier.iter_mut().zip(pending) {
            f.extend(pd);
        }
        self.label.outer = None;
    }

    /// Brings group `gi`'s weights to every device; returns per device the task to wait for.
    fn fetch_weights(&mut self, outer: &Outer, gi: u32, after: &[Vec<TaskId>]) -> Vec<Vec<TaskId>> {
        let p = self.axes.p;
        let devs = self.sim_devices();
        let mut ready = vec![Vec::new(); devs];
        if p == 1 {
            return ready;
        }
        let owner = gi / (outer.groups / p).max(1);
        match outer.exchange {
            Exchange::Broadcast => {
                let ids = self.collective(
                    "weight-broadcast",
                    CollectiveOp::Broadcast { root: owner },
                    outer.weight_bytes,
                    W_SEND,
                    after,
                );
                for (d, id) in ids.into_iter().enumerate() {
                    ready[d] = vec![id];
                }
            }
            Exchange::Chain => {
                let tag = self.fresh() << 20;
                for group in self.active_groups(Axis::Method) {
                    let mut prev: Option<TaskId> = None;
                    for hop in 0..p - 1 {
                        let from = group[((owner + hop) % p) as usize];
                        let to = group[((owner + hop + 1) % p) as usize];
                        let (fd, td) = (self.rep[from as usize], self.rep[to as usize]);
                        self.label.name = "weight-send";
                        let mut sdeps = after[fd as usize].clone();
                        sdeps.extend(prev);
                        self.add(
                            fd,
                            W_SEND,
                            Work::Send {
                                to,
                                bytes: outer.weight_bytes,
                                tag,
                            },
                            sdeps,
                        );
                        self.label.name = "weight-recv";
                        let rid = self.add(
                            td,
                            W_RECV,
                            Work::Recv {
                                from,
                                bytes: outer.weight_bytes,
                                tag,
                            },
                            after[td as usize].clone(),
                        );
                        ready[td as usize] = vec![rid];
                        prev = Some(rid);
                    }
                }
            }
        }
        ready
    }

    /// Sends group `gi`'s weight gradients to its owner once every device's body is done.
    fn return_grads(&mut self, outer: &Outer, _gi: u32, owner: u32) -> Vec<Vec<TaskId>> {
        let p = self.axes.p;
        let devs = self.sim_devices();
        let after = self.active_frontier();
        let mut done = vec![Vec::new(); devs];
        match outer.exchange {
            Exchange::Broadcast => {
                let ids = self.collective(
                    "wgrad-reduce",
                    CollectiveOp::Reduce { root: owner },
                    outer.grad_bytes,
                    G_SEND,
                    &after,
                );
                for (d, id) in ids.into_iter().enumerate() {
                    done[d] = vec![id];
                }
            }
            Exchange::Chain => {
                // The accumulator starts after the owner and travels the ring back to it, each
                // device adding its contribution.
                let tag = self.fresh() << 20;
                for group in self.active_groups(Axis::Method) {
                    let mut prev: Option<TaskId> = None;
                    for hop in 1..p {
                        let from = group[((owner + hop) % p) as usize];
                        let to = group[((owner + hop + 1) % p) as usize];
                        let (fd, td) = (self.rep[from as usize], self.rep[to as usize]);
                        self.label.name = "wgrad-send";
                        let mut sdeps = after[fd as usize].clone();
                        sdeps.extend(prev);
                        let sid = self.add(
                            fd,
                            G_SEND,
                            Work::Send {
                                to,
                                bytes: outer.grad_bytes,
                                tag,
                            },
                            sdeps,
                        );
                        done[fd as usize].push(sid);
                        self.label.name = "wgrad-recv";
                        let rid = self.add(
                            td,
                            G_RECV,
                            Work::Recv {
                                from,
                                bytes: outer.grad_bytes,
                                tag,
                            },
                            after[td as usize].clone(),
                        );
                        done[td as usize].push(rid);
                        prev = Some(rid);
                    }
                }
            }
        }
        done
    }
}
