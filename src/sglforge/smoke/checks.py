"""The checks run against a ready server over HTTP on 127.0.0.1: it serves, answers arithmetic,
accepts speculative drafts at the expected length, decodes fast enough, and logs nothing
forbidden (and every required line).
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglforge.util import printable

if TYPE_CHECKING:
    pass
from sglforge.scenario.constants import HTTP_FAILED, Value
from sglforge.scenario.file import ForbiddenPattern, LogMatch, RequiredPattern, Scenario
from sglforge.smoke.report import Check


class HttpError(Exception):
    """A request to the server failed (connection, status, or an unreadable answer)."""


# A server's answer is read with a cap and an overall deadline (``timeout`` for the whole
# request, not per read): a server trickling keep-alive bytes, or sending a 1 GiB body, gets a
# verdict in time and costs no memory.
MAX_BODY = 16 << 20
MAX_LINE = 1 << 20  # one streamed event (a few hundred bytes in practice)


class _Budget:
    """The deadline and byte cap of one request."""

    def __init__(self, url: str, timeout: float, cap: int = MAX_BODY) -> None:
        self.url, self.timeout, self.cap = url, timeout, cap
        self.deadline = time.monotonic() + timeout
        self.size = 0

    def spend(self, n: int) -> None:
        self.size += n
        if self.size > self.cap:
            raise HttpError(f"{self.url}: the answer is larger than {self.cap >> 20} MiB")
        if time.monotonic() > self.deadline:
            raise HttpError(
                f"{self.url}: no complete answer within {self.timeout:g} s "
                f"({self.size} bytes so far)"
            )


def _read_all(resp: Any, budget: _Budget) -> bytes:
    chunks: list[bytes] = []
    read = getattr(resp, "read1", resp.read)  # read1: whatever arrived, not a full 64 kB
    while True:
        chunk = read(1 << 16)
        if not chunk:
            return b"".join(chunks)
        budget.spend(len(chunk))
        chunks.append(chunk)


def _lines(resp: Any, budget: _Budget) -> Iterator[bytes]:
    """The answer's lines, read as they arrive (a line trickled byte by byte still meets the
    deadline: readline would wait for its end)."""
    pending = bytearray()
    while True:
        chunk = resp.read1(1 << 16)
        if not chunk:
            break
        budget.spend(len(chunk))
        if b"\n" not in chunk:
            pending += chunk
            if len(pending) > MAX_LINE:
                raise HttpError(f"{budget.url}: a line longer than {MAX_LINE >> 20} MiB")
            continue
        *done, rest = (bytes(pending) + chunk).split(b"\n")
        pending = bytearray(rest)
        yield from done
    if pending:
        yield bytes(pending)


def http_request(
    url: str, body: Mapping[str, Any] | None = None, timeout: float = 30.0
) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"} if data else {}
    )
    budget = _Budget(url, timeout)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, _read_all(resp, budget)
    except urllib.error.HTTPError as exc:
        return exc.code, _read_all(exc, _Budget(url, timeout, 1 << 16)) if exc.fp else b""
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise HttpError(f"{url}: {getattr(exc, 'reason', exc)}") from exc


def _json(url: str, body: Mapping[str, Any] | None = None, timeout: float = 30.0) -> Any:
    status, raw = http_request(url, body, timeout)
    if status != 200:
        raise HttpError(f"{url}: HTTP {status}: {printable(raw[:200].decode(errors='replace'))}")
    try:
        return json.loads(raw)
    except ValueError as exc:
        shown = printable(raw[:200].decode(errors="replace"))
        raise HttpError(f"{url}: not JSON: {shown}") from exc


def _stream(
    url: str, body: Mapping[str, Any], timeout: float
) -> list[tuple[float, dict[str, Any]]]:
    """POST a streaming ``/generate``; (arrival time, chunk) for every ``data:`` event."""
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    chunks: list[tuple[float, dict[str, Any]]] = []
    budget = _Budget(url, timeout)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            for line in _lines(resp, budget):
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                chunks.append((time.monotonic(), json.loads(payload)))
    except urllib.error.HTTPError as exc:
        raise HttpError(f"{url}: HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise HttpError(f"{url}: {getattr(exc, 'reason', exc)}") from exc
    return chunks


# --------------------------------------------------------------------------- checks


def strip_reasoning(text: str) -> str:
    """The answer part of a reasoning model's output (``<think>...</think>`` removed)."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.S)
    return text.split("</think>")[-1]


