//! The gateway's one file: what it listens on, who may call, where confirmations are kept, and
//! one route per upstream with the operator's word on each tool. Read with `figment` (the TOML
//! file, then environment variables `MCP_CONFIRM_GATEWAY_…` over it, `__` between levels);
//! secrets are never written in it, only where to find them ([`Secret`]). A file that does not
//! validate is refused as a whole: [`ConfigError`] names the first problem.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The prefix of the environment variables that override the file
/// (`MCP_CONFIRM_GATEWAY_LISTEN=…`, `MCP_CONFIRM_GATEWAY_STORE__URL=…`).
pub const ENV_PREFIX: &str = "MCP_CONFIRM_GATEWAY_";

/// The whole file.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// The address to listen on (default `127.0.0.1:8080`).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// This deployment's name, bound into every confirmation with the route's path (default:
    /// `http://<listen>`): a confirmation asked on one route is none on another. Two gateways
    /// sharing a store and keys must share it; staging and production must not.
    #[serde(default)]
    pub audience: Option<String>,
    /// The `Host` names callers may use (`name` for any port, or `name:port`); anything else
    /// is refused with 403 before authentication (DNS-rebinding protection, which an upstream
    /// behind the gateway cannot do: it never sees the caller's `Host`). Default: the
    /// audience's host, and the loopback names when listening on a loopback address.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// The browser `Origin`s allowed (`scheme://host[:port]`, or `scheme://host:*` for any
    /// port); a request without `Origin` (not from a browser) passes. Default: the audience's
    /// origin, and loopback origins when listening on a loopback address.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// The key confirmations are signed with: 32 bytes or more, as hex. Absent (and no
    /// `keys`): a random key, said at start (confirmations do not survive a restart, and two
    /// processes cannot share).
    #[serde(default)]
    pub key: Option<Secret>,
    /// Keys by id, for rotation: the first signs, every one verifies (so confirmations asked
    /// under the previous key are answered until it is removed). Instead of `key`.
    #[serde(default)]
    pub keys: Vec<NamedKey>,
    /// Where one-time confirmations are claimed (default: in memory).
    #[serde(default)]
    pub store: Store,
    /// Who may call.
    pub auth: Auth,
    /// The library's pages, served by the gateway under each route's path: the approval page
    /// (`<route>/approve/<id>`) where browser approvals are decided, the approvers' inbox
    /// (`<route>/inbox`), and the standing-approvals page (`<route>/standing`) where a user
    /// lists and revokes hers. Needed by tools approved in the browser or by others.
    #[serde(default)]
    pub pages: Option<Pages>,
    /// Signed Standard Webhooks (or Slack messages) telling approvers a call waits for them.
    #[serde(default, rename = "webhook")]
    pub webhooks: Vec<Webhook>,
    /// The tamper-evident decision log every route's decisions go to (default: none).
    #[serde(default)]
    pub decision_log: Option<DecisionLog>,
    /// Prometheus metrics (decisions, refusals, answer times, claims, store errors, the
    /// decision log's health), served on a listener of their own (default: none).
    #[serde(default)]
    pub metrics: Option<Metrics>,
    /// One upstream MCP server per route.
    #[serde(rename = "route")]
    pub routes: Vec<Route>,
}

/// The pages and who a browser visitor is.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Pages {
    /// How the gateway knows who a browser visitor is.
    pub visitor: Visitor,
    /// Where a visitor who is not signed in is sent (e.g. the sign-in proxy's start URL).
    #[serde(default)]
    pub sign_in_url: Option<String>,
}

/// Who a browser visitor of the pages is. Browsers carry no bearer token: a sign-in proxy in
/// front (oauth2-proxy, Pomerium, an nginx `auth_request`) signs them in and names them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "snake_case")]
pub enum Visitor {
    /// The sign-in proxy names the visitor in `user_header`, and proves it is the proxy with a
    /// shared secret in `secret_header`: a request without that secret names no one, whatever
    /// its user header says. With OAuth callers, the visitor's principal is the issuer followed
    /// by the header's value (the `sub` the proxy got from the same issuer).
    TrustedProxyHeader {
        /// The header naming the visitor (e.g. `x-forwarded-user`).
        user_header: String,
        /// The header carrying the proxy's secret (e.g. `x-proxy-secret`).
        secret_header: String,
        /// The secret.
        secret: Secret,
        /// A header listing the visitor's roles (comma- or space-separated), for approver
        /// rules that name a role.
        #[serde(default)]
        roles_header: Option<String>,
    },
}

/// One webhook endpoint approvers are notified at.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    /// Where (`https://…`).
    pub url: String,
    /// The Standard Webhooks signing secret (`whsec_…`).
    pub secret: Secret,
    /// Post Slack incoming-webhook messages instead of Standard Webhooks events.
    #[serde(default)]
    pub slack: bool,
}

/// A key with its id.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NamedKey {
    /// Its id, carried in every state it signs.
    pub id: String,
    /// Its value: 32 bytes or more, as hex.
    pub value: Secret,
}

