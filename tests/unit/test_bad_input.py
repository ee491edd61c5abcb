"""Every command answers a bad input with its exit code and one line that names what to fix; no traceback.

Issue 54's classes outside the manifest itself: the pipe closed early, `report` against servers that are not an
API server (closed, unknown, HTML, TLS to plain HTTP, silent) or a kubeconfig that is not one, a stored test the
models refuse, `--deliver`/`--from-log` files that are not reports, `--wait` without end, operator settings that
overflow, `local`'s arguments and output paths, and `make push`'s pull on the real node. The generated cases at
the end throw many variations of the same at the commands and assert only the promise: a documented exit code,
the offending name in the message, no traceback.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from acceptance_operator import cli
from acceptance_workload.contract import exits

REPO = Path(__file__).resolve().parents[2]
VALID_TEST = {
    "apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
    "metadata": {"name": "t", "namespace": "default", "uid": "u-1", "generation": 1},
    "spec": {"nodes": 1},
}


def _no_traceback(text: str) -> None:
    assert "Traceback" not in text and 'File "' not in text, text[-3000:]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    _no_traceback(out + err)
    return code, out, err


# --------------------------------------------------------------------------- a stub API server


class _Stub(BaseHTTPRequestHandler):
    """Answers every GET as the server's `answer` says: (status, content type, body) or "silent"."""

    answer: tuple[int, str, bytes] | str = (200, "application/json", b"{}")

    def do_GET(self) -> None:  # http.server calls it by this name
        answer = self.server.answer  # type: ignore[attr-defined]
        if callable(answer):
            answer = answer(self.path)
        if answer == "silent":
            time.sleep(5)
            return
        status, kind, body = answer
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_PATCH = do_PUT = do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def stub_server(answer) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    server.answer = answer  # type: ignore[attr-defined]
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _json_answer(obj: object, status: int = 200) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(obj).encode()


