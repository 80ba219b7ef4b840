//! Starting the embedded runtime: load the manifests (refusing to start on any error), open the
//! store, pick up the calls a previous process left, and follow the manifests folder.

use std::sync::Arc;

use jiff::Timestamp;
use toolgate_api::ApiError;
use toolgate_core::lifecycle::{awaiting, interrupted};
use toolgate_crds::CallPhase;

use crate::manifests::{Loaded, load_folder};
use crate::runtime::{Config, Runtime, StartError, call_of, internal};
use crate::store::Store;

impl Runtime {
    /// Load the manifests (refusing to start on any error), open the store, recover calls a
    /// previous process left, and watch the manifests folder.
    pub async fn start(mut config: Config) -> Result<Runtime, StartError> {
        let linter = crate::manifests::linter().map_err(|e| StartError::Linter(e.to_string()))?;
        let refused = |errors| StartError::Manifests {
            dir: config.manifests.display().to_string(),
            errors,
        };
        let loaded = load_folder(
            &linter,
            &config.manifests,
            Timestamp::now(),
            &Default::default(),
        )
        .map_err(refused)?;
        for w in &loaded.warnings {
            tracing::warn!(warning = %w, "manifest warning");
        }
        // Opening checks every page of the store and may wait for the lock of a runtime killed
        // a moment ago: blocking work, kept off the async workers.
        let data = config.data.clone();
        let store = tokio::task::spawn_blocking(move || Store::open(&data))
            .await
            .map_err(|e| crate::store::StoreError::Db {
                path: config.data.join("toolgate.redb").display().to_string(),
                message: format!("opening it stopped: {e}"),
            })??;
        // The sandboxes a previous process started died with it (their parent-death signal);
        // their folders are left. The store's lock says no other runtime uses them. One it was
        // starting as it died can linger; its cgroups say so and go, with what is in them.
        // Removing a dead runtime's folders (and sweeping the memory filesystem) is blocking
        // work too.
        let named = config.runs.take();
        let data = config.data.clone();
        let runs = tokio::task::spawn_blocking(move || {
            for left in [
                crate::slot::slots_folder(&data),
                crate::slot::staging_folder(&data),
            ] {
                let _ = std::fs::remove_dir_all(left);
            }
            let sweep = named.is_none();
            let runs = match named {
                Some(parent) => crate::slot::run_folder_in(&parent, &data),
                None => crate::slot::default_run_folder(&data),
            };
            match crate::slot::renew_run_folder(&runs, &data, sweep) {
                Ok(()) => runs,
                Err(e) => {
                    tracing::warn!(folder = %runs.display(), error = %e, "the sandboxes' run files go under the data folder");
                    crate::slot::slots_folder(&data)
                }
            }
        })
        .await
        .map_err(|e| StartError::SandboxFolders(e.to_string()))?;
        config.runs = Some(runs);
        let swept = tokio::task::spawn_blocking(toolgate_sandbox::spawn::sweep_orphaned_cgroups)
            .await
            .unwrap_or(0);
        if swept > 0 {
            tracing::info!(
                swept,
                "removed the cgroups of sandboxes whose runtime had died"
            );
        }
        let layers = crate::slot::layers_folder(&config.data);
        let swept =
            tokio::task::spawn_blocking(move || toolgate_sandbox::layer::sweep_orphaned(&layers))
                .await
                .unwrap_or(0);
        if swept > 0 {
            tracing::info!(
                swept,
                "removed the write layers of sandboxes whose runtime had died"
            );
        }
        if !nix::unistd::geteuid().is_root() {
            tracing::warn!(
                "running unprivileged: a call's writes are not bounded by the default write quota (it needs a mount); a SandboxPolicy that sets filesystem.writeQuota is refused here"
            );
        }
        let rt = Runtime::new(config, store, linter, loaded);
        // The McpServers' tools, listed before any call is taken.
        if rt.discover(true).await {
            let dir = rt.inner.config.manifests.clone();
            let discovered = crate::runtime::lock(&rt.inner.discovered).clone();
            let loaded = load_folder(&rt.inner.linter, &dir, Timestamp::now(), &discovered)
                .map_err(|errors| StartError::Manifests {
                    dir: dir.display().to_string(),
                    errors,
                })?;
            rt.swap_loaded(loaded);
        }
        for w in &rt.loaded().warnings {
            if w.contains("McpServer") || w.contains("mcp:") {
                tracing::warn!(warning = %w, "manifest warning");
            }
        }
        rt.recover().await.map_err(StartError::Recover)?;
        let watcher = rt.clone();
        tokio::spawn(async move { watcher.watch_manifests().await });
        Ok(rt)
    }

