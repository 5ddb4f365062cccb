//! The network of a hardware profile and the set of flows crossing it.
//!
//! Topology (`N` devices, numbered node by node, `gpus_per_node` per node; a "node" is one
//! scale-up domain: an NVL72 rack is one node of 72 GPUs):
//! - per GPU an egress and an ingress port on the intra-node fabric, each carrying
//!   `intra_node.bytes_per_s_per_direction`. Through a switch (NVSwitch; PCIe is modelled the
//!   same way with its own figure, shared PCIe switches and root complexes are not) an
//!   intra-node message goes `src egress -> dst ingress`: full bisection, only the end ports can
//!   be bottlenecks;
//! - in a full mesh (`intra_node.kind = mesh`, xGMI) every ordered pair of GPUs of a node also
//!   has a link of `intra_node.link_bytes_per_s_per_direction`, and a message goes
//!   `src egress -> pair link -> dst ingress`: a ring hop gets its one link, traffic to all
//!   peers at once spreads over all of them (the ports bound the total);
//! - per node `nics_per_node` NICs, each with an egress and an ingress of
//!   `inter_node.bytes_per_s_per_nic`. The GPU with local rank `r` sends and receives
//!   inter-node traffic through NIC `r % nics_per_node` of its node, directly over GPUDirect RDMA
//!   (it does not cross the intra-node ports). Without `inter_node.spine` the switches between
//!   NICs are non-blocking and a message goes `src NIC egress -> dst NIC ingress`. With a
//!   spine, NICs hang off leaf switches (`inter_node.wiring`: rail — NIC r of `nodes_per_leaf`
//!   nodes per leaf — or node — all NICs of `nodes_per_leaf` nodes per leaf) and a message
//!   between two leaves also crosses `src leaf uplink -> dst leaf downlink`, each carrying the
//!   leaf's NIC bandwidth divided by the oversubscription (`cost::CostModel::uplink_bytes_per_s`).
//!
//! A message costs α (the point-to-point latency of its link class, [`CostModel::p2p_latency_s`])
//! and then moves its bytes at the rate the [`LinkModel`] gives it. `super::flows` holds the flows
//! in flight and recomputes rates: with [`LinkModel::Ideal`] a flow always gets the bandwidth of
//! the narrowest link on its route, whatever else is in flight; with [`LinkModel::MaxMin`]
//! concurrent flows share links max-min fairly ([`super::maxmin`]), and rates are recomputed
//! only for the connected component (links linked by shared flows) that a flow entered or left,
//! once per simulated instant.

use serde::{Deserialize, Serialize};

use super::queue::{secs_to_ps, SimTime};
use crate::config::{Hardware, IntraNodeKind};
use crate::cost::{CostModel, LinkClass, Plan};
use crate::schedule::{CollectiveOp, DeviceId};

/// The most steps of one phase of a collective the simulator runs one by one: a ring
/// all-gather or reduce-scatter over up to 17 members (a node's 8 GPUs: 7 steps) and a ring
/// all-reduce over up to 9 (2(n − 1) steps) run step by step, a ring all-gather over 64
/// replicas as 16 steps of about 4 steps' bytes ([`Plan::coalesced`]: the same time
/// uncontended), so that a step's cost does not grow with the data-parallel degree.
pub const COLLECTIVE_STEPS: u32 = 16;

/// How concurrent flows share links.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkModel {
    /// No contention between operations: every flow moves at the bandwidth of the narrowest
    /// link on its route, at most its equal share of the links it has in common with the other
    /// flows of its own collective step (a step is never faster than its busiest link).
    Ideal,
    /// Max-min fair sharing of every link among the flows crossing it.
    MaxMin,
}

impl LinkModel {
    /// The name on the command line and in outputs: `ideal` or `maxmin`.
    pub fn id(self) -> &'static str {
        match self {
            LinkModel::Ideal => "ideal",
            LinkModel::MaxMin => "maxmin",
        }
    }
}

