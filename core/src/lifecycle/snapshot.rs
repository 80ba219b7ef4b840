//! What a call is decided against, whichever runtime holds it: the namespace's descriptors,
//! grants, sandbox policies and credential bindings, and the approvals that may bind the call.

use std::sync::OnceLock;

use jiff::Timestamp;
use toolgate_crds::{CredentialBindingSpec, SandboxPolicySpec, ToolCallSpec, ToolCallStatus};

use crate::approval::DryRunEntry;
use crate::args::ArgsLimits;
use crate::decision::{ApprovalEntry, CallUnderReview, Decision, decide};
use crate::manifest::{ObjectSet, Spec};
use crate::principal::Principal;
use crate::registry::{GrantEntry, GrantUsages, RegisteredTool, Registry, with_usage};

/// One call as the lifecycle sees it: where it is, what was proposed, how it stands.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Name (the call id).
    pub name: &'a str,
    /// The proposal (principal and groups set by toolgate from the caller's identity).
    pub spec: &'a ToolCallSpec,
    /// The status so far.
    pub status: &'a ToolCallStatus,
}

impl Call<'_> {
    /// The principal the call acts as, with the groups recorded at proposal.
    pub fn principal(&self) -> Principal {
        Principal::new(self.spec.principal.clone()).with_groups(self.spec.principal_groups.clone())
    }
}

/// A namespace's policy objects as a runtime holds them (from a manifests folder, or from the
/// cluster's caches): every object, and the registry of tools and grants built from them.
#[derive(Debug)]
pub struct Policies {
    /// Every object (sandbox policies and credential bindings are looked up here).
    pub objects: ObjectSet,
    /// Descriptors and grants, indexed.
    pub registry: Registry,
    /// The skills an agent may read (they grant nothing).
    pub skills: Vec<crate::skill::SkillEntry>,
}

impl Policies {
    /// Register the objects.
    pub fn new(objects: ObjectSet) -> Self {
        let registry = Registry::from_objects(&objects);
        Policies {
            objects,
            registry,
            skills: Vec::new(),
        }
    }

    /// The same policies with these skills.
    pub fn with_skills(mut self, skills: Vec<crate::skill::SkillEntry>) -> Self {
        self.skills = skills;
        self
    }

    /// Whether the decision on `call` may look at dry runs: it is an L5 call, not itself a dry
    /// run, of a tool that asks for a dry run as its second confirmation. A runtime fetches
    /// them ([`Snapshot::with_dry_runs`]) only then.
    pub fn wants_dry_runs(&self, call: &Call<'_>) -> bool {
        self.registry
            .tool(call.namespace, &call.spec.tool_ref.name)
            .is_some_and(|t| {
                t.tier == toolgate_crds::RiskTier::L5
                    && !call.spec.dry_run
                    && t.spec.strong_confirmation() == toolgate_crds::StrongConfirmation::DryRun
            })
    }
}

/// The policy objects of the call's namespace and the approvals that may bind it, at one
/// moment. A snapshot serves one call: the first [`Snapshot::decide`] is remembered, so a
/// transition that looks at the decision more than once decides once.
pub struct Snapshot<'a> {
    /// Descriptors and grants, indexed.
    pub registry: &'a Registry,
    /// Every policy object (sandbox policies and credential bindings are looked up here).
    pub objects: &'a ObjectSet,
    /// The call's own approvals and its session's allowForSession ones.
    pub approvals: Vec<ApprovalEntry<'a>>,
    /// The namespace's successful dry runs of the call's tool (for an L5 call whose tool asks
    /// for one; see [`Snapshot::wants_dry_runs`]).
    pub dry_runs: Vec<DryRunEntry<'a>>,
    /// When the decision is taken (grant windows, approval expiry).
    pub now: Timestamp,
    /// What each grant (namespace, name) has used of its budget, from its ledger.
    usage: GrantUsages,
    /// The delegation of a subagent's call (see [`Snapshot::with_delegation`]).
    delegation: Option<crate::subagent::Scope>,
    decision: OnceLock<Decision>,
}

impl<'a> Snapshot<'a> {
    /// A snapshot at `now`.
    pub fn new(policies: &'a Policies, approvals: Vec<ApprovalEntry<'a>>, now: Timestamp) -> Self {
        Snapshot {
            registry: &policies.registry,
            objects: &policies.objects,
            approvals,
            dry_runs: Vec::new(),
            now,
            usage: GrantUsages::new(),
            delegation: None,
            decision: OnceLock::new(),
        }
    }

