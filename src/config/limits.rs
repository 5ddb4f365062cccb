//! The tool's limits: every bound a command enforces on its inputs and on the work they imply,
//! in one table ([`table`]) with the value and the reason, quoted by each command's `--help`
//! ([`help`]) and by the README's "Limits" section (a test checks both against this table).
//!
//! Two kinds of limit live here:
//! - **bounds on numbers** (file sizes, model and profile fields, command-line sizes), chosen so
//!   that every product the memory and time formulas form stays exact in its number type
//!   (`u64` parameter counts, `u128` byte counts, `f64` FLOPs and seconds) and no sum of user
//!   numbers can wrap;
//! - **bounds on work** (task-graph size and memory, sweep points, traces, throttled links),
//!   checked *before* the work starts, from an estimate of what will be built. The memory a
//!   task graph may take is the smaller of [`MAX_GRAPH_BYTES`] and what this process can still
//!   get ([`memory_budget_bytes`]: the address-space limit, `prlimit --as`, and the memory the
//!   system has available), and concurrent simulations (sweep and plan run several at once)
//!   share that budget through [`reserve_memory`], so they run one after the other rather
//!   than together when each is large.
//!
//! Depends only on `error`.

use std::sync::{Condvar, Mutex, OnceLock};

use crate::error::{Error, Result};

/// Largest input file read (model, hardware profile, measurement file, kernel list): the
/// largest bundled file is a few KB and a full GPU measurement grid well under 1 MB.
pub const MAX_INPUT_FILE_BYTES: u64 = 8 << 20;
/// Longest model or profile name, in characters (names appear in tables, file names and plot
/// titles).
pub const MAX_NAME_CHARS: usize = 256;
/// Longest free-text field (`source`, `description`), in characters.
pub const MAX_TEXT_CHARS: usize = 4096;

/// Most Transformer layers of a model (the largest published models have about 100–200).
pub const MAX_LAYERS: u64 = 1 << 20;
/// Largest hidden size h.
pub const MAX_HIDDEN: u64 = 1 << 24;
/// Most attention heads.
pub const MAX_HEADS: u64 = 1 << 16;
/// Largest MLP width f.
pub const MAX_FFN_HIDDEN: u64 = 1 << 26;
/// Largest vocabulary.
pub const MAX_VOCAB: u64 = 1 << 32;
/// Most parameters of a model (1,000 times the largest model of Korthikanti et al.): keeps the
/// parameter count, and 18 bytes per parameter, exact in 64 bits.
pub const MAX_PARAMS: u64 = 1 << 50;

/// Most GPUs in one node of a hardware profile.
pub const MAX_GPUS_PER_NODE: u64 = 1 << 10;
/// Most nodes (profile field and `--nodes`).
pub const MAX_NODES: u64 = 1 << 20;
/// Most NICs per node.
pub const MAX_NICS_PER_NODE: u64 = 1 << 10;
/// Most GPUs in all (nodes × GPUs per node, p × dp): the simulator's device tables.
pub const MAX_GPUS: u64 = 1 << 20;
/// Largest byte count in a profile (`gpu.memory_bytes`, `reserved.*_bytes`): 1 EiB.
pub const MAX_PROFILE_BYTES: f64 = 1_152_921_504_606_846_976.0; // 2^60
/// Slowest and fastest rates a profile may give (FLOP/s or bytes/s): from a 1990s CPU to a
/// thousand times today's GPUs. Outside them a time is not a time (10^-300 FLOP/s made every
/// kernel last longer than the universe).
pub const PROFILE_RATE_RANGE: (f64, f64) = (1e6, 1e18);
/// Largest latency in a profile, in seconds.
pub const MAX_PROFILE_LATENCY_S: f64 = 1.0;
/// Bound (exclusive) on the kernel model's times (s) and byte counts (`kernels.*`): a day, so
/// that no kernel can take an impossible time.
pub const MAX_KERNEL_FIGURE: f64 = 86_400.0;