/// What a link is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkKind {
    /// A GPU's outgoing intra-node port.
    GpuEgress {
        /// The GPU.
        device: DeviceId,
    },
    /// A GPU's incoming intra-node port.
    GpuIngress {
        /// The GPU.
        device: DeviceId,
    },
    /// A NIC's outgoing direction.
    NicEgress {
        /// Node.
        node: u32,
        /// NIC index within the node.
        nic: u32,
    },
    /// A NIC's incoming direction.
    NicIngress {
        /// Node.
        node: u32,
        /// NIC index within the node.
        nic: u32,
    },
    /// The link of a mesh from one GPU to another.
    MeshLink {
        /// Sender.
        src: DeviceId,
        /// Receiver.
        dst: DeviceId,
    },
    /// A leaf switch's share of the spine, towards the spine.
    LeafUplink {
        /// Leaf index.
        leaf: u32,
    },
    /// A leaf switch's share of the spine, from the spine.
    LeafDownlink {
        /// Leaf index.
        leaf: u32,
    },
}

/// One direction of one port.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Link {
    /// What it is.
    pub kind: LinkKind,
    /// Capacity in bytes/s.
    pub bytes_per_s: f64,
}

impl Link {
    /// Short name for traces: `gpu3 egress`, `node1 nic2 ingress`.
    pub fn name(&self) -> String {
        match self.kind {
            LinkKind::GpuEgress { device } => format!("gpu{device} egress"),
            LinkKind::GpuIngress { device } => format!("gpu{device} ingress"),
            LinkKind::NicEgress { node, nic } => format!("node{node} nic{nic} egress"),
            LinkKind::NicIngress { node, nic } => format!("node{node} nic{nic} ingress"),
            LinkKind::MeshLink { src, dst } => format!("gpu{src}->gpu{dst} link"),
            LinkKind::LeafUplink { leaf } => format!("leaf{leaf} uplink"),
            LinkKind::LeafDownlink { leaf } => format!("leaf{leaf} downlink"),
        }
    }
}

/// The links a message crosses (none for a device talking to itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    links: [u32; 4],
    len: u8,
}

impl Route {
    /// Link indices, in order.
    pub fn links(&self) -> &[u32] {
        &self.links[..self.len as usize]
    }

    fn of(links: &[u32]) -> Route {
        let mut r = Route {
            links: [0; 4],
            len: links.len() as u8,
        };
        r.links[..links.len()].copy_from_slice(links);
        r
    }
}

/// The links of `devices` GPUs on a hardware profile, and the routes between them.
#[derive(Debug, Clone)]
pub struct Network {
    links: Vec<Link>,
    devices: u32,
    gpus_per_node: u32,
    mesh: bool,
    /// First mesh link, first NIC link, first leaf link.
    mesh_base: u32,
    nic_base: u32,
    leaf_base: u32,
    /// Per device: (rail, leaf).
    rail: Vec<u32>,
    leaf: Vec<u32>,
    spine: bool,
    nics_per_node: u32,
    intra_latency_ps: SimTime,
    inter_latency_ps: SimTime,
    /// The profile, for the collective library's plans and point-to-point rate.
    hw: Hardware,
    /// Plans already made (a step runs the same collective once per layer and micro-batch).
    plans:
        std::cell::RefCell<std::collections::HashMap<crate::cost::collective::CollectiveKey, Plan>>,
}

