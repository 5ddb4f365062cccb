//! The collective library of a hardware profile (`collective_library`): what NCCL or RCCL
//! charge per protocol (LL, LL128, Simple: a latency and a share of the link bandwidth), the
//! rate of NVLink SHARP (NVLS) where the switch has it, the library's point-to-point rate
//! where it differs from its collectives', and how it spreads one send over its channels
//! inside a node. Plain data with a source on every figure;
//! `cost::collective` gives it meaning (which algorithm and protocol the library picks per
//! size, and what each costs).
//!
//! A profile without the section prices collectives as it did before the section existed: one
//! protocol whose per-step latency is the profile's point-to-point latency of the link class,
//! at the full link bandwidth ([`CollectiveLibrary::fallback`]).

use serde::{Deserialize, Serialize};

use super::figure::Figure;

/// The three protocols of NCCL (and RCCL): small messages go LL (8-byte stores with a flag,
/// half the bandwidth, the lowest latency), mid-size LL128, large Simple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Low latency: a flag with every 4 bytes of data.
    Ll,
    /// Low latency on 128-byte lines (120 bytes of data each).
    Ll128,
    /// Bulk copies with a synchronisation per chunk.
    Simple,
}

impl Protocol {
    /// The name NCCL prints (`NCCL_PROTO`).
    pub fn id(self) -> &'static str {
        match self {
            Protocol::Ll => "LL",
            Protocol::Ll128 => "LL128",
            Protocol::Simple => "Simple",
        }
    }
}

/// What one protocol costs: the latency NCCL's tuner charges a collective
/// (`base + steps × step latency`, with the step latency of the link class each step crosses)
/// and the share of a link's bandwidth the protocol's data gets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtocolFigures {
    /// Charged once per collective.
    pub base_latency_s: Figure,
    /// Per algorithm step inside a node (NVLink, xGMI or PCIe).
    pub intra_step_latency_s: Figure,
    /// Per algorithm step that crosses the network.
    pub inter_step_latency_s: Figure,
    /// Bytes of data per byte on the wire: 0.5 for LL, 120/128 less the tuner's margin for
    /// LL128, 1 for Simple.
    pub bandwidth_fraction: Figure,
}

/// The library's protocols. Simple is always there; LL128 is optional (NCCL enables it only
/// where the platform allows).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Protocols {
    /// LL (every NCCL and RCCL build has it; optional so that a profile can price one protocol).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ll: Option<ProtocolFigures>,
    /// LL128, where enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ll128: Option<ProtocolFigures>,
    /// Simple.
    pub simple: ProtocolFigures,
}

/// NVLink SHARP: the NVSwitch reduces and multicasts, so an all-reduce moves each byte through a
/// GPU's port about once instead of 2(n−1)/n times. Inside a node it runs as NVLS, across nodes
/// as NVLSTree (NVLS inside each node, a tree between nodes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nvls {
    /// The all-reduce bus bandwidth NVLS reaches on a full node (nccl-tests' busbw, which NCCL's
    /// tuner holds constant in the rank count: algbw = this × n / (2(n−1))).
    pub bus_bytes_per_s: Figure,
    /// A GPU's port rate under NVLS traffic, which moves (1 + 1/g) × the buffer through each
    /// port of g GPUs: bounds groups of fewer GPUs (algbw ≤ this × g/(g+1)); none: no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_bytes_per_s: Option<Figure>,
    /// Latency of one NVLS all-reduce (NVLSTree adds the tree's network steps).
    pub latency_s: Figure,
}

/// How NCCL spreads one send over its channels inside a node (`src/enqueue.cc`,
/// `addP2pToPlan`): a send starts on `channels_per_peer` halved until that many channels for
/// every rank of the communicator fit in `channels`, each channel taking a part of at most
/// 32 chunks; a larger send doubles its channels (up to `channels_per_peer`) until its parts fit.
/// Each channel moves its part at `bytes_per_s_per_channel`, so a send runs at
/// min(point-to-point rate, channels × that): small sends are channel-bound, large ones
/// port-bound. Only inside one node (across nodes NCCL uses the network's chunk and part sizes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct P2pChannels {
    /// The rate of one channel's part of a send, per GPU and direction.
    pub bytes_per_s_per_channel: Figure,
    /// The library's point-to-point channels per GPU (NCCL's `p2pnChannels`): a whole number.
    pub channels: Figure,
    /// The most channels one peer's send may use (NCCL's `p2pnChannelsPerPeer`): a whole number.
    pub channels_per_peer: Figure,
    /// The point-to-point chunk (NCCL's `NCCL_P2P_NVL_CHUNKSIZE`): a part is at least an eighth
    /// of it and at most 32 of them. Whole bytes.
    pub chunk_bytes: Figure,
}

