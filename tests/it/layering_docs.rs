//! The layout as written: every module's doc and every folder's doc say what it depends on and
//! what it never depends on (and the folders' files keep to it), the README's layout table says
//! the same and names files that exist, and the crate docs name every module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::layering::{files, named_folders, paths_named, src, ALLOWED};

fn allowed() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    ALLOWED
        .iter()
        .map(|(m, deps)| (*m, deps.iter().copied().collect()))
        .collect()
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
    for folder in named_folders() {
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
