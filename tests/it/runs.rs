//! Published runs (`runs/*.json`, `validate --runs`): every run stays within its tolerance, the
//! committed report is current, the report regenerates byte for byte, and run files are
//! untrusted input.
//!
//! The whole-cluster simulations of the report take about two minutes in a debug build (the
//! 1T and 530B pipelines: 512 and 280 micro-batches over 64 and 35 stages), so the checks that
//! run in CI time each run's own configuration with the analytic twin — which agrees with the
//! simulator within a few per cent on these runs, and is held to the committed simulated
//! figure below — and regenerate byte for byte the report of the runs that simulate in
//! seconds. `regenerated_runs_report_matches_the_committed_one` (ignored by default; `cargo
//! test --release -- --ignored runs`) regenerates all of `reports/runs/`.

use std::path::Path;

use assert_cmd::Command;
use metp_sim::runs::{self, RunResult, RunTiming};

pub(crate) fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn analytic_results() -> Vec<RunResult> {
    let runs = runs::load_dir(&root().join("runs")).unwrap();
    runs::evaluate_all(&runs, RunTiming::Analytic).unwrap()
}

pub(crate) fn committed() -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(root().join("reports/runs/runs.json")).unwrap()).unwrap()
}

/// Issue 18 item 4: every run file, priced by the analytic twin, stays within the tolerance it
/// states; and the twin agrees within 3% with the simulated prediction committed in
/// reports/runs/runs.json (what the report says), so a drift of either shows here — 4% where
/// context parallelism all-gathers K/V (Llama 3's 128K run: its exposed K/V hops share each
/// GPU's NIC with the FSDP reduce-scatters; the simulator's max-min links share it, the closed
/// form does not: 3.7% apart, 0.2% with ideal links) and where the updated weights are gathered
/// during the first forward (NVIDIA's 340B recipe on 2,048 GPUs: the gathers share each GPU's
/// NIC with the pipeline's messages through the fill: 3.0% apart, 1.7% with ideal links).
#[test]
fn every_run_stays_within_its_tolerance() {
    let results = analytic_results();
    assert!(results.len() >= 11, "{} runs", results.len());
    let report = committed();
    let sims = report["runs"].as_array().unwrap();
    let mut out = Vec::new();
    for r in &results {
        if !r.within_tolerance {
            out.push(format!(
                "{}: {:+.1}% (tolerance {:.0}%)",
                r.id,
                100.0 * r.error,
                100.0 * r.tolerance
            ));
        }
        let sim = sims
            .iter()
            .find(|s| s["id"] == r.id.as_str())
            .unwrap_or_else(|| panic!("{} is not in reports/runs/runs.json: regenerate", r.id));
        let simulated = sim["predicted"].as_f64().unwrap();
        let gap = r.predicted / simulated - 1.0;
        let bound = if r.id == "nemo-2502-b200-nemotron4-340b-128gpus" {
            // A known divergence, named rather than absorbed: on B200 nodes the data-parallel
            // gathers of the updated weights cross InfiniBand and pace the first forward of
            // every chunk (a quarter of the simulated step is bubble), which the twin prices
            // 5.1% faster; on GB200 segments, where they stay on NVLink, the same layout agrees
            // within 4%.
            0.06
        } else if r.id.starts_with("nvidia-dgxc-2411-nemotron4-340b-fp8-") {
            // Named too: DGX Cloud's Nemotron-4 340B in FP8 (12 virtual stages, selective
            // recomputation, short FP8 steps) is where the twin runs furthest below the
            // simulation among the rest, up to 4.1% at 512 to 2,048 GPUs — about a point of it
            // the overlapped weight gathers (priced after the step instead, the 1,024-GPU row's
            // gap is 3.1%), the rest the interleaved schedule's closed form.
            0.045
        } else if r.layout.contains("CP by all-gather")
            || r.layout.contains("weights gathered overlapped")
        {
            0.04
        } else {
            0.03
        };
        assert!(
            gap.abs() < bound,
            "{}: closed form {} against the committed simulation {simulated} ({:+.1}%)",
            r.id,
            r.predicted,
            100.0 * gap
        );
    }
    assert!(out.is_empty(), "runs out of their tolerance: {out:?}");
}

