"""Which requests a local service answers: the trusted-host and cross-site checks both services share.

A web page the user opens can make the browser send requests to `127.0.0.1`: a "simple" POST
(text/plain, a form) needs no permission, and a DNS-rebinding page (a name of the attacker's that
first resolves to their server, then to 127.0.0.1) even reads the answers, because to the browser it
is the page's own origin. Two checks stop both, as Jupyter's and Vite's servers do:

    the Host header     must name this service: `localhost`, an IP address (an address cannot be
                        rebound: a page reaching it by address is that address's own), the name it
                        binds to, or a name the operator allows (`AccessConfig.allowed_hosts`)
    a state-changing    request (any method but GET, HEAD and OPTIONS, and every WebSocket) must not be
                        cross-site: its Origin is the service's own (same host and port) or one the
                        operator allows (`AccessConfig.allowed_origins`); without an Origin,
                        `Sec-Fetch-Site: cross-site` refuses it

The reward service also takes JSON bodies only (`json_body_refusal`): a page can send text/plain or a
form without asking, never `application/json`. Everything here is pure: strings in, a `Refusal` out;
`reflectrm.serving.guard` applies it to every request of an ASGI application.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from reflectrm.errors import ConfigError

LOOPBACK_NAMES = ("localhost",)
"""Host names that always mean this machine (IP addresses are allowed as such, see the module)."""

ANY = "*"
WILDCARD_BINDS = ("", "0.0.0.0", "::", "[::]")
"""Bind addresses that mean every interface: no name a client uses can be read from them."""

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
"""Methods that change nothing: a cross-site GET (a link followed from another site) is answered."""

DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443"}
_NAME = re.compile(r"^\.?[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is refused, as its HTTP status and one line naming the fix."""

    status: int
    message: str


@dataclass(frozen=True, slots=True)
class AccessConfig:
    """Which hosts and pages a local service answers, beyond its own (see the module)."""

    # a name clients reach this service by, beyond localhost and IP addresses (a proxy's or a LAN name);
    # ".example.com" is the name and its subdomains; "*" any (when a proxy in front checks Host)
    allowed_hosts: tuple[str, ...] = ()
    # an origin (scheme://host[:port]) whose pages may send requests that change something; "*" any
    allowed_origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:  # entries normalised as requests are read; a malformed one is a ConfigError
        hosts = _entries(self.allowed_hosts, "allowed_hosts")
        origins = _entries(self.allowed_origins, "allowed_origins")
        object.__setattr__(self, "allowed_hosts", tuple(_allowed_host(h) for h in hosts))
        object.__setattr__(self, "allowed_origins", tuple(_allowed_origin(o) for o in origins))

    def serving(self, bind_host: str) -> AccessConfig:
        """This config with the name the service binds to allowed too (clients reach it by that name)."""
        host = bind_host.strip().lower().rstrip(".")
        if host in (*WILDCARD_BINDS, *LOOPBACK_NAMES, *self.allowed_hosts) or _ip(host.strip("[]")) is not None:
            return self
        return AccessConfig(allowed_hosts=(*self.allowed_hosts, host), allowed_origins=self.allowed_origins)

    def host_refusal(self, host: str | None) -> Refusal | None:
        """403 unless the Host header names this service (None: there is none)."""
        if ANY in self.allowed_hosts:
            return None
        name = host_name(host) if host is not None else None
        if name is not None and (name in LOOPBACK_NAMES or _ip(name) is not None or self._allows_name(name)):
            return None
        if host is None:
            return Refusal(403, "the request has no Host header: send the name or address this service is reached by")
        return Refusal(403, f"Host {_quoted(host)} is not a name of this service (a DNS-rebinding page sends its "
                            "own): reach it by localhost or an IP address, or allow the name with --allowed-host")

    def origin_refusal(self, method: str, *, host: str | None, origin: str | None,
                       fetch_site: str | None) -> Refusal | None:
        """403 for a request that changes something and comes from a page of another site."""
        if method.upper() in SAFE_METHODS or ANY in self.allowed_origins:
            return None
        if origin is None:
            if (fetch_site or "").strip().lower() == "cross-site":
                return Refusal(403, "a cross-site request (Sec-Fetch-Site: cross-site) may not change anything "
                                    "here: send it from this service's own page, or without a browser")
            return None
        seen = normal_origin(origin)
        if seen is not None and (seen in self.allowed_origins or _same_host(seen, host)):
            return None
        if seen is None and origin.strip() == "null" and "null" in self.allowed_origins:
            return None  # a sandboxed frame or a file:// page, allowed by name
        return Refusal(403, f"Origin {_quoted(origin)} is not this service's: a page of another site may not "
                            "send requests that change something here; allow it with --allowed-origin")

    def refusal(self, method: str, *, host: str | None, origin: str | None = None,
                fetch_site: str | None = None) -> Refusal | None:
        """The first check a request fails (host, then origin), or None when it may go on."""
        return self.host_refusal(host) or self.origin_refusal(method, host=host, origin=origin, fetch_site=fetch_site)

    def _allows_name(self, name: str) -> bool:
        return any(name == a or (a.startswith(".") and (name == a[1:] or name.endswith(a)))
                   for a in self.allowed_hosts)


