//! Who is calling: an OAuth 2.1 bearer JWT ([`crate::oauth`]), or, for a first try and for
//! development, static bearer tokens from a file. The principal goes in the request's
//! extensions, where the layer reads it; whatever the caller put there is removed first. The
//! caller's token never goes upstream unless the route says so.

use std::collections::HashMap;
use std::path::Path;

use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use mcp_confirm::Principal;

use crate::answer::{GatewayBody, plain};
use crate::config::ConfigError;
use crate::oauth::{OAuth, Rejection};

/// How callers prove who they are.
#[derive(Debug)]
pub enum Authenticator {
    /// Tokens listed in a file.
    Static(StaticTokens),
    /// Bearer JWTs of one issuer.
    OAuth(Box<OAuth>),
}

impl Authenticator {
    /// The principal of a request to the route whose URL is `resource`.
    ///
    /// # Errors
    /// [`Rejection`], its reason for the log only.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        resource: &str,
    ) -> Result<Principal, Rejection> {
        match self {
            Self::Static(tokens) => tokens.principal(headers).ok_or(Rejection::Missing),
            Self::OAuth(oauth) => oauth.principal(headers, resource).await,
        }
    }

    /// The resource server, if callers sign in with OAuth.
    pub fn oauth(&self) -> Option<&OAuth> {
        match self {
            Self::OAuth(oauth) => Some(oauth),
            Self::Static(_) => None,
        }
    }

    /// The answer to a request that was not let in: `401` (or `403` for a missing scope) with
    /// the `WWW-Authenticate` challenge RFC 6750 and RFC 9728 describe, pointing OAuth clients
    /// at the route's metadata. One frozen text per class; the reason was logged.
    pub fn refuse(&self, rejection: &Rejection, resource: &str) -> Response<GatewayBody> {
        let (status, error, text) = match rejection {
            Rejection::Missing => (
                StatusCode::UNAUTHORIZED,
                None,
                "Sign in: a bearer token is required.",
            ),
            Rejection::Invalid(_) | Rejection::NoKeys(_) => (
                StatusCode::UNAUTHORIZED,
                Some("invalid_token"),
                "The bearer token is not valid here.",
            ),
            Rejection::InsufficientScope(_) => (
                StatusCode::FORBIDDEN,
                Some("insufficient_scope"),
                "The bearer token does not allow this.",
            ),
        };
        let mut challenge = String::from("Bearer");
        let mut params = Vec::new();
        if let Some(error) = error {
            params.push(format!("error=\"{error}\""));
        }
        if let Some(oauth) = self.oauth() {
            if matches!(rejection, Rejection::InsufficientScope(_)) && !oauth.scopes().is_empty() {
                params.push(format!("scope=\"{}\"", oauth.scopes().join(" ")));
            }
            if let Some(url) = crate::oauth::metadata_url(resource) {
                params.push(format!("resource_metadata=\"{url}\""));
            }
        }
        if !params.is_empty() {
            challenge.push(' ');
            challenge.push_str(&params.join(", "));
        }
        let mut response = plain(status, text);
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

/// Tokens and the subjects they name.
#[derive(Clone, Default)]
pub struct StaticTokens {
    by_token: HashMap<String, String>,
}

impl std::fmt::Debug for StaticTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Tokens are never printed.
        f.debug_struct("StaticTokens")
            .field("tokens", &self.by_token.len())
            .finish()
    }
}

impl StaticTokens {
    /// Reads `path`: one `subject token` pair per line, `#` starting a comment.
    ///
    /// # Errors
    /// [`ConfigError::Secret`] if it cannot be read, [`ConfigError::Invalid`] for a line that
    /// is not a pair, a token listed twice, or a file with no token.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        Self::parse(&Self::text(path)?)
    }

    /// As [`read`](Self::read), but a file that lists no token is taken, and lets no one in:
    /// how a reload revokes the last token (refusing the file would keep the tokens in force).
    ///
    /// # Errors
    /// As [`read`](Self::read), but for an empty file.
    pub fn read_allowing_none(path: &Path) -> Result<Self, ConfigError> {
        Self::parse_lines(&Self::text(path)?).map(|by_token| Self { by_token })
    }

    /// Whether it lets no one in.
    pub fn is_empty(&self) -> bool {
        self.by_token.is_empty()
    }

    fn text(path: &Path) -> Result<String, ConfigError> {
        std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Secret(format!("the tokens file {}: {e}", path.display())))
    }

    /// Parses the tokens file's text.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let by_token = Self::parse_lines(text)?;
        if by_token.is_empty() {
            return Err(ConfigError::Invalid(
                "the tokens file lists no token".into(),
            ));
        }
        Ok(Self { by_token })
    }

    /// Each token and the subject it names; none for a file of comments.
    fn parse_lines(text: &str) -> Result<HashMap<String, String>, ConfigError> {
        let mut by_token = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(subject), Some(token), None) = (words.next(), words.next(), words.next())
            else {
                return Err(ConfigError::Invalid(format!(
                    "tokens file, line {}: not `subject token`",
                    n + 1
                )));
            };
            if token.len() < 16 {
                return Err(ConfigError::Invalid(format!(
                    "tokens file, line {}: a token of at least 16 characters",
                    n + 1
                )));
            }
            if by_token
                .insert(token.to_owned(), subject.to_owned())
                .is_some()
            {
                return Err(ConfigError::Invalid(format!(
                    "tokens file, line {}: a token listed twice",
                    n + 1
                )));
            }
        }
        Ok(by_token)
    }

    /// The principal a request's `Authorization: Bearer` token names, if it names one.
    pub fn principal(&self, headers: &HeaderMap) -> Option<Principal> {
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        let value = values.next()?;
        if values.next().is_some() {
            return None;
        }
        let token = value.to_str().ok()?.strip_prefix("Bearer ")?;
        self.by_token
            .get(token)
            .map(|subject| Principal::new(subject.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_subject_and_nothing_else_does() {
        let tokens = StaticTokens::parse(
            "# who\nalice alice-token-0123456789\nbob bob-token-0123456789 # bob\n",
        )
        .unwrap();
        let mut headers = HeaderMap::new();
        assert!(tokens.principal(&headers).is_none());
        headers.insert(
            header::AUTHORIZATION,
            "Bearer alice-token-0123456789".parse().unwrap(),
        );
        assert_eq!(tokens.principal(&headers).unwrap().subject(), "alice");
        headers.insert(
            header::AUTHORIZATION,
            "Bearer nobody-0123456789".parse().unwrap(),
        );
        assert!(tokens.principal(&headers).is_none());
        headers.insert(
            header::AUTHORIZATION,
            "Basic alice-token-0123456789".parse().unwrap(),
        );
        assert!(tokens.principal(&headers).is_none());
        // Two Authorization headers: ambiguous, no one.
        headers.insert(
            header::AUTHORIZATION,
            "Bearer alice-token-0123456789".parse().unwrap(),
        );
        headers.append(
            header::AUTHORIZATION,
            "Bearer bob-token-0123456789".parse().unwrap(),
        );
        assert!(tokens.principal(&headers).is_none());
    }

    #[test]
    fn a_bad_file_is_refused() {
        for text in [
            "",
            "# none\n",
            "alice\n",
            "alice short\n",
            "a t0123456789abcdef x\n",
            "a t0123456789abcdef\nb t0123456789abcdef\n",
        ] {
            assert!(StaticTokens::parse(text).is_err(), "{text:?}");
        }
    }
}
