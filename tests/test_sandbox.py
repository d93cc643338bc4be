"""Hostile programs in the DeepCoder sandbox: each is contained, scores 0, and ends within seconds."""

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from envs.deepcoder import sandbox as sandbox_module
from envs.deepcoder.builtin import BUILTIN_PROBLEMS
from envs.deepcoder.grading import grade
from envs.deepcoder.problems import Problem, TestCase
from envs.deepcoder.sandbox import PROJECT_ROOT, Sandbox, SandboxConfig, _uid_has_processes
from envs.deepcoder.slots import POOL, uid_of
from sandbox_testlib import (RecordingSandbox, concurrent_sandboxes, peak_overlap, shared_uid_overlaps,
                                   span_program)

pytestmark = pytest.mark.timeout(60)

_SUM_TWO = next(p for p in BUILTIN_PROBLEMS if p.problem_id == "sum_two")
SUM_TWO = dataclasses.replace(_SUM_TWO, tests=_SUM_TWO.tests[:1])  # one test keeps each case fast


@pytest.fixture(scope="module")
def sandbox():
    cfg = SandboxConfig(cpu_time_s=1, wall_time_s=3, max_processes=16, max_output_bytes=1 << 20)
    return Sandbox(cfg, max_concurrency=2)


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def assert_scores_zero(sandbox, code):
    result = grade(sandbox, SUM_TWO, fenced(code))
    assert result.reward == 0.0 and not result.success


def full_isolation(sandbox) -> dict:
    """The capabilities, or a skip where this host cannot give a PID namespace and a private root."""
    caps = sandbox.capabilities()
    assert "fatal" not in caps, caps["fatal"]  # a sandbox that refuses every run is a failure, not a skip
    if not (caps["pidns"] and caps["root"]):
        pytest.skip("needs PID + mount namespaces (root on Linux, unshare allowed by the kernel); this host: "
                    f"{caps['errors'] or 'not root'}")
    return caps


