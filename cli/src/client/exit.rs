//! What the command line's exit codes mean, the same for `check` (a decision) and `call` (an
//! outcome): 0 allowed or done, 1 failed, 2 the manifests do not lint, 3 an approval is needed,
//! 4 denied.

/// An approval is needed (`check`), or the call waits for one (`call`).
pub const EXIT_APPROVAL: u8 = 3;
/// Denied.
pub const EXIT_DENY: u8 = 4;
/// Exit code when the manifests themselves do not lint.
pub const EXIT_BAD_MANIFESTS: u8 = 2;
/// A watch's `--timeout` (or `--wait-approval=DURATION`) passed before the call ended; the call
/// goes on.
pub const EXIT_TIMEOUT: u8 = 5;

/// Every exit code of the command line and what it means; the generated reference prints it.
pub const EXIT_CODES: &[(u8, &str)] = &[
    (
        0,
        "allowed (`check`), ran or runs (`call`, `get`), passed (`lint`, `eval`, `policy test`), no change (`diff`)",
    ),
    (
        1,
        "failed or cancelled (`call`, `get`); errors found (`lint`), a metric under its threshold (`eval`), a failing case (`policy test`); a request the server refused, or no server",
    ),
    (
        EXIT_BAD_MANIFESTS,
        "the manifests do not lint (`check`, `view`, `diff`, `eval`, `policy test`, `mcp normalize`); also clap's code for a command line it does not understand",
    ),
    (
        EXIT_APPROVAL,
        "an approval is needed (`check`), or the call waits for one (`call`, `get`)",
    ),
    (EXIT_DENY, "denied (`check`, `call`, `get`)"),
    (
        EXIT_TIMEOUT,
        "the wait ran out before the call ended (`call --watch`, `watch` with `--timeout` or `--wait-approval=DURATION`); the call goes on",
    ),
];