/// The committed report is the current build's: the same runs, and every configuration's
/// closed-form figure exactly as this build computes it (a model change that moves one fails
/// here until `metp-sim validate --runs` is run again and reports/runs committed).
#[test]
fn committed_runs_report_is_current() {
    let results = analytic_results();
    let report = committed();
    let sims = report["runs"].as_array().unwrap();
    let ids: Vec<&str> = sims.iter().map(|s| s["id"].as_str().unwrap()).collect();
    let now: Vec<&str> = results.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids, now,
        "run files and reports/runs/runs.json differ: regenerate"
    );
    for (r, s) in results.iter().zip(sims) {
        assert_eq!(s["measured"].as_f64(), Some(r.measured), "{}", r.id);
        assert_eq!(
            s["analytic_predicted"].as_f64(),
            Some(r.predicted),
            "{}: the closed form moved; regenerate reports/runs",
            r.id
        );
        let configs = s["configurations"].as_array().unwrap();
        assert_eq!(configs.len(), r.configurations.len(), "{}", r.id);
        for (c, k) in configs.iter().zip(&r.configurations) {
            assert_eq!(c["predicted"].as_f64(), k.predicted, "{} {}", r.id, k.label);
            assert_eq!(c["fits"].as_bool(), k.fits, "{} {}", r.id, k.label);
        }
    }
}

/// A run file of `runs/` changed by `edit`, alone in a folder of its own (its model path made
/// absolute), priced in closed form.
pub(crate) fn edited_run(id: &str, edit: impl FnOnce(&mut serde_json::Value)) -> RunResult {
    let dir = tempfile::tempdir().unwrap();
    let mut run: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root().join("runs").join(format!("{id}.json"))).unwrap(),
    )
    .unwrap();
    // Run files name their models by bundled name or by a path under runs/models.
    if let Some(m) = run["model"].as_str().filter(|m| m.ends_with(".json")) {
        run["model"] = root().join("runs").join(m).to_str().unwrap().into();
    }
    edit(&mut run);
    std::fs::write(
        dir.path().join(format!("{id}.json")),
        serde_json::to_vec(&run).unwrap(),
    )
    .unwrap();
    let runs = runs::load_dir(dir.path()).unwrap();
    runs::evaluate_all(&runs, RunTiming::Analytic)
        .unwrap()
        .remove(0)
}

/// Results of some run files of `runs/`, in closed form (a folder of their own).
pub(crate) fn analytic_results_of(ids: &[&str]) -> Vec<RunResult> {
    let dir = tempfile::tempdir().unwrap();
    for id in ids {
        let name = format!("{id}.json");
        std::fs::copy(root().join("runs").join(&name), dir.path().join(&name)).unwrap();
    }
    // Run files name their models by bundled name or by a path under runs/models.
    let runs = runs::load_dir(dir.path()).unwrap();
    runs::evaluate_all(&runs, RunTiming::Analytic).unwrap()
}

fn validate(cwd: &Path, args: &[&str]) -> std::process::Output {
    Command::cargo_bin("metp-sim")
        .unwrap()
        .current_dir(cwd)
        .arg("validate")
        .args(args)
        .output()
        .unwrap()
}

/// Every file of `dir` against the committed copy in `committed` (the manifest by its status
/// and listing, as it names the command line).
fn same_files(dir: &Path, committed: &Path) -> usize {
    let mut compared = 0;
    for entry in std::fs::read_dir(committed).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        if name == "manifest.json" {
            continue;
        }
        let fresh = std::fs::read(dir.join(name))
            .unwrap_or_else(|_| panic!("{name:?} is committed but no longer generated"));
        assert!(
            fresh == std::fs::read(&path).unwrap(),
            "{name:?} differs from {}: regenerate it",
            committed.display()
        );
        compared += 1;
    }
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["status"], "complete");
    assert_eq!(manifest["files"].as_array().unwrap().len(), compared);
    compared
}

