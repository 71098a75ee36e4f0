"""Stand-ins for torch and the GPU stack, so sglang's own model construction runs on a CPU.

Production code of the construction child (``sglforge.construct.child``), installed before the
release's sglang is imported, never in the parent process. They carry no behaviour the recorded
decisions depend on except the device, which is handed in: the target's GPU
(``[targets.NAME.device]`` in images/targets.toml: gfx, CU count, memory, GPUs per node) is what
``torch.cuda.get_device_properties``/``get_device_capability`` and triton's driver report, so
``is_hip()``, the shared-experts-fusion checks and aiter's ``get_cu_num`` read the target's
values. What each stands in for, and why it cannot be the real package here:

- ``torch``: ``nn.Module`` (registers children and parameters, so ``named_modules`` works),
  ``nn.Parameter``/``Tensor`` (shape only), dtypes, ``finfo``, ``torch.library`` (registration
  is a no-op), ``torch.cuda``/``torch.version``. The real ROCm torch needs the GPU runtime and
  is several GiB; the CPU wheel reports no HIP device.
- ``triton`` (its driver reports the hip backend on the target's gfx) and ``dill``: only their
  import-time surface is read.
- a last-resort import hook: any other module that is not installed (aiter, sgl_kernel,
  flashinfer, transformers, huggingface_hub, ...) becomes a stub whose every attribute is a
  class that accepts any call, subscript or subclassing and passes functions through when used
  as a decorator. Each stubbed package and why it cannot be the real one is listed in
  :mod:`sglforge.construct`'s docstring. transformers is one of them here: its configuration is
  the real one, read in the config-only child (``construct.hfresolve``) and served to sglang's
  own ``get_config`` (``construct.child``).
"""

# mypy: ignore-errors
# ruff: noqa: E501

from __future__ import annotations

import importlib.abc
import importlib.machinery
import inspect
import sys
import types


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


_DTYPES = (
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
)
_ALIASES = {"half": "float16", "float": "float32", "long": "int64", "int": "int32"}
_ALIASES["double"] = "float64"
_FACTORIES = (
    "empty zeros ones full tensor arange randn rand empty_like zeros_like ones_like full_like "
    "as_tensor from_numpy cat stack empty_strided randint eye linspace"
).split()
TORCH_VERSION = "2.9.0+rocm7.0"


def _torch_top() -> types.ModuleType:
    """``torch`` itself: dtypes, tensor factories (shape only), ``nn.Parameter``."""
    dtypes = {n: dtype(n, b) for n, b in _DTYPES}
    dtypes.update({alias: dtypes[name] for alias, name in _ALIASES.items()})
    return _module(
        "torch",
        TorchModule,
        __version__=TORCH_VERSION,
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
        **dict.fromkeys(_FACTORIES, _tensor),
    )


def _torch_cuda(gpu: dict) -> None:
    """``torch.version``/``torch.cuda`` describing the node's GPUs (``gpu``: the target's
    device, ``sglforge.targets.Device`` as JSON), what ``is_hip()`` and aiter's ``get_cu_num``
    read."""
    capability = tuple(gpu["capability"])
    memory = int(gpu["memory_gib"]) << 30
    # A plain module, as torch/version.py is: only the attributes a ROCm build has, so that
    # ``hasattr(torch.version, "musa")`` is False there too.
    version = dict(hip="7.0.0", cuda=None, xpu=None, debug=False, git_version="0")
    _module("torch.version", types.ModuleType, __version__=TORCH_VERSION, **version)
    props = types.SimpleNamespace(
        gcnArchName=gpu["gfx"],
        name=gpu["name"],
        total_memory=memory,
        multi_processor_count=int(gpu["cu_num"]),
        major=capability[0],
        minor=capability[1],
    )
    _module(
        "torch.cuda",
        is_available=lambda: True,
        device_count=lambda: int(gpu["count"]),
        current_device=lambda: 0,
        get_device_capability=lambda *a, **k: capability,
        get_device_properties=lambda *a, **k: props,
        get_device_name=lambda *a, **k: props.name,
        # free memory: unknown without the GPU; what a fresh process sees is nearly all of it
        mem_get_info=lambda *a, **k: (memory, memory),
        is_current_stream_capturing=lambda: False,
    )


