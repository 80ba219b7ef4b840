//! Args validation against a tool's input schema (invariant 3: before any policy check).

use serde_json::Value;

/// Limits checked before the schema, so a huge or deeply nested payload costs nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgsLimits {
    /// Largest args, in bytes of their canonical (RFC 8785) JSON: the bytes their digest hashes.
    pub max_bytes: usize,
    /// Deepest nesting of arrays and objects.
    pub max_depth: usize,
}

impl Default for ArgsLimits {
    fn default() -> Self {
        ArgsLimits {
            max_bytes: 256 * 1024,
            max_depth: 64,
        }
    }
}

/// One violation: where, which rule, and what a person reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON pointer into the args (`/path`), empty for the whole object.
    pub pointer: String,
    /// The rule broken (`required`, `maxLength`, `max-bytes`).
    pub rule: String,
    /// Expected and found.
    pub message: String,
}

/// The outcome of validating args.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArgsReport {
    /// Every violation; empty means valid.
    pub violations: Vec<Violation>,
}

impl ArgsReport {
    /// Whether the args are valid.
    pub fn is_valid(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The args a tool runs with: the proposed ones, plus each `default` its input schema gives for
/// a property the call left out (in nested objects too). JSON Schema's `default` is only an
/// annotation; applying it here, in one place for both runtimes, keeps "path defaults to `.`"
/// true when a template names `{{path}}`. The args digest stays the digest of what was proposed;
/// the defaults come from the tool version the approval also binds.
pub fn with_defaults(schema: &Value, args: Value) -> Value {
    let Value::Object(mut map) = args else {
        return args;
    };
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Value::Object(map);
    };
    for (name, property) in properties {
        match map.remove(name) {
            Some(value) => {
                map.insert(name.clone(), with_defaults(property, value));
            }
            None => {
                if let Some(default) = property.get("default") {
                    map.insert(name.clone(), default.clone());
                }
            }
        }
    }
    Value::Object(map)
}

/// Validate args against a JSON Schema, after the size and depth limits. Compiles the schema;
/// use [`validate_args_with`] with a compiled validator on hot paths.
pub fn validate_args(schema: &Value, args: &Value, limits: &ArgsLimits) -> ArgsReport {
    let canonical_len = crate::digest::canonical_len(args);
    if let Some(report) = check_limits(args, canonical_len, limits) {
        return report;
    }
    match jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
    {
        Ok(v) => validate_sized_args_with(&v, args, canonical_len, limits),
        Err(e) => ArgsReport {
            violations: vec![Violation {
                pointer: String::new(),
                rule: "schema".into(),
                message: format!("the tool's input schema is not valid JSON Schema: {e}"),
            }],
        },
    }
}

/// Validate args with a compiled schema, after the size and depth limits.
pub fn validate_args_with(
    validator: &jsonschema::Validator,
    args: &Value,
    limits: &ArgsLimits,
) -> ArgsReport {
    let canonical_len = crate::digest::canonical_len(args);
    validate_sized_args_with(validator, args, canonical_len, limits)
}

/// [`validate_args_with`] for a caller that already has the args' canonical length: a decision,
/// which gets it from [`crate::digest::args_digest_sized`] with the digest. Not public, so no
/// caller can hand the size limit a length of other bytes.
pub(crate) fn validate_sized_args_with(
    validator: &jsonschema::Validator,
    args: &Value,
    canonical_len: usize,
    limits: &ArgsLimits,
) -> ArgsReport {
    if let Some(report) = check_limits(args, canonical_len, limits) {
        return report;
    }
    // Valid args, the common case, build no error objects.
    if validator.is_valid(args) {
        return ArgsReport::default();
    }
    let violations = validator
        .iter_errors(args)
        .map(|e| Violation {
            pointer: e.instance_path().as_str().to_string(),
            rule: e
                .schema_path()
                .as_str()
                .rsplit('/')
                .next()
                .unwrap_or("")
                .to_string(),
            message: e.to_string(),
        })
        .collect();
    ArgsReport { violations }
}

/// The JSON Schema `format` that marks a string arg as a path in the workspace.
pub const PATH_FORMAT: &str = "path";

/// Paths in the args, which a policy decides on as text, in the one form each has: a path
/// property (`format: path` in the input schema, or `path` of a built-in file operation) is
/// refused unless normalised — no `.` or `..` segment, no `//` — so `src/../secret.txt` cannot
/// pass a rule that says `like "src/*"`, and a path that climbs out of the workspace is refused
/// outright. The message gives the normalised form to send instead.
pub fn path_violations(schema: &Value, args: &Value, builtin_path: bool) -> Vec<Violation> {
    let mut found = Vec::new();
    if builtin_path && let Some(path) = args.get("path").and_then(Value::as_str) {
        check_path("/path", path, &mut found);
    }
    let mut stack = vec![(schema, args, String::new())];
    while let Some((schema, value, pointer)) = stack.pop() {
        if schema.get("format").and_then(Value::as_str) == Some(PATH_FORMAT)
            && let Some(path) = value.as_str()
            && !(builtin_path && pointer == "/path")
        {
            check_path(&pointer, path, &mut found);
        }
        match value {
            Value::Object(fields) => {
                if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                    for (name, property) in properties {
                        if let Some(v) = fields.get(name) {
                            let escaped = name.replace('~', "~0").replace('/', "~1");
                            stack.push((property, v, format!("{pointer}/{escaped}")));
                        }
                    }
                }
            }
            Value::Array(items) => {
                if let Some(item) = schema.get("items").filter(|i| i.is_object()) {
                    for (i, v) in items.iter().enumerate() {
                        stack.push((item, v, format!("{pointer}/{i}")));
                    }
                }
            }
            _ => {}
        }
    }
    found
}

