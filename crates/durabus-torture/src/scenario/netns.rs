//! Worker hosts for the partition scenario: each a network namespace (`ip netns`) joined to
//! this one by a veth pair, reaching PostgreSQL through a relay of this process on the pair's
//! address. The relay adds latency and now and then a retransmission-like stall (this
//! machine's kernel has no `netem` qdisc, so the link is degraded in the relay); cutting the
//! link takes the veth down, so packets are dropped in the kernel, not refused.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;

/// Runs `ip` with `args`; fails with its standard error.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip")?;
    anyhow::ensure!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// How the relay degrades a link.
#[derive(Debug, Default)]
pub struct Degrade {
    /// Added to each chunk relayed, in milliseconds.
    pub delay_ms: AtomicU64,
    /// In thousandths: the chance that a chunk waits 200 ms more (a lost segment sent again).
    pub stall_per_mille: AtomicU64,
}

/// One worker host: its namespace, the veth pair, and the relay to the server.
pub struct Host {
    /// The namespace's name (for `ip netns exec`).
    pub ns: String,
    /// This side of the veth pair.
    host_if: String,
    /// The relay's address, as the namespace reaches it.
    pub relay: SocketAddr,
    /// How the relay degrades the link now.
    pub degrade: Arc<Degrade>,
    stop: Arc<AtomicBool>,
}

impl Host {
    /// Makes host `n` of this run (`tag` keeps runs apart), relaying to `server`.
    pub fn new(tag: u16, n: u8, server: SocketAddr) -> anyhow::Result<Host> {
        let ns = format!("durabus-{tag:04x}-{n}");
        let host_if = format!("dbh{tag:04x}{n}");
        let ns_if = format!("dbn{tag:04x}{n}");
        let net = format!("10.{}.{}", 200 + (tag % 50), n);
        ip(&["netns", "add", &ns])?;
        let host = Host {
            ns: ns.clone(),
            host_if: host_if.clone(),
            relay: format!("{net}.1:6432").parse()?,
            degrade: Arc::new(Degrade::default()),
            stop: Arc::new(AtomicBool::new(false)),
        };
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
        ])?;
        ip(&["link", "set", &ns_if, "netns", &ns])?;
        ip(&["addr", "add", &format!("{net}.1/24"), "dev", &host_if])?;
        ip(&["link", "set", &host_if, "up"])?;
        ip(&[
            "netns",
            "exec",
            &ns,
            "ip",
            "addr",
            "add",
            &format!("{net}.2/24"),
            "dev",
            &ns_if,
        ])?;
        ip(&["netns", "exec", &ns, "ip", "link", "set", &ns_if, "up"])?;
        ip(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"])?;
        let listener = TcpListener::bind(host.relay).context("binding the relay")?;
        let (degrade, stop) = (host.degrade.clone(), host.stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = conn else { continue };
                let Ok(upstream) = TcpStream::connect(server) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = upstream.set_nodelay(true);
                for (from, to) in [
                    (client.try_clone(), upstream.try_clone()),
                    (upstream.try_clone(), client.try_clone()),
                ] {
                    if let (Ok(from), Ok(to)) = (from, to) {
                        let degrade = degrade.clone();
                        std::thread::spawn(move || pipe(from, to, &degrade));
                    }
                }
            }
        });
        Ok(host)
    }

    /// Cuts the link (`up = false`: the veth goes down) or restores it.
    pub fn link(&self, up: bool) -> anyhow::Result<()> {
        ip(&["link", "set", &self.host_if, if up { "up" } else { "down" }])
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Unblocks the relay's accept so it sees the stop.
        let _ = TcpStream::connect_timeout(&self.relay, Duration::from_millis(100));
        let _ = ip(&["link", "del", &self.host_if]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

/// Copies `from` to `to` until either ends, holding each chunk as `degrade` says.
fn pipe(mut from: TcpStream, mut to: TcpStream, degrade: &Degrade) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut hold = degrade.delay_ms.load(Ordering::Relaxed);
        let stall = degrade.stall_per_mille.load(Ordering::Relaxed);
        if stall > 0 && fastrand::u64(..1000) < stall {
            hold += 200;
        }
        if hold > 0 {
            std::thread::sleep(Duration::from_millis(hold));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
