"""How one aiter looks a fused-MoE shape up in its tuned tables, read from that aiter's own code.

The rule differs between aiter commits, so ``configs coverage`` takes it from the base's
``aiter/fused_moe.py`` instead of fixing one (issue 30). What it reads there, all of it inside
``get_2stage_cfgs`` or the module-level helpers that function's callers use:

- **the key**: the list of column names the tables are indexed by (``_INDEX_COLS`` in
  ROCm/aiter 7d604afe5fa7 and 9127c94a18e4; the ``set_index([...])`` argument in the amd-aiter
  0.1.7 wheel). 9127c94a18e4 starts it with ``gfx`` (added by aiter PR #3703, ad73ecb5fa,
  2026-06-13); 7d604afe5fa7 and the wheel start with ``cu_num``;
- **the token bucket**: every call of ``get_2stage_cfgs`` passes ``get_padded_M(M)``; that
  function (with ``nextPow2`` and ``_PADDED_M_TIERS``) is *run*, in an empty namespace, and the
  result is held as :class:`Buckets` (it must agree with the run on every probed count, or
  the rule is refused): 7d604afe5fa7 and 9127c94a18e4 pad to the next power of two below the
  tier 32768 and take the largest tier from there; the 0.1.7 wheel maps 1..16 to 16 and caps at
  1024;
- **the fallbacks**: the smaller-tier retry (``_PADDED_M_TIERS`` used inside
  ``get_2stage_cfgs``), the act-type-disabled dict (``_ACT_TYPE_DISABLED_KEY``), tagged rows
  skipped (the ``"_tag"`` column), ``gfx`` filled from ``cu_num`` (``gfx_from_cu_num``), and
  the fake expert-parallel slot stripped (``topk -= ...``).

Without a base the user names the commit; :data:`KNOWN` holds the rules of the commits
sglforge has read, each held against that commit's shipped ``fused_moe.py`` by
tests/unit/test_aiter_rules.py.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sglforge.errors import ConfigError

# Every key column sglforge can fill from a launch (coverage.Shape plus gfx, cu_num, token).
KNOWN_COLUMNS = (
    "gfx",
    "cu_num",
    "token",
    "model_dim",
    "inter_dim",
    "expert",
    "topk",
    "act_type",
    "dtype",
    "q_dtype_a",
    "q_dtype_w",
    "q_type",
    "use_g1u1",
    "doweight_stage1",
)


@dataclass(frozen=True)
class Buckets:
    """aiter's ``get_padded_M`` as data: ``m <= floor`` gives ``floor``; from ``cap`` on,
    ``cap``; from the first tier on, the largest tier at or below ``m``; else the next power
    of two."""

    floor: int
    cap: int | None
    tiers: tuple[int, ...]

    def __call__(self, m: int) -> int:
        if m <= self.floor:
            return self.floor
        if self.cap is not None and m >= self.cap:
            return self.cap
        if self.tiers and m >= self.tiers[0]:
            return max(t for t in self.tiers if t <= m)
        return 1 << (m - 1).bit_length()

    def describe(self) -> str:
        out = "the next power of two"
        if self.floor > 1:
            out = f"1..{self.floor} -> {self.floor}, then the next power of two"
        if self.cap is not None:
            out += f", {self.cap} from {self.cap} on"
        if self.tiers:
            out += f", tiers {', '.join(map(str, self.tiers))} from {self.tiers[0]} on"
        return out


@dataclass(frozen=True)
class AiterRule:
    """One aiter's fused-MoE lookup: the commit it was read from and what its code does."""

    commit: str | None  # None: the aiter does not record one (e.g. the 0.1.7 wheel)
    source: str  # where the commit and the code came from, for the report
    key: tuple[str, ...]  # the index columns, in aiter's order
    buckets: Buckets
    tier_fallback: bool  # a tier with no row retries the smaller tiers
    act_fallback: bool  # an act_type mismatch still hits the act-disabled dict
    skips_tagged: bool  # rows with a non-empty _tag are not tuned rows
    gfx_from_cu: bool  # a row without gfx gets it from cu_num
    strips_ep_slot: bool  # topk -= 1 under expert parallelism

    def to_dict(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "source": self.source,
            "key": list(self.key),
            "tokens": self.buckets.describe(),
            "tier_fallback": self.tier_fallback,
            "act_fallback": self.act_fallback,
            "skips_tagged": self.skips_tagged,
            "gfx_from_cu": self.gfx_from_cu,
            "strips_ep_slot": self.strips_ep_slot,
        }


