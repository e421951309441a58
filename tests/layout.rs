//! The module maps hold against the tree: `src/lib.rs` lists every module
//! of the crate's root, `src/domain/mod.rs` and `src/roles/mod.rs` every
//! module of their floor, and each lists nothing that is not there. A new
//! file goes into the map of its floor, or this fails.

use std::collections::BTreeSet;
use std::path::Path;

/// The modules a folder holds: its `.rs` files (but `mod.rs`, `lib.rs`)
/// and its folders with a `mod.rs`.
fn modules_in(dir: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(dir).expect("the folder is read") {
        let path = entry.expect("an entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if path.join("mod.rs").exists() {
                found.insert(name);
            }
        } else if let Some(stem) = name.strip_suffix(".rs") {
            if stem != "mod" && stem != "lib" {
                found.insert(stem.to_owned());
            }
        }
    }
    found
}

/// The `pub mod NAME;` lines of a file.
fn declared(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("pub mod "))
        .filter_map(|rest| rest.strip_suffix(';'))
        .map(str::to_owned)
        .collect()
}

/// The modules the `//!` map names as a list entry: ``//! - [`name`]``.
fn mapped(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("//! - "))
        .flat_map(|entry| {
            // An entry may name several: "[`api`], [`cli`], [`app`] — …".
            let head = entry.split('—').next().unwrap_or_default();
            head.split(',')
                .filter_map(|part| {
                    let part = part.trim();
                    part.strip_prefix("[`")
                        .and_then(|rest| rest.split_once("`]"))
                        .map(|(name, _)| name.to_owned())
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn check(map_file: &str, dir: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(map_file)).expect("the map is read");
    let tree = modules_in(&root.join(dir));
    assert_eq!(
        declared(&text),
        tree,
        "{map_file} declares exactly the modules of {dir}"
    );
    assert_eq!(
        mapped(&text),
        tree,
        "{map_file}'s map lists exactly the modules of {dir}"
    );
}

#[test]
fn the_root_map_holds_against_the_tree() {
    check("src/lib.rs", "src");
}

#[test]
fn the_domain_map_holds_against_the_tree() {
    check("src/domain/mod.rs", "src/domain");
}

#[test]
fn the_roles_map_holds_against_the_tree() {
    check("src/roles/mod.rs", "src/roles");
}

#[test]
fn the_root_map_stays_short() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let entries = mapped(&text).len();
    assert!(
        (8..=14).contains(&entries),
        "the root map has {entries} entries: group modules into a floor's folder"
    );
}

#[test]
fn a_map_entry_missing_from_the_tree_is_found() {
    let text = "//! - [`job`] — the job\n//! - [`api`], [`cli`] — edges\npub mod job;\n";
    assert_eq!(
        mapped(text),
        ["api", "cli", "job"].map(str::to_owned).into()
    );
    assert_eq!(declared(text), ["job"].map(str::to_owned).into());
}
