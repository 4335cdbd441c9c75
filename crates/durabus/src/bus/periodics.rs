//! Periodic events from the bus: see [`crate::periodic`].

use super::EventBus;
use crate::error::Result;
use crate::periodic::{Periodic, PeriodicInfo, Periodics};

impl EventBus {
    /// Registers a periodic event (see [`crate::periodic`]): stores the definition, or updates
    /// the one of that name (keeping its paused flag and its place in the schedule), and
    /// returns it with its next tick. Every started bus on the database with the scheduler on
    /// publishes its ticks, each once. Register on every start of the application, before or
    /// after [`start`](Self::start).
    ///
    /// Fails like [`Periodic::check`]; nothing is stored then.
    ///
    /// ```no_run
    /// # async fn f(bus: durabus::EventBus) -> durabus::Result<()> {
    /// use durabus::Periodic;
    /// bus.periodic(
    ///     Periodic::new("nightly-report", "0 2 * * *", "report.due", &serde_json::json!({}))?
    ///         .timezone("Europe/Paris"),
    /// )
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub async fn periodic(&self, periodic: Periodic) -> Result<PeriodicInfo> {
        self.check_open()?;
        periodic.check()?;
        let now = self.clock().now();
        let row = self
            .store()
            .periodic_save(periodic.row(now))
            .await
            .map_err(Self::map_closed)?;
        self.inner.periodic_changed.notify_one();
        Ok(PeriodicInfo::of(row, now))
    }

    /// The periodic events on this bus's store: list, pause, resume, remove.
    pub fn periodics(&self) -> Periodics {
        Periodics::with_clock(self.store().clone(), self.clock().clone())
    }
}
