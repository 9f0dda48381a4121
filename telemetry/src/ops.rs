//! The operations endpoints of a role, on a port of their own (SPEC
//! section 10): `GET /healthz` (200 `ok` while the process serves: a
//! liveness probe), `GET /readyz` (200 when the role says it can do its
//! work, else 503 with a one-line reason: a readiness probe), `GET
//! /metrics` (the Prometheus text format); anything else is 404.
//!
//! Apart from the role's own port, so a scrape or a probe never competes
//! with workers for the gRPC server, and a role without HTTP (the worker)
//! needs nothing else. The role says what to serve through [`OpsRole`];
//! [`serve`] runs until the shutdown future resolves, then finishes the
//! requests in flight (axum's graceful shutdown).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use crate::metrics::CONTENT_TYPE;

/// A boxed future, as [`OpsRole`]'s methods return them (a trait object's
/// methods cannot be `async fn`; boxing by hand spares a macro crate).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a role tells its operations server.
pub trait OpsRole: Send + Sync + 'static {
    /// The role's metrics in the Prometheus text format (a future: the
    /// coordinator reads its runs from the ledger at scrape time).
    fn metrics(&self) -> BoxFuture<'_, String>;

    /// `Ok` when the role can do its work now; otherwise one line saying
    /// why not (`/readyz` answers it with 503).
    fn readiness(&self) -> BoxFuture<'_, Result<(), String>>;
}

/// The operations server could not serve.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    #[error("the operations server on {address} stopped: {source}")]
    Serve {
        address: String,
        #[source]
        source: std::io::Error,
    },
}

/// The routes, for [`serve`] and for tests that call them in process.
pub fn router(role: Arc<dyn OpsRole>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(role)
}

/// Serves the operations endpoints of `role` on `listener` until
/// `shutdown` resolves, then lets the requests in flight finish.
pub async fn serve(
    listener: TcpListener,
    role: Arc<dyn OpsRole>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), OpsError> {
    let address = listener.local_addr().map_or_else(|_| "?".to_owned(), |a| a.to_string());
    axum::serve(listener, router(role))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|source| OpsError::Serve { address, source })
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(role): State<Arc<dyn OpsRole>>) -> Response {
    match role.readiness().await {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(reason) => {
            // One line: a probe's log shows the first line only.
            let line = reason.lines().next().unwrap_or("not ready").to_owned();
            (StatusCode::SERVICE_UNAVAILABLE, format!("{line}\n")).into_response()
        }
    }
}

async fn metrics(State(role): State<Arc<dyn OpsRole>>) -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], role.metrics().await).into_response()
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found: the operations endpoints are /healthz, /readyz and /metrics\n").into_response()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[derive(Debug, Default)]
    struct FakeRole {
        ready: AtomicBool,
    }

    impl OpsRole for FakeRole {
        fn metrics(&self) -> BoxFuture<'_, String> {
            Box::pin(async { "# HELP t_total T.\n# TYPE t_total counter\nt_total 1\n".to_owned() })
        }

        fn readiness(&self) -> BoxFuture<'_, Result<(), String>> {
            let ready = self.ready.load(Ordering::Relaxed);
            Box::pin(async move { if ready { Ok(()) } else { Err("not yet\nsecond line".to_owned()) } })
        }
    }

    /// A raw HTTP/1.1 GET on `addr`: (status, content type, body).
    async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes()).await.unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).await.unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        let content_type = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-type: ").map(str::to_owned))
            .unwrap_or_default();
        (status, content_type, body.to_owned())
    }

    /// Proves the four answers of the server on a port-0 listener: healthz
    /// 200, readyz 503 with the reason's first line and then 200 once the
    /// role is ready, metrics with the exposition content type, 404
    /// elsewhere; and that the server returns once shutdown resolves.
    #[tokio::test]
    async fn serves_health_readiness_metrics_and_stops_on_shutdown() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let role = Arc::new(FakeRole::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, Arc::clone(&role) as Arc<dyn OpsRole>, async move {
            let _ = stopped.await;
        }));
        assert_eq!(get(addr, "/healthz").await, (200, "text/plain; charset=utf-8".into(), "ok\n".into()));
        assert_eq!(get(addr, "/readyz").await.0, 503);
        assert_eq!(get(addr, "/readyz").await.2, "not yet\n");
        role.ready.store(true, Ordering::Relaxed);
        assert_eq!(get(addr, "/readyz").await.0, 200);
        let (status, content_type, body) = get(addr, "/metrics").await;
        assert_eq!((status, content_type.as_str()), (200, CONTENT_TYPE));
        assert!(body.ends_with("t_total 1\n"), "{body}");
        assert_eq!(get(addr, "/nope").await.0, 404);
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
