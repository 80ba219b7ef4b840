//! A saved MCP `tools/list` answer, as the executor writes it when it lists a server and the
//! runtimes read it back.

use serde_json::Value;

/// The largest `tools/list` answer read (a server that sends more is refused, not parsed).
pub const MAX_LIST_BYTES: usize = 16 << 20;

/// Why a `tools/list` answer cannot be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    /// Too large.
    #[error("the tools/list answer is {0} bytes; at most {MAX_LIST_BYTES} are read")]
    TooLarge(usize),
    /// Not JSON.
    #[error("the tools/list answer is not JSON: {0}")]
    NotJson(String),
    /// JSON of another shape.
    #[error(
        "expected a tools/list result ({{\"tools\": [...]}}, a JSON-RPC response holding one, or a bare array), found {0}"
    )]
    Shape(&'static str),
}

/// The tools of a saved `tools/list` answer: `{"tools": [...]}`, a JSON-RPC response whose
/// `result` is that, or a bare array.
pub fn parse_list(text: &str) -> Result<Vec<Value>, ListError> {
    if text.len() > MAX_LIST_BYTES {
        return Err(ListError::TooLarge(text.len()));
    }
    let v: Value = serde_json::from_str(text).map_err(|e| ListError::NotJson(e.to_string()))?;
    let v = match v {
        Value::Object(mut m) if m.contains_key("result") && !m.contains_key("tools") => {
            m.remove("result").unwrap_or(Value::Null)
        }
        other => other,
    };
    match v {
        Value::Array(tools) => Ok(tools),
        Value::Object(mut m) => match m.remove("tools") {
            Some(Value::Array(tools)) => Ok(tools),
            Some(_) => Err(ListError::Shape("a \"tools\" that is not an array")),
            None => Err(ListError::Shape("an object without \"tools\"")),
        },
        _ => Err(ListError::Shape("neither an object nor an array")),
    }
}

/// The server's version a saved answer carries beside its tools (`"serverInfo": {"version"}`,
/// from the `initialize` answer), which the runtimes put in each descriptor's version: a
/// reviewer's normalize then gives the digests discovery does.
pub fn saved_server_version(text: &str) -> Option<String> {
    if text.len() > MAX_LIST_BYTES {
        return None;
    }
    let v: Value = serde_json::from_str(text).ok()?;
    let info = v
        .get("serverInfo")
        .or_else(|| v.get("result")?.get("serverInfo"))?;
    info.get("version")?.as_str().map(str::to_string)
}
