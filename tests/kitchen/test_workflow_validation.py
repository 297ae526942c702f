"""Build-time wiring checks, read off the stages' `run` signatures: a mis-wired workflow fails
naming the stage, the key and the types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel

from kitchen.engine.backends import BackendSpec
from kitchen.engine.context import Context
from kitchen.engine.errors import ConfigError, WiringError
from kitchen.engine.ports import ServiceBackend, TrainingClient
from kitchen.engine.stage import Live, Persisted, Stage
from kitchen.engine.workflow import Loop, Parallel, When, Workflow, render_tree


@dataclass(frozen=True)
class Dataset:
    dataset: list[int]


@dataclass(frozen=True)
class Total:
    total: float


class Produce(Stage):
    async def run(self) -> Dataset:
        return Dataset([1, 2, 3])


class Consume(Stage):
    async def run(self, dataset: list[int]) -> Total:
        return Total(sum(dataset))


class ReadsRawDataset(Stage):
    """The ancestors' bug: reading `raw_dataset` while the loader writes `dataset`."""

    async def run(self, raw_dataset: list[int]) -> None: ...


class ReadsStrings(Stage):
    async def run(self, dataset: list[str]) -> None: ...


class NeedsService(Stage):
    calls = (ServiceBackend.get_tokenizer,)

    async def run(self, service: ServiceBackend) -> None: ...


class BatchSettings(BaseModel):
    batch_size: int = 8


class Batches(Stage):
    async def run(self, dataset: list[int], config: BatchSettings) -> None: ...


def test_well_wired_workflow_validates() -> None:
    Workflow("ok", [Produce(), Consume()]).validate({}, ())


def test_consumer_before_producer_names_stage_key_and_type() -> None:
    with pytest.raises(WiringError, match=r"stage 'consume' reads 'dataset' \(list\[int\]\), but no earlier stage"):
        Workflow("order", [Consume(), Produce()]).validate({}, ())


def test_read_of_unwritten_key_names_stage_and_key() -> None:
    workflow = Workflow("bad", [Produce(), ReadsRawDataset()])
    with pytest.raises(WiringError, match=r"stage 'reads_raw_dataset' reads 'raw_dataset'"):
        workflow.validate({}, ())


def test_wrong_type_names_stage_key_both_types_and_the_writer() -> None:
    with pytest.raises(
        WiringError,
        match=r"stage 'reads_strings' reads 'dataset' as list\[str\], but stage 'produce' writes it as list\[int\]",
    ):
        Workflow("types", [Produce(), ReadsStrings()]).validate({}, ())


def test_missing_section_names_stage_and_settings_model() -> None:
    class NoBatchSize(BaseModel):
        seed: int = 0

    class WithBatches(BaseModel):
        seed: int = 0
        batches: BatchSettings = BatchSettings()

    class Twice(WithBatches):
        again: BatchSettings = BatchSettings()

    workflow = Workflow("settings", [Produce(), Batches()])
    with pytest.raises(
        WiringError, match=r"stage 'batches' reads settings BatchSettings, which config class NoBatchSize does not have"
    ):
        workflow.validate({}, (), NoBatchSize)
    with pytest.raises(WiringError, match=r"has in several places \(batches, again\)"):
        workflow.validate({}, (), Twice)
    workflow.validate({}, (), BatchSettings)  # the config itself is the settings
    workflow.validate({}, (), WithBatches)  # a section of the config is


class SubmitsCustom(Stage):
    calls = (TrainingClient.forward_backward_custom,)

    async def run(self, training_client: TrainingClient | None = None) -> None: ...


def test_a_call_the_backend_lacks_names_stage_and_call() -> None:
    """`kitchen validate` asks the configured backend's registered spec, with no backend built."""
    from kitchen.engine.backends import _REGISTERED, register_backend
    from kitchen.engine.config.run import RunConfig
    from kitchen.engine.recipe import Recipe
    from kitchen.engine.validation import validate_recipe

    register_backend(BackendSpec("narrow", "", BaseModel, print, frozenset({"TrainingClient.forward"})))  # type: ignore[arg-type]
    try:
        recipe = Recipe("r", "", RunConfig, lambda c: Workflow("w", [SubmitsCustom()]))
        config = RunConfig.model_construct(backend="narrow", lora_rank=None)
        with pytest.raises(ConfigError, match=r"stage .submits_custom. calls TrainingClient\.forward_backward_custom"):
            validate_recipe(recipe, config)
    finally:
        _REGISTERED.pop("narrow")


def test_initial_state_satisfies_reads_with_its_types() -> None:
    Workflow("seeded", [Consume()]).validate({"dataset": list}, ())
    with pytest.raises(WiringError, match="reads 'dataset' as list\\[int\\], but the initial state writes it as str"):
        Workflow("seeded", [Consume()]).validate({"dataset": str}, ())


def test_unbound_port_is_an_error() -> None:
    with pytest.raises(WiringError, match=r"'needs_service' needs port 'service'"):
        Workflow("ports", [NeedsService()]).validate({}, ())
    Workflow("ports", [NeedsService()]).validate({}, ("service",))


def test_duplicate_names_are_an_error() -> None:
    with pytest.raises(WiringError, match="duplicate name 'produce'"):
        Workflow("dup", [Produce(), Loop("l", over=lambda ctx: 1, body=[Produce()])]).validate({}, ())


