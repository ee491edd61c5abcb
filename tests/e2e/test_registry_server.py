"""The real node's registry on its own (tests/registry.py), without a node: TLS that only its CA vouches for, on this
host's address, and a login that only the right password passes. Its storage here is a temporary folder."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.registry as registry_module
from tests.e2e.conftest import cannot_run
from tests.registry import Registry, RegistryError, host_address

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    monkeypatch.setattr(registry_module, "STORAGE", tmp_path / "storage")
    reg = Registry(tmp_path / "registry", port=5449)
    try:
        reg.start()
    except RegistryError as e:
        cannot_run(str(e))
    yield reg
    reg.stop()


def test_only_the_right_password_passes(registry: Registry) -> None:
    assert registry.host == host_address() and registry.host != "127.0.0.1"
    assert registry.get("") == {}  # /v2/ with the login
    with pytest.raises(urllib.error.HTTPError) as wrong:
        registry.get("", password="not-the-password")
    assert wrong.value.code == 401
    context = ssl.create_default_context(cafile=str(registry.ca_file))
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        urllib.request.urlopen(f"https://{registry.address}/v2/", context=context, timeout=5)
    assert anonymous.value.code == 401
    assert "Basic" in anonymous.value.headers["WWW-Authenticate"]
    htpasswd = (registry.dir / "htpasswd").read_text()
    assert htpasswd.startswith("gpu-acceptance:$2b$")  # bcrypt
    assert registry.password() not in htpasswd


def test_tls_is_vouched_for_by_its_own_ca_only(registry: Registry) -> None:
    with pytest.raises(urllib.error.URLError) as untrusted:
        urllib.request.urlopen(f"https://{registry.address}/v2/", context=ssl.create_default_context(), timeout=5)
    assert isinstance(untrusted.value.reason, ssl.SSLCertVerificationError)
    with pytest.raises(urllib.error.URLError):  # plain HTTP is not served
        urllib.request.urlopen(f"http://{registry.address}/v2/", timeout=5)


def test_a_second_start_keeps_the_storage_and_changes_the_password(registry: Registry) -> None:
    (registry_module.STORAGE / "kept").write_text("x")
    first = registry.password()
    registry.start()
    assert (registry_module.STORAGE / "kept").is_file()
    assert registry.password() != first
    with pytest.raises(urllib.error.HTTPError):
        registry.get("", password=first)
