"""Login: the configured users' passwords, with failed logins throttled per user and per address.

Gradio calls `LoginGuard.check(user, password)` for each login; the address is not passed to it, so
`LoginThrottleMiddleware` counts failed logins per client address (a 400 from the login route) and
answers 429 while an address is locked out. Both lock out for `lock_s` after `max_failures`
failures within `window_s`.

The client address is the one the server's ASGI layer (uvicorn) reports, and uvicorn takes it from
`X-Forwarded-For` when the peer is a proxy it trusts: by default loopback, so any local client (or
a proxy that passes the header on) could rotate the header past the throttle. `trust_proxies`
makes the operator's list (`REFLECTRM_TRUSTED_PROXIES`, default none) uvicorn's whole list.
"""

from __future__ import annotations

import hmac
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import HTTPException
from starlette.responses import JSONResponse

MAX_FAILURES = 5  # failed logins per user (or per address) within WINDOW_S before a lock-out
WINDOW_S = 60.0
LOCK_S = 60.0


FORWARDED_ALLOW_IPS = "FORWARDED_ALLOW_IPS"  # how uvicorn (which Gradio starts) reads its trusted proxies


def trust_proxies(proxies: Sequence[str]) -> None:
    """Believe `X-Forwarded-For` only from `proxies` (none: from nobody) in the server Gradio starts next.

    uvicorn reads the list from its environment variable when Gradio builds its config, and trusts
    loopback when it is unset; an empty entry matches no peer.
    """
    os.environ[FORWARDED_ALLOW_IPS] = ",".join(proxies)


class FailureCounter:
    """Failures per key within a sliding window; a key with `max_failures` of them is locked."""

    def __init__(self, *, max_failures: int = MAX_FAILURES, window_s: float = WINDOW_S, lock_s: float = LOCK_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_failures, self.window_s, self.lock_s, self.clock = max_failures, window_s, lock_s, clock
        self._lock = threading.Lock()
        self._failures: dict[str, list[float]] = {}

    def locked_for(self, key: str) -> float:
        """Seconds `key` stays locked out (0 when it is not)."""
        now = self.clock()
        with self._lock:
            recent = [t for t in self._failures.get(key, []) if now - t < max(self.window_s, self.lock_s)]
            self._failures[key] = recent
            if len(recent) < self.max_failures:
                return 0.0
            return max(0.0, recent[-1] + self.lock_s - now)

    def fail(self, key: str) -> None:
        with self._lock:
            self._failures.setdefault(key, []).append(self.clock())

    def clear(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)


class LoginGuard:
    """The `auth` callable for `Blocks.launch`: checks a password, throttling failures per user."""

    def __init__(self, credentials: Sequence[tuple[str, str]], counter: FailureCounter | None = None) -> None:
        self._passwords = dict(credentials)
        self.counter = counter or FailureCounter()

    def check(self, user: str, password: str) -> bool:
        wait = self.counter.locked_for(f"user:{user}")
        if wait:
            raise HTTPException(status_code=429, detail=f"too many failed logins for {user!r}: try again in "
                                                        f"{wait:.0f} s")
        known = self._passwords.get(user)
        ok = known is not None and hmac.compare_digest(known.encode(), password.encode())
        if ok:
            self.counter.clear(f"user:{user}")
        else:
            self.counter.fail(f"user:{user}")
        return ok


class LoginThrottleMiddleware:
    """ASGI middleware: failed logins counted per client address; a locked-out address gets 429."""

    def __init__(self, app: Any, counter: FailureCounter) -> None:
        self.app, self.counter = app, counter

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or not scope.get("path", "").endswith("/login"):
            await self.app(scope, receive, send)
            return
        key = f"address:{(scope.get('client') or ('?',))[0]}"
        wait = self.counter.locked_for(key)
        if wait:
            response = JSONResponse({"detail": f"too many failed logins from this address: try again in "
                                               f"{wait:.0f} s"}, status_code=429)
            await response(scope, receive, send)
            return

        async def watch(message: dict) -> None:
            if message["type"] == "http.response.start":
                if message["status"] in (400, 401, 429):
                    self.counter.fail(key)
                elif message["status"] == 200:
                    self.counter.clear(key)
            await send(message)

        await self.app(scope, receive, watch)
