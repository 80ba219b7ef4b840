//! The `toolgate.v1` gRPC API: messages, the client and the server trait, generated at build time
//! from `proto/toolgate/v1/toolgate.proto` (the only source; nothing generated is committed).
#![allow(
    clippy::doc_markdown,
    clippy::large_enum_variant,
    missing_docs,
    reason = "generated code"
)]

/// Package `toolgate.v1`.
pub mod v1 {
    tonic::include_proto!("toolgate.v1");
}

/// The encoded file descriptor set of the API, for the gRPC reflection service.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("toolgate_descriptor");

/// What an error status says besides its code and message, as the server encodes it in the
/// standard `google.rpc` details: the ErrorInfo's stable reason (`invalid-argument`,
/// `approval-self`, …; empty when absent) and the first BadRequest field violation's path
/// (`intent.action_type`), for clients that branch on codes, not on text.
pub fn status_code_and_field(status: &tonic::Status) -> (String, Option<String>) {
    use tonic_types::StatusExt;
    let details = status.get_error_details();
    let code = details
        .error_info()
        .map(|i| i.reason.clone())
        .unwrap_or_default();
    let field = details
        .bad_request()
        .and_then(|b| b.field_violations.first().map(|v| v.field.clone()));
    (code, field)
}