@pytest.fixture
def outside_dir():
    """A world-readable folder next to the project (where a dataset could live), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="ragen-outside-", dir=Path(PROJECT_ROOT).parent))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_capabilities_reported(sandbox):
    caps = sandbox.capabilities()
    assert "fatal" not in caps
    # Either real isolation or the documented fallback is in force, never nothing.
    assert caps["netns"] or "socket.__new__" in caps["audit_hook"]
    assert caps["nproc_enforced"] or "os.fork" in caps["audit_hook"]
    if caps["mountns"]:  # a mount namespace comes with the whole view, never a partial one
        assert caps["root"] in ("pivot_root", "chroot") and caps["view"]


def test_proc_shows_only_the_sandbox_processes(sandbox):
    full_isolation(sandbox)
    marker = "ragen-marker-" + uuid.uuid4().hex
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    code = "\n".join([
        "import os",
        "pids = sorted(int(d) for d in os.listdir('/proc') if d.isdigit())",
        "print('pids', pids, 'self', os.getpid())",
        "for pid in pids:",
        "    try:",
        "        print(pid, open(f'/proc/{pid}/cmdline', 'rb').read())",
        "    except OSError as e:",
        "        print('denied', pid, e.errno)"])
    try:
        r = sandbox.run(code)
    finally:
        host.kill()
        host.wait()
    assert r.ok, r.stderr
    assert marker not in r.stdout and "pytest" not in r.stdout
    assert r.stdout.splitlines()[0] == "pids [1, 2] self 2"  # the namespace's init and the program


def test_root_shows_only_the_interpreter_view(sandbox):
    caps = full_isolation(sandbox)
    code = "\n".join([
        "import json, os",
        "print(json.dumps({'/': sorted(os.listdir('/')), '/etc': sorted(os.listdir('/etc')),",
        "                  '/usr/bin': sorted(os.listdir('/usr/bin'))}))",
        f"for p in ['/bin/sh', '/usr/bin/env', '/home', '/root', '/var', '/sys', '/work', {PROJECT_ROOT!r}]:",
        "    print(p, os.path.exists(p))"])
    r = sandbox.run(code)
    assert r.ok, r.stderr
    listing = json.loads(r.stdout.splitlines()[0])
    assert set(listing["/"]) == {p.split("/")[1] for p in caps["view"]} | {"dev", "proc", "tmp"}
    assert set(listing["/etc"]) <= {"ld.so.cache", "localtime"}
    assert listing["/usr/bin"] == [os.path.basename(p) for p in caps["view"] if p.startswith("/usr/bin/")]
    assert all(line.endswith(" False") for line in r.stdout.splitlines()[1:])


def test_files_outside_the_view_cannot_be_read(sandbox, outside_dir):
    full_isolation(sandbox)
    secret = "expected-outputs-" + uuid.uuid4().hex
    host_tmp = Path(tempfile.mkdtemp(prefix="ragen-planted-"))
    try:
        host_tmp.chmod(0o755)
        planted = [outside_dir / "expected.json", host_tmp / "expected.json"]
        for path in planted:
            path.write_text(secret)
            path.chmod(0o644)
        targets = [*map(str, planted), "/etc/shadow", "/etc/passwd", "/etc/hostname", "/proc/1/environ",
                   os.path.join(PROJECT_ROOT, "README.md")]
        code = "\n".join([
            f"for p in {targets!r}:",
            "    try:",
            "        print('read', p, open(p, errors='replace').read()[:200])",
            "    except OSError as e:",
            "        print('denied', p, e.errno)"])
        r = sandbox.run(code)
    finally:
        shutil.rmtree(host_tmp, ignore_errors=True)
    assert r.ok, r.stderr
    assert secret not in r.stdout
    assert [line.split()[1] for line in r.stdout.splitlines() if line.startswith("denied")] == targets


def test_solution_cannot_copy_expected_outputs_stored_elsewhere(sandbox, outside_dir):
    full_isolation(sandbox)
    problem = Problem("square", "Print n squared.", (TestCase("7\n", "49"),))
    dataset = outside_dir / "dataset.json"
    dataset.write_text(json.dumps({"tests": [{"input": "7\n", "output": "49"}]}))
    dataset.chmod(0o644)
    cheat = f"import json\nprint(json.load(open({str(dataset)!r}))['tests'][0]['output'])"
    assert grade(sandbox, problem, fenced(cheat)).reward == 0.0
    assert grade(sandbox, problem, fenced("print(int(input()) ** 2)")).reward == 1.0


def test_correct_program_runs(sandbox):
    r = sandbox.run("import sys\nprint(sum(map(int, sys.stdin.read().split())))", "2 3")
    assert r.ok and r.stdout.strip() == "5"


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_live_runs_never_share_a_uid_and_the_process_wide_bound_holds():
    """More Sandboxes than the bound (and than the 16 uid blocks the old scheme had), all at once."""
    cfg = SandboxConfig(cpu_time_s=2, wall_time_s=10)
    boxes = [RecordingSandbox(cfg, max_concurrency=1) for _ in range(18)]
    results = []
    with concurrent_sandboxes(6):
        threads = [threading.Thread(target=lambda b=b: results.append(b.run(span_program("print('ok')", 1.0))))
                   for b in boxes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [r.status for r in results] == ["ok"] * 18, [r.stderr[-300:] for r in results if not r.ok]
    spans = [span for b in boxes for span in b.spans]
    assert peak_overlap([(start, end) for _, start, end in spans]) == 6
    if results[0].isolation["uid"] is not None:
        assert shared_uid_overlaps(spans) == []
        assert {uid for uid, _, _ in spans} <= {uid_of(slot) for slot in range(6)}
    assert POOL.held() == frozenset()


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_slot_and_processes_are_released_on_every_way_out(monkeypatch):
    sb = Sandbox(SandboxConfig(cpu_time_s=1, wall_time_s=2, max_output_bytes=1 << 16), max_concurrency=1)
    with concurrent_sandboxes(1):  # one slot: every run below uses slot 0
        for code in ["while True:\n    pass", "import time\ntime.sleep(100)",
                     "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)"]:
            assert sb.run(code).status in ("timeout", "output_limit")
            assert POOL.held() == frozenset()

        def harness_fault(*args, **kwargs):
            time.sleep(1.0)  # the program is running (and has forked) when the harness fails
            raise RuntimeError("harness fault")

        monkeypatch.setattr(sandbox_module, "_pump", harness_fault)
        with pytest.raises(RuntimeError, match="harness fault"):
            sb.run("import os, time\nif os.fork() == 0:\n    os.setsid()\ntime.sleep(100)")
        assert POOL.held() == frozenset()
        if os.geteuid() == 0:  # the run had uid_of(0): none of its processes is left
            assert not _uid_has_processes(uid_of(0))


def test_infinite_loop_is_killed(sandbox):
    t = time.monotonic()
    r = sandbox.run("while True:\n    pass")
    assert r.status == "timeout"
    assert time.monotonic() - t < 30  # cut at the sandbox's timeout; generous for a loaded machine
    assert_scores_zero(sandbox, "while True:\n    pass")


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_sleeping_program_hits_wall_clock(sandbox):
    t = time.monotonic()
    r = sandbox.run("import time\ntime.sleep(100)")
    assert r.status == "timeout" and time.monotonic() - t < 30  # far below the program's 100 s


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_fork_bomb_is_bounded_and_cleaned_up(sandbox):
    caps = sandbox.capabilities()
    # Bounded by construction: refuse to run the bomb unless a process cap is in force.
    assert caps["nproc_enforced"] or "os.fork" in caps["audit_hook"]
    bomb = ("import os\n"
            "while True:\n"
            "    try:\n"
            "        if os.fork() == 0:\n"
            "            os.setsid()\n"  # try to escape the process group
            "    except OSError:\n"
            "        pass\n")
    t = time.monotonic()
    r = sandbox.run(bomb)
    assert r.status != "ok"
    assert time.monotonic() - t < 30
    if r.isolation.get("uid") is not None:
        assert not _uid_has_processes(r.isolation["uid"])
    assert POOL.held() == frozenset()
    assert sandbox.run("print('alive')").stdout.strip() == "alive"


def test_huge_allocation_fails(sandbox):
    r = sandbox.run("x = bytearray(20 * 2**30)\nprint('allocated')")
    assert r.status == "runtime_error" and "MemoryError" in r.stderr
    r = sandbox.run("chunks = [bytearray(100 * 2**20) for _ in range(205)]\nprint('allocated')")
    assert r.status in ("runtime_error", "timeout") and "allocated" not in r.stdout
    assert_scores_zero(sandbox, "x = bytearray(20 * 2**30)")


def test_extra_paths_are_readable_but_not_writable(outside_dir):
    data = outside_dir / "table.txt"
    data.write_text("42")
    data.chmod(0o644)
    sb = Sandbox(SandboxConfig(cpu_time_s=1, wall_time_s=3, extra_paths=(str(outside_dir),)), max_concurrency=1)
    full_isolation(sb)
    code = "\n".join([
        f"print(open({str(data)!r}).read())",
        "try:",
        f"    open({str(outside_dir / 'new.txt')!r}, 'w')",
        "except OSError as e:",
        "    print('read-only', e.errno)"])
    r = sb.run(code)
    assert r.ok, r.stderr
    assert r.stdout.split() == ["42", "read-only", "30"]  # EROFS
    assert sorted(p.name for p in outside_dir.iterdir()) == ["table.txt"]


def test_extra_paths_under_tmp_are_shown_inside_the_private_tmp():
    """A host folder under /tmp (where datasets are often unpacked) shows inside the sandbox's own /tmp."""
    data_dir = Path(tempfile.mkdtemp(prefix="ragen-extra-", dir="/tmp"))
    try:
        data_dir.chmod(0o755)
        (data_dir / "table.txt").write_text("42")
        (data_dir / "table.txt").chmod(0o644)
        sb = Sandbox(SandboxConfig(cpu_time_s=1, wall_time_s=3, extra_paths=(str(data_dir),)), max_concurrency=1)
        full_isolation(sb)
        code = "\n".join([
            f"print(open({str(data_dir / 'table.txt')!r}).read())",
            "open('/tmp/scratch.txt', 'w').write('ok')",  # the rest of /tmp stays the private scratch space
            "import os",
            "print(sorted(os.listdir('/tmp')))"])
        r = sb.run(code)
        assert r.ok, r.stderr
        assert r.stdout.split("\n")[:2] == ["42", str(sorted([data_dir.name, "sandbox", "scratch.txt"]))]
        assert sorted(p.name for p in data_dir.iterdir()) == ["table.txt"]
        assert not Path("/tmp/scratch.txt").exists()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.mark.parametrize("path", ["/", "/tmp", "/tmp/", "/tmp/sandbox", "/tmp/sandbox/data", "/proc/self", "/dev",
                                  "/dev/nvidia0", "data/table.txt"])
