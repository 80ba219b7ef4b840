//! ToolPolicies in Cedar: `forbid` rules over who calls which tool on what target with which
//! args. They are evaluated after the built-in rules and can only narrow: a grant is what
//! permits, a matching forbid denies (enforce) or is recorded (shadow).
//!
//! The Cedar model, generated from a namespace's descriptors (so `toolgate lint` type-checks
//! every policy against the tools it names):
//!
//! ```text
//! entity Group;
//! entity User in [Group] { name: String };
//! entity ServiceAccount in [Group] { name: String, namespace: String };
//! entity Target { kind: String };
//! action "<tool>" appliesTo { principal: [User, ServiceAccount], resource: [Target],
//!   context: { args: <the input schema as Cedar types>, riskTier: String, actionType: String,
//!              dryRun: Bool, namespace: String, time: datetime } };
//! ```
//!
//! Policies are indexed by the actions their scope names, so a decision evaluates only the
//! policies that can apply to its tool (and those whose scope names no action). A policy that
//! does not compile fails closed: the calls it could constrain are denied until it is fixed.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;

use cedar_policy::{
    ActionConstraint, Authorizer, Context, Effect, Entities, Entity, EntityUid, Policy, PolicyId,
    PolicySet, Request, RestrictedExpression, Schema, ValidationMode, Validator,
};
use jiff::Timestamp;
use miette::Diagnostic;
use serde_json::{Map, Value, json};
use toolgate_crds::{ActionType, CallTarget, PolicyMode, ToolPolicySpec};

use crate::principal::Principal;
use crate::registered::RegisteredTool;

/// A problem with a ToolPolicy, where in its `spec.policies` text it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The ToolPolicy.
    pub tool_policy: String,
    /// Stable code (`cedar-parse`, `cedar-type`, `cedar-permit`).
    pub code: &'static str,
    /// 1-based line in `spec.policies`, when Cedar says where.
    pub line: Option<usize>,
    /// 1-based column.
    pub column: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "line {l}, column {c}: {}", self.message),
            _ => f.write_str(&self.message),
        }
    }
}

/// A forbid as written, with where it lives and whether it is enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The ToolPolicy.
    pub tool_policy: String,
    /// Enforced or shadow.
    pub mode: PolicyMode,
    /// The policy text.
    pub text: String,
}

/// A forbid that matched a call (or would have, in shadow mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forbid {
    /// The ToolPolicy.
    pub tool_policy: String,
    /// The policy's id (`<ToolPolicy>/<@id or position>`).
    pub policy: String,
    /// What the policy says about itself (`@reason`), or that it does not compile.
    pub reason: String,
}

/// What the namespace's ToolPolicies say about one call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Enforced forbids that matched (or errored, or do not compile: they fail closed).
    pub forbidden: Vec<Forbid>,
    /// Shadow forbids that matched: recorded, nothing else.
    pub shadow: Vec<Forbid>,
}

/// One call as Cedar sees it.
#[derive(Debug, Clone, Copy)]
pub struct CedarCall<'a> {
    /// The tool.
    pub tool: &'a RegisteredTool,
    /// Who calls.
    pub principal: &'a Principal,
    /// The call's namespace.
    pub namespace: &'a str,
    /// The args (already valid against the input schema).
    pub args: &'a Value,
    /// The intent's target.
    pub target: Option<&'a CallTarget>,
    /// The intent's action type.
    pub action_type: ActionType,
    /// Whether it is a dry run.
    pub dry_run: bool,
    /// When.
    pub now: Timestamp,
}

#[derive(Debug, Clone, Default)]
struct PolicyIndex {
    by_action: HashMap<String, PolicySet>,
    any_action: PolicySet,
}

impl PolicyIndex {
    fn add(&mut self, policy: Policy) {
        let actions = scope_actions(&policy);
        match actions {
            None => {
                let _ = self.any_action.add(policy);
            }
            Some(actions) => {
                for a in actions {
                    let _ = self.by_action.entry(a).or_default().add(policy.clone());
                }
            }
        }
    }

