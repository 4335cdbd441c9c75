//! The store contract, directly.

use std::time::Duration;

use durabus::{EventQuery, EventStatus, InsertMode, NewEvent, Outcome, Store, Stored};

use crate::support::*;

pub async fn claims_only_due_events_and_never_the_same_twice(h: &Harness) {
    let store = h.backend.open().await;
    let now = h.clock.now();
    let batch: Vec<_> = (0..50).map(|i| NewEvent::new("c.x", &i).unwrap()).collect();
    store.insert(batch, InsertMode::Pending, now).await.unwrap();
    let (a, b) = tokio::join!(store.claim_due(now, 30), store.claim_due(now, 30));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.len() + b.len(), 50);
    let mut ids: Vec<_> = a.iter().chain(b.iter()).map(|e| e.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 50, "an event was claimed twice");
    assert!(
        a.iter()
            .chain(b.iter())
            .all(|e| e.status == EventStatus::Processing)
    );
    assert!(store.claim_due(now, 10).await.unwrap().is_empty());
    // A retry scheduled in the future is not due yet.
    let id = a[0].id;
    let later = now.plus(Duration::from_secs(5));
    let retry = Outcome::Retry {
        id,
        retry_count: 1,
        errors: vec!["e".into()],
        delivered: vec![],
        next_attempt_at: later,
    };
    assert!(store.record(retry.clone(), now).await.unwrap());
    assert!(
        !store.record(retry, now).await.unwrap(),
        "only processing events take outcomes"
    );
    assert_eq!(store.next_due().await.unwrap(), Some(later));
    assert!(store.claim_due(now, 10).await.unwrap().is_empty());
    let got = store.claim_due(later, 10).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].retry_count, 1);
    assert_eq!(got[0].errors, vec!["e".to_string()]);
    store.close().await.unwrap();
}

