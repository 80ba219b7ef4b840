//! What a call is decided against besides its namespace's policy objects.

use kube::Client;
use toolgate_core::lifecycle::{Call, Policies, Snapshot};
use toolgate_crds::ToolCall;

use crate::cache::PolicyCache;
use crate::policies::{Namespace, dry_runs};

/// What a call is decided against besides the namespace's objects: the dry runs that may
/// confirm an L5 call (read only when its tool asks for one) and, for a subagent's call, its
/// delegation as the parent stands now. The ToolCall controller and the agent API read the same,
/// so an approver is answered as the controller will decide.
pub(crate) struct CallInputs {
    dry_runs: Vec<ToolCall>,
    scope: Option<toolgate_core::delegation::Scope>,
}

impl CallInputs {
    /// Read them for `call` (`this`, as the lifecycle sees it) in `ns`.
    pub(crate) async fn read(
        client: &Client,
        cache: &PolicyCache,
        ns: &str,
        call: &ToolCall,
        this: &Call<'_>,
        policies: &Policies,
    ) -> Result<Self, kube::Error> {
        let dry_runs = if policies.wants_dry_runs(this) {
            dry_runs(client, ns, &call.spec.tool_ref.name).await?
        } else {
            Vec::new()
        };
        let scope = crate::delegation::scope(client, cache, ns, call).await?;
        Ok(CallInputs { dry_runs, scope })
    }

    /// The snapshot the call is decided with, over `namespace`'s objects.
    pub(crate) fn snapshot<'a>(&'a self, namespace: &'a Namespace) -> Snapshot<'a> {
        let dry_runs = self
            .dry_runs
            .iter()
            .filter_map(|c| {
                toolgate_core::approval::DryRunEntry::of(
                    c.metadata.name.as_deref()?,
                    &c.spec,
                    c.status.as_ref()?,
                )
            })
            .collect();
        namespace
            .snapshot()
            .with_dry_runs(dry_runs)
            .with_delegation(self.scope.clone())
    }
}
