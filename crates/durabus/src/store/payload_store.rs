//! The payload store's trait: snapshots per stage and their configuration.

use async_trait::async_trait;

use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::EventId;
use crate::payload::{NewSnapshot, PayloadConfig, Retention, StoredSnapshot};

use super::sealed;
use super::types::SnapshotKey;

/// The payload store (see [`crate::payload`]): compressed snapshots per stage and their
/// configuration per event type. Snapshots taken with a publish or an outcome are written by
/// [`EventStore::insert_with`](super::EventStore::insert_with) and [`EventStore::record_many_with`](super::EventStore::record_many_with), in their transaction.
#[async_trait]
pub trait PayloadStore: sealed::Sealed + Send + Sync + 'static {
    /// Stores snapshots (a snapshot with the key of a stored one replaces it).
    async fn payload_put(&self, snapshots: Vec<NewSnapshot>) -> Result<()>;

    /// Every snapshot of an event, newest first, compressed.
    async fn payload_list(&self, event_id: EventId) -> Result<Vec<StoredSnapshot>>;

    /// Soft-deletes every snapshot of an event still holding its bytes: the bytes are cleared
    /// (overwritten on disk, not just hidden) and who, when and why are recorded. Returns how
    /// many.
    async fn payload_soft_delete(
        &self,
        event_id: EventId,
        reason: &str,
        actor: &str,
        now: Timestamp,
    ) -> Result<u64>;

    /// Every payload configuration row.
    async fn payload_config_list(&self) -> Result<Vec<PayloadConfig>>;

    /// Stores a configuration row, replacing the type's row if it has one.
    async fn payload_config_set(&self, config: PayloadConfig) -> Result<()>;

    /// Deletes a type's configuration row. Returns whether it existed.
    async fn payload_config_delete(&self, event_type: &str) -> Result<bool>;

    /// Retention, one read step: of the next `scan` snapshots after `after` (in key order), the
    /// keys of those past `retention` (soft-deleted ones excluded), and where the next step
    /// starts (`None`: the end). Reads only; the deletes go through
    /// [`payload_delete`](Self::payload_delete).
    async fn payload_expired(
        &self,
        retention: &Retention,
        after: Option<SnapshotKey>,
        scan: usize,
    ) -> Result<(Vec<SnapshotKey>, Option<SnapshotKey>)>;

    /// Deletes snapshots by key (one transaction). Returns how many.
    async fn payload_delete(&self, keys: Vec<SnapshotKey>) -> Result<u64>;

    /// Deletes at most `limit` soft-deleted audit rows deleted at or before `cutoff`. Returns
    /// how many.
    async fn payload_purge_deleted(&self, cutoff: Timestamp, limit: usize) -> Result<u64>;

    /// Retention of [shared](crate::payload::NewSnapshot::shared) snapshots, one chunk: looks
    /// at the events after store position `after` (0 to start), at most `scan`, and forgets the
    /// shared snapshots past their type's cutoff. Returns how many it forgot and where to go on
    /// (`None` at the end). A store that copies every snapshot into a row of its own has none.
    async fn payload_expire_shared(
        &self,
        _retention: &Retention,
        _after: i64,
        _scan: usize,
    ) -> Result<(u64, Option<i64>)> {
        Ok((0, None))
    }
}
