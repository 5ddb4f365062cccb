//! The module dependency direction of DESIGN §3 and the README's layout table, checked on the
//! source: each module may name only the crate modules listed for it. Comments and string
//! literals do not count. `analytic` and `sim` never depend on each other, nothing depends on
//! `cli`, and `plot` takes plain data. The layers form no circle, and neither do the files of
//! the folders where circles used to be (`backend`, `fitting`, `calibrate`, `config`). Every
//! module's doc says what it depends on and what it never depends on, and the README's table
//! says the same.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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
const ACYCLIC_FOLDERS: &[&str] = &["backend", "fitting", "calibrate", "config"];

/// Circles known and not yet taken apart: (folder, file, file). None is left (the last,
/// config's attention ↔ kernel_model, went when the fused-attention figures moved to
/// `attention.rs` and the choice among implementations to `kernel_model.rs`); an entry added
/// here fails the check once its circle is gone, so that it goes with it.
const KNOWN_CIRCLES: &[(&str, &str, &str)] = &[];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The text of a file without comments and string literals (line by line, as the checks
/// here need: `//` comments dropped, the inside of `"…"` blanked).
fn code_of(text: &str) -> String {
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

fn files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            files(&e.unwrap().path(), out);
        }
    } else if path.is_file() && path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

fn allowed() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    ALLOWED
        .iter()
        .map(|(m, deps)| (*m, deps.iter().copied().collect()))
        .collect()
}

/// A circle in `graph`, if there is one (depth-first search; the circle as a path).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
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
fn module_path(root: &Path, file: &Path) -> Vec<String> {
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
fn paths_named(root: &Path, file: &Path) -> Vec<Vec<String>> {
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

/// What a folder's root file (`mod.rs`) uses of its children, beyond `crate::`/`super::`
/// paths: children named without a prefix (`predict::Runtime`), private `use child::…`, and
/// names its `pub use child::…` facade brings in, used in its own code. Returns those children
/// and the facade (name → child), through which the children's `super::Name` are resolved.
fn root_uses(
    code: &str,
    children: &BTreeSet<String>,
) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let mut used = BTreeSet::new();
    let mut facade = BTreeMap::new();
    let mut body = String::new();
    let mut stmt: Option<(bool, String)> = None;
    for line in code.lines() {
        let t = line.trim_start();
        if stmt.is_none() {
            let public = ["pub use ", "pub(crate) use ", "pub(super) use "]
                .iter()
                .any(|k| t.starts_with(k));
            if public || t.starts_with("use ") {
                stmt = Some((public, String::new()));
            } else if t.starts_with("mod ") || t.starts_with("pub mod ") {
                continue;
            } else {
                body.push_str(line);
                body.push('\n');
                continue;
            }
        }
        let (public, text) = stmt.as_mut().unwrap();
        text.push_str(t);
        text.push(' ');
        if !t.contains(';') {
            continue;
        }
        let path = text[text.find("use ").unwrap() + 4..]
            .trim()
            .trim_end_matches(';');
        let path = path.trim_start_matches("self::");
        let (first, rest) = path.split_once("::").unwrap_or((path, ""));
        if children.contains(first) {
            if *public {
                let items = rest.trim_start_matches('{').trim_end_matches('}');
                for item in items.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                    let local = item
                        .rsplit(" as ")
                        .next()
                        .unwrap()
                        .rsplit("::")
                        .next()
                        .unwrap()
                        .trim();
                    facade.insert(local.to_string(), first.to_string());
                }
            } else {
                used.insert(first.to_string());
            }
        }
        stmt = None;
    }
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let chars: Vec<char> = body.chars().collect();
    let mut k = 0;
    while k < chars.len() {
        let starts_word =
            ident(chars[k]) && (k == 0 || !(ident(chars[k - 1]) || chars[k - 1] == ':'));
        if !starts_word {
            k += 1;
            continue;
        }
        let start = k;
        while k < chars.len() && ident(chars[k]) {
            k += 1;
        }
        let word: String = chars[start..k].iter().collect();
        let path_follows = chars.get(k) == Some(&':') && chars.get(k + 1) == Some(&':');
        if children.contains(&word) && path_follows {
            used.insert(word);
        } else if let Some(child) = facade.get(&word) {
            used.insert(child.clone());
        }
    }
    (used, facade)
}

