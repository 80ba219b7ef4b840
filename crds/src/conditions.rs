//! Condition types and reasons, in one place so every runtime tells the same story.

/// The causal chain of one call (DESIGN.md), in order. Each is a ToolCall condition type and an
/// event reason.
pub const CALL_CHAIN: [&str; 12] = [
    TOOL_CALL_REQUESTED,
    ARGS_VALIDATED,
    POLICY_CHECKED,
    APPROVAL_REQUESTED,
    APPROVAL_GRANTED,
    SANDBOX_PREPARED,
    CREDENTIALS_BOUND,
    STARTED,
    FINISHED,
    RESULT_VALIDATED,
    ARTIFACT_PERSISTED,
    STATE_UPDATED,
];

/// The call was received and recorded.
pub const TOOL_CALL_REQUESTED: &str = "ToolCallRequested";
/// The args satisfied the tool's input schema.
pub const ARGS_VALIDATED: &str = "ArgsValidated";
/// The policy decided.
pub const POLICY_CHECKED: &str = "PolicyChecked";
/// A human approval was requested.
pub const APPROVAL_REQUESTED: &str = "ApprovalRequested";
/// A bound approval was granted.
pub const APPROVAL_GRANTED: &str = "ApprovalGranted";
/// The sandbox was resolved and prepared.
pub const SANDBOX_PREPARED: &str = "SandboxPrepared";
/// The credential was brokered into the sandbox.
pub const CREDENTIALS_BOUND: &str = "CredentialsBound";
/// The executor started.
pub const STARTED: &str = "Started";
/// The executor finished.
pub const FINISHED: &str = "Finished";
/// The result passed its verifier.
pub const RESULT_VALIDATED: &str = "ResultValidated";
/// The full output was stored.
pub const ARTIFACT_PERSISTED: &str = "ArtifactPersisted";
/// toolgate recorded the final state.
pub const STATE_UPDATED: &str = "StateUpdated";

/// Ready condition of policies and bindings.
pub const READY: &str = "Ready";