    fn sets_for<'s>(&'s self, tool: &str) -> impl Iterator<Item = &'s PolicySet> {
        self.by_action
            .get(tool)
            .into_iter()
            .chain(std::iter::once(&self.any_action))
            .filter(|s| s.policies().next().is_some())
    }

    fn is_empty(&self) -> bool {
        self.by_action.is_empty() && self.any_action.policies().next().is_none()
    }
}

/// An enforced policy that does not compile; it fails closed for the actions it names (all,
/// when it names none or does not parse).
#[derive(Debug, Clone)]
struct Broken {
    forbid: Forbid,
    actions: Option<Vec<String>>,
}

/// The compiled ToolPolicies of one namespace.
#[derive(Debug, Clone, Default)]
pub struct ToolPolicies {
    enforce: PolicyIndex,
    shadow: PolicyIndex,
    broken: Vec<Broken>,
    reasons: HashMap<String, (String, String)>,
    /// Each tool's args as Cedar sees them (from its input schema), computed once.
    shapes: HashMap<String, Shape>,
    /// Every forbid by id, as written, for `toolgate diff`.
    rules: BTreeMap<String, Rule>,
    count: usize,
}

impl ToolPolicies {
    /// Compile a namespace's ToolPolicies against its tools. The problems are what lint reports;
    /// a policy with one is left out, and if enforced, fails closed.
    pub fn compile<'a>(
        tools: impl IntoIterator<Item = &'a RegisteredTool>,
        policies: &[(&str, &ToolPolicySpec)],
    ) -> (ToolPolicies, Vec<Problem>) {
        let mut out = ToolPolicies::default();
        let mut problems = Vec::new();
        if policies.is_empty() {
            return (out, problems);
        }
        let tools: Vec<&RegisteredTool> = tools.into_iter().collect();
        out.shapes = tools
            .iter()
            .filter_map(|t| Some((t.name.clone(), input_shape(&t.spec.schemas.input_schema)?)))
            .collect();
        let validators = Validators::new(tools);
        for (name, spec) in policies {
            out.add_tool_policy(name, spec, &validators, &mut problems);
        }
        (out, problems)
    }

    fn add_tool_policy(
        &mut self,
        name: &str,
        spec: &ToolPolicySpec,
        validators: &Validators,
        problems: &mut Vec<Problem>,
    ) {
        let text = &spec.policies;
        let enforced = spec.mode == PolicyMode::Enforce;
        let parsed = match PolicySet::from_str(text) {
            Ok(p) => p,
            Err(errors) => {
                for e in errors.iter() {
                    problems.push(problem(name, "cedar-parse", text, e, e.to_string()));
                }
                if enforced {
                    self.broken.push(Broken {
                        forbid: broken_forbid(name, "(all)", "its policies do not parse"),
                        actions: None,
                    });
                }
                return;
            }
        };
        if parsed.templates().next().is_some() {
            problems.push(Problem {
                tool_policy: name.into(),
                code: "cedar-template",
                line: None,
                column: None,
                message:
                    "templates (?principal, ?resource) are not supported; write the policy out"
                        .into(),
            });
        }
        // Give each policy a stable id: `<ToolPolicy>/<@id>` or its position.
        let mut renamed = PolicySet::new();
        // Where each `permit` keyword is, to point at a permit policy.
        let mut permits = regex_permits(text).into_iter();
        for (i, p) in parsed.policies().enumerate() {
            let local = p
                .annotation("id")
                .map_or_else(|| i.to_string(), str::to_string);
            let id = format!("{name}/{local}");
            if p.effect() == Effect::Permit {
                problems.push(problem_at(
                    name,
                    "cedar-permit",
                    text,
                    permits.next(),
                    format!("policy {id} permits: a ToolPolicy can only forbid (grants are what permit); write `forbid (…) unless {{ … }}` to allow only some calls"),
                ));
                continue;
            }
            let reason = p
                .annotation("reason")
                .map_or_else(|| format!("forbidden by {id}"), str::to_string);
            self.reasons.insert(id.clone(), (name.to_string(), reason));
            self.rules.insert(
                id.clone(),
                Rule {
                    tool_policy: name.to_string(),
                    mode: spec.mode,
                    text: p.to_string(),
                },
            );
            if renamed.add(p.new_id(PolicyId::new(&id))).is_err() {
                problems.push(problem_at(
                    name,
                    "cedar-duplicate-id",
                    text,
                    None,
                    format!("two policies are named {id}"),
                ));
            }
        }
        // Validated by the actions their scopes name (see `Validators`).
        let mut by_scope: BTreeMap<Option<Vec<String>>, PolicySet> = BTreeMap::new();
        for p in renamed.policies() {
            let _ = by_scope.entry(scope_actions(p)).or_default().add(p.clone());
        }
        let mut invalid = std::collections::BTreeSet::new();
        for (actions, set) in &by_scope {
            match validators.validator(actions.as_deref()) {
                Ok(validator) => {
                    for e in validator
                        .validate(set, ValidationMode::Strict)
                        .validation_errors()
                    {
                        invalid.insert(e.policy_id().to_string());
                        problems.push(problem(name, "cedar-type", text, e, e.to_string()));
                    }
                }
                Err(e) => {
                    invalid.extend(set.policies().map(|p| p.id().to_string()));
                    problems.push(Problem {
                        tool_policy: name.into(),
                        code: "cedar-schema",
                        line: None,
                        column: None,
                        message: format!("the namespace's tools give no Cedar schema: {e}"),
                    });
                }
            }
        }
        for p in renamed.policies() {
            let id = p.id().to_string();
            self.count += 1;
            if invalid.contains(&id) {
                if enforced {
                    self.broken.push(Broken {
                        forbid: broken_forbid(
                            name,
                            &id,
                            "it does not type-check against the namespace's tools",
                        ),
                        actions: scope_actions(p),
                    });
                }
                continue;
            }
            match spec.mode {
                PolicyMode::Enforce => self.enforce.add(p.clone()),
                PolicyMode::Shadow => self.shadow.add(p.clone()),
            }
        }
    }

    /// Every forbid by id (`<ToolPolicy>/<@id or position>`).
    pub fn rules(&self) -> &BTreeMap<String, Rule> {
        &self.rules
    }

    /// How many policies the ToolPolicies hold.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.enforce.is_empty() && self.shadow.is_empty() && self.broken.is_empty()
    }

    /// What the policies say about a call: the enforced forbids that match (also those that
    /// error or do not compile: they fail closed) and the shadow ones that match.
    pub fn evaluate(&self, call: &CedarCall<'_>) -> Verdict {
        let mut verdict = Verdict::default();
        let tool = call.tool.name.as_str();
        for b in &self.broken {
            if b.actions
                .as_ref()
                .is_none_or(|a| a.iter().any(|x| x == tool))
            {
                verdict.forbidden.push(b.forbid.clone());
            }
        }
        let enforce: Vec<&PolicySet> = self.enforce.sets_for(tool).collect();
        let shadow: Vec<&PolicySet> = self.shadow.sets_for(tool).collect();
        if enforce.is_empty() && shadow.is_empty() {
            return verdict;
        }
        let prepared = match prepare(call, Some(self.shapes.get(tool))) {
            Ok(p) => p,
            Err(e) => {
                // The call cannot be put to the policies that apply to it: fail closed.
                if !enforce.is_empty() {
                    verdict.forbidden.push(broken_forbid(
                        "(args)",
                        "(args)",
                        &format!("the call's args cannot be given to Cedar: {e}"),
                    ));
                }
                return verdict;
            }
        };
        let authorizer = Authorizer::new();
        for set in enforce {
            let r = authorizer.is_authorized(&prepared.request, set, &prepared.entities);
            for id in r.diagnostics().reason() {
                verdict.forbidden.push(self.forbid(id, None));
            }
            for e in r.diagnostics().errors() {
                let cedar_policy::AuthorizationError::PolicyEvaluationError(e) = e;
                verdict
                    .forbidden
                    .push(self.forbid(e.policy_id(), Some(&e.to_string())));
            }
        }
        for set in shadow {
            let r = authorizer.is_authorized(&prepared.request, set, &prepared.entities);
            for id in r.diagnostics().reason() {
                verdict.shadow.push(self.forbid(id, None));
            }
        }
        verdict.forbidden.sort_by(|a, b| a.policy.cmp(&b.policy));
        verdict.forbidden.dedup();
        verdict.shadow.sort_by(|a, b| a.policy.cmp(&b.policy));
        verdict.shadow.dedup();
        verdict
    }

    /// An enforced forbid that refuses every call of `tool` by `principal`, whatever its args
    /// and target: one whose conditions need nothing of the call (a policy that looks at the
    /// args cannot be decided without them and does not count). Views hide such a tool.
    pub fn forbids_every_call(
        &self,
        tool: &RegisteredTool,
        principal: &Principal,
        namespace: &str,
        now: Timestamp,
    ) -> Option<Forbid> {
        let name = tool.name.as_str();
        if let Some(b) = self.broken.iter().find(|b| {
            b.actions
                .as_ref()
                .is_none_or(|a| a.iter().any(|x| x == name))
        }) {
            return Some(b.forbid.clone());
        }
        let sets: Vec<&PolicySet> = self.enforce.sets_for(name).collect();
        if sets.is_empty() {
            return None;
        }
        let call = CedarCall {
            tool,
            principal,
            namespace,
            args: &Value::Null,
            target: None,
            action_type: tool
                .spec
                .intent
                .action_types
                .first()
                .copied()
                .unwrap_or(ActionType::Read),
            dry_run: false,
            now,
        };
        let prepared = prepare(&call, None).ok()?;
        let authorizer = Authorizer::new();
        sets.into_iter().find_map(|set| {
            let r = authorizer.is_authorized(&prepared.request, set, &prepared.entities);
            r.diagnostics()
                .reason()
                .next()
                .map(|id| self.forbid(id, None))
        })
    }

    fn forbid(&self, id: &PolicyId, error: Option<&str>) -> Forbid {
        let key = id.to_string();
        let (tool_policy, reason) = self
            .reasons
            .get(&key)
            .cloned()
            .unwrap_or_else(|| (String::new(), format!("forbidden by {key}")));
        Forbid {
            tool_policy,
            reason: match error {
                Some(e) => {
                    format!("{reason} (the policy failed on this call, so it refuses it: {e})")
                }
                None => reason,
            },
            policy: key,
        }
    }
}

