//! The operations layer (the `003` document): durable operations and their runner (bulk
//! dead-letter actions, replays), and the in-process scheduler of maintenance jobs. It works
//! on a store only.

#[cfg(feature = "metrics")]
mod metrics;
mod operations;
pub mod payloads;
mod replay_run;
mod replays;
mod scheduler;

#[cfg(feature = "metrics")]
pub use metrics::store_metrics_text;
pub use operations::{Operations, RunOptions};
pub use payloads::{ConfigInput, ConfigSource, Payloads};
pub use replays::{ReplayFilter, ReplayHooks, Replays, SAMPLES as REPLAY_SAMPLES};
pub use scheduler::{JOBS, JobConfig, JobInfo, JobReport, Scheduler, SchedulerConfig};

pub(crate) use scheduler::worker_name;