/// Most entries of a list in a profile (collective rules, attention tiles per pass): every
/// priced kernel or collective walks them.
pub const MAX_PROFILE_LIST: usize = 256;
/// Most point-to-point channels a profile's collective library may give a GPU (and a peer):
/// NCCL has 64; a send's channel count is doubled up to it.
pub const MAX_P2P_CHANNELS: u64 = 1 << 10;
/// Largest point-to-point chunk a profile may give (NCCL's default on NVLink is 512 KiB).
pub const MAX_P2P_CHUNK_BYTES: u64 = 1 << 30;

/// Longest sequence.
pub const MAX_SEQ: u64 = 1 << 40;
/// Largest micro-batch.
pub const MAX_MICRO_BATCH: u64 = 1 << 20;
/// Most tokens in one micro-batch (s × b): keeps s²·b·heads·layers inside 128 bits.
pub const MAX_TOKENS_PER_MICRO_BATCH: u64 = 1 << 40;
/// Most micro-batches per step (gradient accumulation; `--global-batch` / (dp × b)).
pub const MAX_MICRO_BATCHES: u64 = 1 << 16;
/// Most tokens per step over all replicas (exact as a float).
pub const MAX_TOKENS_PER_STEP: u64 = 1 << 53;
/// Most sequence lengths one `--seq` spec expands to (counted before expanding).
pub const MAX_SEQ_LENGTHS: u64 = 1_000_000;
/// Most points one sweep evaluates (models × profiles × methods × degrees × lengths).
pub const MAX_SWEEP_POINTS: u64 = 100_000;

/// Most local lengths one `overlap` study simulates (each a one-layer METP step with every
/// device traced): the default study has 8.
pub const MAX_OVERLAP_LENGTHS: u64 = 64;

/// Most plot files one sweep writes (models × profiles × (degrees × cp × pp × 4 charts + the
/// longest sequences per cp × pp) × formats): each PNG takes tens of milliseconds to draw.
pub const MAX_SWEEP_PLOTS: u64 = 2048;
/// Most profiles one `validate --hw` checks the claims on (each runs the C3 and C4 studies).
pub const MAX_VALIDATE_PROFILES: usize = 32;

/// Most shards a sweep or plan is split into (`--shard K/N`): each shard is one scheduler task.
pub const MAX_SHARDS: u64 = 10_000;
/// Largest shard file `merge` reads: a shard of the largest sweep (100,000 points at ~1 KB of
/// JSON each) is under 128 MiB.
pub const MAX_SHARD_FILE_BYTES: u64 = 256 << 20;
/// Most bytes of shard files one `merge` reads in all (sizes checked before any is read): the
/// parts of the largest sweep, with the study repeated in each part, are well under it, and a
/// merge holds one part's text at a time.
pub const MAX_MERGE_BYTES: u64 = 1 << 30;

/// The most GPUs a plan enumerates over: candidates are priced in closed form and the few
/// simulated are reduced to one device per distinct program, so a plan's cost grows with the
/// axes' divisors, not with N (4,096 GPUs in seconds, README "Performance"); beyond 16,384 the
/// candidates that fold nothing (meshes, spines) would simulate too many devices.
pub const MAX_PLAN_GPUS: u64 = 16384;
/// The largest global batch of a plan, in sequences (the closed-form model walks every
/// micro-batch).
pub const MAX_GLOBAL_BATCH: u64 = 1 << 16;

/// Most tasks in one simulated task graph (about a minute of simulation on the 2-core
/// development machine, ~300 bytes each).
pub const MAX_GRAPH_TASKS: u64 = 1 << 24;
/// Most memory one simulation may take (further limited by what the process can get,
/// [`memory_budget_bytes`]).
pub const MAX_GRAPH_BYTES: u64 = 4 << 30;
/// Longest simulated step, in picoseconds: the simulator's clock is a 64-bit picosecond count
/// (2^64 ps ≈ 213 days); a step longer than a quarter of that (≈ 53 days) is refused rather
/// than saturated.
pub const MAX_SIM_PS: u64 = 1 << 62;
/// Spans above which `--trace` and `--timeline` record only device 0 (a representative
/// device: the methods are symmetric) unless `--trace-all-devices` is given.
pub const TRACE_ALL_DEVICES_MAX_SPANS: u64 = 1 << 20;

