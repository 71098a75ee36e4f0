"""Patch 0002 makes 0.5.14's GLM draft quantize exactly like 0.5.16's, module by module.

Differential test over released code. For each config form below, the MTP draft model of a
GLM-5.2-shaped checkpoint (``GlmMoeDsaForCausalLM``, 78 layers, MTP layer ``model.layers.78``)
is built by two real sglang releases from their PyPI wheels: 0.5.14 with the queue applied
(``git apply``, as ``sglang_release.release_tree`` does) and 0.5.16 unpatched. Each build
follows sglang's own path: ``ModelConfig._config_draft_model`` renames the architecture, the
model registry resolves the class, ``model_loader.loader._get_quantization_config`` builds the
real ``QuarkConfig`` (and applies the class's ``hf_to_sglang_mapper``), and
``loader._initialize_model`` constructs the model. Every layer then holds the quant method it
got from ``QuarkConfig.get_quant_method`` (or none, when the draft was built without a quant
config); the test records that per module name (class, method, scheme, fused shared experts)
and compares the two releases. Nothing reads the patch's own helpers, so a rewrite of the
patch is judged by what the model ends up with. One more test builds DeepSeek V3 (61 layers)
with stock and patched 0.5.14 and requires identical decisions.

How sglang is run without torch (TEST DOUBLES, all in the child process): each release is
imported in its own ``python`` subprocess (the two versions never share ``sys.modules``), which
first installs

- a fake ``torch`` package: ``nn.Module`` (registers children and parameters, so
  ``named_modules`` works), ``nn.Parameter``/``Tensor`` (shape only), dtypes, ``finfo``,
  ``torch.library`` (registration is a no-op), and ``torch.cuda``/``torch.version`` describing
  one ROCm gfx950 device (MI355X: capability (9, 5), ``torch.version.hip`` set), which is what
  ``is_hip()`` and the shared-experts-fusion check read;
- a minimal ``triton`` (its driver reports the hip backend) and ``dill``;
- a last-resort import hook: any other module that is not installed (transformers, aiter,
  sgl_kernel, flashinfer, ...) becomes a stub whose every attribute is a class that accepts any
  call, subscript or subclassing and passes functions through when used as a decorator.

The process-wide state sglang expects from a launch is set through sglang's own objects: a
``ServerArgs`` with its dataclass defaults plus the README launch values (TP8, quark, EAGLE
5/1/6, fp8 KV cache; ``__post_init__`` is not run: it needs the checkpoint on disk), published
with ``set_global_server_args_for_scheduler``; the topology through the test hook
``get_parallel().override``; and the ``parallel_state`` group handles as plain namespaces.
Where these differ from a real launch: no GPU kernels run (only constructors), ServerArgs'
post-init is skipped (for this model on ROCm it does not touch shared-experts fusion: only the
FlashInfer MoE runner/A2A backends set it), and the checkpoint's weights are never loaded (a
bf16-vs-MXFP4 decision is what decides the load's shape mismatch, and that is what is compared).
``test_stock_0_5_14_is_seen_to_differ`` keeps the harness honest: it must see the bug.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.abc
import importlib.machinery
import inspect
import json
import logging
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.pypi

README = "readme"  # the README launch: shared-experts fusion left on
NO_FUSION = "--disable-shared-experts-fusion"
LAUNCHES = (README, NO_FUSION)

MXFP4 = {
    "weight": {
        "dtype": "fp4",
        "qscheme": "per_group",
        "group_size": 32,
        "is_dynamic": False,
        "scale_format": "e8m0",
    },
    "input_tensors": {
        "dtype": "fp4",
        "qscheme": "per_group",
        "group_size": 32,
        "is_dynamic": True,
        "scale_format": "e8m0",
    },
    "output_tensors": None,
    "bias": None,
}
FP8 = {
    "weight": {"dtype": "fp8_e4m3", "qscheme": "per_channel", "is_dynamic": False},
    "input_tensors": {"dtype": "fp8_e4m3", "qscheme": "per_token", "is_dynamic": True},
    "output_tensors": None,
    "bias": None,
}
PROJ = ("gate_proj", "up_proj", "down_proj")
ATTN = (
    "q_a_proj",
    "q_b_proj",
    "kv_a_proj_with_mqa",
    "kv_b_proj",
    "o_proj",
    "indexer.wq_b",
    "indexer.wk",
    "indexer.weights_proj",
)

# GLM-5.2's shape (glm_moe_dsa): what the draft's constructors read.
GLM = dict(
    architectures=["GlmMoeDsaForCausalLM"],
    model_type="glm_moe_dsa",
    num_hidden_layers=78,
    hidden_size=6144,
    num_attention_heads=64,
    num_key_value_heads=64,
    q_lora_rank=2048,
    kv_lora_rank=512,
    qk_nope_head_dim=192,
    qk_rope_head_dim=64,
    v_head_dim=256,
    index_topk=2048,
    index_n_heads=32,
    index_head_dim=128,
    n_routed_experts=256,
    n_shared_experts=1,
    num_experts_per_tok=8,
    moe_intermediate_size=2048,
    intermediate_size=12288,
    first_k_dense_replace=3,
    moe_layer_freq=1,
    n_group=1,
    topk_group=1,
    routed_scaling_factor=2.5,
    norm_topk_prob=True,
    hidden_act="silu",
    rms_norm_eps=1e-5,
    vocab_size=154880,
    max_position_embeddings=202752,
    rope_theta=1000000,
    rope_scaling=None,
    num_nextn_predict_layers=1,
    scoring_func="sigmoid",
    topk_method="noaux_tc",
    tie_word_embeddings=False,
    attention_bias=False,
    torch_dtype="bfloat16",
)
# DeepSeek V3/R1's shape: 61 layers, no DSA indexer.
DEEPSEEK = dict(
    GLM,
    architectures=["DeepseekV3ForCausalLM"],
    model_type="deepseek_v3",
    num_hidden_layers=61,
    hidden_size=7168,
    num_attention_heads=128,
    num_key_value_heads=128,
    q_lora_rank=1536,
    qk_nope_head_dim=128,
    v_head_dim=128,
    index_topk=None,
    n_group=8,
    topk_group=4,
    intermediate_size=18432,
    vocab_size=129280,
    max_position_embeddings=163840,
    rope_theta=10000,
    routed_scaling_factor=2.5,
)
for _k in ("index_n_heads", "index_head_dim", "index_topk"):
    DEEPSEEK.pop(_k)


def quark(exclude: list[str], layer_quant_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Quark MXFP4 quantization_config block (the keys sglang reads), with these entries."""
    return {
        "quant_method": "quark",
        "export": {"kv_cache_group": [], "pack_method": "reorder"},
        "global_quant_config": MXFP4,
        "layer_quant_config": layer_quant_config or {},
        "layer_type_quant_config": {},
        "exclude": ["lm_head", "re:model\\.layers\\.\\d+\\.mlp\\.gate$", *exclude],
    }