def test_keys_written_inside_when_stay_local() -> None:
    workflow = Workflow("when", [When("maybe", lambda ctx: False, [Produce()]), Consume()])
    with pytest.raises(WiringError, match="'consume' reads 'dataset'"):
        workflow.validate({}, ())


def test_finally_stages_may_only_rely_on_initial_state() -> None:
    workflow = Workflow("fin", [Produce()], finally_=[Consume()])
    with pytest.raises(WiringError, match="in finally_"):
        workflow.validate({}, ())


def test_loop_over_unwritten_or_non_int_key_is_an_error() -> None:
    with pytest.raises(WiringError, match="loop 'train' counts over 'num_steps'"):
        Workflow("loop", [Loop("train", over="num_steps", body=[])]).validate({}, ())
    with pytest.raises(
        WiringError, match="counts over 'dataset', which stage 'produce' writes as list\\[int\\], not int"
    ):
        Workflow("loop", [Produce(), Loop("train", over="dataset", body=[])]).validate({}, ())


def test_parallel_branches_may_not_write_the_same_key() -> None:
    workflow = Workflow("par", [Parallel("both", [[Produce()], [Produce(name="produce_again")]])])
    with pytest.raises(WiringError, match="both write 'dataset'"):
        workflow.validate({}, ())


@dataclass(frozen=True)
class Strings:
    dataset: list[str]


class Stringify(Stage):
    async def run(self, dataset: list[int]) -> Strings:
        return Strings([str(x) for x in dataset])


def test_a_stage_rewriting_a_key_with_another_type_is_an_error() -> None:
    with pytest.raises(WiringError, match="'stringify' writes 'dataset' as list\\[str\\], but stage 'produce' wrote"):
        Workflow("retype", [Produce(), Stringify()]).validate({}, ())


@dataclass(frozen=True)
class Held:
    held_out: list[int]


class ProduceHeld(Stage):
    async def run(self) -> Held:
        return Held([4])


def test_keys_rebind_a_stage_to_other_state_keys() -> None:
    consume_held = Consume("consume_held", keys={"dataset": "held_out", "total": "held_total"})
    Workflow("rebound", [ProduceHeld(), consume_held]).validate({}, ())
    assert [w.key for w in consume_held.spec.writes] == ["held_total"]
    with pytest.raises(WiringError, match="keys= names \\['datasett'\\], which run\\(\\) neither reads nor writes"):
        _ = Consume("typo", keys={"datasett": "x"}).spec


def test_optional_and_live_reads() -> None:
    class Optional_(Stage):
        async def run(self, dataset: list[int] | None = None, latest: Live[float] | None = None) -> None: ...

    spec = Optional_().spec
    assert [(r.key, r.required, r.live) for r in spec.reads] == [("dataset", False, False), ("latest", False, False)]
    Workflow("opt", [Optional_()]).validate({}, ())

    class Follows(Stage):
        async def run(self, total: Live[float]) -> None: ...

    assert Follows().spec.reads[0].live
    with pytest.raises(WiringError, match="reads 'total' \\(float\\)"):
        Workflow("live", [Follows()]).validate({}, ())
    Workflow("live", [Produce(), Consume(), Follows()]).validate({}, ())


@dataclass
class Mutable:
    x: int


class Mutates(Stage):
    async def run(self) -> Mutable:
        return Mutable(1)


def test_malformed_stage_signatures_are_refused() -> None:
    class NoAnnotation(Stage):
        async def run(self, dataset) -> None: ...  # type: ignore[no-untyped-def,unused-ignore]

    class NotFrozen(Stage):
        async def run(self) -> Any: ...

    class Sync(Stage):
        def run(self) -> None: ...

    @dataclass(frozen=True)
    class Unresolvable:
        x: int

    class ReturnsLocal(Stage):
        async def run(self) -> Unresolvable:
            return Unresolvable(1)

    with pytest.raises(WiringError, match="parameter 'dataset' has no type"):
        _ = NoAnnotation().spec
    with pytest.raises(WiringError, match="must return None or a frozen dataclass"):
        _ = NotFrozen().spec
    with pytest.raises(WiringError, match="Mutable must be a frozen dataclass"):
        _ = Mutates().spec
    with pytest.raises(WiringError, match="has no `async def run`"):
        _ = Sync().spec
    with pytest.raises(WiringError, match="returns Unresolvable, a name that cannot be resolved"):
        _ = ReturnsLocal().spec


@dataclass(frozen=True)
class Saved:
    path: Persisted[str]
    scratch: int


class Save(Stage):
    async def run(self, ctx: Context) -> Saved:
        return Saved("p", 1)


def test_persisted_keys_are_marked_on_the_output() -> None:
    spec = Save().spec
    assert spec.takes_ctx
    assert [(w.key, w.type, w.persisted) for w in spec.writes] == [("path", str, True), ("scratch", int, False)]


def test_render_tree_lists_reads_writes_settings_ports_and_calls() -> None:
    text = render_tree(Workflow("tree", [Produce(), Loop("l", over="dataset", body=[Consume(), NeedsService()])]))
    assert "- produce (Produce)  writes: dataset: list[int]" in text
    assert "loop l over dataset" in text
    assert "consume (Consume)  reads: dataset: list[int]  writes: total: float" in text
    assert "ports: service  calls: ServiceBackend.get_tokenizer" in text
    assert "settings: BatchSettings" in render_tree(Workflow("s", [Produce(), Batches()]))
