//! The documentation, held to the code: the generated reference matches what `toolgate reference`
//! writes, every relative link resolves, every `sh` block a reader can run without a cluster is
//! run, and no page speaks of how the product was made (that is `git log`).

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository root")
}

/// Every Markdown page of the repository: the README, the contributor pages, `docs/` and the
/// pages beside the code.
fn pages() -> Vec<PathBuf> {
    let mut pages = Vec::new();
    walk(&root(), &mut |p| {
        if p.extension().is_some_and(|e| e == "md") {
            pages.push(p.to_path_buf());
        }
    });
    assert!(pages.len() > 30, "{pages:?}");
    pages
}

fn walk(dir: &Path, each: &mut dyn FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.map(|e| e.expect("entry").path()).collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if p.is_dir() {
            if !matches!(name, "target" | "node_modules" | ".git" | "__pycache__") {
                walk(&p, each);
            }
        } else {
            each(&p);
        }
    }
}

fn relative(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

#[test]
fn the_reference_pages_are_what_the_code_generates() {
    let out = tempfile::tempdir().expect("tempdir");
    let status = Command::new(env!("CARGO_BIN_EXE_toolgate-full"))
        .args(["reference", "--out"])
        .arg(out.path())
        .stderr(Stdio::null())
        .status()
        .expect("run toolgate reference");
    assert!(status.success());
    let committed = root().join("docs/reference");
    let mut generated = BTreeSet::new();
    walk(out.path(), &mut |p| {
        let name = p.strip_prefix(out.path()).expect("inside").to_path_buf();
        let want = read(p);
        let have = std::fs::read_to_string(committed.join(&name)).unwrap_or_default();
        assert!(
            have == want,
            "docs/reference/{} differs from what the code generates: run `cargo run -p toolgate -- reference --out docs/reference`",
            name.display()
        );
        generated.insert(name);
    });
    walk(&committed, &mut |p| {
        let name = p.strip_prefix(&committed).expect("inside").to_path_buf();
        assert!(
            generated.contains(&name),
            "docs/reference/{} is no longer generated: remove it",
            name.display()
        );
    });
    assert!(generated.len() >= 14, "{generated:?}");
}

#[test]
fn no_product_file_speaks_of_how_it_was_made() {
    // Spelled so that this file does not match itself.
    let history = regex::Regex::new(r"(?i)\b(st[o]ps?|iss[u]es?)[ -]#?[0-9]").expect("regex");
    let mut found = Vec::new();
    walk(&root(), &mut |p| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let kind = p.extension().and_then(|e| e.to_str()).unwrap_or_default();
        let text_file = matches!(
            kind,
            "rs" | "md" | "sh" | "py" | "yaml" | "yml" | "toml" | "proto" | "json" | "txt"
        ) || matches!(name, "Containerfile" | "run");
        if !text_file || name == "Cargo.lock" {
            return;
        }
        let Ok(text) = std::fs::read_to_string(p) else {
            return;
        };
        for (i, line) in text.lines().enumerate() {
            if history.is_match(line) {
                found.push(format!("{}:{}: {}", relative(p), i + 1, line.trim()));
            }
        }
    });
    assert!(
        found.is_empty(),
        "these lines speak of work sessions or issue numbers; say what the product is instead:\n{}",
        found.join("\n")
    );
}

/// A heading's anchor as GitHub makes it.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (outside code blocks), with GitHub's `-1`, `-2` for repeats.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let base = anchor(line.trim_start_matches('#'));
        let mut a = base.clone();
        let mut n = 0;
        while seen.contains(&a) {
            n += 1;
            a = format!("{base}-{n}");
        }
        seen.insert(a);
    }
    seen
}

