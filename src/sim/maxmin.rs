//! Max-min fair bandwidth sharing by progressive filling (water-filling), as SimGrid's LMM
//! solver does for flows without weights or bounds.
//!
//! Input: links with capacities (bytes/s) and flows, each with a route (a list of link
//! indices). Output: one rate per flow such that no link carries more than its capacity and no
//! flow can get more without taking from a flow that has no more than it (max-min fairness).
//!
//! Algorithm: every link offers its remaining capacity in equal shares to the flows on it that
//! are not yet fixed. The link(s) with the smallest share are saturated; every unfixed flow
//! crossing one of them is fixed at that share, which is subtracted from every link on its
//! route. Repeat until all flows are fixed. Each round fixes at least one flow, so there are at
//! most as many rounds as flows; a round costs O(links + route entries).
//!
//! Conventions: a flow with an empty route crosses no link and gets `f64::INFINITY`; a link
//! crossed twice by one flow counts that flow twice. This module knows nothing about GPUs or
//! Transformers.

/// Links whose fair share is within this relative distance of the smallest one saturate in the
/// same round (absorbs rounding in the subtracted capacities).
const TIE: f64 = 1e-12;

/// Max-min fair rates for `routes` over links of `capacities`. Convenience wrapper around
/// [`MaxMinSolver::solve`].
pub fn max_min_fair(capacities: &[f64], routes: &[Vec<u32>]) -> Vec<f64> {
    let mut offsets = Vec::with_capacity(routes.len() + 1);
    let mut links = Vec::new();
    offsets.push(0);
    for r in routes {
        links.extend_from_slice(r);
        offsets.push(links.len() as u32);
    }
    let mut rates = Vec::new();
    MaxMinSolver::default().solve(capacities, &offsets, &links, &mut rates);
    rates
}

/// A progressive-filling solver that keeps its scratch buffers between calls, so repeated
/// solves do not allocate once the buffers have grown.
#[derive(Debug, Default, Clone)]
pub struct MaxMinSolver {
    remaining: Vec<f64>,
    unfixed: Vec<u32>,
    link_offsets: Vec<u32>,
    link_flows: Vec<u32>,
    fixed: Vec<bool>,
    saturated: Vec<u32>,
}