@pytest.fixture
def report_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Point `report` at a kubeconfig; short timeouts so a silent server is said within seconds here."""
    from acceptance_operator.plumbing import kubeapi

    monkeypatch.setattr(kubeapi, "COMMAND_TIMEOUT", (1.0, 1.0))

    def use(server: str) -> None:
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path, server)))

    return use


# --------------------------------------------------------------------------- report: servers that are not one


def test_report_against_a_closed_port_says_the_connection_failed(report_env, capsys) -> None:
    report_env(f"http://127.0.0.1:{_closed_port()}")
    code, _, err = _run(["report", "t"], capsys)
    assert code == exits.CANNOT and "cannot reach the API server" in err and "refused" in err


def test_report_against_an_unknown_host_says_it_does_not_resolve(report_env, capsys) -> None:
    report_env("http://no-such-host.invalid:6443")
    code, _, err = _run(["report", "t"], capsys)
    assert code == exits.CANNOT and "does not resolve" in err


def test_report_against_a_web_page_says_it_is_not_an_api_server(report_env, capsys) -> None:
    with stub_server((404, "text/html", b"<html><body>Not Found</body></html>")) as url:
        report_env(url)
        code, _, err = _run(["report", "t"], capsys)
    assert code == exits.CANNOT and "did not answer as a Kubernetes API server" in err


def test_report_over_https_to_a_plain_http_server_says_tls_failed(report_env, capsys) -> None:
    with stub_server((200, "text/html", b"<html></html>")) as url:
        report_env(url.replace("http://", "https://"))
        code, _, err = _run(["report", "t"], capsys)
    assert code == exits.CANNOT and "TLS failed" in err


def test_report_against_a_silent_server_gives_up_within_its_timeout(report_env, capsys) -> None:
    with stub_server("silent") as url:
        report_env(url)
        started = time.monotonic()
        code, _, err = _run(["report", "t"], capsys)
    assert code == exits.CANNOT and "did not answer within 2s" in err
    assert time.monotonic() - started < 15


@pytest.mark.parametrize(("content", "words"), [
    (b"\x00\x01\x02binary", "cannot be used"),
    (b"[1, 2, 3]\n", "not a kubeconfig"),
    (b"clusters: [\n", "cannot be used"),
    (None, "a directory, not a file"),
])
def test_report_with_a_kubeconfig_that_is_not_one_says_so(tmp_path, monkeypatch, capsys, content, words) -> None:
    path = tmp_path / "kc"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    monkeypatch.setenv("KUBECONFIG", str(path))
    code, _, err = _run(["report", "t"], capsys)
    assert code == exits.CANNOT and "no cluster to read t from" in err and words in err


# --------------------------------------------------------------------------- report: what the server holds


@pytest.mark.parametrize(("change", "named"), [
    (lambda t: t["spec"].update(schedule="61 * * * *"), "spec.schedule"),
    (lambda t: t.update(status="x"), "status is a str"),
    (lambda t: t["spec"].update(nodes="many"), "spec.nodes"),
])
def test_report_on_a_stored_test_the_models_refuse_names_the_field(report_env, capsys, change, named) -> None:
    stored = json.loads(json.dumps(VALID_TEST))
    change(stored)
    with stub_server(_json_answer(stored)) as url:
        report_env(url)
        code, _, err = _run(["report", "t"], capsys)
    assert code == exits.CANNOT and "cannot be read by this gpu-acceptance" in err and named in err


def test_deliver_of_a_file_that_is_not_utf8_is_not_a_report(report_env, capsys, tmp_path) -> None:
    saved = tmp_path / "r.json"
    saved.write_bytes(b"\xff\xfe\x00{not json")
    with stub_server(_json_answer(VALID_TEST)) as url:
        report_env(url)
        code, _, err = _run(["report", "t", "--deliver", str(saved)], capsys)
    assert code == exits.CANNOT and f"{saved} is not a saved report" in err


def test_from_log_whose_marked_line_nests_a_thousand_brackets_holds_no_report(report_env, capsys, tmp_path) -> None:
    from acceptance_workload.report.delivery import REPORT_LINE

    log = tmp_path / "pod.log"
    log.write_text("hello\n" + REPORT_LINE + "[" * 1000 + "]" * 1000 + "\n")
    with stub_server(_json_answer(VALID_TEST)) as url:
        report_env(url)
        code, _, err = _run(["report", "t", "--from-log", str(log)], capsys)
    assert code == exits.CANNOT and "holds no report" in err


@pytest.mark.parametrize("wait", ["nan", "inf", "1e309", "-1", "3601", "soon"])
def test_a_wait_without_end_is_refused_before_anything_is_sent(capsys, wait) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["report", "t", "--deliver", "r.json", "--wait", wait])
    err = capsys.readouterr().err
    assert e.value.code == exits.CANNOT and "argument --wait" in err
    _no_traceback(err)


def test_a_delivery_the_server_keeps_refusing_says_each_retry_and_ends(report_env, capsys, tmp_path,
                                                                      monkeypatch) -> None:
    """Evidence writes answered 500 are retried within the delivery's deadline, each attempt said, then exit 2."""
    from acceptance_workload.report import status as status_module

    from tests.reports import passing_report
    from tests.unit.test_rejudge import config

    real = status_module.patch_report

    def quick(*args, **kwargs):
        return real(*args, **{**kwargs, "deadline_seconds": 3})

    monkeypatch.setattr(status_module, "patch_report", quick)
    saved = tmp_path / "r.json"
    saved.write_text(passing_report(config(nodes=1)).model_dump_json(by_alias=True))

    def answer(path: str):
        if "/configmaps" in path:
            return _json_answer({"kind": "Status", "code": 500, "message": "boom"}, 500)
        return _json_answer(VALID_TEST)

    with stub_server(answer) as url:
        report_env(url)
        code, _, err = _run(["report", "t", "--deliver", str(saved), "--wait", "0"], capsys)
    assert code == exits.CANNOT and "retrying" in err and "could not write" in err


# --------------------------------------------------------------------------- the pipe, the settings


@pytest.mark.parametrize("argv", [["crd"], ["render", str(REPO / "examples" / "quick.yaml")]])
def test_a_reader_that_closes_the_pipe_early_gets_no_traceback(argv) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "acceptance_operator.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()  # as `| head -c 10` does
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=60)
    _no_traceback(err)
    assert code in (exits.YES, exits.CANNOT) and "BrokenPipe" not in err