def shared_expert(layer: int) -> list[str]:
    return [f"model.layers.{layer}.mlp.shared_experts.{p}" for p in PROJ]


def whole_layer_leaves(layer: int, n_experts: int) -> list[str]:
    """The MTP layer excluded as every leaf module it has, routed experts included."""
    m = f"model.layers.{layer}"
    return [
        *(f"{m}.self_attn.{a}" for a in ATTN),
        *(f"{m}.mlp.experts.{i}.{p}" for i in range(n_experts) for p in PROJ),
        *shared_expert(layer),
        f"{m}.mlp.gate",
        f"{m}.eh_proj",
        f"{m}.shared_head.head",
    ]


# The forms of issue 14 (MTP layer 78).
GLM_FORMS: dict[str, dict[str, Any]] = {
    "A-exact-shared-expert": quark(shared_expert(78)),
    "B-whole-layer-leaves": quark(whole_layer_leaves(78, 256)),
    "C-regex-shared-expert": quark(["re:model\\.layers\\.78\\.mlp\\.shared_experts\\..*"]),
    "D-regex-whole-layer": quark(["re:model\\.layers\\.78\\..*"]),
    "E-glob-literal": quark(["model.layers.78.*"]),
    "F-plus-real-layer-61": quark([*shared_expert(78), "model.layers.61.self_attn.o_proj"]),
    "G-layer-quant-config": quark(
        shared_expert(78),
        {"model.layers.78.self_attn.*": FP8, "model.layers.78.eh_proj": FP8},
    ),
}
DEEPSEEK_FORMS: dict[str, dict[str, Any]] = {
    "A-exact-shared-expert": quark(shared_expert(61)),
    "B-whole-layer-leaves": quark(whole_layer_leaves(61, 256)),
    "whole-layer": quark(["model.layers.61"]),
    "G-layer-quant-config": quark(
        shared_expert(61), {"model.layers.61.self_attn.*": FP8, "model.layers.61.eh_proj": FP8}
    ),
}

