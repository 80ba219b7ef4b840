//! Skills: a folder of procedural knowledge read into what toolgate governs — the one place a
//! skill's files become instructions and ToolDescriptors (both runtimes and `toolgate skill
//! inspect` call [`load`]). A skill teaches, it never grants:
//! - `SKILL.md`'s front matter (`name`, `description`) says when to use it; its body is the
//!   instructions an agent reads through the API. Text shaped like a prompt injection in it
//!   withholds the instructions until a reviewer names their digest (`instructionsReviewed`);
//! - a script runs only as a tool that `toolgate.yaml` declares, with every effect, the risk,
//!   permissions and the sandbox written there (nothing is inferred, nothing defaults to
//!   harmless); the script's text is carried in the descriptor (`execution.script`), so its
//!   digest changes with the script and the sandbox never needs the folder;
//! - each declared tool stays `discovered` until the Skill's `enabled` list names it at its
//!   current digest, and then it is callable only through grants, like any tool;
//! - a script no declaration names never becomes anything (the status lists it).

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::Value;
use toolgate_crds::{
    ContextPolicy, DiscoveredTool, Execution, ExecutionAdapter, Lifecycle, LocalObjectRef,
    Provenance, RetryPolicy, ScriptExecution, SkillSpec, SourceType, ToolDescription,
    ToolDescriptorSpec, ToolEffects, ToolIntentSpec, ToolPermissions, ToolRisk, ToolSchemas,
    ToolSource,
};

use crate::manifest::{Origin, RawManifest};

/// The file holding the front matter and the instructions.
pub const SKILL_FILE: &str = "SKILL.md";
/// The file declaring which scripts are tools.
pub const DECLARATIONS_FILE: &str = "toolgate.yaml";
/// The largest script carried in a descriptor.
pub const MAX_SCRIPT_BYTES: usize = 256 << 10;
/// The largest `SKILL.md` (front matter and instructions).
pub const MAX_INSTRUCTIONS_BYTES: usize = 256 << 10;
/// The largest `description` of the front matter (what a view shows).
const MAX_DESCRIPTION_CHARS: usize = 1024;

/// A skill's files. From a folder, keyed by their path in it (`scripts/run.py`); from a
/// ConfigMap, by base name (`run.py`), and `flat` says so.
#[derive(Debug, Clone, Default)]
pub struct Files {
    /// Content by key.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Keys are base names (a ConfigMap's).
    pub flat: bool,
}

impl Files {
    /// The file at `path` in the skill (by base name when flat).
    pub fn get(&self, path: &str) -> Option<&[u8]> {
        let key = if self.flat {
            path.rsplit('/').next().unwrap_or(path)
        } else {
            path
        };
        self.files.get(key).map(Vec::as_slice)
    }
}

/// What is wrong with a skill's files: which file, where in it, what was expected and found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {message}", if path.is_empty() { String::new() } else { format!(": {path}") })]
pub struct SkillError {
    /// The file (`toolgate.yaml`).
    pub file: String,
    /// The field path in it (`tools[0].effects`), or empty.
    pub path: String,
    /// What was expected and what was found.
    pub message: String,
}

fn error(file: &str, path: impl Into<String>, message: impl Into<String>) -> SkillError {
    SkillError {
        file: file.into(),
        path: path.into(),
        message: message.into(),
    }
}

/// The front matter toolgate reads (other keys, as agents' skill formats define them, are
/// kept out of toolgate's way).
#[derive(Debug, Deserialize)]
struct FrontMatter {
    name: String,
    description: String,
    #[serde(default)]
    metadata: BTreeMap<String, Value>,
}

/// `toolgate.yaml`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Declarations {
    tools: Vec<ScriptTool>,
}

/// One script declared as a tool. Every effect and the risk are the author's statement, read
/// as written; a reviewer checks them before enabling the digest.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ScriptTool {
    /// The tool's name in the skill: the descriptor is `<skill>.<name>`.
    name: String,
    /// The script's path in the skill (`scripts/run_test.py`).
    script: String,
    /// The program that runs it (`[python3]`).
    interpreter: Vec<String>,
    /// The script's arguments: an argv template over the args.
    #[serde(default)]
    argv: Vec<String>,
    /// The tool's version (default: the front matter's `metadata.version`, else `0.0.0`).
    #[serde(default)]
    version: Option<String>,
    description: ToolDescription,
    intent: ToolIntentSpec,
    input_schema: Value,
    #[serde(default)]
    output_schema: Option<Value>,
    effects: ToolEffects,
    risk: ToolRisk,
    permissions: ToolPermissions,
    #[serde(default)]
    sandbox_policy_ref: Option<LocalObjectRef>,
    #[serde(default)]
    credential_binding_ref: Option<LocalObjectRef>,
    context_policy: ContextPolicy,
    timeout_ms: u32,
    #[serde(default)]
    working_dir: Option<String>,
}