/// Most measurement sessions a measurement file's GEMMs may come from (`session` below this):
/// the fit searches one clock factor per later session.
pub const MAX_MEASUREMENT_SESSIONS: u32 = 16;
/// Largest GEMM dimension (m, n, k) and attention token count of a measured or listed kernel
/// (`calibrate --fit`, `kernels`, `gpu-check`): 16M, above any layer's tokens or width.
pub const MAX_KERNEL_DIM: u64 = 1 << 24;
/// Most independent products (batched GEMM) or sequences (attention) in one measured call.
pub const MAX_KERNEL_BATCH: u64 = 1 << 20;
/// Largest head dimension of a measured attention call (fused kernels stop at 256).
pub const MAX_KERNEL_HEAD_DIM: u64 = 1 << 12;
/// Most bytes one measured kernel's operands, or one copy, message or collective, may hold:
/// 1 TiB, above any device's memory.
pub const MAX_KERNEL_BYTES: f64 = 1_099_511_627_776.0; // 2^40
/// Shortest and longest measured time, in seconds: one tick of a 1 GHz clock (no kernel or
/// message is shorter), and a day ([`MAX_KERNEL_FIGURE`]).
pub const MEASURED_TIME_RANGE_S: (f64, f64) = (1e-9, MAX_KERNEL_FIGURE);
/// How far above the profile's peak FLOP/s a measured GEMM or attention call may run (boost
/// clocks above the datasheet's): the published and measured files reach 0.87 of it.
pub const MEASURED_PEAK_MARGIN: f64 = 0.10;
/// How many times the profile's HBM rate a measured copy or element-wise pass may move (a
/// buffer that stays in L2 runs at L2 bandwidth, 2–3× HBM's): the measured files reach 1.0×.
pub const MEASURED_BANDWIDTH_FACTOR: f64 = 4.0;
/// Slowest over fastest time of one shape measured more than once (sessions at other clocks
/// included): the measured files reach 1.2.
pub const MAX_REPEAT_SPREAD: f64 = 4.0;

/// Work of one parameter search of `calibrate --fit`, in samples × full fits of a kernel kind
/// (a fit is up to 2 × 200 Levenberg–Marquardt steps; a file of several GEMM sessions refits
/// for every trial of every session's clock): a larger kind is searched on an even share of
/// its samples — every session's, across the sizes — and its errors are reported over all of
/// them. About 6 s per kind on a 2-core machine (0.3 ms per sample and fit), up to about 50 s
/// for a file of 16 GEMM sessions (one GEMM each at least); files under the bound — every
/// measured and published one — fit on every sample.
pub const MAX_FIT_SEARCH_WORK: usize = 20_000;

/// Most floating-point operations of the f64 reference a unit run (`run`, `calibrate`'s
/// units) is checked against, on the host: minutes on one core (its products run at the f64
/// GEMM rate, its s × s loops slower). Its memory is bounded by what the process may take
/// ([`host_memory_budget_bytes`]).
pub const MAX_UNIT_REFERENCE_FLOPS: f64 = 4e12;

/// Most virtual devices of `run` (`--p`) and `calibrate` (`--devices`): threads on the CPU.
pub const MAX_VIRTUAL_DEVICES: u64 = 256;
/// Most timed runs of `run` and `calibrate` (`--runs`).
pub const MAX_RUNS: u64 = 1000;
/// Slowest CPU link throttle (`--link-bandwidth`, bytes/s) and longest latency
/// (`--link-latency`, s).
pub const LINK_THROTTLE: (f64, f64) = (1e3, 1.0);
/// Longest a command may spend on throttled CPU links, from its first throttled message: a
/// command whose messages would take longer stops at the first message past it, with the
/// figures.
pub const MAX_THROTTLE_WAIT_S: f64 = 120.0;

