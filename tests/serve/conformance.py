"""The tinker SDK's public surface against `kitchen serve`: one check per public method and CLI
command, and the call -> answer table the docs show (docs/reference/tinker-sdk-conformance.md).

A check drives the real SDK the way a program does and asserts what the SDK documents: the call
works (with the result checked), the SDK answers it without the server (client-side), or the
server refuses it by name, a 4xx saying what is not served, why and what to use instead. Anything
else (a bare 404/405, a 5xx, a hang, a silently ignored option) fails the check. The test modules
run the checks (`test_sdk_conformance.py`: every SDK method against noop; `..._local.py`: the CLI
and the model-dependent calls against the local backend on the tiny model) and compare the table.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import tinker

from tests.serve.server_process import ROOT

Outcome = Literal["works", "client-side", "refused"]
TABLE = ROOT / "docs" / "reference" / "tinker-sdk-conformance.md"
SDK_CLASSES: dict[str, type] = {
    "ServiceClient": tinker.ServiceClient,
    "TrainingClient": tinker.TrainingClient,
    "SamplingClient": tinker.SamplingClient,
    "RestClient": tinker.RestClient,
    "AdminClient": tinker.AdminClient,
}
COLUMNS = ("noop", "local")


@dataclass(frozen=True)
class Answer:
    """What a call got: its outcome and a short note (what was checked, or the refusal's reason)."""

    outcome: Outcome
    note: str

    def cell(self) -> str:
        return f"{self.outcome}: {self.note}" if self.note else self.outcome


def works(note: str = "") -> Answer:
    return Answer("works", note)


def client_side(note: str) -> Answer:
    return Answer("client-side", note)


def refused(exc: BaseException) -> Answer:
    """A refusal by name: a 4xx (never a 5xx, which the SDK retries) whose message says what is
    not served and why. Its first clause goes in the table."""
    status = getattr(exc, "status_code", None)
    assert isinstance(exc, tinker.APIStatusError) and status is not None and 400 <= status < 500, repr(exc)
    body = exc.body if isinstance(exc.body, dict) else {}
    message = str(body.get("detail", exc))
    assert "not served" in message, f"a refusal must name what is not served: {message}"
    return Answer("refused", message.split(":", 1)[1].strip() if ":" in message else message)


def public_methods() -> list[str]:
    """`Class.method` for every public method (and property) of the SDK's client classes."""
    found = []
    for class_name, cls in SDK_CLASSES.items():
        for name, _value in inspect.getmembers(cls):
            if name.startswith("_"):
                continue
            static = inspect.getattr_static(cls, name)
            if callable(static) or isinstance(static, staticmethod | classmethod | property):
                found.append(f"{class_name}.{name}")
    return sorted(found)


Check = Callable[[Any], Answer]


def run_checks(checks: dict[str, Check], context: Any) -> dict[str, Answer | BaseException]:
    """Every check's answer, or what it raised (a wrong answer); a check covering several calls
    runs once."""
    done: dict[int, Answer | BaseException] = {}
    results: dict[str, Answer | BaseException] = {}
    for name, check in checks.items():
        if id(check) not in done:
            try:
                done[id(check)] = check(context)
            except Exception as exc:  # a failed check is a result, reported by its own test
                done[id(check)] = exc
        results[name] = done[id(check)]
    return results


_ROW = re.compile(r"^\| `(?P<call>[^`]+)` \| (?P<noop>[^|]*) \| (?P<local>[^|]*) \|$")


def read_table(path: Path = TABLE) -> dict[str, dict[str, str]]:
    """The table's cells: call -> column -> cell text."""
    rows: dict[str, dict[str, str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if match:
            rows[match["call"]] = {"noop": match["noop"].strip(), "local": match["local"].strip()}
    return rows


def cell_text(answer: Answer) -> str:
    return answer.cell().replace("|", "/").replace("\n", " ")


def counts(rows: dict[str, dict[str, str]]) -> dict[str, int]:
    """How many calls work, are answered client-side, are refused by name (a call counts by its
    best answer over the backends: one that works on local but is refused on noop works)."""
    rank = {"works": 0, "client-side": 1, "refused": 2}
    tally = dict.fromkeys(rank, 0)
    for cells in rows.values():
        outcomes = [c.split(":", 1)[0] for c in cells.values() if c and c != "-"]
        best = min(outcomes, key=lambda o: rank.get(o, 99))
        tally[best] = tally.get(best, 0) + 1
    return tally


HEADER = """# tinker SDK conformance of `kitchen serve`

Every public method of the tinker SDK's clients ({sdk}) and every `tinker` CLI command, called
against `kitchen serve` on 127.0.0.1, with the answer it got. Generated by
`tests/serve/test_sdk_conformance.py` (the noop column) and `tests/serve/test_sdk_conformance_local.py`
(the local column: the tiny model, and the CLI); a test fails when this page and the answers differ
(`KITCHEN_WRITE_CONFORMANCE=1` rewrites it). A new SDK method fails
`test_every_public_sdk_method_has_a_check` until it has a check.

- **works**: the call did what the SDK documents (the check asserts the result).
- **client-side**: the SDK answers without asking the server (`-` where the local column did not run it).
- **refused**: a 4xx whose message names the feature, says why it is not served and what to use instead.

Counts (a call counts by its best answer): {counts}.

| call | noop | local |
| --- | --- | --- |
"""


REFUSALS = """
## What is refused, and why

Options of the calls above that `kitchen serve` refuses by name (each message as the server sends it):

"""


def refusal_messages() -> list[str]:
    """Every message of `kitchen.apps.serve.refusals`."""
    from kitchen.apps.serve import refusals

    return [value for name, value in vars(refusals).items() if name.isupper() and isinstance(value, str)]


def write_table(rows: dict[str, dict[str, str]], path: Path = TABLE) -> None:
    tally = counts(rows)
    summary = ", ".join(f"{n} {name}" for name, n in tally.items()) + f", {len(rows)} in all"
    text = HEADER.format(sdk=f"tinker {tinker.__version__}", counts=summary)
    for call in sorted(rows):
        cells = rows[call]
        text += f"| `{call}` | {cells.get('noop', '-')} | {cells.get('local', '-')} |\n"
    text += REFUSALS + "".join(f"- {message}.\n" for message in refusal_messages())
    path.write_text(text, encoding="utf-8")
