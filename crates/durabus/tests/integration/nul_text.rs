//! NUL characters (U+0000), which PostgreSQL's `text` cannot hold: a handler's error that
//! holds one is recorded (as U+FFFD) on every store instead of leaving the event unrecorded;
//! payloads and metadata keep theirs; operators' notes and filters refuse it, and an event
//! type holding one selects nothing.

use durabus::{
    Actor, ActorKind, DeadLetterFilter, ErrorKind, Event, EventQuery, EventStatus, Keyset,
    NewEvent, RetryOverride, SubscribeOptions,
};

use crate::support::{Harness, get, wait_status};

async fn nul_is_stored_or_refused(h: &Harness) {
    let bus = h.bus().await;
    bus.subscribe(
        "nul.*",
        |_e: Event| async { Err("bad\0error".into()) },
        SubscribeOptions::default()
            .name("n")
            .retry(RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let payload = bus.enqueue("nul.payload", &"a\0b").await.unwrap();
    let meta = bus
        .enqueue_event(
            NewEvent::new("nul.meta", &1)
                .unwrap()
                .with_metadata("k", "v\0"),
        )
        .await
        .unwrap();
    let dead = wait_status(&bus, payload, EventStatus::Dlq).await;
    assert_eq!(dead.payload::<String>().unwrap(), "a\0b");
    assert_eq!(dead.errors, ["attempt 1 [n]: bad\u{fffd}error"]);
    let dead = wait_status(&bus, meta, EventStatus::Dlq).await;
    assert_eq!(dead.metadata["k"], "v\0");

    let ann = Actor::new("ann", ActorKind::Library);
    let letters = bus.dead_letters();
    let e = letters.resolve(payload, "no\0te", &ann).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert_eq!(
        get(&bus, payload).await.status,
        EventStatus::Dlq,
        "nothing changed"
    );
    for filter in [
        DeadLetterFilter {
            group: Some("g\0".into()),
            ..DeadLetterFilter::default()
        },
        DeadLetterFilter {
            subscription: Some("n\0".into()),
            ..DeadLetterFilter::default()
        },
    ] {
        let e = letters.list(filter, Keyset::default()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    }
    let none = bus
        .history()
        .list(EventQuery {
            event_type: Some("nul.payload\0".into()),
            ..EventQuery::default()
        })
        .await
        .unwrap();
    assert!(none.is_empty());
    bus.shutdown().await.unwrap();
}

#[tokio::test]
async fn sqlite_nul_is_stored_or_refused() {
    let h = Harness::sqlite();
    nul_is_stored_or_refused(&h).await;
    h.finish().await;
}

#[tokio::test]
async fn postgres_nul_is_stored_or_refused() {
    let Some(h) = Harness::postgres().await else {
        return;
    };
    nul_is_stored_or_refused(&h).await;
    h.finish().await;
}