/// Run files in one `validate --runs` folder.
pub const MAX_RUN_FILES: usize = 1000;
/// Values one unstated knob of a run file may try.
pub const MAX_TRIED_VALUES: usize = 16;
/// Configurations one run file may make (the product of its knobs' tried values), each priced
/// in closed form.
pub const MAX_RUN_CONFIGURATIONS: usize = 512;
/// Most result rows of one nccl-tests log (a sweep from 8 B to 16 GiB by doubling has 32).
pub const MAX_NCCL_LOG_ROWS: usize = 4096;
/// Largest buffer of an nccl-tests row or of `collectives --sizes`, in bytes (16 TiB: a
/// thousand times the largest sweep published).
pub const MAX_NCCL_SIZE_BYTES: u64 = 1 << 44;
/// Most sizes one `collectives --sizes` spec expands to.
pub const MAX_COLLECTIVE_SIZES: usize = 256;
/// Most ranks of one `collectives` table: a ring's step is priced transfer by transfer.
pub const MAX_COLLECTIVE_RANKS: u64 = 1 << 16;
/// Most ranks of a `collectives` table whose operation may run as an exchange between every
/// pair of ranks (all-to-all, or a profile with a direct rule across nodes): n² transfers.
pub const MAX_COLLECTIVE_PAIR_RANKS: u64 = 1 << 9;
/// Most nccl-tests logs one `calibrate --fit-links` takes.
pub const MAX_FIT_LINK_LOGS: usize = 64;

/// One limit: what is bounded, the bound, why, and the commands it applies to.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// What is bounded.
    pub what: &'static str,
    /// The bound, as a user writes it.
    pub value: String,
    /// Why.
    pub why: &'static str,
    /// Commands it applies to (`*`: every command that reads models or profiles).
    pub commands: &'static [&'static str],
}

const WORKLOAD: &[&str] = &[
    "memory", "maxseq", "simulate", "sweep", "overlap", "plan", "validate",
];
const SIMULATING: &[&str] = &["simulate", "sweep", "overlap", "plan", "validate"];

fn pow2(n: u64) -> String {
    format!("2^{}", n.trailing_zeros())
}