pub async fn claims_come_out_earliest_due_first(h: &Harness) {
    let store = h.backend.open().await;
    let t0 = h.clock.now();
    let first = NewEvent::new("o.x", &1).unwrap();
    let second = NewEvent::new("o.x", &2).unwrap();
    let (f, s) = (first.id, second.id);
    store
        .insert(
            vec![second],
            InsertMode::Pending,
            t0.plus(Duration::from_millis(5)),
        )
        .await
        .unwrap();
    store
        .insert(vec![first], InsertMode::Pending, t0)
        .await
        .unwrap();
    let got: Vec<_> = store
        .claim_due(t0.plus(Duration::from_secs(1)), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(got, vec![f, s]);
    store.close().await.unwrap();
}

pub async fn listing_filters_by_status_and_type_and_counts(h: &Harness) {
    let store = h.backend.open().await;
    let now = h.clock.now();
    store
        .insert(
            vec![
                NewEvent::new("t.a", &1).unwrap(),
                NewEvent::new("t.b", &1).unwrap(),
            ],
            InsertMode::Pending,
            now,
        )
        .await
        .unwrap();
    store
        .insert(
            vec![NewEvent::new("t.a", &2).unwrap()],
            InsertMode::Claimed,
            now,
        )
        .await
        .unwrap();
    let q = |status: Option<EventStatus>, t: Option<&str>| EventQuery {
        status,
        event_type: t.map(str::to_owned),
        ..EventQuery::default()
    };
    assert_eq!(store.list_events(q(None, None)).await.unwrap().len(), 3);
    assert_eq!(
        store
            .list_events(q(Some(EventStatus::Pending), None))
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        store.list_events(q(None, Some("t.a"))).await.unwrap().len(),
        2
    );
    assert_eq!(
        store
            .list_events(q(Some(EventStatus::Processing), Some("t.a")))
            .await
            .unwrap()
            .len(),
        1
    );
    let counts = store.counts().await.unwrap();
    let find = |t: &str, s: EventStatus| {
        counts
            .iter()
            .find(|c| c.event_type == t && c.status == s)
            .map(|c| c.count)
    };
    assert_eq!(find("t.a", EventStatus::Pending), Some(1));
    assert_eq!(find("t.a", EventStatus::Processing), Some(1));
    assert_eq!(find("t.b", EventStatus::Pending), Some(1));
    store.close().await.unwrap();
}

pub async fn data_survives_close_and_reopen_and_closed_stores_refuse_work(h: &Harness) {
    let store = h.backend.open().await;
    let e = NewEvent::new("k.x", &serde_json::json!({"a": [1, 2]})).unwrap();
    let id = e.id;
    store
        .insert(vec![e], InsertMode::Pending, h.clock.now())
        .await
        .unwrap();
    store.close().await.unwrap();
    store.close().await.unwrap();
    assert!(matches!(
        store
            .insert(
                vec![NewEvent::new("k.y", &1).unwrap()],
                InsertMode::Pending,
                h.clock.now()
            )
            .await,
        Err(durabus::Error::StoreClosed)
    ));
    assert!(matches!(
        store.get_event(id).await,
        Err(durabus::Error::StoreClosed)
    ));
    let store: std::sync::Arc<dyn Store> = h.backend.open().await;
    let got = store.get_event(id).await.unwrap().unwrap();
    assert_eq!(got.payload, r#"{"a":[1,2]}"#);
    assert_eq!(got.status, EventStatus::Pending);
    store.close().await.unwrap();
}

/// An event the store refuses: its payload is not JSON (the bus never builds one; the store
/// checks anyway, as events may also come from an application's own connection).
fn malformed(event_type: &str) -> NewEvent {
    NewEvent {
        payload: "{not json".into(),
        ..NewEvent::new(event_type, &0).unwrap()
    }
}

pub async fn a_failed_insert_stores_none_of_its_events(h: &Harness) {
    let store = h.backend.open().await;
    let first = NewEvent::new("x.a", &1).unwrap();
    let first_id = first.id;
    let bad = malformed("x.bad");
    let bad_id = bad.id;
    // The bad event sits in the middle: the whole insert must fail and store nothing.
    let err = store
        .insert(
            vec![first, bad, NewEvent::new("x.c", &3).unwrap()],
            InsertMode::Pending,
            h.clock.now(),
        )
        .await;
    assert!(err.is_err());
    assert!(
        store.get_event(first_id).await.unwrap().is_none(),
        "partial insert committed"
    );
    assert!(store.get_event(bad_id).await.unwrap().is_none());
    // Side by side with another writer (possibly one group commit): the failing insert does
    // not take the good one down with it.
    let good = NewEvent::new("x.c", &3).unwrap();
    let good_id = good.id;
    let (a, b) = tokio::join!(
        store.insert(vec![good], InsertMode::Pending, h.clock.now()),
        store.insert(vec![malformed("x.e")], InsertMode::Pending, h.clock.now()),
    );
    assert_eq!(a.unwrap(), vec![Stored::New]);
    assert!(b.is_err());
    assert!(store.get_event(good_id).await.unwrap().is_some());
    store.close().await.unwrap();
}

pub async fn an_id_already_stored_is_stored_once(h: &Harness) {
    let store = h.backend.open().await;
    let now = h.clock.now();
    let first = NewEvent::new("dup.a", &1).unwrap();
    let id = first.id;
    assert_eq!(
        store
            .insert(vec![first], InsertMode::Pending, now)
            .await
            .unwrap(),
        vec![Stored::New]
    );
    // Same id, other content, later: skipped; the stored event is unchanged.
    let again = NewEvent::new("dup.b", &2).unwrap().with_id(id);
    let fresh = NewEvent::new("dup.c", &3).unwrap();
    let fresh_id = fresh.id;
    assert_eq!(
        store
            .insert(
                vec![again, fresh],
                InsertMode::Pending,
                now.plus(Duration::from_millis(5))
            )
            .await
            .unwrap(),
        vec![Stored::Known, Stored::New]
    );
    let stored = store.get_event(id).await.unwrap().unwrap();
    assert_eq!(
        (stored.event_type.as_str(), stored.payload.as_str()),
        ("dup.a", "1")
    );
    assert_eq!(stored.created_at, now);
    assert!(store.get_event(fresh_id).await.unwrap().is_some());
    // An id given twice in one insert is stored once, the first time, with and without
    // publish options beside it.
    for priority in [0, 3] {
        let twice = NewEvent::new("dup.d", &4).unwrap();
        let twice_id = twice.id;
        let second = NewEvent::new("dup.e", &5).unwrap().with_id(twice_id);
        let other = NewEvent::new("dup.f", &6).unwrap().priority(priority);
        assert_eq!(
            store
                .insert(vec![twice, second, other], InsertMode::Pending, now)
                .await
                .unwrap(),
            vec![Stored::New, Stored::Known, Stored::New],
            "priority {priority}"
        );
        let kept = store.get_event(twice_id).await.unwrap().unwrap();
        assert_eq!(
            (kept.event_type.as_str(), kept.payload.as_str()),
            ("dup.d", "4")
        );
    }
    // A completed event is not brought back by a late duplicate either.
    let claimed = store
        .claim_due(now.plus(Duration::from_millis(10)), 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 6);
    for e in &claimed {
        let done = Outcome::Done {
            id: e.id,
            delivered: vec![],
        };
        assert!(
            store
                .record(done, now.plus(Duration::from_millis(10)))
                .await
                .unwrap()
        );
    }
    let late = NewEvent::new("dup.a", &1).unwrap().with_id(id);
    assert_eq!(
        store
            .insert(
                vec![late],
                InsertMode::Claimed,
                now.plus(Duration::from_millis(20))
            )
            .await
            .unwrap(),
        vec![Stored::Known]
    );
    assert_eq!(
        store.get_event(id).await.unwrap().unwrap().status,
        EventStatus::Done
    );
    // Racing inserts of one id: exactly one stores it.
    let racer = NewEvent::new("dup.r", &7).unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (store, racer) = (store.clone(), racer.clone());
            tokio::spawn(async move { store.insert(vec![racer], InsertMode::Pending, now).await })
        })
        .collect();
    let mut flags = Vec::new();
    for t in tasks {
        flags.extend(t.await.unwrap().unwrap());
    }
    assert_eq!(flags.iter().filter(|f| f.is_new()).count(), 1, "{flags:?}");
    store.close().await.unwrap();
}

