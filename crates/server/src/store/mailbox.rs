//! The `mailbox` table: the confirmation mails the email job "sends" (there is no real
//! mailer; a dev build reads them back at `GET /dev/mailbox`, `src/dev/mailbox.rs`).

use payonce_rules::ids::MailId;
use sqlx::any::AnyExecutor;

/// One mail in the dev mailbox.
pub(crate) struct Mail<'a> {
    pub id: MailId,
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
    .bind(m.id.as_str())
    .bind(m.order_id)
    .bind(m.user_id)
    .bind(m.subject)
    .bind(m.body)
    .bind(now)
    .execute(e)
    .await?;
    Ok(())
}

/// The mails sent to `user` about `order_id`, oldest first (the dev mailbox's read).
#[cfg(feature = "dev")]
pub(crate) async fn mails_of<'c>(
    e: impl AnyExecutor<'c>,
    user: &str,
    order_id: &str,
) -> sqlx::Result<Vec<payonce_protocol::Mail>> {
    let rows: Vec<(String, String, String, i64)> = sqlx::query_as(
        "SELECT order_id, subject, body, sent_at FROM mailbox
         WHERE user_id = $1 AND order_id = $2 ORDER BY sent_at, id",
    )
    .bind(user)
    .bind(order_id)
    .fetch_all(e)
    .await?;
    let mail = |(order_id, subject, body, sent_at)| payonce_protocol::Mail {
        order_id,
        subject,
        body,
        sent_at,
    };
    Ok(rows.into_iter().map(mail).collect())
}