/// The targets of a page's Markdown links, outside code blocks and code spans.
fn links(text: &str) -> Vec<(usize, String)> {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").expect("regex");
    let code = regex::Regex::new(r"`[^`]*`").expect("regex");
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let line = code.replace_all(line, "");
        for c in link.captures_iter(&line) {
            out.push((i + 1, c[1].to_string()));
        }
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = read(&page);
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                page.clone()
            } else {
                page.parent().expect("a folder").join(path)
            };
            let at = format!("{}:{line}: {target}", relative(&page));
            if !file.exists() {
                broken.push(format!("{at}: no such file"));
                continue;
            }
            if let Some(fragment) = fragment
                && file.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&file)).contains(fragment)
            {
                broken.push(format!("{at}: no heading with this anchor"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 50, "only {checked} links found");
}

/// A fenced shell block: where it is, its tag, its text.
struct Block {
    at: String,
    tag: String,
    text: String,
}

fn shell_blocks() -> Vec<Block> {
    let mut out = Vec::new();
    for page in pages() {
        let text = read(&page);
        let mut open: Option<(usize, String, String)> = None;
        for (i, line) in text.lines().enumerate() {
            let fence = line.trim_start().strip_prefix("```");
            match (&mut open, fence) {
                (None, Some(info)) => {
                    let mut words = info.split_whitespace();
                    let lang = words.next().unwrap_or_default();
                    if matches!(lang, "sh" | "bash" | "shell" | "console") {
                        open = Some((i + 1, words.collect::<Vec<_>>().join(" "), String::new()));
                    } else if !info.trim().is_empty() || line.trim() == "```" {
                        // Another language, or an untagged block: skip to its end.
                        open = Some((0, String::new(), String::new()));
                    }
                }
                (Some((start, tag, body)), Some(_)) => {
                    if *start > 0 {
                        out.push(Block {
                            at: format!("{}:{start}", relative(&page)),
                            tag: std::mem::take(tag),
                            text: std::mem::take(body),
                        });
                    }
                    open = None;
                }
                (Some((_, _, body)), None) => {
                    body.push_str(line);
                    body.push('\n');
                }
                (None, None) => {}
            }
        }
    }
    out
}

#[test]
fn every_shell_block_says_whether_it_runs_here() {
    let blocks = shell_blocks();
    let untagged: Vec<&str> = blocks
        .iter()
        .filter(|b| b.tag != "runnable" && !b.tag.starts_with("needs-"))
        .map(|b| b.at.as_str())
        .collect();
    assert!(
        untagged.is_empty(),
        "a shell block is tagged `sh runnable` (this suite runs it) or `sh needs-<what>` (a cluster, Vault, …): {untagged:?}"
    );
    let runnable = blocks.iter().filter(|b| b.tag == "runnable").count();
    assert!(runnable >= 10, "only {runnable} runnable blocks");
}

#[test]
fn the_runnable_commands_in_the_docs_run() {
    let bin = Path::new(env!("CARGO_BIN_EXE_toolgate"))
        .parent()
        .expect("the binaries' folder")
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut failed = Vec::new();
    // `TOOLGATE_DOCS_ONLY=README.md` runs only the blocks of pages whose path contains it.
    let only = std::env::var("TOOLGATE_DOCS_ONLY").unwrap_or_default();
    for block in shell_blocks()
        .into_iter()
        .filter(|b| b.tag == "runnable" && b.at.contains(&only))
    {
        let home = tempfile::tempdir().expect("tempdir");
        let (out_file, err_file) = (home.path().join(".stdout"), home.path().join(".stderr"));
        let mut child = Command::new("bash")
            .args(["-euo", "pipefail", "-c", &block.text])
            .current_dir(root())
            .env("PATH", &path)
            .env("HOME", home.path())
            .env("XDG_STATE_HOME", home.path().join("state"))
            .env("TMPDIR", home.path())
            .env_remove("TOOLGATE_TOKEN")
            .env_remove("TOOLGATE_SERVER")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_file).expect("stdout file"))
            .stderr(std::fs::File::create(&err_file).expect("stderr file"))
            .process_group(0)
            .spawn()
            .expect("bash");
        let deadline = Instant::now() + Duration::from_secs(180);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break Some(status);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        // Whatever the block left running (a `toolgate local &`) goes with it.
        let pgid = child.id().to_string();
        let _ = Command::new("kill")
            .args(["-9", "--", &format!("-{pgid}")])
            .stderr(Stdio::null())
            .status();
        let _ = child.wait();
        if status.is_none_or(|s| !s.success()) {
            failed.push(format!(
                "{} ({}):\n{}\n--- stdout\n{}--- stderr\n{}",
                block.at,
                status.map_or("timed out".into(), |s| s.to_string()),
                block.text,
                std::fs::read_to_string(&out_file).unwrap_or_default(),
                std::fs::read_to_string(&err_file).unwrap_or_default()
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// A page that says which test shows something names a test that exists: on each line naming
/// tests (`snake_case` in backticks) and linking source files, every name is a function of one of
/// those files.
#[test]
fn the_tests_the_docs_cite_exist() {
    let name = regex::Regex::new(r"`([a-z][a-z0-9]*(?:_[a-z0-9]+){3,})`").expect("regex");
    let link = regex::Regex::new(r"\]\(([^)#\s]+\.rs)\)").expect("regex");
    let mut missing = Vec::new();
    let mut cited = 0;
    for page in pages() {
        let text = read(&page);
        for (i, line) in text.lines().enumerate() {
            let files: Vec<String> = link
                .captures_iter(line)
                .filter_map(|c| std::fs::read_to_string(page.parent()?.join(&c[1])).ok())
                .collect();
            if files.is_empty() {
                continue;
            }
            for c in name.captures_iter(line) {
                cited += 1;
                let f = format!("fn {}(", &c[1]);
                if !files.iter().any(|text| text.contains(&f)) {
                    missing.push(format!("{}:{}: {}", relative(&page), i + 1, &c[1]));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "cited tests that are not in the files linked beside them:\n{}",
        missing.join("\n")
    );
    assert!(cited > 30, "only {cited} cited tests");
}
