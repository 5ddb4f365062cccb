//! The files of the folders where circles used to be (`backend`, `fitting`, `calibrate`,
//! `config`, and every folder below them) use each other in no circle: which file uses which,
//! read from the paths each names and from what a folder's root uses of its children.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::layering::{code_of, files, find_cycle, module_path, named_folders, paths_named, src};

/// Circles known and not yet taken apart: (folder, file, file). None is left (the last,
/// config's attention ↔ kernel_model, went when the fused-attention figures moved to
/// `attention.rs` and the choice among implementations to `kernel_model.rs`); an entry added
/// here fails the check once its circle is gone, so that it goes with it.
const KNOWN_CIRCLES: &[(&str, &str, &str)] = &[];

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

#[test]
fn the_files_of_the_named_folders_use_each_other_in_no_circle() {
    let mut problems = Vec::new();
    for folder in named_folders().iter().filter(|f| f.join("mod.rs").exists()) {
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