impl Network {
    /// The network of `devices` GPUs of `hw`, on `ceil(devices / gpus_per_node)` nodes (the
    /// profile's own `nodes` field is not consulted: the graph decides how many devices exist).
    pub fn new(hw: &Hardware, devices: u32) -> Network {
        let cost = CostModel::new(hw);
        let gpn = hw.gpus_per_node.clamp(1, u32::MAX as u64) as u32;
        let nics = hw.inter_node.nics_per_node.clamp(1, u32::MAX as u64) as u32;
        let nodes = devices.div_ceil(gpn);
        let port = cost.port_bytes_per_s(LinkClass::IntraNode);
        let nic_bw = cost.port_bytes_per_s(LinkClass::InterNode);
        let mesh_link = match (
            hw.intra_node.kind,
            &hw.intra_node.link_bytes_per_s_per_direction,
        ) {
            (IntraNodeKind::Mesh, Some(l)) => Some(l.value),
            _ => None,
        };
        let mut links = Vec::with_capacity(2 * devices as usize + 2 * (nodes * nics) as usize);
        for device in 0..devices {
            links.push(Link {
                kind: LinkKind::GpuEgress { device },
                bytes_per_s: port,
            });
            links.push(Link {
                kind: LinkKind::GpuIngress { device },
                bytes_per_s: port,
            });
        }
        let mesh_base = links.len() as u32;
        if let Some(bw) = mesh_link {
            for node in 0..nodes {
                for a in 0..gpn {
                    for b in (0..gpn).filter(|&b| b != a) {
                        links.push(Link {
                            kind: LinkKind::MeshLink {
                                src: node * gpn + a,
                                dst: node * gpn + b,
                            },
                            bytes_per_s: bw,
                        });
                    }
                }
            }
        }
        let nic_base = links.len() as u32;
        if nodes > 1 {
            for node in 0..nodes {
                for nic in 0..nics {
                    links.push(Link {
                        kind: LinkKind::NicEgress { node, nic },
                        bytes_per_s: nic_bw,
                    });
                    links.push(Link {
                        kind: LinkKind::NicIngress { node, nic },
                        bytes_per_s: nic_bw,
                    });
                }
            }
        }
        let leaf_base = links.len() as u32;
        let leaf: Vec<u32> = (0..devices).map(|d| cost.leaf_of(d) as u32).collect();
        let spine = nodes > 1 && hw.inter_node.spine.is_some();
        if spine {
            let up = cost.uplink_bytes_per_s().unwrap_or(f64::INFINITY);
            let leaves = leaf.iter().copied().max().map_or(0, |m| m + 1);
            for l in 0..leaves {
                links.push(Link {
                    kind: LinkKind::LeafUplink { leaf: l },
                    bytes_per_s: up,
                });
                links.push(Link {
                    kind: LinkKind::LeafDownlink { leaf: l },
                    bytes_per_s: up,
                });
            }
        }
        Network {
            links,
            devices,
            gpus_per_node: gpn,
            mesh: mesh_link.is_some(),
            mesh_base,
            nic_base,
            leaf_base,
            rail: (0..devices).map(|d| cost.rail_of(d) as u32).collect(),
            leaf,
            spine,
            nics_per_node: nics,
            intra_latency_ps: secs_to_ps(cost.p2p_latency_s(LinkClass::IntraNode)),
            inter_latency_ps: secs_to_ps(cost.p2p_latency_s(LinkClass::InterNode)),
            hw: hw.clone(),
            plans: Default::default(),
        }
    }

    /// All links; a link's index is its position here.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// Number of devices.
    pub fn devices(&self) -> u32 {
        self.devices
    }

    fn nic_link(&self, device: DeviceId, ingress: bool) -> u32 {
        let node = device / self.gpus_per_node;
        let nic = self.rail[device as usize];
        self.nic_base + 2 * (node * self.nics_per_node + nic) + ingress as u32
    }

    fn mesh_link(&self, src: DeviceId, dst: DeviceId) -> u32 {
        let g = self.gpus_per_node;
        let (node, a, b) = (src / g, src % g, dst % g);
        self.mesh_base + node * g * (g - 1) + a * (g - 1) + if b < a { b } else { b - 1 }
    }

    /// The route of a message from `src` to `dst`.
    pub fn route(&self, src: DeviceId, dst: DeviceId) -> Route {
        if src == dst {
            Route::of(&[])
        } else if src / self.gpus_per_node == dst / self.gpus_per_node {
            if self.mesh {
                Route::of(&[2 * src, self.mesh_link(src, dst), 2 * dst + 1])
            } else {
                Route::of(&[2 * src, 2 * dst + 1])
            }
        } else {
            let (ls, ld) = (self.leaf[src as usize], self.leaf[dst as usize]);
            if self.spine && ls != ld {
                Route::of(&[
                    self.nic_link(src, false),
                    self.leaf_base + 2 * ls,
                    self.leaf_base + 2 * ld + 1,
                    self.nic_link(dst, true),
                ])
            } else {
                Route::of(&[self.nic_link(src, false), self.nic_link(dst, true)])
            }
        }
    }

