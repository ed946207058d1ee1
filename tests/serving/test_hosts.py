"""The trusted-host, cross-site and content-type rules both local services share (`reflectrm.serving.hosts`), as tables.

Each case names the trap it covers: a name that only looks local, a header a browser writes in another
case or spelling, a rule that matches a prefix instead of a name.
"""

from __future__ import annotations

import pytest

from reflectrm.errors import ConfigError
from reflectrm.serving.hosts import (AccessConfig, exposure_warning, host_name, json_body_refusal,
                                     listens_beyond_loopback, normal_origin)

CONFIGURED = AccessConfig(allowed_hosts=("lab.example.com", ".corp.example"))

HOSTS = [
    # loopback, as browsers and clients write it
    pytest.param("localhost", True, id="localhost"),
    pytest.param("localhost:8000", True, id="localhost-port"),
    pytest.param("127.0.0.1", True, id="ipv4-loopback"),
    pytest.param("127.0.0.1:8000", True, id="ipv4-loopback-port"),
    pytest.param("[::1]", True, id="ipv6-loopback-bracketed"),
    pytest.param("[::1]:8000", True, id="ipv6-loopback-port"),
    pytest.param("::1", True, id="ipv6-loopback-bare"),  # not valid HTTP, but no rebinding either
    pytest.param("LOCALHOST:8000", True, id="upper-case"),  # trap: a case-sensitive comparison refuses it
    pytest.param("LocalHost", True, id="mixed-case"),
    pytest.param("localhost.", True, id="trailing-dot"),  # the same name, fully qualified
    pytest.param("localhost.:8000", True, id="trailing-dot-port"),
    pytest.param("localhost:", True, id="empty-port"),  # RFC 9110 allows ":" with no digits
    pytest.param(" localhost ", True, id="surrounding-space"),
    # IP addresses: a page that reaches this service by address is that address's own page, never a rebinding
    pytest.param("127.0.0.2:8000", True, id="other-loopback-address"),
    pytest.param("192.168.1.20:7860", True, id="lan-address"),
    pytest.param("[2001:db8::1]:7860", True, id="ipv6-address"),
    pytest.param("0.0.0.0:8000", True, id="wildcard-address"),  # cross-site requests to it meet the origin check
    # configured names
    pytest.param("lab.example.com", True, id="configured"),
    pytest.param("LAB.example.com.:443", True, id="configured-case-dot-port"),
    pytest.param("corp.example", True, id="configured-suffix-itself"),
    pytest.param("a.b.corp.example", True, id="configured-suffix-subdomain"),
    pytest.param("evilcorp.example", False, id="suffix-without-dot"),  # trap: endswith("corp.example")
    pytest.param("lab.example.com.evil.com", False, id="configured-name-as-prefix"),
    pytest.param("example.com", False, id="parent-of-configured"),
    # rebinding names and other foreign hosts
    pytest.param("evil.com", False, id="foreign"),
    pytest.param("evil.com:8000", False, id="foreign-port"),
    pytest.param("127.0.0.1.evil.com", False, id="address-as-prefix"),  # trap: startswith("127.0.0.1")
    pytest.param("127.0.0.1.nip.io", False, id="wildcard-dns-service"),
    pytest.param("localhost.attacker", False, id="localhost-as-prefix"),
    pytest.param("localhost.evil.com", False, id="localhost-subdomain-of-foreign"),
    pytest.param("evil-localhost", False, id="localhost-as-suffix"),
    pytest.param("app.localhost", False, id="subdomain-of-localhost"),  # only the exact name is trusted
    pytest.param("127.1", False, id="short-address"),  # browsers write 127.0.0.1; a resolver may not
    # malformed
    pytest.param("", False, id="empty"),
    pytest.param(None, False, id="missing"),
    pytest.param("localhost:abc", False, id="port-not-a-number"),
    pytest.param("localhost:8000:9000", False, id="two-ports"),
    pytest.param("[::1", False, id="bracket-left-open"),
    pytest.param("[::1]8000", False, id="port-without-colon"),
    pytest.param("user@localhost", False, id="userinfo"),
    pytest.param("localhost/evil", False, id="path"),
    pytest.param("localhost, evil.com", False, id="two-host-headers-joined"),  # the guard joins repeated headers
    pytest.param("local host", False, id="inner-space"),
    pytest.param("ｌｏｃａｌｈｏｓｔ", False, id="fullwidth-letters"),
]


