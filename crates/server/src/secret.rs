//! Values that must never reach a log line or a `{:?}`: secrets ([`Secret`], shown as
//! `<redacted>`) and URLs that may carry credentials ([`SecretUrl`], shown without their
//! userinfo and query). The config structs hold these types, so their derived `Debug` is
//! redacting by construction and a new secret flag cannot forget it.

use std::convert::Infallible;
use std::fmt;
use std::str::FromStr;

/// A secret flag value (a session or webhook secret, a token, an API key).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// The value, for the one place that uses it (a MAC key, a header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// Derefs to the value, so it passes wherever a `&str` goes; only `Debug` hides it.
impl std::ops::Deref for Secret {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl FromStr for Secret {
    type Err = Infallible;
    fn from_str(s: &str) -> Result<Self, Infallible> {
        Ok(Self(s.to_owned()))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A URL flag value that may carry a user name, a password or a key in its query.
/// `Display` and `Debug` show [`redact_url`]'s form; [`SecretUrl::expose`] the real one.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// The URL as given, for the client that connects with it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// Derefs to the URL as given (as [`Secret`] does).
impl std::ops::Deref for SecretUrl {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl FromStr for SecretUrl {
    type Err = Infallible;
    fn from_str(s: &str) -> Result<Self, Infallible> {
        Ok(Self(s.to_owned()))
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", redact_url(&self.0))
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

/// `url` fit for a log line: userinfo becomes `***@`, a query `?***`; a URL that does not
/// parse keeps only its scheme (it could hold anything).
pub fn redact_url(url: &str) -> String {
    let Ok(mut u) = reqwest::Url::parse(url) else {
        return match url.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://…"),
            None => "(unparsable URL)".to_owned(),
        };
    };
    let had_userinfo = !u.username().is_empty() || u.password().is_some();
    let had_query = u.query().is_some();
    // Both setters fail only for URLs that cannot have userinfo (`sqlite:`): nothing to hide.
    let _ = u.set_password(None);
    let _ = u.set_username("");
    u.set_query(None);
    let mut s = String::from(u.as_str());
    if had_userinfo {
        if let Some(at) = s.find("://") {
            s.insert_str(at + 3, "***@");
        }
    }
    if had_query {
        s.push_str("?***");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_queries_never_show() {
        for (url, shown) in [
            (
                "https://sk_live_abc:pw@psp.example:8443/v1",
                "https://***@psp.example:8443/v1",
            ),
            ("https://psp.example/v1", "https://psp.example/v1"),
            (
                "postgres://app:hunter2@db/pay?sslmode=verify-full",
                "postgres://***@db/pay?***",
            ),
            ("redis://:pw@cache:6379/0", "redis://***@cache:6379/0"),
            ("sqlite://.data/payonce.db", "sqlite://.data/payonce.db"),
            ("http://[bad", "http://…"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
            let u: SecretUrl = url.parse().unwrap();
            assert_eq!(u.to_string(), shown);
            assert!(!format!("{u:?}").contains("pw") && !format!("{u:?}").contains("hunter2"));
            assert_eq!(u.expose(), url);
        }
        let s: Secret = "whsec_topsecret".parse().unwrap();
        assert_eq!(format!("{s:?}"), "<redacted>");
        assert_eq!(s.expose(), "whsec_topsecret");
    }
}
