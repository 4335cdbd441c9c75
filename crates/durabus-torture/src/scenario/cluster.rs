//! A PostgreSQL primary and a streaming standby of it, made for one scenario on free local
//! ports (the server's own programs: `initdb`, `pg_ctl`, `pg_basebackup`, run as the
//! `postgres` user), and removed when dropped. The primary can be killed the way a host dies
//! (`SIGKILL` to the postmaster and every process of it) and the standby promoted.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// How commits wait for the standby.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// `synchronous_standby_names = '*'`: a commit returns once the standby has flushed it.
    Synchronous,
    /// A commit returns once the primary has flushed it; the standby follows shortly after.
    Asynchronous,
}

/// One server of the pair.
struct Node {
    data: PathBuf,
    port: u16,
}

/// The pair, stopped and deleted when dropped (kept with `keep`).
pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    primary: Node,
    standby: Node,
    keep: bool,
}

/// The newest installed server's programs, if any.
fn server_bin() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("pg_basebackup").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// A port nothing listens on now.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Cluster {
    /// Makes and starts the pair; `Ok(Err(why))` when this host cannot (no server programs,
    /// not root, no `postgres` user).
    pub fn new(replication: Replication, keep: bool) -> anyhow::Result<Result<Cluster, String>> {
        let Some(bin) = server_bin() else {
            return Ok(Err("no PostgreSQL server programs on this host".into()));
        };
        let root = Command::new("id").arg("-u").output()?;
        if String::from_utf8_lossy(&root.stdout).trim() != "0" {
            return Ok(Err("running the servers as postgres needs root".into()));
        }
        // Under /tmp, not the suite's private directory: the postgres user must reach it.
        let dir = std::env::temp_dir().join(format!("torture_failover_{:08x}", fastrand::u32(..)));
        std::fs::create_dir_all(&dir)?;
        if !Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&dir)
            .status()?
            .success()
        {
            return Ok(Err("no postgres user on this host".into()));
        }
        let cluster = Cluster {
            primary: Node {
                data: dir.join("primary"),
                port: free_port()?,
            },
            standby: Node {
                data: dir.join("standby"),
                port: free_port()?,
            },
            dir,
            bin,
            keep,
        };
        cluster.make(replication)?;
        Ok(Ok(cluster))
    }

    /// A command of the server's programs, run as `postgres`.
    fn tool(&self, name: &str) -> Command {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(self.bin.join(name));
        c.stdin(Stdio::null()).stdout(Stdio::null());
        c
    }

    fn run(&self, what: &str, mut cmd: Command) -> anyhow::Result<()> {
        let out = cmd
            .stderr(Stdio::piped())
            .output()
            .context(what.to_owned())?;
        if !out.status.success() {
            bail!("{what}: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(())
    }

    fn start(&self, node: &Node) -> anyhow::Result<()> {
        let mut c = self.tool("pg_ctl");
        c.arg("-D")
            .arg(&node.data)
            .arg("-l")
            .arg(node.data.with_extension("log"))
            .args(["-w", "-t", "60", "start"]);
        self.run("starting a server", c).map_err(|e| {
            // What the server said is in its log.
            let log = std::fs::read_to_string(node.data.with_extension("log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            e.context(format!("port {}: {}", node.port, tail.join(" / ")))
        })
    }

    fn make(&self, replication: Replication) -> anyhow::Result<()> {
        let mut init = self.tool("initdb");
        init.arg("-D")
            .arg(&self.primary.data)
            .args(["-U", "postgres", "-A", "trust", "--no-sync"]);
        self.run("initdb", init)?;
        let sync = match replication {
            Replication::Synchronous => "*",
            Replication::Asynchronous => "",
        };
        append(
            &self.primary.data.join("postgresql.conf"),
            &format!(
                "port = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
                 wal_level = replica\nmax_wal_senders = 4\nmax_connections = 100\n\
                 shared_buffers = 32MB\nfsync = on\nsynchronous_commit = on\n\
                 synchronous_standby_names = '{sync}'\n",
                self.primary.port,
                self.dir.display()
            ),
        )?;
        self.start(&self.primary)?;
        let mut copy = self.tool("pg_basebackup");
        copy.args(["-h", "127.0.0.1", "-p", &self.primary.port.to_string()])
            .args(["-U", "postgres", "-D"])
            .arg(&self.standby.data)
            .args(["-R", "-X", "stream", "-C", "-S", "standby", "--no-sync"]);
        self.run("pg_basebackup", copy)?;
        // The copy carries the primary's settings: its own port, and no standby to wait for
        // once it is promoted.
        append(
            &self.standby.data.join("postgresql.conf"),
            &format!(
                "port = {}\nsynchronous_standby_names = ''\n",
                self.standby.port
            ),
        )?;
        self.start(&self.standby)?;
        // Streaming (and, synchronously, counted as the synchronous standby) before any load.
        let want = match replication {
            Replication::Synchronous => "sync",
            Replication::Asynchronous => "async",
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state = self.sql_on(
                self.primary.port,
                "SELECT coalesce(max(sync_state), '') FROM pg_stat_replication WHERE state = 'streaming'",
            )?;
            if state == want {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the standby was not streaming ({want}) within 30 s: {state:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// One value of a statement on the server at `port`.
    fn sql_on(&self, port: u16, sql: &str) -> anyhow::Result<String> {
        let out = Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(["-U", "postgres", "-d", "postgres", "-XAtc", sql])
            .stdin(Stdio::null())
            .output()
            .context("psql")?;
        if !out.status.success() {
            bail!("psql: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// The URL of both servers, primary first, for a server that accepts writes.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
            self.primary.port, self.standby.port
        )
    }

    /// The standby alone (read-only until promoted).
    pub fn standby_url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            self.standby.port
        )
    }

    /// Kills the primary as a dying host would: `SIGKILL` to its postmaster and every
    /// process of it at once.
    pub fn kill_primary(&self) -> anyhow::Result<()> {
        let pm = postmaster(&self.primary.data)?;
        let mut pids = children(pm)?;
        pids.push(pm);
        for pid in pids {
            // Gone already is fine.
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        Ok(())
    }

    /// Sends `signal` (`STOP`, `KILL`) to the standby's WAL receiver. Stopped, the standby falls
    /// behind; killed while stopped, what it had not read of the stream is gone (the server
    /// restarts the receiver after recovering from what it had flushed).
    pub fn signal_wal_receiver(&self, signal: &str) -> anyhow::Result<()> {
        let pm = postmaster(&self.standby.data)?;
        let receiver = children(pm)?
            .into_iter()
            .find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.contains("walreceiver"))
            })
            .context("the standby has no WAL receiver")?;
        Command::new("kill")
            .args([&format!("-{signal}"), &receiver.to_string()])
            .status()?;
        Ok(())
    }

    /// Waits until the standby has replayed all the write-ahead log it holds (the primary is
    /// gone, so nothing new arrives): it accepts reads before that, once consistent, and may
    /// still be replaying what came after.
    pub fn settle_standby(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let (mut last, mut same) = (String::new(), 0);
        while same < 3 {
            if Instant::now() > deadline {
                bail!("the standby's replay did not settle within 60 s (at {last:?})");
            }
            std::thread::sleep(Duration::from_millis(100));
            let Ok(lsn) = self.sql_on(self.standby.port, "SELECT pg_last_wal_replay_lsn()") else {
                same = 0;
                continue;
            };
            if lsn == last && !lsn.is_empty() {
                same += 1;
            } else {
                (last, same) = (lsn, 0);
            }
        }
        Ok(())
    }

    /// Promotes the standby (waits until it accepts writes).
    pub fn promote(&self) -> anyhow::Result<()> {
        let mut c = self.tool("pg_ctl");
        c.arg("-D")
            .arg(&self.standby.data)
            .args(["-w", "-t", "60", "promote"]);
        self.run("promoting the standby", c)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in [&self.standby, &self.primary] {
            if node.data.join("postmaster.pid").exists() {
                let mut c = self.tool("pg_ctl");
                c.arg("-D")
                    .arg(&node.data)
                    .args(["-m", "immediate", "stop"])
                    .stderr(Stdio::null());
                let _ = c.status();
            }
        }
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn append(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

/// The postmaster's pid of the server in `data`.
fn postmaster(data: &Path) -> anyhow::Result<u32> {
    let pid = std::fs::read_to_string(data.join("postmaster.pid")).context("postmaster.pid")?;
    Ok(pid.lines().next().unwrap_or("").trim().parse()?)
}

/// The processes whose parent is `pid`.
fn children(pid: u32) -> anyhow::Result<Vec<u32>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The parent is the second field after the command's closing parenthesis.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if parent == Some(pid) {
            found.push(child);
        }
    }
    Ok(found)
}
