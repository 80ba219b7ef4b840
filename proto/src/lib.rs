//! The `toolgate.v1` gRPC API: messages, the client and the server trait, generated at build time
//! from `proto/toolgate/v1/toolgate.proto` (the only source; nothing generated is committed).
#![forbid(unsafe_code)]
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
