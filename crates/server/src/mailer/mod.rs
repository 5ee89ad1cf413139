//! The mailer port: where a paid order's receipt goes (`--mailer`), beside the provider
//! port (`src/provider/`). The receipt job (src/ops/jobs/mod.rs) asks it to deliver one
//! message and hands its answer to `payonce_rules::receipt`, which decides what the job
//! writes (docs/deploy.md, "Receipt emails").
//!
//! Layout:
//! - `receipt.rs`: the message itself (subject, plain-text and HTML parts) from the stored
//!   order and payment; pure.
//! - `smtp.rs`: `--mailer smtp`: one SMTP submission per receipt through lettre (STARTTLS
//!   or implicit TLS from the URL's scheme), its reply sorted into a
//!   [`payonce_rules::receipt::RelayAnswer`].
//!
//! `--mailer dev` writes the receipt into the `mailbox` table in the transaction that
//! marks it sent (read back at `GET /dev/mailbox`); `--mailer none` sends nothing and
//! records each receipt as `not_sent`: the operator sends receipts some other way.

pub(crate) mod receipt;
mod smtp;

use crate::secret::{Secret, SecretUrl};
use std::path::PathBuf;
use std::time::Duration;

pub(crate) use smtp::Smtp;

/// Where a receipt goes: the order's `address` when it is a mail address
/// (`alice@example.com`, `Alice <alice@example.com>`); `None` for none or a postal one.
pub(crate) fn recipient(address: Option<&str>) -> Option<lettre::message::Mailbox> {
    address?.trim().parse().ok()
}

/// Which mailer delivers receipts (`--mailer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MailerKind {
    /// The dev mailbox (a table, read at `GET /dev/mailbox`); needs no address.
    Dev,
    /// An SMTP relay (`--smtp-url`).
    Smtp,
    /// No receipts: each is recorded as not sent (the operator's job).
    None,
}

/// The mailer's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct MailArgs {
    /// Where receipts go: `dev` (the dev mailbox table), `smtp` (an SMTP relay,
    /// `--smtp-url`) or `none` (no receipts; docs/deploy.md). Default `dev` with `--dev`;
    /// required without it.
    #[arg(long, env = "PAYONCE_MAILER", value_enum)]
    pub mailer: Option<MailerKind>,
    /// The SMTP relay: `smtps://HOST[:465]` (implicit TLS), `smtp://HOST[:587]?tls=required`
    /// (STARTTLS), or `smtp://HOST[:25]` (plain text; only to a loopback host outside
    /// `--dev`). No credentials in it (`--smtp-username`, `--smtp-password-file`).
    #[arg(long, env = "PAYONCE_SMTP_URL")]
    pub smtp_url: Option<SecretUrl>,
    /// The receipts' `From` address (`shop@example.com` or `Shop <shop@example.com>`); its
    /// domain names each receipt's `Message-ID`. Required with `--mailer smtp`.
    #[arg(long, env = "PAYONCE_MAIL_FROM")]
    pub mail_from: Option<String>,
    /// Timeout of one receipt's whole SMTP exchange; must be shorter than `--lease-ms`.
    #[arg(long, env = "PAYONCE_SMTP_TIMEOUT_MS", default_value_t = 10_000)]
    pub smtp_timeout_ms: u64,
    /// The relay's AUTH user name (with `--smtp-password-file`).
    #[arg(long, env = "PAYONCE_SMTP_USERNAME")]
    pub smtp_username: Option<String>,
    /// File holding the relay's AUTH password (surrounding whitespace ignored).
    #[arg(
        long,
        env = "PAYONCE_SMTP_PASSWORD_FILE",
        conflicts_with = "smtp_password"
    )]
    pub smtp_password_file: Option<PathBuf>,
    /// The relay's AUTH password itself, as `--smtp-password-file` (prefer the file or the
    /// environment: a flag's value shows in the process list).
    #[arg(long, env = "PAYONCE_SMTP_PASSWORD", hide_env_values = true)]
    pub smtp_password: Option<Secret>,
}

/// The mailer a process runs with, checked.
#[derive(Clone)]
pub(crate) enum Mailer {
    /// The dev mailbox.
    Dev,
    /// An SMTP relay (boxed: the transport is large, the other variants empty).
    Smtp(Box<Smtp>),
    /// No receipts.
    None,
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Dev => "dev",
            Self::Smtp(_) => "smtp",
            Self::None => "none",
        })
    }
}

