//! The durabus admin HTTP API, as a library: [`router`] gives an [`axum::Router`] over an
//! [`EventBus`] that an application mounts in its own server (or `durabus serve` runs alone).
//!
//! - Dead letters: list with filters and keyset pages, one with its payload and every round's
//!   errors, retry / resolve / abandon, failure groups, bulk actions with a preview (run as
//!   durable operations).
//! - Events: history query, one event, its payload snapshots by stage, soft delete; the
//!   payload configuration per type.
//! - Replays: preview, dry run, start, follow, cancel.
//! - Operations and jobs; subscriptions with their breakers; statistics; `/metrics`;
//!   `/healthz` and `/readyz`.
//! - `GET /api/v2/openapi.json`: the OpenAPI 3.1 document of all of it, generated from the
//!   handlers themselves.
//! - [`dashboard`]: the operators' web dashboard (embedded HTML, CSS and JavaScript) at `/`,
//!   to merge beside the API: `router(state).merge(dashboard())`.
//!
//! Every route but the two health checks needs `Authorization: Bearer <token>`; a read-only
//! token may call every `GET`, an admin token everything (see [`auth`]). Every error has one
//! shape (see [`ApiError`]). JSON names are `snake_case` throughout.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use durabus_admin::{AdminConfig, AdminState, Role, Token, Tokens};
//!
//! let bus = durabus::EventBus::open("app.db").await?;
//! let tokens = Tokens::new()
//!     .with(Token::parse("ops:a-long-random-secret", Role::Admin, "admin")?)?;
//! let app = durabus_admin::router(AdminState::new(bus, AdminConfig::new(tokens)));
//! // Any axum listener serves it; AdminListener also answers the HTTP parser's own refusals
//! // (a URI over 64 KiB, oversized headers) in the API's error shape.
//! let listener = durabus_admin::AdminListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```

pub mod auth;
mod constraints;
mod dashboard;
mod error;
mod extract;
mod listener;
mod middleware;
mod openapi;
mod routes;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::HeaderValue;
use durabus::EventBus;

pub use auth::{Caller, Role, Token, TokenError, Tokens};
pub use dashboard::{CONTENT_SECURITY_POLICY, dashboard};
pub use error::{ApiError, ApiResult, ErrorBody, ErrorObject};
pub use listener::{AdminListener, ShapedConnection};
pub use openapi::openapi;

/// Settings of the admin API.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// Who may call it. Without tokens every protected route answers 401.
    pub tokens: Tokens,
    /// Largest request body, in bytes. Defaults to 512 KiB: the largest body the OpenAPI document
    /// allows (a replay of 10,000 ids and 100 types) fits.
    pub body_limit: usize,
    /// Longest a request may take before it is answered `503 timeout`. Defaults to 30 s.
    pub timeout: Duration,
    /// Origins allowed to call the API from a browser (CORS). Defaults to none: CORS is off.
    pub cors_origins: Vec<HeaderValue>,
}

impl AdminConfig {
    /// The defaults with `tokens`.
    pub fn new(tokens: Tokens) -> AdminConfig {
        AdminConfig {
            tokens,
            body_limit: 512 * 1024,
            timeout: Duration::from_secs(30),
            cors_origins: Vec::new(),
        }
    }
}

/// What the handlers share: the bus and the settings.
#[derive(Clone)]
pub struct AdminState {
    bus: EventBus,
    config: Arc<AdminConfig>,
    overview: routes::OverviewCache,
}

impl std::fmt::Debug for AdminState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl AdminState {
    /// The API over `bus` (the application's own, or an operations-only one built with
    /// `deliver(false)`).
    pub fn new(bus: EventBus, config: AdminConfig) -> AdminState {
        AdminState {
            bus,
            config: Arc::new(config),
            overview: routes::OverviewCache::default(),
        }
    }

    /// The bus.
    pub fn bus(&self) -> &EventBus {
        &self.bus
    }

    /// The settings.
    pub fn config(&self) -> &AdminConfig {
        &self.config
    }

    pub(crate) fn overview_cache(&self) -> &routes::OverviewCache {
        &self.overview
    }
}

/// The admin API: every route, its auth, body limit, timeout, request ids and request log.
pub fn router(state: AdminState) -> Router {
    let (protected, open) = routes::split(state.clone());
    let tokens = Arc::new(state.config.tokens.clone());
    let protected = protected.layer(axum::middleware::from_fn_with_state(
        tokens,
        auth::require_token,
    ));
    let mut app = Router::new()
        .merge(protected)
        .merge(open)
        .fallback(routes::no_route)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(
            state.config.body_limit,
        ));
    if !state.config.cors_origins.is_empty() {
        app = app.layer(
            tower_http::cors::CorsLayer::new()
                .allow_origin(state.config.cors_origins.clone())
                .allow_methods(tower_http::cors::Any)
                .allow_headers([
                    axum::http::header::AUTHORIZATION,
                    axum::http::header::CONTENT_TYPE,
                ]),
        );
    }
    middleware::outer(app, state.config.timeout)
}
