//! The rules the server enforces, written into the OpenAPI document where the handlers'
//! types cannot say them: lengths and patterns (from the library's own constants, so the
//! document and the validators cannot drift apart: each constant is tested against its
//! validator), ranges, and the rules between fields (a resolve needs a note, a bulk action on
//! an empty filter needs `all`, a replay needs `from`, ids or `all`, a partition limit needs
//! both its fields). A client that validates
//! against the document and the server agree on every request; schemathesis checks it in CI.

use durabus::cancel::REASON_MAX_CHARS as CANCEL_REASON_MAX;
use durabus::dlq::MAX_NOTE;
use durabus::pattern::{EVENT_TYPE_REGEX, MAX_TYPE_LEN, PATTERN_REGEX};
use durabus::pause::REASON_MAX_CHARS as PAUSE_REASON_MAX;
use durabus::payload::{JSON_PATH_REGEX, MAX_REASON, STAGES_ITEM_REGEX};
use durabus::replay::{MAX_IDS, MAX_RATE, MAX_TYPES};
use durabus::text::{NO_NUL, REQUIRED_TEXT};
use serde_json::{Value, json};

/// The most records, events, groups or operations one page holds.
const MAX_PAGE: u32 = 1000;

/// Dead-letter statuses as the listing's `status` parameter takes them (comma-separated).
const STATUS_LIST_REGEX: &str =
    "^(pending|retrying|resolved|abandoned)(,(pending|retrying|resolved|abandoned))*$";

/// An event type or pattern (`*` allowed) as a schema.
fn glob() -> Value {
    json!({"type": "string", "pattern": PATTERN_REGEX, "maxLength": MAX_TYPE_LEN})
}

/// A failure group's fingerprint as a schema.
fn group() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 64, "pattern": NO_NUL})
}

/// A subscription's name or id as a filter.
fn subscription() -> Value {
    json!({"type": "string", "pattern": NO_NUL})
}

/// Text that must hold more than whitespace and no NUL, at most `max` characters.
fn required_text(max: usize) -> Value {
    json!({"type": "string", "pattern": REQUIRED_TEXT, "maxLength": max})
}

/// Optional text without NUL, at most `max` characters.
fn optional_text(max: usize) -> Value {
    json!({"type": ["string", "null"], "maxLength": max, "pattern": NO_NUL})
}

/// `limit`: 1 to [`MAX_PAGE`].
fn limit() -> Value {
    json!({"type": "integer", "minimum": 1, "maximum": MAX_PAGE})
}

/// A filter that selects something: at least one criterion set.
fn non_empty_filter() -> Value {
    json!({"anyOf": [
        {"required": ["status"], "properties": {"status": {"minItems": 1}}},
        {"required": ["event_type"], "properties": {"event_type": {"type": "string"}}},
        {"required": ["subscription"], "properties": {"subscription": {"type": "string"}}},
        {"required": ["group"], "properties": {"group": {"type": "string"}}},
        {"required": ["from"], "properties": {"from": {"type": "string"}}},
        {"required": ["to"], "properties": {"to": {"type": "string"}}},
    ]})
}

/// A periodic event's name as a schema (see `durabus::periodic::check_name`).
fn periodic_name() -> Value {
    json!({
        "type": "string",
        "pattern": format!("^[A-Za-z0-9._:-]{{1,{}}}$", durabus::periodic::NAME_MAX),
    })
}

