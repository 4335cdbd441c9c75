//! Breakers shared across processes and reported to the store (see
//! [`crate::breaker::report`]): the probe a half-open shared breaker asks the store for, the
//! transitions it writes there, and the sync every refresh runs.

use std::sync::Arc;

use super::Dispatcher;
use super::registry::Entry;
use crate::breaker::report::{BreakerReport, ProbeTake, REPORT_EVERY};
use crate::breaker::{Admission, BreakerState, Transition};
use crate::clock::Timestamp;
use crate::error::Result;

impl Dispatcher {
    /// Half-open shared breakers let one probe through for the whole cluster: each probe this
    /// process's breakers admitted is asked of the store; one another process runs is skipped
    /// (the local probe given back), and one whose shared breaker closed meanwhile runs as an
    /// ordinary handler (the local breaker closed too). A store that cannot answer skips it.
    pub(super) async fn take_shared_probes(
        &self,
        pending: &[&Arc<Entry>],
        admissions: &mut [Admission],
        now: Timestamp,
    ) {
        for (sub, admission) in pending.iter().zip(admissions.iter_mut()) {
            if *admission != Admission::Probe || sub.info.name.is_none() {
                continue;
            }
            let wait = now.plus(self.breakers.config().probe_wait);
            let until = now
                .plus(sub.info.timeout)
                .plus(self.breakers.config().probe_wait);
            let took = self
                .store
                .breaker_share_probe(&sub.key, self.breakers.process(), now, until)
                .await;
            match took {
                Ok(ProbeTake::Granted) => {}
                Ok(ProbeTake::Closed) => {
                    self.breakers.force_close(&sub.info, now);
                    *admission = Admission::Run;
                }
                Ok(ProbeTake::Busy) => {
                    self.breakers.release_probe(&sub.info.id);
                    *admission = Admission::Skip { retry_at: wait };
                }
                Err(e) => {
                    tracing::warn!(subscription = %sub.key, error = %e, "could not ask for the shared breaker's probe; the event waits");
                    self.breakers.release_probe(&sub.info.id);
                    *admission = Admission::Skip { retry_at: wait };
                }
            }
        }
    }

    /// Writes a shared breaker's change to the store: opened here (every process opens), or
    /// closed by this process's probe (every process closes). A failed write is logged; the
    /// breakers of the other processes decide for themselves meanwhile.
    pub(super) async fn share_transition(&self, sub: &Entry, t: Transition, at: Timestamp) {
        if sub.info.name.is_none() {
            return;
        }
        let written = match t.to {
            BreakerState::Open => {
                self.store
                    .breaker_share_open(&sub.key, self.breakers.process(), at)
                    .await
            }
            BreakerState::Closed if t.from == BreakerState::HalfOpen => {
                self.store.breaker_share_close(&sub.key).await
            }
            _ => Ok(()),
        };
        if let Err(e) = written {
            tracing::warn!(subscription = %sub.key, error = %e, "could not share a breaker's change with the other processes");
        }
    }

    /// One sync with the store at `now`: shared breakers opened or closed elsewhere are
    /// followed here, and this process's breakers are reported when one changed or
    /// `last_report` is [`REPORT_EVERY`] old. Returns when it last reported.
    pub(crate) async fn sync_breakers(
        &self,
        now: Timestamp,
        last_report: Option<Timestamp>,
        refresh: std::time::Duration,
    ) -> Result<Option<Timestamp>> {
        let subs = self.registry.entries();
        if self.breakers.config().shared {
            let shared = self.store.breaker_shared().await?;
            for sub in subs.iter().filter(|s| s.info.name.is_some()) {
                match shared.iter().find(|b| b.subscription == sub.key) {
                    Some(b) => self.breakers.force_open(&sub.info, b.opened_at),
                    None => {
                        // Closed elsewhere (a probe succeeded), unless this breaker opened
                        // so lately that its own row may not be written yet.
                        let snapshot = self.breakers.snapshot(vec![sub.info.clone()], now);
                        let open_here = snapshot.first().and_then(|s| {
                            (s.breaker.state != BreakerState::Closed)
                                .then_some(s.breaker.opened_at)
                                .flatten()
                        });
                        if open_here.is_some_and(|at| at.plus(refresh * 2) < now) {
                            self.breakers.force_close(&sub.info, now);
                        }
                    }
                }
            }
        }
        let due = last_report.is_none_or(|t| t.plus(REPORT_EVERY) <= now);
        if !(self.breakers.take_changed() || due) {
            return Ok(last_report);
        }
        let infos = subs.iter().map(|s| s.info.clone()).collect();
        let reports = self
            .breakers
            .snapshot(infos, now)
            .into_iter()
            .zip(&subs)
            .map(|(b, sub)| BreakerReport {
                subscription: sub.key.clone(),
                process: self.breakers.process().to_owned(),
                state: b.breaker.state,
                failure_rate: b.breaker.failure_rate,
                samples: b.breaker.samples,
                opened_at: b.breaker.opened_at,
                reported_at: now,
            })
            .collect();
        // Reports of processes silent for an hour are gone for good.
        let stale = now.minus(std::time::Duration::from_secs(3600));
        self.store.breaker_report(reports, stale).await?;
        Ok(Some(now))
    }
}