@pytest.mark.parametrize(("host", "allowed"), HOSTS)
def test_the_host_check(host, allowed):
    refusal = CONFIGURED.host_refusal(host)
    assert (refusal is None) is allowed, refusal
    if refusal is not None:
        assert refusal.status == 403 and "\n" not in refusal.message
        assert "--allowed-host" in refusal.message or "no Host header" in refusal.message


@pytest.mark.parametrize("host", ["evil.com", "", None, "localhost:abc"])
def test_a_star_allows_any_host(host):
    assert AccessConfig(allowed_hosts=("*",)).host_refusal(host) is None


HOST = "127.0.0.1:8000"
ORIGINS = [
    # (method, Host, Origin, Sec-Fetch-Site, allowed origins, allowed?)
    pytest.param("POST", HOST, "http://127.0.0.1:8000", "same-origin", (), True, id="same-origin"),
    pytest.param("POST", HOST, None, None, (), True, id="no-origin-no-browser"),  # curl, httpx, TRL, OpenRLHF
    pytest.param("POST", HOST, "HTTP://127.0.0.1:8000", None, (), True, id="origin-upper-case"),
    pytest.param("POST", "example.com", "https://example.com", None, (), True, id="default-port-omitted"),
    pytest.param("POST", "example.com:443", "https://example.com", None, (), True, id="default-port-in-host"),
    pytest.param("POST", "localhost:8000", "http://localhost.:8000", None, (), True, id="origin-trailing-dot"),
    pytest.param("POST", "[::1]:8000", "http://[::1]:8000", None, (), True, id="ipv6-same-origin"),
    pytest.param("POST", HOST, "http://localhost:8000", None, (), False, id="other-loopback-name"),  # another origin
    pytest.param("POST", HOST, "http://127.0.0.1:8001", None, (), False, id="other-port"),  # another local page
    pytest.param("POST", "example.com", "http://example.com:8443", None, (), False, id="other-port-default-host"),
    pytest.param("POST", HOST, "https://evil.com", "cross-site", (), False, id="foreign"),
    pytest.param("POST", HOST, "null", "cross-site", (), False, id="null-origin"),  # a sandboxed frame, file://
    pytest.param("POST", HOST, "", None, (), False, id="empty-origin"),
    pytest.param("POST", HOST, "http://127.0.0.1:8000/page", None, (), False, id="origin-with-path"),
    pytest.param("POST", HOST, "http://u@127.0.0.1:8000", None, (), False, id="origin-with-userinfo"),
    pytest.param("POST", HOST, "127.0.0.1:8000", None, (), False, id="origin-without-scheme"),
    pytest.param("POST", HOST, "http://127.0.0.1:8000, https://evil.com", None, (), False, id="two-origins-joined"),
    pytest.param("POST", None, "http://127.0.0.1:8000", None, (), False, id="no-host-to-compare"),
    pytest.param("PUT", HOST, "https://evil.com", None, (), False, id="put"),
    pytest.param("DELETE", HOST, "https://evil.com", None, (), False, id="delete"),
    pytest.param("PATCH", HOST, "https://evil.com", None, (), False, id="patch"),
    pytest.param("post", HOST, "https://evil.com", None, (), False, id="method-lower-case"),
    pytest.param("WEBSOCKET", HOST, "https://evil.com", None, (), False, id="websocket"),  # CORS never guards these
    # Sec-Fetch-Site when there is no Origin to read
    pytest.param("POST", HOST, None, "cross-site", (), False, id="fetch-site-cross-site"),
    pytest.param("POST", HOST, None, "CROSS-SITE", (), False, id="fetch-site-upper-case"),
    pytest.param("POST", HOST, None, "same-site", (), True, id="fetch-site-same-site"),
    pytest.param("POST", HOST, None, "none", (), True, id="fetch-site-none"),  # typed into the address bar
    # methods that change nothing: a link followed from another site still opens the app
    pytest.param("GET", HOST, "https://evil.com", "cross-site", (), True, id="get"),
    pytest.param("HEAD", HOST, "https://evil.com", "cross-site", (), True, id="head"),
    pytest.param("OPTIONS", HOST, "https://evil.com", "cross-site", (), True, id="preflight"),
    # configured origins
    pytest.param("POST", HOST, "https://dash.example.com", "cross-site", ("https://dash.example.com",), True,
                 id="configured"),
    pytest.param("POST", HOST, "https://dash.example.com:443", None, ("https://DASH.example.com",), True,
                 id="configured-default-port"),
    pytest.param("POST", HOST, "http://dash.example.com", None, ("https://dash.example.com",), False,
                 id="configured-other-scheme"),  # trap: comparing names only
    pytest.param("POST", HOST, "https://dash.example.com.evil.com", None, ("https://dash.example.com",), False,
                 id="configured-as-prefix"),
    pytest.param("POST", HOST, "null", None, ("null",), True, id="null-configured"),
    pytest.param("POST", HOST, "https://evil.com", "cross-site", ("*",), True, id="star"),
    pytest.param("POST", HOST, None, "cross-site", ("*",), True, id="star-without-origin"),
]