/// The decision log (`mcp-confirm-log`): every decision as a record in an append-only Merkle
/// tree with signed checkpoints, each record naming the policy revision it was made under. A
/// confirmed call runs only once its record is written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionLog {
    /// The log's name, in its signed checkpoints (e.g. `gateway.example/decisions`).
    pub name: String,
    /// The checkpoint signing key's seed: 32 bytes as hex. Keep it off the log's storage:
    /// whoever holds it can sign a rewritten history.
    pub key: Secret,
    /// Where the records are.
    pub store: LogStore,
    /// Where the writer keeps its own view of the tree (default: in the log's directory, for
    /// a file log). Put it on other storage than the log's.
    #[serde(default)]
    pub view: Option<PathBuf>,
    /// A directory the log's newest checkpoint is also kept in, taken only with a proof that
    /// it extends the one there (a witness). Put it where the log's writers cannot write.
    #[serde(default)]
    pub witness_dir: Option<PathBuf>,
    /// A checkpoint at least this often while records come (default 10 s).
    #[serde(default = "default_checkpoint_every", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub checkpoint_every: Duration,
}

/// Where the Prometheus text exposition of the gateway's metrics is served: `mcp_confirm_*`
/// (the confirmations' decisions, refusals, answer times, claims and store errors, by tool)
/// and `mcp_confirm_log_*` (the decision log's failures and checkpoints). Metrics are for
/// operators: they are served only on this listener, never on the public one (`listen`),
/// without authentication; bind it to an address only the scraper reaches. Labels are bounded
/// (a configured tool's name or `other`, never a principal or an argument). Changing this
/// section takes a restart.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    /// The address to listen on (e.g. `127.0.0.1:9464`), not the gateway's `listen`.
    pub listen: SocketAddr,
    /// The path the page is served on (default `/metrics`); every other path is a 404.
    #[serde(default = "default_metrics_path")]
    pub path: String,
}

fn default_metrics_path() -> String {
    "/metrics".to_owned()
}

fn default_checkpoint_every() -> Duration {
    Duration::from_secs(10)
}

/// Where a decision log's records are.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "snake_case")]
pub enum LogStore {
    /// Files in a directory, written by this gateway alone.
    File {
        /// The directory.
        dir: PathBuf,
    },
    /// One table shared by every gateway given the same URL and key.
    Postgres {
        /// `postgres://…`.
        url: Secret,
        /// The table (default `mcp_confirm_decisions`).
        #[serde(default)]
        table: Option<String>,
    },
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

/// A secret, by reference: never the value itself.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Secret {
    /// The contents of this file (surrounding whitespace trimmed).
    File(PathBuf),
    /// The value of this environment variable.
    Env(String),
}

impl Secret {
    /// The secret's value.
    ///
    /// # Errors
    /// [`ConfigError::Secret`] if the file cannot be read, the variable is unset, or the
    /// value is empty.
    pub fn read(&self, base: &Path) -> Result<String, ConfigError> {
        let value = match self {
            Self::File(path) => {
                let path = base.join(path);
                std::fs::read_to_string(&path)
                    .map_err(|e| ConfigError::Secret(format!("the file {}: {e}", path.display())))?
            }
            Self::Env(name) => std::env::var(name).map_err(|_| {
                ConfigError::Secret(format!("the environment variable {name} is not set"))
            })?,
        };
        let value = value.trim().to_owned();
        if value.is_empty() {
            return Err(ConfigError::Secret(format!("{self} is empty")));
        }
        Ok(value)
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "the file {}", path.display()),
            Self::Env(name) => write!(f, "the environment variable {name}"),
        }
    }
}

/// Where confirmations are claimed once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "snake_case")]
pub enum Store {
    /// In this process (the default): one gateway, and a restart refuses the states it issued.
    #[default]
    Memory,
    /// Redis, shared by every gateway given the same URL.
    Redis {
        /// `redis://…` (a reference: the URL may carry a password).
        url: Secret,
    },
    /// PostgreSQL, shared by every gateway given the same URL.
    Postgres {
        /// `postgres://…` (a reference: the URL may carry a password).
        url: Secret,
    },
}

/// Who may call the gateway.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "snake_case")]
pub enum Auth {
    /// Bearer tokens listed in a file, one `subject token` pair per line (`#` starts a
    /// comment): for a first try and for development, not for production.
    StaticTokens {
        /// The file.
        file: PathBuf,
    },
    /// An OAuth 2.1 resource server: each request's bearer JWT is checked for this issuer, an
    /// audience naming the route (its URL: `audience` followed by the route's path, RFC 8707),
    /// expiry and signature. The principal is `"{iss} {sub}"`. Clients find the issuer in each
    /// route's protected-resource metadata (RFC 9728), which the gateway serves.
    Oauth {
        /// The issuer, exactly as its tokens' `iss` says (`https://`; `http://` only on a
        /// loopback host).
        issuer: String,
        /// Where its signing keys are (default: the `jwks_uri` of the issuer's metadata).
        #[serde(default)]
        jwks: Option<Jwks>,
        /// Accepted signature algorithms (default `RS256`, `PS256`, `ES256`, `EdDSA`; never a
        /// symmetric one).
        #[serde(default)]
        algorithms: Vec<String>,
        /// Scopes every token must carry (also advertised in the metadata).
        #[serde(default)]
        scopes: Vec<String>,
        /// A claim listing the principal's roles, for approver rules that name a role.
        #[serde(default)]
        roles_claim: Option<String>,
        /// Clock skew allowed on `exp` and `nbf` (default 30 s, at most 5 min).
        #[serde(default = "default_leeway", with = "humantime_serde")]
        #[schemars(with = "String")]
        leeway: Duration,
    },
}

