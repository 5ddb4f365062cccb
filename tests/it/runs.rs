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

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn analytic_results() -> Vec<RunResult> {
    let runs = runs::load_dir(&root().join("runs")).unwrap();
    runs::evaluate_all(&runs, RunTiming::Analytic).unwrap()
}

fn committed() -> serde_json::Value {
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

/// The Llama 3 rows: going from 8,192 to 16,384 GPUs at the same 16M-token batch halves the
/// micro-batches per pipeline, and the paper lost 7% (430 → 400 TFLOP/s); the tool must lose
/// too (the right direction, its size within three times the paper's; runs.md splits both steps
/// into a cost per micro-batch and a rest to say where the size goes wrong).
#[test]
fn llama3_loses_throughput_from_8192_to_16384_gpus_as_published() {
    let results = analytic_results();
    let get = |id: &str| results.iter().find(|r| r.id == id).unwrap();
    let (a, b) = (
        get("llama3-2024-405b-8k-8192gpus"),
        get("llama3-2024-405b-8k-16384gpus"),
    );
    let paper = b.measured / a.measured - 1.0;
    let tool = b.predicted / a.predicted - 1.0;
    assert!(paper < 0.0, "{paper}");
    assert!(
        tool < 0.0 && (tool - paper).abs() < 0.03,
        "tool {:+.1}% against the paper's {:+.1}%",
        100.0 * tool,
        100.0 * paper
    );
}

/// The two Llama 3 8K rows with their training state changed: FSDP's synchronisation (the
/// run files' `zero`) and the profile's clock (its dense peak scaled), in a folder of their own.
fn llama3_8k_pair_with(zero: u64, clock: f64) -> runs::Pair {
    let dir = tempfile::tempdir().unwrap();
    let mut profile: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root().join("hardware-profiles/grand-teton-h100-roce.json")).unwrap(),
    )
    .unwrap();
    let peak = &mut profile["gpu"]["peak_bf16_flops_per_s"]["value"];
    *peak = (peak.as_f64().unwrap() * clock).into();
    // Not beside the run files: every JSON file of the folder is read as a run.
    std::fs::create_dir(dir.path().join("hw")).unwrap();
    std::fs::write(
        dir.path().join("hw/clock.json"),
        serde_json::to_vec(&profile).unwrap(),
    )
    .unwrap();
    for id in [
        "llama3-2024-405b-8k-8192gpus",
        "llama3-2024-405b-8k-16384gpus",
    ] {
        let name = format!("{id}.json");
        let mut run: serde_json::Value =
            serde_json::from_slice(&std::fs::read(root().join("runs").join(&name)).unwrap())
                .unwrap();
        run["zero"] = zero.into();
        run["hardware"] = "hw/clock.json".into();
        std::fs::write(dir.path().join(&name), serde_json::to_vec(&run).unwrap()).unwrap();
    }
    let runs = runs::load_dir(dir.path()).unwrap();
    let results = runs::evaluate_all(&runs, RunTiming::Analytic).unwrap();
    let mut pairs = runs::pairs(&results);
    assert_eq!(pairs.len(), 1, "{pairs:?}");
    pairs.remove(0)
}

/// Why the Llama 3 runs synchronise gradients once per step (ZeRO 1 in the run files), decided
/// by the measured pair of 8K rows, not by the kernel model: the measured rest of the step
/// (everything that does not grow with micro-batches per replica: fill and drain, the last
/// synchronisation, the optimizer) is matched within 15% by the synchronisation at each chunk's
/// last backward, at the profile's clock and at 0.9 of it (where the predicted cost per
/// micro-batch reaches the measured one; slower still, the prediction is slow whatever the
/// synchronisation); a reduce-scatter after every micro-batch (ZeRO 2) leaves a backlog of
/// FP32 reduce-scatters in the drain, over 1.5 times the measured rest at either clock. The
/// cost per micro-batch is what the clock moves.
#[test]
fn llama3_8k_pair_decides_how_often_fsdp_synchronises() {
    for clock in [1.0, 0.9] {
        let once = llama3_8k_pair_with(1, clock);
        let every = llama3_8k_pair_with(2, clock);
        let measured = once.measured.rest_s;
        assert!(
            (once.predicted.rest_s / measured - 1.0).abs() < 0.15,
            "clock {clock}: once per step, rest {} s against {measured} s measured",
            once.predicted.rest_s
        );
        assert!(
            every.predicted.rest_s > 1.5 * measured,
            "clock {clock}: every micro-batch, rest {} s against {measured} s measured",
            every.predicted.rest_s
        );
    }
    // The clock moves the cost per micro-batch: the profile's is below the measured one.
    let fast = llama3_8k_pair_with(1, 1.0);
    let slow = llama3_8k_pair_with(1, 0.9);
    assert!(fast.predicted.per_micro_batch_s < fast.measured.per_micro_batch_s);
    assert!(slow.predicted.per_micro_batch_s > fast.predicted.per_micro_batch_s);
}

