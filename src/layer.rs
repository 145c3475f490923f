//! [`ConfirmLayer`] and its builder, which checks a configuration once and freezes it.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tower_layer::Layer;

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, GuardedTool};
use crate::limit::ChallengeLimiter;
use crate::policy::ToolPolicy;
use crate::principal::{Principal, PrincipalExtractor, PrincipalFromExtension};
use crate::protocol::PROTOCOL_VERSION;
use crate::service::Confirm;
use crate::store::{MemoryReplayStore, ReplayStore};
use crate::token::keyring::KeyRing;
use crate::token::sealer::Sealer;

/// The default lifetime of a confirmation: five minutes.
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);
/// The default tolerance for clock differences between instances.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(30);
/// The default cap on a buffered request body: 4 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// The longest confirmation lifetime the builder accepts.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// The default per-principal challenge rate: 10 forms a second on average…
pub const DEFAULT_CHALLENGES_PER_SECOND: u32 = 10;
/// …and up to 30 at once.
pub const DEFAULT_CHALLENGE_BURST: u32 = 30;

/// Why a [`ConfirmLayerBuilder`] could not build a layer.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// No audience was set. It must name the deployment and be the same on every instance.
    #[error("an audience is required: name the deployment, the same on every instance")]
    MissingAudience,
    /// The TTL is zero or longer than [`MAX_TTL`].
    #[error("the TTL must be between 1 second and 24 hours")]
    InvalidTtl,
    /// No protocol version is supported.
    #[error("at least one protocol version must be supported")]
    NoSupportedVersions,
    /// A tool policy is inconsistent.
    #[error("invalid tool policy: {0}")]
    InvalidPolicy(String),
    /// A challenge rate limit of zero per second or a zero burst.
    #[error("the challenge rate limit needs a rate and a burst of at least one")]
    InvalidRateLimit,
}

/// A tower [`Layer`] that puts a signed, one-time user confirmation in front of destructive tools.
///
/// Cheap to clone: the configuration is shared. Build one with [`ConfirmLayer::builder`].
#[derive(Clone, Debug)]
pub struct ConfirmLayer {
    config: Arc<Config>,
}

impl ConfirmLayer {
    /// Starts a layer whose states are signed by the first key of `keys`.
    pub fn builder(keys: KeyRing) -> ConfirmLayerBuilder {
        ConfirmLayerBuilder {
            keys,
            audience: None,
            ttl: DEFAULT_TTL,
            skew: DEFAULT_CLOCK_SKEW,
            store: None,
            tools: HashMap::new(),
            supported_versions: vec![PROTOCOL_VERSION.to_owned()],
            principal: Arc::new(PrincipalFromExtension),
            local_principal: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            clock: Arc::new(SystemClock),
            challenge_rate: Some((DEFAULT_CHALLENGES_PER_SECOND, DEFAULT_CHALLENGE_BURST)),
        }
    }
}

impl<S> Layer<S> for ConfirmLayer {
    type Service = Confirm<S>;

    fn layer(&self, inner: S) -> Confirm<S> {
        Confirm::new(inner, Arc::clone(&self.config))
    }
}

/// Configures a [`ConfirmLayer`].
#[must_use = "call .build() to get the layer"]
pub struct ConfirmLayerBuilder {
    keys: KeyRing,
    audience: Option<String>,
    ttl: Duration,
    skew: Duration,
    store: Option<Arc<dyn ReplayStore>>,
    tools: HashMap<String, ToolPolicy>,
    supported_versions: Vec<String>,
    principal: Arc<dyn PrincipalExtractor>,
    local_principal: Option<Principal>,
    max_body_bytes: usize,
    clock: Arc<dyn Clock>,
    challenge_rate: Option<(u32, u32)>,
}

