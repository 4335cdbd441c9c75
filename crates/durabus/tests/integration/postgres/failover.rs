//! A URL of several servers (libpq's `host1:port1,host2:port2` with `target_session_attrs`):
//! the store uses the first that suits and moves when it goes away. Two proxies in front of
//! the one test server stand for a primary and its standby; the real failover (a standby
//! promoted under load) is the reliability suite's `pg-failover` scenario.

use super::*;

/// `postgres://<creds>@<list>/<db>?<params>` for the test server's credentials and database.
fn url_of(list: &str, params: &str) -> Option<String> {
    let url = pg_url();
    let rest = url.strip_prefix("postgres://")?;
    let (creds, tail) = rest.split_once('@').unwrap_or(("", rest));
    let (_, db) = tail.split_once('/').unwrap_or((tail, "test"));
    let db = db.split('?').next().unwrap_or("test");
    Some(format!("postgres://{creds}@{list}/{db}?{params}"))
}

/// The test server's `host:port`.
fn server() -> String {
    let url = pg_url();
    let rest = url.strip_prefix("postgres://").unwrap_or(&url);
    let tail = rest.split_once('@').map_or(rest, |(_, t)| t);
    tail.split(['/', '?'])
        .next()
        .unwrap_or("127.0.0.1:5432")
        .to_owned()
}

/// A port nothing listens on.
async fn dead_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_server_of_the_list_that_answers_is_used() {
    if !pg_available().await {
        return;
    }
    let dead = dead_port().await;
    let Some(url) = url_of(
        &format!("127.0.0.1:{dead},{}", server()),
        "target_session_attrs=read-write",
    ) else {
        return;
    };
    let schema = unique_schema();
    let store = PgStore::connect(&url, options(&schema)).await.unwrap();
    let clock = ManualClock::default();
    let e = NewEvent::new("x.a", &1).unwrap();
    let id = e.id;
    store
        .insert(vec![e], InsertMode::Pending, clock.now())
        .await
        .unwrap();
    assert!(store.get_event(id).await.unwrap().is_some());
    store.close().await.unwrap();
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_its_server_goes_away_the_bus_moves_to_the_next_and_keeps_delivering() {
    if !pg_available().await {
        return;
    }
    let primary = Proxy::start(server()).await;
    let standby = Proxy::start(server()).await;
    let Some(url) = url_of(
        &format!("127.0.0.1:{},127.0.0.1:{}", primary.port, standby.port),
        "target_session_attrs=read-write",
    ) else {
        return;
    };
    let schema = unique_schema();
    let seen = Seen::default();
    // Polls once an hour: it hears of the second event only through LISTEN, so its listener
    // must have followed too.
    let worker = EventBus::builder()
        .postgres_with(
            url,
            PgOptions {
                acquire_timeout: Duration::from_secs(1),
                ..options(&schema)
            },
        )
        .poll_interval(Duration::from_secs(3600))
        .build()
        .await
        .unwrap();
    let s = seen.clone();
    worker
        .subscribe(
            "x.*",
            move |e: Event| {
                let s = s.clone();
                async move {
                    s.push(e.id.to_string());
                    Ok(())
                }
            },
            SubscribeOptions::default(),
        )
        .await
        .unwrap();
    worker.start().await.unwrap();
    let publisher = EventBus::builder()
        .postgres_with(pg_url(), options(&schema))
        .build()
        .await
        .unwrap();
    let first = publisher.enqueue("x.a", &1).await.unwrap();
    eventually("delivery through the first server", async || {
        seen.all().contains(&first.to_string())
    })
    .await;
    assert_eq!(standby.opened(), 0, "nothing goes to the second server yet");
    primary.cut();
    // The worker's own publishes fail while it moves, then succeed through the second.
    let mut own = None;
    for _ in 0..500 {
        match worker.enqueue("x.own", &2).await {
            Ok(id) => {
                own = Some(id);
                break;
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    let own = own.expect("publishing resumes on the second server");
    let second = publisher.enqueue("x.b", &3).await.unwrap();
    eventually("deliveries after the move", async || {
        let all = seen.all();
        all.contains(&own.to_string()) && all.contains(&second.to_string())
    })
    .await;
    assert!(standby.opened() > 0, "the bus moved to the second server");
    worker.shutdown().await.unwrap();
    publisher.shutdown().await.unwrap();
    drop_schema(&schema).await;
}

#[tokio::test]
async fn a_bad_list_or_no_server_that_answers_is_a_clear_error() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    for (list, params, says) in [
        ("a,b:x", "", "\"b:x\" is not host or host:port"),
        ("a,", "", "host or host:port"),
        (
            "a,b",
            "target_session_attrs=standby",
            "any, read-write or primary",
        ),
    ] {
        let Some(url) = url_of(list, params) else {
            return;
        };
        let err = PgStore::connect(&url, options(&schema)).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{url}: {err}");
        assert!(err.to_string().contains(says), "{url}: {err}");
    }
    let (a, b) = (dead_port().await, dead_port().await);
    let Some(url) = url_of(
        &format!("127.0.0.1:{a},127.0.0.1:{b}"),
        "target_session_attrs=read-write",
    ) else {
        return;
    };
    let err = PgStore::connect(&url, options(&schema)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    for port in [a, b] {
        assert!(
            err.to_string().contains(&format!("127.0.0.1:{port}")),
            "{err}"
        );
    }
}
