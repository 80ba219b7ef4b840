//! `toolgate eval`: the tool metadata of a folder of manifests regression-tested against prompts
//! (`toolgate_review::eval`): a report per tool and overall, non-zero under thresholds, and with
//! `--baseline` the same prompts against another version of the folder, for a pull request.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use toolgate_core::registry::Registry;
use toolgate_review::eval::{
    Prompt, Ranker, Report, Thresholds, evaluate_with, example_prompts, failures, imported_servers,
    parse_prompts,
};

use crate::client::exit::EXIT_BAD_MANIFESTS;
use crate::outln;
use crate::policy_cmds::{load_with, parse_now};

/// Options of `toolgate eval`.
#[derive(Debug, Clone, clap::Args)]
pub struct EvalArgs {
    /// Folder of manifests to evaluate (default: `examples`, unless only --tools-list is given).
    #[arg(long)]
    pub manifests: Option<PathBuf>,
    /// A saved `tools/list` answer of an MCP server, imported beside the manifests as the
    /// platform team would (server named after the file, every tool reviewed and granted to
    /// the principal): how views would rank its tools. Takes several files; repeatable.
    #[arg(long = "tools-list", value_name = "FILE", num_args = 1..)]
    pub tools_lists: Vec<PathBuf>,
    /// How far the imported servers' annotations are believed.
    #[arg(long, value_enum, default_value_t = crate::mcp_cmd::Trust::FirstParty)]
    pub import_trust: crate::mcp_cmd::Trust,
    /// Prompts files (YAML lists of {intent, expect, forbid, actionType, principal, namespace});
    /// repeatable. Every descriptor's `description.examples` are prompts too.
    #[arg(long = "prompts")]
    pub prompts: Vec<PathBuf>,
    /// Whose views (a prompt may name its own).
    #[arg(long, default_value = "system:serviceaccount:team-a:fixer")]
    pub principal: String,
    /// Namespace of the tools (default: the principal's service-account namespace).
    #[arg(long)]
    pub namespace: Option<String>,
    /// How many tools a view holds (the k of precision@k and recall@k).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub k: u16,
    /// The same prompts against this folder too (the manifests before a change): what got worse
    /// fails.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Fail when mean recall@k is below this.
    #[arg(long, default_value_t = 0.9)]
    pub min_recall: f64,
    /// Fail when mean precision@k is below this.
    #[arg(long, default_value_t = 0.0)]
    pub min_precision: f64,
    /// Fail when the share of prompts offered an unsafe tool is above this.
    #[arg(long, default_value_t = 0.0)]
    pub max_unsafe: f64,
    /// Fail when P@1 (the first tool is right) is below this.
    #[arg(long, default_value_t = 0.0)]
    pub min_p1: f64,
    /// Fail when P@k (a right tool in the top k) is below this.
    #[arg(long, default_value_t = 0.0)]
    pub min_pk: f64,
    /// Fail when more than this share of the read intents is offered a tool that destroys.
    #[arg(long, default_value_t = 1.0)]
    pub max_destructive_on_reads: f64,
    /// Output: the report for people (`text`), or as `json` or `yaml` for a bot.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: crate::client::out::Format,
    /// The same as `-o json`.
    #[arg(long, hide = true)]
    pub json: bool,
    /// Evaluate at this time (RFC 3339) instead of now (grants' windows).
    #[arg(long)]
    pub now: Option<String>,
}

fn registry_of(
    dir: Option<&Path>,
    imported: &[toolgate_core::manifest::RawManifest],
    now: jiff::Timestamp,
) -> anyhow::Result<Result<Registry, ExitCode>> {
    let dirs: Vec<PathBuf> = dir.map(Path::to_path_buf).into_iter().collect();
    Ok(load_with(&dirs, imported.to_vec(), None, now)?.map(|r| Registry::from_objects(&r.objects)))
}

fn run_on(
    ranker: Ranker,
    registry: &Registry,
    files: &[Prompt],
    a: &EvalArgs,
    namespace: &str,
    now: jiff::Timestamp,
) -> Report {
    let mut prompts = files.to_vec();
    prompts.extend(example_prompts(registry, namespace));
    evaluate_with(
        ranker,
        registry,
        &prompts,
        &a.principal,
        Some(namespace),
        usize::from(a.k),
        now,
    )
}

/// The manifests the --tools-list files become, or the exit code of a file that cannot be read.
fn imported(
    a: &EvalArgs,
    namespace: &str,
) -> Result<Vec<toolgate_core::manifest::RawManifest>, ExitCode> {
    let mut lists = Vec::new();
    for path in &a.tools_lists {
        let server = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tools = std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| toolgate_core::mcp::parse_list(&text).map_err(|e| e.to_string()));
        match tools {
            Ok(tools) => lists.push((server, tools)),
            Err(e) => {
                eprintln!("toolgate: --tools-list {}: {e}", path.display());
                return Err(ExitCode::from(EXIT_BAD_MANIFESTS));
            }
        }
    }
    let principal = toolgate_core::principal::Principal::new(&a.principal);
    let (docs, refused) = imported_servers(&lists, namespace, &principal, a.import_trust.into());
    for r in refused {
        eprintln!("toolgate: {r}");
    }
    Ok(docs)
}

