"""TEST DOUBLE -- NOT SGLANG. A stand-in for sglang 0.5.14's HTTP server, for sglforge smoke tests.

There is no GPU where sglforge's tests run, so the smoke runner is tested against this small
stdlib-only (``http.server``) program instead of a real model. It is installed in the test
images as ``sglang/launch_server.py`` so that ``python3 -m sglang.launch_server ...`` reaches it
exactly as it would reach the real one. Nothing here loads a model or decodes anything: the
"tokens" are words and the "speculative decoding" figures are arithmetic.

What it reproduces, read in the released sglang 0.5.14 wheel (PyPI ``sglang==0.5.14``; paths
are under ``sglang/``, lines are that wheel's):

- Startup order (``srt/entrypoints/http_server.py:2455-2500`` ``launch_server``): the model is
  loaded by the scheduler processes *before* the HTTP server starts, so the port is closed
  (nothing listens) while weights load. Once it listens, ``/health`` and ``/health_generate``
  answer 503 while the server is still ``Starting`` (``http_server.py:575-576``) until the
  warmup request has gone through (``http_server.py:2075``, ``:2142``); then "The server is
  fired up and ready to roll!" (``http_server.py:2145``).
- ``POST /generate`` (``http_server.py:764-812``): one JSON object ``{"text", "output_ids",
  "meta_info"}``; with ``"stream": true`` one ``data: {...}`` event per step, the text
  cumulative (``srt/managers/tokenizer_manager.py:1969-1983``, text resolved at ``:1473-1482``),
  then ``data: [DONE]`` (``http_server.py:797``).
- ``meta_info`` (``tokenizer_manager.py:1861-1867``, ``:1887-1893``): ``id``,
  ``finish_reason``, ``prompt_tokens``, ``weight_version``, ``num_retractions``,
  ``reasoning_tokens``, ``completion_tokens``, ``cached_tokens``; ``e2e_latency`` only once
  finished (``:2058``). Speculative statistics only on the finished response and only when
  ``spec_verify_ct > 0`` (``_calculate_spec_decoding_metrics``, ``:2301-2353``):
  ``spec_accept_length = completion_tokens / spec_verify_ct`` (the prefill token included),
  ``spec_accept_rate``, ``spec_num_correct_drafts``, ``spec_num_proposed_drafts``,
  ``spec_verify_ct``, the backward-compatible aliases ``spec_accepted_drafts`` /
  ``spec_proposed_drafts`` / ``spec_accept_histogram`` and ``spec_correct_drafts_histogram``
  (indexed by correct drafts per verify step, ``srt/managers/schedule_batch.py:1077-1087``).
- ``GET /server_info`` (``http_server.py:688-707``): the server arguments, the scheduler's
  init info (``srt/managers/scheduler.py:1450-1454``), ``internal_states`` (one per DP rank:
  ``scheduler.py:3670-3697``, with ``avg_spec_accept_length`` only after a decode-stats
  interval has been logged), ``version`` and ``kv_events``. ``GET /get_server_info`` is the
  deprecated alias (``http_server.py:678-685``). ``avg_spec_accept_length`` is
  ``spec_total_num_accept_tokens / spec_total_num_forward_ct``, rolled up every
  ``--decode-log-interval`` (40) decode batches, when the "Decode batch" line is logged
  (``srt/managers/scheduler_components/metrics_reporter.py:347-349``, ``:673-676``,
  ``:706-724``).
- ``GET /model_info`` (``http_server.py:648-665``), ``GET /v1/models`` (``http_server.py:1713``,
  ``srt/entrypoints/openai/protocol.py:68-84``), ``POST /v1/chat/completions`` with and
  without streaming (``srt/entrypoints/openai/serving_chat.py:1323-1375`` and
  ``:1066-1205``, ``protocol.py:954-1046``, ``srt/entrypoints/openai/sse_utils.py:13-46``).
- Log lines in sglang's format (``[%(asctime)s{prefix}] %(message)s``,
  ``srt/utils/common.py:1369``); a scheduler crash is logged as ``Scheduler hit an exception:``
  plus the traceback (``scheduler.py:4229-4231``).

- The launch (:class:`Launch`): in the replica this file is the release tree's own
  ``sglang/launch_server.py``, and the flags are parsed by that tree's own parser:
  ``ServerArgs.add_cli_args`` (``srt/server_args.py:6257``, every field's ``Arg`` through
  ``srt/arg_groups/arg_utils.py``), the module run with its third-party imports stubbed (they
  only matter past parsing), so a flag or value 0.5.14 refuses is refused with argparse's own
  message (exit 2). Of ``ServerArgs.__post_init__`` it runs what the double's behaviour depends
  on: ``NEXTN`` -> ``EAGLE`` (the tree's ``_resolve_speculative_algorithm_alias``,
  ``arg_groups/speculative_hook.py:14-51``), draft tokens = steps + 1 with top-k 1
  (``speculative_hook.py:383-390``), and for a DSA checkpoint (the tree's ``is_deepseek_dsa``,
  ``configs/model_config.py:103-115``) the tree's own ``_set_default_dsa_kv_cache_dtype``
  (``server_args.py:3403-3429``: ``auto`` -> ``bfloat16`` on gfx950, anything but
  bfloat16/fp8_e4m3 an ``AssertionError``, exit 1). tests/unit/test_standin_launch.py runs
  0.5.14's real ``ServerArgs`` on the same launches and compares. Run without a tree (from
  tests/standin/), or on a release whose parser needs more than the stubs give, it says so
  and uses :func:`build_parser`, a subset.

Where it differs from the real server, on purpose:

- Every log line starts with ``[STAND-IN]`` so nobody mistakes its log for a real server's.
  The smoke runner's forbidden-log patterns are therefore never anchored at the start of a
  line; ``tests/unit/test_smoke_scenario.py`` checks each one against the real, unprefixed
  text *and* the prefixed form, and fails if either stops matching.
- ``/generate`` takes one string ``text`` (no batches, no ``input_ids``): answers 400
  otherwise. The runner sends only that; ``test_generate_refuses_what_the_double_lacks``
  fails if the runner starts sending anything else.
- One request at a time in the decode statistics (a verify step is one decode batch of size
  1); sglang batches concurrent requests. Under ``--dp N`` each rank has its own slots, prefill
  queue, radix cache and statistics, requests go to the ranks in turn (``round_robin``,
  ``srt/managers/data_parallel_controller.py:604-616``) and ``internal_states`` has one entry per
  rank (``srt/managers/tokenizer_control_mixin.py:132``, ``:788-795``).
- MTP acceptance depends on the prompt's form: ``STANDIN_ACCEPT_LENGTH`` (3.4) for a prompt
  rendered through a chat template (``/v1/chat/completions``, or ``/generate`` text carrying a
  template's role markers, :data:`TEMPLATE_MARKERS` or the tokenizer's own template prefix),
  ``STANDIN_RAW_ACCEPT_LENGTH`` (2.4) for raw text. The drop is an assumption (no GPU measured
  it on GLM-5.2), set below the smoke's 2.5 so that a smoke gating on raw prompts fails here as
  it could on a node; ``POST /v1/chat/completions`` takes ``return_meta_info`` (not with
  ``stream``: 400, ``srt/entrypoints/openai/serving_chat.py:512-516``) and ``ignore_eos``.
- Simple arithmetic questions ("What is 17 + 25?") are answered correctly; other text is
  filler words.
- A prefill stalls the decode of every running request on its rank, as 0.5.14 runs a new
  prefill batch instead of the running decode batch (``scheduler.py:2655-2665``;
  ``--enable-mixed-chunk`` off by default, ``server_args.py:788-791``); and a prefill that
  arrives during a decode step starts when that step ends, as 0.5.14's scheduler loop takes
  new requests only between forward passes (``scheduler.py:1505-1524``).
- ``/health`` and ``/health_generate`` send a 1-token request through the scheduler (FCFS
  behind the queue, not counted in ``/metrics``) and answer 200 only after a 1 s sleep once
  the scheduler sent anything since the check began, 503 after
  ``SGLANG_HEALTH_CHECK_TIMEOUT`` (20) s without (``http_server.py:561-634``).

aiter's tuned fused-MoE lookup (:class:`AiterFusedMoE`), when aiter is installed in the image
(the replica's ``ensure_sglang_base(aiter=True)``: the real ``amd-aiter`` wheel's tree at
``/sgl-workspace/aiter``) and the model's ``config.json`` names a Quark (MXFP4) checkpoint with
routed experts. Mirrored from amd-aiter 0.1.7.post2.dev18 (PyPI wheel; lines are that wheel's):

- the table: ``AITER_CONFIG_FMOE`` or ``<aiter root>/aiter/configs/tuned_fmoe.csv``
  (``aiter/jit/core.py:163-166``); without ``AITER_CONFIG_FMOE`` every ``*tuned_fmoe*`` file of
  ``aiter/configs/model_configs/`` not named ``untuned`` is merged after it and aiter logs
  ``merge tuned file under model_configs/ and configs/ <files>`` (``core.py:117-139``); a
  ``:``-list is merged, a single path replaces (``core.py:75-78``); merged files must have the
  first file's columns (``core.py:85-88``); duplicate keys (the header of
  ``configs/untuned_fmoe.csv``) keep the lowest ``us`` (``core.py:95-108``);
- the lookup: token bucketed by the image's own aiter's ``get_padded_M`` (run from its
  ``aiter/fused_moe.py``, :func:`aiter_padded_m`: the wheel's 1..16 -> 16, ROCm/aiter's next
  power of two), key ``cu_num, token, model_dim, inter_dim, expert, topk, act_type, dtype,
  q_dtype_a, q_dtype_w, q_type, use_g1u1, doweight_stage1`` (``fused_moe.py:525-567``), logged
  once per key (``get_2stage_cfgs`` is ``lru_cache``d, ``:504``) as ``[fused_moe] using 2stage
  (kernelName1=..., kernelName2=...) for <key>`` or ``[fused_moe] using 2stage default for <key>``
  (``:639-641``), through the ``[aiter] %(message)s`` logger (``aiter/__init__.py:23-25``).

Where that differs from the real thing: the token counts are the stand-in's (a prefill of the
prompt's words, then one verify step of ``--speculative-num-draft-tokens`` tokens, or 1 without
speculative decoding) and there is no CUDA-graph capture sweep; ``cu_num`` is ``$CU_NUM``
(aiter reads it too, ``aiter/jit/utils/chip_info.py:101``) or 256 (MI355X). The shapes
(model_dim, inter_dim, expert, topk) are never decided here: they are handed in through
``$STANDIN_MOE_LOOKUPS`` (``sglforge configs coverage --json``, whose shapes come from the pinned
sglang's own model construction, shared-experts fusion included); without it the stand-in
prints no MoE lookup line. tests/docker/test_aiter_configs.py runs the lookup against the real
wheel's tables and against a table with our item, and fails if the lines change.

Faults and extra log lines through the environment (comma-separated names in
``STANDIN_FAULT``):

- ``crash``: dies while loading weights the way the unpatched MXFP4 MTP image does: the bf16
  MTP shared expert meets an MXFP4-shaped slot and ``MergedColumnParallelLinear.weight_loader``'s
  bare ``assert param_data.shape == loaded_weight.shape`` fails (``srt/layers/linear.py:724``),
  logged as a bare ``AssertionError`` after the scheduler's traceback; exit 1.
- ``crash-later``: becomes ready, then dies on the first request (not a health check) with a
  HIP error.
- ``hang``: never finishes loading (never listens).
- ``wrong``: answers arithmetic off by one.
- ``empty``: generates empty text.
- ``low-accept``: accepts 1.3 tokens per verify step.
- ``slow``: decodes at 4 tokens/s (``STANDIN_DECODE_TOK_S`` sets any speed).
- ``forbidden-log``: survives, but logs the deep-draft metadata kernel's fallback line
  (``srt/layers/attention/dsa_backend.py:2722-2724``), a line that must fail a smoke run.
- ``aiter-untuned``: logs aiter's "no tuned config" MoE lines (aiter ``fused_moe.py``), as a
  correctly patched stock image does for GLM-5.2's fp4 MoE; a warning, not a failure.
- ``old-api``: answers ``/get_server_info`` only (``/server_info`` is a 404), like old sglang.

The serving cost model (what ``sglforge bench`` measures through the image's own
``sglang.bench_serving``; every figure is the stand-in's arithmetic, nothing is a GPU's):

- prefill costs ``STANDIN_PREFILL_US_PER_TOKEN`` (default 20) microseconds per *uncached* prompt
  token; the prompt is tokenized with the model's (or ``--tokenizer-path``'s) tokenizer when
  ``transformers`` is installed, else one token per word;
- a prefix cache, LRU over blocks of ``STANDIN_BLOCK_TOKENS`` (default 16) tokens, at most
  ``STANDIN_CACHE_TOKENS`` (default 2,000,000) tokens; a request reuses the longest run of cached
  blocks from its start (``--disable-radix-cache`` turns it off); ``meta_info.cached_tokens``
  says how many (``tokenizer_manager.py:1861-1867``). As in 0.5.14, the cache is matched when
  the request is scheduled (``scheduler.py:2847`` -> ``schedule_batch.py:1166``) and a prompt
  is inserted only once its prefill ran (``maybe_cache_unfinished_req``,
  ``scheduler_components/batch_result_processor.py:242``; the overlap loop forms the next
  batch before it processes the last one's result, ``scheduler.py:1557-1578``); prefills run
  one at a time, first come first served (``schedule_policy`` ``fcfs``,
  ``schedule_policy.py:187-192``): a request that arrives while another with its prefix is
  still prefilling waits for that prefill and gets no hit;
- decode costs ``1 / STANDIN_DECODE_TOK_S`` seconds per token at batch 1, times
  ``1 + STANDIN_DECODE_BATCH_GROWTH x (running requests - 1)`` (default growth 0.05);
- at most ``--max-running-requests`` (default 16) requests run; the rest wait in a queue (their
  wait is part of their time to first token);
- ``STANDIN_SLOWDOWN`` (default 1.0) multiplies every cost (an injected regression);
  ``STANDIN_NOISE`` (default 0) draws one factor per boot uniformly in ``1 +- NOISE``
  (``STANDIN_NOISE_SEED`` fixes the draw), the run-to-run noise of a real node;
  ``STANDIN_JITTER`` (default 0) draws one more factor per request uniformly in
  ``1 +- JITTER`` (seeded from ``STANDIN_NOISE_SEED`` too), the request-to-request spread a
  real server shows under load. ``bench/power_study.py`` draws exactly this arithmetic;
- the costs are a schedule kept from each request's start, not pauses added after each
  step's work: a loaded CPU between steps does not slow the figures (a step that cannot
  keep up still ends late);
- ``/metrics`` with ``--enable-metrics`` only (``http_server.py:270-272``), Prometheus text
  from the engine's own counters: ``sglang:prompt_tokens_total``,
  ``sglang:generation_tokens_total``, ``sglang:num_requests_total`` and
  ``sglang:cached_tokens_total{cache_source="device"}`` counted when a request finishes
  (``srt/observability/metrics_collector.py:1428-1431``, ``:1507-1511``, ``:1645-1673``), and
  the ``sglang:cache_hit_rate`` gauge (``:292-296``) set from the last prefill, with the
  ``num_running_reqs``/``num_queue_reqs`` gauges one row per DP rank; labelled as a real
  0.5.14 server labels them (``metrics_collector.py:1055-1066``; tests compare with a real
  server's ``/metrics`` in tests/data/h200-run/logs/);
- ``GET|POST /flush_cache`` empties the prefix cache and resets the decode statistics
  (``avg_spec_accept_length`` is gone until the next interval) when nothing runs, else 400
  (``http_server.py:839-854``; ``scheduler.py:3640-3649`` -> ``metrics_reporter.py:487-493``).

``STANDIN_LOG_LINES``: extra lines (newline-separated) printed verbatim while loading, for tests
that need a given real line in the log. Other knobs: ``STANDIN_LOAD_SECONDS`` (default 0.5)
before listening, ``STANDIN_WARMUP_SECONDS`` (default 0.2) of 503 before ready,
``STANDIN_CRASH_AFTER`` (seconds into loading before ``crash``, default 0.3),
``STANDIN_ACCEPT_LENGTH`` (default 3.4, templated prompts), ``STANDIN_RAW_ACCEPT_LENGTH``
(default 2.4, raw prompts).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import random
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BANNER = "sglforge STAND-IN sglang server (TEST DOUBLE, not sglang; no model is loaded)"
FAULTS = frozenset(
    {
        "crash",
        "crash-later",
        "hang",
        "wrong",
        "empty",
        "low-accept",
        "slow",
        "forbidden-log",
        "aiter-untuned",
        "old-api",
    }
)
WORDS = (
    "the quick model serves tokens on eight accelerators while the draft head proposes "
    "several guesses and the target verifies them in one pass"
).split()
# srt/server_args.py: weight_version defaults to "default"; decode_log_interval to 40.
WEIGHT_VERSION = "default"
DECODE_LOG_INTERVAL = 40
DEFAULT_CONTEXT_LEN = 8192

# aiter's MoE key for GLM-5.2's fp4 MoE on gfx950 (TP8 shard), in the tuple form aiter logs it
# (aiter/fused_moe.py get_2stage_cfgs: cu_num, token, model_dim, inter_dim, expert, topk,
# activation, dtype, q_dtype_a, q_dtype_w, q_type, use_g1u1, doweight_stage1).
AITER_KEY = (
    "(256, 1, 6144, 256, 256, 8, 'ActivationType.Silu', 'torch.bfloat16', "
    "'torch.float4_e2m1fn_x2', 'torch.float4_e2m1fn_x2', 'QuantType.per_1x32', True, False)"
)
AITER_UNTUNED_LINES = (
    # amd-aiter 0.1.7.post2.dev18 (PyPI) aiter/fused_moe.py:639-641, printed through the
    # "aiter" logger whose format is "[aiter] %(message)s" (aiter/__init__.py:23-25).
    f"[aiter] [fused_moe] using 2stage default for {AITER_KEY} ",
    # ROCm/aiter aiter/fused_moe.py get_2stage_cfgs (newer than the wheel above):
    # logger.warning("[fused_moe] no tuned FlyDSL config for {keys}, using heuristic FlyDSL
    # fallback ({kn1=}, {kn2=})").
    f"[aiter] [fused_moe] no tuned FlyDSL config for {AITER_KEY}, using heuristic FlyDSL "
    "fallback (kn1='flydsl_moe1_afp4_wfp4_bf16_t32x128x256', "
    "kn2='flydsl_moe2_afp4_wfp4_bf16_t32x128x256_atomic')",
)
# srt/layers/attention/dsa_backend.py:2722-2724 (0.5.14): printed when the multi-backend fused
# metadata copy kernel cannot be imported (the JIT build failed), before a slow copy loop.
METADATA_FALLBACK_LINE = (
    "Warning: Multi-backend fused metadata copy kernel not available, falling back to loop."
)


# aiter's fused-MoE key tail for an MXFP4 (Quark) MoE with SiLU, as str() renders it in the
# key tuple (fused_moe.py:553-567): act_type, dtype, q_dtype_a, q_dtype_w, q_type, use_g1u1,
# doweight_stage1.
AITER_FP4_TAIL = (
    "ActivationType.Silu",
    "torch.bfloat16",
    "torch.float4_e2m1fn_x2",
    "torch.float4_e2m1fn_x2",
    "QuantType.per_1x32",
    True,
    False,
)
AITER_KEY_COLUMNS = (
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
AITER_INT_COLUMNS = frozenset(
    {"cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "use_g1u1", "doweight_stage1"}
)


def aiter_root() -> str | None:
    """aiter's AITER_ROOT_DIR: two folders above ``aiter/jit/`` (``aiter/jit/core.py:67``)."""
    import importlib.util

    spec = importlib.util.find_spec("aiter")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.dirname(os.path.abspath(list(spec.submodule_search_locations)[0]))


