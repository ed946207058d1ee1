"""Which server of an OpenAI-compatible fleet gets the next request: bookkeeping only, no HTTP.

The backend asks `acquire` for a server, sends, and reports the outcome (`answered` or `failed`):

* least loaded: a request goes to the server with the fewest requests in flight (ties in turn), at most
  `max_in_flight` each, so a slow server keeps fewer and takes a share of the work in proportion to its speed
  (`round-robin` hands servers out in turn and waits for the one whose turn it is, as before);
* a server that fails (connection error, timeout, HTTP 5xx) while up is taken out for `cooldown_s`, doubled on
  each further failure in a row up to `cooldown_max_s`; when its cool-down ends the next `acquire` hands it out
  as a probe (`Pick.probe`: the backend GETs /health, or /v1/models), and only a probe that passes (`probed`)
  gives it work again. Failures of requests sent before it went down count as errors, not as more failures;
* when every server is cooling down, the one due first is probed at once (`Pick.last_resort`) rather than
  refusing the request: the backend's retry limit, not the cool-down, decides when to give up.

Per-server figures (in flight, requests, errors, failures in a row, state, latency) are kept here under one lock,
logged as a server goes down and comes back, and exposed as Prometheus lines (`metric_lines`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

ROUTINGS = ("least-loaded", "round-robin")
LATENCY_WINDOW = 256  # the recent answers each server's p50/p95 are taken over
UP, COOLING, PROBING = "up", "cooling", "probing"


@dataclass(frozen=True, slots=True)
class Pick:
    """The server a request goes to; with `probe`, check it first (GET /health) and report `probed`."""

    server: int
    probe: bool = False
    last_resort: bool = False  # every server is down: a failed probe costs the request one of its tries


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerStats:
    """One server's figures at one moment (`Fleet.snapshot`)."""

    url: str  # without credentials
    state: str  # up, cooling or probing
    cooling_s: float  # seconds of cool-down left (0 unless cooling)
    in_flight: int
    requests: int  # requests answered or failed
    errors: int  # of which failed (connection error, timeout, HTTP 5xx)
    consecutive_failures: int  # failures and failed probes in a row; an answer resets it
    latency_count: int
    latency_mean_s: float | None
    latency_p50_s: float | None  # over the last LATENCY_WINDOW answers
    latency_p95_s: float | None


class _Server:
    __slots__ = ("url", "state", "until", "in_flight", "requests", "errors", "failures", "down_since",
                 "latency_sum", "latency_count", "recent")

    def __init__(self, url: str) -> None:
        self.url, self.state, self.until, self.down_since = url, UP, 0.0, 0.0
        self.in_flight = self.requests = self.errors = self.failures = self.latency_count = 0
        self.latency_sum = 0.0
        self.recent: deque[float] = deque(maxlen=LATENCY_WINDOW)


