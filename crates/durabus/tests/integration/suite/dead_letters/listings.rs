//! Failure groups, filtered keyset listings, retention of closed records.

use super::*;

pub async fn failure_groups_gather_the_same_failure(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    bus.subscribe(
        "ship.*",
        |e: Event| async move {
            let order = e.payload::<u64>().unwrap_or(0);
            Err(format!("card for order {order} refused").into())
        },
        SubscribeOptions::default()
            .name("shipping")
            .retry(RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    let mut paid = Vec::new();
    for order in [10u64, 2_000, 345_678] {
        paid.push(bus.publish("pay.charge", &order).await.unwrap());
        h.advance(Duration::from_millis(5));
    }
    let shipped = bus.publish("ship.parcel", &10u64).await.unwrap();
    let dl = bus.dead_letters();
    let groups = dl.groups(10).await.unwrap();
    assert_eq!(groups.len(), 2, "{groups:?}");
    let pay = &groups[0];
    assert_eq!((pay.count, pay.open), (3, 3), "largest first");
    assert_eq!(pay.subscription.as_deref(), Some("payments"));
    assert_eq!(pay.signature, "card for order <n> refused");
    assert_eq!(pay.event_types, vec!["pay.charge".to_owned()]);
    assert!(pay.first_seen < pay.last_seen);
    let ship = &groups[1];
    assert_eq!(ship.count, 1);
    assert_ne!(
        ship.fingerprint, pay.fingerprint,
        "another subscription, another group"
    );
    // Filter by group.
    let in_group = dl
        .list(
            DeadLetterFilter {
                group: Some(pay.fingerprint.clone()),
                ..DeadLetterFilter::default()
            },
            Keyset::default(),
        )
        .await
        .unwrap();
    assert_eq!(in_group.items.len(), 3);
    assert!(in_group.items.iter().all(|d| d.event_id != shipped));
    // Closing one: still three in the group, two open.
    dl.resolve(paid[0], "done by hand", &ann()).await.unwrap();
    let pay = dl
        .groups(10)
        .await
        .unwrap()
        .into_iter()
        .find(|g| g.fingerprint == pay.fingerprint)
        .unwrap();
    assert_eq!((pay.count, pay.open), (3, 2));
    bus.shutdown().await.unwrap();
}

pub async fn listings_filter_and_page_by_keyset(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    let start = h.clock.now();
    let mut ids = Vec::new();
    for (i, t) in ["pay.a", "pay.b", "pay.a", "pay.ab", "pay.a"]
        .iter()
        .enumerate()
    {
        ids.push(bus.publish(t, &(i as u64)).await.unwrap());
        h.advance(Duration::from_secs(1));
    }
    let dl = bus.dead_letters();
    let list = |filter: DeadLetterFilter, limit: u32, before: Option<i64>| {
        let dl = dl.clone();
        async move { dl.list(filter, Keyset { before, limit }).await.unwrap() }
    };
    let by_type = |t: &str| DeadLetterFilter {
        event_type: Some(t.into()),
        ..DeadLetterFilter::default()
    };
    let exact = list(by_type("pay.a"), 50, None).await;
    let got: Vec<EventId> = exact.items.iter().map(|d| d.event_id).collect();
    assert_eq!(
        got,
        vec![ids[4], ids[2], ids[0]],
        "newest first, exact type"
    );
    // Summaries: the same page, the same fields, without payloads and error histories.
    let summaries = dl
        .list_summaries(
            by_type("pay.a"),
            Keyset {
                before: None,
                limit: 2,
            },
        )
        .await
        .unwrap();
    assert_eq!(summaries.items.len(), 2);
    assert_eq!(summaries.next, Some(exact.items[1].seq));
    for (s, d) in summaries.items.iter().zip(&exact.items) {
        assert_eq!(
            (
                s.event_id,
                s.seq,
                &s.event_type,
                &s.last_error,
                &s.fingerprint
            ),
            (
                d.event_id,
                d.seq,
                &d.event_type,
                &d.last_error,
                &d.fingerprint
            )
        );
        assert_eq!(
            (s.status, s.attempts, s.created_at),
            (d.status, d.attempts, d.created_at)
        );
        assert_eq!(s.rounds as usize, d.error_history.len());
        assert_eq!(s.subscription, d.subscription);
    }
    let rest = dl
        .list_summaries(
            by_type("pay.a"),
            Keyset {
                before: summaries.next,
                limit: 2,
            },
        )
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 1);
    assert_eq!(rest.items[0].event_id, ids[0]);
    assert_eq!(rest.next, None);
    assert!(
        dl.list_summaries(
            by_type("pay.a"),
            Keyset {
                before: None,
                limit: 5000
            }
        )
        .await
        .is_err(),
        "the page size is checked"
    );
    assert_eq!(
        list(by_type("pay.a*"), 50, None).await.items.len(),
        4,
        "glob"
    );
    assert_eq!(list(by_type("*.b"), 50, None).await.items.len(), 1);
    assert_eq!(
        list(by_type("pay_a"), 50, None).await.items.len(),
        0,
        "_ is literal"
    );
    // Keyset pages of two: 2 + 2 + 1, and no more.
    let p1 = list(DeadLetterFilter::default(), 2, None).await;
    assert_eq!(p1.items.len(), 2);
    let p2 = list(DeadLetterFilter::default(), 2, p1.next).await;
    let p3 = list(DeadLetterFilter::default(), 2, p2.next).await;
    assert_eq!(p3.items.len(), 1);
    assert_eq!(p3.next, None);
    let all: Vec<EventId> = [p1.items, p2.items, p3.items]
        .concat()
        .iter()
        .map(|d| d.event_id)
        .collect();
    let mut want = ids.clone();
    want.reverse();
    assert_eq!(all, want);
    // Status and time range.
    bus.dead_letters()
        .abandon(ids[1], None, &ann())
        .await
        .unwrap();
    let abandoned = list(
        DeadLetterFilter {
            status: vec![DeadLetterStatus::Abandoned],
            ..DeadLetterFilter::default()
        },
        50,
        None,
    )
    .await;
    assert_eq!(abandoned.items.len(), 1);
    assert_eq!(abandoned.items[0].event_id, ids[1]);
    let window = list(
        DeadLetterFilter {
            created_from: Some(start.plus(Duration::from_secs(1))),
            created_before: Some(start.plus(Duration::from_secs(3))),
            ..DeadLetterFilter::default()
        },
        50,
        None,
    )
    .await;
    let got: Vec<EventId> = window.items.iter().map(|d| d.event_id).collect();
    assert_eq!(got, vec![ids[2], ids[1]]);
    // Bad input is refused.
    assert_eq!(
        dl.list(by_type("pay a"), Keyset::default())
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        dl.list(
            DeadLetterFilter::default(),
            Keyset {
                before: None,
                limit: 5000
            }
        )
        .await
        .unwrap_err()
        .kind(),
        ErrorKind::InvalidInput
    );
    bus.shutdown().await.unwrap();
}

pub async fn retention_deletes_closed_dead_letters_after_30_days(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    let dl = bus.dead_letters();
    let resolved = bus.publish("pay.a", &1u64).await.unwrap();
    let abandoned = bus.publish("pay.a", &2u64).await.unwrap();
    let open = bus.publish("pay.a", &3u64).await.unwrap();
    let later = bus.publish("pay.a", &4u64).await.unwrap();
    dl.resolve(resolved, "fixed", &ann()).await.unwrap();
    dl.abandon(abandoned, None, &ann()).await.unwrap();
    let closed_at = h.clock.now();
    h.advance(Duration::from_millis(1));
    dl.resolve(later, "fixed later", &ann()).await.unwrap();
    // Exactly 30 days after the first two were closed: they go, the one closed 1 ms later
    // and the open one stay.
    h.clock
        .set(closed_at.plus(Duration::from_secs(30 * 86_400)));
    let report = bus
        .scheduler()
        .unwrap()
        .run_now("cleanup-dead-letters")
        .await
        .unwrap();
    assert_eq!(report.status, "ok");
    assert!(report.message.starts_with("2 "), "{}", report.message);
    for gone in [resolved, abandoned] {
        assert_eq!(dl.get(gone).await.unwrap_err().kind(), ErrorKind::NotFound);
        assert!(bus.store().get_event(gone).await.unwrap().is_none());
    }
    for kept in [open, later] {
        assert!(dl.get(kept).await.is_ok());
    }
    let group = &dl.groups(10).await.unwrap()[0];
    assert_eq!((group.count, group.open), (2, 1));
    bus.shutdown().await.unwrap();
}