impl MaxMinSolver {
    /// Solves one system. Flow `f` crosses `route_links[route_offsets[f]..route_offsets[f + 1]]`
    /// (`route_offsets` has one entry more than there are flows); `rates` is overwritten with one
    /// rate per flow.
    pub fn solve(
        &mut self,
        capacities: &[f64],
        route_offsets: &[u32],
        route_links: &[u32],
        rates: &mut Vec<f64>,
    ) {
        let n_links = capacities.len();
        let n_flows = route_offsets.len().saturating_sub(1);
        rates.clear();
        rates.resize(n_flows, f64::INFINITY);
        if n_flows == 0 {
            return;
        }
        let route =
            |f: usize| &route_links[route_offsets[f] as usize..route_offsets[f + 1] as usize];

        // Link -> flows adjacency (CSR) and per-link count of unfixed flows.
        self.unfixed.clear();
        self.unfixed.resize(n_links, 0);
        for &l in route_links {
            self.unfixed[l as usize] += 1;
        }
        self.link_offsets.clear();
        self.link_offsets.push(0);
        let mut acc = 0;
        for &c in &self.unfixed {
            acc += c;
            self.link_offsets.push(acc);
        }
        self.link_flows.clear();
        self.link_flows.resize(route_links.len(), 0);
        // Fill using `saturated` as per-link write cursors.
        self.saturated.clear();
        self.saturated
            .extend_from_slice(&self.link_offsets[..n_links]);
        for f in 0..n_flows {
            for &l in route(f) {
                let slot = &mut self.saturated[l as usize];
                self.link_flows[*slot as usize] = f as u32;
                *slot += 1;
            }
        }
        self.remaining.clear();
        self.remaining.extend_from_slice(capacities);
        self.fixed.clear();
        self.fixed.resize(n_flows, false);
        let mut left = 0usize;
        for f in 0..n_flows {
            if route(f).is_empty() {
                self.fixed[f] = true;
            } else {
                left += 1;
            }
        }

        while left > 0 {
            // Smallest fair share over links that still carry unfixed flows.
            let mut share = f64::INFINITY;
            for l in 0..n_links {
                let n = self.unfixed[l];
                if n > 0 {
                    share = share.min(self.remaining[l].max(0.0) / n as f64);
                }
            }
            let limit = share * (1.0 + TIE);
            self.saturated.clear();
            for l in 0..n_links {
                let n = self.unfixed[l];
                if n > 0 && self.remaining[l].max(0.0) / n as f64 <= limit {
                    self.saturated.push(l as u32);
                }
            }
            if self.saturated.is_empty() {
                // Only with capacities that are NaN: give up on fairness rather than loop.
                for (f, fixed) in self.fixed.iter_mut().enumerate() {
                    if !*fixed {
                        *fixed = true;
                        rates[f] = share;
                    }
                }
                break;
            }
            for i in 0..self.saturated.len() {
                let l = self.saturated[i] as usize;
                let (a, b) = (
                    self.link_offsets[l] as usize,
                    self.link_offsets[l + 1] as usize,
                );
                for k in a..b {
                    let f = self.link_flows[k] as usize;
                    if self.fixed[f] {
                        continue;
                    }
                    self.fixed[f] = true;
                    left -= 1;
                    rates[f] = share;
                    for &m in route(f) {
                        self.remaining[m as usize] -= share;
                        self.unfixed[m as usize] -= 1;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
    }

    fn assert_rates(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!(close(*g, *w), "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn two_flows_on_one_link_get_half_each() {
        // One link of 10; two flows share it equally: 10 / 2 = 5 each.
        assert_rates(&max_min_fair(&[10.0], &[vec![0], vec![0]]), &[5.0, 5.0]);
    }

    #[test]
    fn single_flow_gets_its_narrowest_link() {
        // One flow over links of 3 and 5 is limited by the 3.
        assert_rates(&max_min_fair(&[3.0, 5.0], &[vec![0, 1]]), &[3.0]);
    }

    #[test]
    fn parking_lot() {
        // Three links of capacity 1 in a row. Flow 0 crosses all three; flows 1, 2, 3 each cross
        // one link. Every link carries two flows, so every share is 1/2 and all saturate in the
        // first round: all four flows get 1/2 (the long flow is not favoured or starved).
        let routes = vec![vec![0, 1, 2], vec![0], vec![1], vec![2]];
        assert_rates(&max_min_fair(&[1.0, 1.0, 1.0], &routes), &[0.5; 4]);
    }

    #[test]
    fn parking_lot_with_a_crowded_link() {
        // Links L0, L1 of capacity 1. Flow 0 crosses L0 and L1; flow 1 uses L0; flows 2 and 3
        // use L1. Shares: L0 1/2, L1 1/3, so L1 saturates first: flows 0, 2, 3 get 1/3. L0 then
        // has 1 - 1/3 = 2/3 left for flow 1 alone.
        let routes = vec![vec![0, 1], vec![0], vec![1], vec![1]];
        assert_rates(
            &max_min_fair(&[1.0, 1.0], &routes),
            &[1.0 / 3.0, 2.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0],
        );
    }

    #[test]
    fn narrow_link_leaves_the_remainder_to_others() {
        // Link N (capacity 1) and link W (capacity 10). Flow A crosses N and W; B and C cross W.
        // Shares: N 1/1 = 1, W 10/3. N saturates: A = 1. W has 9 left for B and C: 4.5 each.
        let routes = vec![vec![0, 1], vec![1], vec![1]];
        assert_rates(&max_min_fair(&[1.0, 10.0], &routes), &[1.0, 4.5, 4.5]);
    }

    #[test]
    fn no_flows_gives_no_rates() {
        assert!(max_min_fair(&[1.0, 2.0], &[]).is_empty());
        assert!(max_min_fair(&[], &[]).is_empty());
    }

    #[test]
    fn empty_route_is_unbounded_and_takes_nothing() {
        // Flow 0 crosses no link: infinite rate; flow 1 alone on its link keeps all of it.
        let rates = max_min_fair(&[4.0], &[vec![], vec![0]]);
        assert!(rates[0].is_infinite());
        assert_rates(&rates[1..], &[4.0]);
    }

    #[test]
    fn nan_capacities_terminate() {
        // Not a valid input (profiles are validated), but the solver must not loop forever.
        let rates = max_min_fair(&[f64::NAN, 1.0], &[vec![0], vec![0, 1], vec![1]]);
        assert_eq!(rates.len(), 3);
    }

    #[test]
    fn solver_reuse_gives_the_same_answer() {
        let mut s = MaxMinSolver::default();
        let mut r1 = Vec::new();
        let mut r2 = Vec::new();
        s.solve(&[1.0, 10.0], &[0, 2, 3, 4], &[0, 1, 1, 1], &mut r1);
        s.solve(&[5.0], &[0, 1], &[0], &mut r2);
        s.solve(&[1.0, 10.0], &[0, 2, 3, 4], &[0, 1, 1, 1], &mut r2);
        assert_eq!(r1, r2);
        assert_rates(&r1, &[1.0, 4.5, 4.5]);
    }

    proptest! {
        // A fixed seed keeps CI reproducible.
        #![proptest_config(ProptestConfig {
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x6d65_7470),
            ..ProptestConfig::default()
        })]

        /// Feasibility and the bottleneck characterisation of max-min fairness: every flow
        /// crosses a saturated link on which no other flow gets more than it.
        #[test]
        fn rates_are_feasible_and_every_flow_has_a_bottleneck(
            caps in prop::collection::vec(0.5f64..100.0, 1..6),
            raw in prop::collection::vec(prop::collection::vec(0u32..6, 1..4), 0..10),
        ) {
            let n = caps.len() as u32;
            let routes: Vec<Vec<u32>> = raw
                .into_iter()
                .map(|r| { let mut r: Vec<u32> = r.into_iter().map(|l| l % n).collect(); r.sort(); r.dedup(); r })
                .collect();
            let rates = max_min_fair(&caps, &routes);
            let mut load = vec![0.0; caps.len()];
            for (f, r) in routes.iter().enumerate() {
                for &l in r { load[l as usize] += rates[f]; }
            }
            for (l, &c) in caps.iter().enumerate() {
                prop_assert!(load[l] <= c * (1.0 + 1e-9), "link {l} over capacity");
            }
            for (f, r) in routes.iter().enumerate() {
                let has_bottleneck = r.iter().any(|&l| {
                    let saturated = load[l as usize] >= caps[l as usize] * (1.0 - 1e-9);
                    let max_on_link = routes.iter().enumerate()
                        .filter(|(_, r2)| r2.contains(&l))
                        .map(|(g, _)| rates[g])
                        .fold(0.0, f64::max);
                    saturated && rates[f] >= max_on_link * (1.0 - 1e-9)
                });
                prop_assert!(has_bottleneck, "flow {f} has no bottleneck: {rates:?}");
            }
        }
    }
}