pub async fn stats_count_by_status_type_and_retries(h: &Harness) {
    let store = h.backend.open().await;
    let now = h.clock.now();
    let evs: Vec<_> = (0..4)
        .map(|i| NewEvent::new(if i < 3 { "s.a" } else { "s.b" }, &i).unwrap())
        .collect();
    let ids: Vec<_> = evs.iter().map(|e| e.id).collect();
    store.insert(evs, InsertMode::Pending, now).await.unwrap();
    let claimed = store.claim_due(now, 10).await.unwrap();
    assert_eq!(claimed.len(), 4);
    // s.a: one done at once, one done after a retry, one dead after two attempts; s.b pending.
    let done = |id| Outcome::Done {
        id,
        delivered: vec![],
    };
    store.record(done(ids[0]), now).await.unwrap();
    store
        .record(
            Outcome::Retry {
                id: ids[1],
                retry_count: 1,
                errors: vec!["e".into()],
                delivered: vec![],
                next_attempt_at: now,
            },
            now,
        )
        .await
        .unwrap();
    store
        .record(
            Outcome::Dead {
                id: ids[2],
                retry_count: 2,
                errors: vec!["e".into(), "e".into()],
                delivered: vec![],
                death: quiet_death(ids[2], "s.a"),
            },
            now,
        )
        .await
        .unwrap();
    store
        .record(
            Outcome::Retry {
                id: ids[3],
                retry_count: 0,
                errors: vec![],
                delivered: vec![],
                next_attempt_at: now.plus(Duration::from_secs(9)),
            },
            now,
        )
        .await
        .unwrap();
    let again = store.claim_due(now, 10).await.unwrap();
    assert_eq!(again.len(), 1);
    store.record(done(ids[1]), now).await.unwrap();
    let s = durabus::StoreStats::collect(store.as_ref()).await.unwrap();
    assert_eq!(s.total, 4);
    assert_eq!(
        (s.by_status.done, s.by_status.dlq, s.by_status.pending),
        (2, 1, 1)
    );
    let a = &s.by_type["s.a"];
    assert_eq!((a.done, a.dlq, a.pending), (2, 1, 0));
    assert!((a.dlq_rate - 1.0 / 3.0).abs() < 1e-9);
    assert_eq!(s.by_type["s.b"].pending, 1);
    assert_eq!(s.by_type["s.b"].dlq_rate, 0.0);
    assert_eq!(
        s.retry_counts,
        std::collections::BTreeMap::from([(0, 2), (1, 1), (2, 1)])
    );
    store.close().await.unwrap();
}

