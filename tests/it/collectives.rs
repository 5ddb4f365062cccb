//! `collectives` and `calibrate --fit-links` on the published nccl-tests / rccl-tests logs of
//! `tests/data/nccl-logs/` (copies of `../shared/nccl-logs/`, their source blocks kept): every
//! log is read with its ranks and hosts; on every healthy log the bundled profile of its
//! hardware predicts the bus bandwidth from 64 MiB up within the figures the README reports
//! (10%; a log that misses is named in [`KNOWN_MISSES`] with its error); the unhealthy log is
//! flagged and no healthy one is; a profile fitted to one log predicts the others of its hardware; a log that does not add
//! up is refused in one line naming the line.

use std::path::{Path, PathBuf};

use metp_sim::config::load_hardware;
use metp_sim::nccl_tests::{self, check, log, Request, Standing, TestOp};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/nccl-logs")
        .join(name)
}

/// A log of `tests/data/nccl-logs/` and what it says.
struct Published {
    file: &'static str,
    /// The bundled profile of its hardware.
    hw: &'static str,
    op: TestOp,
    /// Ranks the log implies (None: it fixes none).
    ranks: Option<u64>,
    /// Hosts it lists (None: it lists none).
    hosts: Option<u64>,
    rows: usize,
    healthy: bool,
}

const fn log_of(
    file: &'static str,
    hw: &'static str,
    op: TestOp,
    ranks: Option<u64>,
    hosts: Option<u64>,
    rows: usize,
    healthy: bool,
) -> Published {
    Published {
        file,
        hw,
        op,
        ranks,
        hosts,
        rows,
        healthy,
    }
}

/// Every log.
const LOGS: &[Published] = &[
    log_of(
        "a100-80gb-1node-8gpu-allreduce-thanos-g8.txt",
        "dgx-a100-80gb",
        TestOp::AllReduce,
        Some(8),
        Some(1),
        30,
        true,
    ),
    log_of(
        "a100-1node-8gpu-sendrecv-liplus-PARTIAL128M.txt",
        "dgx-a100-80gb",
        TestOp::SendRecv,
        None,
        None,
        4,
        true,
    ),
    log_of(
        "h100-aws-p5-1node-8gpu-allreduce-awsbatch.txt",
        "dgx-h100",
        TestOp::AllReduce,
        Some(8),
        None,
        32,
        true,
    ),
    log_of(
        "b200-vultr-1node-8gpu-allreduce.txt",
        "b200-8",
        TestOp::AllReduce,
        Some(8),
        None,
        32,
        true,
    ),
    log_of(
        "b200-vultr-1node-8gpu-allgather.txt",
        "b200-8",
        TestOp::AllGather,
        Some(8),
        None,
        32,
        true,
    ),
    log_of(
        "b200-vultr-1node-8gpu-reducescatter.txt",
        "b200-8",
        TestOp::ReduceScatter,
        Some(8),
        None,
        32,
        true,
    ),
    log_of(
        "b200-vultr-1node-8gpu-alltoall.txt",
        "b200-8",
        TestOp::AllToAll,
        Some(8),
        None,
        32,
        true,
    ),
    log_of(
        "b200-vultr-1node-8gpu-sendrecv.txt",
        "b200-8",
        TestOp::SendRecv,
        None,
        None,
        32,
        true,
    ),
    log_of(
        "mi300x-1node-8gpu-allreduce-amd-rocmblog.txt",
        "mi300x-8",
        TestOp::AllReduce,
        Some(8),
        Some(1),
        32,
        true,
    ),
    log_of(
        "h100-2node-16gpu-allreduce-ndr-xe9680-issue309.txt",
        "dgx-h100",
        TestOp::AllReduce,
        Some(16),
        Some(2),
        32,
        true,
    ),
    log_of(
        "h100-2node-16gpu-allreduce-ndr-issue290-PROBLEM.txt",
        "dgx-h100",
        TestOp::AllReduce,
        Some(16),
        Some(2),
        11,
        false,
    ),
    log_of(
        "synthetic-2node-srun-noroot-error.txt",
        "dgx-h100",
        TestOp::AllReduce,
        Some(16),
        Some(2),
        5,
        true,
    ),
];