def _torch_library() -> None:
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


def _torch_nn() -> None:
    _module("torch.backends")
    _module("torch.backends.mps", is_available=lambda: False, is_built=lambda: False)
    # 0.5.23 asks torch.mps.is_available() (srt/utils/common.py:239 is_mps): no MPS here.
    _module("torch.mps", is_available=lambda: False)
    _module("torch.backends.cuda")
    _module("torch.backends.cudnn")
    _module("torch.distributed", is_initialized=lambda: False, is_available=lambda: True)
    nn = dict(Module=Module, ModuleList=ModuleList, ModuleDict=ModuleDict, Sequential=Sequential)
    nn.update(Linear=Linear, Embedding=Embedding, Identity=Identity, Parameter=Parameter)
    _module("torch.nn", **nn)
    _module("torch.nn.parameter", Parameter=Parameter, UninitializedParameter=Parameter)
    _module("torch.nn.modules")
    _module("torch.nn.modules.module", Module=Module)
    _module("torch.nn.functional")
    _module("torch.nn.init")


def install_torch(gpu: dict):
    """The torch stand-in, describing ``gpu`` (the target's device)."""
    torch = _torch_top()
    _torch_cuda(gpu)
    _torch_library()
    _torch_nn()
    return torch


# Packages the ROCm release image does not install, which sglang only probes for with
# ``try: import ... except ImportError`` (checked in every release 0.5.14..0.5.23): absent
# here as there, never a stub. A stub answers such a probe with "installed" and the release's
# fallback is skipped: 0.5.19/0.5.20's ``srt/layers/moe/token_dispatcher/nixl.py:38-43``
# then asserts the stub's ``topk_idx_t`` is a torch dtype, glm4_moe.py fails to import, and the
# registry hides it (``registry.py`` "Ignore import error"): GLM-5.2 fell back to
# TransformersForCausalLM on our stand-ins only. nixl_ep is NVIDIA's NIXL EP (CUDA/UCX).
ABSENT = frozenset({"nixl_ep"})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: a module no real finder has (and not sglang, nor one of
    :data:`ABSENT`) is a stub."""

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in ("sglang", *ABSENT):
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


def install_triton(gfx: str, version: str):
    """A triton at the image's ``version`` (0.5.14 picks the DSA page size from it,
    ``srt/layers/attention/dsa/utils.py:43-54``) whose driver reports the hip backend on
    ``gfx`` (wavefront 64: CDNA)."""

    class _TritonDriver(_Any):
        def get_current_target(self):
            return types.SimpleNamespace(backend="hip", arch=gfx, warp_size=64)

    _module("triton", __version__=version)
    _module("triton.runtime", driver=types.SimpleNamespace(active=_TritonDriver()))
    _module("triton.language")


def _transformers_surface():
    """What releases after 0.5.16 read from the stubbed transformers at import time:
    sglang/srt/utils/hf_transformers_patches.py walks ``PretrainedConfig.__class_validators__``
    (a list on the real class)."""
    import transformers  # the stub package (the import hook below, installed first)

    type.__setattr__(transformers.PretrainedConfig, "__class_validators__", [])


def install(gpu: dict, packages: dict | None = None):
    """Install every shim before sglang is imported; ``gpu`` is the target's device,
    ``packages`` the image's versions of the packages the shims stand in for (triton)."""
    install_torch(gpu)
    install_triton(gpu["gfx"], (packages or {}).get("triton", "3.4.0"))
    _module("dill", dumps=lambda *a, **k: b"", loads=lambda *a, **k: None)
    sys.meta_path.append(_StubFinder())
    _transformers_surface()
