//! The links a message crosses, named by what they are, and their capacities: a GPU's egress
//! and ingress port inside its node, the pair link of a full mesh, a NIC's two directions, a
//! leaf switch's share of the spine. The simulator numbers the same links for its flows
//! (`sim::Network`, tested to give the same routes and capacities); the collective model prices
//! a step by the load it puts on these links (`super::collective`).

use super::{CostModel, LinkClass};
use crate::config::IntraNodeKind;
use crate::schedule::DeviceId;

/// One direction of one link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinkKey {
    /// A GPU's outgoing port on the intra-node fabric.
    GpuOut(DeviceId),
    /// A GPU's incoming port on the intra-node fabric.
    GpuIn(DeviceId),
    /// The mesh link from one GPU to another.
    Mesh(DeviceId, DeviceId),
    /// A NIC's outgoing direction: (node, rail).
    NicOut(u64, u64),
    /// A NIC's incoming direction: (node, rail).
    NicIn(u64, u64),
    /// A leaf switch's share of the spine, towards the spine.
    LeafUp(u64),
    /// A leaf switch's share of the spine, from the spine.
    LeafDown(u64),
}

/// The links of one route, in order (at most four).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteKeys {
    keys: [LinkKey; 4],
    len: u8,
}

impl RouteKeys {
    fn of(links: &[LinkKey]) -> RouteKeys {
        let mut keys = [LinkKey::GpuOut(0); 4];
        keys[..links.len()].copy_from_slice(links);
        RouteKeys {
            keys,
            len: links.len() as u8,
        }
    }

    /// The links, in order.
    pub fn links(&self) -> &[LinkKey] {
        &self.keys[..self.len as usize]
    }
}

impl CostModel<'_> {
    /// The links a message from `src` to `dst` crosses: nothing on one device; the two ports
    /// (and the pair link of a mesh) inside a node; the sender's and receiver's rail NICs across
    /// nodes, and the two leaves' spine shares when they hang off different leaves.
    pub fn route(&self, src: DeviceId, dst: DeviceId) -> RouteKeys {
        if src == dst {
            return RouteKeys::of(&[]);
        }
        match self.link_class(src, dst) {
            LinkClass::Local => RouteKeys::of(&[]),
            LinkClass::IntraNode => {
                if self.hardware().intra_node.kind == IntraNodeKind::Mesh {
                    RouteKeys::of(&[
                        LinkKey::GpuOut(src),
                        LinkKey::Mesh(src, dst),
                        LinkKey::GpuIn(dst),
                    ])
                } else {
                    RouteKeys::of(&[LinkKey::GpuOut(src), LinkKey::GpuIn(dst)])
                }
            }
            LinkClass::InterNode => {
                let out = LinkKey::NicOut(self.node_of(src), self.rail_of(src));
                let inn = LinkKey::NicIn(self.node_of(dst), self.rail_of(dst));
                let (ls, ld) = (self.leaf_of(src), self.leaf_of(dst));
                if self.hardware().inter_node.spine.is_some() && ls != ld {
                    RouteKeys::of(&[out, LinkKey::LeafUp(ls), LinkKey::LeafDown(ld), inn])
                } else {
                    RouteKeys::of(&[out, inn])
                }
            }
        }
    }

    /// Capacity of a link per direction, bytes/s.
    pub fn capacity(&self, link: LinkKey) -> f64 {
        let hw = self.hardware();
        match link {
            LinkKey::GpuOut(_) | LinkKey::GpuIn(_) => hw.intra_node.bytes_per_s_per_direction.value,
            LinkKey::Mesh(..) => hw
                .intra_node
                .link_bytes_per_s_per_direction
                .as_ref()
                .map_or(hw.intra_node.bytes_per_s_per_direction.value, |l| l.value),
            LinkKey::NicOut(..) | LinkKey::NicIn(..) => hw.inter_node.bytes_per_s_per_nic.value,
            LinkKey::LeafUp(_) | LinkKey::LeafDown(_) => {
                self.uplink_bytes_per_s().unwrap_or(f64::INFINITY)
            }
        }
    }
}