fn default_leeway() -> Duration {
    Duration::from_secs(30)
}

/// Where an issuer's signing keys (a JWKS) are.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Jwks {
    /// A file, read when the configuration is loaded (and on every reload).
    File(PathBuf),
    /// A URL, fetched when needed and again every ten minutes, or sooner for a key it lacks.
    Url(String),
}

/// One route: a path on the gateway, the upstream it leads to, and the operator's word on its
/// tools.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// The path the gateway serves this upstream on (e.g. `/notes/mcp`).
    pub path: String,
    /// The upstream's Streamable HTTP endpoint (`http://host:port/mcp`).
    pub upstream: String,
    /// A header the gateway adds to every request upstream: the operator's credential there.
    /// The caller's own `Authorization` is never passed on.
    #[serde(default)]
    pub upstream_header: Option<UpstreamHeader>,
    /// A header in which every request upstream names the caller's principal (e.g.
    /// `x-forwarded-user`), for an upstream that acts per user behind the operator's
    /// credential. Whatever the caller sent under that name is removed first.
    #[serde(default)]
    pub principal_header: Option<String>,
    /// Passes the caller's own `Authorization` header upstream. **Token passthrough: off by
    /// default**, and the MCP authorization spec forbids it unless the upstream is an audience
    /// of the caller's token too; without it, the upstream sees only the operator's credential.
    #[serde(default)]
    pub pass_caller_token_upstream: bool,
    /// How long a tool list is trusted before it is fetched again, at most (default 60 s; an
    /// upstream's own `ttlMs` shortens it, to one second at the least).
    #[serde(default = "default_list_ttl", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub list_ttl: Duration,
    /// The operator's word on tools by name: it wins over what the upstream says.
    /// (Entries may also offer standing approvals: see [`Standing`].)
    #[serde(default)]
    pub tools: BTreeMap<String, ToolEntry>,
}

fn default_list_ttl() -> Duration {
    Duration::from_secs(60)
}

/// A header added upstream, its value a secret.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpstreamHeader {
    /// Its name (e.g. `authorization`).
    pub name: String,
    /// Where its value is.
    pub value: Secret,
}

/// The operator's word on one tool.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolEntry {
    /// What its calls get.
    pub policy: Operator,
    /// The question the form asks (a confirmed tool; default: the tool's title and that it may
    /// change or delete data).
    #[serde(default)]
    pub message: Option<String>,
    /// Which records a call may mean, found by a read tool of the same upstream: the form then
    /// offers them to pick one (a confirmed tool only).
    #[serde(default)]
    pub lookup: Option<Lookup>,
    /// Lets the user also allow later calls of this tool on the same scope for a while (a
    /// confirmed tool only).
    #[serde(default)]
    pub standing: Option<Standing>,
    /// Where the user approves (default `form`, in the client). `browser`: on the approval page,
    /// signed in, where a client's automatic `accept` cannot reach (needs `[pages]` and a
    /// client with URL-mode elicitation).
    #[serde(default)]
    pub approve_in: ApproveIn,
    /// Someone other than the caller decides, on the approval page (implies `browser`).
    #[serde(default)]
    pub approvers: Option<ApproverRule>,
}

/// Where a call is approved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApproveIn {
    /// In the client's form.
    #[default]
    Form,
    /// On the gateway's approval page.
    Browser,
}

/// Who approves a call: exactly one of `any_of`, `role` or `anyone_but_caller`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproverRule {
    /// These principals (as the gateway names them: with OAuth, `"{iss} {sub}"`).
    #[serde(default)]
    pub any_of: Vec<String>,
    /// Any principal with this role (OAuth's `roles_claim`).
    #[serde(default)]
    pub role: Option<String>,
    /// Anyone signed in but the caller.
    #[serde(default)]
    pub anyone_but_caller: bool,
    /// Never the caller, even if the rule would admit them.
    #[serde(default)]
    pub except_caller: bool,
    /// How many distinct approvers (default 1).
    #[serde(default)]
    pub required: Option<u8>,
    /// Show approvers the candidates' labels (they see ids and versions otherwise).
    #[serde(default)]
    pub share_candidate_labels: bool,
    /// Show approvers the call's argument values (they see a digest otherwise).
    #[serde(default)]
    pub share_argument_values: bool,
    /// The deployment's live check of each approver, right before an approved call runs: the
    /// gateway asks this endpoint whether the approver may still approve (a role taken away,
    /// an account disabled) and is not the caller under another name. Required by a rule that
    /// excludes the caller (`anyone_but_caller`, `except_caller`); without it, a rule that names
    /// a `role` counts an approval until the state expires even if the role was taken away.
    #[serde(default)]
    pub recheck: Option<Recheck>,
}

