//! `memory` and `maxseq` outputs.

use serde::Serialize;

use super::columns::{self, Cell, Column, JsonRow};
use super::table::{fmt_bytes, Table};
use super::to_json;
use crate::config::Workload;
use crate::memory::{Block, Inventory, Kind, Phase, Tensor};
use crate::search::MaxSeq;

/// The columns of one tensor of an inventory (`memory --format csv`, and `tensors` in JSON).
pub fn tensor_columns() -> Vec<Column<Tensor>> {
    type C = Column<Tensor>;
    vec![
        C::data("name", |t| t.name.into()),
        C::data("block", |t| block_name(t.block).into()),
        C::data("kind", |t| kind_name(t.kind).into()),
        C::data("bytes", |t| t.bytes().into()),
        C::data("bytes_each", |t| t.bytes_each.into()),
        C::data("count", |t| t.count.into()),
        C::data("replicated", |t| t.replicated.into()),
        C::data("phases", |t| {
            Cell::List(t.phases.iter().map(|p| p.name().to_string()).collect())
        }),
    ]
}

#[derive(Serialize)]
struct MemoryJson<'a> {
    model: &'a str,
    hardware: &'a str,
    attention_kernel: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_placeholder: Option<String>,
    method: &'a str,
    p: u64,
    dp: u64,
    seq: u64,
    micro_batch: u64,
    #[serde(flatten)]
    state: TrainingState,
    peak_bytes: u128,
    static_bytes: u128,
    activation_bytes_per_layer: u128,
    stored_bytes: u128,
    transient_peak_bytes: u128,
    transient_peak_phase: Phase,
    reserved_bytes: u128,
    capacity_bytes: u128,
    fits: bool,
    notes: &'a [String],
    tensors: Vec<JsonRow<'a, Tensor>>,
}

/// The training state's settings in JSON (`config::precision`): `grad_dtype` (`fp32`|`bf16`),
/// `optimizer_state` (`replicated`|`sharded`, resolved), `optimizer_dtype`
/// (`fp32`|`fp32-remainders`|`bf16`), `grad_accumulation` (`fused`|`separate`) and `zero` (the
/// stage in force, 0–3);
/// with the software's schedule options (`config::runtime`): `grad_sync`, `pp_p2p`, `pp_round`, `cp_comm`,
/// and `layer_ops`, `zero3_gather` and `param_gather` where not the defaults; `linear_dtype`
/// (`fp8`) where the layers' linear GEMMs are not bf16.
#[derive(Serialize)]
pub struct TrainingState {
    grad_dtype: &'static str,
    optimizer_state: &'static str,
    optimizer_dtype: &'static str,
    grad_accumulation: &'static str,
    /// TP + SP collectives overlapped with the GEMMs (`--tp-comm-overlap`).
    tp_comm_overlap: bool,
    zero: u8,
    /// When gradients are synchronised (`overlapped`|`after-backward`, `config::runtime`).
    grad_sync: &'static str,
    /// Pipeline exchanges (`async`|`blocking`).
    pp_p2p: &'static str,
    /// Micro-batches per round of the interleaved schedule; null: pp (Megatron's).
    pp_round: Option<u64>,
    /// How context parallelism exchanges K/V (`ring`|`all-gather`).
    cp_comm: &'static str,
    /// `layer_ops`, `zero3_gather`, `param_gather`, `linear_dtype` where not the defaults.
    #[serde(flatten)]
    shown: crate::config::Shown,
}

impl TrainingState {
    /// The settings of `w`.
    pub fn of(w: &Workload) -> TrainingState {
        TrainingState {
            grad_dtype: w.options.grad_dtype.id(),
            optimizer_state: w.optimizer_state().id(),
            optimizer_dtype: w.options.optimizer_dtype.id(),
            grad_accumulation: w.options.grad_accumulation.id(),
            tp_comm_overlap: w.options.tp_comm_overlap,
            zero: w.zero_stage() as u8,
            grad_sync: w.options.runtime.grad_sync.id(),
            pp_p2p: w.options.runtime.pp_p2p.id(),
            pp_round: w.options.runtime.pp_round,
            cp_comm: w.options.runtime.cp_comm.id(),
            shown: w.options.shown(),
        }
    }
}

/// JSON for `metp-sim memory`.
pub fn memory_json(w: &Workload, inv: &Inventory) -> String {
    let tensors = tensor_columns();
    to_json(&MemoryJson {
        model: &w.model.name,
        hardware: &w.hardware.name,
        attention_kernel: super::attention_kernel(w),
        kernel_placeholder: super::placeholder(w),
        method: w.method.id(),
        p: w.p,
        dp: w.dp,
        seq: w.seq,
        micro_batch: w.micro_batch,
        state: TrainingState::of(w),
        peak_bytes: inv.peak_bytes,
        static_bytes: inv.static_bytes,
        activation_bytes_per_layer: inv.activation_bytes_per_layer,
        stored_bytes: inv.stored_bytes,
        transient_peak_bytes: inv.transient_peak_bytes,
        transient_peak_phase: inv.transient_peak_phase,
        reserved_bytes: inv.reserved_bytes,
        capacity_bytes: inv.capacity_bytes,
        fits: inv.fits,
        notes: &inv.notes,
        tensors: columns::json_rows(&tensors, &inv.tensors),
    })
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Static => "static",
        Kind::Stored => "stored",
        Kind::Transient => "transient",
    }
}

fn block_name(b: Block) -> &'static str {
    match b {
        Block::Attention => "attention",
        Block::Mlp => "mlp",
        Block::Norm => "norm",
        Block::Embedding => "embedding",
        Block::Head => "head",
        Block::Optimizer => "optimizer",
    }
}

