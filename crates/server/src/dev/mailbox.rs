//! `GET /dev/mailbox?orderId=` (dev mode only): the mails the server "sent" about one of the
//! caller's orders, so tests and the demo page can see that a confirmation went out once.

use crate::auth::AuthUser;
use crate::error::{AppError, AppResult};
use crate::http::extract::Id;
use crate::state::AppState;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use payonce_protocol::{ErrorCode, Mail, Mailbox, MailboxQuery};

/// The handler.
pub(crate) async fn handler(
    State(state): State<AppState>,
    AuthUser(user): AuthUser,
    query: Result<Query<MailboxQuery>, QueryRejection>,
) -> AppResult<Json<Mailbox>> {
    if !state.config.dev {
        return Err(AppError::code(ErrorCode::DevModeRequired));
    }
    let Query(query) =
        query.map_err(|e| AppError::detail(ErrorCode::InvalidRequest, e.body_text()))?;
    let order_id = Id::parse(&query.order_id, "orderId")?;
    // Oldest first.
    let rows: Vec<(String, String, String, i64)> = sqlx::query_as(
        "SELECT order_id, subject, body, sent_at FROM mailbox
         WHERE user_id = $1 AND order_id = $2 ORDER BY sent_at, id",
    )
    .bind(&user)
    .bind(&*order_id)
    .fetch_all(state.store.pool())
    .await?;
    let mails = rows
        .into_iter()
        .map(|(order_id, subject, body, sent_at)| Mail {
            order_id,
            subject,
            body,
            sent_at,
        })
        .collect();
    Ok(Json(Mailbox { mails }))
}
