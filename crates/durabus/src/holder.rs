//! This process's name as the holder of leases and locks (durable operations, scheduled jobs).

/// This process's name as the holder of leases and locks: host, pid and a random part.
pub(crate) fn worker_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    let tag = uuid::Uuid::now_v7().simple().to_string();
    format!("{host}:{}:{}", std::process::id(), &tag[tag.len() - 8..])
}
