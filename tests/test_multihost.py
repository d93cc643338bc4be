"""Two processes on 127.0.0.1 joined by jax.distributed (2 CPU devices each) run a sharded train step, and a
whole Trainer.train() run, each equal to the single-process result."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
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
    assert ((s["coordinator_address"], s["num_processes"], s["process_id"], s["local_device_ids"])
            == ("a:1", 4, 1, [0, 1]))
    assert distributed_settings(None, environ={})["num_processes"] == 1
    with pytest.raises(ValueError, match="coordinator"):
        distributed_settings({"distributed": {"num_processes": 2}}, environ={})
    with pytest.raises(ValueError, match="process_id"):
        distributed_settings(None, environ={"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "2",
                                            "JAX_PROCESS_ID": "2"})


def test_process_local_helpers_with_one_process():
    from ragen_jax.sharding import (agree_any, agree_max, allgather_objects, global_to_local_rows, make_mesh,
                                    process_rows, rows_to_global)

    assert allgather_objects({"a": [1, 2]}) == [{"a": [1, 2]}]
    assert agree_max(7) == (7,) and agree_max(3, 5) == (3, 5) and agree_any(True) and not agree_any(False)
    mesh = make_mesh()
    assert process_rows(None, 6) == process_rows(mesh, 6) == slice(0, 6)
    local = np.arange(12).reshape(6, 2)
    x = rows_to_global(local, mesh, 6)
    assert x.shape == (6, 2)
    np.testing.assert_array_equal(global_to_local_rows(x, slice(2, 5)), local[2:5])


def _run_processes(script: str, args: list[str], num_processes: int, devices_per_process: int,
                   timeout_s: float = 600) -> None:
    """Run `script args` as `num_processes` jax.distributed processes on 127.0.0.1 (one plain process if 1)."""
    port = _free_port()
    procs = []
    # Logs go to files: with pipes read one after the other, a chatty process blocks on a full pipe and
    # the other waits for it in a collective forever.
    logs = [tempfile.TemporaryFile("w+") for _ in range(num_processes)]
    timed_out = False
    try:
        for pid in range(num_processes):
            env = dict(os.environ, JAX_PLATFORMS="cpu",
                       XLA_FLAGS=f"--xla_force_host_platform_device_count={devices_per_process}",
                       PYTHONPATH=os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")]))
            if num_processes > 1:
                env.update(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES=str(num_processes),
                           JAX_PROCESS_ID=str(pid))
            procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, script), *args], env=env,
                                          stdout=logs[pid], stderr=subprocess.STDOUT, text=True))
        deadline = time.monotonic() + timeout_s
        for p in procs:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                break
        timed_out = any(p.poll() is None for p in procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if timed_out or any(p.returncode for p in procs):
        tails = []
        for pid, f in enumerate(logs):
            f.seek(0)
            tails.append(f"--- process {pid} (exit {procs[pid].returncode}):\n" + f.read()[-3000:])
        pytest.fail((f"timed out after {timeout_s:.0f} s" if timed_out else "a process failed") + "\n"
                    + "\n".join(tails))
    for f in logs:
        f.close()


@pytest.mark.slow
def test_two_process_train_step_matches_single_process(tmp_path):
    out = str(tmp_path / "result.npz")
    _run_processes("multihost_worker.py", [out], num_processes=2, devices_per_process=2)
    got = dict(np.load(out))
    assert got.pop("check/process_count") == 2
    assert got.pop("check/local_batch_equal") and got.pop("check/global_batch_equal")

    import sharding_testlib as L

    want = L.train_step(None)
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-4, atol=2e-5, err_msg=k)


def _assert_same_training(got: dict, want: dict) -> None:
    """The 2-process run changed each model's parameters as the 1-process run did, in each phase: the
    difference of the changes is small next to the change itself (a run that did not train, or trained
    on other data, differs by about the whole change)."""
    for model in ("param/", "critic/"):
        names = [k for k in want if k.startswith(model)]
        for phase, (before, after) in {"warm start": ("initial/", "rl_start/"), "RL": ("rl_start/", "")}.items():
            change_got = np.concatenate([(got[after + k] - got[before + k]).ravel() for k in names])
            change_want = np.concatenate([(want[after + k] - want[before + k]).ravel() for k in names])
            size = np.linalg.norm(change_want)
            assert size > 0, f"{model} {phase}: the 1-process run did not change the parameters"
            rel = np.linalg.norm(change_got - change_want) / size
            # measured: 2e-7 (warm start), 4e-5 (actor RL), 1.4e-5 (critic RL); float32 summation order
            assert rel < 2e-4, f"{model} {phase}: the runs' parameter changes differ by {rel:.3g} of the change"


@pytest.mark.slow
def test_two_process_trainer_run_matches_single_process(tmp_path):
    """Trainer.train() across 2 processes (each playing its half of the episodes with its own envs) gives the
    single-process run's metrics, validation and parameters; it checkpoints, exports and resumes."""
    import json

    multi, single = str(tmp_path / "multi"), str(tmp_path / "single")
    _run_processes("multihost_trainer_worker.py", [multi], num_processes=2, devices_per_process=2)
    _run_processes("multihost_trainer_worker.py", [single], num_processes=1, devices_per_process=4)
    got, want = dict(np.load(os.path.join(multi, "result.npz"))), dict(np.load(os.path.join(single, "result.npz")))
    assert (got.pop("processes"), want.pop("processes")) == (2, 1)
    assert (got.pop("local_episodes"), want.pop("local_episodes")) == (4, 8)
    assert got.pop("rows").tolist() == [0, 4] and want.pop("rows").tolist() == [0, 8]
    assert got.keys() == want.keys()
    _assert_same_training(got, want)
    got_log, want_log = (json.load(open(os.path.join(d, "result.json"))) for d in (multi, single))
    assert got_log["summary"] == want_log["summary"]  # validation success before/after warm start and per step
    assert len(got_log["steps"]) == len(want_log["steps"]) == 2
    for g, w in zip(got_log["steps"], want_log["steps"]):
        assert g.keys() == w.keys()
        assert w["rollout/filter_kept_count"] > 0 and "actor/pg_loss" in w and "critic/vf_loss" in w
        assert any(k.startswith("collapse_") and k.endswith("/conditional_entropy_est") for k in w)  # MI ran
        for k in w:
            np.testing.assert_allclose(g[k], w[k], rtol=1e-4, atol=1e-5, err_msg=k)
    for d in ("checkpoints", "hf_export", "tb"):
        assert os.listdir(os.path.join(multi, d)), d
    with open(os.path.join(multi, "hf_export", "config.json")) as f:
        assert json.load(f)["vocab_size"] > 0

    _run_processes("multihost_trainer_worker.py", [multi, "resume"], num_processes=2, devices_per_process=2)
    resumed = np.load(os.path.join(multi, "resumed.npz"))
    assert int(resumed["start_step"]) == 2
    with open(os.path.join(multi, "resumed.json")) as f:
        assert len(json.load(f)["steps"]) == 1


