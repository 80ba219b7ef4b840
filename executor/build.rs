//! The executor's build id: a hash of the sources it is built from (its own crate and the
//! workspace crates it links, and Cargo.lock). `toolgate local` runs a `toolgate-executor` found
//! beside it only when that binary reports the build id `toolgate` itself was built with, so a
//! stale executor left in a target folder by an earlier build is never run against a newer
//! runtime.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

include!("packed_relocs.rs");

/// What the executor is made of, relative to this crate's folder.
const SOURCES: &[&str] = &[
    "src",
    "Cargo.toml",
    "../core/src",
    "../core/Cargo.toml",
    "../crds/src",
    "../crds/Cargo.toml",
    "../sandbox/src",
    "../sandbox/Cargo.toml",
    "../artifacts/src",
    "../artifacts/Cargo.toml",
    "../Cargo.lock",
];

fn files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let Ok(entries) = std::fs::read_dir(path) else {
            return;
        };
        for entry in entries.flatten() {
            files(&entry.path(), out);
        }
    } else if path.is_file() {
        out.push(path.to_path_buf());
    }
}

fn main() {
    pack_relative_relocs("toolgate-executor");
    let mut all = Vec::new();
    for source in SOURCES {
        println!("cargo:rerun-if-changed={source}");
        files(Path::new(source), &mut all);
    }
    all.sort();
    // SipHash with fixed keys: the same sources give the same id with the same toolchain, which
    // is all a comparison between two binaries of one build needs.
    let mut hasher = std::hash::DefaultHasher::new();
    for file in &all {
        file.hash(&mut hasher);
        std::fs::read(file).unwrap_or_default().hash(&mut hasher);
    }
    println!(
        "cargo:rustc-env=TOOLGATE_EXECUTOR_BUILD_ID={:016x}",
        hasher.finish()
    );
}
