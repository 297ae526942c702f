"""The vLLM engine's own process: one `vllm.LLM`, serving the trainer's requests over a socket.

Started by `adapters.local.vllm_engine` as `python -m adapters.local.vllm_host FD`, where FD is
its end of a socket pair. The first message is the `EngineSpec`; the host answers with an
`EngineInfo` once the engine is up (or a `Failure`), then serves `(method, args)` calls one at a
time until told to stop or until the trainer's end closes (the trainer is gone: so is the engine).
Everything vLLM logs goes to this process's stdout, which the trainer points at the run's log file.

Weights arrive in shared memory (`adapters.local.vllm_weights`): the engine reloads them in place
from views of the trainer's segment, with no file in between; an engine on another node of a Ray
cluster gets them through Ray's object store instead, and says so in its log. Sleep mode (CUDA, `sleep_level`)
is vLLM's own: `enable_sleep_mode` at start-up, `sleep`/`wake_up` when the trainer says.

Numerics, so that RL stays on-policy: sampled tokens' logprobs are vLLM's "processed" ones (those
of the distribution it samples from, temperature applied), prompt logprobs are the model's own.
vLLM stops at no token unless asked (`ignore_eos`), like kitchen's sampler.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from adapters.local.vllm_protocol import (
    Completion,
    EngineInfo,
    EngineSpec,
    Failure,
    GenerateRequest,
    LoraAdapter,
    ScoreRequest,
    SharedWeights,
    ShippedWeights,
)


class UnsupportedModel(ValueError):
    """The model is one this engine cannot serve (reported to the user as a config error)."""


def check_head_size(spec: EngineSpec) -> None:
    """vLLM's CPU attention kernels take only some head sizes (not the embedded tiny model's 24)."""
    if spec.device != "cpu":
        return
    from transformers import AutoConfig
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    config = AutoConfig.from_pretrained(spec.model_dir)
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    supported = CPUAttentionBackend.get_supported_head_sizes()
    if head not in supported:
        raise UnsupportedModel(
            f"vLLM on the CPU supports attention head sizes {supported}; this model's is {head} "
            "(the embedded model tiny32 has head size 32)"
        )


def _reload_on_worker(worker: Any, shared: SharedWeights | ShippedWeights | None, tied_head: bool) -> None:
    """Runs on each vLLM worker: reload the weights in place from a shared-memory segment or shipped
    weights (or, for None, from the model directory the engine started with), then re-pack a tied
    output head.

    On the CPU the output head multiplies with a packed copy of the embedding made when the model
    was loaded; a reload refreshes the embedding but, when the two are tied, not that copy, and the
    engine would silently sample from the old head."""
    from adapters.local.vllm_weights import load_shared

    if shared is None:
        worker.reload_weights(is_checkpoint_format=True)
    else:
        load_shared(shared, lambda tensors: worker.reload_weights(weights_iterator=tensors, is_checkpoint_format=True))
    if tied_head:
        model = worker.model_runner.get_model()
        head = getattr(model.lm_head, "base_layer", model.lm_head)
        head.quant_method.process_weights_after_loading(head)


class EngineHost:
    """One vLLM engine and the calls the trainer makes on it."""

    def __init__(self, spec: EngineSpec) -> None:
        import vllm

        check_head_size(spec)

        self._spec = spec
        lora: dict[str, Any] = {}
        if spec.max_lora_rank is not None:
            # Two adapters per batch: in async RL the previous policy's requests may share one.
            lora = {"enable_lora": True, "max_lora_rank": spec.max_lora_rank, "max_loras": 2, "max_cpu_loras": 4}
        self._llm = vllm.LLM(
            model=spec.model_dir,
            dtype=spec.dtype,
            max_model_len=spec.max_model_len,
            seed=spec.seed,
            enforce_eager=spec.enforce_eager,
            gpu_memory_utilization=spec.gpu_memory_utilization,
            tensor_parallel_size=spec.tensor_parallel_size,
            logprobs_mode="processed_logprobs",
            generation_config="vllm",  # no sampling defaults from the model's generation_config.json
            enable_prefix_caching=True,
            enable_sleep_mode=spec.sleep_level > 0,
            **lora,
        )
        config = self._llm.llm_engine.model_config
        self.info = EngineInfo(config.get_vocab_size(), config.max_model_len, vllm.__version__)

    # -- sampling ----------------------------------------------------------------------------

    def generate(self, requests: list[GenerateRequest]) -> list[list[Completion]]:
        """Every request's samples, from one `generate` call (vLLM batches them itself)."""
        outputs = self._llm.generate(
            [self._prompt(r.prompt) for r in requests],
            [self._sampling_params(r) for r in requests],
            lora_request=[self._lora(r.lora) for r in requests],
            use_tqdm=False,
        )
        return [
            [self._completion(sample, r.params.topk_logprobs) for sample in output.outputs]
            for r, output in zip(requests, outputs, strict=True)
        ]

    def score(self, requests: list[ScoreRequest]) -> list[list[float | None]]:
        """Each request's token logprobs given the tokens before them; None for the first."""
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False, temperature=1.0)
        outputs = self._llm.generate(
            [self._prompt(r.tokens) for r in requests],
            params,
            lora_request=[self._lora(r.lora) for r in requests],
            use_tqdm=False,
        )
        scored: list[list[float | None]] = []
        for request, output in zip(requests, outputs, strict=True):
            found = output.prompt_logprobs
            assert found is not None
            scored.append([None, *(found[i][t].logprob for i, t in enumerate(request.tokens) if i > 0)])
        return scored

    @staticmethod
    def _prompt(tokens: list[int]) -> Any:
        from vllm.inputs import TokensPrompt

        return TokensPrompt(prompt_token_ids=tokens)

    @staticmethod
    def _sampling_params(request: GenerateRequest) -> Any:
        from vllm import SamplingParams

        params = request.params
        stop = list(params.stop or [])
        strings = [s for s in stop if isinstance(s, str)]
        return SamplingParams(
            n=request.num_samples,
            temperature=params.temperature,
            top_k=max(params.top_k, 0),  # kitchen's -1 (off) is vLLM's 0
            top_p=params.top_p,
            max_tokens=request.max_tokens,
            seed=request.seed,
            stop=strings or None,
            stop_token_ids=[s for s in stop if isinstance(s, int)] or None,
            ignore_eos=True,
            logprobs=params.topk_logprobs,  # the sampled token's, and the k most likely (vLLM adds them)
            detokenize=bool(strings),  # stop strings are matched in the text
            skip_special_tokens=False,
            spaces_between_special_tokens=False,
        )

    @staticmethod
    def _lora(adapter: LoraAdapter | None) -> Any:
        if adapter is None:
            return None
        from vllm.lora.request import LoRARequest

        return LoRARequest(f"adapter-{adapter.adapter_id}", adapter.adapter_id, adapter.path)

    @staticmethod
    def _completion(sample: Any, topk: int) -> Completion:
        """A sample's tokens and logprobs; with `topk`, each position's k best by vLLM's rank
        (its logprobs dict also holds the sampled token, which may rank lower)."""
        tokens = list(sample.token_ids)
        logprobs = [sample.logprobs[i][token].logprob for i, token in enumerate(tokens)]
        best = None
        if topk > 0:
            best = [
                [
                    (int(t), float(lp.logprob))
                    for t, lp in sorted(step.items(), key=lambda kv: kv[1].rank)
                    if lp.rank <= topk
                ]
                for step in sample.logprobs[: len(tokens)]
            ]
        return Completion(tokens, logprobs, "stop" if sample.finish_reason == "stop" else "length", best)

    # -- weights -----------------------------------------------------------------------------

    def load_weights(self, shared: SharedWeights | ShippedWeights | None) -> float:
        """Replace the weights with a shared-memory segment's or shipped ones (None: the starting
        weights) and forget every cached prefix computed with the old ones; the seconds it took."""
        start = time.perf_counter()
        self._llm.collective_rpc(_reload_on_worker, args=(shared, self._spec.tied_head))
        self._llm.reset_prefix_cache()
        seconds = time.perf_counter() - start
        if isinstance(shared, ShippedWeights):
            print(f"kitchen: loaded {shared.size} bytes of weights shipped through Ray's object store", flush=True)
        return seconds

    def sleep(self, level: int) -> float:
        """vLLM's sleep mode: free the KV cache, and offload (1) or discard (2) the weights."""
        start = time.perf_counter()
        self._llm.sleep(level=level)
        return time.perf_counter() - start

    def wake_up(self, tags: list[str] | None) -> float:
        """Give back the memory `sleep` freed (`tags`: weights or kv_cache only; None: all)."""
        start = time.perf_counter()
        self._llm.wake_up(tags)
        return time.perf_counter() - start

    def add_lora(self, adapter: LoraAdapter) -> float:
        """Load an adapter now (requests would load it on first use); the seconds it took."""
        start = time.perf_counter()
        self._llm.llm_engine.add_lora(self._lora(adapter))
        return time.perf_counter() - start


