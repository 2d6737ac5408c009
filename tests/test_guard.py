"""The SSRF guard: attack URLs are refused before any connection is opened.

Every test here runs with the socket layer patched so that any attempt to connect is recorded
(and refused), and names resolve only through a stub resolver: nothing leaves the process.
"""

from __future__ import annotations

import socket

import httpx
import pytest

from vsearcher_lite.net.guard import BlockedUrl, UrlGuard, address_problem, parse_loose_ipv4
from vsearcher_lite.net.http import HttpClient, HttpError

# What the stub DNS knows. Anything else does not resolve.
STUB_DNS = {
    "example.org": ["93.184.215.14"],
    "en.wikipedia.org": ["185.15.59.224", "2a02:ec80:300:ed1a::1"],
    "public.example": ["93.184.215.14"],
    "evil-rebind.example": ["10.0.0.7"],
    "half-private.example": ["93.184.215.14", "192.168.1.20"],  # one bad address is enough
    "v6-loopback.example": ["::1"],
    "mapped.example": ["::ffff:169.254.169.254"],
    "cgnat.example": ["100.64.1.1"],
    "zoned.example": ["fe80::1%eth0"],
}


def stub_resolver(host, port, *args, **kwargs):
    if host not in STUB_DNS:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return [
        (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
        for a in STUB_DNS[host]
    ]


class SocketPolicy:
    """What the patched socket layer saw; ``allow_loopback`` lets a test reach its own server."""

    def __init__(self) -> None:
        self.attempts: list[object] = []
        self.loopback: list[object] = []
        self.allow_loopback = False

    def permits(self, host: object) -> bool:
        return self.allow_loopback and host == "127.0.0.1"


@pytest.fixture(autouse=True)
def no_connections(monkeypatch):
    """Record and refuse every outgoing connection or real DNS lookup attempted during a test."""
    policy = SocketPolicy()
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def guarded_connect(self, address, *rest):
        if isinstance(address, tuple) and policy.permits(address[0]):
            policy.loopback.append(address)
            return real_connect(self, address, *rest)
        policy.attempts.append(address)
        raise ConnectionRefusedError("test_guard: connections are not allowed here")

    def guarded_getaddrinfo(host, *args, **kwargs):
        if policy.permits(host):
            return real_getaddrinfo(host, *args, **kwargs)
        policy.attempts.append(("dns", host))
        raise socket.gaierror(socket.EAI_NONAME, "test_guard: DNS lookups are not allowed here")

    def refuse(*args, **kwargs):
        policy.attempts.append(args)
        raise ConnectionRefusedError("test_guard: connections are not allowed here")

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
    yield policy
    assert policy.attempts == [], f"a connection or DNS lookup was attempted: {policy.attempts}"


ATTACK_URLS = [
    "file:///etc/passwd",
    "ftp://example.org/file",
    "gopher://127.0.0.1:6379/_FLUSHALL",
    "javascript:alert(1)",
    "data:text/html,<h1>x</h1>",
    "http://127.0.0.1/",
    "http://127.0.0.1:8000/admin",
    "http://localhost/",
    "http://LOCALHOST./",
    "http://app.localhost/",
    "http://[::1]/",
    "http://[::]/",
    "http://0.0.0.0/",
    "http://0/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://100.100.100.200/latest/meta-data/",
    "http://168.63.129.16/machine",
    "http://2130706433/",
    "http://0x7f000001/",
    "http://0x7f.0x0.0x0.0x1/",
    "http://0177.0.0.1/",
    "http://017700000001/",
    "http://127.1/",
    "http://127.0.1/",
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://192.168.0.1/",
    "http://100.64.0.1/",
    "http://224.0.0.1/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[0:0:0:0:0:ffff:10.0.0.1]/",
    "http://[2002:7f00:1::]/",  # 6to4 wrapping 127.0.0.1
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 wrapping 169.254.169.254
    "http://[fe80::1]/",
    "http://[fe80::1%25eth0]/",
    "http://[fc00::1]/",
    "http://[ff02::1]/",
    "http://good.com@127.0.0.1/",
    "http://user:pass@example.org/",
    "http://example.org\\@127.0.0.1/",
    "http://１２７.０.０.１/",
    "http://127。0。0。1/",
    "http://127.0.0.%31/",
    "http:///etc/passwd",
    "http://evil-rebind.example/",
    "http://half-private.example/",
    "http://v6-loopback.example/",
    "http://mapped.example/",
    "http://cgnat.example/",
    "http://zoned.example/",
    "http://does-not-resolve.example/",
    "http://exa mple.org/",
]


@pytest.mark.parametrize("url", ATTACK_URLS)
def test_attack_url_is_blocked(url):
    guard = UrlGuard(resolver=stub_resolver)
    with pytest.raises(BlockedUrl) as info:
        guard.check(url)
    assert info.value.reason  # a reason a person can read
    assert isinstance(info.value, HttpError)  # callers that catch HttpError also catch this


def test_there_are_at_least_twenty_attacks():
    assert len(ATTACK_URLS) >= 20


@pytest.mark.parametrize(
    "url",
    [
        "https://example.org/",
        "http://example.org:8080/path?q=1",
        "https://en.wikipedia.org/wiki/Eiffel_Tower",
        "http://93.184.215.14/",
        "https://[2a02:ec80:300:ed1a::1]/",
        "https://EXAMPLE.ORG./",
    ],
)
def test_public_urls_pass(url):
    UrlGuard(resolver=stub_resolver).check(url)


def test_every_resolved_address_is_checked():
    calls: list[str] = []

    def counting(host, port, *a, **k):
        calls.append(host)
        return stub_resolver(host, port)

    guard = UrlGuard(resolver=counting)
    with pytest.raises(BlockedUrl, match="192.168.1.20"):
        guard.check("https://half-private.example/")
    assert calls == ["half-private.example"]


def test_literal_addresses_are_not_sent_to_the_resolver():
    def no_dns(*a, **k):
        raise AssertionError("an IP literal should not be resolved")

    with pytest.raises(BlockedUrl, match="loopback"):
        UrlGuard(resolver=no_dns).check("http://127.0.0.1/")
    with pytest.raises(BlockedUrl, match="disguised"):
        UrlGuard(resolver=no_dns).check("http://2130706433/")


def test_allow_hosts_exempts_a_test_server_but_not_bad_schemes():
    guard = UrlGuard(resolver=stub_resolver, allow_hosts=["127.0.0.1"])
    guard.check("http://127.0.0.1:8765/page")
    with pytest.raises(BlockedUrl):
        guard.check("file://127.0.0.1/etc/passwd")
    with pytest.raises(BlockedUrl):
        guard.check("http://10.0.0.1/")


def test_blocked_message_does_not_echo_query_secrets():
    with pytest.raises(BlockedUrl) as info:
        UrlGuard(resolver=stub_resolver).check("http://127.0.0.1/x?key=sk-very-secret-value")
    assert "sk-very-secret-value" not in str(info.value)


def test_loose_ipv4_parsing_matches_inet_aton_forms():
    cases = {
        "2130706433": "127.0.0.1",
        "0x7f000001": "127.0.0.1",
        "0177.0.0.1": "127.0.0.1",
        "127.1": "127.0.0.1",
        "10.1.258": "10.1.1.2",
        "0xa9.0xfe.0xa9.0xfe": "169.254.169.254",
        "0": "0.0.0.0",
    }
    for text, expected in cases.items():
        assert str(parse_loose_ipv4(text)) == expected, text
    for text in ("example.com", "256.1.1.1", "1.2.3.4.5", "08.1.1.1", "4294967296"):
        assert parse_loose_ipv4(text) is None, text


def test_address_problem_names_the_category():
    import ipaddress

    assert address_problem(ipaddress.ip_address("169.254.169.254")) == "a cloud metadata address"
    assert address_problem(ipaddress.ip_address("127.0.0.2")) == "a loopback address"
    assert "carrying 127.0.0.1" in address_problem(ipaddress.ip_address("2002:7f00:1::"))
    assert address_problem(ipaddress.ip_address("1.1.1.1")) is None


def _client_with_mock(app, **kw) -> HttpClient:
    return HttpClient(
        "visit",
        transport=httpx.MockTransport(app),
        guard=UrlGuard(resolver=stub_resolver),
        max_retries=0,
        **kw,
    )


def test_redirect_to_private_address_is_refused_before_the_hop():
    requested: list[str] = []

    def app(request: httpx.Request) -> httpx.Response:
        requested.append(str(request.url))
        if request.url.host == "public.example":
            return httpx.Response(
                302, headers={"Location": "http://169.254.169.254/latest/meta-data/iam"}
            )
        return httpx.Response(200, text="credentials!")

    client = _client_with_mock(app)
    with pytest.raises(BlockedUrl, match="metadata"):
        client.get("http://public.example/article")
    assert requested == ["http://public.example/article"]


def test_redirect_chain_through_public_hosts_then_disguised_loopback():
    requested: list[str] = []

    def app(request: httpx.Request) -> httpx.Response:
        requested.append(request.url.host)
        if request.url.host == "public.example":
            return httpx.Response(301, headers={"Location": "https://example.org/next"})
        if request.url.host == "example.org":
            return httpx.Response(307, headers={"Location": "http://0x7f000001:6379/"})
        return httpx.Response(200)

    with pytest.raises(BlockedUrl, match="disguised"):
        _client_with_mock(app).get("http://public.example/")
    assert requested == ["public.example", "example.org"]


def test_guarded_client_with_real_transport_opens_no_connection(no_connections):
    client = HttpClient("visit", guard=UrlGuard(resolver=stub_resolver), max_retries=0)
    for url in (
        "http://169.254.169.254/",
        "http://[::1]:22/",
        "http://evil-rebind.example/",
        "file:///etc/passwd",
    ):
        with pytest.raises(BlockedUrl):
            client.get(url)
    assert no_connections.attempts == [] and no_connections.loopback == []
    assert client.stats["requests"] == 0


def test_dns_rebinding_is_stopped_at_connect_time(no_connections):
    """The name is public when the guard checks the URL and private when the client connects."""
    answers = iter(["93.184.215.14", "127.0.0.1"])
    lookups: list[str] = []

    def rebinding_resolver(host, port, *a, **k):
        lookups.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    client = HttpClient("visit", guard=UrlGuard(resolver=rebinding_resolver), max_retries=0)
    with pytest.raises(BlockedUrl, match="resolves to 127.0.0.1"):
        client.get("http://rebind.example/")
    assert lookups == ["rebind.example", "rebind.example"]
    assert no_connections.attempts == [] and no_connections.loopback == []


def test_pinned_connection_goes_to_the_address_the_guard_resolved(no_connections):
    from servers import MisbehavingServer

    no_connections.allow_loopback = True

    # The system resolver does not know this name; only the guard's resolver does, so a
    # successful request proves the connection used the guard's answer.
    def resolver(host, port, *a, **k):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    with MisbehavingServer(["ok"]) as server:
        client = HttpClient(
            "visit",
            guard=UrlGuard(resolver=resolver, allow_hosts=["my-test-server.invalid"]),
            max_retries=0,
        )
        assert client.get_json(f"http://my-test-server.invalid:{server.port}/page") == {
            "ok": True,
            "n": 0,
        }
    assert [a[0] for a in no_connections.loopback] == ["127.0.0.1"]


def test_guarded_redirect_to_public_is_followed():
    def app(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/old":
            return httpx.Response(308, headers={"Location": "/new"})
        return httpx.Response(200, text="fine")

    response = _client_with_mock(app).get("https://example.org/old")
    assert response.text == "fine" and str(response.request.url) == "https://example.org/new"
