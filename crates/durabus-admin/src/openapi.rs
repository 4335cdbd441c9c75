//! The OpenAPI 3.1 document, made from the registered handlers (so it lists exactly the
//! router's routes) plus the bearer scheme every protected route needs.

use utoipa::Modify;
use utoipa::OpenApi;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "durabus admin API",
        description = "Operate a durabus event bus: dead letters, payload snapshots, replays, durable operations, jobs, periodic events, metrics. Every route but /healthz and /readyz needs `Authorization: Bearer <token>`; a read-only token may call every GET, an admin token everything. Errors: `{\"error\": {\"code\", \"message\", \"details\"}}`."
    ),
    modifiers(&Bearer),
    components(schemas(crate::error::ErrorBody, crate::error::ErrorObject)),
    security(("bearer" = [])),
    tags(
        (name = "dead-letters", description = "The dead-letter queue"),
        (name = "events", description = "Stored events"),
        (name = "payloads", description = "Payload snapshots and their configuration"),
        (name = "replay", description = "Replays of stored events"),
        (name = "operations", description = "Durable operations: bulk actions and replays"),
        (name = "jobs", description = "Maintenance jobs"),
        (name = "periodic", description = "Periodic events: published on a cron expression"),
        (name = "concurrency-limits", description = "Concurrency limits per subscription, across every worker process"),
        (name = "rate-limits", description = "Rate limits per subscription, across every worker process"),
        (name = "pauses", description = "Pauses of subscriptions, name patterns or the whole bus, across every worker process"),
        (name = "system", description = "Subscriptions, statistics, metrics, this document"),
        (name = "health", description = "Liveness and readiness (no token)"),
    )
)]
struct ApiDoc;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// The OpenAPI document of every route [`router`](crate::router) serves, as JSON: generated
/// from the handlers, with the rules their types cannot say written in (see `constraints`).
pub fn openapi() -> serde_json::Value {
    let mut json = generated();
    // Built from constants: a rule naming a part the document lacks is a bug the tests catch
    // (`every_constraint_applies`), never a reason to serve no document.
    if let Err(e) = crate::constraints::apply(&mut json) {
        tracing::error!(error = %e, "an OpenAPI constraint does not apply");
    }
    json
}

/// The document as the handlers' annotations make it.
fn generated() -> serde_json::Value {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    let (_, protected) = crate::routes::protected().split_for_parts();
    let (_, open) = crate::routes::open().split_for_parts();
    doc.merge(protected);
    doc.merge(open);
    serde_json::to_value(&doc).unwrap_or_else(|e| {
        tracing::error!(error = %e, "the OpenAPI document does not serialise");
        serde_json::Value::Null
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    #[test]
    fn every_constraint_applies() {
        let mut doc = super::generated();
        assert_eq!(crate::constraints::apply(&mut doc), Ok(()));
        assert_eq!(doc, super::openapi());
        let limit = &doc["paths"]["/api/v2/dead-letters"]["get"]["parameters"];
        assert!(limit.to_string().contains("\"maximum\":1000"), "{limit}");
        assert!(doc["components"]["schemas"]["BulkBody"]["allOf"].is_array());
    }
}