    /// The same snapshot with the delegation a subagent's call belongs to, as the runtime found
    /// its parent ([`crate::subagent::Scope::of`]).
    pub fn with_delegation(mut self, scope: Option<crate::subagent::Scope>) -> Self {
        self.delegation = scope;
        self
    }

    /// The same snapshot with the grants' budget usage (namespace, name → usage).
    pub fn with_usage(mut self, usage: GrantUsages) -> Self {
        self.usage = usage;
        self
    }

    /// The same snapshot with the namespace's successful dry runs of the call's tool (see
    /// [`Policies::wants_dry_runs`]).
    pub fn with_dry_runs(mut self, dry_runs: Vec<DryRunEntry<'a>>) -> Self {
        self.dry_runs = dry_runs;
        self
    }

    /// A grant of the call's namespace, by name.
    pub fn grant(&self, namespace: &str, name: &str) -> Option<&'a crate::registry::GrantEntry> {
        self.registry
            .grants()
            .find(|g| g.namespace == namespace && g.name == name)
    }

    /// The decision on the call (taken once per snapshot).
    pub fn decide(&self, call: &Call<'_>) -> &Decision {
        self.decision.get_or_init(|| {
            // A subagent acts with its delegator's grants (narrowed by its delegation).
            let principal = match &call.spec.delegation {
                Some(d) => {
                    Principal::new(d.delegator.clone()).with_groups(d.delegator_groups.clone())
                }
                None => call.principal(),
            };
            // The principal's grants with what their ledgers say they used. The unit a call
            // already holds is its own: the re-check before it runs does not count it against
            // the call (it would refuse the call that took the last unit).
            let charged = call.status.budget_charged.as_ref().map(|r| r.name.as_str());
            let mut grants = with_usage(
                &self.registry.grants_for(call.namespace, &principal),
                &self.usage,
            );
            for g in grants
                .iter_mut()
                .filter(|g| charged == Some(g.name.as_str()))
            {
                g.usage.calls_total = g.usage.calls_total.saturating_sub(1);
                g.usage.calls_last_hour = g.usage.calls_last_hour.saturating_sub(1);
            }
            let grants: Vec<&GrantEntry> = grants.iter().collect();
            decide(
                &CallUnderReview {
                    namespace: call.namespace,
                    name: call.name,
                    spec: call.spec,
                    principal: &principal,
                    dry_runs: &self.dry_runs,
                    tool_policies: self.registry.tool_policies(call.namespace),
                    delegation: self.delegation.as_ref(),
                },
                self.registry.tool(call.namespace, &call.spec.tool_ref.name),
                &grants,
                &self.approvals,
                self.now,
                &ArgsLimits::default(),
            )
        })
    }

    /// The call's tool, when it is registered.
    pub fn tool(&self, call: &Call<'_>) -> Option<&'a RegisteredTool> {
        self.registry.tool(call.namespace, &call.spec.tool_ref.name)
    }

    /// A sandbox policy of the namespace.
    pub fn sandbox_policy(&self, namespace: &str, name: &str) -> Option<&'a SandboxPolicySpec> {
        match self
            .objects
            .find("SandboxPolicy", namespace, name)
            .map(|o| &o.spec)
        {
            Some(Spec::SandboxPolicy(p)) => Some(&**p),
            _ => None,
        }
    }

    /// A credential binding of the namespace.
    pub fn credential_binding(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<&'a CredentialBindingSpec> {
        match self
            .objects
            .find("CredentialBinding", namespace, name)
            .map(|o| &o.spec)
        {
            Some(Spec::CredentialBinding(b)) => Some(&**b),
            _ => None,
        }
    }

    /// The same moment with one more approval (one being issued): a fresh snapshot, decided
    /// anew.
    pub fn with_approval<'b>(&self, entry: ApprovalEntry<'b>) -> Snapshot<'b>
    where
        'a: 'b,
    {
        let mut approvals: Vec<ApprovalEntry<'b>> = self.approvals.clone();
        approvals.push(entry);
        Snapshot {
            registry: self.registry,
            objects: self.objects,
            approvals,
            dry_runs: self.dry_runs.clone(),
            now: self.now,
            usage: self.usage.clone(),
            delegation: self.delegation.clone(),
            decision: OnceLock::new(),
        }
    }

    /// The approval an entry names, by name.
    pub fn approval(&self, name: &str) -> Option<&ApprovalEntry<'a>> {
        self.approvals.iter().find(|a| a.name == name)
    }
}