pub async fn release_returns_claimed_events_without_an_attempt(h: &Harness) {
    let store = h.backend.open().await;
    let now = h.clock.now();
    let evs: Vec<_> = (0..3).map(|i| NewEvent::new("r.x", &i).unwrap()).collect();
    store.insert(evs, InsertMode::Pending, now).await.unwrap();
    let claimed = store.claim_due(now, 10).await.unwrap();
    let later = now.plus(Duration::from_secs(1));
    let ids: Vec<_> = claimed.iter().map(|e| e.id).collect();
    assert_eq!(store.release(ids[..2].to_vec(), later).await.unwrap(), 2);
    assert_eq!(
        store.release(ids[..2].to_vec(), later).await.unwrap(),
        0,
        "only processing events"
    );
    assert_eq!(store.release(vec![], later).await.unwrap(), 0);
    for id in &ids[..2] {
        let e = store.get_event(*id).await.unwrap().unwrap();
        assert_eq!(
            (e.status, e.retry_count, e.next_attempt_at),
            (EventStatus::Pending, 0, Some(later))
        );
    }
    assert_eq!(
        store.get_event(ids[2]).await.unwrap().unwrap().status,
        EventStatus::Processing
    );
    store.close().await.unwrap();
}

/// What a dead outcome written straight to the store carries: a record, but no
/// `system.dead_letter` or `system.failure_group.new` announcement (so event counts stay the
/// test's own).
pub fn quiet_death(id: durabus::EventId, event_type: &str) -> Box<durabus::dlq::Death> {
    let mut d = durabus::dlq::Death::new(
        id,
        event_type,
        Some("test"),
        "e",
        vec![],
        vec!["e".into()],
        2,
        durabus::DeadLetterPolicy::default(),
    );
    d.announcement = None;
    d.new_group = None;
    Box::new(d)
}

/// Metadata and payload text of any shape (NUL, every plane of unicode, quotes, backslashes,
/// long keys) are stored and read back exactly: proptest-generated cases, run against each
/// store's own decoding of its rows.
pub async fn any_metadata_and_payload_text_comes_back_exactly(h: &Harness) {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let strategy = (
        proptest::collection::btree_map(any::<String>(), any::<String>(), 0..6),
        any::<String>(),
    );
    let mut runner = TestRunner::deterministic();
    let cases: Vec<_> = (0..96)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect();
    let store = h.backend.open().await;
    let now = h.clock.now();
    let mut expected = Vec::new();
    let mut batch = Vec::new();
    for (metadata, text) in cases {
        let mut e = NewEvent::new("meta.any", &text).unwrap();
        e.metadata = metadata.clone();
        expected.push((e.id, metadata, e.payload.clone()));
        batch.push(e);
    }
    store.insert(batch, InsertMode::Pending, now).await.unwrap();
    for (id, metadata, payload) in expected {
        let stored = store.get_event(id).await.unwrap().unwrap();
        assert_eq!(stored.metadata, metadata, "event {id}");
        assert_eq!(stored.payload, payload, "event {id}");
    }
}
