//! Splitting a study (`sweep`, `plan`) over the machines a scheduler already runs — a Slurm job
//! array, a Kubernetes indexed Job — and the checks before its parts are joined again.
//!
//! - [`Shard`]: `--shard K/N`, part K (0-based) of N. Items (sweep points, plan candidate
//!   groups) are dealt round-robin over a fixed pseudo-random shuffle of their canonical order
//!   ([`Shard::owners`]): every part gets ⌊items/N⌋ or one more, and a fair mix of cheap and
//!   expensive ones — dealt over the canonical order itself, a part would get every N-th
//!   length (all the longest ones when N is the number of lengths) or one ZeRO stage of every
//!   plan configuration. The split depends on nothing but N and the number of items.
//! - [`ShardFile`]: what one part writes — the study's kind, a fingerprint of everything that
//!   decides its results, the command one unsharded run would have been, and the part's data.
//! - [`check_set`]: before `merge` joins anything, every file must be a part of the same study
//!   (kind, fingerprint, N, command line), and every part 0..N must be there exactly once; each
//!   refusal is one line naming the files.
//!
//! What a part holds and how parts join is the study's own (`sweep::merge`, `plan::merge`);
//! this module knows only the envelope. Depends on `atomic`, `config` (limits, capped reads)
//! and `error`; never on `sweep`, `plan`, `report` or `cli`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::atomic::{to_json, write_atomic};
use crate::config::{limits, parse_json, read_text_capped};
use crate::error::{Error, Result};

/// Part `index` (0-based) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// K, in 0..N.
    pub index: u64,
    /// N ≥ 1.
    pub count: u64,
}

impl Shard {
    /// The whole study, unsplit.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Parses `K/N` (0 ≤ K < N ≤ [`limits::MAX_SHARDS`]); anything else is a usage error.
    pub fn parse(flag: &str, text: &str) -> Result<Shard> {
        let bad = |why: &str| Error::arg(flag, format!("'{text}': {why}"));
        let (k, n) = text
            .split_once('/')
            .ok_or_else(|| bad("expected K/N, part K (0-based) of N, e.g. 0/4"))?;
        let num = |s: &str| {
            s.trim()
                .parse::<u64>()
                .map_err(|_| bad("K and N must be whole numbers, e.g. 0/4"))
        };
        let (index, count) = (num(k)?, num(n)?);
        if count == 0 {
            return Err(bad("N must be at least 1"));
        }
        if count > limits::MAX_SHARDS {
            return Err(bad(&format!(
                "N is more than {} (config::limits)",
                limits::MAX_SHARDS
            )));
        }
        if index >= count {
            return Err(bad("K must be less than N (parts are numbered 0 to N-1)"));
        }
        Ok(Shard { index, count })
    }

    /// The part (0..N) each of `total` items in canonical order belongs to: item
    /// `order[j]` of a fixed shuffle (Fisher–Yates driven by splitmix64 from a constant seed)
    /// goes to part j mod N. The same on every machine.
    pub fn owners(count: u64, total: usize) -> Vec<u64> {
        let mut order: Vec<usize> = (0..total).collect();
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        for i in (1..total).rev() {
            let j = (next() % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        let mut owner = vec![0; total];
        for (j, &item) in order.iter().enumerate() {
            owner[item] = j as u64 % count.max(1);
        }
        owner
    }

    /// How many of `total` items this part owns.
    pub fn len_of(self, total: usize) -> usize {
        let total = total as u64;
        (total / self.count + u64::from(total % self.count > self.index)) as usize
    }

    /// `sweep.shard-2-of-4.json`.
    pub fn file_name(self, kind: &str) -> String {
        format!("{kind}.shard-{}-of-{}.json", self.index, self.count)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// What one part of a study writes (module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardFile<T> {
    /// `metp-sim`.
    pub tool: String,
    /// The crate version that wrote it (part of the fingerprint: results may change between
    /// versions).
    pub version: String,
    /// `sweep` or `plan`.
    pub kind: String,
    /// Which part.
    pub shard: Shard,
    /// [`fingerprint`] of the study.
    pub fingerprint: String,
    /// The command line one unsharded run would have been (this part's, without `--shard`):
    /// what the merged output folder's manifest records.
    pub command: Vec<String>,
    /// The part's results.
    pub data: T,
}

impl<T: Serialize> ShardFile<T> {
    /// A part of a study of `kind` whose spec serialises to `study` (the fingerprint's input).
    pub fn new(kind: &str, shard: Shard, study: &str, command: Vec<String>, data: T) -> Self {
        ShardFile {
            tool: "metp-sim".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            kind: kind.into(),
            shard,
            fingerprint: fingerprint(kind, study),
            command,
            data,
        }
    }

    /// Writes the file atomically as `dir/<kind>.shard-K-of-N.json`; returns its path. No
    /// folder lock: parts write different files into one folder at the same time.
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        let path = dir.join(self.shard.file_name(&self.kind));
        write_atomic(&path, to_json(self).as_bytes())?;
        Ok(path)
    }
}

/// FNV-1a (64 bits) of the kind, the crate version and the study's canonical JSON, in hex: the
/// same study gives the same fingerprint on every machine.
pub fn fingerprint(kind: &str, study: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in kind
        .bytes()
        .chain([0])
        .chain(env!("CARGO_PKG_VERSION").bytes())
        .chain([0])
        .chain(study.bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The command line without `--shard K/N` (or `--shard=K/N`).
pub fn unsharded_command(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip = false;
    for a in args {
        if skip {
            skip = false;
        } else if a == "--shard" {
            skip = true;
        } else if !a.starts_with("--shard=") {
            out.push(a);
        }
    }
    out
}

/// Shard files named by `inputs`: each file as given, and in each folder every
/// `*.shard-K-of-N.json`, in name order.
pub fn expand(inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let entries = std::fs::read_dir(input).map_err(|source| Error::Io {
                path: input.clone(),
                source,
            })?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.contains(".shard-") && n.ends_with(".json"))
                })
                .collect();
            if found.is_empty() {
                return Err(Error::Parse {
                    path: input.clone(),
                    message: "holds no shard files (*.shard-K-of-N.json)".into(),
                });
            }
            found.sort();
            out.append(&mut found);
        } else {
            out.push(input.clone());
        }
    }
    Ok(out)
}