/// Writes the rules into `doc` (the document as JSON). Fails naming a schema, property or
/// parameter the document does not have (a rule that would silently not apply).
pub(crate) fn apply(doc: &mut Value) -> Result<(), String> {
    // Query and path parameters.
    for (path, method, name, schema) in [
        ("/api/v2/dead-letters", "get", "limit", limit()),
        ("/api/v2/dead-letters", "get", "event_type", glob()),
        ("/api/v2/dead-letters", "get", "group", group()),
        (
            "/api/v2/dead-letters",
            "get",
            "subscription",
            subscription(),
        ),
        (
            "/api/v2/dead-letters",
            "get",
            "status",
            json!({"type": "string", "pattern": STATUS_LIST_REGEX}),
        ),
        ("/api/v2/dead-letter-groups", "get", "limit", limit()),
        ("/api/v2/events", "get", "limit", limit()),
        (
            "/api/v2/events",
            "get",
            "status",
            json!({"type": "string", "enum": ["scheduled", "pending", "processing", "done", "dlq", "cancelled"]}),
        ),
        (
            "/api/v2/events",
            "get",
            "offset",
            json!({"type": "integer", "minimum": 0, "maximum": u64::MAX}),
        ),
        ("/api/v2/operations", "get", "limit", limit()),
        (
            "/api/v2/operations",
            "get",
            "status",
            json!({"type": "string", "enum": ["pending", "running", "completed", "failed", "cancelled"]}),
        ),
        (
            "/api/v2/operations",
            "get",
            "kind",
            json!({"type": "string", "enum": durabus::operation::OPERATION_KINDS}),
        ),
        (
            "/api/v2/payload-config/{event_type}",
            "put",
            "event_type",
            json!({
                "type": "string",
                "maxLength": MAX_TYPE_LEN,
                "pattern": format!("^\\*$|{EVENT_TYPE_REGEX}"),
            }),
        ),
        (
            "/api/v2/periodic/{name}/pause",
            "post",
            "name",
            periodic_name(),
        ),
        (
            "/api/v2/periodic/{name}/resume",
            "post",
            "name",
            periodic_name(),
        ),
        ("/api/v2/periodic/{name}", "delete", "name", periodic_name()),
        ("/api/v2/pauses", "get", "limit", limit()),
        (
            "/api/v2/concurrency-limits/{subscription}",
            "put",
            "subscription",
            json!({"type": "string", "minLength": 1, "pattern": NO_NUL}),
        ),
        (
            "/api/v2/concurrency-limits/{subscription}",
            "delete",
            "subscription",
            json!({"type": "string", "minLength": 1, "pattern": NO_NUL}),
        ),
        (
            "/api/v2/rate-limits/{subscription}",
            "put",
            "subscription",
            json!({"type": "string", "minLength": 1, "pattern": NO_NUL}),
        ),
        (
            "/api/v2/rate-limits/{subscription}",
            "delete",
            "subscription",
            json!({"type": "string", "minLength": 1, "pattern": NO_NUL}),
        ),
        (
            "/api/v2/events",
            "get",
            "ordering_key",
            json!({"type": "string", "minLength": 1, "maxLength": durabus::options::ORDERING_KEY_MAX, "pattern": NO_NUL}),
        ),
    ] {
        let params = at(doc, &["paths", path, method, "parameters"])?;
        let param = params
            .as_array_mut()
            .and_then(|ps| ps.iter_mut().find(|p| p["name"] == name))
            .ok_or_else(|| format!("{method} {path} has no parameter {name}"))?;
        param["schema"] = schema;
    }

    // Properties of the bodies (and of the library types they hold).
    for (schema, property, rule) in [
        ("ResolveBody", "note", required_text(MAX_NOTE)),
        ("CancelBody", "reason", required_text(CANCEL_REASON_MAX)),
        ("CancelBody", "subscription", nullable(required_text(255))),
        ("AbandonBody", "note", optional_text(MAX_NOTE)),
        ("PauseBody", "reason", required_text(PAUSE_REASON_MAX)),
        (
            "PauseBody",
            "target",
            nullable(required_text(durabus::pause::TARGET_MAX_CHARS)),
        ),
        (
            "PauseBody",
            "for_seconds",
            json!({"type": ["integer", "null"], "minimum": 1, "maximum": durabus::pause::MAX_PAUSE_SECONDS}),
        ),
        ("ResumeBody", "reason", optional_text(PAUSE_REASON_MAX)),
        (
            "ConcurrencyBody",
            "max_in_flight",
            json!({"type": "integer", "minimum": 1, "maximum": durabus::concurrency::MAX_IN_FLIGHT}),
        ),
        (
            "ConcurrencyBody",
            "per_process",
            json!({"type": ["integer", "null"], "minimum": 1, "maximum": durabus::concurrency::MAX_IN_FLIGHT}),
        ),
        (
            "ConcurrencyBody",
            "per_partition",
            json!({"type": ["integer", "null"], "minimum": 1, "maximum": durabus::concurrency::MAX_IN_FLIGHT}),
        ),
        (
            "ConcurrencyBody",
            "partition_by",
            json!({"type": ["string", "null"], "pattern": durabus::concurrency::PARTITION_BY_REGEX}),
        ),
        (
            "LimitBody",
            "per",
            json!({"type": "integer", "minimum": 1, "maximum": durabus::rate::MAX_PER}),
        ),
        (
            "LimitBody",
            "interval_ms",
            json!({"type": "integer", "minimum": 1, "maximum": durabus::rate::MAX_INTERVAL.as_millis() as u64}),
        ),
        ("DeleteBody", "reason", required_text(MAX_REASON)),
        ("BulkBody", "note", optional_text(MAX_NOTE)),
        ("FilterBody", "event_type", nullable(glob())),
        ("FilterBody", "group", nullable(group())),
        ("FilterBody", "subscription", nullable(subscription())),
        (
            "ReplayBody",
            "ids",
            json!({"type": "array", "items": {"type": "string", "format": "uuid"}, "maxItems": MAX_IDS}),
        ),
        (
            "ReplayBody",
            "types",
            json!({"type": "array", "items": glob(), "maxItems": MAX_TYPES}),
        ),
        (
            "ReplayBody",
            "rate_limit",
            json!({"type": ["integer", "null"], "minimum": 1, "maximum": MAX_RATE}),
        ),
        (
            "ConfigInput",
            "stages",
            json!({"type": "array", "items": {"type": "string", "pattern": STAGES_ITEM_REGEX}}),
        ),
        (
            "ConfigInput",
            "redact",
            json!({"type": "array", "items": {"type": "string", "pattern": JSON_PATH_REGEX}}),
        ),
        (
            "ConfigInput",
            "retention_days",
            json!({"type": "integer", "minimum": 0, "maximum": u32::MAX}),
        ),
    ] {
        let properties = at(doc, &["components", "schemas", schema, "properties"])?;
        let slot = properties
            .get_mut(property)
            .ok_or_else(|| format!("schema {schema} has no property {property}"))?;
        let description = slot.get("description").cloned();
        *slot = rule;
        if let Some(d) = description {
            slot["description"] = d;
        }
    }

    // Rules between fields.
    let bulk = at(doc, &["components", "schemas", "BulkBody"])?;
    bulk["allOf"] = json!([
        {"oneOf": [
            {"properties": {"action": {"enum": ["retry", "purge"]}, "note": {"type": "null"}}},
            {"required": ["note"], "properties": {
                "action": {"const": "resolve"}, "note": required_text(MAX_NOTE)}},
            {"properties": {"action": {"const": "abandon"}}},
        ]},
        {"anyOf": [
            {"required": ["all"], "properties": {"all": {"const": true}}},
            {"required": ["filter"], "properties": {"filter": non_empty_filter()}},
        ]},
    ]);
    let pause = at(doc, &["components", "schemas", "PauseBody"])?;
    pause["oneOf"] = json!([
        {"properties": {"scope": {"const": "bus"}, "target": {"type": "null"}}},
        {"required": ["target"], "properties": {
            "scope": {"enum": ["subscription", "matching"]},
            "target": required_text(durabus::pause::TARGET_MAX_CHARS)}},
    ]);
    let concurrency = at(doc, &["components", "schemas", "ConcurrencyBody"])?;
    concurrency["oneOf"] = json!([
        {"properties": {"partition_by": {"type": "null"}, "per_partition": {"type": "null"}}},
        {"required": ["partition_by", "per_partition"], "properties": {
            "partition_by": {"type": "string"}, "per_partition": {"type": "integer"}}},
    ]);
    let replay = at(doc, &["components", "schemas", "ReplayBody"])?;
    replay["allOf"] = json!([
        {"anyOf": [
            {"required": ["from"], "properties": {"from": {"type": "string"}}},
            {"required": ["ids"], "properties": {"ids": {"minItems": 1}}},
            {"required": ["all"], "properties": {"all": {"const": true}}},
        ]},
        {"anyOf": [
            {"not": {"required": ["unthrottled"]}},
            {"properties": {"unthrottled": {"const": false}}},
            {"not": {"required": ["rate_limit"]}},
            {"properties": {"rate_limit": {"type": "null"}}},
        ]},
    ]);
    Ok(())
}

/// `schema` that also takes `null`.
fn nullable(mut schema: Value) -> Value {
    schema["type"] = json!([schema["type"].clone(), "null"]);
    schema
}

/// The value at `keys` in `doc`.
fn at<'a>(doc: &'a mut Value, keys: &[&str]) -> Result<&'a mut Value, String> {
    let mut v = doc;
    for k in keys {
        v = v
            .get_mut(*k)
            .ok_or_else(|| format!("the document has no {}", keys.join(" → ")))?;
    }
    Ok(v)
}