/// Every limit, in the order the README lists them.
pub fn table() -> Vec<Limit> {
    let mib = MAX_INPUT_FILE_BYTES >> 20;
    vec![
        Limit {
            what: "input file size",
            value: format!("{mib} MiB"),
            why: "model, profile, measurement and kernel files are KBs; a larger one (or /dev/zero) is refused before it is read",
            commands: &["*"],
        },
        Limit {
            what: "model and profile names",
            value: format!("{MAX_NAME_CHARS} characters, no control characters"),
            why: "names go into tables, file names and SVG text (XML cannot hold a NUL)",
            commands: &["*"],
        },
        Limit {
            what: "model layers / hidden / heads / MLP width / vocabulary",
            value: format!(
                "{} / {} / {} / {} / {}",
                pow2(MAX_LAYERS),
                pow2(MAX_HIDDEN),
                pow2(MAX_HEADS),
                pow2(MAX_FFN_HIDDEN),
                pow2(MAX_VOCAB)
            ),
            why: "with the sequence bounds below, every byte count stays exact in 128 bits",
            commands: &["*"],
        },
        Limit {
            what: "model parameters",
            value: pow2(MAX_PARAMS),
            why: "1,000 × the largest published model; parameter bytes stay exact in 64 bits",
            commands: &["*"],
        },
        Limit {
            what: "GPUs per node / NICs per node / nodes (profile and --nodes) / GPUs in all",
            value: format!(
                "{} / {} / {} / {}",
                MAX_GPUS_PER_NODE, MAX_NICS_PER_NODE, pow2(MAX_NODES), pow2(MAX_GPUS)
            ),
            why: "the simulator keeps a table entry per GPU and NIC; products are checked, never wrapped",
            commands: &["*"],
        },
        Limit {
            what: "profile byte fields (memory, reserved)",
            value: "2^60 bytes, whole".into(),
            why: "their sum (the reserved bytes) cannot wrap",
            commands: &["*"],
        },
        Limit {
            what: "profile lists (collective rules, attention tiles per pass)",
            value: MAX_PROFILE_LIST.to_string(),
            why: "every collective and every attention call of a step walks them",
            commands: &["*"],
        },
        Limit {
            what: "profile point-to-point channels (per GPU, per peer) / chunk",
            value: format!(
                "{MAX_P2P_CHANNELS}, whole / {}, whole bytes from 8",
                pow2(MAX_P2P_CHUNK_BYTES)
            ),
            why: "a send's channels double until its parts fit: bounded loops, no zero-sized part",
            commands: &["*"],
        },
        Limit {
            what: "profile rates (FLOP/s, bytes/s) and latencies",
            value: format!(
                "{:e} to {:e} per second; latencies ≤ {} s",
                PROFILE_RATE_RANGE.0, PROFILE_RATE_RANGE.1, MAX_PROFILE_LATENCY_S
            ),
            why: "outside them a kernel or message time is not a time and MFU is meaningless",
            commands: &["*"],
        },
        Limit {
            what: "sequence length / micro-batch / tokens per micro-batch (s × b)",
            value: format!(
                "{} / {} / {}",
                pow2(MAX_SEQ),
                pow2(MAX_MICRO_BATCH),
                pow2(MAX_TOKENS_PER_MICRO_BATCH)
            ),
            why: "keeps s²·b·heads·layers (unfused attention scores) exact in 128 bits",
            commands: WORKLOAD,
        },
        Limit {
            what: "micro-batches per step (--global-batch / (dp × b)) / tokens per step",
            value: format!("{} / {}", pow2(MAX_MICRO_BATCHES), pow2(MAX_TOKENS_PER_STEP)),
            why: "tokens per step stay exact as a float",
            commands: &["simulate", "plan"],
        },
        Limit {
            what: "lengths in one --seq spec / points in one sweep",
            value: format!("{MAX_SEQ_LENGTHS} / {MAX_SWEEP_POINTS}"),
            why: "counted before anything is expanded or evaluated",
            commands: &["sweep", "maxseq"],
        },
        Limit {
            what: "sweep: plot files / validate: profiles (--hw)",
            value: format!("{MAX_SWEEP_PLOTS} / {MAX_VALIDATE_PROFILES}"),
            why: "counted from the flags before anything is loaded or evaluated: plots take tens of milliseconds each, every profile the claims' studies",
            commands: &["sweep", "validate"],
        },
        Limit {
            what: "overlap: local lengths (--local-seq)",
            value: MAX_OVERLAP_LENGTHS.to_string(),
            why: "each is a simulated, fully traced METP layer; counted before anything runs",
            commands: &["overlap"],
        },
        Limit {
            what: "shards (--shard K/N) / shard file size / shard files of one merge",
            value: format!(
                "N ≤ {MAX_SHARDS} / {} MiB / {} GiB in all",
                MAX_SHARD_FILE_BYTES >> 20,
                MAX_MERGE_BYTES >> 30
            ),
            why: "one scheduler task per shard; a shard of the largest sweep is well under the file bound; merge checks every size before it reads a file",
            commands: &["sweep", "plan", "merge"],
        },
        Limit {
            what: "plan: GPUs (--gpus) / global batch (--global-batch)",
            value: format!("{MAX_PLAN_GPUS} / {}", pow2(MAX_GLOBAL_BATCH)),
            why: "candidates grow with the divisors of N and the batch; the few simulated run one device per distinct program",
            commands: &["plan"],
        },
        Limit {
            what: "simulated task graph",
            value: format!(
                "{} tasks and {} GiB (less if the machine or `prlimit --as` has less)",
                pow2(MAX_GRAPH_TASKS),
                MAX_GRAPH_BYTES >> 30
            ),
            why: "estimated from the step plan before the graph is built (about a minute and 300 bytes per task on a 2-core machine); concurrent simulations share the memory",
            commands: SIMULATING,
        },
        Limit {
            what: "simulated step time",
            value: "2^62 ps (about 53 days)".into(),
            why: "the simulator's clock counts picoseconds in 64 bits; a longer step is refused, never saturated",
            commands: SIMULATING,
        },
        Limit {
            what: "trace and timeline spans over all devices",
            value: format!("{} (then device 0 only, unless --trace-all-devices)", pow2(TRACE_ALL_DEVICES_MAX_SPANS)),
            why: "a trace of every device of a large run is hundreds of MB; the methods are symmetric, so one device shows the step",
            commands: &["simulate"],
        },
        Limit {
            what: "virtual devices (run --p, calibrate --devices) / timed runs (--runs)",
            value: format!("{MAX_VIRTUAL_DEVICES} / 1 to {MAX_RUNS}"),
            why: "one thread per virtual device; runs are checks, not benchmarks",
            commands: &["run", "calibrate"],
        },
        Limit {
            what: "measurement sessions in one measurement file (GEMM `session`)",
            value: MAX_MEASUREMENT_SESSIONS.to_string(),
            why: "the fit searches one clock factor per session after the first",
            commands: &["calibrate", "kernels", "gpu-check"],
        },
        Limit {
            what: "measured kernels: GEMM m, n, k and attention tokens / batch / head dim / operand, copy and message bytes",
            value: format!(
                "{} / {} / {} / {}",
                pow2(MAX_KERNEL_DIM),
                pow2(MAX_KERNEL_BATCH),
                pow2(MAX_KERNEL_HEAD_DIM),
                "2^40"
            ),
            why: "above any real call; K/V heads must divide the query heads, a message joins two different devices, a collective 2 to 2^20 ranks",
            commands: &["calibrate", "kernels", "gpu-check"],
        },
        Limit {
            what: "measured times / rates against the profile / one shape timed twice",
            value: format!(
                "{:e} s to {} s / at most {}× the peak FLOP/s, {}× the HBM rate / slowest ≤ {}× fastest",
                MEASURED_TIME_RANGE_S.0,
                MEASURED_TIME_RANGE_S.1,
                1.0 + MEASURED_PEAK_MARGIN,
                MEASURED_BANDWIDTH_FACTOR,
                MAX_REPEAT_SPREAD
            ),
            why: "no kernel is shorter than a clock tick or faster than its GPU; the published and measured files reach 0.87× the peak, 1.0× the HBM rate and a spread of 1.2",
            commands: &["calibrate", "kernels", "gpu-check"],
        },
        Limit {
            what: "calibrate --fit: samples × full fits of one parameter search",
            value: MAX_FIT_SEARCH_WORK.to_string(),
            why: "a larger kind (or messages) is searched on an even share of its samples, every session's, across the sizes, and its errors reported over all; 90,000 attention calls fit in seconds",
            commands: &["calibrate"],
        },
        Limit {
            what: "unit runs: the f64 reference's operations / its memory and the runtime's on the host",
            value: format!(
                "{:e} / half the memory available (and half of what `prlimit --as` leaves)",
                MAX_UNIT_REFERENCE_FLOPS
            ),
            why: "every unit is checked against an unsharded f64 reference on the CPU, whose attention holds s × s matrices: estimated from the shape before anything runs",
            commands: &["run", "calibrate"],
        },
        Limit {
            what: "run files (validate --runs) / values tried per unstated knob / configurations per run",
            value: format!("{MAX_RUN_FILES} / {MAX_TRIED_VALUES} / {MAX_RUN_CONFIGURATIONS}"),
            why: "every configuration a run tries is priced in closed form (milliseconds to a second each), its own simulated once",
            commands: &["validate"],
        },
        Limit {
            what: "nccl-tests log (collectives --compare, calibrate --fit-links)",
            value: format!(
                "{} MiB, {MAX_NCCL_LOG_ROWS} rows, one table; {MAX_FIT_LINK_LOGS} logs per fit",
                MAX_INPUT_FILE_BYTES >> 20
            ),
            why: "a published sweep is a few KB and a few dozen rows; a second table or a size twice is refused (one test's output per file)",
            commands: &["collectives", "calibrate"],
        },
        Limit {
            what: "collective ranks (collectives --nodes × --gpus)",
            value: format!(
                "{MAX_COLLECTIVE_RANKS}; {MAX_COLLECTIVE_PAIR_RANKS} for all-to-all and direct rules across nodes"
            ),
            why: "each step is priced transfer by transfer: n transfers for a ring, n² for an exchange between every pair",
            commands: &["collectives"],
        },
        Limit {
            what: "collective sizes (collectives --sizes, log rows)",
            value: format!(
                "1 B to {}, at most {MAX_COLLECTIVE_SIZES} sizes",
                pow2(MAX_NCCL_SIZE_BYTES)
            ),
            why: "a thousand times the largest published sweep (16 GiB); every byte count stays exact in 64 bits",
            commands: &["collectives", "calibrate"],
        },
        Limit {
            what: "CPU link throttle",
            value: format!(
                "--link-bandwidth ≥ {:e} bytes/s, --link-latency ≤ {} s, throttled links ≤ {} s per command",
                LINK_THROTTLE.0, LINK_THROTTLE.1, MAX_THROTTLE_WAIT_S
            ),
            why: "a slower link never ends; the run stops at the first message past the wait limit, with the figures",
            commands: &["run", "calibrate"],
        },
    ]
}