def aiter_padded_m(root: str) -> Callable[[int], int]:
    """The image's own aiter's token bucket: ``get_padded_M`` (with ``nextPow2`` and
    ``_PADDED_M_TIERS``) taken from ``<root>/aiter/fused_moe.py`` and run in a namespace holding
    nothing else, the rule ``sglforge.aiter_rules`` reads from the same file. ROCm/aiter
    7d604afe5fa7 and 9127c94a18e4 pad to the next power of two (tiers from 32768 on); the PyPI
    0.1.7 wheel maps 1..16 to 16 and caps at 1024."""
    import ast

    with open(os.path.join(root, "aiter", "fused_moe.py"), encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    parts: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in ("nextPow2", "get_padded_M"):
            node.decorator_list = []
            parts.append(node)
        elif isinstance(node, ast.Assign) and any(
            isinstance(x, ast.Name) and x.id == "_PADDED_M_TIERS" for x in node.targets
        ):
            parts.insert(0, node)
    code = compile(ast.Module(body=parts, type_ignores=[]), "aiter/fused_moe.py", "exec")
    space: dict = {"__builtins__": {"reversed": reversed, "len": len, "int": int}}
    exec(code, space)  # noqa: S102 - aiter's pure bucket helpers only
    padded = space["get_padded_M"]
    return lambda m: int(padded(m))


def _read_csv(path: str) -> tuple[list[str], list[dict]]:
    import csv

    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


class AiterFusedMoE:
    """aiter's tuned fused-MoE table and lookup, as the image's aiter does them (module doc)."""

    def __init__(self, root: str, env: dict) -> None:
        self.root = root
        self.env = env
        self.padded_m = aiter_padded_m(root)
        self.logged: set[tuple] = set()
        self.merge_line: str | None = None
        self.table: dict[tuple, dict] = {}
        configs = os.path.join(root, "aiter", "configs")
        given = env.get("AITER_CONFIG_FMOE")
        default = given or os.path.join(configs, "tuned_fmoe.csv")
        if given:
            files = given.split(os.pathsep)
        else:
            # core.py:120-139: glob order, names holding "untuned" skipped.
            import pathlib

            model_dir = pathlib.Path(configs, "model_configs")
            extra = [
                str(p)
                for p in model_dir.glob("*tuned_fmoe*")
                if p.is_file() and "untuned" not in str(p)
            ]
            files = [default, *extra] if extra else [default]
            if extra:
                self.merge_line = (
                    f"merge tuned file under model_configs/ and configs/ {':'.join(files)}"
                )
        columns, rows = _read_csv(files[0])
        for path in files[1:]:
            if not os.path.exists(path):
                continue
            more_columns, more = _read_csv(path)
            if more_columns != columns:  # core.py:85-88
                raise AssertionError(f"Column mismatch between {files[0]} and {path}")
            rows += more
        if len(files) > 1:
            untuned = os.path.join(configs, "untuned_fmoe.csv")
            if os.path.exists(untuned):
                keys, _ = _read_csv(untuned)
                rows.sort(key=lambda r: float(r.get("us") or 0))  # core.py:104-108
                seen: set[tuple] = set()
                kept = []
                for row in rows:
                    k = tuple(row.get(c) for c in keys)
                    if k not in seen:
                        seen.add(k)
                        kept.append(row)
                rows = kept
        for row in rows:
            key = tuple(
                int(float(row[c])) if c in AITER_INT_COLUMNS else row[c] for c in AITER_KEY_COLUMNS
            )
            self.table[key] = row

    def lookup(self, token_num: int, model_dim: int, inter_dim: int, expert: int, topk: int):
        """The log line aiter prints for this shape, or None if this key was already logged."""
        cu_num = int(self.env.get("CU_NUM") or 256)
        keys = (cu_num, self.padded_m(token_num), model_dim, inter_dim, expert, topk)
        keys = keys + AITER_FP4_TAIL
        if keys in self.logged:
            return None
        self.logged.add(keys)
        cfg = self.table.get(keys)
        if cfg is None:
            return f"[aiter] [fused_moe] using 2stage default for {keys} "
        kernel_name1, kernel_name2 = cfg["kernelName1"], cfg["kernelName2"]
        tag = f"({kernel_name1=}, {kernel_name2=})".replace("kernel_name", "kernelName")
        return f"[aiter] [fused_moe] using 2stage {tag} for {keys} "


MOE_LOOKUPS_ENV = "STANDIN_MOE_LOOKUPS"


def handed_shapes(env: dict) -> list[tuple[int, int, int, int]]:
    """The fused-MoE shapes this launch asks aiter for, as handed in: never derived here.

    ``$STANDIN_MOE_LOOKUPS`` holds ``sglforge configs coverage --json`` output (or its
    ``lookups`` list): each lookup's (model_dim, inter_dim, expert, topk), which come from the
    pinned sglang's own model construction. Nothing handed: no MoE lookup lines at all.
    """
    text = env.get(MOE_LOOKUPS_ENV, "").strip()
    if not text:
        return []
    data = json.loads(text)
    lookups = data["lookups"] if isinstance(data, dict) else data
    shapes: list[tuple[int, int, int, int]] = []
    for x in lookups:
        shape = (int(x["model_dim"]), int(x["inter_dim"]), int(x["expert"]), int(x["topk"]))
        if shape not in shapes:
            shapes.append(shape)
    return shapes


def log(message: str, prefix: str = "") -> None:
    """One log line in sglang's format, loudly labelled as coming from the test double."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[STAND-IN] [{stamp}{prefix}] {message}", flush=True)


def raw(line: str) -> None:
    """A line printed without sglang's logger (tracebacks, aiter's own logger), labelled."""
    print(f"[STAND-IN] {line}", flush=True)


def sglang_version() -> str:
    """The version of the sglang package this runs from, if any."""
    try:
        from sglang.version import __version__  # type: ignore[import-not-found]

        return str(__version__)
    except Exception:  # noqa: BLE001 - run straight from tests/standin/ there is no package
        return "0.0.0+standin"


def build_parser() -> argparse.ArgumentParser:
    """sglang's launch flags that sglforge's scenarios use (and a few common neighbours).

    Names, aliases, defaults and choices as in 0.5.14's ``srt/server_args.py``.
    """
    p = argparse.ArgumentParser(prog="launch_server.py", description=BANNER)
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--tokenizer-path")
    p.add_argument("--served-model-name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tp", dest="tp_size", type=int, default=1)
    p.add_argument("--dp-size", "--dp", dest="dp_size", type=int, default=1)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--quantization")
    p.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"],
    )
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--context-length", type=int)
    p.add_argument("--chunked-prefill-size", type=int)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--cuda-graph-max-bs", type=int)
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--attention-backend")
    p.add_argument("--random-seed", type=int)
    p.add_argument("--watchdog-timeout", type=float, default=300.0)
    p.add_argument("--log-level", default="info")
    p.add_argument("--decode-log-interval", type=int, default=DECODE_LOG_INTERVAL)
    p.add_argument("--skip-server-warmup", action="store_true")
    p.add_argument("--enable-aiter-allreduce-fusion", action="store_true")
    p.add_argument(
        "--speculative-algorithm",
        choices=["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH"],
    )
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    return p


# --------------------------------------------------------------------------- the image's parser


class _Stub(type):
    """A class standing for what sglang's parser imports but never needs to parse flags
    (torch, model registries...): its attributes, calls and items are more stubs."""

    def __new__(mcs, name: str = "stub", bases: tuple = (), ns: dict | None = None):
        return super().__new__(mcs, name, bases, dict(ns or {}))

    def __init__(cls, *a, **k) -> None:
        pass

    def __getattr__(cls, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Stub(name)

    def __call__(cls, *a, **k):
        return _Stub("result")

    def __getitem__(cls, item):
        return _Stub("item")

    def __iter__(cls):
        return iter(())

    def __or__(cls, other):
        import typing

        return typing.Union[cls, other]  # noqa: UP007 - | would call this again

    def __ror__(cls, other):
        import typing

        return typing.Union[other, cls]  # noqa: UP007 - | would call this again


def _load(path: str, name: str):
    """A stdlib-only module of the tree (``arg_groups/arg_utils.py``...), run as itself."""
    import types

    mod = types.ModuleType(name)
    mod.__file__ = path
    sys.modules[name] = mod
    with open(path, encoding="utf-8") as fh:
        exec(compile(fh.read(), path, "exec"), mod.__dict__)  # noqa: S102 - sglang's own code
    return mod


def _source(path: str):
    import ast

    with open(path, encoding="utf-8") as fh:
        return ast.parse(fh.read(), path)


def _dict_keys(path: str, cls: str, attr: str) -> dict:
    """The keys of the dict literal ``cls.attr`` in ``path`` (a parser registry's names)."""
    import ast

    for node in ast.walk(_source(path)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for st in node.body:
                target = st.target if isinstance(st, ast.AnnAssign) else None
                target = st.targets[0] if isinstance(st, ast.Assign) else target
                if isinstance(target, ast.Name) and target.id == attr:
                    if isinstance(st.value, ast.Dict):
                        return {ast.literal_eval(k): None for k in st.value.keys if k}
    return {}


def _constant(package: str, node, name: str, key: str):
    """A literal constant an imported sglang module defines (read from its source), else a
    stub: e.g. the LoRA target modules ``--lora-target-modules`` takes as choices."""
    import ast

    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang."):
        base = os.path.join(os.path.dirname(package), *str(node.module).split("."))
        for path in (base + ".py", os.path.join(base, "__init__.py")):
            if not os.path.isfile(path):
                continue
            for st in _source(path).body:
                named = isinstance(st, ast.Assign) and any(
                    isinstance(x, ast.Name) and x.id == name for x in st.targets
                )
                if named:
                    try:
                        return ast.literal_eval(st.value)
                    except ValueError:
                        pass
    return _Stub(key)


def _server_args_namespace(package: str) -> dict:
    """``sglang/srt/server_args.py`` run as a module whose third-party imports are stubs: its
    constants, functions and the ``ServerArgs`` dataclass with every field's ``Arg``."""
    import ast
    import types

    srt = os.path.join(package, "srt")
    groups = os.path.join(srt, "arg_groups")
    real = {
        "arg_utils": _load(os.path.join(groups, "arg_utils.py"), "_standin_sglang.arg_utils"),
        "argparse_actions": _load(
            os.path.join(groups, "argparse_actions.py"), "_standin_sglang.argparse_actions"
        ),
    }
    path = os.path.join(srt, "server_args.py")
    tree = _source(path)
    mod = types.ModuleType("_standin_sglang.server_args")
    sys.modules[mod.__name__] = mod
    ns = mod.__dict__
    header = (
        "from __future__ import annotations\nimport argparse, dataclasses, glob, importlib, "
        "json, logging, math, os, random, socket, tempfile, uuid\n"
        "from functools import cached_property\nfrom typing import *\n"
    )
    exec(header, ns)  # noqa: S102 - the stdlib imports server_args.py makes
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                key = (alias.asname or alias.name).split(".")[0]
                source = getattr(node, "module", None) or ""
                owner = real.get(source.rsplit(".", 1)[-1])
                if owner is not None:
                    ns[key] = getattr(owner, alias.name)
                elif key not in ns and alias.name.isupper():  # a constant: read it
                    ns[key] = _constant(package, node, alias.name, key)
                elif key not in ns:
                    ns[key] = _Stub(key)
    registries = (
        ("ReasoningParser", "DetectorMap", ("parser", "reasoning_parser.py")),
        ("FunctionCallParser", "ToolCallParserEnum", ("function_call", "function_call_parser.py")),
    )
    for cls, attr, where in registries:
        ns[cls] = _Stub(cls, (), {attr: _dict_keys(os.path.join(srt, *where), cls, attr)})
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.ClassDef) and node.name != "ServerArgs":
            continue
        code = compile(ast.Module(body=[node], type_ignores=[]), path, "exec")
        try:
            exec(code, ns)  # noqa: S102 - sglang's own module-level code
        except Exception:  # noqa: BLE001 - a value the parser does not need: a stub
            if isinstance(node, ast.ClassDef):
                raise
            for target in getattr(node, "targets", [getattr(node, "target", None)]):
                if isinstance(target, ast.Name):
                    ns[target.id] = _Stub(target.id)
    return ns


def image_package() -> str | None:
    """The sglang package this file was installed into (the replica: the release's own tree
    at ``/sgl-workspace/sglang/python/sglang``, this file as its ``launch_server.py``)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return here if os.path.isfile(os.path.join(here, "srt", "server_args.py")) else None


class Launch:
    """The launch parsed as the image's own sglang parses it (``package``), or by
    :func:`build_parser` where no sglang tree is around (run from tests/standin/)."""

    def __init__(self, package: str | None) -> None:
        self.package = package
        self.server_args = None
        if package is None:
            self.parser = build_parser()
            return
        ns = _server_args_namespace(package)
        self.server_args = ns["ServerArgs"]
        # configs/model_config.py:86-115: is_deepseek_dsa (an architecture with an index_topk)
        self.is_dsa = _functions(
            os.path.join(package, "srt", "configs", "model_config.py"),
            ("_hf_arch", "_hf_attr", "is_deepseek_dsa"),
        )["is_deepseek_dsa"]
        self.spec_hook = _load(
            os.path.join(package, "srt", "arg_groups", "speculative_hook.py"),
            "_standin_sglang.speculative_hook",
        )
        # server_args.py prepare_server_args: the parser ServerArgs.add_cli_args builds
        self.parser = argparse.ArgumentParser(prog="launch_server.py")
        try:
            self.server_args.add_cli_args(self.parser)
        finally:  # the tree's modules were registered for typing.get_type_hints only
            for name in [m for m in sys.modules if m.startswith("_standin_sglang.")]:
                del sys.modules[name]

    def parse(self, argv: list[str] | None) -> argparse.Namespace:
        """The flags (argparse's own refusal, exit 2, for a flag or value upstream refuses),
        then the ``__post_init__`` rules the stand-in's behaviour depends on."""
        args = self.parser.parse_args(argv)
        if self.server_args is None:
            return resolve_speculative(args, None)
        _as_fields(args, self.server_args)
        resolve_speculative(args, self.spec_hook)
        if self.is_dsa(_config_json(args.model_path)):
            # server_args.py:3403-3429, the image's own method: auto -> bfloat16 below SM10
            # (gfx950 reports major 9), anything but bfloat16/fp8_e4m3 an AssertionError
            major = int(os.environ.get("STANDIN_DEVICE_MAJOR", "9"))
            try:
                self.server_args._set_default_dsa_kv_cache_dtype(args, major, args.quantization)
            except ImportError as exc:  # a release whose rule imports more of sglang
                log(f"the tree's DSA KV-cache rule needs more than the stand-in has: {exc}")
        return args


def _as_fields(args: argparse.Namespace, server_args) -> None:
    """``ServerArgs.from_cli_args`` (``server_args.py:6499-6506``): the dataclass's fields, the
    ones without a flag at their defaults, nothing else (``--config`` and the deprecated
    flags' destinations go)."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(server_args)}
    for name in [n for n in vars(args) if n not in fields]:
        delattr(args, name)
    for name, field in fields.items():
        if hasattr(args, name):
            continue
        if field.default is not dataclasses.MISSING:
            setattr(args, name, field.default)
        elif field.default_factory is not dataclasses.MISSING:
            setattr(args, name, field.default_factory())
        else:
            setattr(args, name, None)


def resolve_speculative(args: argparse.Namespace, hook) -> argparse.Namespace:
    """``NEXTN`` -> ``EAGLE`` (``arg_groups/speculative_hook.py:42-49``, the image's own
    ``_resolve_speculative_algorithm_alias`` where there is one); with top-k 1 the draft tokens
    are steps + 1 (``speculative_hook.py:383-390``); at most 48 running requests unless given
    (``:270-274``)."""
    algo = args.speculative_algorithm
    if algo is not None:
        algo = str(algo).upper()
        if hook is not None:
            algo = hook._resolve_speculative_algorithm_alias(algo, None)
        elif algo == "NEXTN":
            algo = "EAGLE"
        args.speculative_algorithm = algo
    steps, topk = args.speculative_num_steps, args.speculative_eagle_topk
    if algo == "EAGLE" and topk == 1 and steps is not None:
        args.speculative_num_draft_tokens = steps + 1
    if algo in ("EAGLE", "EAGLE3", "STANDALONE") and args.max_running_requests is None:
        args.max_running_requests = 48  # speculative_hook.py:270-274 (_handle_eagle_family)
    return args


def _functions(path: str, names: tuple[str, ...]) -> dict:
    """Pure module-level functions of the tree (``names``), run in a namespace of their own."""
    import ast

    parts = [n for n in _source(path).body if isinstance(n, ast.FunctionDef) and n.name in names]
    ns: dict = {}
    exec("from typing import *", ns)  # noqa: S102 - their annotations
    exec(compile(ast.Module(body=parts, type_ignores=[]), path, "exec"), ns)  # noqa: S102
    return ns


def _config_json(model_path: str) -> dict:
    try:
        with open(os.path.join(model_path, "config.json")) as fh:
            return dict(json.load(fh))
    except (OSError, ValueError):
        return {}


def _token_id(word: str) -> int:
    return int(hashlib.sha256(word.encode()).hexdigest()[:6], 16) % 150000


class PrefixCache:
    """An LRU over token blocks: a block is named by the hash of every token up to its end.

    ``match`` when the request is scheduled, ``insert`` after its prefill ran (module doc)."""

    def __init__(self, block: int, capacity_tokens: int, enabled: bool = True) -> None:
        self.block = max(1, block)
        self.capacity = max(1, capacity_tokens // self.block)
        self.enabled = enabled
        self.blocks: collections.OrderedDict[str, None] = collections.OrderedDict()

    def _keys(self, ids: list[int]) -> list[str]:
        h = hashlib.sha256()
        keys = []
        for end in range(self.block, len(ids) + 1, self.block):
            h.update(repr(ids[end - self.block : end]).encode())
            keys.append(h.copy().hexdigest())
        return keys

    def match(self, ids: list[int]) -> int:
        """Tokens of ``ids`` the cache holds now (whole blocks from the start)."""
        if not self.enabled:
            return 0
        hit = 0
        for key in self._keys(ids):
            if key not in self.blocks:
                break
            self.blocks.move_to_end(key)
            hit += 1
        # sglang always computes at least the last prompt token.
        return min(hit * self.block, max(len(ids) - 1, 0))

    def insert(self, ids: list[int]) -> None:
        """Cache ``ids`` (its prefill has run)."""
        if not self.enabled:
            return
        for key in self._keys(ids):
            self.blocks[key] = None
            self.blocks.move_to_end(key)
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)

    def flush(self) -> None:
        self.blocks.clear()


class FifoGate:
    """At most ``slots`` holders at once, the waiters let in first come first served."""

    def __init__(self, slots: int) -> None:
        self.free = max(1, slots)
        self.queue: collections.deque[object] = collections.deque()
        self.cv = threading.Condition()

    def acquire(self) -> None:
        me = object()
        with self.cv:
            self.queue.append(me)
            while self.queue[0] is not me or self.free == 0:
                self.cv.wait()
            self.queue.popleft()
            self.free -= 1
            self.cv.notify_all()

    def release(self) -> None:
        with self.cv:
            self.free += 1
            self.cv.notify_all()


class Rank:
    """One DP rank: its scheduler's slots, prefill queue, radix cache and decode statistics
    (``metrics_reporter.py``: per-interval and lifetime counters)."""

    def __init__(self, index: int, args: argparse.Namespace, env: dict) -> None:
        self.index = index
        self.cache = PrefixCache(
            int(env.get("STANDIN_BLOCK_TOKENS", "16")),
            int(env.get("STANDIN_CACHE_TOKENS", "2000000")),
            enabled=not args.disable_radix_cache,
        )
        self.slots = FifoGate(args.max_running_requests or 16)
        self.prefill = FifoGate(1)  # one prefill batch runs at a time, in arrival order
        # requests waiting for or running their prefill: the running ones' decode waits for
        # them (Engine._decode_start)
        self.prefilling = 0
        # when the decode step in flight on this rank ends (monotonic): a prefill starts no
        # earlier (Engine._prefill)
        self.step_end = 0.0
        self.idle = threading.Condition()
        self.running = 0
        self.waiting = 0
        self.cache_hit_rate = 0.0  # the gauge, set per prefill
        self.reset_metrics()
        self.last_gen_throughput = 0.0
        self.last_decode_stats_tic = time.perf_counter()

    def reset_metrics(self) -> None:
        """``MetricsReporter.reset_metrics`` (metrics_reporter.py:487-493), run by
        ``Scheduler.flush_cache`` (scheduler.py:3640-3649)."""
        self.forward_ct_decode = 0
        self.num_generated_tokens = 0
        self.spec_num_accept_tokens = 0
        self.spec_num_forward_ct = 0
        self.spec_total_num_accept_tokens = 0
        self.spec_total_num_forward_ct = 0


class CostModel:
    """Time per uncached prefill token and per decode token, from the environment."""

    def __init__(self, env: dict, tok_s: float) -> None:
        self.prefill_s = float(env.get("STANDIN_PREFILL_US_PER_TOKEN", "20")) * 1e-6
        self.tok_s = tok_s
        self.growth = float(env.get("STANDIN_DECODE_BATCH_GROWTH", "0.05"))
        noise = float(env.get("STANDIN_NOISE", "0"))
        seed = env.get("STANDIN_NOISE_SEED")
        draw = random.Random(seed if seed is not None else os.urandom(8)).uniform(-noise, noise)
        self.factor = float(env.get("STANDIN_SLOWDOWN", "1.0")) * (1.0 + draw)
        self.jitter = float(env.get("STANDIN_JITTER", "0"))
        self.requests = random.Random(f"{seed}-jitter" if seed is not None else os.urandom(8))

    def request_factor(self) -> float:
        """One request's own cost factor, uniform in ``1 +- STANDIN_JITTER``."""
        return 1.0 + self.requests.uniform(-self.jitter, self.jitter) if self.jitter else 1.0

    def prefill(self, uncached: int, request: float = 1.0) -> float:
        return uncached * self.prefill_s * self.factor * request

    def decode(self, tokens: int, running: int, request: float = 1.0) -> float:
        growth = 1.0 + self.growth * max(running - 1, 0)
        return tokens / self.tok_s * self.factor * request * growth


def _sleep_until(deadline: float) -> None:
    """Sleep until ``deadline`` (``time.monotonic()``); at once when it has passed."""
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)


def load_tokenizer(path: str):
    """The model's tokenizer through ``transformers`` (as sglang loads it), or None."""
    if not any(
        os.path.isfile(os.path.join(path, f))
        for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json")
    ):
        return None
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    return AutoTokenizer.from_pretrained(path)


# Text that only a prompt rendered through a chat template carries (the role markers of the
# templates the scenarios' models ship: GLM's "[gMASK]<sop><|user|>", ChatML, Llama 3, Mistral,
# DeepSeek, Gemma). A tokenizer with a template adds its own rendered prefix (Engine.templated).
TEMPLATE_MARKERS = (
    "[gMASK]<sop>",
    "<|user|>",
    "<|im_start|>",
    "<|start_header_id|>",
    "[INST]",
    "<\uff5cUser\uff5c>",
    "<start_of_turn>",
)


class Served:
    """One request being served: what its ``meta_info`` reports, as it goes."""

    def __init__(self, words: list[str], prompt_tokens: int, started: float, cached: int) -> None:
        self.rid = uuid.uuid4().hex
        self.words = words
        self.prompt_tokens = prompt_tokens
        self.started = started
        self.cached = cached
        self.verify = 0
        self.correct = 0
        self.histogram: list[int] = []


class Engine:
    """The fake model: deterministic words, arithmetic, timing and speculative statistics."""

    def __init__(
        self, args: argparse.Namespace, faults: frozenset[str], env: dict | None = None
    ) -> None:
        env = dict(os.environ if env is None else env)
        self.args = args
        self.faults = faults
        self.spec = args.speculative_algorithm is not None
        steps = args.speculative_num_steps or 3
        # Draft tokens per verify step; a verify step accepts 1 (bonus) .. draft_tokens tokens.
        self.draft_tokens = args.speculative_num_draft_tokens or steps + 1
        default_speed = 4.0 if "slow" in faults else 400.0
        self.tok_s = float(env.get("STANDIN_DECODE_TOK_S", default_speed))
        # MTP acceptance by the prompt's form: the draft head was trained on chat-templated
        # text, raw text accepts less (module doc).
        self.accept_templated = self._accept(env, "STANDIN_ACCEPT_LENGTH", "3.4")
        self.accept_raw = self._accept(env, "STANDIN_RAW_ACCEPT_LENGTH", "2.4")
        self.context_len = args.context_length or DEFAULT_CONTEXT_LEN
        self.lock = threading.Lock()
        self.status = "Starting"  # http_server.py ServerStatus: Starting -> Up (-> UnHealthy)
        # tokenizer_manager.py:1836 last_receive_tstamp: when the scheduler last sent anything
        self.last_receive = 0.0
        # http_server.py:182 and environ.py:716 (EnvBool: true/1/yes/y, false/0/no/n)
        self.health_timeout = int(env.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
        self.health_generation = env.get(
            "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true"
        ).lower() not in ("false", "0", "no", "n")
        self.aiter: AiterFusedMoE | None = None
        self.moe: list[tuple[int, int, int, int]] = []
        self.cost = CostModel(env, self.tok_s)
        self.ranks = [Rank(i, args, env) for i in range(max(1, args.dp_size or 1))]
        self.round_robin = 0
        self.tokenizer = None
        self.markers: tuple[str, ...] = TEMPLATE_MARKERS
        # metrics_collector.py: counters bumped when a request finishes; the gauge per prefill.
        self.prompt_tokens_total = 0
        self.cached_tokens_total = 0
        self.generation_tokens_total = 0
        self.num_requests_total = 0

    def _accept(self, env: dict, name: str, default: str) -> float:
        value = 1.3 if "low-accept" in self.faults else float(env.get(name, default))
        return min(max(value, 1.0), float(self.draft_tokens)) if self.spec else 1.0

    @property
    def running(self) -> int:
        return sum(r.running for r in self.ranks)

    @property
    def waiting(self) -> int:
        return sum(r.waiting for r in self.ranks)

    def set_tokenizer(self, tokenizer) -> None:
        """Tokenize with the model's tokenizer; its chat template's prefix marks templated text."""
        self.tokenizer = tokenizer
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            return
        try:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": "\x00"}], add_generation_prompt=True, tokenize=False
            )
        except Exception:  # noqa: BLE001 - a template that needs more than one message
            return
        head = text.split("\x00", 1)[0].replace(tokenizer.bos_token or "\x01", "").strip()
        if head:
            self.markers = (*TEMPLATE_MARKERS, head)

    def templated(self, prompt: str) -> bool:
        """Whether ``prompt`` was rendered through a chat template."""
        return any(m in prompt for m in self.markers)

    def tokenize(self, prompt: str) -> list[int]:
        if self.tokenizer is not None:
            return list(self.tokenizer.encode(prompt))
        return [_token_id(w) for w in prompt.split()] or [0]

    def flush_cache(self) -> bool:
        """Empty every rank's prefix cache and reset its decode statistics, only when no request
        runs or waits (``Scheduler.flush_cache``, scheduler.py:3640-3649)."""
        with self.lock:
            if self.running or self.waiting:
                return False
            for rank in self.ranks:
                rank.cache.flush()
                rank.reset_metrics()
        for rank in self.ranks:
            log("Cache flushed successfully!", self._prefix(rank))
        return True

    def _prefix(self, rank: Rank) -> str:
        """sglang's log prefix of a scheduler (``DP<i>`` only with DP)."""
        return f" DP{rank.index} TP0" if len(self.ranks) > 1 else " TP0"

    def metrics(self, model_name: str) -> str:
        """Prometheus text exposition of the engine's own counters: the tokenizer's, labelled
        ``engine_type``/``model_name``; the gauges per scheduler (DP rank), labelled as
        ``metrics_collector.py:1055-1066`` labels them (``dp_rank`` only with DP)."""
        label = f'engine_type="unified",model_name="{model_name}"'
        counters = (
            ("prompt_tokens", "Number of prefill tokens processed.", ""),
            ("generation_tokens", "Number of generation tokens processed.", ""),
            (
                "cached_tokens",
                "Number of cached prompt tokens by source (device/host/storage).",
                'cache_source="device",',
            ),
            ("num_requests", "Number of requests processed.", ""),
        )
        gauges = (
            ("cache_hit_rate", "The prefix cache hit rate.", "cache_hit_rate"),
            ("num_running_reqs", "The number of running requests.", "running"),
            ("num_queue_reqs", "The number of requests in the waiting queue.", "waiting"),
        )
        out = []
        with self.lock:
            for base, doc, extra in counters:
                value = getattr(self, f"{base}_total")
                out += [f"# HELP sglang:{base} {doc}", f"# TYPE sglang:{base} counter"]
                out.append(f"sglang:{base}_total{{{extra}{label}}} {float(value)}")
            for base, doc, attr in gauges:
                out += [f"# HELP sglang:{base} {doc}", f"# TYPE sglang:{base} gauge"]
                for rank in self.ranks:
                    dp = f'dp_rank="{rank.index}",' if len(self.ranks) > 1 else ""
                    ranks = 'moe_ep_rank="0",pp_rank="0",tp_rank="0"'
                    value = getattr(rank, attr)
                    out.append(f"sglang:{base}{{{dp}{label},{ranks}}} {float(value)}")
        return "\n".join(out) + "\n"

    def aiter_lookup(self, token_num: int) -> None:
        """Print aiter's lookup line for one forward of ``token_num`` tokens through every handed
        MoE shape (once per key)."""
        if self.aiter is None:
            return
        for shape in self.moe:
            with self.lock:
                line = self.aiter.lookup(token_num, *shape)
            if line is not None:
                raw(line)

    def answer(self, prompt: str) -> str | None:
        """The answer to the last simple arithmetic question in ``prompt``, if there is one."""
        found = re.findall(r"(-?\d+)\s*([-+*/x\u00d7])\s*(-?\d+)", prompt)
        if not found:
            return None
        a, op, b = found[-1]
        x, y = int(a), int(b)
        if op == "+":
            value = x + y
        elif op == "-":
            value = x - y
        elif op in ("*", "x", "\u00d7"):
            value = x * y
        else:
            value = x // y if y else 0
        if "wrong" in self.faults:
            value += 1
        return str(value)

    def words(self, prompt: str, n: int, ignore_eos: bool) -> tuple[list[str], str]:
        """The output words for ``prompt`` and the finish reason type."""
        if "empty" in self.faults:
            return [], "stop"
        answer = self.answer(prompt)
        seed = int(hashlib.sha256(prompt.encode()).hexdigest()[:8], 16)
        filler = [WORDS[(seed + i) % len(WORDS)] for i in range(n + 8)]
        out = ["The", "answer", "is", f"{answer}."] if answer is not None else []
        natural = len(out) if answer is not None else 16
        if ignore_eos or natural >= n:
            return (out + filler)[:n], "length"
        return (out + filler)[:natural], "stop"

    def _out(self, req: Served, done: int, finish: str | None) -> dict:
        """``/generate``'s answer after ``done`` words (``finish``: the request finished)."""
        words, verify, correct, histogram = req.words[:done], req.verify, req.correct, req.histogram
        meta: dict = {
            "id": req.rid,
            "finish_reason": None
            if finish is None
            else (
                {"type": "length", "length": done}
                if finish == "length"
                else {"type": "stop", "matched": 151336}
            ),
            "prompt_tokens": req.prompt_tokens,
            "weight_version": WEIGHT_VERSION,
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": done,
            "cached_tokens": req.cached,
        }
        if finish is not None:
            meta["e2e_latency"] = time.monotonic() - req.started
            proposed = verify * (self.draft_tokens - 1)
            if self.spec and verify > 0 and proposed > 0:
                # tokenizer_manager.py:2319-2353, in its order.
                meta["spec_accept_rate"] = correct / proposed
                meta["spec_accept_length"] = done / verify
                meta["spec_num_correct_drafts"] = correct
                meta["spec_num_proposed_drafts"] = proposed
                meta["spec_verify_ct"] = verify
                meta["spec_accepted_drafts"] = correct
                meta["spec_proposed_drafts"] = proposed
                if histogram:
                    meta["spec_correct_drafts_histogram"] = list(histogram)
                    meta["spec_accept_histogram"] = list(histogram)
        return {
            "text": " ".join(words),
            "output_ids": [_token_id(w) for w in words],
            "meta_info": meta,
        }

    def _decode_batch(self, rank: Rank, accepted: int) -> None:
        """Count one decode forward pass of batch size 1 (metrics_reporter.py:347-349, 673)."""
        with self.lock:
            rank.forward_ct_decode += 1
            rank.num_generated_tokens += accepted
            if self.spec:
                rank.spec_num_accept_tokens += accepted
                rank.spec_num_forward_ct += 1
            if rank.forward_ct_decode % self.args.decode_log_interval != 0:
                return
            now = time.perf_counter()
            gap = max(now - rank.last_decode_stats_tic, 1e-9)
            rank.last_decode_stats_tic = now
            rank.last_gen_throughput = rank.num_generated_tokens / gap
            rank.num_generated_tokens = 0
            running = max(rank.running, 1)
            msg = f"Decode batch, #running-req: {running}, #token: 0, token usage: 0.00, "
            if self.spec and rank.spec_num_forward_ct:
                length = rank.spec_num_accept_tokens / rank.spec_num_forward_ct
                correct = rank.spec_num_accept_tokens - rank.spec_num_forward_ct
                rate = correct / (rank.spec_num_forward_ct * (self.draft_tokens - 1) or 1)
                rank.spec_total_num_accept_tokens += rank.spec_num_accept_tokens
                rank.spec_total_num_forward_ct += rank.spec_num_forward_ct
                rank.spec_num_accept_tokens = rank.spec_num_forward_ct = 0
                msg += f"accept len: {length:.2f}, accept rate: {rate:.2f}, "
            msg += (
                f"cuda graph: True, gen throughput (token/s): {rank.last_gen_throughput:.2f}, "
                "#queue-req: 0"
            )
        log(msg, self._prefix(rank))

    def generate(
        self,
        prompt: str,
        params: dict,
        emit: Callable[[dict], None] | None = None,
        internal: bool = False,
        templated: bool | None = None,
        log_metrics: bool = True,
    ) -> dict:
        """One completion as ``/generate`` returns it; ``emit`` gets each streamed chunk.

        ``templated``: the prompt went through the chat template (``/v1/chat/completions``);
        None: judged from the text. Requests go to the DP ranks in turn (round robin,
        ``data_parallel_controller.py:604-616``), wait for a running slot first come first
        served, then for their rank's prefill. ``log_metrics`` False: a health check's
        request (``http_server.py:590-595``), served as any other but not counted."""
        if "crash-later" in self.faults and not internal and log_metrics:
            log("Scheduler hit an exception: Traceback (most recent call last):", " TP0")
            raw(
                '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", '
                "line 4227, in run_scheduler_process"
            )
            raw("torch.AcceleratorError: HIP error: an illegal memory access was encountered")
            # the running phase's SIGQUIT handler (tokenizer_manager.py:3094-3097), called by
            # loop.add_signal_handler with no arguments (:1816-1818)
            log("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
            os._exit(1)
        started = time.monotonic()
        form = self.templated(prompt) if templated is None else templated
        accept = self.accept_templated if form else self.accept_raw
        if internal:
            return self._generate(self.ranks[0], prompt, params, emit, started, accept, False)
        with self.lock:
            rank = self.ranks[self.round_robin]
            self.round_robin = (self.round_robin + 1) % len(self.ranks)
            rank.waiting += 1
        rank.slots.acquire()
        try:
            with self.lock:
                rank.waiting -= 1
                rank.running += 1
            return self._generate(rank, prompt, params, emit, started, accept, True, log_metrics)
        finally:
            with self.lock:
                rank.running -= 1
            rank.slots.release()

    def _prefill(
        self, rank: Rank, ids: list[int], counted: bool, jitter: float
    ) -> tuple[int, float]:
        """(cached tokens, the prefill's end on the monotonic clock).

        The cache is matched when the request is scheduled and the prompt inserted only after
        its prefill ran, one prefill at a time in arrival order (module doc): a request that
        arrives while another with its prefix is still prefilling gets no hit. A prefill
        starts only once the decode step in flight on its rank has ended: 0.5.14's scheduler
        loop receives requests, picks the next batch and runs it, in that order
        (``scheduler.py:1505-1524``, ``event_loop_normal``; the overlap loop alike), so a
        request that arrives during a forward pass waits for it."""
        if not counted:
            clock = time.monotonic() + max(0.001, self.cost.prefill(len(ids), jitter))
            _sleep_until(clock)
            return 0, clock
        with self.lock:
            cached = rank.cache.match(ids)
            rank.cache_hit_rate = cached / len(ids) if ids else 0.0
        with rank.idle:
            rank.prefilling += 1
        rank.prefill.acquire()
        try:
            # The costs are a schedule, not pauses: each step ends at its time, so the Python
            # work between steps (tokens, events, a loaded CPU) is absorbed and the figures
            # are the cost model's; a step that cannot keep up ends late.
            with self.lock:
                start = max(time.monotonic(), rank.step_end)
            clock = start + max(0.001, self.cost.prefill(len(ids) - cached, jitter))
            _sleep_until(clock)
            with self.lock:
                rank.cache.insert(ids)
        finally:
            rank.prefill.release()
            with rank.idle:
                rank.prefilling -= 1
                rank.idle.notify_all()
        return cached, clock

    def _decode_start(self, rank: Rank, clock: float) -> float:
        """When a running request's next decode step starts: at ``clock`` (its last step's
        end), or once no prefill waits or runs on its rank. 0.5.14's scheduler runs a new
        prefill batch instead of the running decode batch (``scheduler.py:2655-2665``,
        ``get_next_batch_to_run``; mixing them needs ``--enable-mixed-chunk``, off by default,
        ``server_args.py:788-791``), so every decode on the rank stalls while prompts prefill."""
        with rank.idle:
            if not rank.prefilling:
                return clock
            while rank.prefilling:
                rank.idle.wait()
        return max(clock, time.monotonic())

    def health(self, path: str) -> int:
        """``/health`` and ``/health_generate`` (``http_server.py:561-634``): 503 while
        ``Starting``; ``/health`` 200 at once only with ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION``
        off; else a 1-token request through the scheduler like any other (not counted), and
        200 once the scheduler sent anything after the check began, looked at after each 1 s
        sleep (``:615-620``); 503 and ``UnHealthy`` after ``SGLANG_HEALTH_CHECK_TIMEOUT`` s."""
        if self.status == "Starting":
            return 503
        if path == "/health" and not self.health_generation:
            return 200
        tic = time.time()
        params = {"max_new_tokens": 1, "temperature": 0.0}
        threading.Thread(
            target=self.generate, args=("0", params), kwargs={"log_metrics": False}, daemon=True
        ).start()
        while time.time() < tic + self.health_timeout:
            time.sleep(1)
            if self.last_receive > tic:
                self.status = "Up"
                return 200
        log(
            "Health check failed. Server couldn't get a response from detokenizer for last "
            f"{self.health_timeout} seconds. tic start time: "
            f"{time.strftime('%H:%M:%S', time.localtime(tic))}. last_heartbeat time: "
            f"{time.strftime('%H:%M:%S', time.localtime(self.last_receive))}"
        )
        self.status = "UnHealthy"
        return 503

    def _steps(
        self, rank: Rank, total: int, accept: float, histogram: list[int]
    ) -> Iterator[tuple[int, int, int]]:
        """Each step's (tokens, verify steps so far, correct drafts so far); the first is the
        prefill's token. ``histogram`` counts verify steps by correct drafts + 1
        (``schedule_batch.py:1077-1087``)."""
        done, verify, correct, carry = 0, 0, 0, 0.0
        while done < total:
            if done == 0:
                step = 1  # prefill's token
            else:
                step = 1
                if self.spec:
                    carry += accept
                    step = min(max(1, int(carry)), self.draft_tokens)
                    carry -= step
                    verify += 1
                    correct += step - 1
                    histogram += [0] * (step - len(histogram))
                    histogram[step - 1] += 1
                # A verify step runs the target on every draft token (decode without MTP: 1).
                self.aiter_lookup(self.draft_tokens if self.spec else 1)
                self._decode_batch(rank, step)
            step = min(step, total - done)
            done += step
            yield step, verify, correct

    def _generate(
        self,
        rank: Rank,
        prompt: str,
        params: dict,
        emit: Callable[[dict], None] | None,
        started: float,
        accept: float,
        counted: bool,
        log_metrics: bool = True,
    ) -> dict:
        n = int(params.get("max_new_tokens", 128))  # sampling_params.py default
        words, finish = self.words(prompt, max(n, 0), bool(params.get("ignore_eos")))
        ids = self.tokenize(prompt)
        self.aiter_lookup(len(ids))  # the prefill's MoE forward
        jitter = self.cost.request_factor()
        cached, clock = self._prefill(rank, ids, counted, jitter)
        req = Served(words, len(ids), started, cached)
        done = 0
        for step, verify, correct in self._steps(rank, len(words), accept, req.histogram):
            req.verify, req.correct = verify, correct
            if done:
                clock = self._decode_start(rank, clock)
            clock += self.cost.decode(step, rank.running, jitter)
            if counted:
                with self.lock:  # this step is in flight until clock: a prefill waits for it
                    rank.step_end = max(rank.step_end, clock)
            _sleep_until(clock)
            done += step
            self.last_receive = time.time()
            if emit is not None:
                emit(self._out(req, done, finish if done >= len(words) else None))
        # the finished request's output is sent either way (an empty text still comes back)
        self.last_receive = time.time()
        out = self._out(req, len(words), finish)
        if counted and log_metrics:
            with self.lock:
                self.prompt_tokens_total += len(ids)
                self.cached_tokens_total += cached
                self.generation_tokens_total += len(words)
                self.num_requests_total += 1
        if emit is not None and not words:
            emit(out)
        return out

    def internal_state(self, rank: Rank) -> dict:
        """One DP rank's state as ``Scheduler.get_internal_state`` builds it (scheduler.py:3670)."""
        state: dict = {k: v for k, v in vars(self.args).items()}
        with self.lock:
            state["last_gen_throughput"] = rank.last_gen_throughput
            state["memory_usage"] = {
                "weight": 0.0,
                "kvcache": 0.0,
                "token_capacity": 0,
                "graph": 0.0,
            }
            state["effective_max_running_requests_per_dp"] = self.args.max_running_requests or 1
            if self.spec and rank.spec_total_num_forward_ct > 0:
                state["avg_spec_accept_length"] = (
                    rank.spec_total_num_accept_tokens / rank.spec_total_num_forward_ct
                )
        return state

    def internal_states(self) -> list[dict]:
        """One state per DP rank (``tokenizer_control_mixin.py:788-795`` gathers every rank's)."""
        return [self.internal_state(rank) for rank in self.ranks]


def make_handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    """The request handler class bound to one engine."""
    args = engine.args
    bound = {
        "engine": engine,
        "model_name": args.served_model_name or args.model_path,
        "model_config": _model_config(args.model_path),
    }
    return type("BoundHandler", (Handler,), bound)


class Handler(BaseHTTPRequestHandler):
    """sglang's HTTP endpoints over one :class:`Engine` (``make_handler`` binds it)."""

    engine: Engine
    model_name: str
    model_config: tuple[str, str | None]

    server_version = "standin-sglang"  # HTTP/1.0, one request per connection (uvicorn: 1.1)

    def log_message(self, format: str, *a) -> None:  # noqa: A002 - stdlib's name
        log(f'{self.client_address[0]} - "{self.requestline}" {a[1] if len(a) > 1 else ""}')

    def _empty(self, code: int) -> None:
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _json(self, code: int, body: object) -> None:
        data = json.dumps(body, default=str).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse_start(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _sse(self, payload: object) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        raw_body = self.rfile.read(length) if length else b"{}"
        return json.loads(raw_body or b"{}")

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0]
        routes = {
            "/health": self._health,
            "/health_generate": self._health,
            "/server_info": self._server_info,
            "/get_server_info": self._server_info,
            "/flush_cache": self._flush_cache,
            "/model_info": self._model_info,
            "/get_model_info": self._model_info,
            "/v1/models": self._models,
        }
        if path == "/metrics" and self.engine.args.enable_metrics:
            self._metrics()
        elif path in routes:
            routes[path]()
        else:
            self._json(404, {"detail": "Not Found"})

    def _health(self) -> None:
        self._empty(self.engine.health(self.path.split("?", 1)[0]))

    def _server_info(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/server_info" and "old-api" in self.engine.faults:
            self._json(404, {"detail": "Not Found"})
            return
        if path == "/get_server_info":
            log(
                "Endpoint '/get_server_info' is deprecated and will be removed in a "
                "future version. Please use '/server_info' instead."
            )
        self._json(200, self.server_info())

    def _metrics(self) -> None:
        data = self.engine.metrics(self.model_name).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _model_info(self) -> None:
        if self.path.split("?", 1)[0] == "/get_model_info":  # http_server.py:638-645
            log(
                "Endpoint '/get_model_info' is deprecated and will be removed in a future "
                "version. Please use '/model_info' instead."
            )
        args = self.engine.args
        arch, model_type = self.model_config
        self._json(
            200,
            {
                "model_path": args.model_path,
                "tokenizer_path": args.tokenizer_path or args.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": WEIGHT_VERSION,
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": model_type,
                "architectures": [arch],
            },
        )

    def _models(self) -> None:
        model = {
            "id": self.model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang",
            "root": self.model_name,
            "parent": None,
            "max_model_len": self.engine.context_len,
        }
        self._json(200, {"object": "list", "data": [model]})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0]
        try:
            body = self._body()
        except (ValueError, UnicodeDecodeError) as exc:
            self._json(400, {"error": {"message": f"invalid JSON: {exc}"}})
            return
        if path == "/generate":
            self._generate(body)
        elif path == "/v1/chat/completions":
            self._chat(body)
        elif path == "/flush_cache":
            self._flush_cache()
        else:
            self._json(404, {"detail": "Not Found"})

    def _flush_cache(self) -> None:
        ok = self.engine.flush_cache()
        data = (
            b"Cache flushed.\nPlease check backend logs for more details. (When there are "
            b"running or waiting requests, the operation will not be performed.)\n"
            if ok
            else b"Flush cache failed: requests are running or waiting.\n"
        )
        self.send_response(200 if ok else 400)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _generate(self, body: dict) -> None:
        text = body.get("text")
        params = body.get("sampling_params") or {}
        if not isinstance(text, str):
            # A difference from sglang (batches, input_ids): see the module docstring.
            self._json(400, {"error": {"message": "the stand-in takes one string 'text'"}})
            return
        if not body.get("stream"):
            self._json(200, self.engine.generate(text, params))
            return
        self._sse_start()
        self.engine.generate(text, params, self._sse)
        self._sse("[DONE]")

    def _chat(self, body: dict) -> None:
        messages = body.get("messages") or []
        if not messages:
            self._json(400, {"error": {"message": "messages required"}})
            return
        prompt = "\n".join(str(m.get("content", "")) for m in messages)
        params = {"max_new_tokens": body.get("max_completion_tokens") or body.get("max_tokens")}
        if params["max_new_tokens"] is None:
            params = {}
        params["ignore_eos"] = bool(body.get("ignore_eos"))  # protocol.py:725
        model = body.get("model") or self.model_name
        created = int(time.time())
        if body.get("stream") and body.get("return_meta_info"):
            # serving_chat.py:512-516, answered by serving_base.py:114-119
            message = (
                "return_meta_info is not supported with streaming. "
                "Please set stream=false when using return_meta_info=true."
            )
            error = {"object": "error", "message": message, "type": "BadRequest"}
            self._json(400, {**error, "param": None, "code": 400})
            return
        if body.get("stream"):
            self._chat_stream(body, prompt, params, model, created)
            return
        result = self.engine.generate(prompt, params, templated=True)
        meta = result["meta_info"]
        finish = meta["finish_reason"] or {}
        # protocol.py:973 ChatCompletionResponseChoice.meta_info, serving_chat.py:1315-1317
        extra = {"meta_info": meta} if body.get("return_meta_info") else {}
        self._json(
            200,
            {
                "id": meta["id"],
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": result["text"],
                            "reasoning_content": None,
                            "tool_calls": None,
                        },
                        "logprobs": None,
                        "finish_reason": finish.get("type"),
                        "matched_stop": finish.get("matched"),
                        **extra,
                    }
                ],
                "usage": _usage(meta),
                "metadata": {"weight_version": meta["weight_version"]},
            },
        )

    def _chat_stream(self, body: dict, prompt: str, params: dict, model: str, created: int) -> None:
        self._sse_start()
        sent = {"text": "", "first": True, "meta": {}}

        def chunk(rid: str, delta: dict, finish: str | None = None, matched=None) -> dict:
            # sse_utils.py:13-46: reasoning_content always present, other None fields gone.
            return {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"reasoning_content": None, **delta},
                        "logprobs": None,
                        "finish_reason": finish,
                        "matched_stop": matched,
                    }
                ],
            }

        def emit(out: dict) -> None:
            meta = out["meta_info"]
            sent["meta"] = meta
            if sent["first"]:
                sent["first"] = False
                self._sse(chunk(meta["id"], {"role": "assistant", "content": ""}))
            delta = out["text"][len(sent["text"]) :]
            sent["text"] = out["text"]
            if delta:
                self._sse(chunk(meta["id"], {"content": delta}))

        self.engine.generate(prompt, params, emit, templated=True)
        meta = sent["meta"]
        finish = meta.get("finish_reason") or {}
        self._sse(chunk(meta["id"], {}, finish.get("type"), finish.get("matched")))
        if (body.get("stream_options") or {}).get("include_usage"):
            self._sse(
                {
                    "id": meta["id"],
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": _usage(meta),
                }
            )
        self._sse("[DONE]")

    def server_info(self) -> dict:
        """http_server.py:688-707: server args, scheduler info, internal states, version."""
        return {
            **dict(vars(self.engine.args)),
            "status": "ready",
            "max_total_num_tokens": 0,
            "max_req_input_len": self.engine.context_len - 1,
            "internal_states": self.engine.internal_states(),
            "version": sglang_version(),
            "kv_events": None,
        }


