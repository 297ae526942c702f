"""Qwen3-VL chat format: Qwen3's (see `train_core.renderers.qwen3`) with images in user messages.

An image part renders, as in the Qwen3-VL chat template, inline between the text parts as

    <|vision_start|>{image}<|vision_end|>

where the template writes one `<|image_pad|>` that the processor expands to the image's token
count; here `{image}` is an image chunk of that many positions (`train_core.renderers.images`),
which the backend fills with the vision encoder's outputs. Image positions are never trained.
The count follows the model's image processor settings (`VisionSpec`, by default Qwen3-VL's).

As in the template (and tinker-cookbook's `Qwen3VLRenderer`), only user messages may hold
images; a system, assistant or tool message with an image part is an error here rather than
silently dropped.

The two variants follow the Qwen3-VL templates (checked against them byte for byte in
`tests/train_core/renderers/test_renderers_official_templates.py`). `qwen3_vl` (Qwen3-VL Thinking)
is Qwen3's thinking format (think blocks on assistant messages after the last user query) whose
generation prompt, unlike Qwen3's and tinker-cookbook's `qwen3_vl`, opens the think block:
`<|im_start|>assistant\n<think>\n`; that opening is in the header of each assistant message that
starts with it, untrained, since sampling is always given it. `qwen3_vl_instruct` (Qwen3-VL
Instruct) writes no think blocks; its template silently drops a system message that is not the
first, which is an error here instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from train_core.renderers.errors import RendererError
from train_core.renderers.images import QWEN3_VL_VISION, VisionSpec, image_chunk, image_of_part
from train_core.renderers.messages import IMAGE_PART_TYPES, Message, MessageFormatError, content_parts
from train_core.renderers.qwen3 import Qwen3Renderer, ThinkingMode
from train_core.renderers.span_renderer import Span, SpanPart
from train_core.renderers.tokenizer import Special, Tokenizer

VISION_START = Special("<|vision_start|>")
VISION_END = Special("<|vision_end|>")
IMAGE_PAD = Special("<|image_pad|>")
"""The placeholder token an image's positions hold in the model's input ids."""


class Qwen3VLRenderer(Qwen3Renderer):
    takes_images = True
    prompt_opens_think_block = True

    def __init__(
        self, tokenizer: Tokenizer, mode: ThinkingMode = "thinking", vision: VisionSpec = QWEN3_VL_VISION
    ) -> None:
        super().__init__(tokenizer, mode=mode)
        self.vision = vision
        self.name = "qwen3_vl_instruct" if mode == "instruct" else "qwen3_vl"

    def image_token_id(self) -> int:
        return self.codec.special_id(IMAGE_PAD.text)

    def content_parts(self, index: int, message: Message) -> list[SpanPart]:
        parts: list[SpanPart] = []
        for part in content_parts(message):
            if part.get("type") in IMAGE_PART_TYPES:
                if message["role"] != "user":
                    raise MessageFormatError(
                        f"{self.name}: message {index} (role {message['role']!r}) holds an image; "
                        "the Qwen3-VL template takes images in user messages only"
                    )
                parts += [VISION_START, image_chunk(image_of_part(part), self.vision), VISION_END]
            else:
                parts.append(part["text"])
        return parts

    def render_spans(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> list[Span]:
        for index, message in enumerate(messages):
            if self.mode == "instruct" and message["role"] == "system" and index > 0:
                raise RendererError(
                    f"{self.name} renders a system message only first (the Qwen3-VL Instruct template drops "
                    f"a later one); message {index} is one"
                )
            if message["role"] != "user" and not isinstance(message["content"], str):
                # assistant and tool content is text: parts become one string, images are refused
                text = "".join(str(p) for p in self.content_parts(index, message))
                messages = [*messages[:index], {**message, "content": text}, *messages[index + 1 :]]
        return super().render_spans(messages, add_generation_prompt=add_generation_prompt)