_A0_KEY = KNOWN_COLUMNS
_TIERS = (32768, 131072)
# The commits sglforge has read (tests/unit/test_aiter_rules.py parses each one's
# aiter/fused_moe.py, shipped under tests/data/aiter, and compares).
KNOWN: dict[str, AiterRule] = {
    "9127c94a18e4398e1eba91f6639e910f0994ad02": AiterRule(
        "9127c94a18e4398e1eba91f6639e910f0994ad02",
        "sglforge's reading of ROCm/aiter 9127c94a18e4 aiter/fused_moe.py",
        _A0_KEY,
        Buckets(1, None, _TIERS),
        tier_fallback=True,
        act_fallback=True,
        skips_tagged=True,
        gfx_from_cu=True,
        strips_ep_slot=True,
    ),
    "7d604afe5fa7efba63c0dce323b95d9daf2db112": AiterRule(
        "7d604afe5fa7efba63c0dce323b95d9daf2db112",
        "sglforge's reading of ROCm/aiter 7d604afe5fa7 aiter/fused_moe.py",
        _A0_KEY[1:],
        Buckets(1, None, _TIERS),
        tier_fallback=True,
        act_fallback=True,
        skips_tagged=True,
        gfx_from_cu=False,
        strips_ep_slot=True,
    ),
}
# The rule coverage applies when nothing says which aiter the tables belong to.
DEFAULT_COMMIT = "9127c94a18e4398e1eba91f6639e910f0994ad02"


def default_rule() -> AiterRule:
    rule = KNOWN[DEFAULT_COMMIT]
    return replace(
        rule,
        source="not read from a base: sglforge's default, aiter 9127c94a18e4's rule "
        "(give --base-image, a checkout's aiter/configs, or --aiter-commit)",
    )


def known_rule(commit: str, source: str) -> AiterRule:
    """The rule of a commit sglforge has read (a prefix of 7 or more hex digits will do)."""
    c = commit.strip().lower()
    hits = [k for k in KNOWN if len(c) >= 7 and k.startswith(c)]
    if len(hits) != 1:
        raise ConfigError(
            f"aiter commit {commit}: sglforge has not read its lookup rule "
            f"(known: {', '.join(k[:12] for k in KNOWN)})",
            "give --base-image IMG, or --aiter-configs <a checkout at that commit>/aiter/configs "
            "(its aiter/fused_moe.py is read)",
        )
    return replace(KNOWN[hits[0]], source=source)


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _assign(tree: ast.Module, name: str) -> ast.Assign | None:
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in n.targets
        ):
            return n
    return None


def _key_columns(fn: ast.FunctionDef) -> tuple[str, ...] | None:
    """The first list of column names inside ``fn`` that holds ``cu_num`` and ``token``."""
    for node in ast.walk(fn):
        if isinstance(node, ast.List) and node.elts:
            names = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if len(names) == len(node.elts) and {"cu_num", "token"} <= set(names):
                return tuple(str(n) for n in names)
    return None


def _names(fn: ast.FunctionDef) -> set[str]:
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}


def _bucket_function(tree: ast.Module, where: str) -> Callable[[int], int]:
    """aiter's own ``get_padded_M``, run in a namespace holding only what it uses."""
    parts: list[ast.stmt] = []
    for name in ("nextPow2", "get_padded_M"):
        fn = _function(tree, name)
        if fn is None:
            raise ConfigError(f"{where}: no {name}(); sglforge cannot read its token bucket")
        parts.append(_undecorated(fn))
    tiers = _assign(tree, "_PADDED_M_TIERS")
    if tiers is not None:
        parts.insert(0, tiers)
    code = compile(ast.Module(body=parts, type_ignores=[]), where, "exec")
    space: dict[str, Any] = {"__builtins__": {"reversed": reversed, "len": len, "int": int}}
    exec(code, space)  # noqa: S102 - only aiter's pure bucket helpers, no builtins to speak of
    fn = space["get_padded_M"]
    return lambda m: int(fn(m))


def _undecorated(fn: ast.FunctionDef) -> ast.FunctionDef:
    fn.decorator_list = []
    return fn


_PROBES = sorted(
    set(range(1, 2100))
    | {b + d for e in range(1, 24) for b in (1 << e,) for d in (-1, 0, 1)}
    | {3 << e for e in range(1, 22)}
)


def _fit(run: Callable[[int], int], tiers: tuple[int, ...], where: str) -> Buckets:
    floor = run(1)
    top = run(1 << 23)
    cap = top if not tiers and top < (1 << 23) else None
    form = Buckets(floor, cap, tiers)
    for m in _PROBES:
        if form(m) != run(m):
            raise ConfigError(
                f"{where}: get_padded_M({m}) is {run(m)}, not a form sglforge knows "
                f"({form.describe()} gives {form(m)})",
                "report it; meanwhile pass --aiter-commit with a commit sglforge knows",
            )
    return form


