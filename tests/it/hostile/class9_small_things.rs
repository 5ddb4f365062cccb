//! Class 9 — small things: a model name with a NUL byte made every SVG malformed XML; names
//! had no length cap; `sweep --model a,b` split the list but then looked up "a,b" as one name;
//! `intra_node.collective_latency_s` was read but changed nothing.

use metp_sim::config::{load_hardware, load_model, MethodId};
use metp_sim::evaluate::{Evaluation, SimulateOptions};
use metp_sim::sim::LinkModel;

use super::{bundled, refuses, small_sweep, succeeds, workload_p8, write};

#[test]
fn names_with_control_characters_or_overlong_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (name, why) in [
        ("bad\u{0}name", "U+0000"),
        ("tab\tname", "U+0009"),
        (&*"x".repeat(257), "more than 256"),
    ] {
        let mut m = bundled("models", "llama2-7b");
        m["name"] = name.into();
        let path = write(dir.path(), "m.json", &m);
        let e = refuses(&["memory", "--model", &path], 1);
        assert!(e.contains("field 'name'") && e.contains(why), "{e}");
        let mut hw = bundled("hardware-profiles", "dgx-a100-80gb");
        hw["name"] = name.into();
        let path = write(dir.path(), "h.json", &hw);
        let e = refuses(&["memory", "--hw", &path], 1);
        assert!(e.contains("field 'name'") && e.contains(why), "{e}");
    }
}

/// Markup characters in a name are escaped in the SVG text (the plots stay well-formed XML).
#[test]
fn markup_in_a_name_is_escaped_in_svg() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = bundled("models", "gpt3-1.3b");
    m["name"] = "a<b & \"c\"".into();
    let path = write(dir.path(), "m.json", &m);
    let out = dir.path().join("out");
    succeeds(&small_sweep(out.to_str().unwrap(), &["--model", &path]));
    let mut svgs = 0;
    for e in std::fs::read_dir(&out).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "svg") {
            let text = std::fs::read_to_string(e.path()).unwrap();
            assert!(!text.contains("a<b"), "{:?} has the raw name", e.path());
            assert!(!text.contains('\0'));
            svgs += 1;
        }
    }
    assert!(svgs > 0);
}

/// `sweep --model a,b`: one sweep, one plot folder per model, both models' points.
#[test]
fn sweep_takes_a_list_of_models() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    succeeds(&small_sweep(
        out.to_str().unwrap(),
        &["--model", "gpt3-1.3b,gpt3-2.7b"],
    ));
    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert!(csv.contains("1.3B,") && csv.contains("2.7B,"), "{csv}");
    let folders = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .count();
    assert_eq!(folders, 2);
    let e = refuses(
        &["sweep", "--model", "gpt3-1.3b,gpt3-1.3b", "--seq", "4k"],
        2,
    );
    assert!(e.contains("listed twice"), "{e}");
    let e = refuses(&["sweep", "--model", "gpt3-1.3b,", "--seq", "4k"], 2);
    assert!(e.contains("empty name"), "{e}");
    let e = refuses(&["sweep", "--seq", "4k", "--dp", "2"], 2);
    assert!(e.contains("dp = 1"), "{e}");
}

/// `intra_node.collective_latency_s` stays in the schema (validated: a latency of at most 1 s)
/// but the time model prices collectives per ring step from the point-to-point α, as NCCL's
/// per-step hardware latency (src/sim/collective.rs; hardware-profiles/README.md says so): a
/// profile that differs only in it gives the same step. The fabrics work decides whether a
/// collective algorithm uses it.
#[test]
fn collective_latency_is_validated_and_documented_as_unused() {
    let dir = tempfile::tempdir().unwrap();
    let mut hw = bundled("hardware-profiles", "dgx-a100-80gb");
    hw["intra_node"]["collective_latency_s"]["value"] = 5.0.into();
    let path = write(dir.path(), "h.json", &hw);
    let e = refuses(&["memory", "--hw", &path], 1);
    assert!(e.contains("collective_latency_s"), "{e}");
    let step = |latency: f64| {
        let mut hardware = load_hardware("dgx-a100-80gb").unwrap();
        hardware.intra_node.collective_latency_s.value = latency;
        let mut model = load_model("llama2-7b").unwrap();
        model.layers = 2;
        let w = workload_p8(model, hardware, MethodId::Tp);
        Evaluation::new(w)
            .simulate(SimulateOptions::full(LinkModel::Ideal))
            .unwrap()
            .metrics
            .step_time_s
    };
    assert_eq!(step(0.0), step(1e-3));
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/hardware-profiles/README.md"
    ))
    .unwrap();
    assert!(
        readme.contains("collective_latency_s") && readme.contains("not used by the time model")
    );
}