/// Run the evaluation and print it.
pub fn run(a: &EvalArgs) -> anyhow::Result<ExitCode> {
    let now = parse_now(a.now.as_deref())?;
    let namespace = match &a.namespace {
        Some(ns) => ns.clone(),
        None => toolgate_core::principal::Principal::new(&a.principal)
            .service_account()
            .map(|(ns, _)| ns.to_string())
            .context("--namespace is required for a principal that is not a service account")?,
    };
    let mut files = Vec::new();
    for p in &a.prompts {
        let text = match std::fs::read_to_string(p) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("toolgate: --prompts {}: {e}", p.display());
                return Ok(ExitCode::from(EXIT_BAD_MANIFESTS));
            }
        };
        match parse_prompts(&text, &p.display().to_string()) {
            Ok(mut ps) => files.append(&mut ps),
            Err(e) => {
                eprintln!("toolgate: {e}");
                return Ok(ExitCode::from(EXIT_BAD_MANIFESTS));
            }
        }
    }
    let imported = match imported(a, &namespace) {
        Ok(docs) => docs,
        Err(code) => return Ok(code),
    };
    let registry = match registry_of(manifests(a).as_deref(), &imported, now)? {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let report = run_on(Ranker::Toolgate, &registry, &files, a, &namespace, now);
    let bm25 = run_on(Ranker::Bm25, &registry, &files, a, &namespace, now);
    let baseline = match &a.baseline {
        Some(dir) => match registry_of(Some(dir), &imported, now)? {
            Ok(r) => Some(run_on(Ranker::Toolgate, &r, &files, a, &namespace, now)),
            Err(code) => return Ok(code),
        },
        None => None,
    };
    let bars = Thresholds {
        min_recall: a.min_recall,
        min_precision: a.min_precision,
        max_unsafe: a.max_unsafe,
        min_first_right: a.min_p1,
        min_found_in_k: a.min_pk,
        max_destructive_on_reads: a.max_destructive_on_reads,
    };
    let failed = failures(&report, &bars, baseline.as_ref(), Some(&bm25));
    let format = if a.json {
        crate::client::out::Format::Json
    } else {
        a.output
    };
    if format != crate::client::out::Format::Text {
        crate::client::out::object(
            &serde_json::json!({
                "report": report, "bm25": bm25, "baseline": baseline, "failures": failed,
            }),
            format,
        );
    } else {
        print_report(a, &report, &bm25, baseline.as_ref(), &failed);
    }
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The manifests folder: as given, else `examples` unless tools lists are all there is.
fn manifests(a: &EvalArgs) -> Option<PathBuf> {
    match &a.manifests {
        Some(m) => Some(m.clone()),
        None if a.tools_lists.is_empty() => Some(PathBuf::from("examples")),
        None => None,
    }
}

fn print_report(
    a: &EvalArgs,
    r: &Report,
    bm25: &Report,
    baseline: Option<&Report>,
    failed: &[String],
) {
    let k = r.k;
    let mut over: Vec<String> = manifests(a)
        .map(|m| m.display().to_string())
        .into_iter()
        .collect();
    over.extend(a.tools_lists.iter().map(|p| p.display().to_string()));
    outln!(
        "toolgate eval: {} prompt(s), {} of them reads, over {} (k = {k})",
        r.prompts.len(),
        r.read_prompts,
        over.join(", ")
    );
    let line = |r: &Report| {
        format!(
            "P@1 {:.3}  P@{k} {:.3}  MRR {:.3}  precision@{k} {:.3}  recall@{k} {:.3}  unsafe exposure {:.3}  over-exposure {:.3}  destroyers on reads {:.3}  approval trigger rate {:.3}",
            r.first_right,
            r.found_in_k,
            r.mrr,
            r.precision,
            r.recall,
            r.unsafe_exposure,
            r.over_exposure,
            r.destructive_on_reads,
            r.approval_rate
        )
    };
    outln!("{}", line(r));
    outln!("plain BM25 over name and description, same tools, same run:");
    outln!("{}", line(bm25));
    if let Some(b) = baseline {
        outln!(
            "baseline {}:",
            a.baseline
                .as_ref()
                .map_or(String::new(), |p| p.display().to_string())
        );
        outln!("{}", line(b));
    }
    outln!("");
    outln!(
        "{:<32} {:>7} {:>7} {:>7} {:>7} {:>7}",
        "tool",
        "prompts",
        "found",
        "first",
        "unsafe",
        "riskier"
    );
    for (name, s) in &r.tools {
        outln!(
            "{name:<32} {:>7} {:>7} {:>7} {:>7} {:>7}",
            s.prompts,
            s.found,
            s.first,
            s.unsafe_exposures,
            s.over_exposures
        );
    }
    let misses: Vec<_> = r.prompts.iter().filter(|p| p.recall < 1.0).collect();
    if !misses.is_empty() {
        outln!("");
        outln!("missed (an expected tool not in the top {k}):");
        for p in misses {
            outln!(
                "  {} {:?}: got [{}]",
                p.source,
                p.intent,
                p.exposed.join(", ")
            );
        }
    }
    let unsafe_: Vec<_> = r
        .prompts
        .iter()
        .filter(|p| !p.unsafe_tools.is_empty())
        .collect();
    if !unsafe_.is_empty() {
        outln!("");
        outln!(
            "unsafe (a forbidden tool offered, or a riskier one ranked above what the task needs):"
        );
        for p in unsafe_ {
            outln!(
                "  {} {:?}: offered {}",
                p.source,
                p.intent,
                p.unsafe_tools.join(", ")
            );
        }
    }
    if !failed.is_empty() {
        outln!("");
        for f in failed {
            outln!("FAIL {f}");
        }
    }
}
