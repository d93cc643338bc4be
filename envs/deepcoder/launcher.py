"""Sandbox launcher: a fresh single-threaded process that isolates a program, then runs it.

Run as `python -I -S launcher.py <config-json>` by `sandbox.py` (stdlib only, no package imports).
It applies what the host allows: new PID, mount, network, IPC and UTS namespaces. In a PID namespace
it forks the namespace's init and leaves as that init leaves. The init builds a new root: a
read-only tmpfs holding read-only bind mounts of only the host paths in `view` (the interpreter's),
a few device nodes, the namespace's own /proc, and size-capped tmpfs /tmp (with the working dir
/tmp/sandbox) and /dev/shm; it pivots into it and detaches the host's tree. It forks the program
(resource limits, an unprivileged uid, exec), reaps orphans until the program exits, reports how it
exited and exits, which kills every process left in the namespace. What was applied is reported as
JSON lines on `status_fd`. Without a PID namespace the launcher itself becomes the program. Config
keys: see `Sandbox._launch_config`.
"""

import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 0x1, 0x2, 0x4, 0x8, 0x20
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
MNT_DETACH = 0x2
PR_SET_PDEATHSIG = 1
PIVOT_ROOT_SYSCALL = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
WORKDIR = "/tmp/sandbox"
DEVICES = ("null", "zero", "full", "random", "urandom")
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"))

