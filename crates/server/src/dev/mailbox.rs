//! `GET /dev/mailbox?orderId=` (dev mode only): the mails the server "sent" about one of the
//! caller's orders, so tests and the demo page can see that a confirmation went out once.

use crate::auth::AuthUser;
use crate::config::Config;
use crate::error::{AppError, AppResult};
use crate::http::extract::Id;
use crate::store::mailbox::mails_of;
use crate::store::Store;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use payonce_protocol::{ErrorCode, Mailbox, MailboxQuery};
use std::sync::Arc;

/// The handler.
pub(crate) async fn handler(
    State(config): State<Arc<Config>>,
    State(store): State<Store>,
    AuthUser(user): AuthUser,
    query: Result<Query<MailboxQuery>, QueryRejection>,
) -> AppResult<Json<Mailbox>> {
    if !config.dev {
        return Err(AppError::code(ErrorCode::DevModeRequired));
    }
    let Query(query) =
        query.map_err(|e| AppError::detail(ErrorCode::InvalidRequest, e.body_text()))?;
    let order_id = Id::parse(&query.order_id, "orderId")?;
    let mails = mails_of(store.pool(), &user, &order_id).await?;
    Ok(Json(Mailbox { mails }))
}
