//! The recorded calls `toolgate diff --replay` decides again: a `toolgate local` data folder, or
//! ToolCall objects exported with kubectl.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use toolgate_review::policy_diff::RecordedCall;

/// The calls recorded at `path`: a `toolgate local` data folder (its store), or files of
/// ToolCall objects (`kubectl get toolcalls -o yaml` or `-o json`: a List, or documents).
pub fn recorded_calls(path: &Path) -> anyhow::Result<Vec<RecordedCall>> {
    if path.join("toolgate.redb").is_file() {
        return from_store(path);
    }
    let files: Vec<PathBuf> = if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| path.display().to_string())?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "yml" | "json")
                )
            })
            .collect();
        v.sort();
        v
    } else if path.is_file() {
        vec![path.to_path_buf()]
    } else {
        bail!(
            "--replay {}: expected a toolgate local data folder or ToolCall exports",
            path.display()
        );
    };
    let mut calls = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).with_context(|| f.display().to_string())?;
        for (i, doc) in serde_norway::Deserializer::from_str(&text).enumerate() {
            use serde::Deserialize;
            let v = serde_json::Value::deserialize(doc)
                .with_context(|| format!("{} document {i}: not YAML or JSON", f.display()))?;
            let items = match v["kind"].as_str() {
                Some("List" | "ToolCallList") => v["items"].as_array().cloned().unwrap_or_default(),
                Some("ToolCall") => vec![v],
                _ => continue,
            };
            for (j, item) in items.iter().enumerate() {
                calls.push(
                    exported(item)
                        .with_context(|| format!("{} document {i} item {j}", f.display()))?,
                );
            }
        }
    }
    Ok(calls)
}

/// A ToolCall object as a recorded call.
fn exported(v: &serde_json::Value) -> anyhow::Result<RecordedCall> {
    let name = v["metadata"]["name"]
        .as_str()
        .context("metadata.name: expected the call's name")?;
    let namespace = v["metadata"]["namespace"].as_str().unwrap_or("default");
    let spec: toolgate_crds::ToolCallSpec = serde_path_to_error::deserialize(&v["spec"])
        .map_err(|e| anyhow::anyhow!("{name}: spec.{}: {}", e.path(), e.inner()))?;
    let status: toolgate_crds::ToolCallStatus = v
        .get("status")
        .map(serde_path_to_error::deserialize)
        .transpose()
        .map_err(|e| anyhow::anyhow!("{name}: status.{}: {}", e.path(), e.inner()))?
        .unwrap_or_default();
    let created = v["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(|t| t.parse().ok());
    Ok(RecordedCall {
        namespace: namespace.into(),
        name: name.into(),
        decided_at: decided_at(&status)
            .or(created)
            .unwrap_or_else(jiff::Timestamp::now),
        recorded: status.authorization.as_ref().map(|a| a.decision),
        spec,
    })
}

fn decided_at(status: &toolgate_crds::ToolCallStatus) -> Option<jiff::Timestamp> {
    status
        .authorization
        .as_ref()
        .and_then(|a| a.decided_at)
        .map(|t| t.0)
}

/// Every call of a `toolgate local` store.
fn from_store(data: &Path) -> anyhow::Result<Vec<RecordedCall>> {
    let store = toolgate_local::store::Store::open(data).with_context(|| {
        format!(
            "--replay {}: the store could not be opened (stop the toolgate local using it, or copy the folder)",
            data.display()
        )
    })?;
    let records = store
        .scan(None, usize::MAX, |_| true)
        .with_context(|| format!("--replay {}", data.display()))?;
    Ok(records
        .into_iter()
        .map(|r| {
            let mut spec = r.spec;
            if spec.principal_groups.is_empty() {
                spec.principal_groups = r.groups;
            }
            RecordedCall {
                decided_at: decided_at(&r.status).unwrap_or(r.created_at),
                recorded: r.status.authorization.as_ref().map(|a| a.decision),
                namespace: r.namespace,
                name: r.id,
                spec,
            }
        })
        .collect())
}
