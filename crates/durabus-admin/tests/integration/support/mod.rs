//! A bus with seeded dead letters behind the admin router, on a temp-dir SQLite file or a
//! fresh PostgreSQL schema, and a way to call it.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use durabus::{Event, EventBus, ManualClock, RetryOverride, SubscribeOptions};
use durabus_admin::{AdminConfig, AdminState, Role, Token, Tokens};
use serde_json::Value;
use tower::ServiceExt;

pub const ADMIN: &str = "admin-secret-0123456789";
pub const READ: &str = "read-secret-0123456789";

pub fn pg_url() -> String {
    std::env::var("DURABUS_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// The admin API over a bus whose `pay.*` handler fails (one attempt) until made healthy.
pub struct Api {
    pub app: Router,
    pub bus: EventBus,
    pub clock: ManualClock,
    pub healthy: Arc<AtomicBool>,
    pub schema: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

pub fn tokens() -> Tokens {
    Tokens::new()
        .with(Token::parse(&format!("ops:{ADMIN}"), Role::Admin, "admin").unwrap())
        .unwrap()
        .with(Token::parse(&format!("viewer:{READ}"), Role::Read, "read").unwrap())
        .unwrap()
}

impl Api {
    pub async fn sqlite() -> Api {
        let dir = tempfile::tempdir().unwrap();
        let builder = EventBus::builder().sqlite(dir.path().join("api.db"));
        Api::with(builder, Some(dir), None).await
    }

    /// On PostgreSQL; `None` (skipped) when it is unreachable outside CI.
    pub async fn postgres() -> Option<Api> {
        let reachable = tokio::time::timeout(
            Duration::from_secs(5),
            durabus::sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(&pg_url()),
        )
        .await
        .is_ok_and(|r| r.is_ok());
        if !reachable {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "PostgreSQL at {} is unreachable and CI=true requires it",
                pg_url()
            );
            eprintln!("skipped: PostgreSQL unreachable");
            return None;
        }
        let schema = format!("t_{}", durabus::EventId::new().0.simple());
        let builder = EventBus::builder().postgres_with(
            pg_url(),
            durabus::PgOptions {
                schema: schema.clone(),
                max_connections: 4,
                ..durabus::PgOptions::default()
            },
        );
        Some(Api::with(builder, None, Some(schema)).await)
    }

    async fn with(
        builder: durabus::BusBuilder,
        dir: Option<tempfile::TempDir>,
        schema: Option<String>,
    ) -> Api {
        let clock = ManualClock::default();
        let bus = builder
            .clock(Arc::new(clock.clone()))
            .payload_snapshots(true)
            .breaker(durabus::BreakerConfig {
                min_samples: u32::MAX,
                ..durabus::BreakerConfig::default()
            })
            .build()
            .await
            .unwrap();
        let healthy = Arc::new(AtomicBool::new(false));
        let h = healthy.clone();
        bus.subscribe(
            "pay.*",
            move |e: Event| {
                let h = h.clone();
                async move {
                    if h.load(Ordering::SeqCst) {
                        return Ok(());
                    }
                    let order = e.payload::<Value>().ok().and_then(|v| v["order"].as_u64());
                    Err(format!("card for order #{} refused", order.unwrap_or(0)).into())
                }
            },
            SubscribeOptions::default()
                .name("payments")
                .retry(RetryOverride::default().max_retries(0)),
        )
        .await
        .unwrap();
        let app = durabus_admin::router(AdminState::new(bus.clone(), AdminConfig::new(tokens())));
        Api {
            app,
            bus,
            clock,
            healthy,
            schema,
            _dir: dir,
        }
    }

    /// Publishes `n` payments that fail into the dead-letter queue; returns their ids.
    pub async fn dead_payments(&self, event_type: &str, n: u64) -> Vec<durabus::EventId> {
        let mut ids = Vec::new();
        for order in 0..n {
            let payload =
                serde_json::json!({ "order": order, "note": "<img src=x onerror=alert(1)>" });
            ids.push(self.bus.publish(event_type, &payload).await.unwrap());
            self.clock.advance(Duration::from_millis(1));
        }
        // The outcome of a publish's attempt is recorded just after the publish returns.
        let store = self.bus.store();
        for id in &ids {
            let mut tries = 0;
            while store.get_event(*id).await.unwrap().map(|e| e.status)
                != Some(durabus::EventStatus::Dlq)
            {
                tries += 1;
                assert!(
                    tries < 1000,
                    "event {id} never reached the dead-letter queue"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        ids
    }

    /// Calls the API; returns the status and the body as JSON (`Value::String` if it is not).
    pub async fn call(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(t) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = match body {
            Some(b) => req
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(b.to_string())),
            None => req.body(Body::empty()),
        }
        .unwrap();
        self.raw(req).await
    }

    pub async fn raw(&self, req: Request<Body>) -> (StatusCode, Value) {
        let response = self.app.clone().oneshot(req).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, value)
    }

    pub async fn get(&self, uri: &str) -> (StatusCode, Value) {
        self.call(Method::GET, uri, Some(ADMIN), None).await
    }

    pub async fn post(&self, uri: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, uri, Some(ADMIN), Some(body)).await
    }

    pub async fn finish(self) {
        let _ = self.bus.shutdown().await;
        if let Some(schema) = &self.schema
            && let Ok(pool) = durabus::sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(&pg_url())
                .await
        {
            let _ = durabus::sqlx::raw_sql(durabus::sqlx::AssertSqlSafe(format!(
                "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
            )))
            .execute(&pool)
            .await;
        }
    }
}

/// Asserts the error shape and code.
pub fn assert_error(got: &(StatusCode, Value), status: StatusCode, code: &str) {
    assert_eq!(got.0, status, "{}", got.1);
    assert_eq!(got.1["error"]["code"], code, "{}", got.1);
    assert!(got.1["error"]["message"].is_string(), "{}", got.1);
    assert!(got.1["error"].get("details").is_some(), "{}", got.1);
}

/// Runs each scenario on a fresh SQLite bus and a fresh PostgreSQL schema.
#[allow(unused_macros)]
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let api = crate::support::Api::sqlite().await;
                    super::$name(&api).await;
                    api.finish().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(api) = crate::support::Api::postgres().await else { return };
                    super::$name(&api).await;
                    api.finish().await;
                }
            )*
        }
    };
}
