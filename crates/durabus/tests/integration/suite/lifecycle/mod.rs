//! Start, crash recovery and shutdown.

mod recovery;
mod shutdown;
pub use recovery::*;
pub use shutdown::*;

use std::sync::Arc;

use std::sync::atomic::{AtomicU32, Ordering};

use std::time::{Duration, Instant};

use durabus::{Error, Event, EventStatus, InsertMode, NewEvent, SubscribeOptions};

use crate::support::*;