/// Offsets of the `permit` keywords that start policies, in order.
fn regex_permits(text: &str) -> Vec<usize> {
    static PERMIT: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    PERMIT
        .get_or_init(|| regex::Regex::new(r"(?m)(^|[;}\s])(permit)\s*\(").ok())
        .as_ref()
        .map(|re| {
            re.captures_iter(text)
                .filter_map(|c| c.get(2).map(|m| m.start()))
                .collect()
        })
        .unwrap_or_default()
}

fn broken_forbid(tool_policy: &str, policy: &str, why: &str) -> Forbid {
    Forbid {
        tool_policy: tool_policy.into(),
        policy: policy.into(),
        reason: format!(
            "ToolPolicy {tool_policy} does not compile ({why}); its calls are refused until it is fixed"
        ),
    }
}

/// The actions a policy's scope names; `None` when it names none (it may apply to any tool).
fn scope_actions(p: &Policy) -> Option<Vec<String>> {
    match p.action_constraint() {
        ActionConstraint::Any => None,
        ActionConstraint::Eq(uid) => Some(vec![uid.id().unescaped().to_string()]),
        ActionConstraint::In(uids) => Some(
            uids.iter()
                .map(|u| u.id().unescaped().to_string())
                .collect(),
        ),
    }
}

fn problem(
    tool_policy: &str,
    code: &'static str,
    text: &str,
    d: &dyn Diagnostic,
    message: String,
) -> Problem {
    let offset = d.labels().and_then(|mut l| l.next()).map(|l| l.offset());
    let help = d.help().map(|h| format!(" ({h})")).unwrap_or_default();
    problem_at(tool_policy, code, text, offset, format!("{message}{help}"))
}

