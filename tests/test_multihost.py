"""Two processes on 127.0.0.1 joined by jax.distributed (2 CPU devices each) run a sharded train step
whose result equals the single-process one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from ragen_jax.sharding.distributed import distributed_settings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_settings_from_env_override_config():
    cfg = {"distributed": {"coordinator_address": "a:1", "num_processes": 4, "process_id": 3}}
    s = distributed_settings(cfg, environ={"JAX_PROCESS_ID": "1", "JAX_LOCAL_DEVICE_IDS": "0,1"})
    assert (s["coordinator_address"], s["num_processes"], s["process_id"], s["local_device_ids"]) == ("a:1", 4, 1, [0, 1])
    assert distributed_settings(None, environ={})["num_processes"] == 1
    with pytest.raises(ValueError, match="coordinator"):
        distributed_settings({"distributed": {"num_processes": 2}}, environ={})
    with pytest.raises(ValueError, match="process_id"):
        distributed_settings(None, environ={"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "2",
                                            "JAX_PROCESS_ID": "2"})


@pytest.mark.slow
def test_two_process_train_step_matches_single_process(tmp_path):
    out = str(tmp_path / "result.npz")
    port = _free_port()
    procs = []
    try:
        for pid in range(2):
            env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2",
                       JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(pid),
                       PYTHONPATH=os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")]))
            procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "multihost_worker.py"), out], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        deadline = time.monotonic() + 600
        logs = []
        for p in procs:
            logs.append(p.communicate(timeout=max(deadline - time.monotonic(), 1))[0])
        assert all(p.returncode == 0 for p in procs), "\n---\n".join(log[-3000:] for log in logs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    got = dict(np.load(out))
    assert got.pop("check/process_count") == 2
    assert got.pop("check/local_batch_equal") and got.pop("check/global_batch_equal")

    import sharding_testlib as L

    want = L.train_step(None)
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-4, atol=2e-5, err_msg=k)
