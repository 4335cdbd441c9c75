//! `durabus serve`: the admin HTTP API and the web dashboard (at `/`) over a database, beside
//! the application's workers.
//!
//! The bus it runs delivers nothing (`deliver(false)`): it runs the maintenance jobs and the
//! durable operations (bulk actions, replays) and answers the API. Tokens come from the
//! environment (`DURABUS_ADMIN_TOKEN`, `DURABUS_READ_TOKEN`, each `secret` or `name:secret`) or
//! a file (`--tokens-file`), never from the command line, which `ps` shows. Without any, on a
//! loopback address, an admin token is made for this run and printed; a non-loopback address
//! without tokens is refused. SIGTERM or Ctrl-C: in-flight requests finish, operations pause
//! at a chunk boundary and resume on the next start.

use std::net::SocketAddr;

use anyhow::Context as _;
use axum::http::HeaderValue;
use durabus_admin::{AdminConfig, AdminState, Role, Token, Tokens};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on. A non-loopback address needs tokens.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// A file of tokens, one per line: `admin name:secret` or `read name:secret`.
    #[arg(long, value_name = "FILE")]
    tokens_file: Option<std::path::PathBuf>,
    /// Allow browser calls from this origin (CORS); repeat for more. Off unless given.
    #[arg(long = "allow-origin", value_name = "URL")]
    allow_origin: Vec<String>,
    /// Longest a request may take, in seconds.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Largest request body, in KiB (the default fits the largest body the API allows).
    #[arg(long, default_value_t = 512)]
    body_limit_kib: usize,
    /// Print the OpenAPI document and exit.
    #[arg(long)]
    print_openapi: bool,
}

/// The tokens from the environment and the file.
fn tokens(args: &Args) -> anyhow::Result<Tokens> {
    let mut tokens = match &args.tokens_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the tokens file {}", path.display()))?;
            Tokens::parse_file(&text).with_context(|| format!("in {}", path.display()))?
        }
        None => Tokens::new(),
    };
    for (var, role, name) in [
        ("DURABUS_ADMIN_TOKEN", Role::Admin, "admin"),
        ("DURABUS_READ_TOKEN", Role::Read, "read"),
    ] {
        if let Ok(spec) = std::env::var(var)
            && !spec.trim().is_empty()
        {
            let token = Token::parse(&spec, role, name).with_context(|| format!("${var}"))?;
            tokens = tokens.with(token).with_context(|| format!("${var}"))?;
        }
    }
    Ok(tokens)
}

pub async fn run(db: &crate::cmd::Db, args: Args) -> anyhow::Result<()> {
    if args.print_openapi {
        outln!(
            "{}",
            serde_json::to_string_pretty(&durabus_admin::openapi())?
        );
        return Ok(());
    }
    let mut tokens = tokens(&args)?;
    if tokens.is_empty() {
        anyhow::ensure!(
            args.listen.ip().is_loopback(),
            "refusing to serve on {} without tokens: set DURABUS_ADMIN_TOKEN (and \
             DURABUS_READ_TOKEN) or give --tokens-file",
            args.listen
        );
        let secret = uuid::Uuid::new_v4().simple().to_string();
        tokens = tokens.with(Token::new("admin", &secret, Role::Admin)?)?;
        tracing::warn!(
            target: "durabus_cli",
            "no tokens configured: this run's admin token is {secret} \
             (set DURABUS_ADMIN_TOKEN to choose one)"
        );
    }
    let mut config = AdminConfig::new(tokens);
    config.timeout = std::time::Duration::from_secs(args.timeout.max(1));
    config.body_limit = args.body_limit_kib.max(1) * 1024;
    config.cors_origins = args
        .allow_origin
        .iter()
        .map(|o| HeaderValue::from_str(o).with_context(|| format!("--allow-origin {o:?}")))
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(
        db.exists(),
        "{} does not exist; serve works on a database an application (or `durabus demo`) made",
        db.display()
    );
    let bus = db.builder().deliver(false).build().await?;
    bus.start().await?;
    let listener = durabus_admin::AdminListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    outln!(
        "durabus admin API and dashboard on http://{addr} ({}); GET /api/v2/openapi.json lists the routes",
        db.display()
    );
    tracing::info!(target: "durabus_cli", %addr, "serving the admin API");
    let app = durabus_admin::router(AdminState::new(bus.clone(), config))
        .merge(durabus_admin::dashboard());
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(stop_signal())
        .await;
    // Operations pause at their next chunk boundary; jobs stop; the store closes.
    let closed = bus.shutdown().await;
    served.context("the server failed")?;
    closed?;
    tracing::info!(target: "durabus_cli", "durabus serve: stopped");
    Ok(())
}

/// Returns on SIGTERM or Ctrl-C.
pub(crate) async fn stop_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
    tracing::info!(target: "durabus_cli", "stopping: work in flight finishes first");
}