/// `path` with `.` and `..` segments resolved and repeated `/` collapsed (a trailing `/` kept
/// off), or `None` when it climbs above where it starts.
pub fn normalise_path(path: &str) -> Option<String> {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    Some(match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    })
}

fn check_path(pointer: &str, path: &str, found: &mut Vec<Violation>) {
    let trimmed = path
        .strip_suffix('/')
        .filter(|p| !p.is_empty())
        .unwrap_or(path);
    let message = match normalise_path(path) {
        _ if path.is_empty() => return,
        Some(normal) if normal == trimmed => return,
        Some(normal) => format!(
            "expected a normalised path (no `.`, `..` or `//` segments), got {}; send {}",
            short_json(&Value::String(path.into())),
            short_json(&Value::String(normal))
        ),
        None => format!(
            "expected a path inside the workspace, got {}, which climbs out of it",
            short_json(&Value::String(path.into()))
        ),
    };
    found.push(Violation {
        pointer: pointer.to_string(),
        rule: "path".into(),
        message,
    });
}

/// Size, depth and shape, checked before any schema work.
fn check_limits(args: &Value, size: usize, limits: &ArgsLimits) -> Option<ArgsReport> {
    let mut violations = Vec::new();
    if size > limits.max_bytes {
        violations.push(Violation {
            pointer: String::new(),
            rule: "max-bytes".into(),
            message: format!(
                "expected at most {} bytes of args, found {size}",
                limits.max_bytes
            ),
        });
    }
    let depth = nesting_depth(args);
    if depth > limits.max_depth {
        violations.push(Violation {
            pointer: String::new(),
            rule: "max-depth".into(),
            message: format!(
                "expected nesting at most {} deep, found {depth}",
                limits.max_depth
            ),
        });
    }
    if violations.is_empty() && !args.is_object() {
        violations.push(Violation {
            pointer: String::new(),
            rule: "type".into(),
            message: format!(
                "expected an object of named args, found {}",
                short_json(args)
            ),
        });
    }
    (!violations.is_empty()).then_some(ArgsReport { violations })
}

/// Nesting depth without recursion, so hostile input cannot exhaust the stack.
fn nesting_depth(v: &Value) -> usize {
    fn flat<'v>(mut members: impl Iterator<Item = &'v Value>) -> bool {
        !members.any(|m| m.is_object() || m.is_array())
    }
    // The common args, an object of plain values, without a stack.
    match v {
        Value::Object(o) if flat(o.values()) => return 1,
        Value::Array(a) if flat(a.iter()) => return 1,
        Value::Object(_) | Value::Array(_) => {}
        _ => return 0,
    }
    let mut max = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(a) => {
                max = max.max(d);
                stack.extend(a.iter().map(|c| (c, d + 1)));
            }
            Value::Object(o) => {
                max = max.max(d);
                stack.extend(o.values().map(|c| (c, d + 1)));
            }
            _ => {}
        }
    }
    max
}

/// A value for a message: JSON, cut to 80 characters.
pub fn short_json(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        let cut: String = s.chars().take(77).collect();
        format!("{cut}...")
    } else {
        s
    }
}

