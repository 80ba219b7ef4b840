//! The workspace's shape, held to its rules: no crate's top-level modules import each other in a
//! circle. A circle means two modules are one concern split in two files, or a lower layer
//! reaching up; either way neither can be read, tested or moved alone. Test code (a `tests.rs`,
//! a `#[cfg(test)] mod tests { … }` block) and comments are not imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository root")
}

/// The workspace's member folders, from its Cargo.toml.
fn members() -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let list = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("a members list");
    let members: Vec<PathBuf> = list
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| root().join(m))
        .collect();
    assert!(members.len() > 5, "{members:?}");
    members
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Where one module imports another: (importing module, imported module) → first `file:line`.
type Edges = BTreeMap<(String, String), String>;

/// The imports between a crate's top-level modules (`crate::x` outside comments and tests).
fn edges(src: &Path) -> Edges {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut edges = Edges::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("under src");
        let Some(first) = rel.components().next() else {
            continue;
        };
        let top = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if matches!(top.as_str(), "lib" | "main" | "bin")
            || file.file_name().is_some_and(|n| n == "tests.rs")
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read");
        let code = text
            .split("#[cfg(test)]\nmod tests {")
            .next()
            .unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (i, _) in line.match_indices("crate::") {
                let before = line[..i].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue; // `toolgate_crate::`, not this crate
                }
                let name: String = line[i + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name.is_empty() || name == top || !name.starts_with(|c: char| c.is_lowercase()) {
                    continue;
                }
                edges
                    .entry((top.clone(), name))
                    .or_insert_with(|| format!("{}:{}", file.display(), n + 1));
            }
        }
    }
    edges
}

/// The circles of a graph: its strongly connected components of more than one module.
fn circles(edges: &Edges) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().push(to);
        next.entry(to).or_default();
    }
    // Kosaraju: the order of finishing, then the components of the reversed graph.
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for &start in next.keys() {
        let mut stack = vec![(start, false)];
        while let Some((v, done)) = stack.pop() {
            if done {
                order.push(v);
                continue;
            }
            if !seen.insert(v) {
                continue;
            }
            stack.push((v, true));
            for &w in &next[v] {
                if !seen.contains(w) {
                    stack.push((w, false));
                }
            }
        }
    }
    let mut back: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (v, ws) in &next {
        for w in ws {
            back.entry(w).or_default().push(v);
        }
    }
    let mut placed = BTreeSet::new();
    let mut out = Vec::new();
    for &v in order.iter().rev() {
        if placed.contains(v) {
            continue;
        }
        let mut component = Vec::new();
        let mut stack = vec![v];
        placed.insert(v);
        while let Some(x) = stack.pop() {
            component.push(x.to_string());
            for &y in back.get(x).into_iter().flatten() {
                if placed.insert(y) {
                    stack.push(y);
                }
            }
        }
        if component.len() > 1 {
            component.sort();
            out.push(component);
        }
    }
    out
}

#[test]
fn no_crate_has_modules_that_import_each_other_in_a_circle() {
    let mut found = Vec::new();
    for member in members() {
        let edges = edges(&member.join("src"));
        for circle in circles(&edges) {
            let inside: Vec<String> = edges
                .iter()
                .filter(|((a, b), _)| circle.contains(a) && circle.contains(b))
                .map(|((a, b), at)| format!("    {a} → {b} ({at})"))
                .collect();
            found.push(format!(
                "{}: {}\n{}",
                member.display(),
                circle.join(", "),
                inside.join("\n")
            ));
        }
    }
    assert!(
        found.is_empty(),
        "modules that import each other in a circle:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_circle_is_found_where_there_is_one() {
    let edge = |a: &str, b: &str| ((a.to_string(), b.to_string()), String::new());
    let edges: Edges = [
        edge("a", "b"),
        edge("b", "c"),
        edge("c", "a"),
        edge("c", "d"),
    ]
    .into_iter()
    .collect();
    assert_eq!(circles(&edges), [["a", "b", "c"]]);
    let edges: Edges = [edge("a", "b"), edge("b", "c")].into_iter().collect();
    assert!(circles(&edges).is_empty());
}

/// What a normal (not dev, not build) dependency tree of a package holds, by crate name.
fn linked(package: &str) -> BTreeSet<String> {
    let out = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root())
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            package,
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_executor_and_what_runs_in_a_sandbox_link_the_contract_not_the_decision_core() {
    for package in [
        "toolgate-executor",
        "toolgate-sandbox",
        "toolgate-artifacts",
    ] {
        let deps = linked(package);
        assert!(deps.contains("toolgate-contract"), "{package}: {deps:?}");
        for heavy in ["toolgate-core", "cedar-policy", "kube-cel", "kube"] {
            assert!(
                !deps.contains(heavy),
                "{package} links {heavy}: the executor contract is toolgate-contract"
            );
        }
    }
}

#[test]
fn the_runtimes_decide_calls_without_the_review_tooling() {
    for package in ["toolgate-operator", "toolgate-local", "toolgate-api"] {
        let deps = linked(package);
        assert!(deps.contains("toolgate-core"), "{package}: {deps:?}");
        assert!(
            !deps.contains("toolgate-review"),
            "{package} links toolgate-review: eval, policy diff, policy tests and import are the command line's"
        );
    }
}
