"""``barnraise coordinator --tls-cert/--tls-key`` as a real process, and its HTTPS options' errors."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from core.cli.main import main
from tests.coordinator.test_cli import OPEN_MANIFEST
from tests.support.certificates import Pki, make_pki


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


def _command(tmp_path: Path, *extra: str) -> list[str]:
    manifest = tmp_path / "project.toml"
    manifest.write_text(OPEN_MANIFEST)
    db = tmp_path / "coordinator" / "c.db"
    command = [sys.executable, "-m", "core", "--log-level", "info", "coordinator"]
    command += ["--manifest", str(manifest)]
    return [*command, "--db", str(db), "--port", "0", "--bootstrap", *extra]


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, BARNRAISE_HOME=str(tmp_path / "home"))


def test_the_coordinator_process_serves_https(tmp_path: Path, pki: Pki) -> None:
    command = _command(tmp_path, "--tls-cert", str(pki.cert), "--tls-key", str(pki.key))
    command += ["--public-url", "https://coord.example.org/"]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path)
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        prefix = "coordinator for coord-test at https://127.0.0.1:"
        assert line.startswith(prefix), line
        url = line[len(prefix) - len("https://127.0.0.1:") :].split(",")[0]
        trusting = ssl.create_default_context(cafile=str(pki.ca))
        with urllib.request.urlopen(f"{url}/info", timeout=10, context=trusting) as response:
            assert json.load(response)["project"] == "coord-test"
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(f"{url}/info", timeout=10, context=ssl.create_default_context())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert proc.stderr is not None
        err = proc.stderr.read()
        assert "serving HTTPS with the certificate for localhost, 127.0.0.1" in err
        assert "public URL: https://coord.example.org" in err
        assert "plain HTTP" not in err
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def test_a_key_that_is_not_the_certificates_is_a_clear_error(tmp_path: Path, pki: Pki) -> None:
    command = _command(tmp_path, "--tls-cert", str(pki.cert), "--tls-key", str(pki.other_key))
    done = subprocess.run(
        command, capture_output=True, text=True, env=_env(tmp_path), timeout=60, check=False
    )
    assert done.returncode == 1
    assert done.stdout == ""  # it never listened
    assert not (tmp_path / "coordinator" / "coord-test-key.pem").exists()  # nor made a key
    assert done.stderr.strip().endswith(
        f"barnraise: error: the TLS key in {pki.other_key} does not belong to the certificate in "
        f"{pki.cert}: pass the key that was made with that certificate (the certificate file "
        "must start with the server's own certificate, its chain after it)"
    )
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--tls-cert", "CERT"], "--tls-cert needs --tls-key too"),
        (["--tls-key", "KEY"], "--tls-key needs --tls-cert too"),
        (["--public-url", "https://coord.example.org/join"], "no path, query or fragment"),
        (["--trusted-proxy", "10.0.0.1/8"], "the network is 10.0.0.0/8"),
        (["--trusted-proxy", "127.0.0.1", "proxy.lan"], "'proxy.lan' is not an IP address"),
        (["--trusted-proxy", "0.0.0.0/0"], "is every address"),
    ],
)
def test_bad_https_options_are_clear_errors(
    tmp_path: Path,
    pki: Pki,
    capsys: pytest.CaptureFixture[str],
    options: list[str],
    words: str,
) -> None:
    options = [{"CERT": str(pki.cert), "KEY": str(pki.key)}.get(o, o) for o in options]
    manifest = tmp_path / "project.toml"
    manifest.write_text(OPEN_MANIFEST)
    db = tmp_path / "c.db"
    code = main(["coordinator", "--manifest", str(manifest), "--db", str(db), *options])
    err = capsys.readouterr().err
    assert code == 1
    assert words in err
    assert "Traceback" not in err
