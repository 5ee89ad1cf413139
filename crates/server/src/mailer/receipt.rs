//! A receipt as the customer reads it: the order's lines, the amount and currency the
//! payment was charged, and the payment id, as plain text and as HTML (one
//! `multipart/alternative` message), all from the stored rows (`store::jobs::ReceiptFacts`),
//! never recomputed. Pure: no I/O.

use crate::store::jobs::ReceiptFacts;
use payonce_rules::receipt::message_id;

/// One receipt, ready for a mailer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outgoing {
    pub subject: String,
    pub text: String,
    pub html: String,
    /// The same on every delivery of this payment's receipt.
    pub message_id: String,
}

/// The receipt of `facts`, its `Message-ID` naming `domain`.
pub(crate) fn compose(facts: &ReceiptFacts, domain: &str) -> Outgoing {
    let money = |minor: i64| amount(minor, &facts.currency);
    let subject = format!("Receipt for order {}", facts.order_id);
    let mut text = format!(
        "Thank you for your order {}.\n\nWe received your payment of {}.\n\n",
        facts.order_id,
        money(facts.amount)
    );
    let mut rows = String::new();
    for l in &facts.items {
        text.push_str(&format!(
            "  {} x {} ({})  {}\n",
            l.quantity,
            l.name,
            l.sku,
            money(l.line_total)
        ));
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            l.quantity,
            escape(&l.name),
            escape(&money(l.line_total))
        ));
    }
    text.push_str(&format!(
        "\nTotal paid: {}\nPayment: {}\n",
        money(facts.amount),
        facts.payment_id
    ));
    let html = format!(
        "<!doctype html><html><body><p>Thank you for your order {order}.</p>\
         <table>{rows}</table><p>Total paid: <strong>{total}</strong></p>\
         <p>Payment: {payment}</p></body></html>",
        order = escape(&facts.order_id),
        total = escape(&money(facts.amount)),
        payment = escape(&facts.payment_id),
    );
    Outgoing {
        subject,
        text,
        html,
        message_id: message_id(&facts.payment_id, domain),
    }
}

/// `minor` units of `currency` as `12.34 EUR`: two decimals, the exponent of every
/// currency the catalog sells (`crates/server/src/catalog.rs`).
fn amount(minor: i64, currency: &str) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let m = minor.unsigned_abs();
    format!(
        "{sign}{}.{:02} {}",
        m / 100,
        m % 100,
        currency.to_uppercase()
    )
}

/// Text as HTML: the five characters that could open markup escaped.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_protocol::OrderLine;

    fn facts() -> ReceiptFacts {
        ReceiptFacts {
            order_id: "ord_1".into(),
            user_id: "alice".into(),
            items: vec![OrderLine {
                sku: "mug".into(),
                name: "Mug <enamel>".into(),
                quantity: 2,
                unit_price: 1250,
                line_total: 2500,
            }],
            address: Some("alice@example.com".into()),
            payment_id: "pay_9".into(),
            amount: 2250,
            currency: "eur".into(),
        }
    }

    #[test]
    fn the_receipt_says_what_was_charged_in_both_parts() {
        let r = compose(&facts(), "shop.test");
        assert!(r.text.contains("Total paid: 22.50 EUR"), "{}", r.text);
        assert!(
            r.text.contains("2 x Mug <enamel> (mug)  25.00 EUR"),
            "{}",
            r.text
        );
        assert!(r.text.contains("pay_9"));
        assert!(r.html.contains("Mug &lt;enamel&gt;"), "{}", r.html);
        assert!(r.html.contains("22.50 EUR"));
        assert_eq!(r.message_id, "<receipt.pay_9@shop.test>");
    }
}