def rule_from_source(text: str, commit: str | None, source: str, where: str) -> AiterRule:
    """The lookup rule ``aiter/fused_moe.py`` (``text``, read from ``where``) applies."""
    try:
        tree = ast.parse(text, where)
    except SyntaxError as exc:
        raise ConfigError(
            f"{where}: not Python sglforge can parse ({exc.msg}, line {exc.lineno})"
        ) from exc
    cfgs = _function(tree, "get_2stage_cfgs")
    key = _key_columns(cfgs) if cfgs is not None else None
    if cfgs is None or key is None:
        raise ConfigError(f"{where}: no get_2stage_cfgs() with its index columns; cannot read")
    unknown = [c for c in key if c not in KNOWN_COLUMNS]
    if unknown:
        raise ConfigError(
            f"{where}: aiter keys its tuned fused-MoE rows on {unknown[0]!r}, a column "
            "sglforge does not know how to fill from a launch"
        )
    padded = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == "get_2stage_cfgs"
    ]
    by_bucket = all(
        a.args
        and isinstance(a.args[0], ast.Call)
        and isinstance(a.args[0].func, ast.Name)
        and a.args[0].func.id == "get_padded_M"
        for a in padded
    )
    tiers_node = _assign(tree, "_PADDED_M_TIERS")
    tiers: tuple[int, ...] = ()
    if tiers_node is not None:
        tiers = tuple(int(v) for v in ast.literal_eval(tiers_node.value))
    if not (padded and by_bucket):
        raise ConfigError(
            f"{where}: get_2stage_cfgs is not called with get_padded_M(M) everywhere; "
            "sglforge does not know how this aiter matches the token count"
        )
    buckets = _fit(_bucket_function(tree, where), tiers, where)
    names = _names(cfgs)
    strips = any(
        isinstance(n, ast.AugAssign)
        and isinstance(n.target, ast.Name)
        and n.target.id == "topk"
        and isinstance(n.op, ast.Sub)
        for n in ast.walk(cfgs)
    )
    return AiterRule(
        commit=commit,
        source=source,
        key=key,
        buckets=buckets,
        tier_fallback="_PADDED_M_TIERS" in names,
        act_fallback="_ACT_TYPE_DISABLED_KEY" in names,
        skips_tagged=any(isinstance(n, ast.Constant) and n.value == "_tag" for n in ast.walk(cfgs)),
        gfx_from_cu="gfx_from_cu_num" in names and "gfx" in key,
        strips_ep_slot=strips,
    )


_HEX = re.compile(r"[0-9a-f]{40}")


