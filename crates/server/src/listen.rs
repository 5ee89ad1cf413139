//! Binding a listener (port 0 allowed) and waiting for SIGINT/SIGTERM: shared by the API
//! (`src/server.rs`) and a dev build's provider listeners (`src/dev/`).

use crate::state::RunError;
use std::net::SocketAddr;
use tokio::net::TcpListener;

/// Binds `addr`; returns the listener and the address it got.
pub(crate) async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), RunError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| RunError::Listen { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| RunError::Listen { addr, source })?;
    Ok((listener, local))
}

/// Resolves on SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
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
        () = ctrl_c => {}
        () = term => {}
    }
}
