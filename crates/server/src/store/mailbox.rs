//! The dev mailbox: the confirmation mails dev mode "sends".

use sqlx::any::AnyExecutor;

/// One mail in the dev mailbox.
pub(crate) struct Mail<'a> {
    pub order_id: &'a str,
    pub user_id: &'a str,
    pub subject: &'a str,
    pub body: &'a str,
}

/// Records a sent mail.
pub(crate) async fn insert_mail<'c>(
    e: impl AnyExecutor<'c>,
    m: &Mail<'_>,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO mailbox (id, order_id, user_id, subject, body, sent_at)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(format!("mail_{}", uuid::Uuid::new_v4().simple()))
    .bind(m.order_id)
    .bind(m.user_id)
    .bind(m.subject)
    .bind(m.body)
    .bind(now)
    .execute(e)
    .await?;
    Ok(())
}

/// A user's mails about one order, oldest first: `(order_id, subject, body, sent_at)`.
pub(crate) async fn mails<'c>(
    e: impl AnyExecutor<'c>,
    user_id: &str,
    order_id: &str,
) -> sqlx::Result<Vec<(String, String, String, i64)>> {
    sqlx::query_as(
        "SELECT order_id, subject, body, sent_at FROM mailbox
         WHERE user_id = $1 AND order_id = $2 ORDER BY sent_at, id",
    )
    .bind(user_id)
    .bind(order_id)
    .fetch_all(e)
    .await
}
