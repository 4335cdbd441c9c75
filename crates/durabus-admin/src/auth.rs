//! Bearer tokens and the two roles. A read-only token may call every `GET`; an admin token
//! may call everything. Tokens are compared in constant time, each against every configured
//! one, and never logged; the actor of every operator action is the token's name.

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// The shortest secret accepted: a guessable token is worse than none, because it looks safe.
pub const MIN_SECRET_LEN: usize = 16;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Every `GET`.
    Read,
    /// Everything.
    Admin,
}

impl Role {
    /// Its name in token files and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Admin => "admin",
        }
    }
}

/// A token that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The secret is shorter than [`MIN_SECRET_LEN`] or has spaces.
    #[error(
        "a token's secret must be at least {MIN_SECRET_LEN} characters without spaces (token {name:?})"
    )]
    WeakSecret {
        /// The token's name.
        name: String,
    },
    /// The name is empty or has characters other than letters, digits, `.`, `_`, `-`, `@`.
    #[error(
        "a token's name is 1 to 64 letters, digits, `.`, `_`, `-` or `@`, not {name:?}; write it as name:secret"
    )]
    BadName {
        /// The name given.
        name: String,
    },
    /// A line of a tokens file is not `admin|read name:secret`.
    #[error("line {line} of the tokens file: {message}")]
    BadLine {
        /// 1-based.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Two tokens share a secret or a name.
    #[error("two tokens share a {what}; give each its own")]
    Duplicate {
        /// `name` or `secret`.
        what: &'static str,
    },
}

/// One configured token.
#[derive(Clone)]
pub struct Token {
    name: String,
    secret: Vec<u8>,
    role: Role,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

impl Token {
    /// A token: `spec` is `name:secret`, or a bare secret named `default_name`.
    pub fn parse(spec: &str, role: Role, default_name: &str) -> Result<Token, TokenError> {
        let spec = spec.trim();
        let (name, secret) = match spec.split_once(':') {
            Some((name, secret)) => (name.trim(), secret.trim()),
            None => (default_name, spec),
        };
        Token::new(name, secret, role)
    }

    /// A token named `name` with `secret`.
    pub fn new(name: &str, secret: &str, role: Role) -> Result<Token, TokenError> {
        let name_ok = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'));
        if !name_ok {
            return Err(TokenError::BadName { name: name.into() });
        }
        if secret.len() < MIN_SECRET_LEN || secret.chars().any(char::is_whitespace) {
            return Err(TokenError::WeakSecret { name: name.into() });
        }
        Ok(Token {
            name: name.to_owned(),
            secret: secret.as_bytes().to_vec(),
            role,
        })
    }

    /// Its name: the actor recorded on what it does.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its role.
    pub fn role(&self) -> Role {
        self.role
    }
}

/// The configured tokens.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    tokens: Vec<Token>,
}

impl Tokens {
    /// No tokens: every protected route answers 401.
    pub fn new() -> Tokens {
        Tokens::default()
    }

    /// Adds a token; fails when its name or secret is already taken.
    pub fn with(mut self, token: Token) -> Result<Tokens, TokenError> {
        if self.tokens.iter().any(|t| t.name == token.name) {
            return Err(TokenError::Duplicate { what: "name" });
        }
        if self.tokens.iter().any(|t| t.secret == token.secret) {
            return Err(TokenError::Duplicate { what: "secret" });
        }
        self.tokens.push(token);
        Ok(self)
    }