def test_extra_paths_the_sandbox_makes_itself_are_refused(path):
    with pytest.raises(ValueError, match="SandboxConfig.extra_paths"):
        SandboxConfig(extra_paths=(path,))


def test_writes_outside_workdir_do_not_land():
    sb = Sandbox(SandboxConfig(cpu_time_s=1, wall_time_s=3), max_concurrency=1)
    name = f"sandbox_escape_{uuid.uuid4().hex}.txt"
    targets = [Path(PROJECT_ROOT) / name, Path("/tmp") / name, Path("/var/tmp") / name, Path("/") / name,
               Path("/etc") / name, Path("/usr/lib") / name]
    code = "\n".join(
        [f"for p in {[str(t) for t in targets]!r}:",
         "    try:",
         "        open(p, 'w').write('pwned')",
         "        print('wrote', p)",
         "    except OSError as e:",
         "        print('blocked', p, e.errno)",
         "open('local.txt', 'w').write('ok')",  # its own dir is writable
         "print('local ok')"])
    r = sb.run(code)
    assert r.ok and "local ok" in r.stdout
    for t in targets:
        assert not t.exists(), f"sandboxed program wrote {t}"
    assert f"blocked {targets[0]}" in r.stdout  # the project is out of its reach
    if sb.capabilities()["root"]:  # its own root: read-only everywhere but its /tmp
        assert all(f"blocked {t}" in r.stdout for t in targets if t.parent != Path("/tmp"))
    assert_scores_zero(sb, code)