/// Where the gateway asks whether an approver may still approve: it POSTs
/// `{"approver", "tool", "caller": {"subject", "roles"}, "route", "role"}` (JSON) right before
/// the approved call runs, and the call runs only on a 2xx answer `{"still_approver": true}`.
/// Anything else (`false`, another status, another body, a redirect, no answer within
/// `timeout`, an endpoint that cannot be reached) refuses it, nothing run.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Recheck {
    /// The endpoint: `https://…` (`http://` only on a loopback host). Written here, or named
    /// (`{ env = "…" }`, `{ file = "…" }`) when it carries a credential: a URL with a user or
    /// password in it is not written in the file.
    pub url: Location,
    /// How long the endpoint has to answer (default 5 s, at most 30 s).
    #[serde(default = "default_recheck_timeout", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub timeout: Duration,
}

/// The longest a recheck endpoint may be given to answer: the approved call waits for it.
pub const MAX_RECHECK_TIMEOUT: Duration = Duration::from_secs(30);

fn default_recheck_timeout() -> Duration {
    Duration::from_secs(5)
}

/// A URL written in the file, or named where it is kept (it may carry a credential).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Location {
    /// Written in the file: no credential in it.
    Written(String),
    /// Kept in a file or an environment variable.
    Named(Secret),
}

impl Location {
    /// The URL.
    ///
    /// # Errors
    /// [`ConfigError::Secret`] if a named one cannot be read.
    pub fn read(&self, base: &Path) -> Result<String, ConfigError> {
        match self {
            Self::Written(url) => Ok(url.clone()),
            Self::Named(secret) => secret.read(base),
        }
    }
}

/// Why a recheck endpoint's URL cannot be used (`None`: it can): not `https` (nor `http` on a
/// loopback host), or not a URL. With `written`, a user or password in it too.
pub fn recheck_url_problem(url: &str, written: bool) -> Option<&'static str> {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return Some("not a URL");
    };
    let Some(authority) = uri.authority() else {
        return Some("not an absolute URL");
    };
    if written && authority.as_str().contains('@') {
        return Some(
            "a URL with a user or password in it is not written in the file: name it with \
             `{ env = \"…\" }` or `{ file = \"…\" }`",
        );
    }
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match uri.scheme_str() {
        Some("https") => None,
        Some("http") if loopback => None,
        Some("http") => Some("`https://` (plain `http://` only on a loopback host)"),
        _ => Some("not an http(s) URL"),
    }
}

impl ApproverRule {
    /// The library's rule.
    pub fn to_approvers(&self) -> mcp_confirm::Approvers {
        use mcp_confirm::Approvers;
        let mut rule = if self.anyone_but_caller {
            Approvers::anyone_but_caller()
        } else if let Some(role) = &self.role {
            Approvers::role(role.clone())
        } else {
            Approvers::any_of(self.any_of.clone())
        };
        if self.except_caller {
            rule = rule.except_caller();
        }
        if let Some(n) = self.required {
            rule = rule.required(n);
        }
        if self.share_candidate_labels {
            rule = rule.share_candidate_labels();
        }
        if self.share_argument_values {
            rule = rule.share_argument_values();
        }
        rule
    }
}

/// A standing approval a confirmed tool's form may offer: "also allow this tool on this scope
/// for the next `up_to`, at most `uses` times". A later call of the same principal, tool and
/// scope then runs without a form, if its lookup (if any) finds exactly one record and the
/// revalidation passes. A grant counts only while this offer is in force: removed, or its
/// terms changed, and then restored, what was granted before does not come back.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Standing {
    /// The argument that names what the approval covers (RFC 6901 into the call's arguments,
    /// e.g. `/workspace`). A call without it, or with an empty one, gets no offer.
    pub scope: String,
    /// For how long, at most (e.g. `"1h"`; at most 24 h).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub up_to: Duration,
    /// How many later calls, at most.
    pub uses: u32,
}

