//! Faults: connections killed, the database unreachable.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_are_replaced_and_the_listener_comes_back() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let seen = Seen::default();
    let worker = listening_bus(&schema, &seen).await;
    // The worker's error hook hears the lost LISTEN connection.
    let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
    let h = heard.clone();
    worker.config().on_error.set(move |e| {
        h.lock()
            .unwrap()
            .push((e.source.clone(), e.kind(), e.retrying))
    });
    let publisher = EventBus::builder()
        .postgres_with(pg_url(), options(&schema))
        .build()
        .await
        .unwrap();
    let first = publisher.enqueue("x.a", &1).await.unwrap();
    eventually("delivery", async || seen.all().contains(&first.to_string())).await;
    // Kill every connection of both buses, the worker's LISTEN connection included.
    let pool = admin().await;
    let killed = kill_store_connections(&pool, &schema).await;
    assert!(killed >= 2, "killed {killed}");
    // Publishing carries on (a dead pooled connection is replaced), and the worker, idle
    // with an hour-long poll, still hears about it: its listener reconnected.
    let mut second = None;
    for _ in 0..50 {
        match publisher.enqueue("x.b", &2).await {
            Ok(id) => {
                second = Some(id);
                break;
            }
            Err(e) => {
                eprintln!("publish right after the kill: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    let second = second.expect("publishing recovers");
    eventually("delivery after the kill", async || {
        seen.all().contains(&second.to_string())
    })
    .await;
    assert!(
        heard
            .lock()
            .unwrap()
            .iter()
            .any(|(source, _, retrying)| *source == durabus::ErrorSource::Listener && *retrying),
        "the hook heard {:?}",
        heard.lock().unwrap()
    );
    publisher.shutdown().await.unwrap();
    worker.shutdown().await.unwrap();
    pool.close().await;
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_an_outage_publish_fails_fast_and_afterwards_nothing_acknowledged_is_missing() {
    if !pg_available().await {
        return;
    }
    let url = pg_url();
    let Some(rest) = url.strip_prefix("postgres://") else {
        return;
    };
    let (creds, tail) = rest.split_once('@').unwrap_or(("", rest));
    let (host_port, db) = tail.split_once('/').unwrap_or((tail, "test"));
    let proxy = Proxy::start(host_port.to_owned()).await;
    let via_proxy = format!("postgres://{creds}@127.0.0.1:{}/{db}", proxy.port);
    let schema = unique_schema();
    let store = PgStore::connect(
        &via_proxy,
        PgOptions {
            acquire_timeout: Duration::from_millis(500),
            listen: false,
            ..options(&schema)
        },
    )
    .await
    .unwrap();
    let clock = ManualClock::default();
    let mut acknowledged = Vec::new();
    for i in 0..5 {
        let e = NewEvent::new("x.keep", &i).unwrap();
        acknowledged.push(e.id);
        store
            .insert(vec![e], InsertMode::Pending, clock.now())
            .await
            .unwrap();
    }
    proxy.cut();
    let started = Instant::now();
    let err = store
        .insert(
            vec![NewEvent::new("x.lost", &0).unwrap()],
            InsertMode::Pending,
            clock.now(),
        )
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    assert!(
        err.to_string().contains("check that it is running"),
        "{err}"
    );
    proxy.restore();
    let mut after = None;
    for _ in 0..100 {
        let e = NewEvent::new("x.keep", &99).unwrap();
        let id = e.id;
        if store
            .insert(vec![e], InsertMode::Pending, clock.now())
            .await
            .is_ok()
        {
            after = Some(id);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    acknowledged.push(after.expect("the store works again once the database is back"));
    for id in acknowledged {
        // A pooled connection the outage cut answers once with `Unavailable` (the pool does not
        // ping before lending): a read is asked again then, never taken for a loss.
        let mut found = None;
        for _ in 0..10 {
            match store.get_event(id).await {
                Ok(e) => {
                    found = Some(e);
                    break;
                }
                Err(e) if e.kind() == ErrorKind::Unavailable => continue,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(found.flatten().is_some(), "{id} lost");
    }
    store.close().await.unwrap();
    drop_schema(&schema).await;
}

/// Pooled connections used a moment ago are handed out without sqlx's ping; when the server
/// kills them all, at most the first statement fails, and every idle connection is checked
/// and replaced before its next use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_server_kills_the_pools_connections_only_the_first_statement_fails() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let store = PgStore::connect(
        &pg_url(),
        PgOptions {
            listen: false,
            ..options(&schema)
        },
    )
    .await
    .unwrap();
    let clock = ManualClock::default();
    let e = NewEvent::new("x.keep", &0).unwrap();
    let id = e.id;
    store
        .insert(vec![e], InsertMode::Pending, clock.now())
        .await
        .unwrap();
    // Every connection of the pool open and idle, each used a moment ago.
    let held: Vec<_> = open_connections(store.pool(), 3).await;
    drop(held);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let pool = admin().await;
    let killed = kill_store_connections(&pool, &schema).await;
    assert_eq!(killed, 3, "the pool's connections");
    // pg_terminate_backend only signals: wait until the backends have exited, so the first
    // statement meets a dead connection (not one still finishing).
    eventually("the killed backends to exit", async || {
        store_connections(&pool, &schema).await == 0
    })
    .await;
    let mut failures = Vec::new();
    for i in 0..20 {
        match store.get_event(id).await {
            Ok(found) => assert!(found.is_some()),
            Err(err) => {
                assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
                failures.push(i);
            }
        }
    }
    assert!(
        failures.is_empty() || failures == [0],
        "statements that failed: {failures:?}"
    );
    store.close().await.unwrap();
    drop_schema(&schema).await;
}
