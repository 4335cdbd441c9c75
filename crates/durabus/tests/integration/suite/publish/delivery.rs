//! Publish and enqueue: stored, delivered, returned; metadata; order; routing by pattern.

use super::*;

pub async fn publish_stores_delivers_and_returns_the_id(h: &Harness) {
    let bus = h.bus().await;
    let seen = Seen::default();
    let s = seen.clone();
    bus.subscribe(
        "user.created",
        move |e: Event| {
            let s = s.clone();
            async move {
                let v: serde_json::Value = e.payload()?;
                s.push(format!("{}:{}", e.event_type, v["id"]));
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    let id = bus
        .publish("user.created", &serde_json::json!({"id": 42}))
        .await
        .unwrap();
    // publish awaits the dispatch: the handler has run when it returns.
    assert_eq!(seen.all(), vec!["user.created:42"]);
    let e = get(&bus, id).await;
    assert_eq!(e.status, EventStatus::Done);
    assert_eq!(e.retry_count, 0);
    assert!(e.errors.is_empty());
    assert_eq!(e.payload, r#"{"id":42}"#);
    assert_eq!(e.created_at, h.clock.now());
    bus.shutdown().await.unwrap();
}

pub async fn metadata_is_stored_and_handed_to_handlers(h: &Harness) {
    let bus = h.bus().await;
    let seen = Seen::default();
    let s = seen.clone();
    bus.subscribe(
        "*",
        move |e: Event| {
            let s = s.clone();
            async move {
                s.push(e.metadata.get("trace").cloned().unwrap_or_default());
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    let ev = NewEvent::new("a.b", &1)
        .unwrap()
        .with_metadata("trace", "t-1");
    let id = bus.publish_event(ev).await.unwrap();
    assert_eq!(seen.all(), vec!["t-1"]);
    assert_eq!(
        get(&bus, id)
            .await
            .metadata
            .get("trace")
            .map(String::as_str),
        Some("t-1")
    );
    bus.shutdown().await.unwrap();
}

pub async fn enqueue_returns_before_delivery_and_workers_deliver(h: &Harness) {
    let bus = h.bus().await;
    let seen = Seen::default();
    let s = seen.clone();
    bus.subscribe(
        "job.*",
        move |e: Event| {
            let s = s.clone();
            async move {
                s.push(e.event_type);
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    let id = bus.enqueue("job.run", &"x").await.unwrap();
    // Not started: nothing delivers it yet, but it is durable.
    let e = get(&bus, id).await;
    assert_eq!(e.status, EventStatus::Pending);
    assert_eq!(e.next_attempt_at, Some(h.clock.now()));
    assert!(seen.all().is_empty());
    bus.start().await.unwrap();
    wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(seen.all(), vec!["job.run"]);
    bus.shutdown().await.unwrap();
}

pub async fn many_enqueued_events_are_each_delivered_once(h: &Harness) {
    let bus = h.bus().await;
    let count = count_calls(&bus, "n.*").await;
    bus.start().await.unwrap();
    let mut ids = Vec::new();
    for i in 0..300 {
        ids.push(bus.enqueue("n.x", &i).await.unwrap());
    }
    for id in ids {
        wait_status(&bus, id, EventStatus::Done).await;
    }
    assert_eq!(count.load(Ordering::SeqCst), 300);
    bus.shutdown().await.unwrap();
}

pub async fn handlers_run_sequentially_in_subscription_order(h: &Harness) {
    let bus = h.bus().await;
    let seen = Seen::default();
    let running = Arc::new(AtomicUsize::new(0));
    for name in ["first", "second", "third"] {
        let s = seen.clone();
        let r = running.clone();
        bus.subscribe(
            "order.*",
            move |_e: Event| {
                let s = s.clone();
                let r = r.clone();
                async move {
                    assert_eq!(r.fetch_add(1, Ordering::SeqCst), 0, "handlers overlapped");
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    s.push(name);
                    r.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                }
            },
            SubscribeOptions::default(),
        )
        .await
        .unwrap();
    }
    bus.publish("order.paid", &1).await.unwrap();
    assert_eq!(seen.all(), vec!["first", "second", "third"]);
    bus.shutdown().await.unwrap();
}

pub async fn patterns_route_events_as_the_matching_table_says(h: &Harness) {
    let bus = h.bus().await;
    let seen = Seen::default();
    for pattern in ["user.created", "user.*", "*", "order.*.shipped"] {
        let s = seen.clone();
        bus.subscribe(
            pattern,
            move |e: Event| {
                let s = s.clone();
                async move {
                    s.push(format!("{pattern}<-{}", e.event_type));
                    Ok(())
                }
            },
            SubscribeOptions::default(),
        )
        .await
        .unwrap();
    }
    for t in [
        "user.created",
        "user.updated",
        "order.created",
        "order.123.shipped",
        "order.shipped",
    ] {
        bus.publish(t, &()).await.unwrap();
    }
    let mut got = seen.all();
    got.sort();
    let mut want = vec![
        "user.created<-user.created",
        "user.*<-user.created",
        "*<-user.created",
        "user.*<-user.updated",
        "*<-user.updated",
        "*<-order.created",
        "*<-order.123.shipped",
        "order.*.shipped<-order.123.shipped",
        "*<-order.shipped",
    ];
    want.sort();
    assert_eq!(got, want);
    bus.shutdown().await.unwrap();
}

pub async fn an_event_nobody_subscribes_to_is_done(h: &Harness) {
    let bus = h.bus().await;
    let id = bus.publish("nobody.listens", &1).await.unwrap();
    assert_eq!(get(&bus, id).await.status, EventStatus::Done);
    bus.shutdown().await.unwrap();
}

pub async fn subscribe_stores_a_row_and_unsubscribe_removes_it(h: &Harness) {
    let bus = h.bus().await;
    let seen = Seen::default();
    let s = seen.clone();
    let id = bus
        .subscribe(
            "a.*",
            move |e: Event| {
                let s = s.clone();
                async move {
                    s.push(e.event_type);
                    Ok(())
                }
            },
            SubscribeOptions::default().name("audit"),
        )
        .await
        .unwrap();
    let rows = bus.store().subscriptions().await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].id, id);
    assert_eq!(rows[0].event_type, "a.*");
    assert_eq!(rows[0].name.as_deref(), Some("audit"));
    assert_eq!(rows[0].created_at, h.clock.now());
    let live = bus.subscriptions();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].id, id);
    assert_eq!(live[0].name.as_deref(), Some("audit"));
    assert_eq!(live[0].event_type, "a.*");
    assert_eq!(live[0].timeout, bus.config().handler_timeout);
    bus.publish("a.one", &1).await.unwrap();
    bus.unsubscribe(&id).await.unwrap();
    assert!(bus.subscriptions().is_empty());
    assert!(bus.store().subscriptions().await.unwrap().is_empty());
    bus.publish("a.two", &1).await.unwrap();
    assert_eq!(seen.all(), vec!["a.one"]);
    assert!(matches!(
        bus.unsubscribe(&id).await,
        Err(Error::SubscriptionNotFound(_))
    ));
    bus.shutdown().await.unwrap();
}