def answer_matches(text: str, answer: str) -> bool:
    """True when ``answer`` appears in ``text`` as a whole number or word."""
    pattern = rf"(?<![\w.]){re.escape(answer)}(?![\w]|\.\d)"
    return re.search(pattern, strip_reasoning(text)) is not None


def decode_speed(chunks: Sequence[tuple[float, Mapping[str, Any]]]) -> tuple[float, int]:
    """Single-stream decode tokens/s from streamed chunks, and the tokens generated.

    Counts tokens after the first chunk (prefill's token) over the time after it, so the
    prompt's prefill time does not dilute the decode speed.
    """
    timed = [(t, int((c.get("meta_info") or {}).get("completion_tokens") or 0)) for t, c in chunks]
    if len(timed) < 2:
        return 0.0, timed[-1][1] if timed else 0
    (t0, n0), (t1, n1) = timed[0], timed[-1]
    if t1 <= t0 or n1 <= n0:
        return 0.0, n1
    return (n1 - n0) / (t1 - t0), n1


def decode_speed_chat(chunks: Sequence[tuple[float, Mapping[str, Any]]]) -> tuple[float, int]:
    """Single-stream decode tokens/s from a streamed ``/v1/chat/completions``, and the tokens.

    Chat chunks carry no token counts; the final usage chunk (``stream_options.include_usage``)
    has ``completion_tokens``. The first chunk with content is the prefill's token: the tokens
    after it over the time after it, as :func:`decode_speed` counts them.
    """
    times = []
    tokens = 0
    for t, c in chunks:
        usage = c.get("usage") or {}
        if usage.get("completion_tokens") is not None:
            tokens = int(usage["completion_tokens"])
        for choice in c.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content") or delta.get("reasoning_content"):  # a reasoning parser's
                times.append(t)
    if len(times) < 2 or tokens < 2 or times[-1] <= times[0]:
        return 0.0, tokens
    return (tokens - 1) / (times[-1] - times[0]), tokens


def accept_length_from_meta(metas: Iterable[Mapping[str, Any]]) -> tuple[float | None, str]:
    """Accept length over ``/generate`` responses: verify-step weighted mean, and detail.

    Uses ``spec_accept_length`` when the server reports it, else ``completion_tokens /
    spec_verify_ct`` (older servers); None when no response carries speculative statistics.
    """
    tokens = 0.0
    steps = 0
    seen = 0
    for m in metas:
        verify = m.get("spec_verify_ct")
        if verify is None:
            continue
        seen += 1
        verify = int(verify)
        if verify <= 0:
            continue
        length = m.get("spec_accept_length")
        if length is None:
            length = int(m.get("completion_tokens") or 0) / verify
        tokens += float(length) * verify
        steps += verify
    if not seen:
        return None, "no spec_verify_ct in any /generate meta_info: speculative decoding is off"
    if not steps:
        return 0.0, f"{seen} responses, none with a verify step"
    return tokens / steps, f"{steps} verify steps over {seen} responses"


def accept_length_from_server_info(info: Mapping[str, Any]) -> float | None:
    """Mean ``avg_spec_accept_length`` over ``internal_states`` (None when not reported)."""
    values = []
    for state in info.get("internal_states") or []:
        if isinstance(state, Mapping) and state.get("avg_spec_accept_length") is not None:
            values.append(float(state["avg_spec_accept_length"]))
    if not values and info.get("avg_spec_accept_length") is not None:
        values.append(float(info["avg_spec_accept_length"]))
    return sum(values) / len(values) if values else None


def _scan(
    path: Path, patterns: Sequence[ForbiddenPattern | RequiredPattern]
) -> tuple[dict[str, int], dict[str, tuple[int, str]]]:
    """Per pattern name: how many lines of the log match, and the first (number, text)."""
    compiled = [(p, re.compile(p.pattern)) for p in patterns]
    first: dict[str, tuple[int, str]] = {}
    counts: dict[str, int] = {}
    try:
        fh = open(path, encoding="utf-8", errors="replace", newline="\n")
    except OSError:
        return counts, first
    with fh:
        for n, line in enumerate(fh, 1):
            for p, rx in compiled:
                if rx.search(line):
                    counts[p.name] = counts.get(p.name, 0) + 1
                    # Server output is untrusted: control characters are shown escaped.
                    first.setdefault(p.name, (n, printable(line.strip()[:200])))
    return counts, first


