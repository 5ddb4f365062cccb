//! The module dependency direction of DESIGN §3 and the README's layout table, checked on the
//! source: each module may name only the crate modules listed for it. Comments and string
//! literals do not count. `analytic` and `sim` never depend on each other, nothing depends on
//! `cli`, and `plot` takes plain data.

use std::collections::BTreeSet;
use std::path::Path;

const ALLOWED: &[(&str, &[&str])] = &[
    ("error", &[]),
    ("inputs", &[]),
    ("atomic", &["error", "inputs"]),
    ("config", &["error", "inputs"]),
    ("memory", &["config", "error"]),
    ("search", &["config", "memory", "error"]),
    ("schedule", &["config", "memory", "error"]),
    ("cost", &["config", "schedule", "error"]),
    ("analytic", &["config", "cost", "schedule", "error"]),
    ("sim", &["config", "cost", "memory", "schedule", "error"]),
    (
        "evaluate",
        &["analytic", "config", "memory", "schedule", "sim", "error"],
    ),
    ("exec", &["config", "memory", "error"]),
    ("plot", &["atomic", "error"]),
    ("shard", &["atomic", "config", "error"]),
    (
        "calibrate",
        &[
            "atomic", "config", "cost", "error", "exec", "memory", "schedule",
        ],
    ),
    (
        "sweep",
        &["config", "evaluate", "memory", "search", "shard", "error"],
    ),
    (
        "validate",
        &[
            "analytic", "config", "evaluate", "memory", "schedule", "search", "sim", "error",
        ],
    ),
    (
        "plan",
        &["config", "evaluate", "memory", "shard", "sim", "error"],
    ),
    (
        "report",
        &[
            "analytic",
            "atomic",
            "calibrate",
            "config",
            "evaluate",
            "memory",
            "plan",
            "plot",
            "schedule",
            "search",
            "shard",
            "sim",
            "sweep",
            "validate",
            "error",
        ],
    ),
];

/// Crate modules named in code (not comments, not string literals) of one file.
fn crate_refs(text: &str, out: &mut BTreeSet<String>) {
    for line in text.lines() {
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let in_string = rest[..i].matches('"').count() % 2 == 1;
            let after = &rest[i + "crate::".len()..];
            if !in_string {
                if let Some(group) = after.strip_prefix('{') {
                    let end = group.find('}').unwrap_or(group.len());
                    for part in group[..end].split(',') {
                        let name: String = part
                            .trim()
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect();
                        if !name.is_empty() {
                            out.insert(name);
                        }
                    }
                } else {
                    let name: String = after
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        out.insert(name);
                    }
                }
            }
            rest = after;
        }
    }
}

fn files(path: &Path, out: &mut Vec<std::path::PathBuf>) {
    if path.is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            files(&e.unwrap().path(), out);
        }
    } else if path.is_file() && path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

#[test]
fn modules_depend_only_on_what_the_layout_allows() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules: BTreeSet<&str> = ALLOWED.iter().map(|(m, _)| *m).chain(["cli"]).collect();
    let mut problems = Vec::new();
    for (module, allowed) in ALLOWED {
        let mut paths = Vec::new();
        files(&src.join(module), &mut paths);
        files(&src.join(format!("{module}.rs")), &mut paths);
        assert!(!paths.is_empty(), "no source for module {module}");
        let mut refs = BTreeSet::new();
        for p in &paths {
            crate_refs(&std::fs::read_to_string(p).unwrap(), &mut refs);
        }
        for r in refs {
            if r != *module && modules.contains(r.as_str()) && !allowed.contains(&r.as_str()) {
                problems.push(format!("{module} uses crate::{r}"));
            }
        }
    }
    assert!(problems.is_empty(), "layering violations: {problems:?}");
}

/// The README's layout table lists, for every module, exactly the dependencies allowed here.
#[test]
fn the_readme_layout_table_is_this_list() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = readme
        .split("## Layout")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has a Layout section");
    let ticked = |cell: &str| -> BTreeSet<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let mut rows = std::collections::BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let module = cells[1].trim_matches('`').to_string();
        // The dependencies are the names before an em dash (after it: what it never uses).
        let deps = cells[3].split('—').next().unwrap_or("");
        rows.insert(module, ticked(deps));
    }
    for (module, allowed) in ALLOWED {
        let want: BTreeSet<String> = allowed.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            rows.remove(*module),
            Some(want),
            "README layout row for `{module}` vs tests/it/layering.rs"
        );
    }
    assert_eq!(
        rows.remove("cli"),
        Some(BTreeSet::new()),
        "README row for `cli`"
    );
    assert!(rows.is_empty(), "README rows for unknown modules: {rows:?}");
}

/// The crate documentation names every module.
#[test]
fn the_crate_docs_name_every_module() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    for line in lib.lines().filter(|l| l.starts_with("pub mod ")) {
        let m = line.trim_start_matches("pub mod ").trim_end_matches(';');
        assert!(
            lib.contains(&format!("[`{m}`]")),
            "src/lib.rs docs do not name `{m}`"
        );
    }
}

/// Every module of the crate has a row (a new module cannot escape the check), and only
/// modules that exist do.
#[test]
fn every_module_is_listed() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = BTreeSet::new();
    for e in std::fs::read_dir(&src).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir()
            || (path.extension().is_some_and(|x| x == "rs") && name != "lib" && name != "main")
        {
            found.insert(name);
        }
    }
    let listed: BTreeSet<String> = ALLOWED
        .iter()
        .map(|(m, _)| m.to_string())
        .chain(["cli".to_string()])
        .collect();
    assert_eq!(found, listed);
}

#[test]
fn the_checker_sees_grouped_imports_and_ignores_comments_and_strings() {
    let mut refs = BTreeSet::new();
    crate_refs(
        "use crate::{sim::X, cost};\n// crate::cli in a comment\nlet s = \"crate::plot\";\nuse crate::analytic::Y;",
        &mut refs,
    );
    let got: Vec<&str> = refs.iter().map(String::as_str).collect();
    assert_eq!(got, ["analytic", "cost", "sim"]);
}