impl P2pChannels {
    /// The channels NCCL gives a send of `bytes` in a communicator of `ranks` ranks.
    pub fn channels_for(&self, bytes: f64, ranks: u64) -> u64 {
        let total = self.channels.value.max(1.0) as u64;
        let max = (self.channels_per_peer.value.max(1.0) as u64).min(total);
        let mut min = max;
        while min * ranks.max(1) > total && min > 1 {
            min /= 2;
        }
        let chunk = self.chunk_bytes.value.max(8.0);
        let (min_part, max_part) = (chunk / 8.0, chunk * 32.0);
        let mut n = min.min((bytes / min_part).ceil().max(1.0) as u64).max(1);
        let mut part = (bytes / n as f64).ceil().max(min_part);
        while part > max_part && n <= max / 2 {
            n *= 2;
            part = (bytes / n as f64).ceil();
        }
        n
    }
}

/// The collective library of a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveLibrary {
    /// Library and version the figures describe (NCCL 2.2x, RCCL 2.22).
    pub name: String,
    /// Protocol figures.
    pub protocols: Protocols,
    /// NVLink SHARP, where the node's switch has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvls: Option<Nvls>,
    /// The library's send/recv rate per GPU and direction inside a node, where it is below the
    /// rate its collectives reach on the same port (NCCL gives point-to-point fewer channels);
    /// none: the port's rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p2p_bytes_per_s: Option<Figure>,
    /// How the library spreads a send over its channels inside a node; none: every send at
    /// the point-to-point rate whatever its size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p2p_channels: Option<P2pChannels>,
}

impl CollectiveLibrary {
    /// The pricing of a profile without the section: one protocol (reported as Simple) whose
    /// per-step latency is the profile's point-to-point latency of the link class
    /// (`intra_node.p2p_latency_s`, `inter_node.latency_s`), at the full bandwidth.
    pub fn fallback(intra_latency_s: &Figure, inter_latency_s: &Figure) -> CollectiveLibrary {
        let fig = |v: f64, s: &str| Figure {
            value: v,
            source: s.to_string(),
        };
        let simple = ProtocolFigures {
            base_latency_s: fig(0.0, "no collective_library in the profile"),
            intra_step_latency_s: intra_latency_s.clone(),
            inter_step_latency_s: inter_latency_s.clone(),
            bandwidth_fraction: fig(1.0, "no collective_library in the profile"),
        };
        CollectiveLibrary {
            name: "none (point-to-point latencies)".into(),
            protocols: Protocols {
                ll: None,
                ll128: None,
                simple,
            },
            nvls: None,
            p2p_bytes_per_s: None,
            p2p_channels: None,
        }
    }

    /// Every figure with its field name (for validation and `--scale`).
    pub fn figures(&self) -> Vec<(String, &Figure)> {
        let mut out = Vec::new();
        for (name, p) in [
            ("ll", self.protocols.ll.as_ref()),
            ("ll128", self.protocols.ll128.as_ref()),
            ("simple", Some(&self.protocols.simple)),
        ] {
            let Some(p) = p else { continue };
            for (f, fig) in [
                ("base_latency_s", &p.base_latency_s),
                ("intra_step_latency_s", &p.intra_step_latency_s),
                ("inter_step_latency_s", &p.inter_step_latency_s),
                ("bandwidth_fraction", &p.bandwidth_fraction),
            ] {
                out.push((format!("collective_library.protocols.{name}.{f}"), fig));
            }
        }
        if let Some(n) = &self.nvls {
            out.push((
                "collective_library.nvls.bus_bytes_per_s".into(),
                &n.bus_bytes_per_s,
            ));
            if let Some(p) = &n.port_bytes_per_s {
                out.push(("collective_library.nvls.port_bytes_per_s".into(), p));
            }
            out.push(("collective_library.nvls.latency_s".into(), &n.latency_s));
        }
        if let Some(p) = &self.p2p_bytes_per_s {
            out.push(("collective_library.p2p_bytes_per_s".into(), p));
        }
        if let Some(c) = &self.p2p_channels {
            for (f, fig) in [
                ("bytes_per_s_per_channel", &c.bytes_per_s_per_channel),
                ("channels", &c.channels),
                ("channels_per_peer", &c.channels_per_peer),
                ("chunk_bytes", &c.chunk_bytes),
            ] {
                out.push((format!("collective_library.p2p_channels.{f}"), fig));
            }
        }
        out
    }

    /// The protocols in NCCL's order, with their figures.
    pub fn protocols(&self) -> Vec<(Protocol, &ProtocolFigures)> {
        let mut v = Vec::new();
        if let Some(p) = &self.protocols.ll {
            v.push((Protocol::Ll, p));
        }
        if let Some(p) = &self.protocols.ll128 {
            v.push((Protocol::Ll128, p));
        }
        v.push((Protocol::Simple, &self.protocols.simple));
        v
    }
}