def head_commit(read: Callable[[str], str | None]) -> str | None:
    """The commit a checkout's ``.git`` says it has out (``read``: a file under ``.git``)."""
    head = (read("HEAD") or "").strip()
    if _HEX.fullmatch(head):
        return head
    if not head.startswith("ref: "):
        return None
    ref = head.removeprefix("ref: ").strip()
    loose = (read(ref) or "").strip()
    if _HEX.fullmatch(loose):
        return loose
    for line in (read("packed-refs") or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == ref and _HEX.fullmatch(parts[0]):
            return parts[0]
    return None


def commit_of(found: Mapping[str, Any], where: str) -> tuple[str | None, str]:
    """(commit, where it came from) from what a probe found next to aiter's package:
    ``git`` ({path under .git: text}), ``dist`` (name version), ``direct_url`` (its JSON)."""
    git = found.get("git") or {}
    commit = head_commit(lambda p: git.get(p)) if git else None
    if commit:
        return commit, f"git metadata of the checkout {where}"
    dist = found.get("dist")
    if found.get("direct_url"):
        try:
            vcs = json.loads(found["direct_url"]).get("vcs_info") or {}
        except ValueError:
            vcs = {}
        if _HEX.fullmatch(str(vcs.get("commit_id", ""))):
            return str(vcs["commit_id"]), f"the installed distribution {dist}'s direct_url.json"
    local = re.search(r"\+g([0-9a-f]{7,40})", str(dist or ""))
    if local:
        return local.group(1), f"the installed distribution's version ({dist})"
    if dist:
        return None, f"the installed distribution {dist} records no commit"
    return None, f"{where}: no git metadata and no installed distribution"


def rule_of_dir(configs: Path, commit: str | None = None) -> AiterRule:
    """The rule of the aiter whose ``aiter/configs`` folder ``configs`` is: its checkout's
    ``aiter/fused_moe.py`` (next to ``configs``) when present, with the commit its ``.git``
    records (or ``commit``, the user's); else the rule of ``commit``; else the default."""
    fused = configs.parent / "fused_moe.py"
    root = configs.parent.parent
    if fused.is_file():
        named = f"named by --aiter-commit {commit}" if commit else None
        found = _git_files(root / ".git")
        head, source = commit_of({"git": found}, str(root)) if found else (None, "")
        if named:
            head, source = commit, named
        elif head is None:
            source = f"{root}: no git metadata (pass --aiter-commit to name it)"
        return rule_from_source(
            fused.read_text(encoding="utf-8", errors="replace"),
            head,
            f"{source}; rule read from {fused}",
            str(fused),
        )
    if commit:
        return known_rule(commit, f"named by --aiter-commit {commit}; sglforge's reading")
    return default_rule()


def _git_files(git: Path) -> dict[str, str]:
    """HEAD, the ref it names and packed-refs of a checkout's ``.git`` (folder or file)."""
    if git.is_file():
        line = git.read_text(errors="replace").strip()
        if line.startswith("gitdir:"):
            git = git.parent / line.removeprefix("gitdir:").strip()
    git = git.resolve()
    out: dict[str, str] = {}
    head = git / "HEAD"
    if not head.is_file():
        return out
    out["HEAD"] = head.read_text(errors="replace")
    ref = out["HEAD"].strip().removeprefix("ref: ") if out["HEAD"].startswith("ref: ") else None
    for name in [n for n in (ref, "packed-refs") if n]:
        path = git / name
        if path.is_file() and git in path.resolve().parents:
            out[name] = path.read_text(errors="replace")
    return out


# --- the key as aiter logs it -----------------------------------------------------------------
# aiter logs each fused-MoE lookup with the key tuple it looked up, formatted by Python
# (``f"... for {keys} "``: 9127c94a18e4 aiter/fused_moe.py:1361 and :1583, 7d604afe5fa7 :1254
# and :1487), the tuple built in the rule's column order (``keys = (...)``: 9127c94a18e4
# :1176-1191, 7d604afe5fa7 :1074-1088). So the text of a logged key is the rule's, not one
# commit's: a smoke log pattern names the key by column in a placeholder,
# ``{aiter-key gfx=gfx950 cu_num=256 model_dim=6144 inter_dim=256 expert=257 topk=9}``, and
# :func:`expand_log_keys` writes the regular expression for the rule of the base's aiter.
LOG_KEY = re.compile(r"\{aiter-key((?:\s+[a-z_0-9]+=[^\s{}]+)+)\s*\}")
# columns aiter formats as strings (``gfx`` from get_gfx_runtime(), ``str(dtype)``, ...): repr'd
_STRING_COLUMNS = frozenset({"gfx", "dtype", "q_dtype_a", "q_dtype_w", "q_type"})


def log_key(rule: AiterRule, values: Mapping[str, object]) -> str:
    """The regular expression for a key tuple ``rule``'s aiter logs: ``values`` (by column)
    where given, ``\\d+`` for the token, any element for the others, up to the last given
    column. Columns this aiter does not key on (``gfx`` before 9127c94a18e4) are dropped."""
    unknown = sorted(set(values) - set(KNOWN_COLUMNS))
    if unknown:
        raise ConfigError(
            f"aiter-key column {unknown[0]!r}: not a column aiter keys fused-MoE rows on "
            f"(known: {', '.join(KNOWN_COLUMNS)})"
        )
    given = [i for i, c in enumerate(rule.key) if c in values]
    if not given:
        return r"\("
    parts = []
    for column in rule.key[: given[-1] + 1]:
        value = values.get(column)
        if value is None:
            parts.append(r"\d+" if column == "token" else r"[^,()]+")
        else:
            text = str(value)
            parts.append(re.escape(repr(text) if column in _STRING_COLUMNS else text))
    end = r"\)" if given[-1] == len(rule.key) - 1 else ", "
    return r"\(" + ", ".join(parts) + end


def expand_log_keys(pattern: str, rules: tuple[AiterRule, ...]) -> str:
    """``pattern`` with each ``{aiter-key ...}`` placeholder written for ``rules`` (one form
    each, alternatives when the base's aiter is not known: every rule of :data:`KNOWN`)."""

    def one(m: re.Match[str]) -> str:
        values = dict(pair.split("=", 1) for pair in m.group(1).split())
        forms = list(dict.fromkeys(log_key(r, values) for r in rules))
        return forms[0] if len(forms) == 1 else "(?:" + "|".join(forms) + ")"

    return LOG_KEY.sub(one, pattern)


def log_rules(rule: AiterRule | None) -> tuple[AiterRule, ...]:
    """The rules a smoke log's aiter keys are read with: the base's, else every known one."""
    return (rule,) if rule is not None else tuple(KNOWN.values())