/// How a confirmed tool's candidates are found: a read tool of the same upstream, called as the
/// same principal, and where in its result the records are. Paths are standard: RFC 9535
/// JSONPath for the records, RFC 6901 JSON Pointers within each record and into the call's
/// arguments. The same lookup runs again right before the confirmed call is forwarded; a record
/// that is gone or changed since the form is refused, nothing forwarded.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Lookup {
    /// The read tool to call (the gateway must pass it: read-only by its annotations, or
    /// allowed by the operator; anything else denies the confirmed tool).
    pub tool: String,
    /// The read tool's arguments taken from the call's: `name = "/pointer"` (RFC 6901 into the
    /// call's arguments). A call that lacks one (or leaves it empty) is refused: the lookup
    /// would run unfiltered and offer every record. Never the `select_into` argument.
    #[serde(default)]
    pub arguments: BTreeMap<String, String>,
    /// The read tool's arguments that are always the same (`limit = 20`).
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub fixed_arguments: BTreeMap<String, serde_json::Value>,
    /// Where the records are in the read tool's result (RFC 9535 JSONPath over the result,
    /// e.g. `$.structuredContent.notes[*]`). A result without `structuredContent` whose one
    /// text block is JSON is read as if that JSON were its `structuredContent`.
    pub records: String,
    /// Each record's id (RFC 6901 within the record, e.g. `/id`): a string or an integer.
    pub id: String,
    /// What the form shows of each record after its id (RFC 6901 within the record): one
    /// pointer (`"/title"`) or several (`["/title", "/owner"]`), each value cleaned and capped.
    /// The id always comes first (`t-1 · Login page`), so records with the same title read
    /// differently; records that would still read the same refuse the call (default: the id
    /// alone).
    #[serde(default)]
    pub label: Option<Label>,
    /// Each record's version (default: a digest of the whole record as the read tool returned
    /// it, so any change it shows is a change).
    #[serde(default)]
    pub version: Option<String>,
    /// The argument of the confirmed call the chosen id is written into, replacing what the
    /// caller sent there.
    pub select_into: String,
}

/// Where a lookup's labels come from: one JSON Pointer, or several, shown in order.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Label {
    /// One pointer (`label = "/title"`).
    One(String),
    /// Several (`label = ["/title", "/owner"]`).
    Many(Vec<String>),
}

impl Label {
    /// Its pointers, in order.
    pub fn pointers(&self) -> &[String] {
        match self {
            Self::One(pointer) => std::slice::from_ref(pointer),
            Self::Many(pointers) => pointers,
        }
    }
}

/// What the operator says a tool's calls get. When an upstream's annotations say otherwise,
/// this wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Operator {
    /// Never forwarded.
    Deny,
    /// Forwarded only after the caller's user confirms it.
    Confirm,
    /// Forwarded as it comes, whatever its annotations say.
    Allow,
}

/// A file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// It cannot be read or parsed, or a value has the wrong type.
    #[error("the configuration cannot be read: {0}")]
    Read(String),
    /// It parsed, but says something the gateway cannot do.
    #[error("the configuration is not valid: {0}")]
    Invalid(String),
    /// A secret it refers to cannot be read.
    #[error("a secret cannot be read: {0}")]
    Secret(String),
    /// The store it names cannot be made ready (its tables created).
    #[error("the store cannot be made ready: {0}")]
    Store(String),
}

