//! Background tasks and how they stop (the mini-redis `shutdown.rs` pattern): every long-lived
//! task of a bus (the worker loop, and the operations layer's tasks) is spawned through one
//! [`Supervisor`] and gets a [`Shutdown`] token; [`Supervisor::drain`] tells them all to stop
//! and waits until each has finished.

use std::future::Future;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::sync::lock;

/// Tells one task that the bus is stopping.
#[derive(Debug, Clone)]
pub(crate) struct Shutdown {
    rx: watch::Receiver<bool>,
}

impl Shutdown {
    /// Whether stopping has been asked for.
    pub fn is_shutdown(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves once stopping has been asked for (at once if it already was).
    pub async fn recv(&mut self) {
        // An error means the supervisor is gone: stop as well.
        let _ = self.rx.wait_for(|stop| *stop).await;
    }
}

/// Spawns a bus's background tasks and stops them.
#[derive(Debug)]
pub(crate) struct Supervisor {
    stop: watch::Sender<bool>,
    tasks: std::sync::Mutex<Vec<(&'static str, JoinHandle<()>)>>,
}

impl Default for Supervisor {
    fn default() -> Self {
        Supervisor {
            stop: watch::channel(false).0,
            tasks: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl Supervisor {
    /// A token for a task that is not spawned here but must stop with the others.
    pub fn token(&self) -> Shutdown {
        Shutdown {
            rx: self.stop.subscribe(),
        }
    }

    /// Spawns `task` with a shutdown token. A task must return soon after its token fires.
    /// Refused (the task is not started) once draining has begun.
    pub fn spawn<F, Fut>(&self, name: &'static str, task: F) -> bool
    where
        F: FnOnce(Shutdown) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut tasks = lock(&self.tasks);
        if *self.stop.borrow() {
            return false;
        }
        tasks.retain(|(_, h)| !h.is_finished());
        tasks.push((name, tokio::spawn(task(self.token()))));
        true
    }

    /// Tells every task to stop and waits until each has returned. A task that panicked is
    /// logged. Calling it again waits for nothing.
    pub async fn drain(&self) {
        let tasks = {
            let mut tasks = lock(&self.tasks);
            self.stop.send_replace(true);
            std::mem::take(&mut *tasks)
        };
        for (name, handle) in tasks {
            if let Err(e) = handle.await
                && e.is_panic()
            {
                tracing::error!(task = name, "a background task panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn drain_stops_every_task_and_waits_for_it() {
        let sup = Supervisor::default();
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            let done = done.clone();
            assert!(sup.spawn("t", move |mut stop| async move {
                stop.recv().await;
                tokio::task::yield_now().await;
                done.fetch_add(1, Ordering::SeqCst);
            }));
        }
        sup.drain().await;
        assert_eq!(done.load(Ordering::SeqCst), 3);
        assert!(
            !sup.spawn("late", |_| async {}),
            "no task starts after drain"
        );
        assert!(sup.token().is_shutdown());
        sup.drain().await;
    }
}