/// The limits that apply to `command`, as the `--help` text's closing paragraph.
pub fn help(command: &str) -> String {
    let mut s = String::from("Limits (README \"Limits\"):\n");
    for l in table() {
        if l.commands.contains(&"*") || l.commands.contains(&command) {
            s.push_str(&format!("  {}: {}\n", l.what, l.value));
        }
    }
    s
}

/// The README's "Limits" table (Markdown), one row per limit.
pub fn markdown() -> String {
    let mut s = String::from("| limit | bound | why | commands |\n|---|---|---|---|\n");
    for l in table() {
        let commands = if l.commands.contains(&"*") {
            "all that read models or profiles".to_string()
        } else {
            l.commands.join(", ")
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            l.what, l.value, l.why, commands
        ));
    }
    s
}

/// Checks a name (model, profile, GPU): not empty, at most [`MAX_NAME_CHARS`] characters, no
/// control characters. Returns what is wrong.
pub fn check_name(name: &str) -> std::result::Result<(), String> {
    check_text(name, MAX_NAME_CHARS)?;
    if name.trim().is_empty() {
        return Err("must not be empty".into());
    }
    Ok(())
}

/// Checks a free-text field: at most `max` characters, no control characters but tabs and
/// newlines in longer texts.
pub fn check_text(text: &str, max: usize) -> std::result::Result<(), String> {
    let n = text.chars().count();
    if n > max {
        return Err(format!("{n} characters, more than {max}"));
    }
    if let Some(c) = text
        .chars()
        .find(|&c| c.is_control() && !(max > MAX_NAME_CHARS && (c == '\n' || c == '\t')))
    {
        return Err(format!(
            "contains the control character U+{:04X} (names and texts go into tables, files and SVG)",
            c as u32
        ));
    }
    Ok(())
}