/// Human table for `metp-sim memory`: tensors grouped by block and kind, replicated ones marked.
pub fn memory_table(w: &Workload, inv: &Inventory) -> String {
    let mut out = format!(
        "{} on {} — {}, p = {}, dp = {}, s = {}, b = {}{}{}{}\n{}\n",
        w.method.id(),
        w.hardware.name,
        w.model.name,
        w.p,
        w.dp,
        w.seq,
        w.micro_batch,
        micro_batches(w),
        // Eager ops keep tensors fused kernels do not (`memory::layer`).
        w.options
            .runtime
            .layer_ops
            .shown()
            .map_or(String::new(), |o| format!(", {o} layer ops")),
        w.options
            .runtime
            .grad_buffer
            .shown()
            .map_or(String::new(), |g| format!(", gradients allocated {g}")),
        super::attention_header(w)
    );
    let mut rows: Vec<_> = inv.tensors.iter().collect();
    rows.sort_by_key(|t| (t.block, t.kind, t.name));
    let mut t = Table::new(
        &[
            "block", "kind", "tensor", "each", "count", "total", "phases",
        ],
        &[false, false, false, true, true, true, false],
    );
    let mut last: Option<(Block, Kind)> = None;
    for r in rows {
        let group = (r.block, r.kind);
        let (b, k) = if last == Some(group) {
            (String::new(), String::new())
        } else {
            (block_name(r.block).into(), kind_name(r.kind).into())
        };
        last = Some(group);
        let name = if r.replicated {
            format!("{} *", r.name)
        } else {
            r.name.to_string()
        };
        t.row(vec![
            b,
            k,
            name,
            fmt_bytes(r.bytes_each),
            r.count.to_string(),
            fmt_bytes(r.bytes()),
            r.phases
                .iter()
                .map(|p| p.name())
                .collect::<Vec<_>>()
                .join(","),
        ]);
    }
    out.push_str(&t.render());
    out.push_str("* replicated: every one of the p devices holds the same copy\n\n");
    let line = |label: &str, v: u128| format!("{label:<34}{:>14}\n", fmt_bytes(v));
    out.push_str(&format!(
        "training state: {} gradients, {} optimizer state {} (ZeRO {}){}\n",
        w.options.grad_dtype.id(),
        w.options.optimizer_dtype.id(),
        w.optimizer_state().id(),
        w.zero_stage() as u8,
        match w.options.runtime.pp_round {
            Some(n) if w.outer.interleave > 1 => format!("; pipeline rounds of {n} micro-batches"),
            _ => String::new(),
        }
    ));
    out.push_str(&line(
        "static (weights, grads, optimizer)",
        inv.static_bytes,
    ));
    out.push_str(&line(
        "stored activations, one layer",
        inv.activation_bytes_per_layer,
    ));
    out.push_str(&line("stored activations, all", inv.stored_bytes));
    out.push_str(&line(
        &format!("largest transient ({})", inv.transient_peak_phase.name()),
        inv.transient_peak_bytes,
    ));
    out.push_str(&line(
        "reserved (context, NCCL, headroom)",
        inv.reserved_bytes,
    ));
    out.push_str(&line("peak per device", inv.peak_bytes));
    out.push_str(&line("device memory", inv.capacity_bytes));
    out.push_str(&format!(
        "{}\n",
        if inv.fits { "fits" } else { "DOES NOT FIT" }
    ));
    for n in &inv.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

/// CSV for `metp-sim memory`: one row per tensor.
pub fn memory_csv(inv: &Inventory) -> String {
    columns::csv(&tensor_columns(), &inv.tensors)
}

/// The columns of a `maxseq` row.
pub fn maxseq_columns() -> Vec<Column<MaxSeq>> {
    type C = Column<MaxSeq>;
    vec![
        C::plain("method", "method", false, |r| r.method.id().into()),
        C::plain("p", "p", true, |r| r.p.into()),
        C::shown(
            "max_seq",
            "max_seq",
            true,
            |r| r.max_seq.into(),
            |r| {
                r.max_seq
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "-".into())
            },
        ),
        C::data("seq_multiple", |r| r.seq_multiple.into()),
        C::shown(
            "peak_bytes",
            "peak",
            true,
            |r| r.peak_bytes.into(),
            |r| r.peak_bytes.map(fmt_bytes).unwrap_or_default(),
        ),
        C::data("capacity_bytes", |r| r.capacity_bytes.into()),
        C::shown(
            "reason",
            "note",
            false,
            |r| r.reason.clone().into(),
            |r| r.reason.clone().unwrap_or_default(),
        ),
    ]
}

/// JSON for `metp-sim maxseq`: `[{method, p, max_seq, …}]`.
pub fn maxseq_json(rows: &[MaxSeq]) -> String {
    to_json(&columns::json_rows(&maxseq_columns(), rows))
}

/// Human table for `metp-sim maxseq`.
pub fn maxseq_table(w: &Workload, rows: &[MaxSeq]) -> String {
    format!(
        "longest sequence per device group — {} on {}, b = {}{}, dp = {}\n{}\n{}",
        w.model.name,
        w.hardware.name,
        w.micro_batch,
        micro_batches(w),
        w.dp,
        super::attention_header(w),
        columns::table(&maxseq_columns(), rows)
    )
}

/// ` × 8 micro-batches` when a step has more than one (`--global-batch`), else nothing.
fn micro_batches(w: &Workload) -> String {
    if w.micro_batches > 1 {
        format!(" × {} micro-batches", w.micro_batches)
    } else {
        String::new()
    }
}

/// CSV for `metp-sim maxseq`.
pub fn maxseq_csv(rows: &[MaxSeq]) -> String {
    columns::csv(&maxseq_columns(), rows)
}