CALLS = frozenset({"generate", "score", "load_weights", "add_lora", "sleep", "wake_up"})


def failure(exc: BaseException) -> Failure:
    """An exception, as the answer the trainer gets instead of a result."""
    details = "".join(traceback.format_exception(exc))
    return Failure(type(exc).__name__, str(exc), details, config_error=isinstance(exc, UnsupportedModel))


def dispatch(host: EngineHost, method: str, args: tuple[Any, ...]) -> Any:
    """The result of one call the trainer made, or its failure."""
    try:
        if method not in CALLS:
            raise ValueError(f"unknown engine call {method!r}")
        return getattr(host, method)(*args)
    except Exception as exc:
        return failure(exc)


def start_host(spec: EngineSpec) -> EngineHost | Failure:
    """The engine, or why it failed to start (also printed: the log says it)."""
    try:
        return EngineHost(spec)
    except Exception as exc:
        print(f"vllm engine failed to start:\n{''.join(traceback.format_exception(exc))}", flush=True)
        return failure(exc)


def serve(conn: Connection) -> None:
    """Start the engine from the first message, then answer calls until `stop` or the trainer's end
    of the socket closes."""
    host = start_host(conn.recv())
    if isinstance(host, Failure):
        conn.send(host)
        return
    conn.send(host.info)
    while True:
        try:
            method, args = conn.recv()
        except (EOFError, OSError):
            return  # the trainer is gone
        if method == "stop":
            conn.send(None)
            return
        conn.send(dispatch(host, method, args))


def main() -> None:
    # The engine core runs in this process: one process per engine, and no spawned child that
    # would outlive a killed parent.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    serve(Connection(int(sys.argv[1])))


if __name__ == "__main__":
    main()
