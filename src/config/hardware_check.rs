//! Validation of a hardware profile (`config::Hardware::validate`): every figure in range, the
//! topology (links, fabric, spine, collective rules) consistent, the collective library well
//! formed. Split from `hardware.rs`, which holds the profile's types and what is read from them;
//! this file only checks, and depends on nothing the types do not.

use std::path::Path;

use super::figure::Figure;
use super::hardware::{Hardware, IntraNodeKind};
use super::topology::{tree_runs, Algorithm};
use crate::error::{Error, Result};

impl Hardware {
    /// Checks every figure; `path` is used in the error message.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let bad = |field: &str, message: String| Error::InvalidField {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        use super::limits::{
            check_name, check_text, MAX_GPUS, MAX_GPUS_PER_NODE, MAX_KERNEL_FIGURE,
            MAX_NICS_PER_NODE, MAX_NODES, MAX_PROFILE_BYTES, MAX_PROFILE_LATENCY_S, MAX_TEXT_CHARS,
            PROFILE_RATE_RANGE,
        };
        for (field, value, max) in [
            ("gpus_per_node", self.gpus_per_node, MAX_GPUS_PER_NODE),
            ("nodes", self.nodes, MAX_NODES),
            (
                "inter_node.nics_per_node",
                self.inter_node.nics_per_node,
                MAX_NICS_PER_NODE,
            ),
        ] {
            if value == 0 || value > max {
                return Err(bad(
                    field,
                    format!("must be a whole number from 1 to {max}, got {value}"),
                ));
            }
        }
        if self.gpus_per_node * self.nodes > MAX_GPUS {
            return Err(bad(
                "nodes",
                format!(
                    "{} nodes × {} GPUs is more than {MAX_GPUS} GPUs",
                    self.nodes, self.gpus_per_node
                ),
            ));
        }
        let positive = [
            ("gpu.peak_bf16_flops_per_s", &self.gpu.peak_bf16_flops_per_s),
            ("gpu.hbm_bytes_per_s", &self.gpu.hbm_bytes_per_s),
            (
                "intra_node.bytes_per_s_per_direction",
                &self.intra_node.bytes_per_s_per_direction,
            ),
            (
                "inter_node.bytes_per_s_per_nic",
                &self.inter_node.bytes_per_s_per_nic,
            ),
        ];
        let fp8 = self
            .gpu
            .peak_fp8_flops_per_s
            .as_ref()
            .map(|f| ("gpu.peak_fp8_flops_per_s", f));
        let (lo, hi) = PROFILE_RATE_RANGE;
        for (field, fig) in positive.into_iter().chain(fp8) {
            if !(fig.value.is_finite() && fig.value >= lo && fig.value <= hi) {
                return Err(bad(
                    &format!("{field}.value"),
                    format!(
                        "must be a rate from {lo:e} to {hi:e} per second, got {:?}",
                        fig.value
                    ),
                ));
            }
        }
        for (field, fig) in [
            ("gpu.memory_bytes", &self.gpu.memory_bytes),
            (
                "reserved.cuda_context_bytes",
                &self.reserved.cuda_context_bytes,
            ),
            ("reserved.nccl_bytes", &self.reserved.nccl_bytes),
        ] {
            let v = fig.value;
            if !(v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= MAX_PROFILE_BYTES) {
                return Err(bad(
                    &format!("{field}.value"),
                    format!("must be a whole number of bytes from 0 to 2^60, got {v:?}"),
                ));
            }
        }
        if self.gpu.memory_bytes.value == 0.0 {
            return Err(bad(
                "gpu.memory_bytes.value",
                "must be a positive number of bytes".into(),
            ));
        }
        for (field, fig) in [
            ("intra_node.p2p_latency_s", &self.intra_node.p2p_latency_s),
            (
                "intra_node.collective_latency_s",
                &self.intra_node.collective_latency_s,
            ),
            ("inter_node.latency_s", &self.inter_node.latency_s),
        ] {
            if !(fig.value.is_finite() && fig.value >= 0.0 && fig.value <= MAX_PROFILE_LATENCY_S) {
                return Err(bad(
                    &format!("{field}.value"),
                    format!(
                        "must be a latency from 0 to {MAX_PROFILE_LATENCY_S} s, got {:?}",
                        fig.value
                    ),
                ));
            }
        }
        for (field, fig) in [
            (
                "reserved.allocator_headroom_fraction",
                &self.reserved.allocator_headroom_fraction,
            ),
            (
                "overlap_compute_slowdown_fraction",
                &self.overlap_compute_slowdown_fraction,
            ),
        ] {
            if !(fig.value >= 0.0 && fig.value < 1.0) {
                return Err(bad(
                    &format!("{field}.value"),
                    format!("must be in [0, 1), got {:?}", fig.value),
                ));
            }
        }
        let whole = |field: &str, fig: &Figure| -> Result<()> {
            if !(fig.value.is_finite()
                && fig.value >= 1.0
                && fig.value.fract() == 0.0
                && fig.value <= 1e6)
            {
                return Err(bad(
                    &format!("{field}.value"),
                    format!("must be a whole number from 1 to 10^6, got {:?}", fig.value),
                ));
            }
            Ok(())
        };
        whole("gpu.sm_count", &self.gpu.sm_count)?;
        // Names after the numbers: a `--scale` name carries the factors, so a factor that
        // breaks a figure is reported as the figure it breaks.
        check_name(&self.name).map_err(|m| bad("name", m))?;
        check_name(&self.gpu.model).map_err(|m| bad("gpu.model", m))?;
        check_text(&self.description, MAX_TEXT_CHARS).map_err(|m| bad("description", m))?;
        self.validate_topology(path)?;
        let k = &self.kernels;
        if k.gemm.power_fraction.is_some() != k.gemm.power_time_s.is_some() {
            return Err(bad(
                "kernels.gemm.power_time_s",
                "power_fraction and power_time_s come together (or neither)".into(),
            ));
        }
        if let Some(set) = &k.attention {
            use super::AttentionKernel as K;
            for name in set.implementations.keys() {
                if matches!(name, K::Unfused | K::Fused) || *name == set.fused {
                    return Err(bad(
                        &format!("kernels.attention.implementations.{name}"),
                        format!(
                            "'{name}' cannot be listed here (unfused and fused are implied; \
                             '{}' is the one in attention_fwd/attention_bwd)",
                            set.fused
                        ),
                    ));
                }
            }
            if matches!(set.fused, K::Unfused) {
                return Err(bad(
                    "kernels.attention.fused",
                    "must name a fused implementation".into(),
                ));
            }
            if !k.has_attention(set.default) {
                return Err(bad(
                    "kernels.attention.default",
                    format!("'{}' is not one of {}", set.default, k.attention_list()),
                ));
            }
            let texts = [
                ("fused_source", Some(&set.fused_source)),
                ("default_source", Some(&set.default_source)),
                ("fused_placeholder", set.fused_placeholder.as_ref()),
            ];
            for (field, text) in texts {
                if let Some(t) = text {
                    check_text(t, MAX_TEXT_CHARS)
                        .map_err(|m| bad(&format!("kernels.attention.{field}"), m))?;
                }
            }
            for (name, i) in &set.implementations {
                for (field, text) in [
                    ("source", Some(&i.source)),
                    ("placeholder", i.placeholder.as_ref()),
                ] {
                    if let Some(t) = text {
                        check_text(t, MAX_TEXT_CHARS).map_err(|m| {
                            bad(
                                &format!("kernels.attention.implementations.{name}.{field}"),
                                m,
                            )
                        })?;
                    }
                }
            }
        }
        if let Some(t) = &k.placeholder {
            check_text(t, MAX_TEXT_CHARS).map_err(|m| bad("kernels.placeholder", m))?;
        }
        for (pass, a) in k.attention_passes() {
            // Every priced call looks its head dimension up in this list.
            if a.tiles.len() > super::limits::MAX_PROFILE_LIST {
                return Err(bad(
                    &format!("{pass}.tiles"),
                    format!(
                        "{} entries, more than {} (one per head dimension)",
                        a.tiles.len(),
                        super::limits::MAX_PROFILE_LIST
                    ),
                ));
            }
            let mut dims: Vec<u64> = a.tiles.iter().map(|t| t.head_dim).collect();
            dims.sort_unstable();
            if dims.iter().any(|&d| d == 0 || d > 1 << 20) || dims.windows(2).any(|w| w[0] == w[1])
            {
                return Err(bad(
                    &format!("{pass}.tiles"),
                    "head_dim must be positive, at most 2^20, and appear once".into(),
                ));
            }
        }
        for (field, fig) in k.figures() {
            let name = field.rsplit('.').next().unwrap_or("");
            match name {
                "tile" | "k_step" | "block_q" | "block_k" | "ctas_per_sm" | "max_splits"
                | "split_block_q" | "split_block_k" => whole(&field, fig)?,
                "stream_k" => {
                    if !(fig.value == 0.0 || fig.value == 1.0) {
                        return Err(bad(
                            &format!("{field}.value"),
                            format!("must be 0 or 1, got {}", fig.value),
                        ));
                    }
                }
                "fleet_clock_spread" => {
                    // At most 10%: the slowest of 2^20 GPUs then keeps half the clock.
                    if !(fig.value >= 0.0 && fig.value <= 0.1) {
                        return Err(bad(
                            &format!("{field}.value"),
                            format!("must be in [0, 0.1], got {:?}", fig.value),
                        ));
                    }
                }
                "mma_fraction"
                | "elementwise_fraction"
                | "power_fraction"
                | "solo_fraction"
                | "step_clock_fraction" => {
                    if !(fig.value > 0.0 && fig.value <= 1.0) {
                        return Err(bad(
                            &format!("{field}.value"),
                            format!("must be in (0, 1], got {:?}", fig.value),
                        ));
                    }
                }
                _ => {
                    // Times and byte counts: non-negative, and below a day / 2^40 so that no
                    // kernel can take an impossible time.
                    if !(fig.value.is_finite() && fig.value >= 0.0 && fig.value < MAX_KERNEL_FIGURE)
                    {
                        return Err(bad(
                            &format!("{field}.value"),
                            format!(
                                "must be a non-negative number below {MAX_KERNEL_FIGURE}, got {:?}",
                                fig.value
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks the mesh link, the spine and the collective rules.
    fn validate_topology(&self, path: &Path) -> Result<()> {
        let bad = |field: &str, message: String| Error::InvalidField {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        // A rate, bounded as every other rate of the profile (config::limits): a tiny one made
        // every transfer longer than the simulator's clock.
        let positive = |field: &str, fig: &Figure| -> Result<()> {
            let (lo, hi) = super::limits::PROFILE_RATE_RANGE;
            if fig.value.is_finite() && fig.value >= lo && fig.value <= hi {
                Ok(())
            } else {
                Err(bad(
                    &format!("{field}.value"),
                    format!(
                        "must be a rate from {lo:e} to {hi:e} per second, got {:?}",
                        fig.value
                    ),
                ))
            }
        };
        match (
            self.intra_node.kind,
            &self.intra_node.link_bytes_per_s_per_direction,
        ) {
            (IntraNodeKind::Mesh, None) => {
                return Err(bad(
                    "intra_node.link_bytes_per_s_per_direction",
                    "a mesh needs the bandwidth of one GPU-to-GPU link".into(),
                ))
            }
            (IntraNodeKind::Mesh, Some(f)) => {
                positive("intra_node.link_bytes_per_s_per_direction", f)?;
                // One link carries at most what the GPU sends in all, and the GPU sends at most
                // what its links to the other GPUs of the node carry together.
                let total = self.intra_node.bytes_per_s_per_direction.value;
                let peers = self.gpus_per_node.saturating_sub(1) as f64;
                if f.value > total * (1.0 + 1e-9) {
                    return Err(bad(
                        "intra_node.link_bytes_per_s_per_direction.value",
                        format!(
                            "{:e} B/s on one GPU-to-GPU link is more than the GPU's total of \
                             {total:e} B/s (intra_node.bytes_per_s_per_direction)",
                            f.value
                        ),
                    ));
                }
                if peers >= 1.0 && total > f.value * peers * (1.0 + 1e-9) {
                    return Err(bad(
                        "intra_node.bytes_per_s_per_direction.value",
                        format!(
                            "{total:e} B/s is more than the {peers} links to the node's other \
                             GPUs carry together ({peers} × {:e} B/s)",
                            f.value
                        ),
                    ));
                }
            }
            (kind, Some(_)) => {
                return Err(bad(
                    "intra_node.link_bytes_per_s_per_direction",
                    format!(
                        "only a mesh has per-pair links (intra_node.kind is '{}')",
                        kind.id()
                    ),
                ))
            }
            (_, None) => {}
        }
        if let Some(sp) = &self.inter_node.spine {
            if sp.nodes_per_leaf == 0 || sp.nodes_per_leaf > 1 << 20 {
                return Err(bad(
                    "inter_node.spine.nodes_per_leaf",
                    format!(
                        "must be a whole number from 1 to 2^20, got {}",
                        sp.nodes_per_leaf
                    ),
                ));
            }
            let o = sp.oversubscription.value;
            if !(o.is_finite() && (1.0..=1e6).contains(&o)) {
                return Err(bad(
                    "inter_node.spine.oversubscription.value",
                    format!("must be from 1 (non-blocking) to 10^6, got {o}"),
                ));
            }
        }
        // Every collective of a step walks this table.
        if self.collectives.len() > super::limits::MAX_PROFILE_LIST {
            return Err(bad(
                "collectives",
                format!(
                    "{} rules, more than {}",
                    self.collectives.len(),
                    super::limits::MAX_PROFILE_LIST
                ),
            ));
        }
        for (i, r) in self.collectives.iter().enumerate() {
            super::limits::check_text(&r.source, super::limits::MAX_TEXT_CHARS)
                .map_err(|m| bad(&format!("collectives[{i}].source"), m))?;
            if r.algorithm == Algorithm::Tree
                && r.op != super::CollectiveKind::Any
                && !tree_runs(r.op)
            {
                return Err(bad(
                    &format!("collectives[{i}].algorithm"),
                    "a tree runs all-reduce, broadcast and reduce only".into(),
                ));
            }
            if r.algorithm == Algorithm::Nvls {
                return Err(bad(
                    &format!("collectives[{i}].algorithm"),
                    "NVLS is not a rule: a profile has it with collective_library.nvls".into(),
                ));
            }
            if r.max_bytes == Some(0) {
                return Err(bad(
                    &format!("collectives[{i}].max_bytes"),
                    "must be positive (leave it out for any size)".into(),
                ));
            }
        }
        self.validate_library(path)
    }

    /// Checks the collective library's figures: rates in the profile range, latencies from 0 to
    /// the bound, bandwidth fractions in (0, 1], channel counts and the point-to-point chunk
    /// whole numbers within their limits; NVLS only through a switch.
    fn validate_library(&self, path: &Path) -> Result<()> {
        use super::limits::{MAX_PROFILE_LATENCY_S, PROFILE_RATE_RANGE};
        let Some(lib) = &self.collective_library else {
            return Ok(());
        };
        let bad = |field: &str, message: String| Error::InvalidField {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        super::limits::check_name(&lib.name).map_err(|m| bad("collective_library.name", m))?;
        if lib.nvls.is_some() && self.intra_node.kind != IntraNodeKind::Nvswitch {
            return Err(bad(
                "collective_library.nvls",
                format!(
                    "NVLS needs an NVSwitch (intra_node.kind is '{}')",
                    self.intra_node.kind.id()
                ),
            ));
        }
        let (lo, hi) = PROFILE_RATE_RANGE;
        for (field, fig) in lib.figures() {
            let v = fig.value;
            let whole = |lo: f64, hi: f64| {
                (
                    v.is_finite() && v.fract() == 0.0 && (lo..=hi).contains(&v),
                    format!("a whole number from {lo} to {hi}"),
                )
            };
            let (ok, want) = if field.ends_with("p2p_channels.channels")
                || field.ends_with("p2p_channels.channels_per_peer")
            {
                whole(1.0, super::limits::MAX_P2P_CHANNELS as f64)
            } else if field.ends_with("p2p_channels.chunk_bytes") {
                whole(8.0, super::limits::MAX_P2P_CHUNK_BYTES as f64)
            } else if field.ends_with("_latency_s") || field.ends_with(".latency_s") {
                (
                    v.is_finite() && (0.0..=MAX_PROFILE_LATENCY_S).contains(&v),
                    format!("a latency from 0 to {MAX_PROFILE_LATENCY_S} s"),
                )
            } else if field.ends_with("bandwidth_fraction") {
                (v > 0.0 && v <= 1.0, "a fraction in (0, 1]".to_string())
            } else {
                (
                    v.is_finite() && (lo..=hi).contains(&v),
                    format!("a rate from {lo:e} to {hi:e} per second"),
                )
            };
            if !ok {
                return Err(bad(
                    &format!("{field}.value"),
                    format!("must be {want}, got {v:?}"),
                ));
            }
        }
        Ok(())
    }
}