/// The files and folders of `folder` (each a node; `mod.rs` is the node `mod`, test files
/// left out).
fn child_nodes(folder: &Path) -> BTreeSet<String> {
    std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|x| x == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|n| n != "mod" && n != "tests")
        .collect()
}

/// Which files of `folder` (under the source root `root`) use which (`mod` for its root file).
fn file_graph(root: &Path, folder: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let here = module_path(root, &folder.join("mod.rs"));
    let children = child_nodes(folder);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let root_text = std::fs::read_to_string(folder.join("mod.rs")).unwrap_or_default();
    let root_code = code_of(root_text.split("#[cfg(test)]").next().unwrap());
    let (root_used, facade) = root_uses(&root_code, &children);
    graph.entry("mod".into()).or_default().extend(root_used);
    let mut node_files: Vec<(String, PathBuf)> = vec![("mod".into(), folder.join("mod.rs"))];
    for c in &children {
        let mut fs = Vec::new();
        files(&folder.join(c), &mut fs);
        files(&folder.join(format!("{c}.rs")), &mut fs);
        node_files.extend(fs.into_iter().map(|f| (c.clone(), f)));
    }
    for (node, file) in node_files {
        if !file.exists() || file.file_stem().is_some_and(|s| s == "tests") {
            continue;
        }
        let entry = graph.entry(node.clone()).or_default();
        for p in paths_named(root, &file) {
            if p.len() <= here.len() || p[..here.len()] != here[..] {
                continue;
            }
            let name = &p[here.len()];
            let target = if children.contains(name) {
                name.clone()
            } else if let Some(child) = facade.get(name) {
                child.clone()
            } else {
                "mod".into()
            };
            if target != node {
                entry.insert(target);
            }
        }
    }
    graph
}

/// Every folder under `root`, `root` included.
fn folders(root: &Path, out: &mut Vec<PathBuf>) {
    out.push(root.to_path_buf());
    for e in std::fs::read_dir(root).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            folders(&p, out);
        }
    }
}

#[test]
fn the_files_of_the_named_folders_use_each_other_in_no_circle() {
    let mut problems = Vec::new();
    for top in ACYCLIC_FOLDERS {
        let mut all = Vec::new();
        folders(&src().join(top), &mut all);
        for folder in all.iter().filter(|f| f.join("mod.rs").exists()) {
            let name = folder.strip_prefix(src()).unwrap().display().to_string();
            let mut graph = file_graph(&src(), folder);
            for (_, a, b) in KNOWN_CIRCLES.iter().filter(|k| k.0 == name) {
                let uses = |x: &str, y: &str| graph.get(x).is_some_and(|d| d.contains(y));
                if !(uses(a, b) && uses(b, a)) {
                    problems.push(format!(
                        "{name}: {a} ↔ {b} is gone: remove it from KNOWN_CIRCLES"
                    ));
                }
                graph.get_mut(*a).map(|d| d.remove(*b));
            }
            if let Some(c) = find_cycle(&graph) {
                problems.push(format!(
                    "{}: {}",
                    folder.strip_prefix(src()).unwrap().display(),
                    c.join(" → ")
                ));
            }
        }
    }
    assert!(problems.is_empty(), "files in a circle: {problems:?}");
}

