//! What a delegation allows its subagent, below the lifecycle that decides with it: the subagent
//! block of a tool, and the scope a subagent's call is decided within ([`Scope`];
//! `crate::delegation` finds it for a call, `crate::decision` checks a call against it).

use toolgate_crds::{SubagentSpec, ToolDescriptorSpec};

/// The subagent block of a delegation's tool, if it is one.
pub fn subagent_of(tool: &ToolDescriptorSpec) -> Option<&SubagentSpec> {
    (tool.execution.adapter == toolgate_crds::ExecutionAdapter::Subagent)
        .then_some(tool.subagent.as_ref())
        .flatten()
}

/// What a subagent's call is decided within: its delegation, as the runtime found it.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The parent call.
    pub parent: String,
    /// The tools the subagent may call.
    pub allowed_tools: Vec<String>,
    /// The delegation's budget of calls.
    pub max_calls: u32,
    /// Calls of the delegation decided so far, denied ones aside (the call under review aside).
    pub calls_used: u32,
    /// Whether the delegation is live (`Err`: why not).
    pub live: Result<(), String>,
}

impl Scope {
    /// Whether the delegation admits a call of `tool`: live, the tool allowed, budget left.
    /// `Err` is the decision's reason code and words.
    pub fn admits(&self, tool: &str) -> Result<(), (&'static str, String)> {
        if let Err(why) = &self.live {
            return Err((
                "delegation-not-live",
                format!("delegation {}: {why}", self.parent),
            ));
        }
        if !self.allowed_tools.iter().any(|t| t == tool) {
            return Err((
                "delegation-tool-not-allowed",
                format!(
                    "delegation {} allows {} only, not {tool} (the delegator's grants do not widen it)",
                    self.parent,
                    self.allowed_tools.join(", ")
                ),
            ));
        }
        if self.calls_used >= self.max_calls {
            return Err((
                "delegation-budget-exhausted",
                format!(
                    "delegation {} has used its {} call(s)",
                    self.parent, self.max_calls
                ),
            ));
        }
        Ok(())
    }
}