/// A run file of `runs/` changed by `edit`, alone in a folder of its own (its model path made
/// absolute), priced in closed form.
fn edited_run(id: &str, edit: impl FnOnce(&mut serde_json::Value)) -> RunResult {
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
fn analytic_results_of(ids: &[&str]) -> Vec<RunResult> {
    let dir = tempfile::tempdir().unwrap();
    for id in ids {
        let name = format!("{id}.json");
        std::fs::copy(root().join("runs").join(&name), dir.path().join(&name)).unwrap();
    }
    // Run files name their models by bundled name or by a path under runs/models.
    let runs = runs::load_dir(dir.path()).unwrap();
    runs::evaluate_all(&runs, RunTiming::Analytic).unwrap()
}

/// The Llama 3 8K rows differ only in micro-batches per replica (32 and 16): the report splits
/// both steps into a cost per micro-batch and a rest, measured and predicted, and the
/// predicted parts add up to the predicted split; runs with different layouts inside a replica
/// (the 22B runs: other recomputation) are not paired. The 8,192-GPU run's peak is its parts,
/// and it fits only with less allocator headroom than the profile's 7%.
#[test]
fn llama3_8k_rows_split_into_a_cost_per_micro_batch_and_a_rest() {
    let results = analytic_results_of(&[
        "llama3-2024-405b-8k-8192gpus",
        "llama3-2024-405b-8k-16384gpus",
    ]);
    let pairs = runs::pairs(&results);
    assert_eq!(pairs.len(), 1, "{pairs:?}");
    let p = &pairs[0];
    assert_eq!(p.more, "llama3-2024-405b-8k-8192gpus");
    assert_eq!(p.micro_batches, (32, 16));
    // 430 and 400 TFLOP/s: 12.50 s and 6.72 s, so 0.361 s per micro-batch and 0.94 s besides.
    assert!(
        (p.measured.per_micro_batch_s - 0.361).abs() < 0.005,
        "{p:?}"
    );
    assert!((p.measured.rest_s - 0.94).abs() < 0.05, "{p:?}");
    assert!((p.measured_throughput_change + 0.07).abs() < 0.002, "{p:?}");
    let sum =
        |f: fn(&runs::Split) -> f64| p.predicted_parts.iter().map(|x| f(&x.split)).sum::<f64>();
    assert!((sum(|x| x.per_micro_batch_s) - p.predicted.per_micro_batch_s).abs() < 1e-9);
    assert!((sum(|x| x.rest_s) - p.predicted.rest_s).abs() < 1e-9);

    // Memory: the peak is its parts; with whole FP32 gradients neither row fits by the tool's
    // model, not even without allocator headroom (the run files say so: the tool's memory
    // verdict is stricter than the published runs here).
    for id in [&p.more, &p.fewer] {
        let r = results.iter().find(|r| &r.id == id).unwrap();
        assert_eq!(r.peak.peak_bytes(), r.peak_bytes, "{id}");
        assert!(!r.fits, "{id}");
        assert!(r.peak.headroom_fraction_that_fits.is_none(), "{id}");
        assert!(r.peak.spare_without_headroom_bytes() == 0, "{id}");
        // How small each layer's stored activations would have to be: the largest that fits.
        let m = &r.peak;
        for with_headroom in [true, false] {
            let a = m
                .activation_bytes_per_layer_that_fits(with_headroom)
                .unwrap();
            assert!(a < m.activation_bytes_per_layer, "{id} {a}");
            let layers = m.in_flight_layers as u128;
            let peak_at = |per_layer: u128| {
                m.peak_bytes() - m.activation_bytes_per_layer * layers + per_layer * layers
                    - if with_headroom {
                        0
                    } else {
                        m.allocator_headroom_bytes
                    }
            };
            assert!(peak_at(a) <= m.capacity_bytes, "{id} {a}");
            assert!(peak_at(a + 1) > m.capacity_bytes, "{id} {a}");
        }
    }

    // runs.json carries the split as runs.md shows it.
    let committed = committed();
    let json = &committed["pairs"][0];
    assert_eq!(json["more"], p.more.as_str());
    assert_eq!(json["predicted_parts"].as_array().map(Vec::len), Some(4));

    let others = analytic_results_of(&[
        "korthikanti-2022-22b-full",
        "korthikanti-2022-22b-selective",
    ]);
    assert!(runs::pairs(&others).is_empty());
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

/// runs.md's "By source": the groups hold every run once, each run's speed error has the sign
/// of "the tool is faster", and a group's count of faster runs is the count of its positive
/// speed errors — so a source the tool is fast on throughout reads "n of n".
#[test]
fn runs_grouped_by_source_add_up_and_read_as_speed() {
    let results = analytic_results();
    let groups = runs::by_source(&results);
    assert_eq!(groups.iter().map(|g| g.runs).sum::<usize>(), results.len());
    assert!(groups.len() >= 4, "{groups:?}");
    for r in &results {
        let e = runs::speed_error(r);
        assert!(e.is_finite() && (e > 0.0) == r.tool_faster, "{}: {e}", r.id);
        if r.quantity == runs::Quantity::IterationS {
            // An iteration 10% longer than measured is a speed 1/1.1 − 1 = −9.1% of it.
            assert!(
                ((1.0 + e) * (1.0 + r.error) - 1.0).abs() < 1e-12,
                "{}",
                r.id
            );
        } else {
            assert_eq!(e, r.error, "{}", r.id);
        }
    }
    for g in &groups {
        let (lo, hi) = g.speed_error_range;
        assert!(
            lo <= g.median_speed_error && g.median_speed_error <= hi,
            "{g:?}"
        );
        assert!(g.within_goal <= g.runs && g.faster <= g.runs, "{g:?}");
    }
    let committed = committed();
    assert_eq!(
        committed["sources"].as_array().map(Vec::len),
        Some(groups.len()),
        "runs.json's sources: regenerate"
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
/// (`tp_comm_overlap`): priced that way every full-size 405B row is within 5% and on the fast
/// side, like the recipes' other rows; with the collectives exposed (Megatron's default) every
/// one of the same files is priced slower than measured, by over 5% of the step more — the run
/// files' setting decides the side, so a regression that drops it fails here. Release 25.04's
/// 405b-Proxy rows (the same recipe with 8, 30 and 62 layers on 32 to 128 GPUs) are held to the
/// fast side and the same 5% price of exposing the collectives, not to the goal or to the slow
/// side without the overlap: the two shallowest are priced further from their measurement.
#[test]
fn dgxc_405b_rows_are_fast_with_the_tp_overlap_the_recipes_ran_and_slow_without() {
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
        assert!(with.error < 0.0, "{id}: {}", with.error);
        if !id.contains("-proxy-") {
            assert!(with.within_goal, "{id}: {}", with.error);
            assert!(without.error > 0.0, "{id}: {}", without.error);
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

/// The weak-scaling verdict can lose: MosaicML's 7B on 128 and 512 GPUs (the same work per
/// GPU) is called a cost of scale the prediction misses; with the 512-GPU figure moved so that
/// its measured step grows as much as the predicted one, the prediction follows; moved further,
/// so that the measured step shrinks, the prediction charges scaling out more than measured.
#[test]
fn weak_scaling_says_which_way_the_prediction_misses_the_growth_of_the_step() {
    let small = edited_run("mosaicml-2024-mpt-7b-128gpus", |_| {});
    let large_as = |step_s: Option<f64>| {
        edited_run("mosaicml-2024-mpt-7b-512gpus", |run| {
            if let Some(t) = step_s {
                // tokens/s per GPU of a step of t seconds: 6 sequences of 2048 tokens per GPU.
                run["measured"]["value"] = (6.0 * 2048.0 / t).into();
            }
        })
    };
    let committed = large_as(None);
    let growth_s = committed.predicted_step_s - small.predicted_step_s;
    let follows = large_as(Some(small.measured_step_s + growth_s));
    let shrinks = large_as(Some(small.measured_step_s * 0.97));
    let verdict = |large: &RunResult| {
        let groups = runs::weak_scaling(&[small.clone(), large.clone()]);
        assert_eq!(groups.len(), 1);
        let g = &groups[0];
        assert_eq!((g.points[0].gpus, g.points[1].gpus), (128, 512), "{g:?}");
        (
            g.follows,
            g.measured_growth_s - g.predicted_growth_s,
            g.verdict(),
        )
    };
    let (f, gap, words) = verdict(&committed);
    assert!(!f && gap > 0.05, "{gap}: {words}");
    assert!(words.contains("missing from the prediction"), "{words}");
    let (f, gap, words) = verdict(&follows);
    assert!(f && gap.abs() < 1e-6, "{gap}: {words}");
    assert!(words.contains("follows"), "{words}");
    let (f, gap, words) = verdict(&shrinks);
    assert!(!f && gap < 0.0, "{gap}: {words}");
    assert!(words.contains("charges scaling out more"), "{words}");
    // Counted together, one of each verdict.
    let all: Vec<_> = [&committed, &follows, &shrinks]
        .iter()
        .flat_map(|large| runs::weak_scaling(&[small.clone(), (*large).clone()]))
        .collect();
    assert_eq!(runs::scaling::tally(&all), (1, 1, 1));
    // A run on the same number of GPUs, or another layout, forms no group.
    assert!(runs::weak_scaling(&[small.clone(), small.clone()]).is_empty());
    let other = edited_run("mosaicml-2024-mpt-3b-512gpus", |_| {});
    assert!(runs::weak_scaling(&[small, other]).is_empty());
}

/// A run measured in bf16 and in FP8 on the same layout pairs with its twin
/// (`runs::precision_pairs`), and the pair's error names a speed-up the tool gets wrong: as
/// published (NVIDIA 25.02, Llama 3.1 70B on 128 H100) the predicted speed-up is within 5% of
/// the measured 1.40×; an FP8 step edited to half the bf16 one (2×) leaves the prediction far
/// short. Runs on other GPU counts or of one dtype do not pair.
#[test]
fn fp8_twins_test_the_speed_up_of_fp8_alone() {
    let bf16 = edited_run("nvidia-dgxc-2502-llama31-70b-128gpus", |_| {});
    let fp8 = edited_run("nvidia-dgxc-2502-llama31-70b-fp8-128gpus", |_| {});
    assert!(fp8.predicted_step_s < 0.8 * bf16.predicted_step_s);
    let pairs = runs::precision_pairs(&[bf16.clone(), fp8.clone()]);
    assert_eq!(pairs.len(), 1, "{pairs:?}");
    let p = &pairs[0];
    assert_eq!((p.bf16.as_str(), p.gpus), (bf16.id.as_str(), 128));
    assert!((p.measured_speedup - 14.70 / 10.52).abs() < 1e-9);
    assert!(p.error().abs() < 0.05, "{p:?}");
    let twice = edited_run("nvidia-dgxc-2502-llama31-70b-fp8-128gpus", |run| {
        run["measured"]["value"] = (14.70 / 2.0).into();
    });
    let off = runs::precision_pairs(&[bf16.clone(), twice]);
    assert!(off[0].error() < -0.25, "{:?}", off[0]);
    let other = edited_run("nvidia-dgxc-2502-llama31-70b-fp8-256gpus", |_| {});
    assert!(runs::precision_pairs(&[bf16.clone(), other]).is_empty());
    assert!(runs::precision_pairs(&[bf16.clone(), bf16]).is_empty());
    // An FP8 run on a profile without FP8 tensor cores is refused, naming the field.
    let dir = tempfile::tempdir().unwrap();
    let mut run: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root().join("runs/korthikanti-2022-22b-full.json")).unwrap(),
    )
    .unwrap();
    run["linear_dtype"] = "fp8".into();
    let path = dir.path().join("a100-fp8.json");
    std::fs::write(&path, serde_json::to_vec(&run).unwrap()).unwrap();
    let err = runs::load(&path).unwrap_err().to_string();
    assert!(
        err.contains("linear_dtype") && err.contains("peak_fp8"),
        "{err}"
    );
}

/// A configuration two sources published is grouped, its measured steps set side by side with
/// the one prediction; the same source twice, another layout or another dtype is not.
#[test]
fn one_configuration_published_twice_shows_how_far_its_measurements_lie_apart() {
    let nemo = edited_run("nemo-2407-llama3-8b-8gpus", |_| {});
    let dgxc = edited_run("nvidia-dgxc-2502-llama31-8b-fp8-8gpus", |_| {});
    let groups = runs::repeats(&[nemo.clone(), dgxc.clone()]);
    assert_eq!(groups.len(), 1, "{groups:?}");
    let g = &groups[0];
    assert_eq!(g.gpus, 8);
    assert_eq!(g.runs.len(), 2);
    // 128 sequences of 8,192 tokens at 12,273 tokens/s on each of 8 GPUs, against 9.44 s.
    let nemo_step_s = 128.0 * 8192.0 / (12273.0 * 8.0);
    assert!(
        (g.measured_spread() - (nemo_step_s / 9.44 - 1.0)).abs() < 1e-9,
        "{g:?}"
    );
    assert!(g.predicted_spread() < 1e-9, "{g:?}");
    // A measurement moved to the other's figure closes the gap; moved further, it reopens.
    let same = edited_run("nvidia-dgxc-2502-llama31-8b-fp8-8gpus", |run| {
        run["measured"]["value"] = nemo_step_s.into();
    });
    assert!(runs::repeats(&[nemo.clone(), same])[0].measured_spread() < 1e-9);
    // One source twice, another layout, another dtype: no group.
    assert!(runs::repeats(&[nemo.clone(), nemo.clone()]).is_empty());
    let other_layout = edited_run("nvidia-dgxc-2502-llama31-8b-fp8-16gpus", |_| {});
    assert!(runs::repeats(&[nemo.clone(), other_layout]).is_empty());
    let bf16 = edited_run("nvidia-dgxc-2502-llama31-8b-8gpus", |_| {});
    assert!(runs::repeats(&[nemo, bf16]).is_empty());
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

/// Runs grouped by their model's size say which way the error follows the size, computed: as
/// published, Llama 2 7B (NeMo 24.07) is priced far faster than measured and Nemotron-4 340B
/// about right, so the small band is the more optimistic; with the small run's measurement
/// moved to twice the tool's speed the trend turns round, and with both at the prediction
/// there is none.
#[test]
fn runs_by_model_size_say_which_way_the_error_follows_the_size() {
    let small = edited_run("nemo-2407-llama2-7b-8gpus", |_| {});
    let large = edited_run("nvidia-dgxc-2411-nemotron4-340b-128gpus", |_| {});
    assert!(small.params < 10_000_000_000 && large.params > 200_000_000_000);
    let bands = runs::by_size(&[large.clone(), small.clone()]);
    assert_eq!(
        bands.iter().map(|b| b.band).collect::<Vec<_>>(),
        ["under 10B", "200B and over"]
    );
    assert!(bands[0].median_speed_error > 0.15, "{bands:?}");
    let md = |rs: &[RunResult]| metp_sim::report::runs_markdown(rs, RunTiming::Analytic, &["svg"]);
    assert!(md(&[small.clone(), large.clone()])
        .contains("the tool is the more optimistic on small models"));
    let slow = edited_run("nemo-2407-llama2-7b-8gpus", |run| {
        run["measured"]["value"] = (2.0 * 20803.0).into();
    });
    assert!(md(&[slow, large.clone()]).contains("the tool is the more optimistic on large models"));
    let exact = |id: &str, r: &RunResult| {
        let v = r.predicted;
        edited_run(id, move |run| run["measured"]["value"] = v.into())
    };
    let both = [
        exact("nemo-2407-llama2-7b-8gpus", &small),
        exact("nvidia-dgxc-2411-nemotron4-340b-128gpus", &large),
    ];
    assert!(md(&both).contains("no trend with the size beyond 5 points"));
}