impl GatewayConfig {
    /// Reads `path`, with the environment over it, and validates the result.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first problem.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::from_figment(
            Figment::new()
                .merge(Toml::file_exact(path))
                .merge(Env::prefixed(ENV_PREFIX).split("__")),
        )
    }

    /// Parses `text` (TOML) alone, without the environment, and validates it.
    ///
    /// # Errors
    /// As [`load`](Self::load).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        Self::from_figment(Figment::new().merge(Toml::string(text)))
    }

    fn from_figment(figment: Figment) -> Result<Self, ConfigError> {
        let config: Self = figment
            .extract()
            .map_err(|e| ConfigError::Read(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// The `Host` names and `Origin`s allowed: as the file says, else the defaults described
    /// on [`allowed_hosts`](Self::allowed_hosts) and [`allowed_origins`](Self::allowed_origins).
    pub fn hosts_and_origins(&self) -> (Vec<String>, Vec<String>) {
        let mut hosts = self.allowed_hosts.clone();
        let mut origins = self.allowed_origins.clone();
        let loopback = self.listen.ip().is_loopback();
        if hosts.is_empty() {
            if let Ok(uri) = self.audience().parse::<http::Uri>()
                && let Some(authority) = uri.authority()
            {
                hosts.push(authority.as_str().to_ascii_lowercase());
            }
            if loopback {
                hosts.extend(["localhost", "127.0.0.1", "[::1]"].map(str::to_owned));
            }
        }
        if origins.is_empty() {
            if let Ok(uri) = self.audience().parse::<http::Uri>()
                && let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority())
            {
                origins.push(format!("{scheme}://{authority}").to_ascii_lowercase());
            }
            if loopback {
                origins
                    .extend(["localhost", "127.0.0.1", "[::1]"].map(|h| format!("http://{h}:*")));
            }
        }
        (hosts, origins)
    }

    /// The files it names that are read only when it is loaded (relative to its directory, as
    /// written): the tokens file, a JWKS file. A change to one is a change to the
    /// configuration, so [`Gateway::watch`](crate::server::Gateway::watch) reloads on it too.
    pub fn files_read_on_load(&self) -> Vec<PathBuf> {
        match &self.auth {
            Auth::StaticTokens { file } => vec![file.clone()],
            Auth::Oauth {
                jwks: Some(Jwks::File(file)),
                ..
            } => vec![file.clone()],
            Auth::Oauth { .. } => Vec::new(),
        }
    }

    /// The audience confirmations are bound to.
    pub fn audience(&self) -> String {
        self.audience
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.listen))
    }

    /// What the gateway cannot do with, named.
    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |why: String| Err(ConfigError::Invalid(why));
        if self.routes.is_empty() {
            return invalid("no route: name at least one `[[route]]`".into());
        }
        if let Some(audience) = &self.audience
            && audience.trim().is_empty()
        {
            return invalid("`audience` is empty".into());
        }
        if let Auth::Oauth { leeway, .. } = &self.auth {
            let audience = self.audience();
            let uri = audience.parse::<http::Uri>().ok();
            let origin_only = uri.as_ref().is_some_and(|u| {
                matches!(u.scheme_str(), Some("http" | "https"))
                    && u.authority().is_some()
                    && matches!(u.path(), "" | "/")
                    && u.query().is_none()
            });
            if !origin_only {
                return invalid(format!(
                    "`audience` {audience:?}: with OAuth, the gateway's public origin \
                     (`https://host[:port]`, no path): each route's URL, which its tokens \
                     must name, is that origin followed by the route's path"
                ));
            }
            if *leeway > Duration::from_secs(300) {
                return invalid("auth (oauth): a leeway of at most 5 minutes".into());
            }
        }
        if self.key.is_some() && !self.keys.is_empty() {
            return invalid("both `key` and `keys`: name one key, or the ring".into());
        }
        let mut ids = std::collections::BTreeSet::new();
        for key in &self.keys {
            if key.id.is_empty() || !ids.insert(key.id.as_str()) {
                return invalid(format!("`keys`: an empty or repeated id {:?}", key.id));
            }
        }
        if let Some(log) = &self.decision_log {
            if log.name.trim().is_empty() {
                return invalid("decision_log: an empty `name`".into());
            }
            if log.checkpoint_every.is_zero() {
                return invalid("decision_log: `checkpoint_every` must be more than zero".into());
            }
        }
        if let Some(metrics) = &self.metrics {
            if !metrics.path.starts_with('/') || metrics.path.contains(['?', '#']) {
                return invalid(format!(
                    "metrics: path {:?}: a path starting with `/`, without query or fragment",
                    metrics.path
                ));
            }
            let (ours, public) = (metrics.listen, self.listen);
            let same_address = ours.ip() == public.ip()
                || ours.ip().is_unspecified()
                || public.ip().is_unspecified();
            if ours.port() != 0 && ours.port() == public.port() && same_address {
                return invalid(format!(
                    "metrics: listen {}: the metrics are served on a port of their own, never \
                     on the gateway's `listen` ({})",
                    metrics.listen, self.listen
                ));
            }
        }
        let mut paths = std::collections::BTreeSet::new();
        for route in &self.routes {
            if !route.path.starts_with('/') || route.path.contains(['?', '#']) {
                return invalid(format!(
                    "route path {:?}: a path starting with `/`, without query or fragment",
                    route.path
                ));
            }
            if !paths.insert(route.path.trim_end_matches('/')) {
                return invalid(format!("two routes on the path {:?}", route.path));
            }
            match route.upstream.parse::<http::Uri>() {
                Ok(uri) if uri.scheme_str() == Some("http") && uri.authority().is_some() => {}
                Ok(uri) if uri.scheme_str() == Some("https") => {
                    return invalid(format!(
                        "route {:?}: upstream {uri}: https upstreams are not supported yet; \
                         reach it over http on a private network or a sidecar",
                        route.path
                    ));
                }
                _ => {
                    return invalid(format!(
                        "route {:?}: upstream {:?} is not an http:// URL",
                        route.path, route.upstream
                    ));
                }
            }
            if let Some(header) = &route.upstream_header
                && http::HeaderName::from_bytes(header.name.as_bytes()).is_err()
            {
                return invalid(format!(
                    "route {:?}: upstream_header name {:?} is not a header name",
                    route.path, header.name
                ));
            }
            if route.pass_caller_token_upstream
                && route
                    .upstream_header
                    .as_ref()
                    .is_some_and(|h| h.name.eq_ignore_ascii_case("authorization"))
            {
                return invalid(format!(
                    "route {:?}: `pass_caller_token_upstream` and an `upstream_header` named \
                     Authorization: the upstream can get one of them, not both",
                    route.path
                ));
            }
            if route.list_ttl.is_zero() {
                return invalid(format!(
                    "route {:?}: list_ttl must be more than zero (every call would list the tools)",
                    route.path
                ));
            }
            if let Some(name) = &route.principal_header
                && http::HeaderName::from_bytes(name.as_bytes()).is_err()
            {
                return invalid(format!(
                    "route {:?}: principal_header {name:?} is not a header name",
                    route.path
                ));
            }
            for (name, entry) in &route.tools {
                if name.is_empty() {
                    return invalid(format!("route {:?}: a tool with no name", route.path));
                }
                if let Some(lookup) = &entry.lookup {
                    let at = format!("route {:?}, tool {name:?}, lookup", route.path);
                    if entry.policy != Operator::Confirm {
                        return invalid(format!("{at}: only goes with `policy = \"confirm\"`"));
                    }
                    if lookup.tool == *name {
                        return invalid(format!(
                            "{at}: the tool cannot look up its own records (that would run it)"
                        ));
                    }
                    lookup
                        .check()
                        .map_err(|why| ConfigError::Invalid(format!("{at}: {why}")))?;
                }
                let browser = entry.approve_in == ApproveIn::Browser || entry.approvers.is_some();
                if browser {
                    if entry.policy != Operator::Confirm {
                        return invalid(format!(
                            "route {:?}, tool {name:?}: `approve_in` and `approvers` only go with \
                             `policy = \"confirm\"`",
                            route.path
                        ));
                    }
                    if self.pages.is_none() {
                        return invalid(format!(
                            "route {:?}, tool {name:?}: approved in the browser, but no `[pages]` \
                             section says how the gateway knows who a browser visitor is",
                            route.path
                        ));
                    }
                }
                if let Some(rule) = &entry.approvers {
                    let kinds = usize::from(!rule.any_of.is_empty())
                        + usize::from(rule.role.is_some())
                        + usize::from(rule.anyone_but_caller);
                    if kinds != 1 {
                        return invalid(format!(
                            "route {:?}, tool {name:?}: approvers name exactly one of `any_of`, \
                             `role` or `anyone_but_caller`",
                            route.path
                        ));
                    }
                    if entry.standing.is_some() {
                        return invalid(format!(
                            "route {:?}, tool {name:?}: `approvers` and `standing` cannot go \
                             together: later calls would run without the approvers",
                            route.path
                        ));
                    }
                    // The sign-in proxy and the callers' tokens may name one person
                    // differently (an e-mail, a user id): only the deployment's directory
                    // knows that an approver is not the caller.
                    if (rule.anyone_but_caller || rule.except_caller) && rule.recheck.is_none() {
                        return invalid(format!(
                            "route {:?}, tool {name:?}: approvers that exclude the caller need \
                             `recheck = {{ url = \"…\" }}` on `approvers`: right before the \
                             approved call runs, the gateway asks that endpoint whether each \
                             approver may still approve and is not the caller under another \
                             name (the sign-in proxy and the callers' tokens may name one person \
                             differently)",
                            route.path
                        ));
                    }
                    if let Some(recheck) = &rule.recheck {
                        if let Location::Written(url) = &recheck.url
                            && let Some(why) = recheck_url_problem(url, true)
                        {
                            return invalid(format!(
                                "route {:?}, tool {name:?}: approvers.recheck url {url:?}: {why}",
                                route.path
                            ));
                        }
                        if recheck.timeout.is_zero() || recheck.timeout > MAX_RECHECK_TIMEOUT {
                            return invalid(format!(
                                "route {:?}, tool {name:?}: approvers.recheck timeout: more than \
                                 zero and at most 30 s (the approved call waits for the answer)",
                                route.path
                            ));
                        }
                    }
                }
                if let Some(standing) = &entry.standing {
                    if entry.policy != Operator::Confirm {
                        return invalid(format!(
                            "route {:?}, tool {name:?}: `standing` only goes with `policy = \"confirm\"`",
                            route.path
                        ));
                    }
                    if !standing.scope.starts_with('/') {
                        return invalid(format!(
                            "route {:?}, tool {name:?}: standing scope {:?} is not a JSON Pointer \
                             to an argument (e.g. `/workspace`): a scope that is always the same \
                             would cover every call",
                            route.path, standing.scope
                        ));
                    }
                }
                if entry.message.is_some() && entry.policy != Operator::Confirm {
                    return invalid(format!(
                        "route {:?}, tool {name:?}: a message only goes with `policy = \"confirm\"`",
                        route.path
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Lookup {
    /// Its paths parse, and name what they must.
    fn check(&self) -> Result<(), String> {
        serde_json_path::JsonPath::parse(&self.records)
            .map_err(|e| format!("records {:?} is not RFC 9535 JSONPath: {e}", self.records))?;
        let pointer = |what: &str, p: &str| {
            if p.is_empty() || p.starts_with('/') {
                Ok(())
            } else {
                Err(format!(
                    "{what} {p:?} is not a JSON Pointer (RFC 6901: empty, or starting with `/`)"
                ))
            }
        };
        pointer("id", &self.id)?;
        if let Some(label) = &self.label {
            if label.pointers().is_empty() {
                return Err("label names no pointer: leave it out to show the id alone".into());
            }
            for p in label.pointers() {
                pointer("label", p)?;
            }
        }
        if let Some(version) = &self.version {
            pointer("version", version)?;
        }
        for (name, p) in &self.arguments {
            pointer(&format!("arguments.{name}"), p)?;
        }
        if self.select_into.is_empty() {
            return Err("select_into names no argument".into());
        }
        // The layer takes the choice out of the call before it looks the records up again:
        // an argument read from there would be missing then, and the confirmed call refused.
        let chosen = format!(
            "/{}",
            self.select_into.replace('~', "~0").replace('/', "~1")
        );
        for (name, p) in &self.arguments {
            if *p == chosen || p.starts_with(&format!("{chosen}/")) {
                return Err(format!(
                    "arguments.{name} reads {p:?}, the argument the choice is written into \
                     (select_into): the records are looked up again without it"
                ));
            }
        }
        Ok(())
    }
}

/// The file's JSON Schema, for editors.
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(GatewayConfig)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"
        [auth]
        kind = "static_tokens"
        file = "tokens"

        [[route]]
        path = "/notes/mcp"
        upstream = "http://127.0.0.1:9000/mcp"
    "#;

    #[test]
    fn a_five_line_file_is_enough() {
        let config = GatewayConfig::from_toml(SMALL).unwrap();
        assert_eq!(config.listen, default_listen());
        assert_eq!(config.audience(), "http://127.0.0.1:8080");
        assert!(matches!(config.store, Store::Memory));
        assert_eq!(config.routes[0].list_ttl, Duration::from_secs(60));
    }

    #[test]
    fn what_the_gateway_cannot_do_is_refused_with_its_reason() {
        for (text, says) in [
            (SMALL.replace("/notes/mcp", "notes"), "starting with `/`"),
            (
                SMALL.replace("http://127.0.0.1:9000/mcp", "ftp://x/"),
                "not an http:// URL",
            ),
            (
                SMALL.replace("http://127.0.0.1:9000/mcp", "https://x/mcp"),
                "https upstreams",
            ),
            (format!("{SMALL}\nlist_ttl = \"0s\""), "more than zero"),
            (
                format!("{SMALL}\n[route.tools.x]\npolicy = \"allow\"\nmessage = \"m\""),
                "only goes with",
            ),
            (
                format!("{SMALL}\n[[route]]\npath = \"/notes/mcp/\"\nupstream = \"http://a/\""),
                "two routes",
            ),
        ] {
            let error = GatewayConfig::from_toml(&text).unwrap_err().to_string();
            assert!(error.contains(says), "{error}");
        }
        // Unknown keys are mistakes, not ignored.
        let error = GatewayConfig::from_toml(&format!("{SMALL}\nlisten_addr = \"x\""))
            .unwrap_err()
            .to_string();
        assert!(error.contains("listen_addr"), "{error}");
        let error =
            GatewayConfig::from_toml(&format!("{SMALL}\n[route.tools.x]\npolicy = \"maybe\""))
                .unwrap_err()
                .to_string();
        assert!(error.contains("maybe"), "{error}");
    }

    #[test]
    fn metrics_are_off_unless_named_and_never_on_the_public_port() {
        assert_eq!(GatewayConfig::from_toml(SMALL).unwrap().metrics, None);
        let config =
            GatewayConfig::from_toml(&format!("[metrics]\nlisten = \"127.0.0.1:9464\"\n{SMALL}"))
                .unwrap();
        assert_eq!(
            config.metrics,
            Some(Metrics {
                listen: "127.0.0.1:9464".parse().unwrap(),
                path: "/metrics".into()
            })
        );
        // The same port on another address is another listener.
        GatewayConfig::from_toml(&format!("[metrics]\nlisten = \"127.0.0.2:8080\"\n{SMALL}"))
            .unwrap();
        for (section, says) in [
            ("listen = \"127.0.0.1:8080\"", "a port of their own"),
            ("listen = \"0.0.0.0:8080\"", "a port of their own"),
            (
                "listen = \"127.0.0.1:9464\"\npath = \"metrics\"",
                "starting with `/`",
            ),
            (
                "listen = \"127.0.0.1:9464\"\npath = \"/m?x\"",
                "without query",
            ),
            ("listen = \"127.0.0.1:9464\"\nport = 1", "port"),
        ] {
            let error = GatewayConfig::from_toml(&format!("[metrics]\n{section}\n{SMALL}"))
                .unwrap_err()
                .to_string();
            assert!(error.contains(says), "{section}: {error}");
        }
    }

    #[test]
    fn secrets_are_read_where_they_are_and_never_empty() {
        let dir = std::env::temp_dir().join(format!("gw-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("key"), "  abc\n").unwrap();
        assert_eq!(Secret::File("key".into()).read(&dir).unwrap(), "abc");
        std::fs::write(dir.join("empty"), "\n").unwrap();
        assert!(Secret::File("empty".into()).read(&dir).is_err());
        assert!(Secret::File("missing".into()).read(&dir).is_err());
        assert!(
            Secret::Env("MCP_CONFIRM_GATEWAY_TEST_SURELY_UNSET".into())
                .read(&dir)
                .is_err()
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_schema_names_every_section() {
        let schema = schema().to_string();
        for key in [
            "listen", "audience", "store", "auth", "route", "list_ttl", "policy", "metrics",
        ] {
            assert!(schema.contains(key), "{key}");
        }
    }
}
