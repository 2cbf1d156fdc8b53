//! The HTTP endpoint: `GET /metrics` on hyper's HTTP/1, on one thread of its own.
//!
//! A scrape endpoint faces whoever can reach its port, so every client is bounded: a few
//! connections at once (more are closed at once), a small request head read in a short time,
//! and a whole connection's life. A scrape reads counters the services keep anyway, so it
//! runs on the endpoint's thread and never waits on a service's lock for long.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::prometheus_text::CONTENT_TYPE as TEXT_FORMAT;
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinSet;

use crate::error::MetricsError;
use crate::scrape::Scrape;

/// Connections served at once; Prometheus keeps one per target, so a few leave room for a
/// person's `curl` beside it while a flood of others is closed unread.
pub const MAX_CONNECTIONS: usize = 8;
/// A request head's most bytes (hyper's smallest buffer): `GET /metrics` needs a few hundred.
pub const MAX_REQUEST_HEAD: usize = 8192;
/// How long a client may take over a request's head before the connection is closed.
pub const HEAD_TIME: Duration = Duration::from_secs(2);
/// A connection's life before it is asked to close after its current answer; Prometheus
/// reconnects at its next scrape.
pub const CONNECTION_TIME: Duration = Duration::from_secs(30);
/// How long an answer under way may take once its connection has been asked to close.
const CLOSING_TIME: Duration = Duration::from_secs(5);

/// What a service shows at each scrape.
pub trait Source: Send + Sync + 'static {
    /// Adds the service's series, read now, to `scrape`.
    fn collect(&self, scrape: &mut Scrape);
}

impl<F: Fn(&mut Scrape) + Send + Sync + 'static> Source for F {
    fn collect(&self, scrape: &mut Scrape) {
        self(scrape)
    }
}

/// A metrics endpoint serving until dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (port 0: any free one) and answers `GET /metrics` with what `source`
    /// collects at that moment.
    pub fn start(addr: SocketAddr, source: Arc<dyn Source>) -> Result<Self, MetricsError> {
        let bind_error = |source| MetricsError::Bind { addr, source };
        let listener = std::net::TcpListener::bind(addr).map_err(bind_error)?;
        listener.set_nonblocking(true).map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(bind_error)?;
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || runtime.block_on(accept_loop(listener, source, stopped)))
            .map_err(bind_error)?;
        tracing::info!("metrics on http://{addr}/metrics");
        Ok(MetricsServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where it listens (the port chosen, for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept_loop(
    listener: std::net::TcpListener,
    source: Arc<dyn Source>,
    mut stopped: oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!("metrics endpoint cannot listen: {e}");
            return;
        }
    };
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => accepted,
        };
        while connections.try_join_next().is_some() {}
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, most likely: retrying at once would spin.
                tracing::warn!("metrics endpoint: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            tracing::debug!(
                "metrics endpoint: closing {peer}'s connection: {MAX_CONNECTIONS} open"
            );
            continue;
        };
        let source = Arc::clone(&source);
        connections.spawn(async move {
            serve_connection(stream, source).await;
            drop(permit);
        });
    }
}

async fn serve_connection(stream: TcpStream, source: Arc<dyn Source>) {
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let answer = answer(&request, source.as_ref());
        async move { Ok::<_, Infallible>(answer) }
    });
    let mut conn = pin!(hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIME)
        .max_buf_size(MAX_REQUEST_HEAD)
        .serve_connection(TokioIo::new(stream), service));
    let served = tokio::select! {
        served = conn.as_mut() => served,
        () = tokio::time::sleep(CONNECTION_TIME) => {
            conn.as_mut().graceful_shutdown();
            tokio::time::timeout(CLOSING_TIME, conn.as_mut())
                .await
                .unwrap_or(Ok(()))
        }
    };
    if let Err(e) = served {
        tracing::debug!("metrics endpoint: connection ended: {e}");
    }
}

/// The answer to one request: the series for `GET /metrics`, else why not.
fn answer(request: &Request<Incoming>, source: &dyn Source) -> Response<Full<Bytes>> {
    if request.uri().path() != "/metrics" {
        return plain(
            StatusCode::NOT_FOUND,
            "not found: the series are at /metrics\n",
        );
    }
    if request.method() != Method::GET {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    let mut scrape = Scrape::default();
    source.collect(&mut scrape);
    let mut response = Response::new(Full::new(Bytes::from(scrape.encode())));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(TEXT_FORMAT));
    response
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response
}