fn problem_at(
    tool_policy: &str,
    code: &'static str,
    text: &str,
    offset: Option<usize>,
    message: String,
) -> Problem {
    let (line, column) = match offset {
        Some(o) => {
            let before = &text[..o.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            (Some(line), Some(column))
        }
        None => (None, None),
    };
    Problem {
        tool_policy: tool_policy.into(),
        code,
        line,
        column,
        message,
    }
}

struct Prepared {
    request: Request,
    entities: Entities,
}

/// The request and entities of a call, its args in `shape` (`None` leaves the args out: a policy
/// that reads them errors and does not match).
fn prepare(call: &CedarCall<'_>, shape: Option<Option<&Shape>>) -> Result<Prepared, String> {
    let action = uid("Action", &call.tool.name)?;
    let (principal, principal_entity) = principal_entity(call.principal)?;
    let target_ref = call.target.map_or("", |t| t.ref_.as_str());
    let target_kind = call
        .target
        .and_then(|t| serde_json::to_value(t.kind).ok())
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let resource = uid("Target", target_ref)?;
    let resource_entity = Entity::new(
        resource.clone(),
        [(
            "kind".to_string(),
            RestrictedExpression::new_string(target_kind),
        )]
        .into(),
        Default::default(),
    )
    .map_err(|e| e.to_string())?;
    let mut groups = Vec::new();
    for g in &call.principal.groups {
        groups.push(Entity::with_uid(uid("Group", g)?));
    }
    let string = |v: &str| RestrictedExpression::new_string(v.to_string());
    let mut ctx: Vec<(String, RestrictedExpression)> = Vec::with_capacity(6);
    if let Some(shape) = shape {
        ctx.push(("args".into(), args_expr(call.args, shape)?));
    }
    ctx.push(("riskTier".into(), string(&call.tool.tier.to_string())));
    ctx.push(("actionType".into(), string(call.action_type.as_str())));
    ctx.push((
        "dryRun".into(),
        RestrictedExpression::new_bool(call.dry_run),
    ));
    ctx.push(("namespace".into(), string(call.namespace)));
    ctx.push((
        "time".into(),
        RestrictedExpression::new_datetime(call.now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
    ));
    // Typed already: the args passed their input schema and `args_expr` follows their Cedar
    // shape; no JSON round trip, no schema lookup among all the namespace's actions per call.
    let context = Context::from_pairs(ctx).map_err(|e| e.to_string())?;
    let entities = Entities::from_entities(
        [principal_entity, resource_entity]
            .into_iter()
            .chain(groups),
        None,
    )
    .map_err(|e| e.to_string())?;
    let request =
        Request::new(principal, action, resource, context, None).map_err(|e| e.to_string())?;
    Ok(Prepared { request, entities })
}

fn uid(kind: &str, id: &str) -> Result<EntityUid, String> {
    let kind = cedar_policy::EntityTypeName::from_str(kind).map_err(|e| e.to_string())?;
    Ok(EntityUid::from_type_name_and_id(
        kind,
        cedar_policy::EntityId::new(id),
    ))
}

fn principal_entity(p: &Principal) -> Result<(EntityUid, Entity), String> {
    let parents = p
        .groups
        .iter()
        .map(|g| uid("Group", g))
        .collect::<Result<std::collections::HashSet<_>, _>>()?;
    let (kind, mut attrs) = match p.service_account() {
        Some((ns, name)) => (
            "ServiceAccount",
            vec![
                ("namespace".to_string(), ns.to_string()),
                ("name".to_string(), name.to_string()),
            ],
        ),
        None => ("User", vec![("name".to_string(), p.name.clone())]),
    };
    let id = uid(kind, &p.name)?;
    let attrs: std::collections::HashMap<String, RestrictedExpression> = attrs
        .drain(..)
        .map(|(k, v)| (k, RestrictedExpression::new_string(v)))
        .collect();
    let entity = Entity::new(id.clone(), attrs, parents).map_err(|e| e.to_string())?;
    Ok((id, entity))
}

/// The Cedar type of an input-schema node, when it has one: strings, integers (`Long`),
/// numbers (`decimal`), booleans, arrays of a typed item (`Set`) and objects with properties
/// (`Record`, required as the schema says). Anything else has no Cedar form and is left out of
/// `context.args` (a policy that names it fails lint).
fn cedar_type(schema: &Value) -> Option<Value> {
    let ty = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        None if schema
            .get("enum")
            .and_then(Value::as_array)
            .is_some_and(|e| !e.is_empty() && e.iter().all(Value::is_string)) =>
        {
            "string"
        }
        _ => return None,
    };
    Some(match ty {
        "string" => json!({"type": "String"}),
        "integer" => json!({"type": "Long"}),
        "number" => json!({"type": "Extension", "name": "decimal"}),
        "boolean" => json!({"type": "Boolean"}),
        "array" => json!({"type": "Set", "element": cedar_type(schema.get("items")?)?}),
        "object" => {
            let props = schema.get("properties").and_then(Value::as_object)?;
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut attributes = Map::new();
            for (k, v) in props {
                if let Some(mut t) = cedar_type(v) {
                    t["required"] = json!(required.contains(&k.as_str()));
                    attributes.insert(k.clone(), t);
                }
            }
            json!({"type": "Record", "attributes": attributes})
        }
        _ => return None,
    })
}

/// The shape the args take in Cedar: the input schema's typed part.
#[derive(Debug, Clone)]
enum Shape {
    Plain,
    Decimal,
    Set(Box<Shape>),
    Record(BTreeMap<String, Shape>),
}

fn input_shape(schema: &Value) -> Option<Shape> {
    let t = cedar_type(schema)?;
    Some(shape_of(&t))
}

fn shape_of(t: &Value) -> Shape {
    match t.get("type").and_then(Value::as_str) {
        Some("Extension") => Shape::Decimal,
        Some("Set") => Shape::Set(Box::new(t.get("element").map_or(Shape::Plain, shape_of))),
        Some("Record") => Shape::Record(
            t.get("attributes")
                .and_then(Value::as_object)
                .map(|a| a.iter().map(|(k, v)| (k.clone(), shape_of(v))).collect())
                .unwrap_or_default(),
        ),
        _ => Shape::Plain,
    }
}

/// The args as a Cedar value: only the typed fields, numbers as decimals.
fn args_expr(v: &Value, shape: Option<&Shape>) -> Result<RestrictedExpression, String> {
    Ok(match (shape, v) {
        (Some(Shape::Record(fields)), Value::Object(m)) => RestrictedExpression::new_record(
            fields
                .iter()
                .filter_map(|(k, s)| {
                    m.get(k)
                        .map(|x| args_expr(x, Some(s)).map(|e| (k.clone(), e)))
                })
                .collect::<Result<Vec<_>, _>>()?,
        )
        .map_err(|e| e.to_string())?,
        (Some(Shape::Set(item)), Value::Array(a)) => RestrictedExpression::new_set(
            a.iter()
                .map(|x| args_expr(x, Some(item)))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        (Some(Shape::Decimal), Value::Number(n)) => {
            RestrictedExpression::new_decimal(decimal_text(n))
        }
        (Some(_), Value::String(s)) => RestrictedExpression::new_string(s.clone()),
        (Some(_), Value::Bool(b)) => RestrictedExpression::new_bool(*b),
        (Some(_), Value::Number(n)) => RestrictedExpression::new_long(
            n.as_i64()
                .ok_or_else(|| format!("{n} is not a 64-bit integer"))?,
        ),
        (None, _) => RestrictedExpression::new_record([]).map_err(|e| e.to_string())?,
        (Some(_), other) => return Err(format!("{other} does not fit its Cedar type")),
    })
}

/// A JSON number in Cedar's decimal form (`12.5` → `12.5`, `3` → `3.0`).
fn decimal_text(n: &serde_json::Number) -> String {
    let s = n.to_string();
    if s.contains('.') { s } else { format!("{s}.0") }
}

/// Validators over a namespace's Cedar schema. Cedar's validator type-checks a policy for every
/// action it may apply to, so a policy whose scope names its tools is checked against a schema of
/// just those (a schema of 10k actions costs about 18 ms a policy); one that names none against
/// the whole schema, built once when first needed.
struct Validators {
    actions: Map<String, Value>,
    full: std::sync::OnceLock<Result<Validator, String>>,
}

impl Validators {
    fn new<'a>(tools: impl IntoIterator<Item = &'a RegisteredTool>) -> Self {
        Validators {
            actions: tools
                .into_iter()
                .map(|t| (t.name.clone(), action_json(t)))
                .collect(),
            full: std::sync::OnceLock::new(),
        }
    }

    fn validator(
        &self,
        actions: Option<&[String]>,
    ) -> Result<std::borrow::Cow<'_, Validator>, String> {
        let build = |actions: Map<String, Value>| {
            Schema::from_json_value(schema_with(actions))
                .map(Validator::new)
                .map_err(|e| e.to_string())
        };
        match actions {
            None => self
                .full
                .get_or_init(|| build(self.actions.clone()))
                .as_ref()
                .map(std::borrow::Cow::Borrowed)
                .map_err(Clone::clone),
            Some(names) => build(
                names
                    .iter()
                    .filter_map(|n| self.actions.get(n).map(|a| (n.clone(), a.clone())))
                    .collect(),
            )
            .map(std::borrow::Cow::Owned),
        }
    }
}

