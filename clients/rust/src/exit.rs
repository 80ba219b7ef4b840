//! What the command line's exit codes mean, the same for `check` (a decision) and `call` (an
//! outcome): 0 allowed or done, 1 failed, 2 the manifests do not lint, 3 an approval is needed,
//! 4 denied.

/// An approval is needed (`check`), or the call waits for one (`call`).
pub const EXIT_APPROVAL: u8 = 3;
/// Denied.
pub const EXIT_DENY: u8 = 4;
/// Exit code when the manifests themselves do not lint.
pub const EXIT_BAD_MANIFESTS: u8 = 2;