def _usage(meta: dict) -> dict:
    """protocol.py:196-202 UsageInfo, as usage_processor.py fills it."""
    return {
        "prompt_tokens": meta["prompt_tokens"],
        "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"],
        "completion_tokens": meta["completion_tokens"],
        "prompt_tokens_details": None,
        "reasoning_tokens": meta["reasoning_tokens"],
    }


def _model_config(model_path: str) -> tuple[str, str | None]:
    try:
        with open(os.path.join(model_path, "config.json")) as fh:
            config = json.load(fh)
    except (OSError, ValueError):
        return "?", None
    return (config.get("architectures") or ["?"])[0], config.get("model_type")


def _aiter_for(
    args: argparse.Namespace, env: dict
) -> tuple[AiterFusedMoE | None, list[tuple[int, int, int, int]]]:
    shapes = handed_shapes(env)
    root = aiter_root()
    if not shapes or root is None:
        return None, []
    return AiterFusedMoE(root, env), shapes


def crash_while_loading() -> None:
    """Die the way the unpatched MXFP4 MTP image does while loading the draft model (exit 1)."""
    time.sleep(float(os.environ.get("STANDIN_CRASH_AFTER", "0.3")))
    log("Load weight begin. avail mem=0.00 GB", " TP0")
    log("Scheduler hit an exception: Traceback (most recent call last):", " TP0")
    src = "/sgl-workspace/sglang/python/sglang/srt"
    for frame, code in (
        (
            f'{src}/model_loader/loader.py", line 799, in load_weights_and_postprocess',
            "model.load_weights(weights)",
        ),
        (f'{src}/models/deepseek_nextn.py", line 352, in load_weights', "weight_loader("),
        (
            f'{src}/layers/linear.py", line 724, in weight_loader',
            "assert param_data.shape == loaded_weight.shape",
        ),
    ):
        raw(f'  File "{frame}')
        raw(f"    {code}")
    raw("AssertionError")
    # the launch phase's SIGQUIT handler in the main process (entrypoints/engine.py:1301-1305)
    log("Received sigquit from a child process. It usually means the child failed.")
    sys.exit(1)


