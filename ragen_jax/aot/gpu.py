"""The GPU path without a GPU: lower every compiled program for CUDA on a CPU host, and compile it for an H100 or
H200 that is not there (jax's deviceless ahead-of-time path), then read XLA's own bytes and FLOPs.

- `lower_for_cuda`: StableHLO for the "cuda" platform with the CPU jaxlib (no plugin needed), traced as a GPU run
  traces it (`target.compiling_for`: cuDNN attention for training and prefill, dense decode windows, no CPU-only
  decode lanes or weights), then checked for what a GPU program must not hold (`cpu_only_calls`).
- `compile_for_gpu`: with jax-cuda12-plugin installed (requirements-gpu-aot.txt) and JAX_PLATFORMS=cpu, a
  compile-only topology of 1 or 8 GPUs of XLA's H100 or H200 spec; `compiled_stats` then gives per-device
  argument / output / temp bytes and FLOPs.
- `roofline`: the paper lower bounds per call (bytes / HBM bandwidth for decode, FLOPs / bf16 peak for updates).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from typing import Any, Iterator

import jax

from ragen_jax.aot.programs import Program
from ragen_jax.models import target
from ragen_jax.sharding.planning import CARD_BYTES

# cuDNN's version the plugin-less lowering assumes: the lowest jax-cuda12-plugin 0.10.2 accepts (nvidia-cudnn-cu12
# >= 9.8). Tracing cuDNN attention asks the plugin for the version; the lowered custom call only records checks.
ASSUMED_CUDNN_VERSION = 90800
# The cards: name, compute capability, SMs, HBM bytes (what the driver reports: 80 GB / 141 GB cards), bandwidth
# (bytes/s) and dense bf16 peak (FLOP/s), from NVIDIA's H100 SXM5 and H200 SXM datasheets.
GPUS = {
    "h100": dict(name="NVIDIA H100 80GB HBM3", capability="9.0", sms=132, hbm_bytes=CARD_BYTES["H100 80GB"],
                 bandwidth=3.35e12, bf16_flops=989e12),
    "h200": dict(name="NVIDIA H200 141GB HBM3e", capability="9.0", sms=132, hbm_bytes=CARD_BYTES["H200 141GB"],
                 bandwidth=4.8e12, bf16_flops=989e12),
}
# custom-call targets a GPU program must not hold: host callbacks (a round trip to Python per call) and CPU
# kernels (LAPACK, DUCC FFT) that only exist in the CPU runtime
_CPU_ONLY = re.compile(r"callback|lapack|ducc|_cpu|cpu_")


class CpuOnlyProgramError(RuntimeError):
    """A program that lowers for the CPU only, or holds a host callback or CPU kernel in its GPU form."""


@contextlib.contextmanager
def cudnn_traceable() -> Iterator[str]:
    """Within it cuDNN attention traces on a host without jax-cuda12-plugin (its version query is the plugin's);
    yields "plugin" where the plugin is installed (nothing changed), else "assumed <version>"."""
    from jax._src.cudnn import fused_attention_stablehlo as fused
    from jax._src.lib import cuda_versions

    if cuda_versions is not None:
        yield "plugin"
        return
    original = fused.check_cudnn_version
    fused.check_cudnn_version = lambda: ASSUMED_CUDNN_VERSION
    try:
        yield f"assumed {ASSUMED_CUDNN_VERSION}"
    finally:
        fused.check_cudnn_version = original


def _under(mesh):
    return contextlib.nullcontext() if mesh is None else jax.set_mesh(mesh)


def custom_calls(text: str) -> set[str]:
    """The custom-call targets of a StableHLO module's text."""
    return set(re.findall(r"stablehlo\.custom_call @([\w$.\-]+)", text)) | set(
        re.findall(r'call_target_name = "([^"]+)"', text))


def cpu_only_calls(text: str) -> list[str]:
    """The custom calls in a lowered module that only the CPU runtime has, or that call back into the host."""
    return sorted(c for c in custom_calls(text) if _CPU_ONLY.search(c.lower()))


@dataclasses.dataclass
class Lowering:
    name: str
    seconds: float
    custom_calls: set[str]
    text: str = ""


def lower_for_cuda(program: Program, mesh=None, capability: str = "9.0") -> Lowering:
    """StableHLO of `program` for the "cuda" platform, traced as on a GPU of `capability`; raises
    CpuOnlyProgramError naming the program where it cannot lower for CUDA or holds CPU-only calls."""
    t0 = time.perf_counter()
    try:
        with target.compiling_for("gpu", capability), cudnn_traceable(), _under(mesh):
            lowered = program.trace().lower(lowering_platforms=("cuda",))
    except NotImplementedError as e:  # a primitive without a CUDA lowering rule
        raise CpuOnlyProgramError(f"{program.name}: does not lower for CUDA: {e}") from e
    except ValueError as e:
        if "lowering platform" not in str(e):  # a host callback pinned to the CPU backend
            e.add_note(f"while lowering {program.name} for CUDA")
            raise
        raise CpuOnlyProgramError(f"{program.name}: holds a host callback, which lowers for the CPU only: {e}") from e
    text = lowered.as_text()
    bad = cpu_only_calls(text)
    if bad:
        raise CpuOnlyProgramError(f"{program.name}: its CUDA lowering holds CPU-only / host-callback custom calls "
                                  f"{bad}; a GPU run would stall on the host (or fail) there.")
    return Lowering(program.name, time.perf_counter() - t0, custom_calls(text), text)


# ------------------------------------------------------------------------------------ deviceless compile
def plugin_missing() -> str | None:
    """Why a deviceless GPU compile cannot run here (None when it can): jax-cuda12-plugin is not installed."""
    try:
        import jax_plugins.xla_cuda12  # noqa: F401
    except ImportError:
        return ("jax-cuda12-plugin is not installed: pip install -r requirements-gpu-aot.txt in a separate virtual "
                "environment (see docs/performance_gpu.md)")
    return None


def gpu_topology(gpu: str, count: int):
    """Compile-only devices: `count` GPUs of XLA's `gpu` spec ("h100" | "h200") on one host."""
    from jax.experimental import topologies

    return topologies.get_topology_desc(platform="cuda", target_config=_target_config(gpu),
                                        topology=f"1x1x{count}").devices


def _target_config(gpu: str) -> str:
    """A GpuTargetConfigProto (text format) for `gpu` from the card's public figures: what XLA's GPU compiler reads
    to pick tilings and check fits when no device is attached."""
    g = GPUS[gpu]
    major, minor = g["capability"].split(".")
    return (f"gpu_device_info {{\n  threads_per_block_limit: 1024\n  threads_per_warp: 32\n"
            f"  shared_memory_per_block: 49152\n  shared_memory_per_core: 233472\n  threads_per_core_limit: 2048\n"
            f"  core_count: {g['sms']}\n  fpus_per_core: 128\n  block_dim_limit_x: 2147483647\n"
            f"  block_dim_limit_y: 65535\n  block_dim_limit_z: 65535\n  memory_bandwidth: {int(g['bandwidth'])}\n"
            f"  l2_cache_size: {50 * 2**20}\n  clock_rate_ghz: 1.98\n  device_memory_size: {g['hbm_bytes']}\n"
            f"  shared_memory_per_block_optin: 232448\n"
            f"  cuda_compute_capability {{ major: {major} minor: {minor} }}\n"
            f"  registers_per_core_limit: 65536\n  registers_per_block_limit: 65536\n}}\n"
            f"platform_name: \"CUDA\"\ndnn_version_info {{ major: 9 minor: 8 patch: 0 }}\n"
            f"device_description_str: \"{g['name']}\"\n")


def compile_for_gpu(program: Program, mesh, capability: str | None = "9.0") -> Any:
    """`program` compiled for the devices `mesh` is built over: compile-only `gpu_topology` devices, traced as a
    GPU of `capability` (None: the attached GPU, as a run traces it)."""
    named = target.compiling_for("gpu", capability) if capability else contextlib.nullcontext()
    with named, cudnn_traceable(), _under(mesh):
        return program.trace().lower().compile()


@dataclasses.dataclass
class CompiledStats:
    """Per-device bytes XLA reserves for one compiled program, and its FLOPs (cost analysis, one device)."""

    argument: int
    output: int
    alias: int
    temp: int
    flops: float
    bytes_accessed: float

    @property
    def peak(self) -> int:
        """Arguments + outputs - aliased (donated) + temporaries: `sharding.memory.measured_bytes`."""
        return self.argument + self.output - self.alias + self.temp


def compiled_stats(compiled) -> CompiledStats:
    m = compiled.memory_analysis()
    cost = compiled.cost_analysis() or {}
    if isinstance(cost, list):
        cost = cost[0] if cost else {}
    return CompiledStats(argument=int(m.argument_size_in_bytes), output=int(m.output_size_in_bytes),
                         alias=int(m.alias_size_in_bytes), temp=int(m.temp_size_in_bytes),
                         flops=float(cost.get("flops", 0.0)), bytes_accessed=float(cost.get("bytes accessed", 0.0)))


def roofline(stats: CompiledStats, program: Program, gpu: str) -> dict[str, float]:
    """Paper lower bounds on `gpu`: a decode step streams at least the decode program's arguments (the weights and
    the KV cache it attends over) from HBM once, so step >= argument bytes / bandwidth and tokens/s <= rows / step;
    a call needs its FLOPs at the dense bf16 peak. -> {"step_bound_s", "tokens_per_s_bound" (decode only),
    "flops_bound_s"} (per device: stats are one device's share)."""
    spec = GPUS[gpu]
    out = {"flops_bound_s": stats.flops / spec["bf16_flops"]}
    if program.kind == "decode":
        rows = int(program.args[3].lengths.shape[0])  # decode: (params, weights, cache, state, temperature)
        step = stats.argument / spec["bandwidth"]
        out.update(step_bound_s=step, tokens_per_s_bound=rows / step)
    return out


