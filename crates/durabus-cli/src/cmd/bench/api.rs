//! The admin API under load: concurrent HTTP clients listing dead letters through the router
//! `durabus serve` runs, over real TCP with keep-alive, on a database already filled with dead
//! letters. Each client cycles through the first page, a type-and-status filtered page and a
//! page deep in the queue (keyset `before`).

use std::time::Instant;

use anyhow::Context as _;
use durabus::EventBus;
use durabus_admin::{AdminConfig, AdminState, Role, Token, Tokens};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SECRET: &str = "bench-read-token-0123456789";

/// Latency of the listings under load.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ApiLoad {
    /// Concurrent clients.
    pub clients: usize,
    /// Requests measured (after a warm-up).
    pub requests: usize,
    /// Per-request latency (ms).
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Requests per second over the measured part.
    pub rps: f64,
}

/// One keep-alive HTTP/1.1 connection.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    async fn connect(addr: std::net::SocketAddr) -> anyhow::Result<Client> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            buf: Vec::with_capacity(64 * 1024),
        })
    }

    /// GETs `path`; fails unless the answer is 200 with a body.
    async fn get(&mut self, path: &str) -> anyhow::Result<usize> {
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {SECRET}\r\n\r\n");
        self.stream.write_all(request.as_bytes()).await?;
        self.buf.clear();
        let header_end = loop {
            let mut chunk = [0u8; 16 * 1024];
            let n = self.stream.read(&mut chunk).await?;
            anyhow::ensure!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..header_end]).to_ascii_lowercase();
        anyhow::ensure!(head.starts_with("http/1.1 200"), "{head}");
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .context("no content-length")?
            .trim()
            .parse()?;
        while self.buf.len() < header_end + length {
            let mut chunk = [0u8; 64 * 1024];
            let n = self.stream.read(&mut chunk).await?;
            anyhow::ensure!(n > 0, "the server closed the connection mid-body");
            self.buf.extend_from_slice(&chunk[..n]);
        }
        Ok(length)
    }
}

type Server = (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
);

/// Serves `bus`'s admin API on loopback, as `durabus serve` does, with a read token.
async fn serve(bus: &EventBus) -> anyhow::Result<Server> {
    let tokens = Tokens::new().with(Token::new("bench", SECRET, Role::Read)?)?;
    let app = durabus_admin::router(AdminState::new(bus.clone(), AdminConfig::new(tokens)));
    let listener = durabus_admin::AdminListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });
    Ok((addr, stop, server))
}

/// The statistics on a big database: what one refresh (the `refresh-stats` job's read of
/// every event) costs, and `GET /api/v2/stats` answered from the kept snapshot.
#[derive(Debug, Default, Clone, Serialize)]
pub struct StatsRead {
    /// Events counted.
    pub events: u64,
    /// One refresh (ms, median of 3).
    pub refresh_ms: f64,
    /// `GET /api/v2/stats` over loopback HTTP, one client, `requests` of them (ms).
    pub api_p50_ms: f64,
    pub api_p99_ms: f64,
}

/// Times three refreshes of the statistics on `bus`'s database, then `requests` reads of
/// `GET /api/v2/stats`.
pub async fn stats(bus: &EventBus, requests: usize) -> anyhow::Result<StatsRead> {
    let store = bus.store();
    let mut refreshes = Vec::new();
    let mut events = 0;
    for _ in 0..3 {
        let s = durabus::StatsSnapshot::refresh(store.as_ref(), &*bus.clock()).await?;
        refreshes.push(s.took_ms as f64);
        events = s.stats.total;
    }
    let (addr, stop, server) = serve(bus).await?;
    let mut client = Client::connect(addr).await?;
    let mut times = Vec::with_capacity(requests);
    for i in 0..requests + requests / 10 {
        let t = Instant::now();
        let n = client.get("/api/v2/stats").await?;
        anyhow::ensure!(n > 0, "an empty statistics answer");
        if i >= requests / 10 {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let _ = stop.send(());
    server.await??;
    times.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    anyhow::ensure!(!times.is_empty(), "no request was measured");
    Ok(StatsRead {
        events,
        refresh_ms: super::harness::median(refreshes),
        api_p50_ms: at(0.50),
        api_p99_ms: at(0.99),
    })
}

/// Serves `bus`'s admin API on loopback and has `clients` clients make `per_client` listing
/// requests each (the first tenth of them a warm-up, not measured). `deep` is a position in
/// the middle of the queue.
pub async fn load(
    bus: &EventBus,
    clients: usize,
    per_client: usize,
    filter_type: &str,
    deep: i64,
) -> anyhow::Result<ApiLoad> {
    let (addr, stop, server) = serve(bus).await?;
    let paths = [
        "/api/v2/dead-letters?limit=50".to_owned(),
        format!("/api/v2/dead-letters?limit=50&status=pending&event_type={filter_type}"),
        format!("/api/v2/dead-letters?limit=50&before={deep}"),
    ];
    let warmup = per_client / 10;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let paths = paths.clone();
        tasks.spawn(async move {
            let mut client = Client::connect(addr).await?;
            let mut times = Vec::with_capacity(per_client);
            let mut measured_from = None;
            for i in 0..per_client {
                if i == warmup {
                    measured_from = Some(Instant::now());
                }
                let t = Instant::now();
                client.get(&paths[(c + i) % paths.len()]).await?;
                if i >= warmup {
                    times.push(t.elapsed().as_secs_f64() * 1e3);
                }
            }
            anyhow::Ok((times, measured_from))
        });
    }
    let mut all = Vec::new();
    let mut first_measured: Option<Instant> = None;
    while let Some(done) = tasks.join_next().await {
        let (times, from) = done??;
        all.extend(times);
        if let Some(f) = from {
            first_measured = Some(first_measured.map_or(f, |m| m.min(f)));
        }
    }
    let elapsed = first_measured.unwrap_or(started).elapsed().as_secs_f64();
    let _ = stop.send(());
    server.await??;
    all.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    anyhow::ensure!(!all.is_empty(), "no request was measured");
    Ok(ApiLoad {
        clients,
        requests: all.len(),
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        rps: all.len() as f64 / elapsed.max(1e-9),
    })
}