@pytest.mark.parametrize(("variable", "value"), [
    ("GPU_ACCEPTANCE_WORKERS", "1e400"), ("GPU_ACCEPTANCE_WORKERS", "abc"), ("GPU_ACCEPTANCE_WORKERS", "0"),
    ("GPU_ACCEPTANCE_METRICS_PORT", "inf"), ("GPU_ACCEPTANCE_METRICS_PORT", "70000"),
    ("GPU_ACCEPTANCE_RESYNC_SECONDS", "nan"), ("GPU_ACCEPTANCE_REPORT_GRACE_SECONDS", "1e309"),
    ("GPU_ACCEPTANCE_NODE_ACTIONS", "maybe"),
])
def test_a_bad_operator_setting_is_exit_2_naming_the_variable_not_the_file(monkeypatch, capsys, variable,
                                                                           value) -> None:
    monkeypatch.setenv(variable, value)
    code, _, err = _run(["render", str(REPO / "examples" / "quick.yaml")], capsys)
    assert code == exits.CANNOT and variable in err and "not a valid AcceptanceTest" not in err


def test_an_unexpected_error_is_one_line_and_its_trace_only_under_debug(monkeypatch, capsys) -> None:
    from acceptance_operator.resource import crd

    def boom() -> str:
        raise RuntimeError("the unexpected\nsecond line")

    monkeypatch.setattr(crd, "crd_yaml", boom)
    code, _, err = _run(["crd"], capsys)
    assert code == exits.CANNOT and err.count("\n") == 1 and "--debug" in err
    assert cli.main(["--debug", "crd"]) == exits.CANNOT
    assert "Traceback" in capsys.readouterr().err


# --------------------------------------------------------------------------- local: arguments and outputs


@pytest.mark.parametrize(("args", "named"), [
    (["--gpus", "0"], "--gpus"), (["--gpus", "-1"], "--gpus"), (["--gpus", "100000"], "--gpus"),
    (["--gpus", "1.5"], "--gpus"), (["--simulate-nodes", "0"], "--simulate-nodes"),
    (["--simulate-nodes", "1000"], "--simulate-nodes"), (["--profile", ""], "--profile"),
    (["--profile", "h100"], "--profile"), (["--storage", ""], "--storage"), (["--json", ""], "--json"),
    (["-f", ""], "--file"), (["--soak", "x"], "--soak"),
])
def test_local_refuses_a_bad_argument_naming_it(capsys, args, named) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["local", "--cpu", *args])
    err = capsys.readouterr().err
    assert e.value.code == exits.CANNOT and f"argument {named}" in err.replace("-f/--file", "--file")
    _no_traceback(err)


@pytest.mark.parametrize(("flag", "where", "words"), [
    ("--json", "missing-dir/r.json", "does not exist"), ("--json", ".", "is a directory"),
])
def test_local_checks_where_its_outputs_go_before_it_runs(tmp_path, monkeypatch, capsys, flag, where,
                                                         words) -> None:
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    code, _, err = _run(["local", "--cpu", flag, where], capsys)
    assert code == exits.CANNOT and f"{flag} {where}: " in err and words in err
    assert "CPU processes" not in err  # refused before any process started
    assert time.monotonic() - started < 30


# --------------------------------------------------------------------------- make push: the real node's pull


def test_the_real_nodes_registry_is_found_by_a_later_command(tmp_path) -> None:
    from tests.registry import Registry, RegistryError

    folder = tmp_path / "registry"
    folder.mkdir()
    with pytest.raises(RegistryError, match="start the real node first"):
        _ = Registry(folder).address
    (folder / "address").write_text("192.0.2.7:5443\n")
    registry = Registry(folder)
    assert registry.image("workload", "0.1.0") == "192.0.2.7:5443/gpu-acceptance/workload:0.1.0"


def test_make_push_pull_without_a_real_node_says_so(tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-m", "tests.realnode", "pull", "--dir", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    _no_traceback(proc.stderr)
    assert proc.returncode == 1 and "start the real node first" in proc.stderr


def test_make_push_pulls_the_pushed_tags_from_the_address_the_node_wrote(tmp_path, monkeypatch) -> None:
    from tests.realnode import RealNode
    from tests.registry import USER, docker_config

    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "address").write_text("192.0.2.7:5443\n")
    (registry / "auth.json").write_text(json.dumps(docker_config("192.0.2.7:5443", USER, "pw")))
    node, calls = RealNode(tmp_path), []
    monkeypatch.setattr(node, "ctr", lambda *args, **kw: calls.append(args))
    node.pull_pushed(timeout=1)
    assert [c[-1] for c in calls] == ["192.0.2.7:5443/gpu-acceptance/operator:0.1.0",
                                      "192.0.2.7:5443/gpu-acceptance/workload:0.1.0"]
    assert all(f"{USER}:pw" in c for c in calls)