/// A shard file's envelope ([`read`]): everything but the data, which is read later, part by
/// part ([`read_data`]), so that a merge never holds more than one part's text.
pub type Envelope = ShardFile<()>;

/// Skips any JSON value (the data, while the envelope is read).
struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| Skip)
    }
}

/// The size of every file in `paths`, checked before any is read: each a regular file of at most
/// [`limits::MAX_SHARD_FILE_BYTES`], all together at most [`limits::MAX_MERGE_BYTES`].
pub fn check_sizes(paths: &[PathBuf]) -> Result<()> {
    let mut total: u64 = 0;
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        // Read twice (the envelope, then the data): a file a part wrote, not a pipe or device.
        if !meta.is_file() {
            return Err(Error::Parse {
                path: path.clone(),
                message: "not a regular file (a shard file is what one part of a study wrote)"
                    .into(),
            });
        }
        let len = meta.len();
        if len > limits::MAX_SHARD_FILE_BYTES {
            return Err(Error::Parse {
                path: path.clone(),
                message: format!(
                    "{len} bytes, larger than {} MiB, the most a shard file may hold \
                     (config::limits); not read",
                    limits::MAX_SHARD_FILE_BYTES >> 20
                ),
            });
        }
        total = total.saturating_add(len);
    }
    if total > limits::MAX_MERGE_BYTES {
        return Err(Error::TooLarge {
            message: format!(
                "the {} shard files hold {total} bytes in all, more than the {} MiB one merge \
                 reads (config::limits); split the study into fewer parts",
                paths.len(),
                limits::MAX_MERGE_BYTES >> 20
            ),
        });
    }
    Ok(())
}

/// Reads one shard file's envelope (the file at most [`limits::MAX_SHARD_FILE_BYTES`], its
/// size checked before it is read) and checks it ([`ShardFile::check_envelope`]).
pub fn read(path: &Path) -> Result<Envelope> {
    let text = read_text_capped(path, limits::MAX_SHARD_FILE_BYTES)?;
    let file: ShardFile<Skip> = parse_json(path, &text)?;
    let envelope = ShardFile {
        tool: file.tool,
        version: file.version,
        kind: file.kind,
        shard: file.shard,
        fingerprint: file.fingerprint,
        command: file.command,
        data: (),
    };
    envelope.check_envelope(path)?;
    Ok(envelope)
}

/// The data of a shard whose envelope [`read`] gave, as the study's type: the file is read
/// again (within the same bound) and must still carry that envelope — a file replaced
/// between the two reads is refused, not mixed.
pub fn read_data<T: serde::de::DeserializeOwned>(path: &Path, envelope: &Envelope) -> Result<T> {
    let text = read_text_capped(path, limits::MAX_SHARD_FILE_BYTES)?;
    let file: ShardFile<T> = parse_json(path, &text)?;
    drop(text);
    let again = ShardFile {
        tool: file.tool,
        version: file.version,
        kind: file.kind,
        shard: file.shard,
        fingerprint: file.fingerprint,
        command: file.command,
        data: (),
    };
    if &again != envelope {
        return Err(Error::Parse {
            path: path.to_path_buf(),
            message: "changed while merge was reading it (another run is writing it?)".into(),
        });
    }
    Ok(file.data)
}