/// The healthy logs the bundled profiles miss by more than 10% (median from 64 MiB up), with
/// the error they do show, so that a change either way is seen. None today: the B200 node's
/// ring-class port (683.7 GB/s), point-to-point rate (667.9 GB/s) and per-channel send rate are
/// fitted to its logs (`hardware-profiles/b200-8.json` says so); what that leaves is pinned in
/// [`sendrecv_follows_nccls_point_to_point_channels`].
const KNOWN_MISSES: &[(&str, f64)] = &[];

fn compare(hw: &str, op: TestOp, file: &str) -> nccl_tests::Report {
    nccl_tests::run(&Request {
        hardware: load_hardware(hw).unwrap(),
        op,
        nodes: None,
        gpus: None,
        sizes: None,
        compare: Some(data(file)),
    })
    .unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn every_log_is_read_with_its_ranks_and_hosts() {
    for g in LOGS {
        let file = g.file;
        let l = log::read(&data(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(l.rows.len(), g.rows, "{file}");
        assert_eq!(l.test, Some(g.op), "{file}: the test the log names");
        let run = check::check(&l, g.op, None).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(run.ranks, g.ranks, "{file}");
        assert_eq!(run.nodes, g.hosts, "{file}");
    }
    // The layouts: `-g 8` in one process (one Pid on every Rank line), mpirun's
    // `[1,0]<stdout>:` prefixes, srun's ` 0: `, rccl-tests' Rank lines without `Group`, an
    // `error` column without `root`, only out-of-place columns.
    let thanos = log::read(&data(LOGS[0].file)).unwrap();
    assert_eq!(thanos.ranks.len(), 8);
    assert_eq!(thanos.ranks[7].gpu, "NVIDIA A100-SXM4-80GB");
    let aws = log::read(&data(LOGS[2].file)).unwrap();
    assert_eq!(aws.rows[31].out_of_place.busbw_gb_s, 483.05);
    let mi = log::read(&data(LOGS[8].file)).unwrap();
    assert_eq!(mi.ranks[3].gpu, "AMD Instinct MI300X");
    let syn = log::read(&data(LOGS[11].file)).unwrap();
    assert!(syn
        .rows
        .iter()
        .all(|r| r.in_place.is_none() && r.root.is_none()));
    assert_eq!(syn.rows[0].dtype, "bfloat16");
    assert_eq!(syn.hosts(), ["alpha", "beta"]);
}

/// The bar: on every healthy log the bundled profile predicts busbw within 10%
/// (median over the sizes from 64 MiB up) — but for the logs named in [`KNOWN_MISSES`], held to
/// the error they show so that a change either way is seen.
#[test]
fn bundled_profiles_predict_the_healthy_logs() {
    for g in LOGS {
        let (file, hw, op) = (g.file, g.hw, g.op);
        if !g.healthy || file.starts_with("synthetic") {
            continue;
        }
        let r = compare(hw, op, file);
        let v = r.verdict.unwrap();
        let bound = KNOWN_MISSES
            .iter()
            .find(|m| m.0 == file)
            .map_or(0.10, |m| m.1);
        assert!(
            v.median_abs_error <= bound,
            "{file} on {hw}: median error {:.1}% > {:.0}%",
            100.0 * v.median_abs_error,
            100.0 * bound
        );
        if bound > 0.10 {
            assert!(
                v.median_abs_error > 0.10,
                "{file}: no longer a miss, update the README"
            );
        }
        assert_eq!(v.standing, Standing::Healthy, "{file}: {}", v.text);
    }
}

/// The B200 sendrecv log runs at 85 GB/s from 16 to 64 MiB and doubles with every size up to
/// 512 MiB: NCCL spreads one send over 4 channels in an 8-rank communicator and doubles them
/// while a channel's part exceeds 16 MiB (`src/enqueue.cc`, addP2pToPlan), each channel moving
/// ~21 GB/s. With the profile's `p2p_channels` the model follows every size from 4 MiB up
/// within 10%; without them it is 7× above the log at 64 MiB — the check can lose. The
/// all-to-all, priced by the same channels (7 peers at once), still ramps more slowly than the
/// model at 64 and 128 MiB (pinned, so that a fix is seen). The fitted figures say FIT.
#[test]
fn sendrecv_follows_nccls_point_to_point_channels() {
    let hw = load_hardware("b200-8").unwrap();
    assert!(hw
        .intra_node
        .bytes_per_s_per_direction
        .source
        .contains("FIT"));
    let lib = hw.collective_library.as_ref().unwrap();
    assert!(lib.p2p_bytes_per_s.as_ref().unwrap().source.contains("FIT"));
    let ch = lib.p2p_channels.as_ref().unwrap();
    assert!(ch.bytes_per_s_per_channel.source.contains("FIT"));
    // NCCL's split: 4 channels in 8 ranks up to 64 MiB, then doubling to 32.
    let sizes = [
        16u64 << 20,
        64 << 20,
        128 << 20,
        256 << 20,
        512 << 20,
        1 << 30,
    ];
    let want = [4, 4, 8, 16, 32, 32];
    for (s, w) in sizes.iter().zip(want) {
        assert_eq!(ch.channels_for(*s as f64, 8), w, "{s}");
    }
    assert_eq!(
        ch.channels_for(64.0 * 1048576.0, 2),
        16,
        "2 ranks start on 16"
    );
    let rows = |hw: metp_sim::config::Hardware, file: &str, op: TestOp| {
        nccl_tests::run(&Request {
            hardware: hw,
            op,
            nodes: None,
            gpus: None,
            sizes: None,
            compare: Some(data(file)),
        })
        .unwrap()
        .rows
        .into_iter()
        .map(|r| (r.size_bytes, r.busbw_error.unwrap()))
        .collect::<Vec<_>>()
    };
    let sr = "b200-vultr-1node-8gpu-sendrecv.txt";
    for (size, e) in rows(hw.clone(), sr, TestOp::SendRecv) {
        if size >= 4 << 20 {
            assert!(e.abs() <= 0.10, "sendrecv {size}: {:+.1}%", 100.0 * e);
        }
    }
    let mut flat = hw.clone();
    flat.collective_library.as_mut().unwrap().p2p_channels = None;
    let at = |v: Vec<(u64, f64)>, size: u64| v.into_iter().find(|r| r.0 == size).unwrap().1;
    assert!(at(rows(flat, sr, TestOp::SendRecv), 64 << 20) > 3.0);
    let a2a = rows(hw, "b200-vultr-1node-8gpu-alltoall.txt", TestOp::AllToAll);
    assert!(at(a2a.clone(), 64 << 20) > 0.15 && at(a2a.clone(), 128 << 20) > 0.10);
    assert!(at(a2a, 512 << 20).abs() <= 0.10);
}

/// A profile's point-to-point channels are whole numbers within the limits, the chunk at least
/// 8 bytes: anything else is refused in one line naming the field.
#[test]
fn point_to_point_channels_are_checked() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("hardware-profiles/b200-8.json"),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (field, bad) in [
        ("channels", "0.0"),
        ("channels", "31.5"),
        ("channels_per_peer", "4096.0"),
        ("chunk_bytes", "4.0"),
        ("bytes_per_s_per_channel", "0.0"),
    ] {
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["collective_library"]["p2p_channels"][field]["value"] =
            serde_json::from_str(bad).unwrap();
        let p = dir.path().join(format!("{field}-{bad}.json"));
        std::fs::write(&p, v.to_string()).unwrap();
        let err = load_hardware(p.to_str().unwrap()).unwrap_err().to_string();
        assert!(
            err.contains(&format!("collective_library.p2p_channels.{field}"))
                && !err.contains('\n'),
            "{field}={bad}: {err}"
        );
    }
}

#[test]
fn the_unhealthy_log_is_flagged_and_says_from_where() {
    let r = compare(
        "dgx-h100",
        TestOp::AllReduce,
        "h100-2node-16gpu-allreduce-ndr-issue290-PROBLEM.txt",
    );
    assert_eq!((r.nodes, r.ranks), (2, 16));
    let v = r.verdict.unwrap();
    assert_eq!(v.standing, Standing::Short, "{}", v.text);
    assert!(v.median_shortfall > 0.6, "{}", v.text);
    assert_eq!(v.short_from_bytes, Some(8 << 20));
    assert!(
        v.text.starts_with("below the model by 68%")
            && v.text.contains("an unhealthy fabric or a misconfiguration"),
        "{}",
        v.text
    );
    // The same curve judged against a profile whose NICs and NVLS are a third as fast is not
    // short: the verdict follows the data and the model, not the file.
    let mut slow = load_hardware("dgx-h100").unwrap();
    metp_sim::config::apply_scales(
        &mut slow,
        &metp_sim::config::parse_scales(&["intra=0.33,inter=0.33".to_string()]).unwrap(),
    )
    .unwrap();
    let r = nccl_tests::run(&Request {
        hardware: slow,
        op: TestOp::AllReduce,
        nodes: None,
        gpus: None,
        sizes: None,
        compare: Some(data("h100-2node-16gpu-allreduce-ndr-issue290-PROBLEM.txt")),
    })
    .unwrap();
    assert_ne!(r.verdict.unwrap().standing, Standing::Short);
}

fn fit(specs: &[&str], base: &str, out: &Path) -> nccl_tests::fit::LinkFitReport {
    let specs: Vec<String> = specs
        .iter()
        .map(|s| match s.split_once('=') {
            Some((op, f)) => format!("{op}={}", data(f).display()),
            None => data(s).display().to_string(),
        })
        .collect();
    nccl_tests::fit::fit_links(&specs, base, out, false).unwrap()
}

/// `calibrate --fit-links` on one log of a hardware predicts its other logs within 10%: the
/// B200 all-gather fits the port the other ring-class operations run at; the 1-node H100 log
/// fits NVLS, which the 2-node NVLSTree log then checks (and the reverse).
#[test]
fn a_profile_fitted_to_one_log_predicts_the_others() {
    let dir = tempfile::tempdir().unwrap();
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, TestOp)]);
    let cases: &[Case] = &[
        (
            "b200-vultr-1node-8gpu-allgather.txt",
            "b200-8",
            &[
                (
                    "b200-vultr-1node-8gpu-reducescatter.txt",
                    TestOp::ReduceScatter,
                ),
                ("b200-vultr-1node-8gpu-alltoall.txt", TestOp::AllToAll),
                ("b200-vultr-1node-8gpu-sendrecv.txt", TestOp::SendRecv),
                ("b200-vultr-1node-8gpu-allreduce.txt", TestOp::AllReduce),
            ],
        ),
        (
            "h100-aws-p5-1node-8gpu-allreduce-awsbatch.txt",
            "dgx-h100",
            &[(
                "h100-2node-16gpu-allreduce-ndr-xe9680-issue309.txt",
                TestOp::AllReduce,
            )],
        ),
        (
            "h100-2node-16gpu-allreduce-ndr-xe9680-issue309.txt",
            "dgx-h100",
            &[(
                "h100-aws-p5-1node-8gpu-allreduce-awsbatch.txt",
                TestOp::AllReduce,
            )],
        ),
    ];
    for (i, (from, base, others)) in cases.iter().enumerate() {
        let out = dir.path().join(format!("fit{i}.json"));
        let rep = fit(&[from], base, &out);
        assert!(rep.logs[0].median_error_after <= rep.logs[0].median_error_before + 1e-9);
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.contains("fitted by metp-sim calibrate --fit-links") && text.contains(from));
        for &(other, op) in *others {
            let r = compare(out.to_str().unwrap(), op, other);
            let e = r.verdict.unwrap().median_abs_error;
            assert!(e <= 0.10, "fitted on {from}, {other}: {:.1}%", 100.0 * e);
        }
    }
    // A log that names no test needs its operation; refused otherwise.
    let mut no_name =
        std::fs::read_to_string(data("b200-vultr-1node-8gpu-reducescatter.txt")).unwrap();
    no_name = no_name.replace("reduce_scatter_perf", "the sweep");
    let p = dir.path().join("unnamed.txt");
    std::fs::write(&p, no_name).unwrap();
    let err = nccl_tests::fit::fit_links(
        &[p.display().to_string()],
        "b200-8",
        &dir.path().join("x.json"),
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("OP=PATH"), "{err}");
    let ok = nccl_tests::fit::fit_links(
        &[format!("reduce-scatter={}", p.display())],
        "b200-8",
        &dir.path().join("x.json"),
        false,
    );
    assert!(ok.is_ok(), "{:?}", ok.err());
}

