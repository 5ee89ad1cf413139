//! The `mailbox` table: the receipts the dev mailer "sends" (`--mailer dev`,
//! src/mailer/mod.rs); a dev build reads them back at `GET /dev/mailbox`
//! (`src/dev/mailbox.rs`).

use super::tx::Statement;
use payonce_rules::ids::MailId;

/// One mail in the dev mailbox.
#[derive(Debug, Clone)]
pub(crate) struct Mail {
    pub id: MailId,
    pub order_id: String,
    pub user_id: String,
    pub subject: String,
    pub body: String,
}

/// The statement that records `m` as sent at `now` (one of the receipt's settle,
/// `receipts.rs`).
pub(crate) fn insert(m: &Mail, now: i64) -> Statement {
    Statement::new(
        "INSERT INTO mailbox (id, order_id, user_id, subject, body, sent_at)
         SELECT $1, $2, $3, $4, $5, $6 WHERE true",
        vec![
            m.id.as_str().into(),
            (&m.order_id).into(),
            (&m.user_id).into(),
            (&m.subject).into(),
            (&m.body).into(),
            now.into(),
        ],
    )
}

/// The mails sent to `user` about `order_id`, oldest first (the dev mailbox's read).
#[cfg(feature = "dev")]
pub(crate) async fn mails_of<'c>(
    e: impl sqlx::any::AnyExecutor<'c>,
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