/// Memory this process may still use for one simulation: the smaller of [`MAX_GRAPH_BYTES`],
/// half the memory the system has available, and half of what is left under the
/// address-space limit (`ulimit -v`, `prlimit --as`) — half, because a limit on address space
/// counts reserved but untouched memory (thread stacks, allocator arenas) and growth of
/// vectors. Read once (Linux `/proc`; elsewhere only [`MAX_GRAPH_BYTES`]).
pub fn memory_budget_bytes() -> u64 {
    MAX_GRAPH_BYTES.min(host_memory_budget_bytes())
}

/// What this process may still take for one piece of work on the host, with no bound of the
/// tool's own: half the memory the system has available and half of what the address-space
/// limit leaves (see [`memory_budget_bytes`]); `u64::MAX` where neither is known. Read once.
pub fn host_memory_budget_bytes() -> u64 {
    static BUDGET: OnceLock<u64> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        let mut budget = u64::MAX;
        if let Some(avail) = proc_field("/proc/meminfo", "MemAvailable:") {
            budget = budget.min(avail / 2);
        }
        if let Some(limit) = address_space_limit() {
            let used = proc_field("/proc/self/status", "VmSize:").unwrap_or(0);
            budget = budget.min(limit.saturating_sub(used) / 2);
        }
        budget
    })
}

/// A `kB` figure of a `/proc` file, in bytes.
fn proc_field(file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kb.saturating_mul(1024))
}

/// The soft address-space limit of this process, if any.
fn address_space_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max address space"))?;
    let soft = line["Max address space".len()..]
        .split_whitespace()
        .next()?;
    soft.parse().ok()
}

