//! The `toolgate.v1` gRPC service, written once over a [`Backend`]: the embedded runtime and the
//! operator each implement the backend; authentication, error mapping, reflection and health
//! live here.

pub mod auth;
pub mod convert;
pub mod error;
pub mod metrics;
pub mod request;
pub mod service;
mod tls;
pub mod trace;
pub mod validate;

pub use auth::{Authenticator, Caller, TokenFile};
pub use error::{ApiError, internal};
pub use service::{Backend, BoxStream, serve};
pub use tls::TlsFiles;