impl<T> ShardFile<T> {
    /// The envelope's own consistency, before anything is joined: this tool and this version
    /// (results may change between versions: a part of another version is refused, not
    /// mixed), part K of N with K < N ≤ [`limits::MAX_SHARDS`], a fingerprint of 16 hex
    /// digits, and the unsharded command line of this kind of study as text (no control
    /// characters, no `--shard`). Each refusal is one line naming the file and the field.
    pub fn check_envelope(&self, path: &Path) -> Result<()> {
        let bad = |field: &str, message: String| Error::InvalidField {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        if self.tool != "metp-sim" {
            return Err(Error::Parse {
                path: path.to_path_buf(),
                message: format!("not a metp-sim shard file (tool '{}')", self.tool),
            });
        }
        let mine = env!("CARGO_PKG_VERSION");
        if self.version != mine {
            return Err(bad(
                "version",
                format!(
                    "written by metp-sim {:?}, but this is {mine}: results may differ between \
                     versions; run every part with this one",
                    self.version
                ),
            ));
        }
        if self.shard.count == 0 || self.shard.count > limits::MAX_SHARDS {
            return Err(bad(
                "shard.count",
                format!(
                    "{} parts; a study splits into 1 to {}",
                    self.shard.count,
                    limits::MAX_SHARDS
                ),
            ));
        }
        if self.shard.index >= self.shard.count {
            return Err(bad(
                "shard.index",
                format!(
                    "part {} of {}: parts are numbered 0 to {}",
                    self.shard.index,
                    self.shard.count,
                    self.shard.count - 1
                ),
            ));
        }
        if self.fingerprint.len() != 16 || !self.fingerprint.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(bad(
                "fingerprint",
                format!("{:?} is not 16 hex digits", self.fingerprint),
            ));
        }
        if self.command.first() != Some(&self.kind) {
            return Err(bad(
                "command",
                format!(
                    "does not start with the study's kind '{}' (a {} shard's command line)",
                    self.kind, self.kind
                ),
            ));
        }
        if self.command.len() > MAX_COMMAND_WORDS {
            return Err(bad(
                "command",
                format!(
                    "{} words, more than {MAX_COMMAND_WORDS}",
                    self.command.len()
                ),
            ));
        }
        for (i, word) in self.command.iter().enumerate() {
            limits::check_text(word, limits::MAX_TEXT_CHARS)
                .map_err(|m| bad(&format!("command[{i}]"), m))?;
            if word == "--shard" || word.starts_with("--shard=") {
                return Err(bad(
                    &format!("command[{i}]"),
                    "the unsharded command line holds no --shard".into(),
                ));
            }
        }
        Ok(())
    }

    /// Checks that the fingerprint is the one of the study the data holds (`study`, its
    /// canonical JSON): a spec edited after the part ran is refused.
    pub fn check_study(&self, path: &Path, study: &str) -> Result<()> {
        let want = fingerprint(&self.kind, study);
        if self.fingerprint != want {
            return Err(Error::InvalidField {
                path: path.to_path_buf(),
                field: "fingerprint".into(),
                message: format!(
                    "{} is not the fingerprint of the study the file holds ({want}): the file \
                     was edited after its part ran",
                    self.fingerprint
                ),
            });
        }
        Ok(())
    }
}

/// Most words of the command line a shard records.
const MAX_COMMAND_WORDS: usize = 4096;

