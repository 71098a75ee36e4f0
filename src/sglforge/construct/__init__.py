"""What a pinned sglang release builds for a launch, by running that release's own code.

One construction serves every caller: ``configs coverage`` reads its fused-MoE shapes and token
counts, ``scan`` its quant decisions and how QuarkConfig matched the checkpoint's excludes, the
0002 differential test its per-module decisions. :func:`build` runs the child program
(:mod:`sglforge.construct.child`) on a release tree (its ``python/`` folder, e.g. from the PyPI
wheel), in a fresh interpreter (two releases never share ``sys.modules``) and an empty working
folder; the child imports that release with stand-ins for torch and the GPU stack
(:mod:`sglforge.construct.shims`) that describe the target's device, parses the launch with
sglang's own parser and ``ServerArgs.__post_init__``, and constructs the main model and the MTP
draft through sglang's own loader. The result is typed (:mod:`sglforge.construct.built`).

Real, not stand-ins:

- transformers' configuration classes: config.json is read by the transformers version the
  release's wheel pins (``Requires-Dist``: 0.5.14 ``transformers==5.8.1``, 0.5.23 ``5.19.0``),
  installed for real from the package index with the closure of its requirements, in a
  separate config-only child without site-packages or torch (:mod:`sglforge.construct.hfresolve`,
  :mod:`sglforge.construct.configchild`). The sglang child then runs sglang's own
  ``get_config`` and config parser on that reading (``AutoConfig.from_pretrained`` answers with
  it). A config transformers' own class cannot read here (``trust_remote_code``, a model type it
  does not know) falls back to :mod:`sglforge.construct.hfconfig`'s reading, and
  ``Construction.config_source`` (and coverage's notes) say so;
- msgspec (0.5.23's ``ServerArgs`` is a msgspec struct), and the server's and tokenizer's own
  packages the release requires that have no requirements of their own (einops,
  partial_json_parser, pillow, pybase64, pyzmq, sentencepiece, setproctitle, tqdm), each at the
  version the release requires (:mod:`sglforge.construct.packages`); and whatever the host
  interpreter has installed.

What remains a stand-in in the sglang child (:mod:`sglforge.construct.shims`), and why each
cannot be the real package here (measured on 0.5.14 and 0.5.23: the modules the stub hook
answered for while building GLM-5.2 and its draft):

- torch (and torchvision, torchaudio, torchcodec, torch_memory_saver, torchada): the ROCm build
  needs the GPU runtime and is several GiB; the CPU wheel reports no HIP device, and the
  decisions read the device (``is_hip()``, the shared-experts-fusion check, aiter's
  ``get_cu_num``): the shims describe the target's GPU from images/targets.toml instead;
- the GPU kernels and their runtimes: triton, triton_kernels, aiter, sgl_kernel, flashinfer,
  flash_attn, deep_ep, cuda, cutlass, tilelang, tvm_ffi, vllm, petit_kernel, kt_kernel,
  pplx_kernels, megatron, mlx, xielu, amdsmi, pynvml: they need a GPU (or torch) to
  import; only their import-time surface is read. nixl_ep, which the ROCm image lacks and
  sglang only probes for, is absent as there (``shims.ABSENT``);
- transformers itself (inside the sglang child), and the packages that require torch to import
  (accelerate, compressed_tensors, xgrammar, vector_quantize_pytorch): sglang
  imports transformers' modelling modules, which need the real torch; the configuration is the
  real one, from the config child (above);
- huggingface_hub, safetensors, fastsafetensors, gguf, requests, aiohttp, openai: the clients
  that fetch or read checkpoint files. A construction reads no weights and must never reach
  the Hub (the model folder is not on this host), so they stay stubs on purpose;
- psutil: real, it would report this host's memory and CPUs, and a decision that reads them
  must see the node's (the shims hand in the target's device instead);
- the server's packages that bring their own requirements (starlette, fastapi, uvicorn,
  opentelemetry) and packages only the release's other requirements pull in (lxml, filelock,
  dill, gmpy2, flint): installing them means resolving their closure, and no recorded
  decision reads their behaviour (the construction runs no server); not yet real;
- optional imports libraries probe with ``try: import ...`` (winreg, _winapi, msvcrt, cPickle,
  simplejson, brotlicffi, socks, chardet, backports, org, docrepr, ctags, astroid): the stub
  hook answers them too, where the real environment would raise ImportError;
- the GPU memory (``get_device_memory_capacity``): the target's, handed in.

No weights are loaded and no kernel runs: constructors only.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sglforge.construct.built import Construction, Launch, Model
from sglforge.construct.environment import TargetEnv, default_env
from sglforge.errors import ConfigError
from sglforge.targets import Device

__all__ = [
    "Construction",
    "ConstructionError",
    "Model",
    "Request",
    "TargetEnv",
    "build",
    "build_many",
    "device_json",
    "literal_launch",
]

CHILD_TIMEOUT = 900  # seconds: a 78-layer model and its draft, per batch of requests
DEFAULT_MODEL_PATH = "/models/model"  # --model-path when the launch flags name none


class ConstructionError(ConfigError):
    """sglang's own model construction failed on this tree, config and launch."""


@dataclass(frozen=True)
class Request:
    """One construction: a checkpoint's config.json and the launch flags (models: which to
    build; empty: the main model and, with MTP and NextN layers in the config, the draft)."""

    id: str
    config: Mapping[str, Any]  # config.json, quantization_config included
    launch: Sequence[str]  # sglang launch flags
    models: tuple[str, ...] = ()  # "main", "draft"

    def to_json(self) -> dict[str, Any]:
        launch = list(self.launch)
        if "--model-path" not in launch and not any(a.startswith("--model-path=") for a in launch):
            launch = ["--model-path", DEFAULT_MODEL_PATH, *launch]
        return {"id": self.id, "config": self.config, "launch": launch, "models": self.models}