@pytest.mark.slow
def test_a_signal_to_one_host_stops_every_host_after_the_same_step(tmp_path):
    """SIGTERM reaching process 1 only during step 1: both processes finish that step, agree to stop, save it
    together (one checkpoint of step 1) and report the signal; before, several hosts died at once on a signal."""
    import json

    from ragen_jax.checkpoint import finished_steps

    workdir = str(tmp_path / "run")
    _run_processes("multihost_trainer_worker.py", [workdir, "signal"], num_processes=2, devices_per_process=2)
    for pid in (0, 1):
        with open(os.path.join(workdir, f"signal_{pid}.json")) as f:
            result = json.load(f)
        assert result["steps"] == [0] and result["stopped_by_signal"] == "SIGTERM", (pid, result)
        assert "--config.trainer.resume=True" in result["stop_reason"]
    assert finished_steps(os.path.join(workdir, "checkpoints")) == [0]
    assert not os.path.exists(os.path.join(workdir, "hf_export"))


@pytest.mark.slow
def test_a_checkpoint_write_failing_on_one_host_fails_on_every_host_in_step(tmp_path):
    """Checkpoint 0's write fails (a full disk) on process 1 only: both processes raise CheckpointWriteError
    naming process 1's error within the barrier timeout, then both write checkpoint 1 and restore it. Before,
    process 1 raised alone and process 0 waited in Orbax's barrier, which its next collective broke (a crash)."""
    import json

    from multihost_checkpoint_worker import BARRIER_TIMEOUT_S

    _run_processes("multihost_checkpoint_worker.py", [str(tmp_path)], num_processes=2, devices_per_process=2,
                   timeout_s=180)
    results = []
    for pid in (0, 1):
        with open(tmp_path / f"process_{pid}.json") as f:
            results.append(json.load(f))
    for r in results:
        assert r["first"] and r["first"].startswith("CheckpointWriteError: Checkpoint 0 could not be written"), r
        assert "process 1: OSError: [Errno 28] No space left on device" in r["first"], r
        assert r["first_s"] < BARRIER_TIMEOUT_S + 30, r  # bounded by the barrier timeout, not a hang
        assert r["second"] is None and r["restored_matches"], r
        assert r["steps"] == [1] and r["entries"] == ["1"], r  # no partial folder of checkpoint 0 is left
    assert results[0]["first"] == results[1]["first"]  # the same decision and message on every host


@pytest.mark.slow
def test_two_process_asynchronous_run(tmp_path):
    """trainer.schedule=async across 2 processes: each host's rollout worker plays its half of every step on its
    own device, the learners (one device per host) gather the halves and train; both hosts agree on every step's
    metrics and on the final parameters, and no trained token is staler than max_staleness 1."""
    import json

    workdir = str(tmp_path / "run")
    _run_processes("multihost_trainer_worker.py", [workdir, "async"], num_processes=2, devices_per_process=2,
                   timeout_s=600)
    results = [json.load(open(os.path.join(workdir, f"async_{pid}.json"))) for pid in (0, 1)]
    for r in results:
        assert r["steps_run"] == 3 and r["rollout_index"] == 3 and len(r["steps"]) == 3
        assert (r["local_episodes"], r["learner_devices"], r["rollout_devices"]) == (4, 2, 1)
        assert all("actor/pg_loss" in s and s["async/staleness_max"] <= 1 for s in r["steps"])
    assert results[0]["steps"] == results[1]["steps"] and results[0]["digest"] == results[1]["digest"]
