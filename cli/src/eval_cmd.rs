//! `toolgate eval`: the tool metadata of a folder of manifests regression-tested against prompts
//! (`toolgate_core::eval`): a report per tool and overall, non-zero under thresholds, and with
//! `--baseline` the same prompts against another version of the folder, for a pull request.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use toolgate_core::eval::{
    Prompt, Report, Thresholds, evaluate, example_prompts, failures, parse_prompts,
};
use toolgate_core::registry::Registry;

use crate::policy_cmds::{load, parse_now};
use toolgate_client::exit::EXIT_BAD_MANIFESTS;
use toolgate_client::outln;

/// Options of `toolgate eval`.
#[derive(Debug, Clone, clap::Args)]
pub struct EvalArgs {
    /// Folder of manifests to evaluate.
    #[arg(long, default_value = "examples")]
    pub manifests: PathBuf,
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
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Evaluate at this time (RFC 3339) instead of now (grants' windows).
    #[arg(long)]
    pub now: Option<String>,
}

fn registry_of(dir: &Path, now: jiff::Timestamp) -> anyhow::Result<Result<Registry, ExitCode>> {
    Ok(load(&[dir.to_path_buf()], None, now)?.map(|r| Registry::from_objects(&r.objects)))
}

fn run_on(
    registry: &Registry,
    files: &[Prompt],
    a: &EvalArgs,
    namespace: &str,
    now: jiff::Timestamp,
) -> Report {
    let mut prompts = files.to_vec();
    prompts.extend(example_prompts(registry, namespace));
    evaluate(
        registry,
        &prompts,
        &a.principal,
        Some(namespace),
        usize::from(a.k),
        now,
    )
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
    let registry = match registry_of(&a.manifests, now)? {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let report = run_on(&registry, &files, a, &namespace, now);
    let baseline = match &a.baseline {
        Some(dir) => match registry_of(dir, now)? {
            Ok(r) => Some(run_on(&r, &files, a, &namespace, now)),
            Err(code) => return Ok(code),
        },
        None => None,
    };
    let bars = Thresholds {
        min_recall: a.min_recall,
        min_precision: a.min_precision,
        max_unsafe: a.max_unsafe,
    };
    let failed = failures(&report, &bars, baseline.as_ref());
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "report": report, "baseline": baseline, "failures": failed,
            }))?
        );
    } else {
        print_report(a, &report, baseline.as_ref(), &failed);
    }
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_report(a: &EvalArgs, r: &Report, baseline: Option<&Report>, failed: &[String]) {
    let k = r.k;
    outln!(
        "toolgate eval: {} prompt(s) over {} (k = {k})",
        r.prompts.len(),
        a.manifests.display()
    );
    let line = |r: &Report| {
        format!(
            "precision@{k} {:.3}  recall@{k} {:.3}  MRR {:.3}  unsafe exposure {:.3}  over-exposure {:.3}  approval trigger rate {:.3}",
            r.precision, r.recall, r.mrr, r.unsafe_exposure, r.over_exposure, r.approval_rate
        )
    };
    outln!("{}", line(r));
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
