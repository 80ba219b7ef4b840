//! The executor contract: what a runtime hands the executor for one call ([`exec::ExecSpec`]),
//! what the executor and the runtimes do to text a model or a person will read (redaction of
//! credentials, neutralising control characters, argv templates, secret shapes), and the saved
//! `tools/list` answer of an MCP server. Small on purpose: the executor, the sandbox and the
//! artifact store link this and not the decision core (Cedar, CEL, the registry).

pub mod egress;
pub mod exec;
pub mod mcp_list;
pub mod redact;
pub mod secrets;
pub mod template;
pub mod text;