def scan_log(path: Path, patterns: Sequence[ForbiddenPattern]) -> list[LogMatch]:
    """One :class:`LogMatch` per pattern that matched any line of the log, in pattern order."""
    counts, first = _scan(path, patterns)
    return [
        LogMatch(p.name, p.severity, counts[p.name], *first[p.name], why=p.why)
        for p in patterns
        if p.name in counts
    ]


def scan_required(path: Path, patterns: Sequence[RequiredPattern]) -> list[LogMatch]:
    """One :class:`LogMatch` per required pattern, found or not (``missing``), in order."""
    counts, first = _scan(path, patterns)
    return [
        LogMatch(
            p.name,
            p.severity,
            counts.get(p.name, 0),
            *first.get(p.name, (0, "")),
            why=p.why,
            kind="required",
            need=p.min_count,
        )
        for p in patterns
    ]


def logs_check(
    matches: Sequence[LogMatch], patterns: int, required: Sequence[LogMatch] = ()
) -> Check:
    """The ``logs`` check: fails on a ``fail`` match or a missing ``fail`` required line;
    ``warn`` ones are only counted."""
    missing = [r for r in required if r.missing]
    fails = [m for m in (*missing, *matches) if m.severity == "fail"]
    warns = [m for m in matches if m.severity == "warn"]
    missing_warns = [r for r in missing if r.severity == "warn"]
    detail = "; ".join(m.describe() for m in fails[:5]) or f"{patterns + len(required)} patterns"
    if warns:
        detail += f"; {sum(w.count for w in warns)} warning line(s): " + ", ".join(
            f"{w.name} x{w.count}" for w in warns
        )
    if missing_warns:
        detail += "; required line(s) missing (warn): " + ", ".join(r.name for r in missing_warns)
    found = [r for r in required if not r.missing]
    if found:
        detail += "; required found: " + ", ".join(f"{r.name} x{r.count}" for r in found)
    value = sum(1 if m.missing else m.count for m in fails)
    return Check("logs", not fails, value, 0, detail)


def _timed(name: str, fn: Callable[[], Check]) -> Check:
    started = time.monotonic()
    try:
        check = fn()
    except HttpError as exc:
        check = Check(name, False, None, None, f"{HTTP_FAILED}{exc}")
    return replace(check, seconds=round(time.monotonic() - started, 3))