    /// The route of a message from `src` to `dst` when only distinct programs are simulated and
    /// `dst` runs as a mirror image of rank `mirror` (`schedule::TaskGraph`'s placement): the
    /// links of the sending side as [`Network::route`] gives them, and on the receiving side
    /// `mirror`'s links of the same class (NVLink port or NIC), which by the symmetry carry
    /// exactly the load `dst`'s would. The link class is that of `src` and `dst`. Only for
    /// fabrics without a mesh or a spine (`schedule::lower`'s fold is made only there: a mesh
    /// link and a leaf uplink belong to a pair, not to one device).
    pub fn route_mirrored(&self, src: DeviceId, dst: DeviceId, mirror: DeviceId) -> Route {
        if src == dst || mirror == dst {
            self.route(src, dst)
        } else if src / self.gpus_per_node == dst / self.gpus_per_node {
            Route::of(&[2 * src, 2 * mirror + 1])
        } else {
            Route::of(&[self.nic_link(src, false), self.nic_link(mirror, true)])
        }
    }

    /// α of a message from `src` to `dst`, in ps: the point-to-point latency of its link class
    /// (0 for a device talking to itself).
    pub fn latency_ps(&self, src: DeviceId, dst: DeviceId) -> SimTime {
        if src == dst {
            0
        } else if src / self.gpus_per_node == dst / self.gpus_per_node {
            self.intra_latency_ps
        } else {
            self.inter_latency_ps
        }
    }

    /// Bandwidth of the narrowest link of `route` (infinite for an empty route).
    pub fn narrowest(&self, route: &Route) -> f64 {
        route
            .links()
            .iter()
            .map(|&l| self.links[l as usize].bytes_per_s)
            .fold(f64::INFINITY, f64::min)
    }

    /// The plan the collective library runs for `op` over `group` with a buffer of `bytes`
    /// (the cost model's: [`CostModel::collective_plan`]), its alike steps run at most
    /// [`COLLECTIVE_STEPS`] to a phase ([`Plan::coalesced`]).
    pub fn plan(&self, op: CollectiveOp, group: &[DeviceId], bytes: u64) -> Plan {
        let key = (op, group.to_vec(), bytes);
        if let Some(p) = self.plans.borrow().get(&key) {
            return p.clone();
        }
        let p = CostModel::new(&self.hw)
            .collective_plan(op, group, bytes)
            .coalesced(COLLECTIVE_STEPS);
        self.plans.borrow_mut().insert(key, p.clone());
        p
    }