# --------------------------------------------------------------------------- a report from an older image


def test_a_report_from_a_workload_image_older_than_the_operator_names_the_skew() -> None:
    from acceptance_operator.judging.rejudge import rejudge

    from tests.reports import passing_report
    from tests.unit.test_rejudge import config, facts

    cfg = config()
    report = passing_report(cfg)
    report.results = [r for r in report.results if r.check != "p2p"]
    report.checks_run = [c for c in report.checks_run if c != "p2p"]  # as an image without the check wrote it
    out = rejudge(report, facts(cfg)).report
    failed = [r for r in out.results if not r.passed]
    assert failed and {r.check for r in failed} == {"p2p"}
    message = failed[0].message
    assert "did not run check p2p at all" in message and "older than this operator" in message
    assert "spec.checks.p2p.enabled: false" in message and "workloadImage" in message


# --------------------------------------------------------------------------- generated inputs


def _mutated_args(rng: random.Random) -> list[str]:
    """A `local` command line with at least one argument no run may start with."""
    bad = [["--gpus", rng.choice(["0", "-3", "99999", "2.5", "", "nan", "0x10"])],
           ["--simulate-nodes", rng.choice(["0", "-1", "65", "x", ""])],
           ["--profile", rng.choice(["", " ", "H100", "h100-sxm ", "\x01"])],
           ["--storage", rng.choice(["", "   "])], ["--soak", rng.choice(["", "1e9", "ten"])],
           ["--json", rng.choice(["", "no/such/dir/r.json", "."])], ["--junit", ""], ["--html", ""]]
    good = [["--quick"], ["--gpus", "2"], ["--profile", "custom"], ["--fsdp"]]
    args = [*rng.choice(bad)]
    for extra in rng.sample(good, rng.randint(0, 2)):
        args += extra
    return args


def test_generated_local_arguments_are_all_refused_naming_what_to_fix(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    rng = random.Random(54)
    codes: dict[int, int] = {}
    for _ in range(200):
        args = _mutated_args(rng)
        try:
            code = cli.main(["local", "--cpu", *args])
        except SystemExit as e:  # argparse
            code = e.code  # type: ignore[assignment]
        err = capsys.readouterr().err
        _no_traceback(err)
        assert code == exits.CANNOT, (args, err)
        assert "CPU processes" not in err, (args, err)
        codes[code] = codes.get(code, 0) + 1
    print(f"local: {codes}")


def _answers(rng: random.Random):
    """What a server may answer `report`: errors, pages, garbage, silence, and stored tests the models refuse."""
    broken = json.loads(json.dumps(VALID_TEST))
    broken["spec"][rng.choice(["nodes", "schedule", "profile", "backend"])] = rng.choice(
        ["x", -1, [1], {"a": 1}, "61 * * * *", None, True])
    return rng.choice([
        (rng.choice([401, 403, 429, 500, 502, 503]),
         "application/json", json.dumps({"kind": "Status", "code": 500, "message": "no"}).encode()),
        (rng.choice([200, 404, 500]), "text/html", b"<html>" + os.urandom(rng.randint(0, 64)) + b"</html>"),
        (200, "application/json", os.urandom(rng.randint(0, 128))),
        (200, "application/json", b'{"kind": "AcceptanceTest", "spec": ' + b"[" * 2000),
        (200, "application/json", json.dumps(rng.choice([[], "x", 7, None])).encode()),
        (200, "application/json", json.dumps(broken).encode()),
    ])


def test_generated_server_answers_to_report_end_in_one_line_and_a_documented_code(report_env, capsys) -> None:
    rng = random.Random(5454)
    answers = [_answers(rng) for _ in range(120)]
    current: list = [None]
    codes: dict[int, int] = {}
    with stub_server(lambda path: current[0]) as url:
        report_env(url)
        for answer in answers:
            current[0] = answer
            code, _, err = _run(["report", "t"], capsys)
            assert code in (exits.NO, exits.CANNOT), (answer, err)
            assert err.strip(), (answer, err)
            codes[code] = codes.get(code, 0) + 1
    print(f"report: {codes}")