/// The file graph sees what files name — `super::` paths, groups, a root naming a child — and
/// not a root's `pub use` facade: a circle through two files is found, a facade is not one.
#[test]
fn the_file_graph_sees_circles_and_not_facades() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("x");
    std::fs::create_dir(&folder).unwrap();
    let write = |name: &str, text: &str| std::fs::write(folder.join(name), text).unwrap();
    write(
        "mod.rs",
        "//! X.\nmod a;\nmod b;\npub use a::A;\npub struct Root;\n",
    );
    write("a.rs", "use super::{b::B, Root};\npub struct A;\n");
    write(
        "b.rs",
        "pub struct B;\n// super::a in a comment\nlet s = \"super::a\";\n",
    );
    let g = file_graph(dir.path(), &folder);
    assert_eq!(find_cycle(&g), None, "{g:?}");
    assert_eq!(g["a"], ["b", "mod"].map(String::from).into(), "{g:?}");
    write(
        "b.rs",
        "pub struct B;\nfn f() -> crate::x::a::A { crate::x::a::A }\n",
    );
    let g = file_graph(dir.path(), &folder);
    assert_eq!(find_cycle(&g).map(|c| c.len()), Some(3), "{g:?}");
    write("b.rs", "pub struct B;\n");
    write(
        "mod.rs",
        "//! X.\nmod a;\nmod b;\npub struct Root;\nfn f() { a::A; }\n",
    );
    let g = file_graph(dir.path(), &folder);
    assert!(
        find_cycle(&g).is_some(),
        "a root using a child that uses it: {g:?}"
    );
    // The same through the facade: the root's code uses what it re-exports.
    write(
        "mod.rs",
        "//! X.\nmod a;\nmod b;\npub use a::A;\npub struct Root;\nfn f() -> A { A }\n",
    );
    let g = file_graph(dir.path(), &folder);
    assert!(find_cycle(&g).is_some(), "through the facade: {g:?}");
}