/// One line naming the file and line, exit 1, for each way a log can be wrong.
#[test]
fn logs_that_do_not_add_up_are_refused_in_one_line() {
    let good =
        std::fs::read_to_string(data("a100-80gb-1node-8gpu-allreduce-thanos-g8.txt")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, String, &str)> = vec![
        // A time that does not give the row's algbw.
        (
            "time",
            good.replace("   695.5   96.49  168.86", "   595.5   96.49  168.86"),
            "does not add up",
        ),
        // A bus bandwidth of 16 ranks in an 8-rank run.
        (
            "ratio",
            good.replace("130.19  227.83", "130.19  244.11"),
            "does not match its ranks",
        ),
        // Two tables in one file.
        ("second", format!("{good}\n{good}"), "second result table"),
        // An element type nccl-tests does not print.
        (
            "type",
            good.replace(" 8388608     float", " 8388608     quad"),
            "unknown element type",
        ),
        // A row cut short.
        (
            "short",
            good.replace("  133.71      0    441.9", ""),
            "columns",
        ),
        // Not a number.
        ("nan", good.replace("40.12", "NaN"), "not a finite"),
        // A log that lists no ranks, with a bus bandwidth no rank count gives (a tampered
        // column is not a 10^297-rank run).
        (
            "rankless",
            "#       size         count      type   redop    root     time   algbw   busbw #wrong \
             time   algbw   busbw #wrong\n\
             1048576        262144     float     sum      -1    5.000  209.72   1e300      0 \
             5.000  209.72   1e300      0\n"
                .to_string(),
            "no rank count gives",
        ),
    ];
    for (tag, text, want) in cases {
        let p = dir.path().join(format!("{tag}.txt"));
        std::fs::write(&p, text).unwrap();
        let out = assert_cmd::Command::cargo_bin("metp-sim")
            .unwrap()
            .args([
                "collectives",
                "--hw",
                "dgx-a100-80gb",
                "--op",
                "all-reduce",
                "--compare",
            ])
            .arg(&p)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{tag}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{tag}: {err}");
        assert!(err.contains(want) && err.contains("line "), "{tag}: {err}");
    }
    // The wrong operation for the log, and flags the log contradicts.
    let out = assert_cmd::Command::cargo_bin("metp-sim")
        .unwrap()
        .args([
            "collectives",
            "--hw",
            "dgx-h100",
            "--op",
            "all-gather",
            "--compare",
        ])
        .arg(data("h100-2node-16gpu-allreduce-ndr-xe9680-issue309.txt"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("all_reduce_perf run"));
    let out = assert_cmd::Command::cargo_bin("metp-sim")
        .unwrap()
        .args([
            "collectives",
            "--hw",
            "dgx-h100",
            "--op",
            "all-reduce",
            "--nodes",
            "1",
            "--compare",
        ])
        .arg(data("h100-2node-16gpu-allreduce-ndr-xe9680-issue309.txt"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("2 hosts"));
}

/// DESIGN §8's JSON: rows with the predicted fields always, the measured ones with --compare
/// (out-of-place), and the table's columns.
#[test]
fn json_rows_and_table_columns() {
    let run = |extra: &[&str]| {
        let out = assert_cmd::Command::cargo_bin("metp-sim")
            .unwrap()
            .args(["collectives", "--hw", "dgx-h100", "--op", "all-reduce"])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let v: serde_json::Value =
        serde_json::from_str(&run(&["--sizes", "1m,1g", "--format", "json"])).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["size_bytes"], 1u64 << 30);
    assert!(rows[1]["predicted_busbw_gb_s"].as_f64().unwrap() > 400.0);
    assert!(rows[1].get("measured_time_us").is_none());
    let aws = data("h100-aws-p5-1node-8gpu-allreduce-awsbatch.txt");
    let v: serde_json::Value = serde_json::from_str(&run(&[
        "--compare",
        aws.to_str().unwrap(),
        "--format",
        "json",
    ]))
    .unwrap();
    let last = v["rows"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["measured_time_us"], 62239.0);
    assert_eq!(last["measured_busbw_gb_s"], 483.05);
    assert!(last["predicted_time_us"].as_f64().unwrap() > 0.0);
    assert_eq!(v["verdict"]["standing"], "healthy");
    let table = run(&["--sizes", "8..1k"]);
    assert!(table.contains("size (B)") && table.contains("busbw") && table.contains("ring/LL"));
    let csv = run(&["--sizes", "64m", "--format", "csv"]);
    assert!(csv.starts_with("size_bytes,count,type,algorithm,protocol,predicted_time_us"));
    // A bad size is a usage error.
    let out = assert_cmd::Command::cargo_bin("metp-sim")
        .unwrap()
        .args([
            "collectives",
            "--hw",
            "dgx-h100",
            "--op",
            "all-reduce",
            "--sizes",
            "8..0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