#[cfg(test)]
mod path_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_are_taken_only_in_their_normal_form() {
        let schema = json!({"type": "object", "properties": {
            "file": {"type": "string", "format": "path"},
            "list": {"type": "array", "items": {"type": "string", "format": "path"}},
            "note": {"type": "string"}}});
        for ok in ["src/a.ts", "src/", ".", "/workspace/src", "a/b/c"] {
            assert!(
                path_violations(&schema, &json!({"file": ok}), false).is_empty(),
                "{ok}"
            );
        }
        for (bad, says) in [
            ("src/../secret.txt", "send \"secret.txt\""),
            ("src/./../x", "send \"x\""),
            ("src//../x", "send \"x\""),
            ("./src/a", "send \"src/a\""),
            ("src/../../etc/passwd", "climbs out"),
            ("..", "climbs out"),
        ] {
            let v = path_violations(
                &schema,
                &json!({"file": bad, "note": "../free text"}),
                false,
            );
            assert_eq!(v.len(), 1, "{bad}: {v:?}");
            assert_eq!(v[0].pointer, "/file");
            assert!(v[0].message.contains(says), "{bad}: {}", v[0].message);
        }
        let v = path_violations(&schema, &json!({"list": ["ok", "a/../b"]}), false);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].pointer, "/list/1");
        // A built-in file operation's `path` is a path whatever its schema says.
        let plain = json!({"type": "object", "properties": {"path": {"type": "string"}}});
        assert!(path_violations(&plain, &json!({"path": "src/../x"}), false).is_empty());
        assert_eq!(
            path_violations(&plain, &json!({"path": "src/../x"}), true).len(),
            1
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_size_limit_counts_the_canonical_json() {
        let limits = ArgsLimits {
            max_bytes: 16,
            max_depth: 64,
        };
        // `{"path":"a.txt"}` is 16 bytes.
        assert!(validate_args(&schema(), &json!({"path": "a.txt"}), &limits).is_valid());
        let r = validate_args(&schema(), &json!({"path": "ab.txt"}), &limits);
        assert_eq!(r.violations[0].rule, "max-bytes");
        assert_eq!(
            r.violations[0].message,
            "expected at most 16 bytes of args, found 17"
        );
        // 1.0 is written `1`, as its digest hashes it: 15 bytes, where `serde_json` writes 17.
        let open = json!({"type": "object"});
        let args = json!({"n": 1.0, "mm": 25});
        assert!(validate_args(&open, &args, &limits).is_valid());
        // A compiled validator counts the same bytes, and so does a decision's sized path.
        let compiled = jsonschema::validator_for(&open).unwrap();
        assert!(validate_args_with(&compiled, &args, &limits).is_valid());
        let too_long = json!({"n": 1.0, "mmmm": 25});
        let r = validate_args_with(&compiled, &too_long, &limits);
        assert_eq!(
            r.violations[0].message,
            "expected at most 16 bytes of args, found 17"
        );
        let (_, len) = crate::digest::args_digest_sized(&too_long);
        assert_eq!(
            validate_sized_args_with(&compiled, &too_long, len, &limits),
            r
        );
    }

    fn schema() -> Value {
        json!({"type": "object", "required": ["path"], "additionalProperties": false,
               "properties": {"path": {"type": "string", "maxLength": 8, "pattern": "^[^/]"}}})
    }

    #[test]
    fn valid_args_pass() {
        assert!(
            validate_args(&schema(), &json!({"path": "a.txt"}), &ArgsLimits::default()).is_valid()
        );
    }

    #[test]
    fn each_violation_has_a_pointer_and_rule() {
        let r = validate_args(
            &schema(),
            &json!({"path": "/etc/passwd", "x": 1}),
            &ArgsLimits::default(),
        );
        let rules: Vec<_> = r
            .violations
            .iter()
            .map(|v| (v.pointer.as_str(), v.rule.as_str()))
            .collect();
        assert!(rules.contains(&("/path", "maxLength")), "{rules:?}");
        assert!(rules.contains(&("/path", "pattern")), "{rules:?}");
        assert!(rules.contains(&("", "additionalProperties")), "{rules:?}");
    }

    #[test]
    fn schema_defaults_fill_what_the_call_left_out() {
        let schema = json!({"type": "object", "properties": {
            "text": {"type": "string"},
            "path": {"type": "string", "default": "."},
            "opts": {"type": "object", "properties": {"depth": {"type": "integer", "default": 3}}}
        }});
        assert_eq!(
            with_defaults(&schema, json!({"text": "x"})),
            json!({"text": "x", "path": "."})
        );
        assert_eq!(
            with_defaults(&schema, json!({"text": "x", "path": "src", "opts": {}})),
            json!({"text": "x", "path": "src", "opts": {"depth": 3}})
        );
        assert_eq!(with_defaults(&schema, json!([1])), json!([1]));
    }

    #[test]
    fn nesting_depth_counts_containers_flat_or_not() {
        assert_eq!(nesting_depth(&json!("x")), 0);
        assert_eq!(nesting_depth(&json!({})), 1);
        assert_eq!(nesting_depth(&json!({"a": 1, "b": "x", "c": null})), 1);
        assert_eq!(nesting_depth(&json!([1, 2])), 1);
        assert_eq!(nesting_depth(&json!({"a": 1, "b": {}})), 2);
        assert_eq!(nesting_depth(&json!({"a": [[1], {"b": [2]}]})), 4);
        assert_eq!(nesting_depth(&json!([[[]]])), 3);
    }

    #[test]
    fn limits_come_first() {
        let big = json!({"path": "x".repeat(300 * 1024)});
        let r = validate_args(&schema(), &big, &ArgsLimits::default());
        assert_eq!(r.violations.len(), 1);
        assert_eq!(r.violations[0].rule, "max-bytes");
        let mut deep = json!(1);
        for _ in 0..70 {
            deep = json!([deep]);
        }
        let r = validate_args(&schema(), &json!({"path": deep}), &ArgsLimits::default());
        assert_eq!(r.violations[0].rule, "max-depth");
    }
}
