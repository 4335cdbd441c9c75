//! Every route of the admin API through `oneshot`, on SQLite and PostgreSQL: success, each
//! error status, pagination and filters, roles, and a walk over the route table proving every
//! route is behind a token and every write behind an admin token.

mod dead_letters;
mod pauses;
mod periodic;
mod resources;
mod routes;
use dead_letters::*;
use pauses::*;
use periodic::*;
use resources::*;
use routes::*;

use crate::support::*;

use axum::body::Body;

use axum::http::{Method, Request, StatusCode, header};

use serde_json::{Value, json};

both!(
    every_route_needs_a_token_and_every_write_an_admin_token,
    the_openapi_document_lists_exactly_the_routes,
    dead_letters_list_filter_page_and_show,
    dead_letter_actions_follow_the_lifecycle_and_record_the_token_name,
    bulk_actions_preview_submit_and_run_as_operations,
    bodies_that_cannot_be_read_get_the_right_status,
    events_payloads_and_their_configuration,
    events_are_scheduled_listed_and_cancelled,
    replays_preview_dry_run_start_follow_and_cancel,
    jobs_subscriptions_stats_metrics_and_health,
    periodic_events_are_listed_paused_resumed_and_removed,
    pauses_are_started_listed_and_resumed,
    rate_limits_are_set_listed_and_removed,
    concurrency_limits_are_set_listed_and_removed,
    a_closed_store_answers_503_without_its_cause,
    every_refused_value_names_its_field_problem_and_accepted_range,
);

/// Fills a route's path parameters with well-formed values.
fn concrete(path: &str) -> String {
    path.replace("{id}", &durabus::EventId::new().to_string())
        .replace("{event_id}", &durabus::EventId::new().to_string())
        .replace("{stage}", "published")
        .replace("{event_type}", "order.created")
        .replace("{name}", "cleanup-history")
        .replace("{subscription}", "payments")
}

/// Every (method, path) of the OpenAPI document.
fn documented() -> Vec<(Method, String)> {
    let doc: Value = durabus_admin::openapi();
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            routes.push((method.to_uppercase().parse().unwrap(), path.clone()));
        }
    }
    routes
}

const OPEN: [&str; 2] = ["/healthz", "/readyz"];

/// The API over a fresh SQLite bus with `config` instead of the defaults.
async fn with_config(config: impl FnOnce(&mut durabus_admin::AdminConfig)) -> (Api, axum::Router) {
    let api = Api::sqlite().await;
    let mut c = durabus_admin::AdminConfig::new(tokens());
    config(&mut c);
    let app = durabus_admin::router(durabus_admin::AdminState::new(api.bus.clone(), c));
    (api, app)
}

async fn send(app: &axum::Router, req: Request<Body>) -> axum::response::Response {
    tower::ServiceExt::oneshot(app.clone(), req).await.unwrap()
}