/// A skill read: what the API serves and the descriptors its scripts become.
#[derive(Debug, Clone)]
pub struct LoadedSkill {
    /// The front matter's `description`.
    pub description: String,
    /// The instructions (the body of `SKILL.md`).
    pub instructions: String,
    /// `sha256:` of the whole `SKILL.md`.
    pub instructions_digest: String,
    /// Why the instructions are withheld (prompt-injection-shaped text nobody reviewed), if
    /// they are.
    pub withheld: Option<String>,
    /// The ToolDescriptors, origin `skill:<namespace>/<skill>`, linted with the manifests.
    pub manifests: Vec<RawManifest>,
    /// Each declared tool as the Skill's status shows it.
    pub tools: Vec<DiscoveredTool>,
    /// Scripts no declaration names.
    pub unregistered: Vec<String>,
}

impl LoadedSkill {
    /// The status the Skill object shows.
    pub fn status(&self) -> toolgate_crds::SkillStatus {
        let enabled = self
            .tools
            .iter()
            .filter(|t| t.lifecycle == Lifecycle::Enabled)
            .count();
        toolgate_crds::SkillStatus {
            observed_generation: None,
            conditions: vec![],
            description: Some(self.description.clone()),
            instructions_digest: Some(self.instructions_digest.clone()),
            instructions_withheld: self.withheld.clone(),
            tool_count: u32::try_from(self.tools.len()).unwrap_or(u32::MAX),
            enabled_count: u32::try_from(enabled).unwrap_or(u32::MAX),
            tools: self.tools.clone(),
            unregistered_scripts: self.unregistered.clone(),
        }
    }
}

/// Split `SKILL.md` into its YAML front matter and body.
fn split_front_matter(text: &str) -> Option<(&str, &str)> {
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))?;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Some((&rest[..offset], &rest[offset + line.len()..]));
        }
        offset += line.len();
    }
    None
}

fn utf8<'a>(file: &str, bytes: &'a [u8], limit: usize) -> Result<&'a str, SkillError> {
    if bytes.len() > limit {
        return Err(error(
            file,
            "",
            format!(
                "expected at most {limit} bytes, found {} (a larger file is refused, not cut)",
                bytes.len()
            ),
        ));
    }
    std::str::from_utf8(bytes)
        .map_err(|e| error(file, "", format!("expected UTF-8 text, found {e}")))
}