/// A tool as a Cedar action: who may call it on what, with which context.
fn action_json(t: &RegisteredTool) -> Value {
    let args = cedar_type(&t.spec.schemas.input_schema)
        .filter(|a| a["type"] == "Record")
        .unwrap_or_else(|| json!({"type": "Record", "attributes": {}}));
    json!({"appliesTo": {
        "principalTypes": ["User", "ServiceAccount"],
        "resourceTypes": ["Target"],
        "context": {"type": "Record", "attributes": {
            "args": args,
            "riskTier": {"type": "String"},
            "actionType": {"type": "String"},
            "dryRun": {"type": "Boolean"},
            "namespace": {"type": "String"},
            "time": {"type": "Extension", "name": "datetime"},
        }},
    }})
}

fn schema_with(actions: Map<String, Value>) -> Value {
    json!({"": {
        "entityTypes": {
            "Group": {},
            "User": {"memberOfTypes": ["Group"], "shape": {"type": "Record", "attributes": {
                "name": {"type": "String"}}}},
            "ServiceAccount": {"memberOfTypes": ["Group"], "shape": {"type": "Record", "attributes": {
                "name": {"type": "String"}, "namespace": {"type": "String"}}}},
            "Target": {"shape": {"type": "Record", "attributes": {"kind": {"type": "String"}}}},
        },
        "actions": actions,
    }})
}