def parse_faults(value: str) -> frozenset[str]:
    """The faults named in a ``STANDIN_FAULT`` value (comma-separated)."""
    return frozenset(f.strip() for f in value.split(",") if f.strip())


def make_server(
    args: argparse.Namespace, faults: frozenset[str], env: dict | None = None
) -> ThreadingHTTPServer:
    """A listening, not yet warmed-up stand-in HTTP server; ``.engine`` is its fake model."""
    engine = Engine(args, faults, env)
    engine.aiter, engine.moe = _aiter_for(args, dict(os.environ if env is None else env))
    httpd = ThreadingHTTPServer((args.host, args.port), make_handler(engine))
    httpd.daemon_threads = True
    httpd.engine = engine  # type: ignore[attr-defined]
    return httpd


def warm_up(httpd: ThreadingHTTPServer, delay: float = 0.0) -> None:
    """The warmup request, then ready (http_server.py:2129-2145)."""
    engine: Engine = httpd.engine  # type: ignore[attr-defined]
    time.sleep(delay)
    if not engine.args.skip_server_warmup:
        engine.generate("The capital city of France is", {"max_new_tokens": 8}, internal=True)
    engine.status = "Up"
    log("The server is fired up and ready to roll!")


def parse_launch(argv: list[str] | None) -> argparse.Namespace | int:
    """The launch as the image's sglang parses it; an exit status where it refuses it."""
    try:
        launch = Launch(image_package())
        if (
            launch.server_args is not None
            and "--model-path" not in launch.parser._option_string_actions
        ):
            # 0.5.23: ServerArgs' fields come from arg_groups/fields/*, which the stubs hide
            raise LookupError("it has no --model-path")
    except Exception as exc:  # noqa: BLE001 - a release whose parser needs more of sglang
        log(f"cannot build the image's sglang parser ({type(exc).__name__}: {exc}); parsing")
        log("the launch with the stand-in's own parser (a subset: FIDELITY-5 M3)")
        launch = Launch(None)
    try:
        return launch.parse(argv)
    except (AssertionError, ValueError) as exc:
        # ServerArgs.__post_init__ refusing the launch: Python's traceback, exit 1
        print("Traceback (most recent call last):", file=sys.stderr)
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1