/// Checks that `files` are the parts of one study, each exactly once (module docs), and returns
/// them in part order.
pub fn check_set(mut files: Vec<(PathBuf, Envelope)>) -> Result<Vec<(PathBuf, Envelope)>> {
    let Some((first_path, first)) = files.first() else {
        return Err(Error::arg("merge", "no shard files given"));
    };
    let (first_path, first) = (first_path.clone(), first.clone());
    let refuse = |path: &Path, message: String| Error::Parse {
        path: path.to_path_buf(),
        message,
    };
    for (path, f) in &files[1..] {
        if f.kind != first.kind {
            return Err(refuse(
                path,
                format!(
                    "a {} shard, but {} is a {} shard: merge joins the parts of one study",
                    f.kind,
                    first_path.display(),
                    first.kind
                ),
            ));
        }
        if f.fingerprint != first.fingerprint || f.version != first.version {
            return Err(refuse(
                path,
                format!(
                    "a shard of a different study than {} (fingerprint {} vs {}, version {} vs \
                     {})",
                    first_path.display(),
                    f.fingerprint,
                    first.fingerprint,
                    f.version,
                    first.version
                ),
            ));
        }
        if f.shard.count != first.shard.count {
            return Err(refuse(
                path,
                format!(
                    "part of {} shards, but {} is part of {}",
                    f.shard.count,
                    first_path.display(),
                    first.shard.count
                ),
            ));
        }
        if f.command != first.command {
            return Err(refuse(
                path,
                format!(
                    "run with another command line than {} ('{}' vs '{}'); run every part with \
                     the same one",
                    first_path.display(),
                    f.command.join(" "),
                    first.command.join(" ")
                ),
            ));
        }
    }
    files.sort_by_key(|(_, f)| f.shard.index);
    for w in files.windows(2) {
        if w[0].1.shard.index == w[1].1.shard.index {
            return Err(refuse(
                &w[1].0,
                format!(
                    "shard {} given twice (also {})",
                    w[1].1.shard,
                    w[0].0.display()
                ),
            ));
        }
    }
    let n = first.shard.count;
    if files.len() as u64 != n {
        let have: Vec<u64> = files.iter().map(|(_, f)| f.shard.index).collect();
        let missing: Vec<String> = (0..n)
            .filter(|i| !have.contains(i))
            .take(10)
            .map(|i| i.to_string())
            .collect();
        return Err(refuse(
            &first_path,
            format!(
                "{} of its {n} shards given; missing part(s) {}{}",
                files.len(),
                missing.join(", "),
                if (n as usize - files.len()) > missing.len() {
                    ", …"
                } else {
                    ""
                },
            ),
        ));
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_k_of_n_and_refuses_the_rest() {
        assert_eq!(
            Shard::parse("--shard", "2/4").unwrap(),
            Shard { index: 2, count: 4 }
        );
        assert_eq!(Shard::parse("--shard", "0/1").unwrap(), Shard::WHOLE);
        for bad in ["4/4", "1/0", "0/0", "a/4", "3", "-1/4", "0/20000", ""] {
            let e = Shard::parse("--shard", bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
            assert!(!e.to_string().contains('\n'), "{e}");
        }
    }

    /// Every item belongs to exactly one part, `len_of` counts each part's, and a part does
    /// not get every N-th item of the canonical order (the aliasing the shuffle is for).
    #[test]
    fn every_item_belongs_to_one_part_and_parts_mix() {
        for n in 1..7u64 {
            for total in 0..40usize {
                let owners = Shard::owners(n, total);
                assert_eq!(owners.len(), total);
                for k in 0..n {
                    let s = Shard { index: k, count: n };
                    let mine = owners.iter().filter(|&&o| o == k).count();
                    assert_eq!(mine, s.len_of(total), "n={n} total={total}");
                }
            }
        }
        // 8 lengths × 64 configurations, 8 parts: no part holds one length only.
        let owners = Shard::owners(8, 512);
        for k in 0..8 {
            let lengths: std::collections::BTreeSet<usize> = (0..512)
                .filter(|&i| owners[i] == k)
                .map(|i| i % 8)
                .collect();
            assert!(lengths.len() > 4, "part {k}: lengths {lengths:?}");
        }
        assert_eq!(Shard::owners(4, 10), Shard::owners(4, 10));
    }

    #[test]
    fn drops_only_the_shard_flag() {
        let args = [
            "sweep",
            "--shard",
            "1/4",
            "--p",
            "2",
            "--shard=0/2",
            "--out",
            "x",
        ];
        assert_eq!(
            unsharded_command(args.map(String::from)),
            ["sweep", "--p", "2", "--out", "x"]
        );
    }

    fn part(index: u64, count: u64, study: &str) -> (PathBuf, Envelope) {
        let s = Shard { index, count };
        (
            PathBuf::from(s.file_name("sweep")),
            ShardFile::new("sweep", s, study, vec!["sweep".into()], ()),
        )
    }

    /// Missing, duplicate and foreign parts are refused in one line; a full set comes back in
    /// part order.
    #[test]
    fn a_set_must_be_one_study_every_part_once() {
        let ok = check_set(vec![part(1, 2, "a"), part(0, 2, "a")]).unwrap();
        assert_eq!(ok[0].1.shard.index, 0);
        for (set, want) in [
            (vec![part(0, 2, "a")], "missing part(s) 1"),
            (vec![part(0, 2, "a"), part(0, 2, "a")], "given twice"),
            (vec![part(0, 2, "a"), part(1, 2, "b")], "different study"),
            (vec![part(0, 2, "a"), part(1, 3, "a")], "part of 3 shards"),
            (vec![], "no shard files"),
        ] {
            let e = check_set(set).unwrap_err().to_string();
            assert!(e.contains(want) && !e.contains('\n'), "{e}");
        }
    }
}
