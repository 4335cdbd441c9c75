//! Soft delete, redaction for operators, retention, shared snapshots outliving their events.

use super::*;

pub async fn a_soft_delete_clears_the_bytes_and_keeps_the_audit(h: &Harness) {
    let bus = h.bus().await;
    let p = bus.payloads();
    let id = EventId::new();
    for stage in ["webhook_raw", "agent_request"] {
        p.store_snapshot(id, "chat.x", stage, &json!({"secret": "s3cr3t"}))
            .await
            .unwrap();
    }
    assert_eq!(
        p.delete(id, "  ", &ann()).await.unwrap_err().kind(),
        ErrorKind::InvalidInput,
        "a reason is required"
    );
    assert_eq!(p.delete(id, "GDPR request #42", &ann()).await.unwrap(), 2);
    let s = p.get(id, "webhook_raw").await.unwrap();
    assert_eq!(s.payload, None);
    assert_eq!(s.size_compressed, 0);
    let d = s.deleted.expect("the deletion is recorded");
    assert_eq!(d.deleted_by, "ann");
    assert_eq!(d.reason, "GDPR request #42");
    assert_eq!(d.deleted_at, h.clock.now());
    // The bytes are gone from the store, not just hidden.
    for stored in bus.store().payload_list(id).await.unwrap() {
        assert!(stored.blob.is_none());
    }
    assert_eq!(
        p.delete(id, "again", &ann()).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        p.delete(EventId::new(), "x", &ann())
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    bus.shutdown().await.unwrap();
}

pub async fn operators_see_redacted_payloads_and_handlers_the_original(h: &Harness) {
    let bus = snapshotting_bus(h).await;
    bus.payloads()
        .set_config(
            "pay.charge",
            config(&["*"], 14, &["$.card.number", "$.user.email"]),
            &ann(),
        )
        .await
        .unwrap();
    let seen = Seen::default();
    let s = seen.clone();
    bus.subscribe(
        "pay.*",
        move |e: Event| {
            let s = s.clone();
            async move {
                s.push(e.payload);
                Err("declined".into())
            }
        },
        SubscribeOptions::default().retry(RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    let payload = json!({"card": {"number": "4111111111111111", "exp": "12/30"},
                         "user": {"email": "ann@example.com"}, "amount": 5});
    let id = bus.publish("pay.charge", &payload).await.unwrap();
    assert!(
        seen.all()[0].contains("4111111111111111"),
        "the handler gets the original"
    );
    let hidden = |text: &str| {
        assert!(!text.contains("4111111111111111"), "{text}");
        assert!(!text.contains("ann@example.com"), "{text}");
        assert!(
            text.contains("[redacted]") && text.contains("12/30"),
            "{text}"
        );
    };
    hidden(&bus.history().get(id).await.unwrap().payload);
    let listed = bus.history().list(EventQuery::default()).await.unwrap();
    hidden(&listed.iter().find(|e| e.id == id).unwrap().payload);
    hidden(&bus.dlq().get(id).await.unwrap().payload);
    hidden(&bus.dlq().list(durabus::Page::default()).await.unwrap()[0].payload);
    hidden(&bus.dead_letters().get(id).await.unwrap().payload);
    for snap in bus.payloads().list(id).await.unwrap() {
        hidden(snap.payload.as_deref().unwrap());
    }
    // Stored as it came (only hidden when read) unless asked otherwise.
    let raw = bus.store().payload_list(id).await.unwrap();
    let published = raw
        .iter()
        .find(|s| s.meta.stage == STAGE_PUBLISHED)
        .unwrap();
    assert!(
        compress::gunzip(published.blob.as_ref().unwrap())
            .unwrap()
            .contains("4111")
    );
    // Redacted before storing: never kept.
    bus.payloads()
        .set_config(
            "pay.charge",
            ConfigInput {
                redact_before_store: true,
                ..config(&["*"], 14, &["$.card.number"])
            },
            &ann(),
        )
        .await
        .unwrap();
    let id2 = bus.publish("pay.charge", &payload).await.unwrap();
    for s in bus.store().payload_list(id2).await.unwrap() {
        let text = compress::gunzip(s.blob.as_ref().unwrap()).unwrap();
        assert!(
            !text.contains("4111111111111111"),
            "{}: {text}",
            s.meta.stage
        );
    }
    assert!(seen.all()[1].contains("4111111111111111"));
    bus.shutdown().await.unwrap();
}

pub async fn retention_deletes_snapshots_past_their_types_days(h: &Harness) {
    let bus = h.bus().await;
    let p = bus.payloads();
    p.set_config("short.x", config(&["*"], 1, &[]), &ann())
        .await
        .unwrap();
    let t0 = h.clock.now();
    let short = EventId::new();
    let long = EventId::new();
    p.store_snapshot(short, "short.x", "s", &1).await.unwrap();
    p.store_snapshot(long, "long.x", "s", &1).await.unwrap();
    let later = EventId::new();
    h.advance(Duration::from_millis(1));
    p.store_snapshot(later, "short.x", "s", &1).await.unwrap();
    let deleted = EventId::new();
    p.store_snapshot(deleted, "long.x", "s", &1).await.unwrap();
    p.delete(deleted, "no longer needed", &ann()).await.unwrap();
    let audit = Duration::from_secs(30 * 86_400);
    // Exactly one day after: the 1-day type's first snapshot goes (boundary included).
    let (expired, audits) = p
        .cleanup(t0.plus(Duration::from_secs(86_400)), audit)
        .await
        .unwrap();
    assert_eq!((expired, audits), (1, 0));
    assert!(p.list(short).await.unwrap().is_empty());
    assert_eq!(p.list(later).await.unwrap().len(), 1, "1 ms younger: kept");
    assert_eq!(
        p.list(long).await.unwrap().len(),
        1,
        "the default is 14 days"
    );
    // 14 days: the default type's snapshot goes; the deletion record stays for 30 days.
    let (expired, _) = p
        .cleanup(t0.plus(Duration::from_secs(14 * 86_400)), audit)
        .await
        .unwrap();
    assert_eq!(expired, 2);
    assert_eq!(
        p.list(deleted).await.unwrap().len(),
        1,
        "the audit row is kept"
    );
    let (_, audits) = p
        .cleanup(t0.plus(Duration::from_secs(30 * 86_400 + 1)), audit)
        .await
        .unwrap();
    assert_eq!(audits, 1);
    assert!(p.list(deleted).await.unwrap().is_empty());
    // The job does the same.
    let report = bus
        .scheduler()
        .unwrap()
        .run_now("cleanup-payloads")
        .await
        .unwrap();
    assert_eq!(report.status, "ok");
    bus.shutdown().await.unwrap();
}

/// A `published` snapshot outlives its event's row (history purge, dead-letter purge), keeps
/// its flags, can be soft-deleted like any other, and expires with its type's retention.
pub async fn published_snapshots_outlive_their_events_and_expire(h: &Harness) {
    let bus = snapshotting_bus(h).await;
    bus.subscribe(
        "keep.*",
        |e: Event| async move {
            if e.event_type == "keep.fail" {
                Err("refused".into())
            } else {
                Ok(())
            }
        },
        SubscribeOptions::default().retry(RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    let p = bus.payloads();
    let media = json!({"avatar": "data:image/png;base64,iVBORw0KGgo=", "n": 1});
    let done = bus.publish("keep.ok", &media).await.unwrap();
    let forgotten = bus.publish("keep.ok", &json!({"n": 2})).await.unwrap();
    let dead = bus.publish("keep.fail", &json!({"n": 3})).await.unwrap();
    let third = bus.publish("keep.ok", &json!({"n": 4})).await.unwrap();
    for id in [done, forgotten, third] {
        wait_status(&bus, id, durabus::EventStatus::Done).await;
    }
    wait_status(&bus, dead, durabus::EventStatus::Dlq).await;
    let before = p.get(done, STAGE_PUBLISHED).await.unwrap();
    assert_eq!(before.payload.as_deref(), Some(media.to_string().as_str()));
    assert!(
        before.contains_media && before.contains_base64,
        "{before:?}"
    );
    assert_eq!(before.size_original, media.to_string().len() as u64);
    // Soft-deleted while its event is still stored: the audit stays, the bytes are gone.
    assert_eq!(p.delete(forgotten, "asked to", &ann()).await.unwrap(), 1);
    let audit = p.get(forgotten, STAGE_PUBLISHED).await.unwrap();
    assert_eq!(audit.payload, None);
    assert_eq!(
        audit.deleted.as_ref().map(|d| d.reason.as_str()),
        Some("asked to")
    );
    assert!(
        bus.store().payload_list(forgotten).await.unwrap()[0]
            .blob
            .is_none()
    );
    assert_eq!(
        p.delete(forgotten, "again", &ann())
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    // The events' rows go: the snapshots stay as they were.
    h.advance(Duration::from_secs(60));
    let purged = bus.history().purge(Duration::from_secs(1)).await.unwrap();
    assert_eq!(purged, 3, "the three delivered events");
    assert!(bus.store().get_event(done).await.unwrap().is_none());
    let after = p.get(done, STAGE_PUBLISHED).await.unwrap();
    assert_eq!(after, before, "byte for byte, with its flags and sizes");
    assert_eq!(p.list(forgotten).await.unwrap().len(), 1, "only the audit");
    assert!(
        p.get(forgotten, STAGE_PUBLISHED)
            .await
            .unwrap()
            .deleted
            .is_some()
    );
    let dead_snapshot = p.get(dead, STAGE_PUBLISHED).await.unwrap();
    assert!(
        bus.dead_letters()
            .act(dead, durabus::Action::Purge, &ann())
            .await
            .unwrap()
            .is_none()
    );
    assert!(bus.store().get_event(dead).await.unwrap().is_none());
    assert_eq!(p.get(dead, STAGE_PUBLISHED).await.unwrap(), dead_snapshot);
    // A fresh event, still stored, whose snapshot expires with the default 14 days.
    let fresh = bus.publish("keep.ok", &json!({"n": 5})).await.unwrap();
    wait_status(&bus, fresh, durabus::EventStatus::Done).await;
    let t = h.clock.now();
    let (expired, _) = p
        .cleanup(
            t.plus(Duration::from_secs(14 * 86_400 - 1)),
            Duration::from_secs(86_400),
        )
        .await
        .unwrap();
    assert_eq!(
        expired, 4,
        "done, dead (published and error) and third were taken a minute earlier"
    );
    assert!(p.list(done).await.unwrap().is_empty());
    assert!(p.list(third).await.unwrap().is_empty());
    assert_eq!(
        p.list(fresh).await.unwrap().len(),
        1,
        "a second younger: kept"
    );
    let (expired, _) = p
        .cleanup(
            t.plus(Duration::from_secs(14 * 86_400)),
            Duration::from_secs(86_400),
        )
        .await
        .unwrap();
    assert_eq!(expired, 1);
    assert!(p.list(fresh).await.unwrap().is_empty());
    assert!(
        bus.store().get_event(fresh).await.unwrap().is_some(),
        "the event stays"
    );
    bus.shutdown().await.unwrap();
}