/// Memory set aside for a simulation until dropped ([`reserve_memory`]).
#[derive(Debug)]
pub struct Reservation {
    bytes: u64,
}

fn reserved() -> &'static (Mutex<u64>, Condvar) {
    static RESERVED: (Mutex<u64>, Condvar) = (Mutex::new(0), Condvar::new());
    &RESERVED
}

/// Sets `bytes` aside from the process's simulation budget ([`memory_budget_bytes`]) for as
/// long as the returned [`Reservation`] lives: waits while other threads hold enough of it that
/// both would not fit, and fails at once — with `what` and `advice` in the message — when
/// `bytes` alone exceeds the budget.
pub fn reserve_memory(bytes: u64, what: &str, advice: &str) -> Result<Reservation> {
    let budget = memory_budget_bytes();
    if bytes > budget {
        return Err(Error::TooLarge {
            message: format!(
                "{what} would need about {} of memory, more than the {} this process may use \
                 for one simulation (the smaller of {} GiB, half the memory available and half \
                 of what the address-space limit leaves); {advice}",
                gib(bytes),
                gib(budget),
                MAX_GRAPH_BYTES >> 30
            ),
        });
    }
    let (lock, freed) = reserved();
    let mut held = lock.lock().unwrap_or_else(|e| e.into_inner());
    while *held > 0 && *held + bytes > budget {
        held = freed.wait(held).unwrap_or_else(|e| e.into_inner());
    }
    *held += bytes;
    Ok(Reservation { bytes })
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let (lock, freed) = reserved();
        let mut held = lock.lock().unwrap_or_else(|e| e.into_inner());
        *held = held.saturating_sub(self.bytes);
        freed.notify_all();
    }
}

/// Bytes as GiB (or MiB below one GiB), for messages.
pub fn gib(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every limit that bounds a product keeps it exact: the largest unfused score bytes of one
    /// model (5·a·s²·b per layer, times the layers) fit in 128 bits, and the largest parameter
    /// bytes (18 per parameter) in 64.
    #[test]
    fn bounds_keep_products_exact() {
        // s²·b ≤ (s·b)·s ≤ 2^40 · 2^40; × a (2^16) × 5 (< 2^3) × layers (2^20) = 2^119.
        let s2b = (MAX_TOKENS_PER_MICRO_BATCH as u128) * (MAX_SEQ as u128);
        let v = s2b
            .checked_mul(MAX_HEADS as u128)
            .and_then(|x| x.checked_mul(5))
            .and_then(|x| x.checked_mul(MAX_LAYERS as u128));
        assert!(v.is_some());
        assert!(MAX_PARAMS.checked_mul(18).is_some());
        assert_eq!(MAX_GPUS_PER_NODE * MAX_NODES, MAX_GPUS * 1024);
    }

    /// Names refuse control characters and overlong text; free text may hold newlines.
    #[test]
    fn names_and_texts() {
        assert!(check_name("LLaMA-2 7B").is_ok());
        assert!(check_name("bad\0name").unwrap_err().contains("U+0000"));
        assert!(check_name(&"x".repeat(MAX_NAME_CHARS + 1)).is_err());
        assert!(check_name(" ").is_err());
        assert!(check_text("a\nb", MAX_TEXT_CHARS).is_ok());
        assert!(check_text("a\u{7}b", MAX_TEXT_CHARS).is_err());
    }

    /// `--help` quotes the limits of its command and no other's.
    #[test]
    fn help_lists_the_commands_limits() {
        let h = help("run");
        assert!(h.contains("virtual devices") && h.contains("input file size"));
        assert!(!h.contains("simulated task graph"));
        assert!(help("simulate").contains("simulated task graph"));
    }

    /// A reservation larger than the budget fails with the figures; smaller ones come and go.
    #[test]
    fn reservations_respect_the_budget() {
        let budget = memory_budget_bytes();
        let e = reserve_memory(budget + 1, "a test graph", "make it smaller").unwrap_err();
        assert!(e.to_string().contains("a test graph would need"), "{e}");
        let r = reserve_memory(budget / 4, "a", "").unwrap();
        drop(r);
        let _r = reserve_memory(budget / 4, "b", "").unwrap();
    }
}