impl fmt::Debug for ConfirmLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfirmLayerBuilder")
            .field("keys", &self.keys)
            .field("audience", &self.audience)
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl ConfirmLayerBuilder {
    /// Names the deployment. Bound into every state, so a state from another service sharing a key
    /// is refused. Required; use the same value on every instance behind one endpoint.
    pub fn audience(mut self, audience: impl Into<String>) -> Self {
        self.audience = Some(audience.into());
        self
    }

    /// How long a confirmation stays answerable (default five minutes, at most 24 hours).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How far instances' clocks may disagree (default 30 seconds).
    pub fn clock_skew(mut self, skew: Duration) -> Self {
        self.skew = skew;
        self
    }

    /// Where nonces are claimed. Defaults to a [`MemoryReplayStore`], which gives single use in one
    /// process only, and only until it restarts (states issued before a restart are refused);
    /// several instances, or states that must survive a restart, need a shared store.
    pub fn replay_store(mut self, store: impl ReplayStore) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// Confirms calls of the tool `name` as `policy` says. Calling it again for a name replaces the
    /// policy.
    pub fn tool(mut self, name: impl Into<String>, policy: ToolPolicy) -> Self {
        self.tools.insert(name.into(), policy);
        self
    }

    /// The protocol versions accepted on confirmed calls (default: `2026-07-28` only). Others get
    /// `-32022` listing these.
    pub fn supported_versions<I, V>(mut self, versions: I) -> Self
    where
        I: IntoIterator<Item = V>,
        V: Into<String>,
    {
        self.supported_versions = versions.into_iter().map(Into::into).collect();
        self
    }

    /// How the principal is found in request extensions (default: a [`Principal`] stored as is).
    pub fn principal_extractor(mut self, extractor: impl PrincipalExtractor) -> Self {
        self.principal = Arc::new(extractor);
        self
    }

    /// The principal used when a request carries none. Off by default, so unauthenticated confirmed
    /// calls are refused. Only for local use, such as a stdio server run by one user.
    pub fn local_principal(mut self, principal: Principal) -> Self {
        self.local_principal = Some(principal);
        self
    }

    /// The largest request body buffered (default 4 MiB); larger POSTs get HTTP 413.
    pub fn max_body_bytes(mut self, max: usize) -> Self {
        self.max_body_bytes = max;
        self
    }

    /// Limits how fast one principal is shown new forms: `per_second` on average, up to `burst` at
    /// once (default 10 and 30). Past it, the call is refused with `-31003` and a retry-after (HTTP
    /// 429 with `Retry-After`). The limit is per instance.
    pub fn challenge_rate_limit(mut self, per_second: u32, burst: u32) -> Self {
        self.challenge_rate = Some((per_second, burst));
        self
    }

    /// No per-principal challenge limit (for benchmarks, or when a gateway in front limits).
    pub fn without_challenge_rate_limit(mut self) -> Self {
        self.challenge_rate = None;
        self
    }

    /// The clock for state issue and expiry (default: the system clock).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Builds the layer.
    ///
    /// # Errors
    /// [`ConfigError`] when the audience is missing, the TTL is out of range, no version is
    /// supported, or a tool policy is inconsistent.
    pub fn try_build(self) -> Result<ConfirmLayer, ConfigError> {
        let audience = self
            .audience
            .filter(|a| !a.is_empty())
            .ok_or(ConfigError::MissingAudience)?;
        if self.ttl.as_secs() == 0 || self.ttl > MAX_TTL {
            return Err(ConfigError::InvalidTtl);
        }
        if self.supported_versions.is_empty() {
            return Err(ConfigError::NoSupportedVersions);
        }
        for (name, policy) in &self.tools {
            policy.validate(name).map_err(ConfigError::InvalidPolicy)?;
        }
        let challenge_limiter = match self.challenge_rate {
            None => None,
            Some((per_second, burst)) => {
                let (Some(per_second), Some(burst)) =
                    (NonZeroU32::new(per_second), NonZeroU32::new(burst))
                else {
                    return Err(ConfigError::InvalidRateLimit);
                };
                Some(ChallengeLimiter::new(per_second, burst))
            }
        };
        let store = self
            .store
            .unwrap_or_else(|| Arc::new(MemoryReplayStore::new()));
        let tools = self
            .tools
            .into_iter()
            .map(|(name, policy)| {
                let guarded = GuardedTool::new(&audience, &name, policy);
                (name, Arc::new(guarded))
            })
            .collect();
        Ok(ConfirmLayer {
            config: Arc::new(Config {
                sealer: Sealer::new(self.keys, self.ttl, self.skew, self.clock),
                store,
                tools,
                supported_versions: self.supported_versions,
                principal: self.principal,
                local_principal: self.local_principal,
                max_body_bytes: self.max_body_bytes,
                challenge_limiter,
            }),
        })
    }

    /// Builds the layer.
    ///
    /// # Panics
    /// On a configuration error; see [`try_build`](Self::try_build).
    pub fn build(self) -> ConfirmLayer {
        match self.try_build() {
            Ok(layer) => layer,
            Err(e) => panic!("invalid ConfirmLayer configuration: {e}"),
        }
    }
}
