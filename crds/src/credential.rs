//! CredentialBinding: whose identity a tool acts with, brokered from Vault.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::Condition;

/// Names where a credential comes from (a Vault path or role), its scopes and TTL, and how it
/// reaches the sandbox. It never holds a value: values leave the broker only into the sandbox.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[cfg_attr(
    feature = "kube",
    derive(kube::CustomResource),
    kube(
        group = "toolgate.dev",
        version = "v1alpha1",
        kind = "CredentialBinding",
        namespaced,
        status = "CredentialBindingStatus",
        shortname = "cb",
        category = "toolgate",
        doc = "Where a tool's credential comes from (Vault KV v2 or a dynamic secrets role), its scopes and TTL, and how it reaches the sandbox. Never a value.",
        printcolumn(name = "Engine", type_ = "string", json_path = ".spec.vault.engine"),
        printcolumn(name = "Path", type_ = "string", json_path = ".spec.vault.path"),
        printcolumn(name = "Delivery", type_ = "string", json_path = ".spec.delivery.mode"),
        printcolumn(
            name = "Ready",
            type_ = "string",
            json_path = ".status.conditions[?(@.type==\"Ready\")].status"
        ),
        printcolumn(
            name = "Age",
            type_ = "date",
            json_path = ".metadata.creationTimestamp"
        ),
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.vault.engine != 'kv2' || has(self.vault.field)",
        "message": "a kv2 binding must name the field of the secret to deliver (vault.field)",
        "fieldPath": ".vault.field"
    },
    {
        "rule": "self.vault.engine == 'kv2' || has(self.vault.role)",
        "message": "a dynamic-secrets binding must name the role to issue from (vault.role)",
        "fieldPath": ".vault.role"
    },
    {
        "rule": "self.delivery.mode != 'env' || has(self.delivery.envName)",
        "message": "delivery mode 'env' needs delivery.envName",
        "fieldPath": ".delivery.envName"
    },
    {
        "rule": "self.delivery.mode != 'proxy' || has(self.delivery.proxy)",
        "message": "delivery mode 'proxy' needs delivery.proxy: the hosts the value may be sent to",
        "fieldPath": ".delivery.proxy"
    },
    {
        "rule": "self.delivery.mode == 'proxy' || !has(self.delivery.proxy)",
        "message": "delivery.proxy only applies with delivery mode 'proxy'",
        "fieldPath": ".delivery.proxy"
    }
]))]
pub struct CredentialBindingSpec {
    /// The Vault location of the credential.
    pub vault: VaultSource,
    /// Scopes the credential carries; shown to approvers and checked against the tool's.
    #[serde(default)]
    #[schemars(
        length(max = 32),
        inner(
            length(min = 1, max = 128),
            regex(pattern = r"^[a-z0-9][a-z0-9:._*/-]*$")
        )
    )]
    pub scopes: Vec<String>,
    /// Lifetime of a brokered credential (lease TTL), in seconds.
    #[schemars(range(min = 30, max = 86400))]
    pub ttl_seconds: u32,
    /// How the value reaches the sandbox.
    pub delivery: CredentialDelivery,
    /// Audience the credential is minted for, when the engine supports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub audience: Option<String>,
}

/// A Vault location.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultSource {
    /// The secrets engine.
    pub engine: VaultEngine,
    /// Mount point of the engine (`secret`, `database`).
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
    )]
    pub mount: String,
    /// Path of the secret under the mount (kv2: `team-a/github`), or the path under the mount a
    /// dynamic engine issues from (`creds/readonly` for the database and kubernetes engines).
    #[schemars(
        length(min = 1, max = 1024),
        regex(pattern = r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
    )]
    pub path: String,
    /// The field of the secret to deliver (required for kv2). For a dynamic engine, the field
    /// of its answer (`password`); without it the kubernetes engine delivers
    /// `service_account_token` and any other engine its whole answer as a JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub field: Option<String>,
    /// Role of a dynamic secrets engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub role: Option<String>,
    /// Vault role the broker acts as for this binding, so it reads only what that role's
    /// policies allow: the Kubernetes auth role it logs in with (cluster), or the token role its
    /// child token is created from (`auth/token/create/<role>`, `toolgate local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub auth_role: Option<String>,
    /// Namespace the kubernetes engine mints the service-account token in (default: the call's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub kubernetes_namespace: Option<String>,
}

/// Vault secrets engines toolgate brokers from.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VaultEngine {
    /// Key/value version 2 (static secrets).
    Kv2,
    /// Database dynamic credentials (leased, revoked when the call ends).
    Database,
    /// Vault's Kubernetes secrets engine: a service-account token minted for the call (leased;
    /// its service account is deleted when the lease is revoked, with a generated-account role).
    Kubernetes,
    /// Any other dynamic engine reached by role (`aws`, `github`).
    Dynamic,
}

/// How a credential reaches the sandbox.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialDelivery {
    /// `proxy` (the sandbox holds a placeholder; the call's egress proxy swaps in the value on
    /// requests to the hosts named in `proxy`), `file` (mounted read-only) or `env` (needs the
    /// sandbox's secretEnvAllowed).
    pub mode: DeliveryMode,
    /// File name in the credentials directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), regex(pattern = r"^[A-Za-z0-9_.-]+$"))]
    pub file_name: Option<String>,
    /// Environment variable name for `env` delivery (and for the placeholder of `proxy`
    /// delivery, which otherwise comes as a file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]*$"))]
    pub env_name: Option<String>,
    /// Where the call's egress proxy may put the value, for `proxy` delivery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyDelivery>,
}

/// Where a `proxy`-delivered credential may go: the proxy swaps the sandbox's placeholder for
/// the value only in requests of the call to these hosts (TLS to them is intercepted with a CA
/// the call's sandbox alone trusts), and refuses a request carrying the placeholder anywhere
/// else as an exfiltration attempt.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxyDelivery {
    /// Hosts, as in a SandboxPolicy's `allowDomains` (`api.github.com`, `api.example.com:8443`;
    /// no wildcards): each must also be allowed by the sandbox's egress.
    #[schemars(
        length(min = 1, max = 16),
        inner(
            length(min = 1, max = 253),
            regex(
                pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(:[1-9][0-9]{0,4})?$"
            )
        )
    )]
    pub hosts: Vec<String>,
    /// Where in a request the placeholder is swapped: `header` (any header's value, the
    /// default) and `query` (the request target's query string). A placeholder elsewhere is
    /// sent as it is.
    #[serde(default = "header_only")]
    #[schemars(length(min = 1, max = 2))]
    pub positions: Vec<InjectionPosition>,
    /// Methods the value may be sent with (`GET`, `POST`); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(regex(pattern = r"^[A-Z]{1,16}$")))]
    pub methods: Vec<String>,
    /// Path prefixes the value may be sent to (`/repos/acme/`); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        inner(length(min = 1, max = 512), regex(pattern = r"^/"))
    )]
    pub path_prefixes: Vec<String>,
}

fn header_only() -> Vec<InjectionPosition> {
    vec![InjectionPosition::Header]
}

/// A place in a request where a placeholder is swapped for its value.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InjectionPosition {
    /// Any header's value.
    Header,
    /// The query string of the request target.
    Query,
}

/// How a credential reaches the sandbox.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryMode {
    /// A read-only file.
    File,
    /// An environment variable.
    Env,
    /// A placeholder in the sandbox, the value swapped in by the call's egress proxy.
    Proxy,
}

/// Observed state of a CredentialBinding. Never holds a value or a lease id.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialBindingStatus {
    /// The `.metadata.generation` the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (`Ready`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