Decisions = dict[str, str]  # module name -> "Class: method/scheme"


def _cases(
    model: dict[str, Any], forms: dict[str, dict[str, Any]], prefix: str = ""
) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{prefix}{form}/{launch}",
            "config": model,
            "quant": quant,
            "disable_fusion": launch == NO_FUSION,
        }
        for form, quant in forms.items()
        for launch in LAUNCHES
    ]


def build_drafts(tree: Path, cases: list[dict[str, Any]], cwd: Path) -> dict[str, Decisions]:
    """Run this file as the harness on ``tree`` (a release's python/ folder) in a subprocess."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), str(tree)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        cwd=cwd,  # an empty folder: nothing in it shadows the stubbed packages
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        timeout=600,
    )
    if proc.returncode != 0:
        raise AssertionError(f"harness failed on {tree}:\n{proc.stderr[-4000:]}")
    result: dict[str, Decisions] = json.loads(proc.stdout.splitlines()[-1])
    return result


def table(left_name: str, left: Decisions, right_name: str, right: Decisions) -> str:
    names = sorted(set(left) | set(right))
    width = max(len(n) for n in names)
    lw = max([len(left_name)] + [len(v) for v in left.values()])
    rows = [f"  {'module':<{width}}  {left_name:<{lw}}  {right_name}"]
    for n in names:
        a, b = left.get(n, "(not built)"), right.get(n, "(not built)")
        mark = "  " if a == b else "!="
        rows.append(f"{mark}{n:<{width}}  {a:<{lw}}  {b}")
    return "\n".join(rows)


@pytest.fixture(scope="module")
def drafts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Decisions]]:
    from sglang_release import release_tree

    base = tmp_path_factory.mktemp("backport-0002")
    trees = {
        "0.5.14+queue": release_tree(base / "patched", "0.5.14", patched=True),
        "0.5.14": release_tree(base / "stock", "0.5.14", patched=False),
        "0.5.16": release_tree(base / "v0.5.16", "0.5.16", patched=False),
    }
    run = base / "run"
    run.mkdir()
    glm, deepseek = _cases(GLM, GLM_FORMS), _cases(DEEPSEEK, DEEPSEEK_FORMS, "deepseek:")
    return {
        name: build_drafts(tree / "python", glm + deepseek, run) for name, tree in trees.items()
    }


@pytest.mark.parametrize("launch", LAUNCHES)
@pytest.mark.parametrize("form", GLM_FORMS)
def test_glm_draft_decides_like_0_5_16(
    drafts: dict[str, dict[str, Decisions]], form: str, launch: str
) -> None:
    case = f"{form}/{launch}"
    patched, upstream = drafts["0.5.14+queue"][case], drafts["0.5.16"][case]
    assert patched == upstream, f"GLM draft, {case}: patched 0.5.14 and 0.5.16 disagree\n" + table(
        "0.5.14+queue", patched, "0.5.16", upstream
    )


@pytest.mark.parametrize("launch", LAUNCHES)
@pytest.mark.parametrize("form", DEEPSEEK_FORMS)
def test_deepseek_v3_draft_is_unchanged_by_the_queue(
    drafts: dict[str, dict[str, Decisions]], form: str, launch: str
) -> None:
    case = f"deepseek:{form}/{launch}"
    patched, stock = drafts["0.5.14+queue"][case], drafts["0.5.14"][case]
    assert patched == stock, (
        f"DeepSeek V3 draft, {case}: the queue changed 0.5.14's decisions\n"
        + table("0.5.14+queue", patched, "0.5.14", stock)
    )


def test_stock_0_5_14_is_seen_to_differ(drafts: dict[str, dict[str, Decisions]]) -> None:
    # The harness must see the bug the patch fixes, or the comparisons above prove nothing.
    for launch in LAUNCHES:
        case = f"A-exact-shared-expert/{launch}"
        assert drafts["0.5.14"][case] != drafts["0.5.16"][case], case
    no_fusion = drafts["0.5.16"][f"A-exact-shared-expert/{NO_FUSION}"]
    assert no_fusion["model.decoder.mlp.shared_experts.down_proj"].endswith("bf16")
    assert drafts["0.5.14"][f"A-exact-shared-expert/{NO_FUSION}"][
        "model.decoder.mlp.shared_experts.down_proj"
    ].endswith("QuarkW4A4MXFP4")


# --- The harness: what runs in the subprocess (`python this_file.py <release>/python`). ----
# The fakes below (TEST DOUBLES, see the module docstring) stand in for torch and for the GPU
# stack sglang imports; they carry no behaviour the decisions depend on, except the ROCm device
# description in install_torch.


class _AnyMeta(type):
    """A stub class: attribute access gives stub classes, calling gives a stub instance."""

    def __new__(mcs, name, bases, ns, **kwargs):
        return super().__new__(mcs, name, bases, ns)

    def __init__(cls, name, bases, ns, **kwargs):
        super().__init__(name, bases, ns)

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        cache = cls.__dict__.get("_stub_children")
        if cache is None:
            cache = {}
            type.__setattr__(cls, "_stub_children", cache)
        if name not in cache:
            cache[name] = _stub_class(f"{cls.__name__}.{name}")
        return cache[name]

    def __call__(cls, *args, **kwargs):
        if "_stub_leaf" not in cls.__dict__:
            return type.__call__(cls, *args, **kwargs)
        if len(args) == 1 and not kwargs and inspect.isfunction(args[0]):
            return args[0]
        return type.__call__(cls)

    def __getitem__(cls, item):
        return cls

    def __setitem__(cls, key, value):
        pass

    def __contains__(cls, item):
        return False

    def __int__(cls):
        return 0

    __index__ = __int__

    def __float__(cls):
        return 0.0

    def __iter__(cls):
        return iter(())

    def _same(cls, *a):
        return cls

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _same
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __neg__ = _same
    __pow__ = __rpow__ = __mod__ = __and__ = __rand__ = _same


class _Any(metaclass=_AnyMeta):
    """An instance of a stub: every operation answers with another stub."""

    def __init__(self, *args, **kwargs):
        pass

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):
        from pydantic_core import core_schema

        return core_schema.any_schema()

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(f"{type(self).__name__}().{name}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and inspect.isfunction(args[0]):
            return args[0]
        return _Any()

    def __getitem__(self, item):
        return _Any()

    def __setitem__(self, key, value):
        pass

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0

    def __bool__(self):
        return True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __int__(self):
        return 0

    def __index__(self):
        return 0

    def __float__(self):
        return 0.0

    def _same(self, *a):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _same
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __neg__ = _same
    __pow__ = __rpow__ = __mod__ = __and__ = __or__ = __ror__ = __rand__ = _same


def _stub_class(name):
    return _AnyMeta(name, (_Any,), {"_stub_leaf": True})


class StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        full = f"{self.__name__}.{name}"
        if full in sys.modules:
            return sys.modules[full]
        value = _stub_class(full)
        setattr(self, name, value)
        return value


class dtype:
    def __init__(self, name, bits, is_floating_point=True):
        self.name, self.itemsize, self.is_floating_point = (
            name,
            max(bits // 8, 1),
            is_floating_point,
        )

    def __repr__(self):
        return f"torch.{self.name}"


class finfo:
    def __init__(self, dt=None):
        self.max, self.min, self.eps, self.tiny, self.bits = 448.0, -448.0, 1e-3, 1e-6, 16


iinfo = finfo


class Size(tuple):
    def numel(self):
        n = 1
        for d in self:
            n *= d
        return n


class device:
    def __init__(self, type="cuda", index=None):
        if isinstance(type, device):
            type, index = type.type, type.index
        self.type, self.index = str(type).split(":")[0], index

    def __repr__(self):
        return f"device({self.type!r})"


class Tensor:
    def __init__(self, *shape, dtype=None, device=None, **kw):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, Size)):
            shape = tuple(shape[0])
        self.shape = Size(int(s) if isinstance(s, int) else 1 for s in shape)
        self.dtype = dtype
        self.device = device
        self.requires_grad = False

    def _self(self, *a, **k):
        return self

    (
        view,
        reshape,
        to,
        cuda,
        cpu,
        contiguous,
        transpose,
        t,
        fill_,
        zero_,
        copy_,
        detach,
        float,
        half,
        bfloat16,
        clone,
        normal_,
        uniform_,
        narrow,
        permute,
        unsqueeze,
        squeeze,
        expand,
        flatten,
        repeat,
        chunk_,
        pin_memory,
        requires_grad_,
        view_as,
        abs,
        max,
        min,
        sum,
        mean,
        div_,
        mul_,
        add_,
        sub_,
        clamp,
        clamp_,
        round,
        sqrt,
        exp,
        log,
        sigmoid,
        softmax,
        any,
        all,
        type,
        share_memory_,
        record_stream,
        untyped_storage,
        index_select,
        masked_fill_,
        new_empty,
        new_zeros,
        new_ones,
        new_full,
        new_tensor,
        int,
        long,
        bool,
    ) = (_self,) * 62

    @property
    def data(self):
        return self

    @data.setter
    def data(self, value):
        pass

    def split(self, sizes, dim=0):
        return [self] * (len(sizes) if isinstance(sizes, (list, tuple)) else 2)

    chunk = unbind = split

    def stride(self, dim=None):
        return (1,) * len(self.shape) if dim is None else 1

    def element_size(self):
        return 2

    def is_contiguous(self):
        return True

    def data_ptr(self):
        return 0

    def item(self):
        return 0.0

    def tolist(self):
        return []

    def __float__(self):
        return 0.0

    def __int__(self):
        return 0

    def __bool__(self):
        return True

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self):
        return len(self.shape)

    def numel(self):
        return self.shape.numel()

    def __getitem__(self, item):
        return self

    def __setitem__(self, key, value):
        pass

    def __len__(self):
        return self.shape[0] if self.shape else 0

    def _same(self, *a):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _same
    __truediv__ = __rtruediv__ = __neg__ = __pow__ = __rpow__ = __floordiv__ = _same
    __rfloordiv__ = __mod__ = __matmul__ = __rmatmul__ = __and__ = __or__ = __invert__ = _same
    __lt__ = __le__ = __gt__ = __ge__ = _same
    __iadd__ = __isub__ = __imul__ = __itruediv__ = _same


class Parameter(Tensor):
    def __new__(cls, data=None, requires_grad=True):
        self = object.__new__(cls)
        if isinstance(data, Tensor):
            self.__dict__.update(data.__dict__)
        else:
            Tensor.__init__(self)
        self.requires_grad = requires_grad
        return self

    def __init__(self, data=None, requires_grad=True):
        pass


def _tensor(*shape, dtype=None, device=None, **kw):
    return Tensor(*shape, dtype=dtype, device=device)


class Module:
    def __init__(self, *args, **kwargs):
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "training", False)

    def __setattr__(self, name, value):
        if "_modules" not in self.__dict__:
            Module.__init__(self)
        mods, params = self.__dict__["_modules"], self.__dict__["_parameters"]
        mods.pop(name, None)
        params.pop(name, None)
        if isinstance(value, (Module, Parameter)):
            self.__dict__.pop(name, None)
            (mods if isinstance(value, Module) else params)[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for store in ("_modules", "_parameters", "_buffers"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __delattr__(self, name):
        for store in ("_modules", "_parameters", "_buffers"):
            if name in self.__dict__.get(store, {}):
                del self.__dict__[store][name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name, param):
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        self._buffers[name] = tensor

    def add_module(self, name, module):
        self._modules[name] = module

    register_module = add_module

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        yield prefix, self
        for name, mod in self._modules.items():
            if mod is None:
                continue
            yield from mod.named_modules(prefix=f"{prefix}.{name}" if prefix else name)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def children(self):
        return iter(m for m in self._modules.values() if m is not None)

    def named_children(self):
        return iter(self._modules.items())

    def named_parameters(self, prefix="", recurse=True, **kw):
        for mname, mod in self.named_modules(prefix=prefix):
            for pname, p in mod._parameters.items():
                yield (f"{mname}.{pname}" if mname else pname), p

    def parameters(self, recurse=True):
        for _, p in self.named_parameters():
            yield p

    def named_buffers(self, *a, **k):
        return iter(())

    def buffers(self, *a, **k):
        return iter(())

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def to(self, *a, **k):
        return self

    cuda = cpu = eval = train = half = float = bfloat16 = requires_grad_ = to

    def apply(self, fn):
        for m in self.modules():
            fn(m)
        return self

    def state_dict(self, *a, **k):
        return {}


class ModuleList(Module):
    def __init__(self, modules=None):
        super().__init__()
        for m in modules or ():
            self.append(m)

    def append(self, m):
        self._modules[str(len(self._modules))] = m
        return self

    def extend(self, ms):
        for m in ms:
            self.append(m)
        return self

    def __iter__(self):
        return iter(self._modules.values())

    def __len__(self):
        return len(self._modules)

    def __getitem__(self, i):
        return list(self._modules.values())[i]


class ModuleDict(Module):
    def __init__(self, modules=None):
        super().__init__()
        for k, m in (modules or {}).items():
            self._modules[k] = m

    def __getitem__(self, k):
        return self._modules[k]

    def __setitem__(self, k, m):
        self._modules[k] = m

    def __contains__(self, k):
        return k in self._modules

    def items(self):
        return self._modules.items()

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()


class Sequential(ModuleList):
    def __init__(self, *modules):
        super().__init__(modules)


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(Tensor(out_features, in_features))


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, *a, **k):
        super().__init__()
        self.weight = Parameter(Tensor(num_embeddings, embedding_dim))


class Identity(Module):
    pass


DENY = {"npu", "xpu", "hpu", "musa", "mlu"}


class TorchModule(StubModule):
    def __getattr__(self, name):
        if name in DENY:
            raise AttributeError(name)
        return super().__getattr__(name)


class _Library:
    def __init__(self, name="sglang", *a, **k):
        self.m = types.SimpleNamespace(name=name)
        self.ns = name

    def define(self, *a, **k):
        pass

    def impl(self, *a, **k):
        pass

    def _register_fake(self, *a, **k):
        pass


def _decorator_factory(*args, **kwargs):
    """custom_op(name, fn=None, ...) and friends: decorate or return a decorator."""
    fns = [a for a in list(args) + list(kwargs.values()) if inspect.isfunction(a)]
    if fns:
        return fns[0]
    return lambda fn: fn


def _module(name, cls=StubModule, **attrs):
    mod = cls(name)
    mod.__path__ = []
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    if parent and parent in sys.modules:
        setattr(sys.modules[parent], child, mod)
    return mod


def install_torch(capability=(9, 5), arch="gfx950"):
    dtypes = {
        n: dtype(n, b)
        for n, b in [
            ("float16", 16),
            ("bfloat16", 16),
            ("float32", 32),
            ("float64", 64),
            ("float8_e4m3fn", 8),
            ("float8_e4m3fnuz", 8),
            ("float8_e5m2", 8),
            ("float8_e5m2fnuz", 8),
            ("float8_e8m0fnu", 8),
            ("float4_e2m1fn_x2", 8),
            ("uint8", 8),
            ("int8", 8),
            ("int16", 16),
            ("int32", 32),
            ("int64", 64),
            ("bool", 8),
            ("uint32", 32),
            ("uint64", 64),
            ("complex64", 64),
        ]
    }
    dtypes.update(
        half=dtypes["float16"],
        float=dtypes["float32"],
        long=dtypes["int64"],
        int=dtypes["int32"],
        double=dtypes["float64"],
    )
    factories = {
        n: _tensor
        for n in (
            "empty",
            "zeros",
            "ones",
            "full",
            "tensor",
            "arange",
            "randn",
            "rand",
            "empty_like",
            "zeros_like",
            "ones_like",
            "full_like",
            "as_tensor",
            "from_numpy",
            "cat",
            "stack",
            "empty_strided",
            "randint",
            "eye",
            "linspace",
        )
    }
    torch = _module(
        "torch",
        TorchModule,
        __version__="2.9.0+rocm7.0",
        dtype=dtype,
        finfo=finfo,
        iinfo=iinfo,
        Size=Size,
        device=device,
        Tensor=Tensor,
        Parameter=Parameter,
        is_tensor=lambda x: isinstance(x, Tensor),
        get_default_dtype=lambda: dtypes["bfloat16"],
        set_default_dtype=lambda d: None,
        is_floating_point=lambda t: True,
        manual_seed=lambda s: None,
        **dtypes,
        **factories,
    )
    _module("torch.version", hip="7.0.0", cuda=None, __version__="2.9.0+rocm7.0", git_version="0")
    props = types.SimpleNamespace(
        gcnArchName=arch,
        name="AMD Instinct MI355X",
        total_memory=288 << 30,
        multi_processor_count=256,
        major=capability[0],
        minor=capability[1],
    )
    _module(
        "torch.cuda",
        is_available=lambda: True,
        device_count=lambda: 8,
        current_device=lambda: 0,
        get_device_capability=lambda *a, **k: capability,
        get_device_properties=lambda *a, **k: props,
        get_device_name=lambda *a, **k: props.name,
        mem_get_info=lambda *a, **k: (200 << 30, 288 << 30),
        is_current_stream_capturing=lambda: False,
    )
    _module(
        "torch.library",
        Library=_Library,
        infer_schema=lambda *a, **k: "() -> ()",
        custom_op=_decorator_factory,
        register_fake=_decorator_factory,
        impl=_decorator_factory,
        define=lambda *a, **k: None,
        register_kernel=_decorator_factory,
        triton_op=_decorator_factory,
        wrap_triton=lambda f: f,
    )
    _module("torch.backends")
    _module("torch.backends.mps", is_available=lambda: False, is_built=lambda: False)
    _module("torch.backends.cuda")
    _module("torch.backends.cudnn")
    _module("torch.distributed", is_initialized=lambda: False, is_available=lambda: True)
    _module(
        "torch.nn",
        Module=Module,
        ModuleList=ModuleList,
        ModuleDict=ModuleDict,
        Sequential=Sequential,
        Linear=Linear,
        Embedding=Embedding,
        Identity=Identity,
        Parameter=Parameter,
    )
    _module("torch.nn.parameter", Parameter=Parameter, UninitializedParameter=Parameter)
    _module("torch.nn.modules")
    _module("torch.nn.modules.module", Module=Module)
    _module("torch.nn.functional")
    _module("torch.nn.init")
    return torch


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: a module no real finder has (and not sglang) is a stub."""

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in ("sglang",):
            return None
        parent = fullname.rpartition(".")[0]
        if parent and not isinstance(sys.modules.get(parent), StubModule):
            return None  # a real package's missing submodule stays missing
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        cls = TorchModule if spec.name == "torch" else StubModule
        mod = cls(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module):
        if "." not in module.__name__:
            module.__version__ = "5.0.0"  # some imports compare versions