def pretend_to_load(args: argparse.Namespace, faults: frozenset[str]) -> None:
    """The scheduler's start: the faults that strike while loading, the lines it prints."""
    if threading.current_thread() is threading.main_thread():
        # PID 1 in a container ignores SIGTERM unless a handler is set; exit like a server would.
        signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    if "crash" in faults:
        crash_while_loading()
    log("Load weight begin. avail mem=0.00 GB", " TP0")
    for line in os.environ.get("STANDIN_LOG_LINES", "").splitlines():
        raw(line)
    if "aiter-untuned" in faults:
        for line in AITER_UNTUNED_LINES:
            raw(line)
    aiter, _ = _aiter_for(args, dict(os.environ))
    if aiter is not None and aiter.merge_line:
        raw(f"[aiter] {aiter.merge_line}")
    if "hang" in faults:
        while True:
            time.sleep(3600)
    time.sleep(float(os.environ.get("STANDIN_LOAD_SECONDS", "0.5")))
    log("Load weight end. elapsed=0.50 s, type=StandIn, avail mem=0.00 GB", " TP0")
    if "forbidden-log" in faults:
        raw(METADATA_FALLBACK_LINE)


def serve(
    args: argparse.Namespace,
    faults: frozenset[str],
    on_listening: Callable[[ThreadingHTTPServer], None] | None,
) -> int:
    """Listen (only now: http_server.py:2485-2500), warm up, serve until killed."""
    tokenizer = load_tokenizer(args.tokenizer_path or args.model_path)
    if tokenizer is not None:
        log(f"tokenizer {type(tokenizer).__name__} from {args.tokenizer_path or args.model_path}")
    httpd = make_server(args, faults)
    httpd.engine.set_tokenizer(tokenizer)  # type: ignore[attr-defined]
    log(f"Uvicorn running on http://{args.host}:{args.port} (stand-in: http.server)")
    warmup = threading.Thread(
        target=warm_up,
        args=(httpd, float(os.environ.get("STANDIN_WARMUP_SECONDS", "0.2"))),
        daemon=True,
    )
    warmup.start()
    if on_listening is not None:
        on_listening(httpd)
    try:
        httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0


def main(
    argv: list[str] | None = None,
    on_listening: Callable[[ThreadingHTTPServer], None] | None = None,
) -> int:
    """Parse sglang's flags, pretend to load, then serve until killed."""
    args = parse_launch(argv)
    if isinstance(args, int):
        return args
    faults = parse_faults(os.environ.get("STANDIN_FAULT", ""))
    unknown = faults - FAULTS
    if unknown:
        log(f"unknown STANDIN_FAULT {sorted(unknown)}; known: {sorted(FAULTS)}")
        return 2
    print("=" * 78, flush=True)
    log(BANNER)
    log(f"faults: {sorted(faults) or 'none'}")
    print("=" * 78, flush=True)
    log(f"server_args={json.dumps(vars(args), sort_keys=True, default=str)}")
    if not os.path.isfile(os.path.join(args.model_path, "config.json")):
        log(f"OSError: {args.model_path} is not a local folder with a config.json")
        return 1
    arch, _ = _model_config(args.model_path)
    log(f"model architecture {arch}; tp={args.tp_size}; speculative={args.speculative_algorithm}")
    pretend_to_load(args, faults)
    return serve(args, faults, on_listening)


if __name__ == "__main__":
    sys.exit(main())
