//! Class 4 — lenient parsing: a model file `{…} xyz` or two JSON objects back to back were
//! accepted, and reading had no size cap (`--model /dev/zero` read until memory ran out).

use std::io::Write;

use super::{bundled, refuses};

#[test]
fn trailing_content_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = serde_json::to_string(&bundled("models", "llama2-7b")).unwrap();
    for (name, text) in [
        ("words.json", format!("{model} xyz")),
        ("two.json", format!("{model}{model}")),
        ("comma.json", format!("{model},")),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let e = refuses(&["memory", "--model", path.to_str().unwrap()], 1);
        assert!(e.contains("content after the JSON value"), "{name}: {e}");
    }
    // Whitespace after the value is fine.
    let path = dir.path().join("ok.json");
    std::fs::write(&path, format!("{model}\n\n  ")).unwrap();
    super::succeeds(&["memory", "--model", path.to_str().unwrap()]);
    // Measurement files and kernel lists go through the same reader.
    let path = dir.path().join("kernels.json");
    std::fs::write(&path, "[] []").unwrap();
    let e = refuses(
        &[
            "kernels",
            "--hw",
            "hgx-h200",
            "--input",
            path.to_str().unwrap(),
        ],
        1,
    );
    assert!(e.contains("content after the JSON value"), "{e}");
}

#[test]
fn input_files_are_capped() {
    if std::path::Path::new("/dev/zero").exists() {
        let e = refuses(&["memory", "--model", "/dev/zero"], 1);
        assert!(e.contains("larger than 8 MiB"), "{e}");
        let e = refuses(&["memory", "--hw", "/dev/zero"], 1);
        assert!(e.contains("larger than 8 MiB"), "{e}");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.json");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(b"{\"name\": \"").unwrap();
    f.write_all(&vec![b'a'; 9 << 20]).unwrap();
    f.write_all(b"\"}").unwrap();
    drop(f);
    let e = refuses(&["memory", "--model", path.to_str().unwrap()], 1);
    assert!(e.contains("larger than 8 MiB"), "{e}");
    let e = refuses(&["memory", "--model", dir.path().to_str().unwrap()], 1);
    assert!(e.contains("directory"), "{e}");
}
