//! A small web service on axum: `POST /orders` writes an order and publishes its
//! `order.placed` event in one SQLite transaction (the outbox), a handler ships it, and the
//! admin API is mounted beside the application's routes.
//!
//! `cargo run -p durabus-admin --example axum_app` serves on 127.0.0.1:3000 (admin token from
//! `ADMIN_TOKEN`, or one made and printed); `-- --check` runs the same requests in-process and
//! exits (what CI does).
#![allow(clippy::print_stdout)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use durabus::rusqlite::{Connection, TransactionBehavior};
use durabus::{Event, EventBus, EventStatus, Outbox, SubscribeOptions};
use durabus_admin::{AdminConfig, AdminState, Role, Token, Tokens};
use serde_json::{Value, json};

#[derive(Clone)]
struct App {
    db: Arc<Mutex<Connection>>,
    outbox: Outbox,
}

/// `POST /orders {"item": "..."}`: the order row and its event commit together, or neither.
async fn place_order(
    State(app): State<App>,
    Json(body): Json<Value>,
) -> Result<(StatusCode, Json<Value>), (StatusCode, String)> {
    let item = body["item"]
        .as_str()
        .filter(|i| !i.is_empty())
        .ok_or((StatusCode::UNPROCESSABLE_ENTITY, "item is required".into()))?
        .to_owned();
    let placed = tokio::task::spawn_blocking(move || -> Result<Value, String> {
        let mut conn = app.db.lock().map_err(|e| e.to_string())?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| e.to_string())?;
        tx.execute("INSERT INTO orders (item) VALUES (?1)", [&item])
            .map_err(|e| e.to_string())?;
        let order = tx.last_insert_rowid();
        let event = app
            .outbox
            .publish(
                &tx,
                "order.placed",
                &json!({ "order": order, "item": item }),
            )
            .map_err(|e| e.to_string())?;
        tx.commit().map_err(|e| e.to_string())?;
        Ok(json!({ "order": order, "event": event }))
    })
    .await
    .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e))?;
    Ok((StatusCode::CREATED, Json(placed)))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let check = std::env::args().any(|a| a == "--check");
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("shop.db");
    let conn = Connection::open(&path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.execute_batch("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)")?;

    let bus = EventBus::open(&path).await?;
    bus.subscribe(
        "order.placed",
        |e: Event| async move {
            println!("shipping {}", e.payload);
            Ok(())
        },
        SubscribeOptions::default().name("shipping"),
    )
    .await?;
    bus.start().await?;

    let secret = std::env::var("ADMIN_TOKEN")
        .unwrap_or_else(|_| format!("example-{}", durabus::EventId::new().0.simple()));
    let tokens = Tokens::new().with(Token::parse(&secret, Role::Admin, "shop-admin")?)?;
    let admin = durabus_admin::router(AdminState::new(bus.clone(), AdminConfig::new(tokens)));
    let app = Router::new()
        .route("/orders", post(place_order))
        .with_state(App {
            db: Arc::new(Mutex::new(conn)),
            outbox: bus.outbox()?,
        })
        .merge(admin);

    if !check {
        let listener = durabus_admin::AdminListener::bind("127.0.0.1:3000").await?;
        println!(
            "POST http://127.0.0.1:3000/orders; admin API with `Authorization: Bearer {secret}`"
        );
        axum::serve(listener, app).await?;
        bus.shutdown().await?;
        return Ok(());
    }

    // --check: the same requests in-process.
    use tower::ServiceExt;
    let call = |method: &str, uri: &str, token: bool, body: Value| {
        let mut req = axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json");
        if token {
            req = req.header("authorization", format!("Bearer {secret}"));
        }
        app.clone().oneshot(
            req.body(axum::body::Body::from(body.to_string()))
                .unwrap_or_default(),
        )
    };
    let placed = call("POST", "/orders", false, json!({ "item": "teapot" })).await?;
    assert_eq!(placed.status(), StatusCode::CREATED);
    let placed: Value =
        serde_json::from_slice(&axum::body::to_bytes(placed.into_body(), 1 << 20).await?)?;
    let event: durabus::EventId = serde_json::from_value(placed["event"].clone())?;
    for _ in 0..100 {
        if bus.history().get(event).await?.status == EventStatus::Done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let shown = call("GET", &format!("/api/v2/events/{event}"), true, Value::Null).await?;
    let shown: Value =
        serde_json::from_slice(&axum::body::to_bytes(shown.into_body(), 1 << 20).await?)?;
    println!("the admin API shows the event: {}", shown["status"]);
    assert_eq!(shown["status"], "done");
    let anonymous = call("GET", "/api/v2/stats", false, Value::Null).await?;
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    bus.shutdown().await?;
    println!("axum_app check passed");
    Ok(())
}