class _TritonDriver(_Any):
    def get_current_target(self):
        return types.SimpleNamespace(backend="hip", arch="gfx950", warp_size=64)


def install_triton():
    _module("triton", __version__="3.4.0")
    _module("triton.runtime", driver=types.SimpleNamespace(active=_TritonDriver()))
    _module("triton.language")


def install_fakes():
    """Install every double before sglang is imported."""
    install_torch()
    install_triton()
    _module("dill", dumps=lambda *a, **k: b"", loads=lambda *a, **k: None)
    sys.meta_path.append(_StubFinder())


UNQUANTIZED = {
    None,
    "UnquantizedLinearMethod",
    "UnquantizedFusedMoEMethod",
    "UnquantizedEmbeddingMethod",
}


def _server_args(disable_fusion: bool) -> Any:
    from sglang.srt.server_args import ServerArgs

    args = object.__new__(ServerArgs)
    for f in dataclasses.fields(ServerArgs):
        if f.default is not dataclasses.MISSING:
            object.__setattr__(args, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            object.__setattr__(args, f.name, f.default_factory())
    launch = dict(
        model_path="/models/glm",
        tp_size=8,
        quantization="quark",
        kv_cache_dtype="fp8_e4m3",
        speculative_algorithm="EAGLE",
        speculative_num_steps=5,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=6,
        enable_aiter_allreduce_fusion=True,
        disable_shared_experts_fusion=disable_fusion,
    )
    for key, value in launch.items():
        object.__setattr__(args, key, value)
    return args


def _label(module: Any) -> str:
    method = getattr(module, "quant_method", None)
    method_name = None if method is None else type(method).__name__
    scheme = getattr(module, "scheme", None)
    what = (
        "bf16" if method_name in UNQUANTIZED else type(scheme).__name__ if scheme else method_name
    )
    fused = getattr(module, "num_fused_shared_experts", 0) or 0
    return f"{type(module).__name__}: {what}" + (f" (+{fused} fused shared)" if fused else "")


def _build_draft(case: dict[str, Any]) -> Decisions:
    """The draft model of one launch, built the way sglang's loader builds it."""
    import torch
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig, ModelImpl
    from sglang.srt.model_loader import loader
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    set_global_server_args_for_scheduler(_server_args(case["disable_fusion"]))
    hf_config = types.SimpleNamespace(
        **copy.deepcopy(case["config"]), quantization_config=copy.deepcopy(case["quant"])
    )
    # ModelConfig.__init__ reads the checkpoint from disk; set what the code below reads.
    model_config = object.__new__(ModelConfig)
    model_config.__dict__.update(
        hf_config=hf_config,
        hf_text_config=hf_config,
        is_draft_model=True,
        quantization="quark",
        model_path="/models/glm",
        revision=None,
        dtype=torch.bfloat16,
        model_impl=ModelImpl.AUTO,
        is_fp4_experts=False,
        nvfp4_moe_meta=None,
    )
    model_config._config_draft_model()
    load_config = LoadConfig()
    quant_config = loader._get_quantization_config(model_config, load_config)
    model = loader._initialize_model(model_config, load_config, quant_config)
    return {
        name: _label(module)
        for name, module in model.named_modules()
        if hasattr(module, "quant_method") or type(module).__name__ == "Linear"
    }


def _topology() -> Any:
    """TP8 on one node, as the README launches it; the group handles sglang asks for."""
    from sglang.srt.distributed import parallel_state
    from sglang.srt.runtime_context import get_parallel

    def group(size: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(
            world_size=size,
            rank_in_group=0,
            rank=0,
            local_rank=0,
            ranks=list(range(size)),
            is_first_rank=True,
            is_last_rank=True,
            device_group=None,
            cpu_group=None,
        )

    sizes = dict(_WORLD=8, _TP=8, _ATTN_TP=8, _ATTN_CP=1, _MOE_DP=1, _MOE_EP=1, _MOE_TP=8, _PP=1)
    for name, size in sizes.items():
        setattr(parallel_state, name, group(size))
    return get_parallel().override(
        tp_size=8,
        tp_rank=0,
        pp_size=1,
        pp_rank=0,
        moe_ep_size=1,
        moe_ep_rank=0,
        moe_tp_size=8,
        moe_tp_rank=0,
        attn_tp_size=8,
        attn_tp_rank=0,
        attn_cp_size=1,
        attn_cp_rank=0,
        attn_dp_size=1,
        attn_dp_rank=0,
        pp_group=group(1),
    )


def harness(tree: str) -> None:
    cases = json.loads(sys.stdin.read())
    install_fakes()
    sys.path.insert(0, tree)
    logging.disable(logging.WARNING)
    out = {}
    with _topology():
        for case in cases:
            out[case["id"]] = _build_draft(case)
    print(json.dumps(out))


if __name__ == "__main__":
    harness(sys.argv[1])
