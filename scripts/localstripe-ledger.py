#!/usr/bin/env python3
"""Prints how many PaymentIntents of one order succeeded at localstripe (or Stripe's test
mode): the ledger of the Stripe conformance target (scripts/conformance.sh, `stripe`).

Usage: localstripe-ledger.py BASE_URL ORDER_ID   (the secret key in STRIPE_SECRET_KEY)

There is no search by metadata (localstripe has none), so it walks the whole list, page by
page (`starting_after`), and keeps the intents whose `metadata.order_id` is the order.
Standard library only: it runs on the machine's python3, not in localstripe's venv.
"""
import base64
import json
import os
import sys
import urllib.request

MAX_PAGES = 200  # 20,000 intents: far more than one conformance run makes


def page(base, key, after):
    url = f"{base}/v1/payment_intents?limit=100"
    if after:
        url += f"&starting_after={after}"
    auth = base64.b64encode(f"{key}:".encode()).decode()
    req = urllib.request.Request(url, headers={"Authorization": f"Basic {auth}"})
    with urllib.request.urlopen(req, timeout=20) as res:
        return json.load(res)


def main():
    base, order = sys.argv[1].rstrip("/"), sys.argv[2]
    key = os.environ.get("STRIPE_SECRET_KEY", "sk_test_payonce")
    succeeded, after = 0, None
    for _ in range(MAX_PAGES):
        body = page(base, key, after)
        data = body.get("data", [])
        succeeded += sum(
            1
            for i in data
            if (i.get("metadata") or {}).get("order_id") == order and i.get("status") == "succeeded"
        )
        if not body.get("has_more") or not data:
            print(succeeded)
            return
        after = data[-1]["id"]
    sys.exit(f"more than {MAX_PAGES} pages of intents")


if __name__ == "__main__":
    main()