def test_no_network_to_localhost(sandbox):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted = []
    finished = threading.Event()

    def accept():
        while not finished.is_set():
            try:
                conn, _ = server.accept()
                accepted.append(conn)
                return
            except socket.timeout:
                continue

    th = threading.Thread(target=accept)
    th.start()
    code = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "s.sendall(b'leak')\nprint('connected')")
    r = sandbox.run(code)
    finished.set()
    th.join()
    server.setblocking(False)  # a connection that got through has finished its handshake: it is in the backlog
    try:
        accepted.append(server.accept()[0])
    except BlockingIOError:
        pass
    server.close()
    assert r.status == "runtime_error" and "connected" not in r.stdout
    assert not accepted


def test_secrets_do_not_leak(sandbox, tmp_path, monkeypatch):
    secret = "s3cr3t-" + uuid.uuid4().hex
    monkeypatch.setenv("RAGEN_TEST_API_KEY", secret)
    ssh = tmp_path / ".ssh"
    ssh.mkdir()
    (ssh / "id_rsa").write_text(secret)
    monkeypatch.setenv("HOME", str(tmp_path))
    code = "\n".join([
        "import os, glob",
        "print(dict(os.environ))",
        f"for p in [os.path.expanduser('~/.ssh/id_rsa'), {str(ssh / 'id_rsa')!r}, '/root/.ssh/id_rsa',",
        f"          {os.path.join(PROJECT_ROOT, 'README.md')!r}, '/proc/1/environ']:",
        "    try:",
        "        print(p, open(p, errors='replace').read()[:200])",
        "    except OSError as e:",
        "        print('denied', p, e.errno)",
        f"print(glob.glob({PROJECT_ROOT + '/*'!r}))"])
    r = sandbox.run(code)
    assert secret not in r.stdout and secret not in r.stderr
    assert "RAGEN_TEST_API_KEY" not in r.stdout
    assert "ragen-jax" not in r.stdout  # README content
    assert r.stdout.strip().endswith("[]")  # the project folder looks empty


def test_gigabyte_of_output_is_cut(sandbox):
    t = time.monotonic()
    r = sandbox.run("import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)")
    assert r.status == "output_limit"
    assert len(r.stdout) <= sandbox.config.max_output_bytes
    assert time.monotonic() - t < 30
    assert_scores_zero(sandbox, "print('3' * (1 << 30))")


def test_workdir_is_removed(sandbox, tmp_path, monkeypatch):
    """In a temp root of its own: another test process's live sandbox in /tmp is not this one's leftover."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    r = sandbox.run("open('big.bin', 'wb').write(b'0' * 1000)\nimport os\nprint(os.getcwd())")
    assert r.ok
    assert os.listdir(tmp_path) == []


def test_degraded_mode_blocks_sockets_and_processes():
    """Without namespaces or uid switching, the audit hook still refuses sockets and new processes."""
    sb = Sandbox(SandboxConfig(cpu_time_s=1, wall_time_s=3, use_namespaces=False, drop_privileges=False),
                 max_concurrency=1)
    caps = sb.capabilities()
    assert not caps["netns"] and caps["uid"] is None
    assert {"socket.__new__", "os.fork", "subprocess.Popen"} <= set(caps["audit_hook"])
    assert sb.run("print(sum(map(int, input().split())))", "2 3\n").stdout.strip() == "5"
    r = sb.run("import socket\nsocket.socket()")
    assert r.status == "runtime_error" and "not allowed" in r.stderr
    r = sb.run("import os\nos.fork()")
    assert r.status == "runtime_error" and "not allowed" in r.stderr
    r = sb.run("import os\nprint(sorted(os.environ), os.getcwd() == os.environ['HOME'])")
    assert r.stdout.strip() == "['HOME', 'LANG', 'LC_ALL', 'PATH', 'TMPDIR'] True"


def test_strict_mode_refuses_without_isolation():
    sb = Sandbox(SandboxConfig(use_namespaces=False, drop_privileges=False, strict=True), max_concurrency=1)
    r = sb.run("print('ran')")
    assert r.status == "sandbox_error" and "ran" not in r.stdout


def test_stdin_cannot_be_reread(sandbox):
    r = sandbox.run("import sys\nfirst = sys.stdin.read()\ntry:\n    sys.stdin.seek(0)\n"
                    "    print('again', sys.stdin.read())\nexcept OSError:\n    print('unseekable', first)",
                    "secret-input")
    assert r.ok and r.stdout.strip() == "unseekable secret-input"