    /// Calls a previous process left: a running one was interrupted (run again if its tool is
    /// idempotent, failed otherwise), an authorized one starts, and every lease still held is
    /// revoked (no sandbox survived the restart; a re-run gets a new one).
    async fn recover(&self) -> Result<(), ApiError> {
        let loaded = self.loaded();
        let holding = self
            .inner
            .store
            .scan(None, usize::MAX, |r| !r.leases.is_empty())
            .map_err(internal)?;
        for rec in &holding {
            crate::lease::revoke_after_restart(self, rec);
        }
        let open = self
            .inner
            .store
            .scan(None, usize::MAX, |r| {
                matches!(
                    r.status.phase,
                    Some(CallPhase::Running | CallPhase::Authorized)
                )
            })
            .map_err(internal)?;
        for rec in open {
            let mut run = rec.status.phase == Some(CallPhase::Authorized);
            if rec.status.phase == Some(CallPhase::Running) {
                let idempotent = loaded
                    .policies
                    .registry
                    .tool(&rec.namespace, &rec.spec.tool_ref.name)
                    .is_some_and(|t| toolgate_core::delegation::reruns_after_restart(&t.spec));
                let rec = self
                    .transition(&rec.id, |_| Ok(interrupted(idempotent)))
                    .await?;
                run = rec.status.phase == Some(CallPhase::Authorized);
            }
            if run {
                crate::run::spawn(self, rec.id);
            }
        }
        Ok(())
    }

    async fn watch_manifests(&self) {
        let mut last = self.loaded().fingerprint.clone();
        loop {
            tokio::time::sleep(self.inner.config.reload_interval).await;
            let dir = self.inner.config.manifests.clone();
            // A changed folder is put in force first: listing the servers that are due starts
            // each in its sandbox and may take seconds, and a reviewer's change must not wait
            // for it.
            let now = crate::manifests::fingerprint(&dir, &self.loaded().hidden);
            if now != last {
                last = now;
                self.reload(&dir).await;
            }
            // A server whose tools changed is a change of the manifests too.
            if self.discover(false).await {
                self.reload(&dir).await;
            }
        }
    }

    /// Load the manifest folder again with the tools discovered so far; a folder that does not
    /// lint keeps the previous manifests in force.
    async fn reload(&self, dir: &std::path::Path) {
        let discovered = crate::runtime::lock(&self.inner.discovered).clone();
        match load_folder(&self.inner.linter, dir, Timestamp::now(), &discovered) {
            Err(errors) => {
                tracing::error!(
                    errors = errors.len(),
                    "the changed manifests do not lint; keeping the previous ones:\n{}",
                    errors.join("\n")
                );
            }
            Ok(loaded) => {
                tracing::info!(dir = %dir.display(), "manifests reloaded");
                let loaded = self.swap_loaded(loaded);
                if let Err(e) = self.review_waiting(&loaded).await {
                    tracing::error!(error = %e, "re-checking pending calls after a reload");
                }
            }
        }
    }

    /// Put newly loaded manifests in force.
    fn swap_loaded(&self, loaded: crate::manifests::Loaded) -> Arc<crate::manifests::Loaded> {
        let loaded = Arc::new(loaded);
        match self.inner.loaded.write() {
            Ok(mut g) => *g = loaded.clone(),
            Err(p) => *p.into_inner() = loaded.clone(),
        }
        loaded
    }

    /// Calls waiting for approval, looked at again (the manifests changed, a dry run succeeded):
    /// a changed tool ends them, a grant gone denies them, a confirmation that arrived lets them
    /// run ([`awaiting`]).
    pub(crate) async fn review_waiting(&self, loaded: &Loaded) -> Result<(), ApiError> {
        let pending = self
            .inner
            .store
            .scan(None, usize::MAX, |r| {
                r.status.phase == Some(CallPhase::AwaitingApproval)
            })
            .map_err(internal)?;
        for rec in pending {
            let session = self.session_approvals(&rec)?;
            let dry_runs = self.dry_runs_for(loaded, &rec)?;
            let rec = self
                .transition(&rec.id, |r| {
                    let snap = self.snapshot(loaded, r, &r.approvals, &session, &dry_runs)?;
                    let mut status = r.status.clone();
                    let steps = awaiting(&snap, &call_of(r), &mut status);
                    r.status = status;
                    Ok(steps)
                })
                .await?;
            if rec.status.phase == Some(CallPhase::Authorized) {
                crate::run::spawn(self, rec.id);
            }
        }
        Ok(())
    }
}