impl Mailer {
    /// The mailer of `args`: every problem with them, one line each. `dev`: the start has
    /// `--dev` (the default is then the dev mailbox, and plain text to any host is fine).
    /// `lease_ms`: a send must end before its job's lease, or a second worker could send
    /// the same receipt meanwhile.
    pub(crate) fn from_args(
        args: &MailArgs,
        dev: bool,
        lease_ms: u64,
    ) -> Result<Self, Vec<String>> {
        let kind = match (args.mailer, dev) {
            (Some(kind), _) => kind,
            (None, true) => MailerKind::Dev,
            (None, false) => {
                return Err(vec![
                    "--mailer (PAYONCE_MAILER) is required without --dev: smtp, or none to \
                     send no receipts (docs/deploy.md, \"Receipt emails\")"
                        .to_owned(),
                ])
            }
        };
        match kind {
            MailerKind::Dev if !cfg!(feature = "dev") || !dev => Err(vec![
                "--mailer dev needs --dev (a dev build): use smtp or none".to_owned(),
            ]),
            MailerKind::Dev => Ok(Self::Dev),
            MailerKind::None => Ok(Self::None),
            MailerKind::Smtp => {
                if args.smtp_timeout_ms == 0 || args.smtp_timeout_ms >= lease_ms {
                    return Err(vec![format!(
                        "--smtp-timeout-ms ({} ms) must be > 0 and shorter than --lease-ms \
                         ({lease_ms} ms)",
                        args.smtp_timeout_ms
                    )]);
                }
                let timeout = Duration::from_millis(args.smtp_timeout_ms);
                Smtp::new(args, dev, timeout).map(|s| Self::Smtp(Box::new(s)))
            }
        }
    }
}

/// The AUTH password of `--smtp-password-file` or `--smtp-password`, trimmed.
fn password(args: &MailArgs) -> Result<Option<Secret>, String> {
    let text = match (&args.smtp_password_file, &args.smtp_password) {
        (Some(path), _) => std::fs::read_to_string(path)
            .map_err(|e| format!("--smtp-password-file {}: {e}", path.display()))?,
        (None, Some(p)) => p.expose().to_owned(),
        (None, None) => return Ok(None),
    };
    let text = text.trim();
    if text.is_empty() {
        return Err("--smtp-password-file (PAYONCE_SMTP_PASSWORD): the password is empty".into());
    }
    Ok(Some(Secret::from(text.to_owned())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn mail(flags: &[&str]) -> MailArgs {
        let argv = std::iter::once("payonce-server").chain(flags.iter().copied());
        crate::config::Cli::try_parse_from(argv)
            .expect("flags parse")
            .server
            .mail
    }

    fn refused(flags: &[&str], dev: bool) -> Vec<String> {
        Mailer::from_args(&mail(flags), dev, 30_000).expect_err("refused")
    }

    #[test]
    fn a_start_without_dev_must_choose_a_mailer() {
        let lines = refused(&[], false);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("--mailer (PAYONCE_MAILER) is required"),
            "{lines:?}"
        );
        #[cfg(feature = "dev")]
        assert!(matches!(
            Mailer::from_args(&mail(&[]), true, 30_000),
            Ok(Mailer::Dev)
        ));
        let none = Mailer::from_args(&mail(&["--mailer", "none"]), false, 30_000);
        assert!(matches!(none, Ok(Mailer::None)));
        assert!(refused(&["--mailer", "dev"], false)[0].contains("needs --dev"));
    }

    #[test]
    fn smtp_needs_a_relay_a_sender_and_tls_off_loopback() {
        let lines = refused(&["--mailer", "smtp"], false);
        assert!(
            lines.iter().any(|l| l.starts_with("--smtp-url")),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.starts_with("--mail-from")),
            "{lines:?}"
        );
        let from = [
            "--mailer",
            "smtp",
            "--mail-from",
            "shop@example.com",
            "--smtp-url",
        ];
        let with = |url: &'static str| [&from[..], &[url]].concat();
        let plain = refused(&with("smtp://relay.example.com"), false);
        assert!(plain[0].contains("plain smtp://"), "{plain:?}");
        let creds = refused(&with("smtps://u:pw@relay.example.com"), false);
        assert!(creds[0].contains("carries credentials"), "{creds:?}");
        for ok in [
            "smtps://relay.example.com",
            "smtp://relay.example.com:587?tls=required",
            "smtp://127.0.0.1:2525",
        ] {
            assert!(
                Mailer::from_args(&mail(&with(ok)), false, 30_000).is_ok(),
                "{ok}"
            );
        }
        let slow = [
            &with("smtps://relay.example.com")[..],
            &["--smtp-timeout-ms", "30000"],
        ]
        .concat();
        assert!(refused(&slow, false)[0].starts_with("--smtp-timeout-ms"));
    }

    #[test]
    fn a_receipt_goes_to_a_mail_address_only() {
        assert!(recipient(Some("alice@example.com")).is_some());
        assert!(recipient(Some("Alice <alice@example.com>")).is_some());
        for none in [None, Some(""), Some("1 Main Street, Springfield")] {
            assert!(recipient(none).is_none(), "{none:?}");
        }
    }

    #[test]
    fn the_password_needs_its_user_and_never_shows_in_debug() {
        let base = ["--mailer", "smtp", "--mail-from", "shop@example.com"];
        let url = ["--smtp-url", "smtps://relay.example.com"];
        let pw = ["--smtp-password", "hunter2-smtp-secret"];
        let lines = refused(&[&base[..], &url, &pw].concat(), false);
        assert!(lines[0].contains("go together"), "{lines:?}");
        let args = mail(&[&base[..], &url, &pw, &["--smtp-username", "shop"]].concat());
        let mailer = Mailer::from_args(&args, false, 30_000).expect("valid");
        for shown in [format!("{args:?}"), format!("{mailer:?}")] {
            assert!(!shown.contains("hunter2"), "{shown}");
        }
    }
}