def json_body_refusal(content_type: str | None) -> Refusal | None:
    """415 unless the body is declared `application/json` (a charset, if given, must be UTF-8).

    A page can POST text/plain, a form or multipart without asking; `application/json` needs the
    browser to ask first (a CORS preflight), which this service never grants to a foreign page.
    """
    media, _, params = (content_type or "").partition(";")
    if media.strip().lower() != "application/json":
        shown = "no Content-Type" if content_type is None else f"Content-Type {_quoted(content_type)}"
        return Refusal(415, f"{shown}: send the body as JSON with Content-Type: application/json")
    for param in filter(None, (p.strip() for p in params.split(";"))):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            return Refusal(415, f"Content-Type {_quoted(content_type)}: JSON is UTF-8; send charset=utf-8 or none")
    return None


def host_name(host: str) -> str | None:
    """The name or address of a Host header, lower case, without port, brackets or a final dot; None if malformed."""
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8000
        inside, bracket, port = host[1:].partition("]")
        name = inside if bracket and _port_ok(port, after_colon=True) else None
    elif host.count(":") > 1:  # a bare IPv6 address (no port can follow it)
        name = host
    else:
        name, _, port = host.partition(":")
        name = name if _port_ok(port) else None
    if name is None:
        return None
    name = name[:-1] if name.endswith(".") else name
    return name if name and (_ip(name) is not None or _NAME.match(name)) else None


def normal_origin(origin: str) -> str | None:
    """An Origin as scheme://host[:port], lower case, default port dropped; None when it is no origin ("null")."""
    text = origin.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:  # a port that is not a number, a bracket left open
        return None
    if not parts.scheme or not parts.hostname or parts.path not in ("", "/") or parts.query or parts.fragment \
            or parts.username is not None or "@" in parts.netloc:
        return None
    name = parts.hostname.rstrip(".")
    if _ip(name) is None and not _NAME.match(name):
        return None
    shown = f"[{name}]" if ":" in name else name
    if port is not None and str(port) != DEFAULT_PORTS.get(parts.scheme.lower()):
        shown += f":{port}"
    return f"{parts.scheme.lower()}://{shown}"


def listens_beyond_loopback(bind_host: str) -> bool:
    """Whether a service bound to `bind_host` can be reached from other machines (a name other than localhost may)."""
    host = bind_host.strip().lower().strip("[]").rstrip(".")
    address = _ip(host)
    return not (host in LOOPBACK_NAMES or (address is not None and address.is_loopback))


def exposure_warning(bind_host: str, *, service: str, guarded: bool, missing: str, fix: str) -> str | None:
    """One line for the log when `service` listens beyond loopback and is not `guarded`; None otherwise.

    `missing` names the guard ("a bearer token", "a login"); `fix` says how to turn it on."""
    if guarded or not listens_beyond_loopback(bind_host):
        return None
    return (f"{service} listens on {bind_host or 'every interface'} without {missing}: anyone who can reach it "
            f"there can use it; {fix}, or bind to 127.0.0.1")


# --- reading the configured entries --------------------------------------------------------------------------------


def _entries(values: Sequence[str] | str, field: str) -> list[str]:
    if isinstance(values, str):
        raise ConfigError(f"{field} must be a tuple of strings, got the string {values!r}: give ({values!r},)")
    return [v.strip() for v in values if v.strip()]


def _allowed_host(entry: str) -> str:
    """A configured host, as `host_refusal` compares it; a port, scheme or path in it is refused."""
    if entry == ANY:
        return entry
    text = entry.lower().rstrip(".")
    address = _ip(text.strip("[]"))
    if address is not None:
        return str(address)
    if "/" in text or ":" in text or not _NAME.match(text):
        raise ConfigError(f"allowed_hosts entry {entry[:80]!r} is not a host name: give the name alone (no scheme, "
                          "port or path), e.g. lab.example.com, .example.com for its subdomains, or * for any")
    return text


def _allowed_origin(entry: str) -> str:
    """A configured origin, normalised as `normal_origin` writes a request's."""
    if entry in (ANY, "null"):
        return entry
    origin = normal_origin(entry)
    if origin is None or "://" not in entry:
        raise ConfigError(f"allowed_origins entry {entry[:80]!r} is not an origin: give scheme://host[:port] as the "
                          "browser shows it (e.g. https://lab.example.com), or * for any")
    return origin


# --- helpers -------------------------------------------------------------------------------------------------------


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _port_ok(port: str, *, after_colon: bool = False) -> bool:
    """An empty port, or digits (`after_colon`: what follows "]" must be "" or ":digits")."""
    if after_colon:
        if not port:
            return True
        if not port.startswith(":"):
            return False
        port = port[1:]
    return port == "" or (port.isascii() and port.isdigit() and len(port) <= 5)


def _same_host(origin: str, host: str | None) -> bool:
    """Whether a normalised origin names the same host and port as the request's Host header."""
    if host is None:
        return False
    scheme, _, netloc = origin.partition("://")
    name = host_name(host)
    port = _port_of(host)
    if name is None:
        return False
    shown = f"[{name}]" if ":" in name else name
    if port and port != DEFAULT_PORTS.get(scheme):
        shown += f":{port}"
    return netloc == shown


def _port_of(host: str) -> str:
    host = host.strip()
    if host.startswith("["):
        return host.partition("]")[2].removeprefix(":")
    return "" if host.count(":") != 1 else host.partition(":")[2]


def _quoted(value: str) -> str:
    """A header value as shown in a message: quoted, control characters escaped, at most 80 characters."""
    return repr(value[:80] + ("..." if len(value) > 80 else ""))
