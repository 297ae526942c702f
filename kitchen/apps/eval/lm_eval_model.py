"""kitchen's sampler and scorer as an lm-evaluation-harness model, so any harness task runs on any
backend kitchen samples from.

- `loglikelihood`: one `compute_logprobs` of context + continuation per request (all of a call
  submitted at once, so the local backend batches them); `is_greedy` is exact: a continuation
  token whose logprob exceeds log(1/2) is surely the argmax, one below log(1/V) surely not, and
  the rest are settled by decoding the continuation's length greedily and comparing tokens.
- `loglikelihood_rolling`: the harness's own disjoint rolling windows of `max_length` tokens.
- `generate_until`: `sample` with the request's stop strings, `max_gen_toks` and temperature
  (greedy unless `do_sample`), seeded from the evaluation's seed and the request's position.
- chat template: the target's renderer (its generation prompt, decoded to text).

lm-eval calls the model synchronously from a worker thread; every port call is run on the event
loop that owns the backend.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from lm_eval.api.model import TemplateLM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from kitchen.engine.eval_tasks import EvalModel
from kitchen.families.evaluation.generation import item_seed
from train_core.renderers.base import Message
from train_core.renderers.train_on_what import TrainOnWhat
from train_core.types import ModelInput, SamplingParams

T = TypeVar("T")
SURELY_ARGMAX = math.log(0.5)


class KitchenLM(TemplateLM):
    def __init__(
        self, model: EvalModel, loop: asyncio.AbstractEventLoop, seed: int = 0, max_length: int = 2048
    ) -> None:
        super().__init__()
        self.model = model
        self.loop = loop
        self.seed = seed
        self.max_length = max_length
        self.tokenizer = model.tokenizer
        self._generated = 0

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    @property
    def eot_token_id(self) -> int:
        eos = self.tokenizer.eos_token_id
        if eos is None:
            raise ValueError(f"{self.model.name}: the tokenizer has no end-of-text token")
        return eos

    @property
    def prefix_token_id(self) -> int:
        bos = getattr(self.tokenizer, "bos_token_id", None)
        return bos if bos is not None else self.eot_token_id

    @property
    def tokenizer_name(self) -> str:
        return self.model.name

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        """As the harness's HF backend encodes: the tokenizer's special tokens, unless the text
        already opens with BOS (a rendered chat prompt)."""
        if add_special_tokens is None:
            bos = getattr(self.tokenizer, "bos_token", None)
            add_special_tokens = not (bos and string.startswith(bos))
        return list(self.tokenizer.encode(string, add_special_tokens=add_special_tokens))

    def tok_decode(self, tokens: Sequence[int], **kwargs: Any) -> str:
        return self.tokenizer.decode(list(tokens))

    def chat_template(self, chat_template: bool | str = False) -> str:
        return f"kitchen renderer {type(self.model.renderer).__name__}"

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        messages = [Message(role=m["role"], content=m["content"]) for m in chat_history]
        if add_generation_prompt:
            tokens = self.model.renderer.build_generation_prompt(messages).to_ints()
        else:  # the last (assistant) message is a prefix the model continues
            tokens = self.model.renderer.build_supervised_example(messages, TrainOnWhat.ALL_TOKENS)[0].to_ints()
        return self.tok_decode(tokens)

    # -- scoring ---------------------------------------------------------------------------------

    async def _score(self, context: list[int], continuation: list[int]) -> tuple[float, bool]:
        tokens = (context + continuation)[-(self.max_length + 1) :]
        logprobs = await self.model.sampler.compute_logprobs(ModelInput.from_ints(tokens))
        target = [float(lp) for lp in logprobs[-len(continuation) :] if lp is not None]
        total = sum(target)
        vocab = len(getattr(self.tokenizer, "get_vocab", dict)()) or 1
        if all(lp > SURELY_ARGMAX for lp in target):
            return total, True
        if any(lp < -math.log(vocab) for lp in target):
            return total, False
        params = SamplingParams(max_tokens=len(continuation), temperature=0.0, seed=0)
        greedy = await self.model.sampler.sample(ModelInput.from_ints(tokens[: -len(continuation)]), 1, params)
        return total, list(greedy.sequences[0].tokens) == continuation

    def _loglikelihood_tokens(self, requests: list[Any], disable_tqdm: bool = False, **kwargs: Any) -> list[Any]:
        async def score_all() -> list[tuple[float, bool]]:
            return list(await asyncio.gather(*(self._score(list(ctx), list(cont)) for _, ctx, cont in requests)))

        results = self._run(score_all())
        for (cache_key, _, _), result in zip(requests, results, strict=True):
            if cache_key is not None:
                self.cache_hook.add_partial("loglikelihood", cache_key, result)
        return results

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        out = []
        for request in requests:
            (text,) = request.args
            windows = [
                (None, list(context), list(continuation))
                for context, continuation in map(
                    make_disjoint_window,
                    get_rolling_token_windows(
                        token_list=self.tok_encode(text),
                        prefix_token=self.prefix_token_id,
                        max_seq_len=self.max_length,
                        context_len=1,
                    ),
                )
            ]
            total = sum(logprob for logprob, _ in self._loglikelihood_tokens(windows))
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), total)
            out.append(total)
        return out

    # -- generation ------------------------------------------------------------------------------

    async def _generate(self, index: int, context: str, kwargs: dict[str, Any]) -> str:
        until = kwargs.get("until") or []
        stops = [*([until] if isinstance(until, str) else until), self.tok_decode([self.eot_token_id])]
        temperature = float(kwargs.get("temperature", 0.0)) if kwargs.get("do_sample", False) else 0.0
        params = SamplingParams(
            max_tokens=int(kwargs.get("max_gen_toks", 256)),
            temperature=temperature,
            seed=item_seed(self.seed, index),
            stop=stops,
        )
        prompt = self.tok_encode(context)[-self.max_length :]
        result = await self.model.sampler.sample(ModelInput.from_ints(prompt), 1, params)
        text = self.tok_decode(result.sequences[0].tokens)
        for stop in stops:
            if stop:
                text = text.split(stop)[0]
        return text

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        start, self._generated = self._generated, self._generated + len(requests)

        async def generate_all() -> list[str]:
            return list(
                await asyncio.gather(*(self._generate(start + i, *request.args) for i, request in enumerate(requests)))
            )

        texts = self._run(generate_all())
        for request, text in zip(requests, texts, strict=True):
            self.cache_hook.add_partial("generate_until", request.args, text)
        return texts
