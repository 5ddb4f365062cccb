//! The module dependency direction of DESIGN §3, checked on the source: each module may name
//! only the crate modules listed for it (comments and string literals do not count), every module
//! has a row, and the layers form no circle. `analytic` and `sim` never depend on each other,
//! nothing depends on `cli`, and `plot` takes plain data.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub(crate) const ALLOWED: &[(&str, &[&str])] = &[
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
    (
        "backend",
        &["config", "cost", "memory", "schedule", "error"],
    ),
    (
        "fitting",
        &["backend", "config", "cost", "schedule", "error"],
    ),
    (
        "nccl_tests",
        &["atomic", "config", "cost", "schedule", "error"],
    ),
    ("plot", &["atomic", "error"]),
    ("shard", &["atomic", "config", "error"]),
    (
        "calibrate",
        &["atomic", "backend", "config", "fitting", "error"],
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
        "runs",
        &["config", "cost", "evaluate", "schedule", "sim", "error"],
    ),
    (
        "report",
        &[
            "analytic",
            "atomic",
            "backend",
            "calibrate",
            "config",
            "evaluate",
            "fitting",
            "memory",
            "nccl_tests",
            "plan",
            "plot",
            "runs",
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

/// The folders whose files must not use each other in a circle (the ones issue 23 named:
/// calibrate's backend ↔ predict, kernel_fit ↔ price ↔ sessions, config's hardware ↔
/// kernel_model), with every folder below them.
pub(crate) const ACYCLIC_FOLDERS: &[&str] = &["backend", "fitting", "calibrate", "config"];

pub(crate) fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The text of a file without comments and string literals (line by line, as the checks
/// here need: `//` comments dropped, the inside of `"…"` blanked).
pub(crate) fn code_of(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut in_string = false;
        let mut prev = ' ';
        let mut kept = String::new();
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if !in_string && c == '/' && chars.peek() == Some(&'/') {
                break;
            }
            if c == '"' && prev != '\\' && prev != '\'' {
                in_string = !in_string;
                kept.push('"');
            } else if !in_string {
                kept.push(c);
            }
            prev = c;
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

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

pub(crate) fn files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            files(&e.unwrap().path(), out);
        }
    } else if path.is_file() && path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// A circle in `graph`, if there is one (depth-first search; the circle as a path).
pub(crate) fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let start = path.iter().position(|p| p == n).unwrap();
                let mut c = path[start..].to_vec();
                c.push(n.to_string());
                return Some(c);
            }
            _ => {}
        }
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, graph, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if let Some(c) = visit(n, graph, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

#[test]
fn modules_depend_only_on_what_the_layout_allows() {
    let src = src();
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

/// The layers are a hierarchy: no module may (even indirectly) use itself.
#[test]
fn the_layers_form_no_circle() {
    let graph: BTreeMap<String, BTreeSet<String>> = ALLOWED
        .iter()
        .map(|(m, deps)| (m.to_string(), deps.iter().map(|d| d.to_string()).collect()))
        .collect();
    assert_eq!(find_cycle(&graph), None, "the allowed layers have a circle");
    let mut circle = graph.clone();
    circle.get_mut("config").unwrap().insert("calibrate".into());
    assert!(
        find_cycle(&circle).is_some(),
        "the circle check finds a circle"
    );
}

/// One file's place in the module tree: `src/backend/cpu/mod.rs` is `backend::cpu`,
/// `src/backend/cpu/device.rs` is `backend::cpu::device`.
pub(crate) fn module_path(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// The crate paths one file names in code (before its `#[cfg(test)]` part): `crate::`, `super::`
/// and `self::` paths resolved to absolute module paths, each group item on its own.
pub(crate) fn paths_named(root: &Path, file: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(file).unwrap();
    let text = text.split("#[cfg(test)]").next().unwrap();
    let code = code_of(text);
    let here = module_path(root, file);
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let starts = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|s| code[i..].starts_with(s));
        let boundary = i == 0 || !ident(bytes[i - 1]) && bytes[i - 1] != b':';
        let Some(start) = starts.filter(|_| boundary) else {
            i += 1;
            continue;
        };
        // Read `a::b::c` and an optional `::{x, y::z}` group.
        let mut j = i;
        let mut segs: Vec<String> = Vec::new();
        loop {
            let k = j;
            while j < bytes.len() && ident(bytes[j]) {
                j += 1;
            }
            segs.push(code[k..j].to_string());
            if code[j..].starts_with("::") && j + 2 < bytes.len() && ident(bytes[j + 2]) {
                j += 2;
            } else {
                break;
            }
        }
        let mut base: Vec<String> = match start {
            "crate::" => Vec::new(),
            "self::" => here.clone(),
            _ => {
                let mut b = here.clone();
                b.pop();
                b
            }
        };
        let mut rest = &segs[1..];
        while rest.first().is_some_and(|s| s == "super") {
            base.pop();
            rest = &rest[1..];
        }
        base.extend(rest.iter().cloned());
        if code[j..].starts_with("::{") {
            let end = code[j..].find('}').map_or(code.len(), |e| j + e);
            for item in code[j + 3..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| ident(*c as u8))
                    .collect();
                if !name.is_empty() && name != "self" {
                    let mut p = base.clone();
                    p.push(name);
                    out.push(p);
                }
            }
            out.push(base);
            j = end;
        } else {
            out.push(base);
        }
        i = j.max(i + 1);
    }
    out
}

/// Every folder of the named parts ([`ACYCLIC_FOLDERS`]), each top folder included.
pub(crate) fn named_folders() -> Vec<PathBuf> {
    let mut all = Vec::new();
    for top in ACYCLIC_FOLDERS {
        folders(&src().join(top), &mut all);
    }
    all
}

/// Every folder under `root`, `root` included.
pub(crate) fn folders(root: &Path, out: &mut Vec<PathBuf>) {
    out.push(root.to_path_buf());
    for e in std::fs::read_dir(root).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            folders(&p, out);
        }
    }
}

/// Every module of the crate has a row (a new module cannot escape the check), and only
/// modules that exist do.
#[test]
fn every_module_is_listed() {
    let src = src();
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
