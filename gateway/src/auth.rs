//! Who is calling. For now, static bearer tokens from a file: for a first try and for
//! development. The principal is the subject the file names for the token, put in the request's
//! extensions where the layer reads it; the caller's token never goes upstream.

use std::collections::HashMap;
use std::path::Path;

use http::{HeaderMap, header};
use mcp_confirm::Principal;

use crate::config::ConfigError;

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
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Secret(format!("the tokens file {}: {e}", path.display())))?;
        Self::parse(&text)
    }

    /// Parses the tokens file's text.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
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
        if by_token.is_empty() {
            return Err(ConfigError::Invalid(
                "the tokens file lists no token".into(),
            ));
        }
        Ok(Self { by_token })
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
