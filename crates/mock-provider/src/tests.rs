//! Unit tests of the configuration surface.

use crate::{ChaosSpecError, MockProvider, ProviderConfig, ProviderError, WebhookChaos};
use std::time::Duration;

#[test]
fn chaos_specs_parse() {
    assert_eq!("off".parse(), Ok(WebhookChaos::default()));
    assert_eq!("realistic".parse(), Ok(WebhookChaos::realistic()));
    let chaos: WebhookChaos = "dup=0.25, delay-ms=1500,reorder,reorder-ms=100,early"
        .parse()
        .unwrap();
    assert_eq!(
        chaos,
        WebhookChaos {
            duplicate_probability: 0.25,
            max_extra_delay: Duration::from_millis(1500),
            reorder: true,
            reorder_window: Duration::from_millis(100),
            deliver_before_response: true,
        }
    );
}

#[test]
fn bad_chaos_specs_name_the_item() {
    for (spec, item) in [
        ("dup=2", "dup=2"),
        ("dup=NaN", "dup=NaN"),
        ("reorder,delay-ms=-1", "delay-ms=-1"),
        ("loud", "loud"),
        ("early,", ""),
    ] {
        assert_eq!(
            spec.parse::<WebhookChaos>(),
            Err(ChaosSpecError {
                item: item.to_owned()
            }),
            "{spec}"
        );
    }
}

#[test]
fn a_webhook_url_must_be_absolute_http() {
    for url in [
        "",
        "localhost:8080/hook",
        "ftp://127.0.0.1/hook",
        "/webhooks/provider",
    ] {
        let err = MockProvider::new(ProviderConfig {
            webhook_url: Some(url.to_owned()),
            ..ProviderConfig::default()
        })
        .err();
        assert!(matches!(err, Some(ProviderError::WebhookUrl(_))), "{url:?}");
    }
    assert!(MockProvider::new(ProviderConfig {
        webhook_url: Some("http://127.0.0.1:9/webhooks/provider".to_owned()),
        ..ProviderConfig::default()
    })
    .is_ok());
}