@pytest.mark.parametrize(("method", "host", "origin", "fetch_site", "origins", "allowed"), ORIGINS)
def test_the_cross_site_check(method, host, origin, fetch_site, origins, allowed):
    access = AccessConfig(allowed_origins=origins)
    refusal = access.origin_refusal(method, host=host, origin=origin, fetch_site=fetch_site)
    assert (refusal is None) is allowed, refusal
    if refusal is not None:
        assert refusal.status == 403 and "\n" not in refusal.message


def test_the_host_check_comes_first():
    refusal = AccessConfig().refusal("POST", host="evil.com", origin="https://evil.com", fetch_site="cross-site")
    assert refusal is not None and "Host 'evil.com'" in refusal.message


CONTENT_TYPES = [
    pytest.param("application/json", True, id="json"),
    pytest.param("application/json; charset=utf-8", True, id="json-utf8"),
    pytest.param("application/json;charset=UTF-8", True, id="json-utf8-upper-no-space"),
    pytest.param('application/json; charset="utf-8"', True, id="json-utf8-quoted"),
    pytest.param("APPLICATION/JSON", True, id="upper-case"),
    pytest.param(" application/json ", True, id="spaces"),
    pytest.param("application/json; charset=latin-1", False, id="json-not-utf8"),
    pytest.param(None, False, id="missing"),
    pytest.param("", False, id="empty"),
    pytest.param("text/plain", False, id="text-plain"),  # a page's fetch() with a string body: no preflight
    pytest.param("text/plain; charset=utf-8", False, id="text-plain-charset"),
    pytest.param("text/plain; application/json", False, id="json-as-a-parameter"),
    pytest.param("multipart/form-data; boundary=x", False, id="multipart"),  # an HTML form
    pytest.param("application/x-www-form-urlencoded", False, id="urlencoded"),  # an HTML form, curl -d
    pytest.param("application/json-patch+json", False, id="json-patch"),  # trap: startswith("application/json")
    pytest.param("application/json-patch", False, id="json-prefix"),
    pytest.param("application/jsonx", False, id="json-longer"),
    pytest.param("text/json", False, id="text-json"),
    pytest.param("application/json, text/plain", False, id="two-types"),
]


@pytest.mark.parametrize(("content_type", "allowed"), CONTENT_TYPES)
def test_the_content_type_check(content_type, allowed):
    refusal = json_body_refusal(content_type)
    assert (refusal is None) is allowed, refusal
    if refusal is not None:
        assert refusal.status == 415 and "application/json" in refusal.message or "UTF-8" in refusal.message


