"""Starts localstripe with one thing of Stripe's API it lacks: `GET /v1/payment_intents`
filtered by `created[gte|gt|lte|lt]` (Unix seconds), the list the provider sweep reads
(crates/server/src/provider/stripe.rs, `list_since`). Everything else is localstripe's own.
Run by crates/testkit/src/localstripe.rs with the venv's python3: python3 -c THIS --port N
--from-scratch.
"""
import operator
import sys

from localstripe import resources
from localstripe.server import start

_list_all = resources.StripeObject._api_list_all.__func__
_OPS = {"gte": operator.ge, "gt": operator.gt, "lte": operator.le, "lt": operator.lt}


def _intents(cls, url, created=None, limit=None, starting_after=None, **kwargs):
    li = _list_all(cls, url, limit=limit, starting_after=starting_after, **kwargs)
    if created is not None:
        if not isinstance(created, dict) or not set(created) <= set(_OPS):
            raise resources.UserError(400, "Bad request")
        for op, value in created.items():
            bound = resources.try_convert_to_int(value)
            li._list = [i for i in li._list if _OPS[op](i.created, bound)]
    return li


resources.PaymentIntent._api_list_all = classmethod(_intents)
sys.argv[0] = "localstripe"
sys.exit(start())
