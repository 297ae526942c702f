"""Every built-in recipe runs end to end with `backend=tinker`: the real tinker SDK against
`kitchen serve --backend noop` on 127.0.0.1; the API key never reaches the run directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics
from tests.integration.test_builtin_workflows_noop import SMOKE_OVERRIDES
from tests.serve.server_process import API_KEY as PLANTED_KEY
from tests.serve.server_process import shared_server

NOT_SERVED = {
    # kitchen serve takes token inputs only (its 400 for image chunks: tests/serve/test_serve_sdk.py);
    # the tinker adapter's image chunks are tested in tests/adapters/tinker/test_tinker_convert.py.
    "vlm_classifier": "images",
    # the Tinker API has no geometric-mixture sampling: `kitchen validate` refuses nash_md on the
    # tinker backend by name (tests/preference_workflow/test_nash_md_noop.py)
    "nash_md": "mixture sampling",
}
# The shared server serves the embedded `tiny` base only; recipes whose default is another embedded
# model run on it here (their own default runs on noop in test_builtin_workflows_noop).
SERVED_MODEL = {"search_tool": "tiny"}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(SMOKE_OVERRIDES) - set(NOT_SERVED)))
def test_recipe_runs_on_kitchen_serve(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINKER_API_KEY", PLANTED_KEY)
    recipe = get_recipe(name)
    url = shared_server().url
    overrides = [
        "backend=tinker",
        "lora_rank=4",
        f"tinker.base_url={url}",
        f"log_path={tmp_path}",
        *SMOKE_OVERRIDES[name],
        *([f"model_name={SERVED_MODEL[name]}"] if name in SERVED_MODEL else []),
    ]
    run_dir = run_recipe(recipe, load_config(recipe.config_cls, None, overrides), progress=False)
    assert read_metrics(run_dir.metrics)
    records = read_records(run_dir.checkpoints)
    assert records and all(r.state_path and r.state_path.startswith("tinker://") for r in records)
    for path in run_dir.path.rglob("*"):
        if path.is_file():
            assert PLANTED_KEY not in path.read_text(errors="ignore"), f"API key leaked into {path}"


def test_service_failure_names_stage_and_call_and_finally_runs(tmp_path: Path) -> None:
    # On the fake SDK: a failure injected at one exact call in the middle of a recipe, which the
    # local server has no hook to produce.
    from kitchen.engine.runner import StageFailure
    from tests.adapters.tinker.fake_checks import service_error
    from tests.adapters.tinker.fake_sdk import make_fake_backend

    backend, service = make_fake_backend()
    service.fail_next("forward_backward", service_error(400, "bad batch"))
    recipe = get_recipe("sl_basic")
    config = load_config(
        recipe.config_cls, None, ["backend=tinker", "lora_rank=4", f"log_path={tmp_path}", *SMOKE_OVERRIDES["sl_basic"]]
    )
    with pytest.raises(StageFailure, match=r"stage '\w+' failed: .*tinker forward_backward failed") as info:
        run_recipe(recipe, config, progress=False, backend=backend)
    assert info.value.stage in {"collect_train_step", "await_before_checkpoint"}
    assert service.closed_with is not None, "the finally_ stage (close_backend) did not run"