/// The doc comment at the top of a file, as one line of text.
fn module_doc(file: &Path) -> String {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| l.trim_start_matches("//!").trim())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Backticked names in `text`.
fn ticked(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// A module doc's sentence "Depends on `a`, `b`; never on `c`." (or "Depends only on …",
/// "Depends on nothing …"): the names before "never" and after it.
fn layer_sentence(doc: &str) -> Option<(BTreeSet<String>, BTreeSet<String>)> {
    let start = ["Depends on", "Depends only on"]
        .iter()
        .filter_map(|k| doc.find(k))
        .min()?;
    let mut end = doc.len();
    let mut in_tick = false;
    for (i, c) in doc[start..].char_indices() {
        if c == '`' {
            in_tick = !in_tick;
        }
        if c == '.' && !in_tick && doc[start + i + 1..].starts_with(' ') {
            end = start + i;
            break;
        }
    }
    let sentence = &doc[start..end];
    let (deps, never) = match sentence.find("never") {
        Some(n) => (&sentence[..n], &sentence[n..]),
        None => (sentence, ""),
    };
    Some((ticked(deps), ticked(never)))
}

/// The root file of a top-level module.
fn root_file(module: &str) -> PathBuf {
    let dir = src().join(module).join("mod.rs");
    if dir.exists() {
        dir
    } else {
        src().join(format!("{module}.rs"))
    }
}

/// Each module's doc says what it may depend on — exactly the list above — and what it never
/// depends on (names that are not in the list).
#[test]
fn every_module_doc_states_its_layer() {
    let allowed = allowed();
    let modules: BTreeSet<&str> = ALLOWED.iter().map(|(m, _)| *m).chain(["cli"]).collect();
    let mut problems = Vec::new();
    for (module, deps) in &allowed {
        let doc = module_doc(&root_file(module));
        let Some((said, never)) = layer_sentence(&doc) else {
            problems.push(format!("{module}: no \"Depends on …\" sentence in its doc"));
            continue;
        };
        let want: BTreeSet<String> = deps.iter().map(|s| s.to_string()).collect();
        if said != want {
            problems.push(format!("{module}: doc says {said:?}, the layout {want:?}"));
        }
        if never.is_empty() && !deps.is_empty() {
            problems.push(format!("{module}: doc says nothing it never depends on"));
        }
        for n in &never {
            if deps.contains(n.as_str()) || !modules.contains(n.as_str()) {
                problems.push(format!(
                    "{module}: \"never on `{n}`\" is not a module it avoids"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "module docs: {problems:#?}");
    // The sentence is read as meant.
    assert_eq!(
        layer_sentence("X. Depends on `a`, `b` and `error`; never on `c`. More `d`."),
        Some((
            ["a", "b", "error"].map(String::from).into(),
            ["c"].map(String::from).into()
        ))
    );
}

/// The README's layout table, row by row: module → (what it holds, depends on, never on).
fn readme_rows() -> BTreeMap<String, (String, BTreeSet<String>, BTreeSet<String>)> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = readme
        .split("## Layout")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has a Layout section");
    let mut rows = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let module = cells[1].trim_matches('`').to_string();
        // The dependencies are the names before an em dash (after it: what it never uses).
        let mut parts = cells[3].splitn(2, '—');
        let deps = ticked(parts.next().unwrap_or(""));
        let never = ticked(parts.next().unwrap_or(""));
        rows.insert(module, (cells[2].to_string(), deps, never));
    }
    rows
}

/// The README's layout table lists, for every module, exactly the dependencies allowed here,
/// and what the module's doc says it never depends on.
#[test]
fn the_readme_layout_table_is_this_list() {
    let mut rows = readme_rows();
    for (module, allowed) in ALLOWED {
        let want: BTreeSet<String> = allowed.iter().map(|s| s.to_string()).collect();
        let row = rows.remove(*module);
        assert_eq!(
            row.as_ref().map(|r| &r.1),
            Some(&want),
            "README layout row for `{module}` vs tests/it/layering.rs"
        );
        let never = layer_sentence(&module_doc(&root_file(module)))
            .map(|s| s.1)
            .unwrap_or_default();
        assert_eq!(
            row.map(|r| r.2),
            Some(never),
            "README layout row for `{module}`: \"— never …\" vs the module's doc"
        );
    }
    assert_eq!(
        rows.remove("cli").map(|r| r.1),
        Some(BTreeSet::new()),
        "README row for `cli`"
    );
    assert!(rows.is_empty(), "README rows for unknown modules: {rows:?}");
}

/// The files and folders a README row names (`lower/pipeline.rs`, `cpu/`) exist in its
/// module, so that the table does not describe files that moved.
#[test]
fn the_readme_layout_table_names_files_that_exist() {
    let mut problems = Vec::new();
    for (module, (holds, _, _)) in readme_rows() {
        for name in ticked(&holds) {
            let looks_like_path = name.ends_with(".rs") || name.ends_with('/');
            if looks_like_path && !src().join(&module).join(&name).exists() {
                problems.push(format!("{module}: `{name}`"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "README layout names missing files: {problems:?}"
    );
}

/// Every folder of the named parts has a module doc that says what it holds and what it
/// depends on, and the crate paths it says it never uses are not used by its files.
#[test]
fn every_folder_doc_states_what_it_never_uses() {
    let mut problems = Vec::new();
    for top in ACYCLIC_FOLDERS {
        let mut all = Vec::new();
        folders(&src().join(top), &mut all);
        for folder in all {
            let root = folder.join("mod.rs");
            if !root.exists() {
                continue;
            }
            let name = folder.strip_prefix(src()).unwrap().display().to_string();
            let doc = module_doc(&root);
            let Some((_, never)) = layer_sentence(&doc) else {
                problems.push(format!("{name}: no \"Depends on …\" sentence"));
                continue;
            };
            if never.is_empty() {
                problems.push(format!("{name}: says nothing it never depends on"));
            }
            let mut fs = Vec::new();
            files(&folder, &mut fs);
            for f in fs {
                let used: Vec<String> = paths_named(&src(), &f)
                    .iter()
                    .map(|p| p.join("::"))
                    .collect();
                for n in &never {
                    if used
                        .iter()
                        .any(|u| u == n || u.starts_with(&format!("{n}::")))
                    {
                        problems.push(format!(
                            "{name} says never `{n}`, but {} uses it",
                            f.strip_prefix(src()).unwrap().display()
                        ));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "folder docs: {problems:#?}");
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
