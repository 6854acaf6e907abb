"""Scope: hosts, domains, path patterns, depth and trap limits."""

from __future__ import annotations

from crawl.scope import Scope


def test_host_scope_keeps_to_seed_hosts_with_ports() -> None:
    scope = Scope.from_seeds(["http://a.com/", "http://b.com:8080/x"])
    assert scope.contains("http://a.com/page")
    assert scope.contains("http://b.com:8080/y")
    assert scope.out_of_scope_reason("http://b.com/y") == "host b.com not in scope"
    assert not scope.contains("http://sub.a.com/")


def test_domain_scope_allows_subdomains() -> None:
    scope = Scope.from_seeds(["https://www.example.org/"], mode="domain")
    assert scope.contains("https://docs.example.org/a")
    assert scope.contains("https://example.org/")
    assert not scope.contains("https://example.org.evil.com/")
    assert not scope.contains("https://notexample.org/")


def test_depth_paths_and_traps() -> None:
    scope = Scope.from_seeds(
        ["http://a.com/"], max_depth=2, deny_paths=[r"^/admin"], allow_paths=[r"^/(docs|$)"]
    )
    assert scope.contains("http://a.com/docs/x", 2)
    assert scope.out_of_scope_reason("http://a.com/docs/x", 3) == "depth 3 > max_depth 2"
    assert scope.out_of_scope_reason("http://a.com/other") == "path matches no allow pattern"
    open_scope = Scope.from_seeds(["http://a.com/"], deny_paths=[r"^/admin"])
    assert open_scope.out_of_scope_reason("http://a.com/admin/x") == "path matches a deny pattern"
    assert "repeats" in open_scope.out_of_scope_reason("http://a.com/x/y/x/y/x/y/x/y")
    assert "path segments" in open_scope.out_of_scope_reason(
        "http://a.com/" + "/".join(str(i) for i in range(30))
    )
    assert "query parameters" in open_scope.out_of_scope_reason(
        "http://a.com/?" + "&".join(f"k{i}=1" for i in range(20))
    )
    assert open_scope.out_of_scope_reason("") == "not an http(s) URL"


def test_any_scope() -> None:
    assert Scope(mode="any").contains("http://anything.example/")