class _Session:
    """The checks of one running server, collecting figures and ``meta_info`` as they go."""

    def __init__(self, scenario: Scenario, port: int, base: str = "") -> None:
        self.s = scenario
        self.c = scenario.checks
        self.base = base or f"http://127.0.0.1:{port}"
        self.metas: list[dict[str, Any]] = []  # raw /generate prompts
        self.chat_metas: list[dict[str, Any]] = []  # through the chat template
        self.figures: dict[str, Value] = {}

    def _generate(self, prompt: str, max_new_tokens: int) -> dict[str, Any]:
        body = {
            "text": prompt,
            "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens},
        }
        got = _json(f"{self.base}/generate", body, self.c.request_timeout)
        out: dict[str, Any] = got[0] if isinstance(got, list) else got
        self.metas.append(out.get("meta_info") or {})
        return out

    def _chat_body(self, model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
        return {
            **dict(self.c.chat_extra),
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": max_tokens,
        }

    def _chat(self, model: str, prompt: str, max_tokens: int) -> str:
        # return_meta_info (sglang 0.5.14 protocol.py:693, serving_chat.py:1315-1317): the
        # request's speculative statistics, measured on the chat-templated prompt
        body = {**self._chat_body(model, prompt, max_tokens), "return_meta_info": True}
        out = _json(f"{self.base}/v1/chat/completions", body, self.c.request_timeout)
        choice = (out.get("choices") or [{}])[0]
        if isinstance(choice.get("meta_info"), dict):
            self.chat_metas.append(choice["meta_info"])
        msg = choice.get("message") or {}
        return str(msg.get("content") or "")

    def model_name(self) -> str:
        try:
            data = _json(f"{self.base}/v1/models", timeout=30).get("data") or []
            return str(data[0]["id"]) if data else "default"
        except (HttpError, KeyError, TypeError, AttributeError):
            return "default"

    def serves(self) -> Check:
        empty: list[str] = []
        for p in self.c.prompts:
            text = str(self._generate(p, self.c.serve_max_new_tokens).get("text") or "")
            if not text.strip():
                empty.append(f"/generate {p[:40]!r}")
        chat = self._chat(self.model_name(), self.c.chat_prompt, self.c.serve_max_new_tokens)
        if not strip_reasoning(chat).strip():
            empty.append(f"chat {self.c.chat_prompt[:40]!r}")
        total = len(self.c.prompts) + 1
        return Check(
            "serves",
            not empty,
            total - len(empty),
            total,
            "empty output from " + "; ".join(empty) if empty else "",
        )

    def arithmetic(self) -> Check:
        model = self.model_name()
        wrong: list[str] = []
        for q in self.c.questions:
            text = self._chat(model, q.prompt, self.c.question_max_tokens)
            if not answer_matches(text, q.answer):
                shown = strip_reasoning(text).strip().replace("\n", " ")[:60]
                wrong.append(f"{q.prompt[:40]!r} -> {shown!r} (want {q.answer})")
        total = len(self.c.questions)
        return Check("arithmetic", not wrong, total - len(wrong), total, "; ".join(wrong))

    def speed(self) -> Check:
        """Single-stream decode speed on the chat-templated prompt, as the threshold was
        measured (the case study's 213 tok/s: chat template; MTP accepts less on raw text)."""
        body = {
            **self._chat_body(self.model_name(), self.c.speed_prompt, self.c.speed_max_new_tokens),
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        }
        chunks = _stream(f"{self.base}/v1/chat/completions", body, self.c.request_timeout)
        tok_s, tokens = decode_speed_chat(chunks)
        self.figures["decode_tok_s"] = round(tok_s, 2)
        self.figures["decode_tokens"] = tokens
        ok = tok_s >= self.c.min_decode_tok_s
        return Check(
            "decode-speed",
            ok,
            round(tok_s, 2),
            self.c.min_decode_tok_s,
            f"{tokens} tokens, single stream, chat template, {len(chunks)} chunks",
        )

    def spec_requests(self) -> Check:
        """Per-request accept length from the chat requests (templated, ``return_meta_info``);
        from the raw ``/generate`` prompts only where no chat answer carried statistics."""
        value, detail = accept_length_from_meta(self.chat_metas)
        source = "chat-templated requests"
        if value is None:
            value, detail = accept_length_from_meta(self.metas)
            source = "raw /generate prompts (no chat meta_info: return_meta_info unsupported?)"
        if value is not None:
            self.figures["spec_accept_length_requests"] = round(value, 3)
        raw, _ = accept_length_from_meta(self.metas)
        if raw is not None:
            self.figures["spec_accept_length_raw"] = round(raw, 3)
        ok = value is not None and value >= self.c.min_accept_length
        return Check(
            "spec-accept.requests",
            ok,
            None if value is None else round(value, 3),
            self.c.min_accept_length,
            f"{detail}; {source}",
        )

    def spec_server(self) -> Check:
        source = "/server_info"
        status, raw = http_request(f"{self.base}/server_info", None, 30)
        if status == 404:
            source = "/get_server_info"
            status, raw = http_request(f"{self.base}/get_server_info", None, 30)
        if status != 200:
            raise HttpError(f"{self.base}{source}: HTTP {status}")
        try:
            info = json.loads(raw)
        except ValueError as exc:
            raise HttpError(f"{self.base}{source}: not JSON") from exc
        value = accept_length_from_server_info(info)
        if value is not None:
            self.figures["spec_accept_length_server"] = round(value, 3)
        if info.get("version"):
            self.figures["sglang_version"] = str(info["version"])
        ok = value is not None and value >= self.c.min_accept_length
        detail = f"avg_spec_accept_length from {source}"
        if value is None:
            detail = (
                f"no avg_spec_accept_length in {source} internal_states (sglang reports it "
                "once --decode-log-interval decode batches, 40 by default, have run)"
            )
        return Check(
            "spec-accept.server",
            ok,
            None if value is None else round(value, 3),
            self.c.min_accept_length,
            detail,
        )


# --------------------------------------------------------------------------- runner

CHECK_ORDER = (
    "ready",
    "serves",
    "arithmetic",
    "decode-speed",
    "spec-accept.requests",
    "spec-accept.server",
    "stays-up",
    "logs",
)