def public_url(url: str) -> str:
    """`url` without a user name or password (what logs and metrics may show)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


class Fleet:
    """The routing state of a fleet of servers, shared by every request thread (one lock).

    Args:
        urls: each server's API root, in the order the user gave them.
        max_in_flight: requests one server may hold at once.
        cooldown_s: first cool-down of a failing server; doubles per failure in a row.
        cooldown_max_s: the longest cool-down.
        routing: "least-loaded" or "round-robin".
        clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(self, urls: Sequence[str], *, max_in_flight: int, cooldown_s: float, cooldown_max_s: float,
                 routing: str = "least-loaded", clock: Callable[[], float] = time.monotonic) -> None:
        if routing not in ROUTINGS:
            raise ValueError(f"routing {routing!r} is not one of {', '.join(ROUTINGS)}")
        self._servers = [_Server(public_url(u)) for u in urls]
        self.max_in_flight, self.cooldown_s, self.cooldown_max_s = max_in_flight, cooldown_s, cooldown_max_s
        self.routing, self._clock = routing, clock
        self._cursor = 0  # where the next tie (or turn) starts
        self._cond = threading.Condition()

    # -- choosing -----------------------------------------------------------------------------------

    def acquire(self, *, avoid: int | None = None) -> Pick:
        """A server for one request (its slot taken), waiting while every server that is up is full."""
        with self._cond:
            turn: int | None = None
            while True:
                pick, turn = self._choose(avoid, turn)
                if pick is not None:
                    return pick
                self._cond.wait(timeout=self._next_due_s())

    def choose(self, *, avoid: int | None = None) -> Pick | None:
        """`acquire` without waiting: None when the request has to wait for a slot or a probe's outcome."""
        with self._cond:
            return self._choose(avoid, None)[0]

    def _choose(self, avoid: int | None, turn: int | None) -> tuple[Pick | None, int | None]:
        now, servers = self._clock(), self._servers
        for k, s in enumerate(servers):
            if s.state == COOLING and now >= s.until:  # its cool-down is over: no work before a probe passes
                s.state = PROBING
                return Pick(k, probe=True), turn
        up = [k for k, s in enumerate(servers) if s.state == UP]
        if not up:
            cooling = [k for k, s in enumerate(servers) if s.state == COOLING]
            if len(cooling) < len(servers):
                return None, turn  # a probe is under way: its outcome decides
            k = min(cooling, key=lambda k: servers[k].until)  # every server is down: try the one due first now
            servers[k].state = PROBING
            return Pick(k, probe=True, last_resort=True), turn
        if self.routing == "round-robin":
            if turn not in up:
                turn = self._in_turn([k for k in up if k != avoid] or up)
            return (self._take(turn), turn) if servers[turn].in_flight < self.max_in_flight else (None, turn)
        free = [k for k in up if servers[k].in_flight < self.max_in_flight]
        free = [k for k in free if k != avoid] or free  # a retry goes elsewhere when it can
        if not free:
            return None, turn
        least = min(servers[k].in_flight for k in free)
        return self._take(self._in_turn([k for k in free if servers[k].in_flight == least])), turn

    def _in_turn(self, candidates: list[int]) -> int:
        n = len(self._servers)
        k = min(candidates, key=lambda k: (k - self._cursor) % n)
        self._cursor = (k + 1) % n
        return k

    def _take(self, k: int) -> Pick:
        self._servers[k].in_flight += 1
        return Pick(k)

    def _next_due_s(self) -> float:
        """How long a waiting request may sleep: until the next cool-down ends (at most a second)."""
        now = self._clock()
        due = [s.until - now for s in self._servers if s.state == COOLING]
        return min([1.0, *(max(0.001, d) for d in due)])

    # -- outcomes -----------------------------------------------------------------------------------

    def answered(self, k: int, *, latency_s: float) -> None:
        """Server k answered (any answer but a 5xx: a 400 is the request's fault, not the server's)."""
        with self._cond:
            s = self._servers[k]
            s.in_flight -= 1
            s.requests += 1
            s.failures = 0
            s.latency_count += 1
            s.latency_sum += latency_s
            s.recent.append(latency_s)
            self._cond.notify_all()

    def failed(self, k: int, *, reason: str) -> None:
        """A request to server k failed (connection error, timeout, 5xx): it cools down unless already down."""
        with self._cond:
            s = self._servers[k]
            s.in_flight -= 1
            s.requests += 1
            s.errors += 1
            if s.state == UP:  # requests sent before it went down fail too: one failure, not one per request
                s.down_since = self._clock()
                self._cool(s, reason)
            self._cond.notify_all()

    def probed(self, k: int, *, ok: bool, reason: str = "") -> None:
        """The probe of server k passed (it gets work again) or failed (a longer cool-down)."""
        with self._cond:
            s = self._servers[k]
            if ok:
                s.state = UP
                log.warning("server %s is back: its probe passed after %.1fs down", s.url,
                            self._clock() - s.down_since)
            else:
                self._cool(s, reason or "its probe failed")
            self._cond.notify_all()

    def _cool(self, s: _Server, reason: str) -> None:
        s.failures += 1
        wait = min(self.cooldown_max_s, self.cooldown_s * 2 ** min(s.failures - 1, 30))
        s.state, s.until = COOLING, self._clock() + wait
        log.warning("server %s is down (%s): no requests for %.1fs, then a probe (GET /health)", s.url, reason, wait)

    # -- figures ------------------------------------------------------------------------------------

    def snapshot(self) -> tuple[ServerStats, ...]:
        with self._cond:
            now = self._clock()
            return tuple(_stats(s, now) for s in self._servers)

    def down_summary(self) -> str | None:
        """"A (cooling down 8.0s more), B (probing)" when every server is down; None while one is up."""
        stats = self.snapshot()
        if any(s.state == UP for s in stats):
            return None
        return ", ".join(f"{s.url} ({'probing' if s.state == PROBING else f'cooling down {s.cooling_s:.1f}s more'})"
                         for s in stats)

    def metric_lines(self) -> list[str]:
        """Prometheus text lines, one series per server labelled by its URL (credentials removed)."""
        lines = []
        for s in self.snapshot():
            label = 'server="' + s.url.replace("\\", "\\\\").replace('"', '\\"') + '"'
            lines += [f"reflectrm_upstream_up{{{label}}} {int(s.state == UP)}",
                      f'reflectrm_upstream_state{{{label},state="{s.state}"}} 1',
                      f"reflectrm_upstream_cooldown_seconds{{{label}}} {s.cooling_s:.3f}",
                      f"reflectrm_upstream_in_flight{{{label}}} {s.in_flight}",
                      f"reflectrm_upstream_requests_total{{{label}}} {s.requests}",
                      f"reflectrm_upstream_errors_total{{{label}}} {s.errors}",
                      f"reflectrm_upstream_consecutive_failures{{{label}}} {s.consecutive_failures}",
                      f"reflectrm_upstream_latency_seconds_count{{{label}}} {s.latency_count}",
                      f"reflectrm_upstream_latency_seconds_sum{{{label}}} "
                      f"{(s.latency_mean_s or 0.0) * s.latency_count:.6f}"]
            for q, v in (("0.5", s.latency_p50_s), ("0.95", s.latency_p95_s)):
                if v is not None:
                    lines.append(f'reflectrm_upstream_latency_seconds{{{label},quantile="{q}"}} {v:.6f}')
        return lines


def _stats(s: _Server, now: float) -> ServerStats:
    recent = sorted(s.recent)
    return ServerStats(url=s.url, state=s.state, cooling_s=max(0.0, s.until - now) if s.state == COOLING else 0.0,
                       in_flight=s.in_flight, requests=s.requests, errors=s.errors, consecutive_failures=s.failures,
                       latency_count=s.latency_count,
                       latency_mean_s=s.latency_sum / s.latency_count if s.latency_count else None,
                       latency_p50_s=_quantile(recent, 0.5), latency_p95_s=_quantile(recent, 0.95))


def _quantile(ordered: list[float], q: float) -> float | None:
    """The nearest-rank quantile of sorted values; None when there are none."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