/// The report of the runs that simulate in seconds (the two 22B runs, copied from runs/)
/// regenerates byte for byte: `tests/data/runs-22b/` is `metp-sim validate --runs DIR` on a
/// folder holding just those two files.
#[test]
fn the_22b_runs_report_regenerates_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("runs");
    std::fs::create_dir(&input).unwrap();
    for f in [
        "korthikanti-2022-22b-full.json",
        "korthikanti-2022-22b-selective.json",
    ] {
        std::fs::copy(root().join("runs").join(f), input.join(f)).unwrap();
    }
    let out = dir.path().join("report");
    let o = validate(
        root(),
        &[
            "--runs",
            input.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("2 of 2 within 5%"));
    let n = same_files(&out, &root().join("tests/data/runs-22b"));
    assert_eq!(n, 4, "runs.md, runs.json and the plot in two formats");
}

/// All of reports/runs/ regenerated (about two minutes in a debug build, ten seconds in
/// release; the byte-for-byte check of the committed report).
#[test]
#[ignore = "simulates every published run: ~2 min in debug; run with --release -- --ignored"]
fn regenerated_runs_report_matches_the_committed_one() {
    let dir = tempfile::tempdir().unwrap();
    let o = validate(
        root(),
        &["--runs", "runs", "--out", dir.path().to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    same_files(dir.path(), &root().join("reports/runs"));
}

/// A run file is untrusted input: each of these is refused in one line that names the file and
/// the field, with exit status 1, before anything is evaluated.
#[test]
fn bad_run_files_are_refused_in_one_line_naming_the_field() {
    let good: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root().join("runs/korthikanti-2022-175b-selective.json")).unwrap(),
    )
    .unwrap();
    type Edit = fn(&mut serde_json::Value);
    let cases: &[(&str, Edit)] = &[
        ("unknown field `speed`", |v| {
            v["speed"] = 1.into();
        }),
        ("field 'p'", |v| v["p"] = 0.into()),
        ("field 'tolerance'", |v| v["tolerance"] = 2.0.into()),
        ("field 'tolerance_why'", |v| v["tolerance"] = 0.2.into()),
        ("field 'measured.value'", |v| {
            v["measured"]["value"] = (-1.0).into()
        }),
        ("field 'global_batch'", |v| {
            v["micro_batch"] = 2.into();
            v["global_batch"] = 63.into();
        }),
        ("the run's own configuration", |v| {
            v["global_batch"] = 63.into()
        }),
        ("field 'zero'", |v| v["zero"] = 4.into()),
        ("field 'attention_kernel'", |v| {
            v["attention_kernel"] = "fa9".into()
        }),
        ("field 'measured.flops'", |v| {
            v["measured"]["quantity"] = "tflops-per-gpu".into();
        }),
        // 175B parameters at 6 FLOPs each: 1,000 tokens/s per GPU is 1,050 TFLOP/s.
        ("more than the profile's peak", |v| {
            v["measured"]["quantity"] = "tokens-per-s-per-gpu".into();
            v["measured"]["value"] = 1000.0.into();
        }),
        ("field 'unstated[0].tried'", |v| {
            v["unstated"][0]["tried"] = serde_json::json!([1, 2]);
        }),
        ("field 'unstated[0].tried[1]'", |v| {
            v["unstated"][0]["tried"] = serde_json::json!([3, 3]);
        }),
        ("field 'unstated[0].tried[0]'", |v| {
            v["unstated"][0]["tried"] = serde_json::json!(["three", 3]);
        }),
        ("field 'unstated[0].why'", |v| {
            v["unstated"][0]["why"] = "".into();
        }),
        ("field 'pp_round'", |v| v["pp_round"] = 0.into()),
        ("unknown variant `eager`", |v| v["pp_p2p"] = "eager".into()),
        ("unknown variant `mesh`", |v| v["cp_comm"] = "mesh".into()),
        ("unknown variant `compiled`", |v| {
            v["layer_ops"] = "compiled".into()
        }),
        ("unknown variant `sharded`", |v| {
            v["zero3_gather"] = "sharded".into()
        }),
        ("--zero3-gather per-parameter", |v| {
            v["zero3_gather"] = "per-parameter".into()
        }),
        ("unknown variant `whenever`", |v| {
            v["param_gather"] = "whenever".into()
        }),
        // The file's ZeRO 0 has no sharded optimizer state whose weights to gather.
        ("--param-gather overlapped", |v| {
            v["param_gather"] = "overlapped".into()
        }),
        ("field 'unstated[1].tried[1]'", |v| {
            v["unstated"].as_array_mut().unwrap().push(
                serde_json::json!({"knob": "layer-ops", "tried": ["fused", "jit"], "why": "w"}),
            );
        }),
        ("unknown variant `fp8`", |v| {
            v["optimizer_dtype"] = "fp8".into()
        }),
        ("unknown variant `sometimes`", |v| {
            v["grad_accumulation"] = "sometimes".into()
        }),
        ("field 'tp_comm_overlap'", |v| {
            v["tp_comm_overlap"] = "yes".into()
        }),
        ("--tp-comm-overlap", |v| {
            v["method"] = "tp".into();
            v["tp_comm_overlap"] = true.into();
        }),
        ("--cp-comm all-gather", |v| {
            v["cp_comm"] = "all-gather".into()
        }),
        ("--pp-round 3", |v| v["pp_round"] = 3.into()),
        ("after-backward", |v| {
            v["zero"] = 2.into();
            v["dp"] = 2.into();
            v["nodes"] = 16.into();
            v["global_batch"] = 128.into();
            v["grad_sync"] = "after-backward".into();
        }),
        ("field 'title'", |v| v["title"] = "a\u{0}b".into()),
        ("field 'nodes'", |v| v["nodes"] = 1.into()),
        ("field 'model'", |v| v["model"] = "no-such-model".into()),
        ("field 'measured.value'", |v| {
            v["measured"]["quantity"] = "tflops-per-gpu".into();
            v["measured"]["value"] = 400.into();
            v["measured"]["flops"] =
                serde_json::json!({"attention": "full", "recomputation": false, "source": "s"});
        }),
    ];
    for (expected, edit) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut v = good.clone();
        edit(&mut v);
        let file = dir.path().join("bad.json");
        std::fs::write(&file, serde_json::to_vec(&v).unwrap()).unwrap();
        let o = validate(
            root(),
            &[
                "--runs",
                dir.path().to_str().unwrap(),
                "--analytic",
                "--out",
                dir.path().join("out").to_str().unwrap(),
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{expected}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{expected}: {err}");
        assert!(
            err.contains("bad.json") && err.contains(expected),
            "wanted {expected}: {err}"
        );
        assert!(!dir.path().join("out").exists(), "{expected}: wrote output");
    }
    // A folder without run files, and a missing one.
    let dir = tempfile::tempdir().unwrap();
    let o = validate(root(), &["--runs", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("holds no run files"));
    let o = validate(root(), &["--runs", "/no/such/folder"]);
    assert_eq!(o.status.code(), Some(1));
}

/// The plot shows the y = x line and both bands, and one series per paper.
#[test]
fn the_plot_has_the_diagonal_and_the_bands() {
    let svg = std::fs::read_to_string(root().join("reports/runs/runs-predicted-vs-measured.svg"))
        .unwrap();
    for text in [
        "y = x",
        "±5%",
        "±10%",
        "Korthikanti et al. 2022",
        "Grattafiori et al. 2024",
    ] {
        assert!(svg.contains(text), "{text} missing from the plot");
    }
}

/// README's published-runs table is the one in reports/runs/runs.md, byte for byte.
#[test]
fn the_readme_table_is_the_reports() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let md = std::fs::read_to_string(root().join("reports/runs/runs.md")).unwrap();
    let (b, e) = ("<!-- runs-table:begin -->\n", "<!-- runs-table:end -->");
    let start = readme.find(b).expect("README has the runs-table markers") + b.len();
    let end = readme[start..].find(e).unwrap() + start;
    let t0 = md.find("| run | GPUs |").unwrap();
    let t1 = md[t0..].find("\n\n").unwrap() + t0 + 1;
    assert_eq!(
        &readme[start..end],
        &md[t0..t1],
        "README's published-runs table differs from reports/runs/runs.md: copy it over"
    );
}

/// A run's verdict can lose: the 22B run (within 5%) with its measured time moved 5% and then
/// 40% is "off" inside a 10% tolerance, then "OUT" of it — in the result and in the report's
/// table row — while the prediction does not move.
#[test]
fn a_run_leaves_the_goal_and_then_its_tolerance_when_the_measurement_moves() {
    let id = "korthikanti-2022-22b-selective";
    let with = |factor: f64| {
        edited_run(id, |run| {
            let v = run["measured"]["value"].as_f64().unwrap();
            run["measured"]["value"] = (v * factor).into();
            run["tolerance"] = 0.1.into();
            run["tolerance_why"] = "A test: the measured figure is moved.".into();
        })
    };
    let (same, off, out) = (with(1.0), with(1.05), with(1.4));
    assert!(same.within_goal && same.within_tolerance, "{}", same.error);
    assert!(!off.within_goal && off.within_tolerance, "{}", off.error);
    assert!(!out.within_goal && !out.within_tolerance, "{}", out.error);
    assert_eq!(same.predicted, out.predicted);
    assert!(out.tool_faster && out.error < -0.1);
    let table = metp_sim::report::runs_table(&[same, off, out]);
    let rows: Vec<&str> = table.lines().skip(2).collect();
    assert!(rows[0].ends_with("| within 5% |"), "{}", rows[0]);
    assert!(rows[1].ends_with("| off (tolerance 10%) |"), "{}", rows[1]);
    assert!(
        rows[2].ends_with("| OUT of its 10% tolerance |"),
        "{}",
        rows[2]
    );
}

/// Why the Nemotron-4 340B runs keep their optimizer state in bf16 (the recipe's
/// `optim.dtype: bf16`, which NeMo 24.09 hands to Apex's distributed Adam): on 128 GPUs the
/// state is sharded over only 2 data-parallel ranks, and with fp32 master weights and moments
/// (12 bytes per parameter) the tool's model calls the layout one that does not fit even
/// without allocator headroom — the run ran. With bf16 moments and no master copy (4 bytes) it
/// fits with the profile's headroom; the difference is the state's 8 bytes per parameter over
/// 2 ranks and nothing else.
#[test]
fn nemotron_on_128_gpus_fits_with_the_recipes_bf16_optimizer_state_only() {
    let id = "nvidia-dgxc-2411-nemotron4-340b-128gpus";
    let committed = edited_run(id, |run| assert_eq!(run["optimizer_dtype"], "bf16"));
    let with = |dtype: &str| edited_run(id, |run| run["optimizer_dtype"] = dtype.into());
    let (bf16, fp32) = (with("bf16"), with("fp32"));
    assert_eq!(committed.peak_bytes, bf16.peak_bytes);
    assert!(bf16.fits, "bf16 state: {} bytes", bf16.peak_bytes);
    assert!(!fp32.fits, "fp32 state: {} bytes", fp32.peak_bytes);
    let (b, f) = (bf16.peak, fp32.peak);
    assert!(
        f.headroom_fraction_that_fits.is_none(),
        "fp32 state fits with some headroom: {f:?}"
    );
    // 340B parameters over TP 8 × PP 8, the first stage's embedding with them, sharded over 2.
    let state_gib = (f.static_bytes - b.static_bytes) as f64 / (1u64 << 30) as f64;
    assert!((19.0..23.0).contains(&state_gib), "{state_gib} GiB");
    assert_eq!(f.stored_bytes, b.stored_bytes);
    assert!(
        bf16.layout.contains("bf16 optimizer state") && !fp32.layout.contains("optimizer state")
    );
    // Over runs, the fp32 variant is counted among those the runs disprove.
    let summary = runs::fit_summary(&[bf16, fp32]);
    assert_eq!((summary.runs, summary.fit), (2, 1));
    assert!(summary.fit_with_less_headroom.is_empty());
    assert_eq!(summary.tensors_exceed_memory, vec![id.to_string()]);
}

/// The report's memory sentence counts every run once, by the same verdicts as the runs'
/// own memory lines, and names each run the model does not let fit.
#[test]
fn every_run_is_counted_once_by_memory_verdict() {
    let results = analytic_results();
    let f = runs::fit_summary(&results);
    assert_eq!(
        f.runs,
        f.fit + f.fit_with_less_headroom.len() + f.tensors_exceed_memory.len()
    );
    for r in &results {
        let less = f.fit_with_less_headroom.contains(&r.id);
        let exceed = f.tensors_exceed_memory.contains(&r.id);
        assert_eq!(r.fits, !less && !exceed, "{}", r.id);
        assert_eq!(
            exceed,
            r.peak.headroom_fraction_that_fits.is_none() && !r.fits,
            "{}",
            r.id
        );
    }
    let md = metp_sim::report::runs_markdown(&results, RunTiming::Analytic, &["svg"]);
    assert!(md.contains(&format!("by the tool's model {} of {} fit", f.fit, f.runs)));
    for id in f
        .fit_with_less_headroom
        .iter()
        .chain(&f.tensors_exceed_memory)
    {
        assert!(md.contains(&format!("[{id}](#{id})")), "{id}");
    }
}

/// NVIDIA's Llama 3.1 405B recipes overlap their tensor-parallel collectives with the GEMMs
/// (`tp_comm_overlap`): priced that way every full-size 405B row is within the 5% goal (with
/// their GEMMs at the slowest GPU's clock, `kernels.gemm.fleet_clock_spread`, all on the slow
/// side by under 5%); with the collectives exposed (Megatron's default) every one of the same
/// files is priced over 8% slower than measured, over 5% of the step more — the run files'
/// setting decides the verdict, so a regression that drops it fails here. Release 25.04's
/// 405b-Proxy rows (the same recipe with 8, 30 and 62 layers on 32 to 128 GPUs) are held to the
/// goal and to the same 5% price of exposing the collectives, not to the slow side without the
/// overlap: the two shallowest are priced faster than the full-size rows.
#[test]
fn dgxc_405b_rows_meet_the_goal_with_the_tp_overlap_the_recipes_ran_and_are_slow_without() {
    let ids: Vec<String> = std::fs::read_dir(root().join("runs"))
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        // H100 rows (release 25.05's GB200 rows run another kernel model, tested on their own).
        .filter(|n| {
            n.starts_with("nvidia-dgxc-")
                && n.contains("-llama31-405b-")
                && !n.contains("-gb200-")
                && !n.contains("-fp8-")
        })
        .map(|n| n.trim_end_matches(".json").to_string())
        .collect();
    assert_eq!(ids.len(), 12, "{ids:?}");
    assert_eq!(ids.iter().filter(|n| n.contains("-proxy-")).count(), 3);
    for id in &ids {
        let with = edited_run(id, |_| {});
        let without = edited_run(id, |v| v["tp_comm_overlap"] = false.into());
        assert!(with.within_goal, "{id}: {}", with.error);
        if !id.contains("-proxy-") {
            assert!(with.error > 0.0, "{id}: {}", with.error);
            assert!(without.error > 0.08, "{id}: {}", without.error);
        }
        assert!(
            without.predicted_step_s > 1.05 * with.predicted_step_s,
            "{id}: {} against {}",
            without.predicted_step_s,
            with.predicted_step_s
        );
    }
}

/// A figure in tokens per second per GPU (torchtitan's WPS) stands for the step that trains the
/// global batch's tokens at that rate on every GPU, with no FLOP convention: the torchtitan row
/// (2 × 4,096 tokens per GPU at 2,162 tokens/s) is a 3.79 s step, and the prediction is the
/// same tokens over the predicted step — more tokens per second when the step is shorter.
#[test]
fn tokens_per_second_per_gpu_stand_for_the_step_that_trains_them() {
    let results = analytic_results();
    let r = results
        .iter()
        .find(|r| r.id == "torchtitan-2024-llama2-13b-64gpus")
        .expect("the torchtitan run");
    assert_eq!(r.quantity, metp_sim::runs::Quantity::TokensPerSPerGpu);
    assert!(
        (r.measured_step_s - 2.0 * 4096.0 / 2162.0).abs() < 1e-9,
        "{}",
        r.measured_step_s
    );
    let tokens_per_gpu = 128.0 * 4096.0 / 64.0;
    assert!((r.predicted - tokens_per_gpu / r.predicted_step_s).abs() < 1e-6 * r.predicted);
    assert_eq!(r.tool_faster, r.predicted > r.measured);
    assert!(r.flop_convention.is_none());
}

/// A run whose exact simulation is beyond the simulator's task bound (Llama 3.1 405B on 512
/// GB200: 32 micro-batches of an 8 × 8-stage interleaved pipeline over 128 distinct devices) is
/// composed from its distinct programs instead of stopping the whole report, and says so; the
/// same layout on 128 GPUs is still simulated exactly.
#[test]
fn a_run_too_large_to_simulate_exactly_is_composed_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    for id in [
        "nvidia-dgxc-2505-llama31-405b-gb200-128gpus",
        "nvidia-dgxc-2505-llama31-405b-gb200-512gpus",
    ] {
        let name = format!("{id}.json");
        std::fs::copy(root().join("runs").join(&name), dir.path().join(&name)).unwrap();
    }
    let runs = runs::load_dir(dir.path()).unwrap();
    let results = runs::evaluate_all(&runs, RunTiming::Simulated).unwrap();
    assert_eq!(results[0].timing, RunTiming::Simulated);
    assert_eq!(results[1].timing, RunTiming::Composed);
    for r in &results {
        assert!(r.predicted.is_finite() && r.predicted > 0.0, "{}", r.id);
    }
    // Composition is within a few per cent of the exact simulation: the two rows differ only in
    // data-parallel degree and their predictions stay close.
    let (a, b) = (results[0].predicted, results[1].predicted);
    assert!((b / a - 1.0).abs() < 0.05, "{a} s against {b} s");
    let md = metp_sim::report::runs_markdown(&results, RunTiming::Simulated, &["svg"]);
    assert_eq!(md.matches("- Timed: composed").count(), 1, "{md}");
}

/// NeMo 24.07's FP8 table is transcribed by its script: the files rewrite byte for byte, and
/// each row's step follows from its tokens per second per GPU.
#[test]
fn nemo_2407_rows_are_the_published_table() {
    let r = edited_run("nemo-2407-gpt3-175b-512gpus", |_| {});
    assert_eq!((r.gpus, r.micro_batches), (512, 64));
    assert!((r.measured_step_s - 2048.0 * 2048.0 / (825.0 * 512.0)).abs() < 1e-9);
    assert!(r.linear_dtype == metp_sim::config::LinearDtype::Fp8);
}