/// Read a skill's files: the instructions, and a descriptor per declared script (`namespace`,
/// `name` and `spec` are the Skill object's). Every problem is returned; any one refuses the
/// whole skill (half a skill would teach steps whose tools are missing).
pub fn load(
    namespace: &str,
    name: &str,
    spec: &SkillSpec,
    files: &Files,
) -> Result<LoadedSkill, Vec<SkillError>> {
    let mut errors = Vec::new();
    let instructions = instructions(name, spec, files, &mut errors)?;
    let declarations = declarations(files, &mut errors);
    let mut manifests = Vec::new();
    let mut tools = Vec::new();
    let mut declared_scripts = BTreeSet::new();
    let mut names = BTreeSet::new();
    for (i, tool) in declarations.tools.into_iter().enumerate() {
        let content = match script_of(i, &tool, name, files, &mut names) {
            Ok(content) => content,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        declared_scripts.insert(tool.script.clone());
        let tool_name = tool.name.clone();
        let d = script_descriptor(name, spec, tool, content, &instructions.default_version);
        let (discovered, manifest) = registered(namespace, name, spec, i, tool_name, &d);
        tools.push(discovered);
        manifests.push(manifest);
    }
    enabled_are_declared(spec, &tools, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(LoadedSkill {
        description: instructions.description,
        instructions: instructions.body,
        instructions_digest: instructions.digest,
        withheld: instructions.withheld,
        manifests,
        tools,
        unregistered: unregistered(files, &declared_scripts),
    })
}

/// What `SKILL.md` says: its description, its instructions and their digest, whether they are
/// withheld for review, and the version its scripts default to.
struct Instructions {
    description: String,
    body: String,
    digest: String,
    withheld: Option<String>,
    default_version: Option<String>,
}

/// Read `SKILL.md`; a file that cannot be read at all refuses the skill at once, other problems
/// are added to `errors`.
fn instructions(
    name: &str,
    spec: &SkillSpec,
    files: &Files,
    errors: &mut Vec<SkillError>,
) -> Result<Instructions, Vec<SkillError>> {
    let Some(raw) = files.get(SKILL_FILE) else {
        return Err(vec![error(
            SKILL_FILE,
            "",
            "expected the skill's SKILL.md (front matter and instructions), found no such file",
        )]);
    };
    let text = utf8(SKILL_FILE, raw, MAX_INSTRUCTIONS_BYTES).map_err(|e| vec![e])?;
    let Some((front, body)) = split_front_matter(text) else {
        return Err(vec![error(
            SKILL_FILE,
            "",
            "expected YAML front matter between two `---` lines at the top (name, description)",
        )]);
    };
    let front: FrontMatter = serde_path_to_error::deserialize(
        serde_norway::Deserializer::from_str(front),
    )
    .map_err(|e| {
        vec![error(
            SKILL_FILE,
            format!("front matter {}", e.path()),
            e.inner().to_string(),
        )]
    })?;
    if front.name != name {
        errors.push(error(
            SKILL_FILE,
            "front matter name",
            format!("expected the Skill's name {name:?}, found {:?}", front.name),
        ));
    }
    let description = front.description.trim().to_string();
    if description.is_empty() || description.chars().count() > MAX_DESCRIPTION_CHARS {
        errors.push(error(
            SKILL_FILE,
            "front matter description",
            format!(
                "expected 1 to {MAX_DESCRIPTION_CHARS} characters saying when to use the skill, found {}",
                description.chars().count()
            ),
        ));
    }
    let digest = crate::digest::sha256(raw);
    let flagged: Vec<&str> = crate::findings::poisoning::scan(text);
    let withheld = (!flagged.is_empty()
        && spec.instructions_reviewed.as_deref() != Some(digest.as_str()))
    .then(|| {
        format!(
            "SKILL.md contains {}: withheld until a reviewer who read it sets spec.instructionsReviewed to {digest:?}",
            flagged.join("; ")
        )
    });
    let default_version = front
        .metadata
        .get("version")
        .and_then(Value::as_str)
        .map(str::to_string);

    Ok(Instructions {
        description,
        body: body.trim_start_matches(['\n', '\r']).to_string(),
        digest,
        withheld,
        default_version,
    })
}

/// `toolgate.yaml`, or no declarations (its problem added to `errors`).
fn declarations(files: &Files, errors: &mut Vec<SkillError>) -> Declarations {
    match files.get(DECLARATIONS_FILE) {
        None => Declarations { tools: vec![] },
        Some(bytes) => match utf8(DECLARATIONS_FILE, bytes, MAX_INSTRUCTIONS_BYTES).and_then(|t| {
            serde_path_to_error::deserialize(serde_norway::Deserializer::from_str(t)).map_err(|e| {
                error(
                    DECLARATIONS_FILE,
                    e.path().to_string(),
                    e.inner().to_string(),
                )
            })
        }) {
            Ok(d) => d,
            Err(e) => {
                errors.push(e);
                Declarations { tools: vec![] }
            }
        },
    }
}

/// The script of declaration `i`, checked: a tool name used once, a path inside the skill, an
/// interpreter that runs the file (never a shell command line), the file present as UTF-8.
fn script_of(
    i: usize,
    tool: &ScriptTool,
    name: &str,
    files: &Files,
    names: &mut BTreeSet<String>,
) -> Result<String, SkillError> {
    let at = |field: &str| format!("tools[{i}].{field}");
    if !crate::names::is_dns_label(&tool.name) {
        return Err(error(
            DECLARATIONS_FILE,
            at("name"),
            format!(
                "expected a lowercase name of letters, digits and '-' (the tool is {name}.<name>), found {:?}",
                tool.name
            ),
        ));
    }
    if !names.insert(tool.name.clone()) {
        return Err(error(
            DECLARATIONS_FILE,
            at("name"),
            format!("expected each tool once, found {:?} twice", tool.name),
        ));
    }
    if !safe_relative(&tool.script) {
        return Err(error(
            DECLARATIONS_FILE,
            at("script"),
            format!(
                "expected a path inside the skill (scripts/run.py, no '..', not absolute), found {:?}",
                tool.script
            ),
        ));
    }
    if tool.interpreter.is_empty() || tool.interpreter.iter().any(|a| a.is_empty()) {
        return Err(error(
            DECLARATIONS_FILE,
            at("interpreter"),
            "expected the program that runs the script and its options ([python3]), found none",
        ));
    }
    if let Some(shell) = shell_with_command(&tool.interpreter) {
        return Err(error(
            DECLARATIONS_FILE,
            at("interpreter"),
            format!(
                "expected an interpreter that runs the script file, found {shell}: toolgate never runs a shell command line"
            ),
        ));
    }
    let Some(content) = files.get(&tool.script) else {
        return Err(error(
            DECLARATIONS_FILE,
            at("script"),
            format!(
                "expected the file {:?} in the skill, found no such file",
                tool.script
            ),
        ));
    };
    utf8(&tool.script, content, MAX_SCRIPT_BYTES).map(str::to_string)
}

/// The descriptor of a checked script tool: the declaration as written, run by the CLI adapter
/// under the skill's trust and sandbox policy (or its own).
fn script_descriptor(
    name: &str,
    spec: &SkillSpec,
    tool: ScriptTool,
    content: String,
    default_version: &Option<String>,
) -> ToolDescriptorSpec {
    let canonical = format!("{name}.{}", tool.name);
    ToolDescriptorSpec {
        canonical_name: canonical.clone(),
        display_name: None,
        version: tool
            .version
            .clone()
            .or_else(|| default_version.clone())
            .unwrap_or_else(|| "0.0.0".into()),
        source: ToolSource {
            type_: SourceType::Skill,
            source_id: Some(format!("{name}/{}", tool.script)),
            package_name: None,
            server_id: None,
            uri: None,
        },
        description: tool.description,
        intent: tool.intent,
        schemas: ToolSchemas {
            input_schema: tool.input_schema,
            output_schema: tool.output_schema,
            error_schema: None,
        },
        effects: tool.effects,
        risk: tool.risk,
        permissions: tool.permissions,
        sandbox_policy_ref: Some(
            tool.sandbox_policy_ref
                .unwrap_or_else(|| spec.sandbox_policy_ref.clone()),
        ),
        credential_binding_ref: tool.credential_binding_ref,
        context_policy: tool.context_policy,
        execution: Execution {
            adapter: ExecutionAdapter::Cli,
            image: None,
            argv: tool.argv,
            stdin: None,
            working_dir: tool.working_dir,
            http: None,
            builtin: None,
            mcp: None,
            script: Some(ScriptExecution {
                path: tool.script.clone(),
                interpreter: tool.interpreter,
                content: content.clone(),
            }),
            timeout_ms: tool.timeout_ms,
            retry_policy: RetryPolicy::default(),
        },
        provenance: Provenance {
            trust_level: spec.trust_level,
            manifest_hash: Some(crate::digest::sha256(content.as_bytes())),
            signature: None,
            source_refs: vec![format!("skill:{name}/{}", tool.script)],
        },
        observability: None,
        deprecation: None,
        subagent: None,
        disabled: false,
    }
}

/// A script tool as the skill registers it: enabled when a reviewer enabled this digest.
fn registered(
    namespace: &str,
    name: &str,
    spec: &SkillSpec,
    document: usize,
    tool: String,
    d: &ToolDescriptorSpec,
) -> (DiscoveredTool, RawManifest) {
    let canonical = d.canonical_name.clone();
    let digest = crate::digest::descriptor_digest(d).unwrap_or_default();
    let enabled = spec
        .enabled
        .iter()
        .any(|e| e.tool == tool && e.digest == digest);
    let mut metadata = serde_json::json!({"name": canonical, "namespace": namespace});
    if enabled {
        metadata["annotations"] =
            serde_json::json!({crate::findings::poisoning::REVIEWED_ANNOTATION: digest});
    }
    let discovered = DiscoveredTool {
        tool,
        descriptor: canonical,
        digest,
        lifecycle: if enabled {
            Lifecycle::Enabled
        } else {
            Lifecycle::Discovered
        },
    };
    let manifest = RawManifest {
        origin: Origin {
            source: format!("skill:{namespace}/{name}"),
            document,
        },
        value: serde_json::json!({
            "apiVersion": toolgate_crds::API_VERSION,
            "kind": "ToolDescriptor",
            "metadata": metadata,
            "spec": d,
        }),
    };
    (discovered, manifest)
}

/// Every tool `spec.enabled` names is one the skill declares.
fn enabled_are_declared(spec: &SkillSpec, tools: &[DiscoveredTool], errors: &mut Vec<SkillError>) {
    for e in &spec.enabled {
        if !tools.iter().any(|t| t.tool == e.tool) {
            errors.push(error(
                "spec.enabled",
                e.tool.clone(),
                format!(
                    "expected a tool toolgate.yaml declares ({}), found {:?}",
                    if tools.is_empty() {
                        "it declares none".to_string()
                    } else {
                        tools
                            .iter()
                            .map(|t| t.tool.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                    e.tool
                ),
            ));
        }
    }
}

/// Script-like files no declaration names (a reviewer is told of them).
fn unregistered(files: &Files, declared_scripts: &BTreeSet<String>) -> Vec<String> {
    files
        .files
        .keys()
        .filter(|k| {
            let script_like = if files.flat {
                !matches!(k.as_str(), SKILL_FILE | DECLARATIONS_FILE) && !k.ends_with(".md")
            } else {
                k.starts_with("scripts/")
            };
            script_like
                && !declared_scripts.iter().any(|s| {
                    if files.flat {
                        s.rsplit('/').next() == Some(k.as_str())
                    } else {
                        s == *k
                    }
                })
        })
        .cloned()
        .collect()
}

/// A relative path that stays inside its folder.
fn safe_relative(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_.-".contains(c))
}

/// A shell told to run its next argument as a command line (`sh -c`), if the interpreter is one.
fn shell_with_command(interpreter: &[String]) -> Option<String> {
    let mut argv = interpreter.to_vec();
    // The script's path comes last: an interpreter `[sh, -c]` would run it as a command line.
    argv.push(String::new());
    crate::risk::inline_code(&argv)
        .filter(|(_, program)| crate::risk::is_shell(program))
        .map(|_| interpreter.join(" "))
}

impl SkillEntry {
    /// A Skill object as its status shows it (the operator's cache): no instructions, which are
    /// read on request.
    pub fn from_status(
        namespace: &str,
        name: &str,
        status: &toolgate_crds::SkillStatus,
    ) -> Option<Self> {
        Some(SkillEntry {
            namespace: namespace.to_string(),
            name: name.to_string(),
            description: status.description.clone()?,
            tools: status.tools.iter().map(|t| t.descriptor.clone()).collect(),
            instructions: None,
            instructions_digest: status.instructions_digest.clone().unwrap_or_default(),
            withheld: status.instructions_withheld.clone(),
        })
    }

    /// A skill as read (`toolgate local`, which holds the instructions).
    pub fn from_loaded(namespace: &str, name: &str, loaded: &LoadedSkill) -> Self {
        SkillEntry {
            namespace: namespace.to_string(),
            name: name.to_string(),
            description: loaded.description.clone(),
            tools: loaded.tools.iter().map(|t| t.descriptor.clone()).collect(),
            instructions: Some(loaded.instructions.clone()),
            instructions_digest: loaded.instructions_digest.clone(),
            withheld: loaded.withheld.clone(),
        }
    }
}

/// A skill as the API lists it: enough to rank it for an intent.
#[derive(Debug, Clone)]
pub struct SkillEntry {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// When to use it.
    pub description: String,
    /// The descriptors of its declared tools.
    pub tools: Vec<String>,
    /// The instructions, when this runtime holds them (the operator reads them on request).
    pub instructions: Option<String>,
    /// `sha256:` of `SKILL.md`.
    pub instructions_digest: String,
    /// Why the instructions are withheld, if they are.
    pub withheld: Option<String>,
}

/// A skill an intent matches, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchedSkill {
    /// Its name.
    pub name: String,
    /// When to use it.
    pub description: String,
    /// Why it matched (`description shares "failing", "test"`).
    pub reason: String,
    /// The descriptors of its declared tools (whether the caller may call them is the view's
    /// and the decision's business, not the skill's).
    pub tools: Vec<String>,
}

/// The skills of a namespace whose name or description shares words with the intent, the
/// most shared first (at most `max`). Withheld skills are not offered.
pub fn matching<'a>(
    skills: impl IntoIterator<Item = &'a SkillEntry>,
    namespace: &str,
    intent: &str,
    max: usize,
) -> Vec<MatchedSkill> {
    let wanted = crate::registry::terms(intent);
    let mut found: Vec<(usize, MatchedSkill)> = skills
        .into_iter()
        .filter(|s| s.namespace == namespace && s.withheld.is_none())
        .filter_map(|s| {
            let mut have = crate::registry::terms(&s.description);
            have.extend(crate::registry::terms(&s.name));
            let shared: Vec<&String> = wanted.intersection(&have).collect();
            (!shared.is_empty()).then(|| {
                (
                    shared.len(),
                    MatchedSkill {
                        name: s.name.clone(),
                        description: s.description.clone(),
                        reason: format!(
                            "its description shares {}",
                            shared
                                .iter()
                                .map(|w| format!("{w:?}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        tools: s.tools.clone(),
                    },
                )
            })
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    found.into_iter().take(max).map(|(_, m)| m).collect()
}

#[cfg(test)]
mod tests;
