//! Wake-ups across processes: a `LISTEN` connection that notifies the dispatcher when another
//! process publishes. When the connection drops, the dispatcher is woken (so it looks at once)
//! and polls at its poll interval until the listener is back.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::Notify;

/// Listens on `channel` until the task is aborted. Notifications sent by `me` (this store's
/// worker identity) are echoes of this store's own inserts, which woke the dispatcher already.
pub(super) async fn run(
    pool: PgPool,
    channel: String,
    me: String,
    wake: Arc<Notify>,
    hook: crate::hook::ErrorHook,
) {
    let mut pause = Duration::from_millis(50);
    loop {
        match listen_once(&pool, &channel, &me, &wake, &hook).await {
            Ok(()) => pause = Duration::from_millis(50),
            Err(e) => {
                tracing::warn!(error = %e, ?pause, "LISTEN connection lost; polling until it is back");
                if !pool.is_closed() {
                    hook.report(
                        crate::hook::ErrorSource::Listener,
                        &crate::Error::from(e),
                        true,
                    );
                }
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        }
        if pool.is_closed() {
            return;
        }
        // Whatever was published meanwhile went unheard: look now.
        wake.notify_one();
        tokio::time::sleep(pause).await;
    }
}

async fn listen_once(
    pool: &PgPool,
    channel: &str,
    me: &str,
    wake: &Notify,
    hook: &crate::hook::ErrorHook,
) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    // Events published before LISTEN took effect would otherwise wait for a poll.
    wake.notify_one();
    loop {
        match listener.try_recv().await? {
            Some(n) if n.payload() == me => {}
            Some(_) => wake.notify_one(),
            // The connection dropped; the next call reconnects and listens again.
            None => {
                // Often the first sign of a restart: the pool's idle connections are checked.
                super::liveness::connection_lost();
                wake.notify_one();
                if !pool.is_closed() {
                    tracing::warn!("LISTEN connection dropped; reconnecting");
                    let dropped = crate::Error::Unavailable {
                        source: "the LISTEN connection dropped; reconnecting".into(),
                    };
                    hook.report(crate::hook::ErrorSource::Listener, &dropped, true);
                }
            }
        }
    }
}
