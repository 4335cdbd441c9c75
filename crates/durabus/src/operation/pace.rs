//! How many rows an operation's next chunk takes: a bulk action or a replay shares the store
//! with publishers, and a chunk's transaction holds the store's one writer (SQLite) or its
//! rows, a connection and the server's time (PostgreSQL) for as long as it runs. The pace
//! keeps each chunk near a target duration: a chunk that took longer than the target makes the
//! next one smaller in proportion; one that took less than half of it lets the next grow, at
//! most doubling. So a chunk shrinks at once when publishers crowd the store (each chunk then
//! takes longer) and grows back when they leave, between a floor and a ceiling per store.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The bounds and target of an adaptive chunk size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaceConfig {
    /// Rows of the first chunk.
    pub start: usize,
    /// Fewest rows a chunk takes (its fixed costs, a few round trips, are then shared by
    /// at least this many).
    pub min: usize,
    /// Most rows a chunk takes.
    pub max: usize,
    /// How long a chunk should take.
    pub target: Duration,
}

/// The chunk size of one running operation, adapted after each chunk (see the module's
/// documentation). Cloning shares it: the runner records, the operation's work reads.
#[derive(Debug, Clone)]
pub struct Pace {
    config: PaceConfig,
    /// `false`: fixed at the size asked for.
    adaptive: bool,
    size: Arc<AtomicUsize>,
}

impl Pace {
    /// A chunk size that adapts within `config`.
    pub fn adaptive(config: PaceConfig) -> Pace {
        let min = config.min.max(1);
        let config = PaceConfig {
            min,
            max: config.max.max(min),
            start: config.start.clamp(min, config.max.max(min)),
            target: config.target,
        };
        Pace {
            size: Arc::new(AtomicUsize::new(config.start)),
            config,
            adaptive: true,
        }
    }

    /// A chunk size that stays `rows` (at least 1).
    pub fn fixed(rows: usize) -> Pace {
        let rows = rows.max(1);
        Pace {
            config: PaceConfig {
                start: rows,
                min: rows,
                max: rows,
                target: Duration::ZERO,
            },
            adaptive: false,
            size: Arc::new(AtomicUsize::new(rows)),
        }
    }

    /// Rows the next chunk takes.
    pub fn rows(&self) -> usize {
        self.size.load(Ordering::Relaxed)
    }

    /// Records that a chunk of `rows` rows took `took`; returns the next chunk's size.
    pub fn record(&self, rows: usize, took: Duration) -> usize {
        if !self.adaptive {
            return self.rows();
        }
        let next = next_size(&self.config, rows.max(1), took);
        self.size.store(next, Ordering::Relaxed);
        next
    }
}

/// The size after a chunk of `rows` that took `took`: in proportion to how far it was from the
/// target when it took longer, or took less than half of it (growing at most twofold), within
/// the bounds; unchanged otherwise.
pub fn next_size(config: &PaceConfig, rows: usize, took: Duration) -> usize {
    let target = config.target.as_secs_f64();
    let took = took.as_secs_f64().max(1e-6);
    let ideal = rows as f64 * target / took;
    let next = if took > target {
        ideal.floor()
    } else if took * 2.0 < target {
        ideal.min(rows as f64 * 2.0).floor()
    } else {
        rows as f64
    };
    // `next` is finite and non-negative here (a positive time divides); the cast saturates.
    (next as usize).clamp(config.min, config.max)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: PaceConfig = PaceConfig {
        start: 50,
        min: 10,
        max: 1_000,
        target: Duration::from_millis(2),
    };

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_chunk_that_took_too_long_shrinks_the_next_in_proportion() {
        assert_eq!(next_size(&CONFIG, 100, ms(4)), 50);
        assert_eq!(next_size(&CONFIG, 100, ms(20)), 10);
        // Never below the floor, however slow.
        assert_eq!(next_size(&CONFIG, 100, Duration::from_secs(5)), 10);
    }

    #[test]
    fn a_quick_chunk_grows_the_next_at_most_twofold_and_never_past_the_ceiling() {
        assert_eq!(next_size(&CONFIG, 100, Duration::from_micros(500)), 200);
        assert_eq!(next_size(&CONFIG, 100, Duration::from_micros(800)), 200);
        assert_eq!(next_size(&CONFIG, 600, Duration::ZERO), 1_000);
    }

    #[test]
    fn a_chunk_near_the_target_keeps_its_size() {
        assert_eq!(next_size(&CONFIG, 100, ms(1)), 100);
        assert_eq!(next_size(&CONFIG, 100, ms(2)), 100);
    }

    #[test]
    fn the_size_follows_the_stores_speed_and_settles_near_the_target() {
        // A store that takes 40 µs a row: 50 rows fit the 2 ms target.
        let pace = Pace::adaptive(PaceConfig {
            start: 500,
            ..CONFIG
        });
        let mut rows = pace.rows();
        for _ in 0..10 {
            rows = pace.record(rows, Duration::from_micros(40 * rows as u64));
        }
        assert_eq!(rows, 50);
        // Publishers leave and a row costs 8 µs: it grows back, twofold at a time, until a
        // chunk takes more than half the target.
        let grown: Vec<usize> = (0..3)
            .map(|_| {
                rows = pace.record(rows, Duration::from_micros(8 * rows as u64));
                rows
            })
            .collect();
        assert_eq!(grown, [100, 200, 200]);
    }

    #[test]
    fn a_fixed_size_never_changes_and_bounds_are_made_consistent() {
        let pace = Pace::fixed(0);
        assert_eq!(pace.rows(), 1);
        assert_eq!(pace.record(1, Duration::from_secs(1)), 1);
        let odd = Pace::adaptive(PaceConfig {
            start: 5_000,
            min: 0,
            max: 0,
            target: ms(1),
        });
        assert_eq!(odd.rows(), 1);
        let clone = odd.clone();
        clone.record(1, ms(1));
        assert_eq!(odd.rows(), clone.rows());
    }
}