    /// Reads a tokens file: one token per line, `admin name:secret` or `read name:secret`;
    /// blank lines and lines starting with `#` are skipped.
    pub fn parse_file(text: &str) -> Result<Tokens, TokenError> {
        let mut tokens = Tokens::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |message: &str| TokenError::BadLine {
                line: i + 1,
                message: message.into(),
            };
            let (role, spec) = line
                .split_once(char::is_whitespace)
                .ok_or_else(|| bad("expected `admin name:secret` or `read name:secret`"))?;
            let role = match role {
                "admin" => Role::Admin,
                "read" => Role::Read,
                _ => return Err(bad("the role is `admin` or `read`")),
            };
            if !spec.contains(':') {
                return Err(bad("write the token as name:secret"));
            }
            let token = Token::parse(spec, role, "").map_err(|e| bad(&e.to_string()))?;
            tokens = tokens.with(token).map_err(|e| bad(&e.to_string()))?;
        }
        Ok(tokens)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// The token whose secret is `presented`: every configured secret is compared, in
    /// constant time, whatever matched before.
    pub fn find(&self, presented: &[u8]) -> Option<&Token> {
        let mut found = None;
        for t in &self.tokens {
            if bool::from(t.secret.as_slice().ct_eq(presented)) {
                found = Some(t);
            }
        }
        found
    }
}

/// Who is calling: the token's name and role, for handlers (the actor of their actions).
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's name.
    pub name: String,
    /// Its role.
    pub role: Role,
}

impl Caller {
    /// The actor recorded on this caller's actions.
    pub fn actor(&self) -> durabus::Actor {
        durabus::Actor::new(self.name.clone(), durabus::ActorKind::Api)
    }
}

/// The role a request needs: reads need a read-only token, anything else an admin one.
pub fn required_role(method: &Method) -> Role {
    if method == Method::GET || method == Method::HEAD {
        Role::Read
    } else {
        Role::Admin
    }
}

/// Middleware: answers 401 without a valid bearer token and 403 when its role is too low;
/// otherwise hands the [`Caller`] to the handler.
pub(crate) async fn require_token(
    State(tokens): State<std::sync::Arc<Tokens>>,
    mut request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| token.trim().to_owned())
        });
    let Some(token) = presented.and_then(|p| tokens.find(p.as_bytes()).cloned()) else {
        let mut response = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send a valid token as `Authorization: Bearer <token>`",
        )
        .into_response();
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
        return response;
    };
    let needed = required_role(request.method());
    if token.role < needed {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "token {:?} is {}-only; this needs an {} token",
                token.name,
                token.role.as_str(),
                needed.as_str()
            ),
        )
        .into_response();
    }
    request.extensions_mut().insert(Caller {
        name: token.name.clone(),
        role: token.role,
    });
    next.run(request).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn specs_files_and_lookups() {
        let t = Token::parse("ops:0123456789abcdef", Role::Admin, "admin").unwrap();
        assert_eq!((t.name(), t.role()), ("ops", Role::Admin));
        let t = Token::parse("0123456789abcdef", Role::Read, "reader").unwrap();
        assert_eq!(t.name(), "reader");
        assert!(matches!(
            Token::parse("ops:short", Role::Admin, "x"),
            Err(TokenError::WeakSecret { .. })
        ));
        assert!(matches!(
            Token::parse("bad name:0123456789abcdef", Role::Admin, "x"),
            Err(TokenError::BadName { .. })
        ));
        let file = "# tokens\nadmin ann:aaaaaaaaaaaaaaaa\n\nread bob:bbbbbbbbbbbbbbbb\n";
        let tokens = Tokens::parse_file(file).unwrap();
        assert_eq!(tokens.len(), 2);
        assert_eq!(tokens.find(b"bbbbbbbbbbbbbbbb").unwrap().name(), "bob");
        assert!(tokens.find(b"bbbbbbbbbbbbbbb").is_none());
        assert!(tokens.find(b"").is_none());
        let e =
            Tokens::parse_file("admin ann:aaaaaaaaaaaaaaaa\nwrite x:cccccccccccccccc").unwrap_err();
        assert!(matches!(e, TokenError::BadLine { line: 2, .. }), "{e}");
        let e = Tokens::parse_file("admin ann:aaaaaaaaaaaaaaaa\nread bob:aaaaaaaaaaaaaaaa")
            .unwrap_err();
        assert!(e.to_string().contains("share a secret"), "{e}");
    }

    #[test]
    fn debug_output_never_shows_the_secret() {
        let t = Token::parse("ops:0123456789abcdef", Role::Admin, "admin").unwrap();
        assert!(!format!("{t:?}").contains("0123456789abcdef"));
    }
}
