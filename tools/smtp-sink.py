#!/usr/bin/env python3
"""A real SMTP server for the tests (aiosmtpd): every message it accepts is one file in
--dir, so a test counts what a relay received. crates/testkit/src/smtp.rs starts one per
test on a free port; scripts/bootstrap.sh installs aiosmtpd into .venv-smtp/.

--control FILE, read at each message's DATA, makes it answer like a relay in trouble:
  "451 N"  the next N messages get 451 (transient; the file counts down to "451 0")
  "550"    every message gets 550 (permanent)
  "hold"   the answer to a message's DATA waits (it prints "smtp-sink: holding") until the
           file says something else, then goes as that says
  absent, empty, or anything else: 250.
--user/--password require AUTH (PLAIN or LOGIN) with those credentials.
It prints "smtp-sink listening on 127.0.0.1:PORT" once it accepts connections.
"""

import argparse
import asyncio
import os
import signal
import sys

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


class Sink:
    def __init__(self, directory, control):
        self.directory = directory
        self.control = control
        self.count = 0

    def verdict(self):
        """The answer the control file asks for, counting a 451 down."""
        if not self.control or not os.path.exists(self.control):
            return None
        with open(self.control) as f:
            words = f.read().split()
        if words[:1] == ["550"]:
            return "550 5.7.1 refused by the test relay"
        if len(words) == 2 and words[0] == "451" and int(words[1]) > 0:
            with open(self.control, "w") as f:
                f.write(f"451 {int(words[1]) - 1}\n")
            return "451 4.3.0 try again later"
        return None

    def holding(self):
        if not self.control or not os.path.exists(self.control):
            return False
        with open(self.control) as f:
            return f.read().split()[:1] == ["hold"]

    async def handle_DATA(self, server, session, envelope):
        if self.holding():
            print("smtp-sink: holding", flush=True)
            while self.holding():
                await asyncio.sleep(0.02)
        refused = self.verdict()
        if refused:
            print(f"smtp-sink: {refused}", flush=True)
            return refused
        self.count += 1
        name = os.path.join(self.directory, f"{os.getpid()}-{self.count:06d}.eml")
        with open(name + ".tmp", "wb") as f:
            f.write(envelope.content if isinstance(envelope.content, bytes)
                    else envelope.content.encode())
        os.rename(name + ".tmp", name)
        print(f"smtp-sink: 250 for {envelope.rcpt_tos} as {name}", flush=True)
        return "250 2.0.0 OK"


def authenticator(user, password):
    def check(server, session, envelope, mechanism, data):
        ok = (isinstance(data, LoginPassword) and data.login.decode() == user
              and data.password.decode() == password)
        return AuthResult(success=ok)
    return check


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--control")
    p.add_argument("--user")
    p.add_argument("--password")
    a = p.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    extra = {}
    if a.user:
        extra = dict(auth_required=True, auth_require_tls=False,
                     authenticator=authenticator(a.user, a.password or ""))
    controller = Controller(Sink(a.dir, a.control), hostname="127.0.0.1", port=a.port, **extra)
    controller.start()
    print(f"smtp-sink listening on 127.0.0.1:{a.port}", flush=True)
    loop = asyncio.new_event_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, loop.stop)
    loop.run_forever()
    controller.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
