//! Issue 22, class 5 — flags offered and then impossible: `overlap` listed `--pp`, `--pp-interleave`
//! and `--cp` and then refused them with false statements ("the model has 1 layer", "use
//! --method tp-sp" where overlap has no `--method`). A command lists only the flags it can use:
//! overlap's study is METP on one layer, so it has none of them (a usage error, exit 2), and
//! the commands that can run pipelines and context parallelism still list them. (The
//! `--global-batch` of `sweep`, `maxseq` and `memory` is issue 22's other part.)

use super::{command, refuses};

fn help(cmd: &str) -> String {
    let out = command(&[cmd, "--help"]).output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn overlap_lists_no_pipeline_or_context_parallel_flags() {
    let h = help("overlap");
    for flag in ["--pp ", "--pp-interleave", "--cp ", "--global-batch"] {
        assert!(!h.contains(flag), "overlap --help lists {flag}:\n{h}");
    }
    for flag in ["--pp", "--pp-interleave", "--cp"] {
        let e = refuses(&["overlap", flag, "2"], 2);
        assert!(e.contains("unexpected argument"), "{e}");
    }
    for cmd in ["memory", "maxseq", "simulate", "sweep"] {
        let h = help(cmd);
        for flag in ["--pp ", "--pp-interleave", "--cp "] {
            assert!(h.contains(flag), "{cmd} --help lacks {flag}");
        }
    }
}