def build(
    tree: Path,
    config: Mapping[str, Any],
    launch: Sequence[str],
    device: Device,
    env: TargetEnv | None = None,
) -> Construction:
    """What the sglang of ``tree`` (a release's ``python/`` folder) builds for the checkpoint
    config ``config`` launched with ``launch`` on ``device``, in the node's environment ``env``
    (default: the release image's, :func:`environment.default_env`): ConstructionError if it
    fails."""
    return build_many(tree, [Request("launch", config, launch)], device, env)["launch"]


def build_many(
    tree: Path, requests: Sequence[Request], device: Device, env: TargetEnv | None = None
) -> dict[str, Construction]:
    """Several constructions in one child (one import of the release), by request id."""
    tree = Path(tree).resolve()  # the child runs in another working folder
    if not (tree / "sglang" / "srt").is_dir():
        raise ConstructionError(
            f"{tree}: not a sglang release's python/ folder (no sglang/srt)",
            "pass the python/ folder of a release checkout (sglforge patches apply, or a wheel)",
        )
    from sglforge.construct import bounds, hfresolve

    for r in requests:
        bounds.check(r.config, f"config.json of request {r.id!r}")
    target = env if env is not None else default_env(device.gfx)
    packages = hfresolve.environment(tree)
    read = hfresolve.resolve(packages, {r.id: r.config for r in requests}, target)
    requested = []
    for r in requests:
        one = r.to_json()
        if "fallback" not in read[r.id]:
            one["hf"] = read[r.id]
        requested.append(one)
    stdin = json.dumps(
        {
            "device": device_json(device),
            "packages": dict(target.packages),  # the image's versions the shims state
            "requests": requested,
        }
    )
    raw = _run_child(tree, stdin, target)
    return {
        r.id: _construction(tree, r, raw[r.id], device, config_source(read[r.id])) for r in requests
    }


def config_source(record: Mapping[str, Any]) -> str:
    """How config.json was read, for the report: transformers' own class, or the fallback
    and why (never silent)."""
    if "fallback" in record:
        return f"sglforge's hfconfig.HFConfig, not transformers' own class: {record['fallback']}"
    return f"transformers {record['transformers']} ({record['class']})"


def device_json(device: Device) -> dict[str, Any]:
    """``device`` as the child's shims read it (``shims.install``)."""
    return dict(asdict(device), capability=list(device.capability))


def _run_child(tree: Path, stdin: str, target: TargetEnv) -> dict[str, Any]:
    from sglforge.construct import sandbox
    from sglforge.construct.packages import install

    src = Path(__file__).resolve().parents[2]
    real = install(tree)  # the release's own packages that need no GPU (msgspec, ...)
    # sglforge and those packages; the release comes from ``tree``
    path = os.pathsep.join([str(src), *map(str, real.paths)])
    got = sandbox.run(
        [sys.executable, "-m", "sglforge.construct.child", str(tree)],
        stdin,
        timeout=CHILD_TIMEOUT,
        prefix="sglforge-construct-",
        target=target.as_dict(),
        ours={"PYTHONPATH": path},
    )
    if got.timed_out:
        raise ConstructionError(
            f"{tree}: sglang's model construction took over {CHILD_TIMEOUT} s and was stopped",
            "report the config and launch that cause it",
        )
    if got.limited is not None:
        raise ConstructionError(
            f"{tree}: sglang's model construction was stopped by its {got.limited} limit "
            f"({got.tail})",
            "check the sizes in config.json (experts, layers, hidden size)",
        )
    if got.doc is None:
        gaps = f" (stubbed, not installed: {'; '.join(real.missing)})" if real.missing else ""
        raise ConstructionError(
            f"{tree}: sglang's model construction failed: {got.tail}{gaps}",
            "run `python -m sglforge.construct.child TREE` with the requests on stdin to see all",
        )
    return got.doc


def _construction(
    tree: Path, request: Request, got: dict[str, Any], device: Device, source: str = ""
) -> Construction:
    if "error" in got:
        last = got["error"].strip().splitlines()[-1]
        raise ConstructionError(
            f"{tree}: building {request.id} with sglang's own code failed: {last}",
            "check the model's config.json and the launch flags (sglang's parser reads them)",
        )
    models = {
        name: Model(
            architecture=m["architecture"],
            cls=m["class"],
            modules=m["modules"],
            moe=tuple(m["moe"]),
            tokens=m["tokens"],
            prefixes=tuple(m["prefixes"]),
            quark=m["quark"],
            config_class=m.get("config_class", ""),
            rope_scaling=m.get("rope_scaling"),
        )
        for name, m in got["models"].items()
    }
    return Construction(
        device, got["launch"], bool(got["dsa"]), got["parallel"], models, config_source=source
    )


def literal_launch(launch: Sequence[str]) -> Launch:
    """The launch facts the kernel scan needs, read from the flags as written (the fallback
    when sglang's own parser could not run on a tree)."""
    out: Launch = {"speculative_algorithm": None, "speculative_num_steps": None}
    args = list(launch)
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if not eq and i + 1 < len(args):
            value = args[i + 1]
        if name == "--speculative-algorithm":
            out["speculative_algorithm"] = value
        elif name == "--speculative-num-steps":
            out["speculative_num_steps"] = int(value) if value.isdigit() else None
    return out