    /// Bytes a point-to-point message of `bytes` from `src` to `dst` puts on its links: more
    /// than `bytes` where the library's send/recv rate is below the link's
    /// ([`CostModel::p2p_wire_bytes`]).
    pub fn p2p_wire_bytes(&self, src: DeviceId, dst: DeviceId, bytes: f64) -> f64 {
        let cost = CostModel::new(&self.hw);
        match cost.link_class(src, dst) {
            LinkClass::Local => bytes,
            class => cost.p2p_wire_bytes(class, bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_hardware;

    #[test]
    fn intra_node_routes_use_the_two_end_ports() {
        let hw = crate::sim::test_hardware();
        let net = Network::new(&hw, 8);
        assert_eq!(net.links().len(), 16, "8 GPUs x (egress, ingress), no NICs");
        let r = net.route(2, 5);
        let names: Vec<String> = r
            .links()
            .iter()
            .map(|&l| net.links()[l as usize].name())
            .collect();
        assert_eq!(names, ["gpu2 egress", "gpu5 ingress"]);
        assert_eq!(net.narrowest(&r), 230e9);
        assert_eq!(net.latency_ps(2, 5), 3_000_000);
        assert!(net.route(4, 4).links().is_empty());
        assert_eq!(net.latency_ps(4, 4), 0);
    }

    #[test]
    fn pcie_profile_uses_its_own_port_figures() {
        // a100-80gb-pcie: 20 GB/s per direction, α = 2.5 µs.
        let hw = load_hardware("a100-80gb-pcie").unwrap();
        let net = Network::new(&hw, 8);
        let r = net.route(0, 7);
        assert_eq!(net.narrowest(&r), 20e9);
        assert_eq!(net.latency_ps(0, 7), 2_500_000);
    }

    #[test]
    fn inter_node_routes_are_rail_optimised() {
        // 16 GPUs on 2 nodes, 4 NICs per node: local rank 6 uses NIC 6 % 4 = 2.
        let mut hw = crate::sim::test_hardware();
        hw.inter_node.nics_per_node = 4;
        let net = Network::new(&hw, 16);
        assert_eq!(net.links().len(), 32 + 2 * 2 * 4);
        let r = net.route(6, 8 + 1);
        let names: Vec<String> = r
            .links()
            .iter()
            .map(|&l| net.links()[l as usize].name())
            .collect();
        assert_eq!(names, ["node0 nic2 egress", "node1 nic1 ingress"]);
        assert_eq!(net.narrowest(&r), 24e9);
        assert_eq!(net.latency_ps(6, 9), 14_000_000);
    }

    fn names(net: &Network, r: Route) -> Vec<String> {
        r.links()
            .iter()
            .map(|&l| net.links()[l as usize].name())
            .collect()
    }

    #[test]
    fn mesh_routes_cross_the_pair_link_and_agree_with_the_cost_model() {
        let mut hw = crate::sim::test_hardware();
        hw.intra_node.kind = IntraNodeKind::Mesh;
        hw.intra_node.bytes_per_s_per_direction.value = 336e9;
        hw.intra_node.link_bytes_per_s_per_direction = Some(crate::config::Figure {
            value: 48e9,
            source: "test".into(),
        });
        let net = Network::new(&hw, 16);
        // 16 ports x 2, 2 nodes x 8 x 7 pair links, 2 nodes x 8 NICs x 2.
        assert_eq!(net.links().len(), 32 + 112 + 32);
        assert_eq!(
            names(&net, net.route(2, 5)),
            ["gpu2 egress", "gpu2->gpu5 link", "gpu5 ingress"]
        );
        assert_eq!(
            names(&net, net.route(13, 9)),
            ["gpu13 egress", "gpu13->gpu9 link", "gpu9 ingress"]
        );
        // Every intra-node pair has its own link; the narrowest is the cost model's figure.
        let cost = CostModel::new(&hw);
        let mut seen = std::collections::BTreeSet::new();
        for a in 0..16 {
            for b in 0..16 {
                let r = net.route(a, b);
                match cost.link_class(a, b) {
                    LinkClass::IntraNode => {
                        assert!(seen.insert(r.links()[1]), "pair link reused");
                        assert_eq!(net.narrowest(&r), 48e9);
                    }
                    LinkClass::InterNode => assert_eq!(net.narrowest(&r), 24e9),
                    LinkClass::Local => assert!(r.links().is_empty()),
                }
                if a != b {
                    assert_eq!(
                        net.narrowest(&r),
                        cost.link_bytes_per_s(cost.link_class(a, b))
                    );
                }
            }
        }
    }

    #[test]
    fn routes_between_leaves_cross_the_oversubscribed_spine() {
        // Four DGX nodes, every NIC of a node on one leaf (node wiring), two nodes per leaf,
        // 2:1: a leaf has 16 NICs x 24 GB/s = 384 GB/s down and 192 GB/s up.
        let mut hw = crate::sim::test_hardware();
        hw.inter_node.wiring = crate::config::Wiring::Node;
        hw.inter_node.spine = Some(crate::config::Spine {
            nodes_per_leaf: 2,
            oversubscription: crate::config::Figure {
                value: 2.0,
                source: "test".into(),
            },
        });
        let net = Network::new(&hw, 32);
        assert_eq!(
            names(&net, net.route(3, 8 + 3)),
            ["node0 nic3 egress", "node1 nic3 ingress"]
        );
        let r = net.route(3, 16 + 5);
        assert_eq!(
            names(&net, r),
            [
                "node0 nic3 egress",
                "leaf0 uplink",
                "leaf1 downlink",
                "node2 nic5 ingress"
            ]
        );
        let up = net.links()[r.links()[1] as usize].bytes_per_s;
        assert_eq!(up, 16.0 * 24e9 / 2.0);
        // Rail wiring: a leaf per rail and pair of nodes; same rail on the same leaf stays on
        // it, a different rail crosses the spine (NCCL's PXN, which would move the data to the
        // right rail over NVLink first, is not modelled).
        hw.inter_node.wiring = crate::config::Wiring::Rail;
        let net = Network::new(&hw, 32);
        assert_eq!(net.route(3, 8 + 3).links().len(), 2);
        let r = net.route(3, 8 + 4);
        assert_eq!(names(&net, r)[1], "leaf3 uplink");
        assert_eq!(names(&net, r)[2], "leaf4 downlink");
        assert_eq!(
            net.links()[r.links()[1] as usize].bytes_per_s,
            2.0 * 24e9 / 2.0
        );
    }
}
