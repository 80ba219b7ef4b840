//! Errors as gRPC statuses: a status code, a message that says what and where, and the
//! standard `google.rpc` details (ErrorInfo with a stable reason, BadRequest with the field), so
//! clients branch on codes, not on text.

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The domain of every ErrorInfo.
pub const DOMAIN: &str = "toolgate.dev";

/// An API error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// No or unknown credentials.
    #[error("{0}")]
    Unauthenticated(String),
    /// The caller may not do this.
    #[error("{message}")]
    PermissionDenied {
        /// Stable reason.
        code: &'static str,
        /// What and why.
        message: String,
    },
    /// A request field is wrong.
    #[error("{field}: {message}")]
    InvalidArgument {
        /// Field path (`intent.action_type`, `args_json/path`).
        field: String,
        /// Expected and got.
        message: String,
    },
    /// No such object.
    #[error("{what} not found")]
    NotFound {
        /// What was looked for.
        what: String,
    },
    /// The object is not in a state that allows this.
    #[error("{message}")]
    FailedPrecondition {
        /// Stable reason.
        code: &'static str,
        /// What and why.
        message: String,
    },
    /// An idempotency key reused with different content.
    #[error("{message}")]
    AlreadyExists {
        /// Stable reason.
        code: &'static str,
        /// What and why.
        message: String,
    },
    /// Configuration of the server (at start).
    #[error("{0}")]
    Config(String),
    /// Something broke on our side; the message is safe to show.
    #[error("{0}")]
    Internal(String),
}

/// A failure of the runtime's own (a store, the API server), for `map_err`: the caller is told
/// it is internal; the words stay in the server's log and status.
pub fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(e.to_string())
}

impl ApiError {
    /// An invalid field.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A stable machine code.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthenticated(_) => "unauthenticated",
            ApiError::PermissionDenied { code, .. }
            | ApiError::FailedPrecondition { code, .. }
            | ApiError::AlreadyExists { code, .. } => code,
            ApiError::InvalidArgument { .. } => "invalid-argument",
            ApiError::NotFound { .. } => "not-found",
            ApiError::Config(_) => "config",
            ApiError::Internal(_) => "internal",
        }
    }

    fn grpc_code(&self) -> Code {
        match self {
            ApiError::Unauthenticated(_) => Code::Unauthenticated,
            ApiError::PermissionDenied { .. } => Code::PermissionDenied,
            ApiError::InvalidArgument { .. } => Code::InvalidArgument,
            ApiError::NotFound { .. } => Code::NotFound,
            ApiError::FailedPrecondition { .. } => Code::FailedPrecondition,
            ApiError::AlreadyExists { .. } => Code::AlreadyExists,
            ApiError::Config(_) | ApiError::Internal(_) => Code::Internal,
        }
    }
}

impl From<toolgate_core::lifecycle::Refusal> for ApiError {
    fn from(r: toolgate_core::lifecycle::Refusal) -> Self {
        use toolgate_core::lifecycle::Refusal;
        match r {
            Refusal::PermissionDenied { code, message } => {
                ApiError::PermissionDenied { code, message }
            }
            Refusal::FailedPrecondition { code, message } => {
                ApiError::FailedPrecondition { code, message }
            }
            Refusal::InvalidArgument { field, message } => ApiError::field(field, message),
            Refusal::AlreadyExists { code, message } => ApiError::AlreadyExists { code, message },
        }
    }
}

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Status {
        let mut details = ErrorDetails::new();
        let mut metadata = std::collections::HashMap::new();
        if let ApiError::InvalidArgument { field, message } = &e {
            details.add_bad_request_violation(field.clone(), message.clone());
            metadata.insert("field".to_string(), field.clone());
        }
        details.set_error_info(e.code(), DOMAIN, metadata);
        Status::with_error_details(e.grpc_code(), e.public_message(), details)
    }
}

impl ApiError {
    /// What the caller reads. A failure on our side may name files, hosts or store internals:
    /// it goes to the server's log under a reference, and the caller gets the reference.
    fn public_message(&self) -> String {
        match self {
            ApiError::Internal(message) | ApiError::Config(message) => {
                let reference = error_reference(message);
                tracing::error!(reference = %reference, error = %message, "internal error answered");
                format!("internal error (reference {reference}); the server's log has the details")
            }
            other => other.to_string(),
        }
    }
}

/// A short reference that ties a caller's error to the server's log line.
fn error_reference(message: &str) -> String {
    use sha2::{Digest, Sha256};
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = Sha256::new();
    h.update(message.as_bytes());
    h.update(
        SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_le_bytes(),
    );
    h.update(std::process::id().to_le_bytes());
    hex::encode(&h.finalize()[..4])
}

/// Read the machine code and field back from a status (clients and tests): the decoding is the
/// API's contract, so it lives with the generated client.
pub use toolgate_proto::status_code_and_field;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_carry_code_and_field() {
        let s: Status = ApiError::field(
            "intent.action_type",
            "expected one of read, write; got \"fly\"",
        )
        .into();
        assert_eq!(s.code(), Code::InvalidArgument);
        assert!(s.message().starts_with("intent.action_type: expected"));
        assert_eq!(
            status_code_and_field(&s),
            ("invalid-argument".into(), Some("intent.action_type".into()))
        );
        let s: Status = ApiError::PermissionDenied {
            code: "approval-self",
            message: "x".into(),
        }
        .into();
        assert_eq!(s.code(), Code::PermissionDenied);
        assert_eq!(status_code_and_field(&s).0, "approval-self");
    }

    #[test]
    fn internal_errors_do_not_show_server_paths() {
        let s: Status =
            ApiError::Internal("call store /var/lib/toolgate/toolgate.redb: I/O error".into())
                .into();
        assert_eq!(s.code(), Code::Internal);
        assert!(!s.message().contains("/var/lib"), "{}", s.message());
        assert!(s.message().starts_with("internal error (reference "));
        assert_eq!(status_code_and_field(&s).0, "internal");
    }
}