# Run in the sandboxed interpreter when no network namespace (or no unprivileged uid) is available:
# an audit hook (it cannot be removed from Python) that refuses sockets and new processes.
FALLBACK_BOOTSTRAP = """
import sys
_BLOCKED = {BLOCKED!r}
def _sandbox_hook(event, args):
    if event in _BLOCKED:
        raise PermissionError("sandbox: " + event + " is not allowed")
sys.addaudithook(_sandbox_hook)
del _sandbox_hook
import runpy
sys.argv = ["solution.py"]
runpy.run_path("solution.py", run_name="__main__")
"""
NET_EVENTS = ["socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo"]
PROC_EVENTS = ["os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
               "subprocess.Popen", "os.kill", "os.killpg", "ctypes.dlopen"]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _mount(libc, source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(libc.mount(_bytes(source), target.encode(), _bytes(fstype), flags, _bytes(data)),
           f"mount {source} on {target}")


def _bind(libc, source: str, target: str, flags: int) -> None:
    """Show `source` at `target` with per-mount `flags` (MS_RDONLY, MS_NOSUID, ...)."""
    _mount(libc, source, target, None, MS_BIND)
    _mount(libc, None, target, None, MS_BIND | MS_REMOUNT | flags)


def _mount_scratch(libc, target: str, size: str) -> None:
    """A writable, size-capped tmpfs from which nothing can be executed."""
    _mount(libc, "tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"size={size},mode=1777")


def _enter_namespaces(libc, cfg: dict, status: dict) -> None:
    rest = CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    attempts = ((CLONE_NEWPID | CLONE_NEWNS | rest, ("pidns", "mountns", "netns")),
                (CLONE_NEWNS | rest, ("mountns", "netns")),
                (CLONE_NEWNET, ("netns",)))
    for flags, kinds in attempts:
        if libc.unshare(flags) == 0:
            status.update(dict.fromkeys(kinds, True))
            return
        status["errors"].append(f"unshare({'+'.join(kinds)}): {os.strerror(ctypes.get_errno())}")


def _leave_as(wstatus: int) -> None:
    """Exit with the same code as a waited-for child, or die of the same signal."""
    if os.WIFSIGNALED(wstatus):
        sig = os.WTERMSIG(wstatus)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(wstatus))


def _supervise(child: int) -> None:
    """The launcher in the host's PID namespace: wait for the namespace's init and leave as it left."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _, wstatus = os.waitpid(child, 0)
    _leave_as(wstatus)


def _init(program: int, status_fd: int) -> None:
    """PID 1 of the namespace: reap every orphan until the program exits, report how, and exit, which
    makes the kernel kill whatever is left. (The program itself is not PID 1: the kernel drops signals
    to PID 1 that it has no handler for, RLIMIT_CPU's SIGXCPU among them.)"""
    while True:
        pid, wstatus = os.waitpid(-1, 0)
        if pid == program:
            break
    if os.WIFSIGNALED(wstatus):
        _report(status_fd, {"exit": {"signal": os.WTERMSIG(wstatus)}})
        os._exit(128 + os.WTERMSIG(wstatus))
    _report(status_fd, {"exit": {"code": os.waitstatus_to_exitcode(wstatus)}})
    os._exit(os.waitstatus_to_exitcode(wstatus))


def _report(status_fd: int, record: dict) -> None:
    os.write(status_fd, (json.dumps(record) + "\n").encode())


def _make_mount_point(root: str, path: str) -> str:
    target = root + path
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    if os.path.isdir(path):
        os.mkdir(target, 0o755)
    else:
        open(target, "x").close()
    return target


def _expose(libc, root: str, path: str) -> None:
    """Show host `path` (a symlink or a real path) at the same place under `root`, read-only."""
    if os.path.islink(path):
        os.makedirs(os.path.dirname(root + path), mode=0o755, exist_ok=True)
        os.symlink(os.readlink(path), root + path)
        return
    if os.path.realpath(path) != path:
        raise ValueError(f"view path {path} goes through a symlink; list the symlink and its real path instead")
    _bind(libc, path, _make_mount_point(root, path), MS_RDONLY | MS_NOSUID | MS_NODEV)


def _add_devices(libc, root: str, cfg: dict) -> None:
    os.mkdir(root + "/dev", 0o755)
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            _bind(libc, f"/dev/{name}", _make_mount_point(root, f"/dev/{name}"), MS_NOSUID | MS_NOEXEC)
    for name, target in DEV_LINKS:
        os.symlink(target, f"{root}/dev/{name}")
    os.mkdir(root + "/dev/shm")
    _mount_scratch(libc, root + "/dev/shm", cfg["tmp_size"])


def _enter_root(libc, root: str, status: dict) -> None:
    os.chdir(root)
    nr = PIVOT_ROOT_SYSCALL.get(os.uname().machine)
    if nr is not None and libc.syscall(nr, b".", b".") == 0:
        _check(libc.umount2(b".", MNT_DETACH), "detach the host's root")
        status["root"] = "pivot_root"
    else:  # an unprivileged uid cannot leave a chroot either
        os.chroot(".")
        status["root"] = "chroot"
    os.chdir("/")


def _build_root(libc, cfg: dict, status: dict) -> str:
    """A new root with only the view, devices, /proc (own PID namespace only), private /tmp; enter it."""
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    os.umask(0o022)  # the directories made for mount points must be traversable by the run's uid
    root = cfg["staging_dir"]
    with open(os.path.join(root, "solution.py"), "rb") as f:
        program = f.read()
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    os.mkdir(root + "/tmp")  # first: a view path under /tmp is mounted inside the private /tmp
    _mount_scratch(libc, root + "/tmp", cfg["tmp_size"])
    for path in cfg["view"]:
        _expose(libc, root, path)
    _add_devices(libc, root, cfg)
    os.mkdir(root + "/proc", 0o555)
    if status["pidns"]:  # a /proc without a PID namespace of its own would show every host process
        _mount(libc, "proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    workdir = root + WORKDIR
    os.mkdir(workdir, 0o700)
    with open(os.path.join(workdir, "solution.py"), "wb") as f:
        f.write(program)
    os.chmod(os.path.join(workdir, "solution.py"), 0o644)
    if cfg["uid"] is not None:
        os.chown(workdir, cfg["uid"], cfg["gid"])
    _mount(libc, None, root, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _enter_root(libc, root, status)
    status["view"] = list(cfg["view"])
    return WORKDIR


def _set_limits(cfg: dict) -> None:
    cpu = int(cfg["cpu_time_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    mem = int(cfg["memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    fsize = int(cfg["file_size_bytes"])
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(cfg["max_open_files"]),) * 2)
    nproc = int(cfg["max_processes"])
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def _drop_privileges(libc, cfg: dict) -> None:
    if cfg["uid"] is None:
        return
    os.setgroups([])
    os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
    os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
    if os.getresuid() != (cfg["uid"],) * 3:
        raise RuntimeError(f"could not switch to uid {cfg['uid']}")
    _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")  # the uid change cleared it


def _plan(cfg: dict, status: dict, workdir: str) -> tuple[list[str], dict[str, str]]:
    """The program's argv and environment; fills in what the program will run under."""
    status["uid"] = cfg["uid"]
    # RLIMIT_NPROC counts the processes of the real uid and is not enforced for root.
    status["nproc_enforced"] = cfg["uid"] is not None and cfg["uid"] != 0
    blocked = [] if status["netns"] else list(NET_EVENTS)
    if not status["nproc_enforced"]:
        blocked += PROC_EVENTS
    status["audit_hook"] = blocked
    full = status["netns"] and status["pidns"] and status["root"] and status["nproc_enforced"]
    if cfg["strict"] and not full:
        raise RuntimeError("strict sandbox requested but PID/mount/network namespaces or an unprivileged uid "
                           "are unavailable")
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    argv = [cfg["interpreter"], "-I", "-X", "utf8"]
    argv += ["-c", FALLBACK_BOOTSTRAP.replace("{BLOCKED!r}", repr(blocked))] if blocked else ["solution.py"]
    return argv, env


def _become_program(libc, cfg: dict, status_fd: int, workdir: str, argv: list[str], env: dict[str, str]) -> None:
    """Limits, the run's uid, exec. Never returns; a failure is reported and the program never runs."""
    try:
        os.chdir(workdir)
        _set_limits(cfg)
        _drop_privileges(libc, cfg)
        os.close(status_fd)
    except Exception as e:
        _report(status_fd, {"fatal": f"{type(e).__name__}: {e}"})
        os._exit(121)
    os.execve(cfg["interpreter"], argv, env)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    status = {"netns": False, "mountns": False, "pidns": False, "root": None, "view": [], "private_tmp": False,
              "uid": None, "nproc_enforced": False, "audit_hook": [], "errors": []}
    status_fd = cfg["status_fd"]
    try:
        libc = _libc()
        _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")  # dies with the harness thread
        if os.getppid() != cfg["parent_pid"]:
            raise RuntimeError("the harness exited before the launcher started")
        workdir = cfg["staging_dir"]
        if cfg["use_namespaces"]:
            _enter_namespaces(libc, cfg, status)
        if status["pidns"]:
            child = os.fork()
            if child:
                os.close(status_fd)
                _supervise(child)
            _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")  # dies with the launcher
        if status["mountns"]:
            workdir = _build_root(libc, cfg, status)
            status["private_tmp"] = True
        argv, env = _plan(cfg, status, workdir)
    except Exception as e:  # report, then refuse to run the program
        status["fatal"] = f"{type(e).__name__}: {e}"
        _report(status_fd, status)
        os._exit(121)
    _report(status_fd, status)
    if status["pidns"]:
        try:
            program = os.fork()
        except OSError as e:
            _report(status_fd, {"fatal": f"fork the program: {e}"})
            os._exit(121)
        if program:
            _init(program, status_fd)
    _become_program(libc, cfg, status_fd, workdir, argv, env)


if __name__ == "__main__":
    main()