@pytest.mark.parametrize(("field", "entry", "fragment"), [
    pytest.param("allowed_hosts", "http://lab.example.com", "no scheme", id="host-with-scheme"),
    pytest.param("allowed_hosts", "lab.example.com:8000", "no scheme, port", id="host-with-port"),
    pytest.param("allowed_hosts", "lab.example.com/app", "no scheme, port or path", id="host-with-path"),
    pytest.param("allowed_hosts", "*.example.com", ".example.com for its subdomains", id="glob-not-suffix"),
    pytest.param("allowed_origins", "lab.example.com", "scheme://host[:port]", id="origin-without-scheme"),
    pytest.param("allowed_origins", "https://lab.example.com/app", "scheme://host[:port]", id="origin-with-path"),
    pytest.param("allowed_origins", "https://", "scheme://host[:port]", id="origin-without-host"),
    pytest.param("allowed_origins", "https://lab:port", "scheme://host[:port]", id="origin-bad-port"),
])
def test_a_malformed_entry_is_refused_with_the_fix(field, entry, fragment):
    with pytest.raises(ConfigError, match=field) as caught:
        AccessConfig(**{field: (entry,)})
    assert fragment in str(caught.value)


def test_entries_are_normalised_as_requests_are_read():
    access = AccessConfig(allowed_hosts=(" Lab.Example.com. ", "[::1]", ""),
                          allowed_origins=("HTTPS://Lab.example.com:443",))
    assert access.allowed_hosts == ("lab.example.com", "::1")
    assert access.allowed_origins == ("https://lab.example.com",)
    with pytest.raises(ConfigError, match="tuple of strings"):
        AccessConfig(allowed_hosts="lab.example.com")  # trap: a string iterates as its letters


@pytest.mark.parametrize(("bind", "added"), [
    pytest.param("myhost", ("myhost",), id="a-name"),  # Gradio's launch checks itself by that name
    pytest.param("MyHost.", ("myhost",), id="a-name-normalised"),
    pytest.param("0.0.0.0", (), id="wildcard"),
    pytest.param("::", (), id="ipv6-wildcard"),
    pytest.param("192.168.1.20", (), id="an-address"),
    pytest.param("localhost", (), id="localhost"),
])
def test_the_bind_name_is_one_of_the_services_names(bind, added):
    assert AccessConfig().serving(bind).allowed_hosts == added


@pytest.mark.parametrize(("bind", "beyond"), [
    pytest.param("127.0.0.1", False, id="ipv4-loopback"),
    pytest.param("127.0.0.2", False, id="other-loopback"),
    pytest.param("localhost", False, id="localhost"),
    pytest.param("::1", False, id="ipv6-loopback"),
    pytest.param("[::1]", False, id="ipv6-loopback-bracketed"),
    pytest.param("0.0.0.0", True, id="every-interface"),
    pytest.param("::", True, id="every-ipv6-interface"),
    pytest.param("", True, id="empty"),
    pytest.param("192.168.1.20", True, id="lan-address"),
    pytest.param("myhost", True, id="a-name"),  # it may resolve to any interface
])
def test_what_listens_beyond_loopback(bind, beyond):
    assert listens_beyond_loopback(bind) is beyond
    line = exposure_warning(bind, service="the reward service", guarded=False, missing="a bearer token",
                            fix="set REFLECTRM_SERVE_TOKEN")
    assert (line is not None) is beyond
    if line is not None:
        assert "\n" not in line and "set REFLECTRM_SERVE_TOKEN" in line and "127.0.0.1" in line
    assert exposure_warning(bind, service="s", guarded=True, missing="m", fix="f") is None


def test_readers_of_single_values():
    assert host_name("[::1]:80") == "::1" and host_name("Example.COM.:1") == "example.com"
    assert normal_origin("HTTP://[::1]:80") == "http://[::1]" and normal_origin("null") is None
