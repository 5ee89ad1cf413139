//! `--mailer smtp`: one SMTP submission per receipt through lettre, on tokio and rustls.
//! The URL's scheme picks the link: `smtps://` implicit TLS, `smtp://…?tls=required`
//! STARTTLS (refused if the relay does not offer it: nothing is sent in plain text then),
//! `smtp://` plain text (loopback only outside `--dev`). AUTH credentials come from
//! `--smtp-username` and `--smtp-password-file` (or its variable), never from the URL, so
//! no log line or `{:?}` of the flags can show them ([`crate::secret`]).

use super::receipt::Outgoing;
use super::MailArgs;
use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use payonce_rules::receipt::{answer_of, RelayAnswer};
use std::time::Duration;

/// The relay and the sender, checked at start.
#[derive(Clone)]
pub(crate) struct Smtp {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    /// The domain of `--mail-from`: every `Message-ID` names it.
    domain: String,
    timeout: Duration,
}

impl Smtp {
    /// The mailer of `args` (`--mailer smtp`), every problem one line.
    pub(super) fn new(args: &MailArgs, dev: bool, timeout: Duration) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let from = match args.mail_from.as_deref().map(str::parse::<Mailbox>) {
            Some(Ok(from)) => Some(from),
            Some(Err(e)) => {
                problems.push(format!(
                    "--mail-from (PAYONCE_MAIL_FROM): not a mail address: {e}"
                ));
                None
            }
            None => {
                problems.push(
                    "--mail-from (PAYONCE_MAIL_FROM) is required with --mailer smtp".to_owned(),
                );
                None
            }
        };
        let url = match args.smtp_url.as_deref() {
            Some(url) => url_problems(url, dev, &mut problems).then_some(url),
            None => {
                problems.push(
                    "--smtp-url (PAYONCE_SMTP_URL) is required with --mailer smtp".to_owned(),
                );
                None
            }
        };
        let password = super::password(args)
            .map_err(|e| problems.push(e))
            .ok()
            .flatten();
        let credentials = match (&args.smtp_username, password) {
            (Some(user), Some(pass)) => {
                Some(Credentials::new(user.clone(), pass.expose().to_owned()))
            }
            (None, None) => None,
            _ => {
                problems.push(
                    "--smtp-username (PAYONCE_SMTP_USERNAME) and --smtp-password-file \
                     (PAYONCE_SMTP_PASSWORD_FILE) go together"
                        .to_owned(),
                );
                None
            }
        };
        let builder = url.map(AsyncSmtpTransport::<Tokio1Executor>::from_url);
        let builder = match builder {
            Some(Ok(b)) => Some(b),
            Some(Err(e)) => {
                problems.push(format!("--smtp-url (PAYONCE_SMTP_URL): {e}"));
                None
            }
            None => None,
        };
        let (Some(from), Some(builder), true) = (from, builder, problems.is_empty()) else {
            return Err(problems);
        };
        let mut builder = builder.timeout(Some(timeout));
        if let Some(c) = credentials {
            builder = builder.credentials(c);
        }
        let domain = from.email.domain().to_owned();
        Ok(Self {
            transport: builder.build(),
            from,
            domain,
            timeout,
        })
    }

    /// The domain every receipt's `Message-ID` names.
    pub(crate) fn domain(&self) -> &str {
        &self.domain
    }

    /// Submits `mail` to `to`; what the relay (or the attempt to reach it) answered.
    pub(crate) async fn send(&self, to: Mailbox, mail: &Outgoing) -> RelayAnswer {
        let message = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(mail.subject.clone())
            .message_id(Some(mail.message_id.clone()))
            .multipart(MultiPart::alternative_plain_html(
                mail.text.clone(),
                mail.html.clone(),
            ));
        let message = match message {
            Ok(m) => m,
            Err(e) => return RelayAnswer::Permanent(format!("the message cannot be built: {e}")),
        };
        let sent = tokio::time::timeout(self.timeout, self.transport.send(message)).await;
        match sent {
            Err(_) => RelayAnswer::Transient(format!("no answer within {:?}", self.timeout)),
            Ok(Ok(reply)) => answer_of(u16::from(reply.code()), &first_line(reply.message())),
            Ok(Err(e)) => match e.status() {
                Some(code) => answer_of(u16::from(code), &e.to_string()),
                None if e.is_client() => RelayAnswer::Permanent(e.to_string()),
                // Refused, reset, timed out, a TLS failure: the relay may take it later.
                None => RelayAnswer::Transient(e.to_string()),
            },
        }
    }
}

fn first_line<'a>(mut lines: impl Iterator<Item = &'a str>) -> String {
    lines.next().unwrap_or_default().to_owned()
}

/// Problems of `--smtp-url` (pushed to `problems`); true when it may be used.
fn url_problems(url: &str, dev: bool, problems: &mut Vec<String>) -> bool {
    let Ok(u) = reqwest::Url::parse(url) else {
        problems.push("--smtp-url (PAYONCE_SMTP_URL) is not a URL".to_owned());
        return false;
    };
    let before = problems.len();
    if !u.username().is_empty() || u.password().is_some() {
        problems.push(
            "--smtp-url (PAYONCE_SMTP_URL) carries credentials: give them with --smtp-username \
             and --smtp-password-file (PAYONCE_SMTP_PASSWORD_FILE)"
                .to_owned(),
        );
    }
    let tls = u.query_pairs().any(|(k, v)| k == "tls" && v == "required");
    let loopback = match u.host_str() {
        Some("localhost") => true,
        Some(h) => h
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    };
    match u.scheme() {
        "smtps" => {}
        "smtp" if tls || loopback || dev => {}
        "smtp" => problems.push(format!(
            "--smtp-url (PAYONCE_SMTP_URL) is plain smtp:// to {}: use smtps:// or \
             smtp://…?tls=required",
            u.host_str().unwrap_or("?")
        )),
        other => problems.push(format!(
            "--smtp-url (PAYONCE_SMTP_URL): unknown scheme {other}: smtp or smtps"
        )),
    }
    problems.len() == before
}
